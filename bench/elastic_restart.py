"""Time lost to one worker failure in an elastic PyTorch job (local backend): restart + resume vs no failure.

The PyTorch example with three replicas under torch's elastic agent (``environment.pytorch.elastic``), 300 steps,
a checkpoint every 10. In one run nothing fails; in the other, worker-0's training process is SIGKILLed as soon
as the checkpoint of step 100 exists: its agent restarts the worker group, the others re-form the group, and
training resumes from the last checkpoint. Rounds alternate the two; figures are medians:

- ``ratio``: wall time with the failure / without it (start to the job's outcome);
- ``lost_seconds``: the difference;
- ``kill_to_resume_seconds``: from the kill to the master's "resuming from the checkpoint" line (restart,
  rendezvous, process group, reading the checkpoint);
- ``resumed_from_step``: the checkpoint training went on from (the kill lands a few steps after it).
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from airflow_distributed.hooks.local import LocalProcessHook
from airflow_distributed.manifests.local import LOCAL_LAUNCH, process_specs
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec

TRAINING_DIR = Path(__file__).resolve().parents[1] / "example_dags" / "training"

STEPS, EVERY, KILL_AFTER = 300, 10, 100
_RESUMED = re.compile(r"resuming from the checkpoint of step (\d+)")


class Lines:
    """The task log of the hook, with the time each line arrived."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append((time.monotonic(), message % args if args else message))

    warning = error = info


def one_run(kill: bool) -> dict:
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 2, "elastic": {"max_restarts": 1, "rdzv_timeout": 60}}})
    lines = Lines()
    hook = LocalProcessHook(logger=lines)  # type: ignore[arg-type]
    work = tempfile.mkdtemp(prefix="bench-elastic-")
    checkpoints = os.path.join(work, "checkpoints")
    layout = Layout(model_dir=work, output_path=f"{work}/output.json", files_dir=f"{work}/files",
                    checkpoint_dir=checkpoints)
    command = [sys.executable, str(TRAINING_DIR / "pytorch_ddp.py"), "--steps", str(STEPS), "--checkpoint-every",
               str(EVERY), "--sleep-per-step", "0.02", "--timeout", "60"]
    plan = build_plan(spec, "bench-elastic", LocalAddressing(hook.free_ports(3)), layout, command,
                      backend="local", launch=LOCAL_LAUNCH)
    started = time.monotonic()
    job = hook.start(process_specs(plan, interpreter=sys.executable, cpu_count=2, base_env=os.environ), cwd=work,
                     elastic=plan.elastic)
    killed: list[float] = []

    def killer() -> None:
        target = os.path.join(checkpoints, f"checkpoint-{KILL_AFTER:012d}.pkl")
        while not os.path.exists(target):
            time.sleep(0.02)
        agent = psutil.Process(job.replicas[1].pid)
        while not agent.children():
            time.sleep(0.02)
        agent.children()[0].send_signal(signal.SIGKILL)
        killed.append(time.monotonic())

    thread = threading.Thread(target=killer, daemon=True)
    if kill:
        thread.start()
    try:
        outcome = job.wait(poll_interval=0.1, settle=5.0)
    finally:
        job.stop(3.0)
    elapsed = time.monotonic() - started
    if not outcome.succeeded:
        print(f"job failed: {outcome.reason or outcome.replica}: {list(outcome.tail)[-5:]}", file=sys.stderr)
    result = {"succeeded": outcome.succeeded, "seconds": round(elapsed, 2),
              "restarts": sum(r.restarts for r in outcome.replicas)}
    if kill and killed:
        resumed = [(t, int(m.group(1))) for t, line in lines.lines if (m := _RESUMED.search(line))]
        if resumed:
            result["kill_to_resume_seconds"] = round(resumed[0][0] - killed[0], 2)
            result["resumed_from_step"] = resumed[0][1]
    for leftover in glob.glob(os.path.join(checkpoints, "*")):
        os.unlink(leftover)
    return result


def measure(rounds: int = 2) -> dict:
    plain, failed = [], []
    for _ in range(rounds):
        plain.append(one_run(kill=False))
        failed.append(one_run(kill=True))
    base = statistics.median(r["seconds"] for r in plain)
    with_failure = statistics.median(r["seconds"] for r in failed)
    return {
        "rounds": rounds,
        "without_failure": plain,
        "with_one_failure": failed,
        "median_seconds_without_failure": base,
        "median_seconds_with_one_failure": with_failure,
        "lost_seconds": round(with_failure - base, 2),
        "ratio": round(with_failure / base, 3),
        "median_kill_to_resume_seconds": statistics.median(r.get("kill_to_resume_seconds", float("nan"))
                                                           for r in failed),
    }


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 2), indent=2))
