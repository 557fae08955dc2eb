"""Helpers shared by tests: run a DAG through Airflow, read its XComs, find replica processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

from airflow_distributed.jobstate.last_lines import read_block

if TYPE_CHECKING:
    import pendulum


def replica_processes(job_prefix: str = "") -> list[psutil.Process]:
    """Live processes that carry a replica's contract variables (any job, or jobs whose name starts so), of this
    test session: replicas inherit the worker's AIRFLOW_HOME, and another session's jobs on the machine are not ours."""
    home = os.environ.get("AIRFLOW_HOME")
    found = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            job = env.get("AIRFLOW_DISTRIBUTED_JOB")
            if job is None or not job.startswith(job_prefix) or (home and env.get("AIRFLOW_HOME") != home):
                continue
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def stop_group(process: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM to a server's process group (one started with ``start_new_session``), SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def output_so_far() -> str:
    """What the test has written to its standard output so far, as ``capfd`` captured it, read without taking it.

    For a thread that watches a running task's output: ``capfd.readouterr()`` takes the capture and then empties
    it, so a line the task writes between the two is lost; reading file descriptor 1 (the capture's file while
    ``capfd`` is active) at an offset moves nothing, and ``readouterr()`` at the end still returns everything."""
    return os.pread(1, os.fstat(1).st_size, 0).decode("utf-8", "replace")


def run_dag(dag_id: str, conf: dict | None = None):
    """Run a DAG of the DAGs folder once with ``dag.test()``; return (dag run, {task_id: state})."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag()
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    run = dag.test(run_conf=conf)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    return run, states


def xcom(run, task_id: str, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.execute(
            XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key=key)
        ).first()
        return None if row is None else XComModel.deserialize_value(row[0])


def replica_lines(out: str, job: str) -> dict[str, list[str]]:
    """Each replica's last lines as the task log's closing block of ``job`` holds them (``jobstate.last_lines``),
    from a ``dag.test()`` run's output, where the task log is printed: Airflow's console renderer adds the logger's
    name and the source location after an event's last line."""
    start = out.rfind(f"last lines of each replica of {job} (")
    assert start >= 0, f"no closing block of {job} in the task log"
    heading, *rest = out[start:].split("\n")
    block = [heading]
    for line in rest:
        if not line.startswith("  "):
            break
        block.append(line)
    block[-1] = re.sub(r" \[[\w.]+\] loc=\S+$", "", block[-1])
    found = read_block(job, "\n".join(block))
    assert found is not None
    return found


def assert_master_and_two_workers_exchanged(run, framework: str, lines: Callable[[int], list[str]],
                                            out: str) -> dict:
    """The checks every example of a master and two workers shares; returns the master's metrics.

    The job succeeded with replicas master-0, worker-0, worker-1 exiting 0 and none left running; each replica's
    last lines hold every line ``lines(rank)`` gives (rank: master 0, worker i -> i + 1), as printed by the script
    from what its framework reported after joining the others; ``out`` is the run's output (the task log).
    """
    result = xcom(run, "train")
    assert result["framework"] == framework and result["state"] == "succeeded"
    replicas = [(r["role"], r["index"], r["exit_code"]) for r in result["replicas"]]
    assert replicas == [("master", 0, 0), ("worker", 0, 0), ("worker", 1, 0)]
    logs = replica_lines(out, result["job_name"])
    assert "logs" not in xcom(run, "train", "job")  # the task log's, never an XCom's
    for rank, replica in enumerate(result["replicas"]):
        for expected in lines(rank):
            assert any(expected in line for line in logs[replica["name"]]), (expected, logs[replica["name"]])
    assert replica_processes(result["job_name"]) == []
    metrics = xcom(run, "train", "metrics")
    assert metrics == result["metrics"] and metrics["world_size"] == 3
    return metrics


def run_dag_at(dag_id: str, when: pendulum.DateTime | None = None):
    """``dag.test()`` of a DAG of the DAGs folder; with ``when``, the same run id (hence job name) each time."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag()
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    # A manual run's id comes from run_after: both are fixed for the same task instance again.
    run = dag.test(logical_date=when, run_after=when) if when is not None else dag.test()
    return run, {ti.task_id: ti.state for ti in run.get_task_instances()}
