"""Horovod's launcher model on the local backend: horovodrun over a hostfile of every replica, Gloo controller.

Slow: Horovod must be built for torch 2.13 first (`make test-slow` does it, about 10 minutes on 2 cores).
"""

from __future__ import annotations

import os

import pytest

from tests.helpers import replica_processes, run_dag, xcom

pytestmark = [pytest.mark.slow, pytest.mark.horovod, pytest.mark.usefixtures("airflow_db")]
pytest.importorskip("horovod.torch", reason="Horovod is not built here: run scripts/build-horovod.sh")


def test_horovod_example_all_reduces_across_every_replica():
    run, states = run_dag("example_horovod", conf={"steps": 30})
    assert states == {"train": "success", "report": "success"}
    result = xcom(run, "train")
    first = result["replicas"][0]
    assert (first["role"], first["exit_code"]) == ("launcher", 0)
    metrics = xcom(run, "train", "metrics")
    assert metrics["final_loss"] < metrics["initial_loss"]
    assert metrics.get("world_size", metrics.get("size")) == 3
    assert os.path.exists(xcom(run, "train", "model_path"))
    assert replica_processes(result["job_name"]) == []
