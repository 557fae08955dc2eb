"""The backends' checks through a real Airflow (``dag.test()``): settings the local backend ignores are said once
in the task log, and a templated value a backend refuses is refused once rendered, before anything starts (no
replica process; against the Kubernetes API emulator over HTTP, no object and no write request)."""

from __future__ import annotations

import pytest

from tests.dags.check_dags import CLUSTER_ARGUMENTS, POD_SETTINGS
from tests.helpers import run_dag

pytestmark = [pytest.mark.usefixtures("airflow_db")]


def test_each_setting_the_local_backend_ignores_is_said_once_in_the_task_log(capfd):
    run, states = run_dag("check_local_ignored")

    assert states == {"train": "success"}
    out = capfd.readouterr().out
    warnings = [line for line in out.splitlines() if "is ignored by backend='local'" in line]
    for argument in CLUSTER_ARGUMENTS:
        setting = "deferrable=True" if argument == "deferrable" else argument
        assert len([line for line in warnings if f" {setting} is ignored by" in line]) == 1, (setting, warnings)
    for setting in POD_SETTINGS:
        paths = f"environment.{setting}, environment.pytorch.default_worker.{setting}"
        assert len([line for line in warnings if f" {paths} is ignored by" in line]) == 1, (setting, warnings)
    assert len(warnings) == len(CLUSTER_ARGUMENTS) + len(POD_SETTINGS)


def test_secret_refs_in_a_templated_environment_are_refused_once_rendered_before_a_replica_starts(tmp_path, capfd):
    marker = tmp_path / "replica-ran"

    run, states = run_dag("check_local_templated_secret_refs", conf={"marker": str(marker)})

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    assert "environment.secret_refs: the local backend has no Secrets or ConfigMaps" in out
    assert "db-credentials" not in out.split("environment.secret_refs:", 1)[1].splitlines()[0]
    assert not marker.exists()


def test_a_templated_namespace_that_is_not_a_dns_1123_label_is_refused_before_any_object_is_created(
        emulator, kubernetes_connection, capfd):
    def everything() -> list[tuple[str, str, str]]:
        return sorted((kind, o["metadata"].get("namespace", ""), o["metadata"]["name"])
                      for kind in ("namespaces", "services", "pods", "configmaps", "secrets", "serviceaccounts")
                      for o in emulator.list(kind))

    before = everything()
    emulator.reset_requests()

    run, states = run_dag("check_k8s_templated_namespace")

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    assert "namespace: is not a valid namespace: it must be a DNS-1123 label" in out
    writes = [(r.method, r.path) for r in emulator.requests if r.method not in ("GET", "HEAD", "OPTIONS")]
    assert writes == []
    assert everything() == before
