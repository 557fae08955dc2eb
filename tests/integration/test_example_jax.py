"""The JAX example DAG, end to end: three real JAX processes joined by jax.distributed, a psum over gloo."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import assert_master_and_two_workers_exchanged, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_jax_example_sums_across_processes_and_reports_through_xcom(capfd):
    pytest.importorskip("jax", reason="jax is part of the test extra")
    run, states = run_dag("example_jax_data_parallel", conf={"steps": 20})

    assert states == {"train": "success", "report": "success"}
    # JAX's own view of each replica after initialize: process index (master 0, worker i -> i + 1) and count.
    metrics = assert_master_and_two_workers_exchanged(run, "jax", lambda process: [
        f"process {process}/3: 1 local of 3 devices", f"process {process}: psum of process ids + 1 is 6.0"],
        capfd.readouterr().out)
    # 1 + 2 + 3: each process added its process id + 1, so every process took part in the collective.
    assert (metrics["psum"], metrics["psum_expected"]) == (6.0, 6.0)
    assert metrics["parameters_identical"] is True
    assert metrics["final_loss"] < metrics["initial_loss"]
    model_path = xcom(run, "train", "model_path")
    saved = np.load(model_path)
    assert float(saved["w"].sum() + saved["b"].sum()) == pytest.approx(metrics["parameter_checksum"])
    assert xcom(run, "report")["model_path"] == model_path
