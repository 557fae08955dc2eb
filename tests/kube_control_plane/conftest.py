"""Fixtures of the tests on the real control plane: one control plane and one node per session, a namespace per
test, and the task's identity (a service account bound to exactly a Role of docs/rbac.yaml).

Without the binaries (``make kube`` builds them) every test here is skipped, with the reason.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from airflow_distributed.manifests.kubeflow_kinds import KINDS
from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane.control_plane import TASK_ACCOUNT, ControlPlane, missing
from tests.kube_control_plane.custom_jobs import control_plane_with_custom_jobs
from tests.kube_control_plane.kubelet import KubeletNode


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    reason = missing()
    if reason is not None:
        pytest.skip(f"no real Kubernetes control plane: {reason}")
    with control_plane_with_custom_jobs() as plane:
        yield plane


@pytest.fixture(scope="session")
def node(control_plane: ControlPlane) -> Iterator[KubeletNode]:
    # The pool the TrainJob DAGs' node_selector asks for: the real scheduler places their pods nowhere else.
    kubelet = KubeletNode(control_plane, labels={"pool": "training"})
    try:
        yield kubelet.start()
    finally:
        kubelet.stop()
    assert kubelet.errors == [], "\n".join(kubelet.errors)


@pytest.fixture
def namespace(control_plane: ControlPlane, node: KubeletNode) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        control_plane.delete_namespace(name)


@pytest.fixture
def task_kubeconfig(control_plane: ControlPlane, namespace: str) -> str:
    """A kubeconfig of the task's service account, bound to exactly the kubernetes backend's Role."""
    return control_plane.bind_role(namespace, role("airflow-distributed"), TASK_ACCOUNT)


@pytest.fixture
def task_user(namespace: str) -> str:
    """The audit log's name of the task's identity."""
    return f"system:serviceaccount:{namespace}:{TASK_ACCOUNT}"


def roles_of(dag_id: str) -> list[dict]:
    """The Roles of docs/rbac.yaml a DAG's task is bound to: the kubernetes backend's, and its backend's own."""
    own = {"kubeflow": "airflow-distributed-kubeflow", "trainjob": "airflow-distributed-trainjob"}
    backend = dag_id.split("_", 1)[0]
    if backend == "sensor" and any(f"_{kind.kind.lower()}" in dag_id for kind in KINDS.values()):
        backend = "kubeflow"  # a sensor of a Kubeflow kind reads the job object as the kubeflow backend does
    return [role("airflow-distributed"), *([role(own[backend])] if backend in own else [])]


@pytest.fixture
def dag_namespace(request, control_plane: ControlPlane, node: KubeletNode) -> Iterator[tuple[str, str]]:
    """``(namespace, user)`` of the DAG ``request.param``: its namespace (``namespace_of`` of the DAG files), and
    ``kubernetes_default`` talking there as the task's account, bound to exactly its backend's Roles."""
    namespace = request.param.replace("_", "-")
    control_plane.create_namespace(namespace)
    try:
        kubeconfig = control_plane.bind_role(namespace, roles_of(request.param), TASK_ACCOUNT)
        connection = json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}})
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", connection)
            yield namespace, f"system:serviceaccount:{namespace}:{TASK_ACCOUNT}"
    finally:
        control_plane.delete_namespace(namespace)
