"""What a Kubeflow job and a TrainJob cost: the ``usage`` of the ``job`` record, checked against the pods the
controllers made (their requests, start and end times), through real DAG runs over the API emulator."""

from __future__ import annotations

import pytest

from tests.dags.kubeflow_dags import namespace_of as kubeflow_namespace
from tests.dags.trainjob_dags import namespace_of as trainjob_namespace
from tests.helpers import run_dag_at, wait_until, xcom
from tests.integration.kubeflow_controller import KubeflowController, register_kubeflow_crds
from tests.integration.test_job_usage import check_against_pods, end_pod_later
from tests.integration.trainjob_controller import TrainerController, register_trainjob_crd
from tests.kubernetes_helpers import DOCUMENT, crd_emulator

emulator = crd_emulator(lambda emu: (register_kubeflow_crds(emu), register_trainjob_crd(emu)))

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


class EndsLater:
    """A controller whose pods end an hour and some minutes after they started, each a minute after the last."""

    ended: dict[str, dict]

    def succeed(self, key, document: dict | None = None) -> None:
        ended = self.__dict__.setdefault("ended", {})
        name = self.pods[key]  # type: ignore[attr-defined]
        ended[name] = end_pod_later(self.emu, self.namespace, name, 3600 + 60 * (len(ended) + 1),  # type: ignore
                                    document)


class TimedKubeflow(EndsLater, KubeflowController):
    pass


class TimedTrainer(EndsLater, TrainerController):
    pass


def test_a_deferred_pytorchjob_costs_its_pods_requests_from_their_start_to_their_end(emulator):
    namespace = kubeflow_namespace("kubeflow_deferrable")
    emulator.create_namespace(namespace)

    def script(controller: TimedKubeflow) -> None:
        controller.wait_for_job()
        kind = controller.kind
        controller.create_pods()
        controller.run_all()
        controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""))
        wait_until(controller.watched, timeout=60, interval=0.02)
        controller.succeed("master-0", DOCUMENT)
        controller.succeed("worker-0")
        controller.succeed("worker-1")
        controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""),
                              ("Succeeded", f"{kind}Succeeded", f"{kind} {controller.name} succeeded."))

    controller = TimedKubeflow(emulator, namespace, "pytorchjobs").play(script)
    run, states = run_dag_at("kubeflow_deferrable")
    controller.check()

    assert set(states.values()) == {"success"}
    check_against_pods(xcom(run, "train", "job")["usage"], controller.ended)


def test_a_trainjob_costs_its_node_pods_requests_from_their_start_to_their_end(emulator):
    namespace = trainjob_namespace("trainjob_success")
    emulator.create_namespace(namespace)

    def script(controller: TimedTrainer) -> None:
        controller.start()
        controller.succeed(0, DOCUMENT)
        controller.succeed(1)
        controller.succeed(2)
        controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    controller = TimedTrainer(emulator, namespace).play(script)
    run, states = run_dag_at("trainjob_success")
    controller.check()

    assert states["train"] == "success"
    usage = xcom(run, "train", "job")["usage"]
    check_against_pods(usage, controller.ended)
    assert {row["cpu"] for row in usage["replicas"].values()} >= {1.0}  # resourcesPerNode: 1 core each
