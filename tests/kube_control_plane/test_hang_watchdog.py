"""The hang watchdog (``progress_timeout``) of the kubernetes backend on the real control plane, sync and in the
triggerer: a master that stops printing while every replica runs fails the task as hung, with each replica's
stacks (asked for over the real API server's pods/exec, as the task's Role allows) and last lines, and nothing is
left; a master that is slow but prints within each ``progress_timeout`` is left alone and succeeds; a master that
blocks right after a burst of reports (a real process running ``tracking``, its lines in the pod's log as it prints
them) is named by its last report, and the silence is timed from it.

The DAGs' ``execution_timeout`` is the slack: a watchdog that does not fire fails the task with a timeout instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_distributed.contract import ENV_OUTPUT, ENV_RECORD_INTERVAL, ENV_STACKS_DIR, ENV_STACKS_SIGNAL
from airflow_distributed.replica.live_report import PREFIX
from tests.conftest import ROOT
from tests.hang_scripts import BURST_THEN_BLOCK, last_report_named
from tests.helpers import run_dag_at
from tests.kube_control_plane.control_plane import NOTHING, ControlPlane
from tests.kube_control_plane.custom_jobs import RealKubeflowController, RealTrainerController
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import DOCUMENT, Kubelet, comes_to

pytestmark = [pytest.mark.usefixtures("airflow_db")]


def _stacks(where: str) -> str:
    return (f"Thread 0x00007f3a2b1c0740 (most recent call first):\n"
            f'  File "/opt/jobs/train.py", line 42 in {where}\n'
            f'  File "/opt/jobs/train.py", line 60 in <module>')


@pytest.mark.parametrize("dag_namespace", ["k8s_hung", "k8s_hung_deferrable"], indirect=True)
def test_a_master_that_stops_printing_fails_as_hung_with_the_replicas_stacks_and_leaves_nothing(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace

    def script(k: Kubelet) -> None:
        k.run_all()
        for key, name in k.names().items():
            node.stacks[(namespace, name)] = _stacks("all_reduce" if key != "master-0" else "barrier")
        record = {"progress": {"step": 1, "total": 10}, "metrics": {"loss": 0.5}, "history": []}
        k.log(k.master, "step 1 loss 0.500", PREFIX + json.dumps(record))
        k.log(k.pod("worker-0"), "rank 1: step 1 done")
        # Then nothing: every replica runs and none prints (blocked in a collective).

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check()

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    assert "JobHungError" in out and "AirflowTaskTimeout" not in out
    assert "the job hung: the master reported no progress or metric and printed no line for" in out
    assert "its last step reported was 1," in out
    # Each replica's stacks, printed on the exec's signal, are among its last lines in the message.
    assert "line 42 in all_reduce" in out and "line 42 in barrier" in out and "rank 1: step 1 done" in out
    execs = [command for ns, _, container, command in node.execs if ns == namespace and container == "base"]
    assert len(execs) == 3
    # Deleted whole, as a kill: a hung job's pods hold their accelerators.
    control_plane.assert_clean(namespace, user)


# The synchronous case (the same clock, kept in the task) runs with the slow tests.
@pytest.mark.parametrize("dag_namespace", [pytest.param("k8s_slow_reporting", marks=pytest.mark.slow),
                                           "k8s_slow_reporting_deferrable"], indirect=True)
def test_a_slow_master_that_prints_within_each_progress_timeout_is_left_to_succeed(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str]):
    namespace, user = dag_namespace

    def script(k: Kubelet) -> None:
        k.run_all()
        # Quiet for 4 s between lines (progress_timeout 10 s), four times: 16 s, longer than the timeout, no stop.
        for step in range(1, 5):
            k.log(k.master, f"step {step} loss {0.5 ** step:.3f}")
            time.sleep(4)
        k.master_exits(0, document=DOCUMENT)

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check()

    assert states == {"train": "success"}
    assert not [command for ns, *_, command in node.execs if ns == namespace and "kill -USR1" in " ".join(command)]
    control_plane.assert_clean(namespace, user)


def _quiet_after_one_step(controller, names: dict, master: str, container: str, node: KubeletNode) -> None:
    """Every replica runs; each one's stacks are scripted; the master prints a step, then nothing."""
    for name in names.values():
        node.stacks[(controller.namespace, name)] = _stacks("barrier" if name == master else "all_reduce")
    record = {"progress": {"step": 1, "total": 10}, "metrics": {"loss": 0.5}, "history": []}
    node.append_log(controller.namespace, master, "\n".join(["step 1 loss 0.500", PREFIX + json.dumps(record)]),
                    container=container)


def _assert_hung(out: str, execs: list, replicas: int) -> None:
    assert "JobHungError" in out and "AirflowTaskTimeout" not in out
    assert "the job hung: the master reported no progress or metric and printed no line for" in out
    assert "its last step reported was 1," in out
    assert "line 42 in all_reduce" in out and "line 42 in barrier" in out
    assert len(execs) == replicas


@pytest.mark.parametrize("dag_namespace", ["kubeflow_hung", "kubeflow_hung_deferrable"], indirect=True)
def test_a_pytorchjobs_master_that_stops_printing_fails_as_hung_and_the_job_is_deleted(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs")

    def script(c: RealKubeflowController) -> None:
        c.start()
        _quiet_after_one_step(c, c.pods, c.pods["master-0"], "pytorch", node)

    controller.play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "failed"}
    _assert_hung(capfd.readouterr().out, [command for ns, _, container, command in node.execs
                                         if ns == namespace and container == "pytorch"], 2)
    # The custom object deleted (a hung job's pods hold their accelerators); the garbage collector takes its pods.
    comes_to(lambda: (controller.jobs(), control_plane.left(namespace)), ([], NOTHING), timeout=60)
    assert control_plane.refused(user) == []


@pytest.mark.parametrize("dag_namespace", ["trainjob_hung", "trainjob_hung_deferrable"], indirect=True)
def test_a_trainjobs_node_0_that_stops_printing_fails_as_hung_and_the_trainjob_is_deleted(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], capfd):
    namespace, user = dag_namespace
    controller = RealTrainerController(control_plane, node, namespace)

    def script(c: RealTrainerController) -> None:
        c.start()
        _quiet_after_one_step(c, c.pods, c.pods[0], "node", node)

    controller.play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "failed"}
    _assert_hung(capfd.readouterr().out, [command for ns, _, container, command in node.execs
                                         if ns == namespace and container == "node"], 3)
    comes_to(lambda: (controller.jobs(), control_plane.left(namespace)), ([], NOTHING), timeout=60)
    assert control_plane.refused(user) == []


# ---------------------------------------------------------------------- a burst of reports, then the master blocks


class BurstingMasters:
    """Real master processes: ``BURST_THEN_BLOCK`` with the variables of the pod's main container, each line it
    prints appended to that container's log as it comes (the test kubelet stamps it then). Its output document goes
    to the test's folder (the test kubelet mounts no volume); the stack dump is the test kubelet's to play. Each
    process is killed by its pid at the end of the test."""

    def __init__(self, node: KubeletNode, folder: Path) -> None:
        self.node, self.folder = node, folder
        self.processes: list[subprocess.Popen] = []
        #: the live record interval each master was given in its pod (``progress_timeout / 4``)
        self.record_intervals: list[str | None] = []

    def start(self, namespace: str, pod_name: str, container: str) -> None:
        pod = self.node.bound(namespace, pod_name)
        (spec,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
        variables = {item["name"]: item["value"] for item in spec.get("env") or [] if "value" in item
                     and item["name"] not in (ENV_STACKS_DIR, ENV_STACKS_SIGNAL)}
        self.record_intervals.append(variables.get(ENV_RECORD_INTERVAL))
        process = subprocess.Popen(
            [sys.executable, "-c", BURST_THEN_BLOCK], cwd=ROOT, stdout=subprocess.PIPE, text=True,
            env={**os.environ, **variables, ENV_OUTPUT: str(self.folder / f"{pod_name}.json"),
                 "PYTHONPATH": str(ROOT)})
        self.processes.append(process)

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.node.append_log(namespace, pod_name, line.rstrip("\n"), container=container)

        threading.Thread(target=pump, name=f"master-{pod_name}", daemon=True).start()

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


@pytest.fixture
def masters(node: KubeletNode, tmp_path: Path) -> Iterator[BurstingMasters]:
    started = BurstingMasters(node, tmp_path)
    try:
        yield started
    finally:
        started.stop()


def _named_by_the_last_report(out: str, masters: BurstingMasters) -> None:
    assert "JobHungError" in out and "AirflowTaskTimeout" not in out
    last_report_named(out[out.rindex("the job hung: "):], 6)
    assert masters.record_intervals == ["1.5"]  # a quarter of progress_timeout: the held-back record is out in time


@pytest.mark.parametrize("dag_namespace", ["k8s_hung", "k8s_hung_deferrable"], indirect=True)
def test_a_master_that_blocks_right_after_a_burst_of_reports_is_named_by_its_last_report(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], masters: BurstingMasters,
        capfd):
    namespace, user = dag_namespace

    def script(k: Kubelet) -> None:
        k.run_all()
        for name in k.names().values():
            node.stacks[(namespace, name)] = _stacks("all_reduce")
        masters.start(namespace, k.master, "base")

    kubelet = Kubelet(node, namespace).play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    kubelet.check()

    assert states == {"train": "failed"}
    _named_by_the_last_report(capfd.readouterr().out, masters)
    control_plane.assert_clean(namespace, user)


# The synchronous cases of the Kubeflow kinds (the clock kept in the task, as on kubernetes) run with the slow tests.
@pytest.mark.parametrize("dag_namespace", [pytest.param("kubeflow_hung", marks=pytest.mark.slow),
                                           "kubeflow_hung_deferrable"], indirect=True)
def test_a_pytorchjobs_master_that_blocks_right_after_a_burst_of_reports_is_named_by_its_last_report(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], masters: BurstingMasters,
        capfd):
    namespace, user = dag_namespace
    controller = RealKubeflowController(control_plane, node, namespace, "pytorchjobs")

    def script(c: RealKubeflowController) -> None:
        c.start()
        for name in c.pods.values():
            node.stacks[(namespace, name)] = _stacks("all_reduce")
        masters.start(namespace, c.pods["master-0"], "pytorch")

    controller.play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "failed"}
    _named_by_the_last_report(capfd.readouterr().out, masters)
    comes_to(lambda: (controller.jobs(), control_plane.left(namespace)), ([], NOTHING), timeout=60)


@pytest.mark.parametrize("dag_namespace", [pytest.param("trainjob_hung", marks=pytest.mark.slow),
                                           "trainjob_hung_deferrable"], indirect=True)
def test_a_trainjobs_node_0_that_blocks_right_after_a_burst_of_reports_is_named_by_its_last_report(
        control_plane: ControlPlane, node: KubeletNode, dag_namespace: tuple[str, str], masters: BurstingMasters,
        capfd):
    namespace, user = dag_namespace
    controller = RealTrainerController(control_plane, node, namespace)

    def script(c: RealTrainerController) -> None:
        c.start()
        for name in c.pods.values():
            node.stacks[(namespace, name)] = _stacks("all_reduce")
        masters.start(namespace, c.pods[0], "node")

    controller.play(script)
    run, states = run_dag_at(namespace.replace("-", "_"))
    controller.check()

    assert states == {"train": "failed"}
    _named_by_the_last_report(capfd.readouterr().out, masters)
    comes_to(lambda: (controller.jobs(), control_plane.left(namespace)), ([], NOTHING), timeout=60)
