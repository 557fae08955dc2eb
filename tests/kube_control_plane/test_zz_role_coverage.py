"""Every rule the Roles of docs/rbac.yaml grant is used by some test on the real server, or is listed here with why
no test here can use it: read from the session's audit log, once every other module of this directory has run (the
name sorts last). Run alone or with a part of the directory, it is skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_kubernetes_rbac import allowed, role
from tests.kube_control_plane.control_plane import TASK_ACCOUNT, ControlPlane

ROLES = ("airflow-distributed", "airflow-distributed-kubeflow", "airflow-distributed-trainjob")
#: (apiGroup, resource, verb) granted for what this control plane cannot show, and why.
UNUSED_HERE = {
    ("", "pods/exec", "create"): "API servers from 1.30 authorize the websocket exec as create; this one is 1.20",
    ("scheduling.volcano.sh", "podgroups", "create"): "gang scheduling: no Volcano here",
    ("scheduling.x-k8s.io", "podgroups", "create"): "gang scheduling: no scheduler-plugins here",
    ("scheduling.x-k8s.io", "podgroups", "get"): "the tests here read Volcano's PodGroup (its CRD served); "
                                                 "scheduler-plugins' is the same read (test_kubernetes_rbac.py)",
}
#: What the tests on the emulator show for the Kubeflow kinds: a TFJob's, MXJob's... get and delete are the same
#: requests as a PyTorchJob's, so one kind's use of a verb stands for every kind's.
KUBEFLOW_KINDS = {"tfjobs", "pytorchjobs", "mxjobs", "mpijobs", "xgboostjobs", "paddlejobs"}


def used(control_plane: ControlPlane) -> set[tuple[str, str, str]]:
    """``(apiGroup, resource, verb)`` of every request of a task's identity the server allowed."""
    found = set()
    for event in control_plane.audit_events():
        user = (event.get("user") or {}).get("username", "")
        code = (event.get("responseStatus") or {}).get("code")
        ref = event.get("objectRef") or {}
        if not user.endswith(f":{TASK_ACCOUNT}") or code in (None, 401, 403) or "resource" not in ref:
            continue
        resource = f"{ref['resource']}/{ref['subresource']}" if ref.get("subresource") else ref["resource"]
        found.add((ref.get("apiGroup", ""), resource, event["verb"]))
    return found


def test_every_rule_the_roles_grant_is_used_by_a_test_or_says_why_not(request, control_plane: ControlPlane):
    here = Path(__file__).parent
    modules = {p.name for p in here.glob("test_*.py")} - {Path(__file__).name}
    ran = {Path(str(item.path)).name for item in request.session.items}
    if not modules <= ran:
        pytest.skip(f"needs every module of {here.name} in the run; missing: {', '.join(sorted(modules - ran))}")
    granted = set().union(*(allowed(role(name)["rules"]) for name in ROLES))
    seen = used(control_plane)
    seen |= {("kubeflow.org", plural, verb) for group, kind, verb in seen if kind in KUBEFLOW_KINDS
             for plural in KUBEFLOW_KINDS}
    unused = granted - seen - set(UNUSED_HERE)
    report = "\n".join(f"{'used' if rule in seen else 'NOT USED: ' + UNUSED_HERE.get(rule, '?'):>8} {rule}"
                       for rule in sorted(granted))
    print(report)
    assert unused == set(), f"granted but used by no test:\n{report}"
    assert not set(UNUSED_HERE) & seen, "a rule listed as unused here is used: drop it from UNUSED_HERE"
    assert seen <= granted  # nothing is used that no rule grants (the 403 checks of each test say the same)
