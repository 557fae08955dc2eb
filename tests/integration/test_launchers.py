"""PyTorch launchers (``environment.pytorch.launcher``): DeepSpeed and Accelerate, from ``.venvs/launchers``
(``scripts/framework-venv.sh launchers``), training the scripts of ``tests/data/launchers``.

The world-size check (``replica/world_size.py``) is run here under a real launcher that falls back to one process:
Accelerate's ``--cpu`` path starts a lone process whatever ``--num_processes`` says.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from airflow_distributed.contract import ENV_WORLD_SIZE
from airflow_distributed.replica.world_size import WRONG_WORLD_SIZE
from tests.conftest import ROOT
from tests.helpers import replica_processes, run_dag, xcom

LAUNCHERS_PYTHON = ROOT / ".venvs" / "launchers" / "bin" / "python"
SCRIPTS = ROOT / "tests" / "data" / "launchers"

needs_launchers = pytest.mark.skipif(not LAUNCHERS_PYTHON.exists(),
                                     reason="no DeepSpeed/Accelerate environment: run `make launchers`")


def reports(folder: Path) -> dict[int, dict]:
    """Every process's report (``common_launch.write_report``) by its rank."""
    return {record["rank"]: record for record in (json.loads(p.read_text()) for p in folder.glob("rank-*.json"))}


def launched_env(planned: int) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "PYTHONPATH": str(ROOT), ENV_WORLD_SIZE: str(planned)}


@needs_launchers
def test_world_size_check_stops_a_launcher_that_starts_one_process_at_once(tmp_path):
    python = str(LAUNCHERS_PYTHON)
    accelerate_cpu = [python, "-m", "accelerate.commands.launch", "--cpu", "--num_machines", "1", "--num_processes",
                      "2", "--mixed_precision", "no", "--dynamo_backend", "no", "--no_python"]
    script = [python, str(SCRIPTS / "accelerate_ddp.py"), "--steps", "2", "--report-dir", str(tmp_path / "run")]

    # What the check stops: the script alone trains happily at world size 1, though 2 processes were asked for.
    alone = subprocess.run(accelerate_cpu + script, env=launched_env(2), capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    assert [r["world_size"] for r in reports(tmp_path / "run").values()] == [1]

    checked = subprocess.run(
        accelerate_cpu + [python, "-m", "airflow_distributed.replica.world_size", *script[:-1], str(tmp_path / "c")],
        env=launched_env(2), capture_output=True, text=True, timeout=120)
    # The process exits with WRONG_WORLD_SIZE, and Accelerate's launcher with 1 for any failed process.
    assert checked.returncode != 0
    assert f"returned non-zero exit status {WRONG_WORLD_SIZE}" in checked.stderr
    assert ("the launcher started this process with no WORLD_SIZE (a process on its own, world size 1), but the "
            f"job was planned at world size 2 ({ENV_WORLD_SIZE}" in checked.stderr)
    assert not (tmp_path / "c").exists()


@pytest.mark.usefixtures("airflow_db")
@needs_launchers
@pytest.mark.parametrize("launcher, facts, launched_by", [
    # Only DeepSpeed's launcher sets CROSS_RANK (the node's rank) and LOCAL_SIZE. Slow: 35 s on 2 busy cores.
    pytest.param("deepspeed", {"zero_stage": 2}, lambda rank: {"CROSS_RANK": str(rank // 2), "LOCAL_SIZE": "2"},
                 marks=pytest.mark.slow),
    # Only Accelerate's sets its settings' variables; torch's launcher under it sets LOCAL_WORLD_SIZE.
    ("accelerate", {"distributed_type": "DistributedType.MULTI_CPU"},
     lambda rank: {"ACCELERATE_MIXED_PRECISION": "no", "LOCAL_WORLD_SIZE": "2"}),
])
def test_a_launcher_trains_two_replicas_of_two_processes_at_world_size_four(launcher, facts, launched_by, tmp_path):
    run, states = run_dag(f"test_launcher_{launcher}", conf={"report_dir": str(tmp_path)})

    assert states == {"train": "success"}
    seen = reports(tmp_path)
    assert sorted(seen) == [0, 1, 2, 3]
    for rank, record in seen.items():
        # Node 0 is the master replica, node 1 the worker; each node's launcher numbered its processes 0 and 1.
        assert (record["world_size"], record["env"]["WORLD_SIZE"]) == (4, "4")
        assert (record["env"]["RANK"], record["env"]["LOCAL_RANK"]) == (str(rank), str(rank % 2))
        assert {key: record[key] for key in facts} == facts
        assert {key: record["env"][key] for key in launched_by(rank)} == launched_by(rank)
        assert record["final_loss"] < record["initial_loss"] / 4
    # Each process trained on its own shard, so their parameters are equal only if the gradients were averaged.
    assert len({record["checksum"] for record in seen.values()}) == 1
    result = xcom(run, "train")
    assert (result["state"], result["metrics"]["world_size"]) == ("succeeded", 4)
    assert replica_processes(result["job_name"]) == []
