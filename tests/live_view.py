"""The job view of a running cluster job, read over HTTP while the task waits: the parts the emulator's tests
(``tests/integration/test_live_*_view.py``) and the real control plane's (``tests/kube_control_plane/
test_live_view.py``) share.

A ``Master`` is a real ``tracking`` process whose stdout the test writes to the master pod's log line by line;
``view_client`` is Airflow's own API server app (the plugin mounted from its entry point) with a user of the team
that owns the DAGs; ``shown_at`` asks the view's JSON until it shows a percentage, for at most 30 s. The
``*_reports`` scripts play a job of each cluster backend on either API (the emulator's, or the real server's through
the test kubelet): it runs, its master reports 10, 50 and 90 %, each once the view showed the one before, and the
job succeeds whatever the view showed, so that the run ends and the player's ``check()`` tells.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_distributed.replica.live_report import PREFIX
from tests.api_server import api_client, as_user, task_reads
from tests.conftest import ROOT
from tests.helpers import wait_until
from tests.kubernetes_helpers import DOCUMENT

if TYPE_CHECKING:
    from tests.integration.kubeflow_controller import KubeflowController
    from tests.integration.trainjob_controller import TrainerController
    from tests.kubernetes_helpers import Kubelet

#: The longest the view may lag behind the master's report, here and on a cluster.
BEHIND = 30.0

#: ``{percent: (the view's JSON once it showed that percent, the task's state then)}``
Seen = dict[int, tuple[dict, "str | None"]]

#: A master that reports the percentages it is given on its standard input, one a line, as training would:
#: its live records paced every ``LIVE_RECORD_INTERVAL`` seconds (``tracking.RECORD_INTERVAL``, compressed), and
#: its progress calls a second apart at least, since ``log_progress`` holds back a call within a second of its last
#: write (until the second ends).
MASTER = """
import os, sys, time
from airflow_distributed import tracking
tracking.RECORD_INTERVAL = float(os.environ["LIVE_RECORD_INTERVAL"])
last = -1e9
for line in sys.stdin:
    percent = int(line)
    time.sleep(max(0.0, last + 1.05 - time.monotonic()))
    last = time.monotonic()
    tracking.log_metrics(step=percent, loss=1 - percent / 100)
    tracking.log_progress(percent, 100)
    print(f"step {percent} done", flush=True)
"""


class Master:
    """A real ``tracking`` process whose stdout goes to the master pod's log, line by line (``write``).

    :param record_interval: seconds between two live records (``tracking``'s 5, compressed for the tests).
    """

    def __init__(self, write: Callable[[str], None], output: str, record_interval: float = 0.2) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", MASTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
            env={**os.environ, "AIRFLOW_DISTRIBUTED_OUTPUT": output, "PYTHONPATH": str(ROOT),
                 "LIVE_RECORD_INTERVAL": str(record_interval)})
        self.pump = threading.Thread(target=self._relay, args=(write,), daemon=True)
        self.pump.start()

    def _relay(self, write: Callable[[str], None]) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            write(line.rstrip("\n"))

    def report(self, percent: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{percent}\n")
        self.process.stdin.flush()

    def end(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self.pump.join(timeout=30)


def latest_run_id(dag_id: str) -> str | None:
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()))


def task_state(dag_id: str, run_id: str) -> str | None:
    from airflow.utils.session import create_session

    from airflow_distributed.plugins.job_state import TaskInstanceRef, task_instance_state

    with create_session() as session:
        return task_instance_state(TaskInstanceRef(dag_id=dag_id, run_id=run_id, task_id="train"), session)


def dags_folder_bundle() -> None:
    """The DAGs folder's bundle, which the API server gives a team: there before the first run writes it."""
    from airflow.models.dagbundle import DagBundleModel
    from airflow.utils.session import create_session

    from tests.api_server import BUNDLE

    with create_session() as session:
        if session.get(DagBundleModel, BUNDLE) is None:
            session.add(DagBundleModel(name=BUNDLE))


@contextmanager
def view_client(tmp: Path) -> Iterator[Any]:
    """The API server app, the DAGs folder's bundle owned by team ``ml``, ``alice`` a viewer of that team and
    ``reader`` one who may read its XComs but not its task logs."""
    dags_folder_bundle()
    with api_client({"alice": "viewer:ml", "reader": "viewer:ml"}, "ml", ("ml",), tmp,
                    no_log_users=("reader",)) as client:
        yield client


def assert_no_line_without_log_permission(client: Any, dag_id: str, run_id: str, lines: list[str]) -> None:
    """``reader`` finds none of the master's ``lines`` in any XCom or in the view, which says it may not read
    them."""
    texts = task_reads(client, dag_id, run_id, "train", as_user(client, "reader"))
    assert [where for where, text in texts.items() if any(line in text for line in lines)] == [], lines
    assert json.loads(texts["view json"])["logs"] is None and "No permission to read logs" in texts["view html"]


def shown_at(client: Any, dag_id: str, percent: float) -> tuple[dict, str | None]:
    """The view's JSON of the latest run's ``train`` task once it shows ``percent``, asked as ``alice``, and the
    task's state then; fails, with the last record, if it does not within ``BEHIND`` seconds."""
    run_id = wait_until(lambda: latest_run_id(dag_id))
    api = f"/distributed/api/jobs/{dag_id}/{quote(run_id, safe='')}/train"
    headers = as_user(client, "alice")
    last: list[dict] = []

    def shown() -> dict | None:
        record = client.get(api, headers=headers).json()
        last[:] = [record]
        return record if (record.get("progress") or {}).get("percent") == percent else None

    try:
        record = wait_until(shown, timeout=BEHIND, interval=0.5)
    except AssertionError:
        raise AssertionError(f"the view did not show {percent}% within {BEHIND:g} s: {last}") from None
    state = task_state(dag_id, run_id)
    assert_no_line_without_log_permission(client, dag_id, run_id, [f"step {percent} done"])
    return record, state


def report_each(master: Master, client: Any, dag_id: str, percents: tuple[int, ...] = (10, 50, 90)) -> Seen:
    """``{percent: (the view's JSON showing it, the task's state then)}``, each percent reported by the master
    once the view showed the one before."""
    seen: Seen = {}
    for percent in percents:
        master.report(percent)
        seen[percent] = shown_at(client, dag_id, percent)
    return seen


def assert_reports_shown(seen: Seen, backend: str, waiting: str) -> None:
    """Each report in the view while the job ran and the task waited in state ``waiting`` (``running``: a
    synchronous wait; ``queued``: deferred, as ``dag.test()`` marks a task whose trigger it runs inline, where a
    scheduler says ``deferred``): progress, metrics, the history so far, the master's lines without the records."""
    assert sorted(seen) == [10, 50, 90]
    for percent, (record, state) in seen.items():
        assert state == waiting, (percent, state)
        assert (record["source"], record["backend"], record["state"]) == ("live", backend, "running")
        assert record["progress"]["step"] == percent and record["metrics"] == {"loss": 1 - percent / 100}
        assert record["history"][-1] == {"step": percent, "loss": 1 - percent / 100}
        (lines,) = record["logs"].values()
        assert lines[-1] == f"step {percent} done" and not any(line.startswith(PREFIX) for line in lines)
        # The try's usage so far, from the pods as the view read them: every replica, every figure a number.
        assert sorted(record["usage"]["replicas"]) == sorted(r["name"] for r in record["replicas"])
        assert record["usage"]["wall_seconds"] >= 0 and record["usage"]["tries"] == 1
    assert [point["step"] for point in seen[90][0]["history"]] == [10, 50, 90]  # the history so far


def assert_master_lines_once(out: str) -> None:
    """The task log has each of the master's lines once, and none of its live records."""
    shown = [line for line in out.splitlines() if " done" in line and "] step " in line]
    assert [out.count(f"] step {percent} done") for percent in (10, 50, 90)] == [1, 1, 1], shown
    assert PREFIX not in out


def kubernetes_reports(client: Any, dag_id: str, output: str, seen: Seen, *, watched: Callable[[], bool]
                       ) -> Callable[[Kubelet], None]:
    """The script of a ``backend="kubernetes"`` job, once ``watched()`` says the task (or its trigger) watches it."""

    def script(kubelet: Kubelet) -> None:
        wait_until(watched, timeout=60, interval=0.05)
        kubelet.run_all()
        master = Master(lambda line: kubelet.log(kubelet.master, line), output)
        try:
            seen.update(report_each(master, client, dag_id))
        finally:
            master.end()
            kubelet.master_exits(0, document=DOCUMENT)

    return script


def pytorchjob_reports(client: Any, dag_id: str, output: str, seen: Seen) -> Callable[[KubeflowController], None]:
    """The script of a PyTorchJob (master and two workers), the stand-in Training Operator making its pods."""

    def script(controller: KubeflowController) -> None:
        controller.start()
        kind = controller.kind
        assert controller.job is not None
        container = controller.job["spec"][controller.specs_key]["Master"]["template"]["spec"]["containers"][0]["name"]
        master = Master(lambda line: controller.log("master-0", line, container=container), output)
        try:
            seen.update(report_each(master, client, dag_id))
        finally:
            master.end()
            for key in ("master-0", "worker-0", "worker-1"):
                controller.succeed(key, DOCUMENT if key == "master-0" else None)
            controller.conditions(("Created", f"{kind}Created", ""), ("Running", f"{kind}Running", ""),
                                  ("Succeeded", f"{kind}Succeeded", f"{kind} {controller.name} succeeded."))

    return script


def trainjob_reports(client: Any, dag_id: str, output: str, seen: Seen) -> Callable[[TrainerController], None]:
    """The script of a TrainJob of three nodes: first its ``status.trainerStatus`` at 45 % (the ``TrainJobStatus``
    gate; ``seen[45]``), then node 0's own reports."""

    def script(controller: TrainerController) -> None:
        controller.start()
        try:
            controller.write_status(active=1, progress={"progressPercentage": 45, "estimatedRemainingSeconds": 60,
                                                        "metrics": [{"name": "loss", "value": "0.25"}]})
            seen[45] = shown_at(client, dag_id, 45)
            master = Master(lambda line: controller.log(0, line), output)
            try:
                seen.update(report_each(master, client, dag_id))
            finally:
                master.end()
        finally:
            controller.succeed(0, DOCUMENT)
            controller.succeed(1)
            controller.succeed(2)
            controller.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")

    return script


def assert_trainjob_shown(seen: Seen, waiting: str) -> None:
    """The TrainJob's ``trainerStatus`` stood in until node 0's first record, then was shown beside its reports."""
    record, state = seen.pop(45)
    assert state == waiting
    assert record["source"] == "live" and record["metrics"] == {"loss": "0.25"}
    assert record["progress"] == {"percent": 45, "eta_seconds": 60}
    assert_reports_shown(seen, "trainjob", waiting)
    for record, _ in seen.values():
        assert record["trainer_status"]["progress_percentage"] == 45
        assert len(record["replicas"]) == 3
