"""bench/gpu_check/run.py, the GPU check, run as it is run by hand: its skip path where there is no GPU, and its CPU
dry run (real Airflow DAG runs of the local backend, gloo, GPUs faked with CUDA_VISIBLE_DEVICES), so that the
script's plumbing is proven on every CI run although CI has no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench" / "gpu_check" / "run.py"
LAUNCHERS_PYTHON = ROOT / ".venvs" / "launchers" / "bin" / "python"


def gpu_check(out: Path, *args: str, path: str | None = None, timeout: float = 240,
              **env_vars: str) -> tuple[int, str, dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("OUT", None)
    env.pop("GPU_CHECK_PYTHON", None)
    env.update(env_vars)
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run([sys.executable, str(RUN), "--out", str(out), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    report = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return proc.returncode, proc.stdout + proc.stderr, report


def statuses(report: dict) -> dict[str, str]:
    return {row["check"]: row["status"] for row in report.get("checks", [])}


def test_without_nvidia_smi_every_check_is_skipped_saying_why_and_the_script_exits_0(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()

    rc, output, report = gpu_check(tmp_path / "out", path=str(empty))

    assert rc == 0, output
    assert "GPU check skipped: no GPU: nvidia-smi is not on PATH" in output
    assert statuses(report) == dict.fromkeys("abcd", "SKIP")
    assert {row["detail"] for row in report["checks"]} == {"no GPU: nvidia-smi is not on PATH"}
    assert report["mode"] == "cuda"
    # nothing ran: no Airflow was set up, no DAG run logged
    assert list((tmp_path / "out" / "logs").iterdir()) == []


def test_where_torch_sees_no_cuda_device_the_check_skips_although_nvidia_smi_is_there(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the check would run")
    # An nvidia-smi on PATH (a driver without a usable device, or a CPU build of torch): torch decides.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    smi.chmod(0o755)

    rc, output, report = gpu_check(tmp_path / "out", "--checks", "a,c", path=f"{bin_dir}{os.pathsep}/usr/bin:/bin")

    assert rc == 0, output
    assert f"no GPU: torch {torch.__version__} sees no CUDA device" in output
    assert statuses(report) == {"a": "SKIP", "c": "SKIP"}
    assert report["gpus"] == ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"]


def test_cpu_dry_run_of_check_a_trains_one_replica_on_its_faked_gpu(tmp_path):
    rc, output, report = gpu_check(tmp_path / "out", "--device", "cpu", "--checks", "a")

    assert rc == 0, output
    [row] = report["checks"]
    assert (row["check"], row["status"]) == ("a", "PASS"), row
    facts = row["facts"]
    # the local backend handed the replica one of the two faked GPUs, and the job ran gloo on the CPU
    assert (facts["backend"], facts["device"], facts["world_size"]) == ("gloo", "cpu", 1)
    assert facts["cuda_visible_devices"] == "0"
    assert facts["airflow_exit"] == 0
    assert report["visible"] == ["0", "1"]
    assert (tmp_path / "out" / "logs" / "a.log").exists()
    assert "a      one GPU, one process" in output and "PASS" in output


def test_check_d_skips_naming_the_interpreter_that_cannot_import_deepspeed(tmp_path):
    # An interpreter without DeepSpeed: the suite's own (the GPU image's python3 too, unless the carry brings it).
    python = sys.executable
    probe = subprocess.run([python, "-c", "import deepspeed"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip(f"{python} has deepspeed: no interpreter without it to point check d at")

    rc, output, report = gpu_check(tmp_path / "out", "--device", "cpu", "--checks", "d", GPU_CHECK_PYTHON=python)

    assert rc == 0, output
    [row] = report["checks"]
    assert (row["check"], row["status"]) == ("d", "SKIP"), row
    assert row["detail"] == (f"deepspeed cannot be imported by the replicas' interpreter {python} "
                             "(ModuleNotFoundError: No module named 'deepspeed'); docs/gpu.md says how to carry it")
    assert report["deepspeed_python"] == python
    # nothing else ran: no DAG run logged
    assert list((tmp_path / "out" / "logs").iterdir()) == []


@pytest.mark.slow
def test_cpu_dry_run_of_every_check(tmp_path):
    # Check a's dry run is the default suite's case above: not run twice.
    rc, output, report = gpu_check(tmp_path / "out", "--device", "cpu", "--checks", "b,c,d", timeout=500)

    assert rc == 0, output
    rows = {row["check"]: row for row in report["checks"]}
    assert "a" not in rows or rows["a"]["status"] == "SKIP", rows
    # n_proc_per_node="auto" on the local backend: two processes on the two faked GPUs
    assert rows["b"]["status"] == "PASS", rows["b"]
    assert sorted(p["LOCAL_RANK"] for p in rows["b"]["facts"]["processes"]) == [0, 1]
    refusal = rows["c"]
    assert refusal["status"] == "PASS", refusal
    assert (refusal["facts"]["asked"], refusal["facts"]["visible"], refusal["facts"]["replicas_started"]) == (3, 2, 0)
    assert "3 GPU" in refusal["facts"]["message"] and "2 visible" in refusal["facts"]["message"]
    assert refusal["facts"]["airflow_exit"] != 0
    deepspeed = rows["d"]
    if not LAUNCHERS_PYTHON.exists():
        assert deepspeed["status"] == "SKIP" and "deepspeed cannot be imported" in deepspeed["detail"], deepspeed
        return
    # DeepSpeed's launcher started a process per faked GPU in the one replica, ZeRO-2 over gloo trained them
    assert deepspeed["status"] == "PASS", deepspeed
    facts = deepspeed["facts"]
    assert (facts["world_size"], facts["backend"], facts["zero_stage"]) == (2, "gloo", 2)
    assert sorted((p["RANK"], p["LOCAL_RANK"], p["LOCAL_SIZE"], p["CROSS_RANK"]) for p in facts["processes"]) == [
        ("0", "0", "2", "0"), ("1", "1", "2", "0")]
    assert facts["final_loss"] < facts["initial_loss"]
    assert report["deepspeed_python"] == str(LAUNCHERS_PYTHON)
