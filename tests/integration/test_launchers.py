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
