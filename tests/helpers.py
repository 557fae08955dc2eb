"""Helpers shared by tests: run a DAG through Airflow, read its XComs, find replica processes."""

from __future__ import annotations

import time
from typing import Any

import psutil


def replica_processes(job_prefix: str = "") -> list[psutil.Process]:
    """Live processes that carry a replica's contract variables (any job, or jobs whose name starts so)."""
    found = []
    for proc in psutil.process_iter():
        try:
            job = proc.environ().get("AIRFLOW_DISTRIBUTED_JOB")
            if job is not None and job.startswith(job_prefix) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


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
