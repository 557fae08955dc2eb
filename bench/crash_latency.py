"""Time from a replica crash to the job failing, and to the last replica process gone (local backend).

Runs the PyTorch example script with three replicas through the local hook, rank 2 exiting with code 3 at
step 20 while the others block in the next all-reduce. Target: both under 5 s.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from airflow_distributed.hooks.local import LocalProcessHook
from airflow_distributed.manifests.local import LOCAL_LAUNCH, process_specs
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec

TRAINING_DIR = Path(__file__).resolve().parents[1] / "example_dags" / "training"


def one_crash() -> dict:
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 2}})
    hook = LocalProcessHook()
    work = tempfile.mkdtemp(prefix="bench-crash-")
    layout = Layout(model_dir=work, output_path=f"{work}/output.json", files_dir=f"{work}/files")
    command = ["python", str(TRAINING_DIR / "pytorch_ddp.py"), "--steps", "100000", "--sleep-per-step", "0.02",
               "--crash-at-step", "20", "--crash-rank", "2"]
    plan = build_plan(spec, "bench-crash", LocalAddressing(hook.free_ports(3)), layout, command,
                      backend="local", launch=LOCAL_LAUNCH)
    job = hook.start(process_specs(plan, interpreter=sys.executable, cpu_count=2), cwd=work)
    pids = [r.pid for r in job.replicas]
    outcome = job.wait(poll_interval=0.2)
    failed_at = time.monotonic()
    crashed = next(r for r in job.replicas if r.spec.name == outcome.replica)
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids):
        time.sleep(0.01)
    gone_at = time.monotonic()
    return {"failed_replica": outcome.replica, "to_failure": failed_at - crashed.exited_at,
            "to_last_process_gone": gone_at - crashed.exited_at}


def measure(rounds: int = 3) -> dict:
    runs = [one_crash() for _ in range(rounds)]
    return {
        "rounds": rounds,
        "runs": runs,
        "median_to_failure_seconds": statistics.median(r["to_failure"] for r in runs),
        "median_to_last_process_gone_seconds": statistics.median(r["to_last_process_gone"] for r in runs),
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
