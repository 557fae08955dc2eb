"""``backend="trainjob"`` through a real Airflow against the real control plane: the TrainJob CRD served with the
project's schema of it (``tests/data/trainjob``, made structural), the stand-in Trainer controller of
``tests/integration`` over the real API, the task bound to exactly the ``airflow-distributed`` and
``airflow-distributed-trainjob`` Roles of docs/rbac.yaml. Sync and deferrable: the same DAGs as the emulator's."""

from __future__ import annotations

import pytest

from tests.helpers import run_dag_at, xcom
from tests.integration.trainjob_controller import GROUP, PLURAL, VERSION
from tests.kube_control_plane.control_plane import NOTHING, ControlPlane
from tests.kube_control_plane.custom_jobs import RealTrainerController
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, comes_to

pytestmark = [pytest.mark.usefixtures("airflow_db")]


def train_and_complete(controller: RealTrainerController) -> None:
    controller.start()
    controller.write_status(active=1, progress={"progressPercentage": 45, "estimatedRemainingSeconds": 3600,
                                                "metrics": [{"name": "loss", "value": "0.25"}]})
    controller.log(0, "step 1 loss 0.5")
    controller.succeed(0, DOCUMENT)
    controller.succeed(1)
    controller.succeed(2)
    controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")


def trainjobs_left(control_plane: ControlPlane, namespace: str) -> list[str]:
    found = control_plane.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")["items"]
    return [o["metadata"]["name"] for o in found]


@pytest.mark.parametrize("dag_namespace", ["trainjob_success", "trainjob_deferrable"], indirect=True)
def test_a_trainjob_that_completes_hands_node_0s_output_to_xcom_and_is_deleted_with_its_pods(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    dag_id = namespace.replace("-", "_")
    controller = RealTrainerController(control_plane, node, namespace).play(train_and_complete)
    run, states = run_dag_at(dag_id)
    controller.check()

    assert states == {"train": "success", "report_metrics": "success"}
    result = xcom(run, "train")
    assert (result["backend"], result["state"]) == ("trainjob", "succeeded")
    assert result["metrics"] == DOCUMENT["metrics"] and result["model_path"] == DOCUMENT["model_path"]
    job = result["job_name"]
    assert [(r["role"], r["index"], r["state"]) for r in result["replicas"]] == [
        ("master", 0, "succeeded"), ("worker", 0, "succeeded"), ("worker", 1, "succeeded")]
    # What the real server stored is what was sent: nothing pruned as unknown to the CRD's schema.
    submitted = controller.job
    assert submitted is not None and submitted["metadata"]["labels"]["airflow-distributed/job"] == job
    assert submitted["spec"]["trainer"]["numNodes"] == 3
    assert submitted["spec"]["runtimeRef"] == {"apiGroup": GROUP, "kind": "ClusterTrainingRuntime",
                                               "name": "torch-distributed"}
    out = capfd.readouterr().out
    if dag_id == "trainjob_success":
        assert "45% done, about 1h00m left; loss=0.25" in out  # status.trainerStatus through the real watch
    else:
        assert "waiting in the triggerer" in out
    # Deleted after success; the real garbage collector deletes its pods (ownerReferences).
    comes_to(lambda: (trainjobs_left(control_plane, namespace), control_plane.left(namespace)), ([], NOTHING),
             timeout=60)
    assert control_plane.refused(user) == []
