"""Fixtures of the tests on the real node: one control plane and one real node per session (``node``), a namespace
per DAG with the task talking as a service account bound to exactly the kubernetes backend's Role of docs/rbac.yaml,
and the node's images named to the DAGs through the environment.

Skipped, with the reason, where no real node can be had: not root, or the binaries not built (``make kube``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane import control_plane as plane_module
from tests.kube_control_plane.control_plane import TASK_ACCOUNT
from tests.kube_node import node as node_module
from tests.kube_node.images import image_variable
from tests.kube_node.node import RealNode

#: The Role of docs/rbac.yaml a DAG's task needs besides the kubernetes backend's, by a word of its namespace.
BACKEND_ROLES = {"pytorchjob": "kubeflow", "trainjob": "trainjob"}
#: What the DAGs of tests/dags/kube_node_dags.py read their images from.
IMAGE_VARIABLES = {"trainer": image_variable(), "busybox": "KUBE_NODE_SIDECAR_IMAGE"}


@pytest.fixture(scope="session")
def node() -> Iterator[RealNode]:
    reason = plane_module.missing() or node_module.missing()
    if reason is not None:
        pytest.skip(f"no real node: {reason}")
    real = RealNode()
    plane = real.control_plane_to_join()
    try:
        plane.start()
        real.start(plane)
    except RuntimeError as error:
        real.stop()
        plane.stop()
        if "another test session" in str(error):
            pytest.skip(str(error))
        raise
    # Where the session's minutes went (-s shows it): images built or reused, then the node up to Ready.
    print(f"\nreal node Ready {real.timings['ready']:.1f} s after its start, {real.timings['images']:.1f} s of it the "
          f"images (built or reused), {real.timings['pull']:.1f} s their pull into containerd", file=sys.stderr)
    try:
        with pytest.MonkeyPatch.context() as patch:
            for image, variable in IMAGE_VARIABLES.items():
                patch.setenv(variable, real.images[image])
            yield real
    finally:
        real.stop()
        plane.stop()
    assert real.leftovers() == []


@pytest.fixture(autouse=True)
def finish_grace() -> float:
    """The product's ``finish_grace`` (the root conftest's fixture, overridden): real workers end by themselves a
    moment after the master."""
    from airflow_distributed.jobstate import watch_timings

    return watch_timings.FINISH_GRACE


@pytest.fixture
def dag_namespace(request, node: RealNode) -> Iterator[tuple[str, str]]:
    """``(namespace, user)`` of the DAG ``request.param`` (its namespace is its id's), ``kubernetes_default``
    talking there as the task's service account."""
    plane = node.control_plane
    namespace = request.param.replace("_", "-")
    plane.create_namespace(namespace)
    try:
        # The kubeflow and trainjob backends' tasks also need their Role (docs/rbac.yaml), as the control plane's
        # tests bind.
        roles = [role("airflow-distributed"), *(role(f"airflow-distributed-{backend}")
                                                for kind, backend in BACKEND_ROLES.items() if kind in namespace)]
        kubeconfig = plane.bind_role(namespace, roles, TASK_ACCOUNT)
        connection = {"conn_type": "kubernetes",
                      "extra": {"kube_config_path": kubeconfig, "xcom_sidecar_container_image": node.images["busybox"]}}
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
            yield namespace, f"system:serviceaccount:{namespace}:{TASK_ACCOUNT}"
    finally:
        plane.delete_namespace(namespace)
