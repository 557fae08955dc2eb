"""The real node's capacity: a replica asking for more than the node has is never scheduled by the real scheduler
(``0/1 nodes are available: 1 Insufficient cpu``), and the task fails naming that replica and what it asked, through
a DAG run of the kubernetes backend, leaving nothing in the namespace."""

from __future__ import annotations

import pytest

from tests.dags.kube_node_capacity_dags import TOO_MANY_CPUS
from tests.helpers import run_dag_at
from tests.kube_node.node import NODE_NAME, RealNode

pytestmark = [pytest.mark.usefixtures("airflow_db")]


@pytest.mark.parametrize(("dag_namespace", "error", "limit", "asked", "insufficient"), [
    ("node_too_many_cpus", "ReplicaNotScheduledError", "was not scheduled within 8s (queue_timeout)",
     f"cpu {TOO_MANY_CPUS}", "Insufficient cpu"),
    pytest.param("node_too_much_memory", "ReplicaNotStartedError", "did not start within 10s",
                 "memory 4Ti", "Insufficient memory", marks=pytest.mark.slow),
], indirect=["dag_namespace"])
def test_a_replica_asking_more_than_the_real_node_has_fails_the_task_naming_it_and_what_it_asked(
        node: RealNode, dag_namespace, error: str, limit: str, asked: str, insufficient: str, capfd):
    namespace, user = dag_namespace
    capacity = node.control_plane.get(f"/api/v1/nodes/{NODE_NAME}")["status"]["allocatable"]
    _, states = run_dag_at(namespace.replace("-", "_"))

    out = capfd.readouterr().out
    assert states == {"train": "failed"}, out[-6000:]
    failure = next((line for line in out.splitlines() if f"{error}: job {namespace}/" in line), None)
    assert failure is not None, out[-6000:]
    # The replica, the limit that ended the wait, what the replica asked and the real scheduler's reason.
    assert "-worker-0 " in failure and limit in failure, failure
    assert asked in failure, (failure, capacity)
    assert insufficient in failure, failure
    # The bound is for nothing left, not for how fast: this was the session's first job, whose master pod, deleted
    # while the kubelet still pulled the trainer image, took 50-100 s to go before the node pulled its images at start.
    node.control_plane.assert_clean(namespace, user, timeout=150)
