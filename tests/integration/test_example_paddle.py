"""The PaddlePaddle example DAGs, end to end: collective mode (gradients all-reduced over gloo) and parameter-server
mode (gradients pushed to pservers)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import assert_master_and_two_workers_exchanged, replica_lines, replica_processes, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")
PADDLE_PYTHON = ROOT / ".venvs" / "paddle" / "bin" / "python"


@pytest.mark.skipif(not PADDLE_PYTHON.exists(), reason="no PaddlePaddle environment: run `make paddle`")
def test_paddle_example_all_reduces_across_trainers_and_reports_through_xcom(capfd):
    run, states = run_dag("example_paddle_collective", conf={"steps": 20})

    assert states == {"train": "success", "report": "success"}
    # Paddle's own view of each trainer after init_parallel_env: rank (master 0, worker i -> i + 1), world size.
    metrics = assert_master_and_two_workers_exchanged(run, "paddle", lambda rank: [
        f"trainer {rank}/3: endpoint 127.0.0.1:", f"trainer {rank}: all-reduce sum of trainer ids + 1 is 6.0"],
        capfd.readouterr().out)
    assert (metrics["allreduce_sum"], metrics["allreduce_expected"]) == (6.0, 6.0)
    assert metrics["parameters_identical"] is True
    assert metrics["final_loss"] < metrics["initial_loss"]
    model_path = xcom(run, "train", "model_path")
    assert model_path.endswith("model.pdparams") and os.path.getsize(model_path) > 0


PADDLE_PS_PYTHON = Path(os.environ.get("AIRFLOW_DISTRIBUTED_PADDLE_PS_PYTHON",
                                       ROOT / ".venvs" / "paddle-ps" / "bin" / "python"))


@pytest.mark.skipif(not PADDLE_PS_PYTHON.exists(), reason="no Paddle 2.6 environment: run `make paddle-ps`")
def test_paddle_ps_example_exchanges_gradients_through_the_pservers_and_stops_them(capfd):
    run, states = run_dag("example_paddle_ps", conf={"steps": 40})

    assert states == {"train": "success", "report": "success"}
    result = xcom(run, "train")
    assert (result["framework"], result["state"]) == ("paddle", "succeeded")
    replicas = {(r["role"], r["index"]): r for r in result["replicas"]}
    assert sorted(replicas) == [("master", 0), ("pserver", 0), ("pserver", 1), ("worker", 0)]
    assert (replicas[("master", 0)]["exit_code"], replicas[("worker", 0)]["exit_code"]) == (0, 0)
    # Paddle's own view of each replica after fleet.init: pserver i serves on its own endpoint, trainer 0 is the
    # master and worker 0 trainer 1. Pservers serve until trainer 0's stop_worker stops them or, if that has not
    # ended them yet when the master ends, the backend does: either way none is left running.
    assert {replicas[("pserver", i)]["state"] for i in range(2)} <= {"stopped", "succeeded"}
    logs = replica_lines(capfd.readouterr().out, result["job_name"])
    for index in range(2):
        name = replicas[("pserver", index)]["name"]
        assert any(f"pserver {index}/2: serving on 127.0.0.1:" in line for line in logs[name]), logs[name]
    assert replica_processes(result["job_name"]) == []
    # Both trainers ended with the parameters the pservers made of both trainers' gradients.
    checksums = {rank: next(line.split("parameter checksum ")[1] for line in logs[replicas[role]["name"]]
                            if f"trainer {rank}: parameter checksum" in line)
                 for rank, role in enumerate([("master", 0), ("worker", 0)])}
    assert checksums[0] == checksums[1]
    metrics = xcom(run, "train", "metrics")
    assert metrics["parameters_identical"] is True
    assert (metrics["world_size"], metrics["pservers"], metrics["steps"]) == (2, 2, 40)
    assert metrics["parameter_checksum"] == json.loads(checksums[0])[0]
    assert metrics["final_loss"] < metrics["initial_loss"] / 2
    model_path = xcom(run, "train", "model_path")
    assert model_path.endswith("model.pdparams") and os.path.getsize(model_path) > 0
