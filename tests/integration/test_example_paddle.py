"""The PaddlePaddle example DAG, end to end: three trainers of collective mode, gradients all-reduced over gloo."""

from __future__ import annotations

import os

import pytest

from tests.conftest import ROOT
from tests.helpers import assert_master_and_two_workers_exchanged, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")
PADDLE_PYTHON = ROOT / ".venvs" / "paddle" / "bin" / "python"


@pytest.mark.skipif(not PADDLE_PYTHON.exists(), reason="no PaddlePaddle environment: run `make paddle`")
def test_paddle_example_all_reduces_across_trainers_and_reports_through_xcom():
    run, states = run_dag("example_paddle_collective", conf={"steps": 20})

    assert states == {"train": "success", "report": "success"}
    # Paddle's own view of each trainer after init_parallel_env: rank (master 0, worker i -> i + 1), world size.
    metrics = assert_master_and_two_workers_exchanged(run, "paddle", lambda rank: [
        f"trainer {rank}/3: endpoint 127.0.0.1:", f"trainer {rank}: all-reduce sum of trainer ids + 1 is 6.0"])
    assert (metrics["allreduce_sum"], metrics["allreduce_expected"]) == (6.0, 6.0)
    assert metrics["parameters_identical"] is True
    assert metrics["final_loss"] < metrics["initial_loss"]
    model_path = xcom(run, "train", "model_path")
    assert model_path.endswith("model.pdparams") and os.path.getsize(model_path) > 0
