"""Elastic PyTorch on the local backend: a worker killed mid-training is restarted by its agent and training goes on
from the last checkpoint; without restarts left the same kill fails the task naming the replica."""

from __future__ import annotations

import glob
import os
import re
import signal
import threading

import psutil
import pytest

from tests.dags.elastic_dags import EVERY, STEPS
from tests.helpers import replica_processes, run_dag, wait_until, xcom

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]

KILL_AFTER_STEP = 100


def _replica_process(role: str, index: int, *, agent: bool) -> psutil.Process | None:
    """One replica's elastic agent (the replica process itself), or the training process the agent started."""
    for proc in replica_processes():
        try:
            env, cmdline = proc.environ(), proc.cmdline()
        except psutil.Error:
            continue
        mine = (env.get("AIRFLOW_DISTRIBUTED_ROLE"), env.get("AIRFLOW_DISTRIBUTED_INDEX")) == (role, str(index))
        if mine and ("torch.distributed.run" in cmdline) == agent and (agent or env.get("TORCHELASTIC_RUN_ID")):
            return proc
    return None


class WorkerKiller(threading.Thread):
    """SIGKILLs worker-0's training process (or, with ``agent``, the replica itself: its elastic agent) once the
    job has saved the checkpoint of ``KILL_AFTER_STEP``."""

    def __init__(self, airflow_home: str, dag_id: str, agent: bool = False) -> None:
        super().__init__(daemon=True)
        self.pattern = os.path.join(airflow_home, "distributed", "checkpoints", dag_id, "*",
                                    f"checkpoint-{KILL_AFTER_STEP:012d}.pkl")
        self.agent = agent
        self.killed: int | None = None

    def run(self) -> None:
        wait_until(lambda: glob.glob(self.pattern), timeout=240, interval=0.05)
        victim = wait_until(lambda: _replica_process("worker", 0, agent=self.agent), timeout=30)
        victim.send_signal(signal.SIGKILL)
        self.killed = victim.pid


def _run_with_kill(airflow_home, dag_id: str, agent: bool = False):
    killer = WorkerKiller(str(airflow_home), dag_id, agent)
    killer.start()
    run, states = run_dag(dag_id)
    killer.join(5)
    assert killer.killed is not None, "the job ended before the worker could be killed"
    return run, states


@pytest.fixture(scope="module")
def reference_metrics(airflow_db):
    run, states = run_dag("test_elastic_reference")
    assert states == {"train": "success"}
    return xcom(run, "train", "metrics")


def test_a_killed_worker_is_restarted_and_training_resumes_from_the_checkpoint(airflow_home, reference_metrics,
                                                                                capfd):
    run, states = _run_with_kill(airflow_home, "test_elastic_restart")
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    # The agent of worker-0 restarted its worker group; the master's new worker resumed from a checkpoint at or
    # after the one that triggered the kill (the kill lands a few steps later), never from step 0.
    assert re.search(r"\[\S+-worker-0\] .*Worker group FAILED\. 1/1 attempts left; will restart worker group", out)
    # As the replicas printed it (the job's closing block in the task log repeats their last lines, unprefixed).
    resumed = [int(step) for step in re.findall(r"\[\S+\] .*resuming from the checkpoint of step (\d+)", out)]
    assert len(resumed) == 1 and KILL_AFTER_STEP <= resumed[0] < STEPS and resumed[0] % EVERY == 0
    metrics = xcom(run, "train", "metrics")
    assert metrics["resumed_from_step"] == resumed[0] and metrics["steps"] == STEPS
    assert metrics["parameters_identical"] is True and metrics["world_size"] == 3
    assert metrics["final_loss"] == pytest.approx(reference_metrics["final_loss"], rel=1e-4)
    # The table and the record count the restart on the replica whose worker died.
    record = xcom(run, "train", "job")
    restarts = {r["name"].rsplit("-", 2)[-2] + "-" + r["name"].rsplit("-", 1)[-1]: r["restarts"]
                for r in record["replicas"]}
    assert restarts["worker-0"] == 1 and record["restarts"] == sum(restarts.values()) >= 1
    assert re.search(r"-worker-0 +worker +0 +succeeded +pid \d+ +1 +0", out)
    # The restarted master went on with the history of the one it replaced.
    history = [point["step"] for point in record["history"]]
    assert history[0] == EVERY and history[-1] == STEPS
    assert replica_processes(record["job_name"]) == []


def test_without_restarts_left_the_same_kill_fails_the_task_naming_the_replica(airflow_home, capfd):
    run, states = _run_with_kill(airflow_home, "test_elastic_no_restarts")
    out = capfd.readouterr().out

    assert states == {"train": "failed"}
    failure = next(line for line in out.splitlines() if "failed after" in line and "below min_workers" in line)
    assert re.search(r"replica \S+-worker-0 failed with exit code 1 after 0 restarts of max_restarts=0: "
                     r"2 replicas left, below min_workers=3", failure)
    job = xcom(run, "train", "job")
    assert job["state"] == "failed" and job["restarts"] == 0
    assert replica_processes(job["job_name"]) == []


def test_a_killed_replica_is_started_again_by_the_task_and_training_resumes(airflow_home, reference_metrics, capfd):
    run, states = _run_with_kill(airflow_home, "test_elastic_agent_lost", agent=True)
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    # The agent itself died: the task started the replica again (same name and port); its orphaned training
    # process was killed with it, so the others' collectives failed and the group formed again with the new agent.
    assert re.search(r"replica \S+-worker-0 was killed by signal 9: restarting it \(1 of max_restarts=1\)", out)
    resumed = [int(step) for step in re.findall(r"resuming from the checkpoint of step (\d+)", out)]
    assert resumed and KILL_AFTER_STEP <= resumed[-1] < STEPS
    metrics = xcom(run, "train", "metrics")
    assert metrics["parameters_identical"] is True and metrics["steps"] == STEPS
    assert metrics["final_loss"] == pytest.approx(reference_metrics["final_loss"], rel=1e-4)
    record = xcom(run, "train", "job")
    assert next(r for r in record["replicas"] if r["name"].endswith("-worker-0"))["restarts"] >= 1
    assert replica_processes(record["job_name"]) == []
