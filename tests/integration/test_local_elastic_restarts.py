"""The local backend as the controller of an elastic job: a replica that is lost (its agent SIGKILLed) is started
again under the same name within the budget; past it, the job carries on above ``min_workers`` or fails naming
the replica. Plain processes stand in for the agents, so each case takes well under a second."""

from __future__ import annotations

import os
import signal
import sys

import psutil

from airflow_distributed.elastic import ElasticPlan
from airflow_distributed.hooks.local import LocalProcessHook
from airflow_distributed.manifests.local import ProcessSpec

WORKER = "import signal; print('up', flush=True); signal.pause()"


def _specs(flag: str) -> list[ProcessSpec]:
    master = f"import os, time\nwhile not os.path.exists({flag!r}): time.sleep(0.02)\n"
    env = {**os.environ, "AIRFLOW_DISTRIBUTED_JOB": "elastic-test"}
    return [ProcessSpec("job-master-0", "master", 0, True, (sys.executable, "-c", master), env),
            ProcessSpec("job-worker-0", "worker", 0, False, (sys.executable, "-c", WORKER), env)]


class Killer:
    """On every poll: SIGKILL the worker whenever a new process of it is up, ``times`` times; then, once it is back
    or left out, let the master finish. Driven by the worker's own ``up`` line, not by time."""

    def __init__(self, job_ref: list, flag: str, times: int) -> None:
        self.job_ref, self.flag, self.times = job_ref, flag, times
        self.killed: list[int] = []

    def __call__(self, rows) -> None:
        worker = self.job_ref[0].replicas[1]
        fresh = worker.exit_code is None and "up" in worker.tail and worker.pid not in self.killed
        if len(self.killed) < self.times and fresh:
            self.killed.append(worker.pid)
            os.kill(worker.pid, signal.SIGKILL)
        elif len(self.killed) == self.times and (fresh or worker.dropped):
            # The worker is back, or the job carries on without it: the master may finish.
            open(self.flag, "w").close()


def _run(tmp_path, policy: ElasticPlan, kills: int):
    flag = str(tmp_path / "finish")
    hook = LocalProcessHook()
    job = hook.start(_specs(flag), cwd=str(tmp_path), elastic=policy)
    killer = Killer([job], flag, kills)
    if kills == 0:
        open(flag, "w").close()
    try:
        outcome = job.wait(poll_interval=0.02, settle=0.5, timeout=20, on_poll=killer)
    finally:
        job.stop(1.0)
    assert not [p for p in psutil.process_iter() if _is_ours(p)]
    return outcome, killer


def _is_ours(proc: psutil.Process) -> bool:
    try:
        return proc.environ().get("AIRFLOW_DISTRIBUTED_JOB") == "elastic-test" and proc.status() != "zombie"
    except psutil.Error:
        return False


def test_a_lost_replica_is_started_again_and_the_job_succeeds(tmp_path):
    outcome, killer = _run(tmp_path, ElasticPlan(2, 2, max_restarts=1, rdzv_timeout=20), kills=1)

    assert outcome.succeeded
    assert [(r.name, r.restarts) for r in outcome.replicas] == [("job-master-0", 0), ("job-worker-0", 1)]
    assert outcome.replicas[1].where not in {f"pid {pid}" for pid in killer.killed}  # a new process


def test_past_the_budget_the_job_fails_below_min_workers_naming_the_replica(tmp_path):
    outcome, killer = _run(tmp_path, ElasticPlan(2, 2, max_restarts=1, rdzv_timeout=20), kills=2)

    assert not outcome.succeeded and len(killer.killed) == 2
    assert outcome.ending == "gave_up" and outcome.replica == "job-worker-0" and outcome.exit_code == -signal.SIGKILL
    assert outcome.reason == ("replica job-worker-0 was killed by signal 9 after 1 restart of max_restarts=1: "
                              "1 replica left, below min_workers=2")


def test_past_the_budget_the_job_carries_on_above_min_workers(tmp_path):
    outcome, killer = _run(tmp_path, ElasticPlan(1, 2, max_restarts=1, rdzv_timeout=20), kills=2)

    assert outcome.succeeded and len(killer.killed) == 2
    assert [(r.state, r.restarts, r.exit_code) for r in outcome.replicas] == [("succeeded", 0, 0),
                                                                              ("failed", 1, -9)]


def test_without_an_elastic_policy_a_lost_replica_fails_the_job(tmp_path):
    flag = str(tmp_path / "finish")
    job = LocalProcessHook().start(_specs(flag), cwd=str(tmp_path))
    killer = Killer([job], flag, 1)
    try:
        outcome = job.wait(poll_interval=0.02, settle=0.5, timeout=20, on_poll=killer)
    finally:
        job.stop(1.0)
    assert outcome.ending == "exit" and outcome.replica == "job-worker-0" and outcome.reason is None
    assert outcome.replicas[1].restarts == 0 and outcome.exit_code == -signal.SIGKILL
