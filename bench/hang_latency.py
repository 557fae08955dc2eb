"""The hang watchdog (``progress_timeout``, local backend): how long after the master's last sign of life a hung job
fails, and what watching costs.

Latency: a real gloo job of three replicas whose master and worker 0 block in an all-reduce that worker 1 never
joins (``tests/dags/failure_class_dags.GLOO_HANG``), ``progress_timeout`` 10 s (the first one counts from the start,
importing torch included): from the master's last line to the wait's end (stacks dumped, every replica stopped),
and to the last replica process gone. Target: within ``progress_timeout`` + 15 s. Cost: the waiting process's CPU
seconds over a 6-second job that reports every second, with and without the watchdog, alternating rounds, medians.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time

import psutil

from airflow_distributed.contract import ENV_STACKS_SIGNAL
from airflow_distributed.hooks.local import STACKS_SIGNAL, LocalProcessHook
from airflow_distributed.jobstate.progress_watch import HangWatchdog
from airflow_distributed.manifests.local import LOCAL_LAUNCH, process_specs
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec
from tests.hang_scripts import GLOO_HANG, SLOW_BUT_REPORTING

TIMEOUT = 10.0


def run(script: str, workers: int, watchdog: bool) -> dict:
    spec = load_spec("pytorch", {"pytorch": {"n_workers": workers}})
    last_line: dict[str, float] = {}
    hook = LocalProcessHook()
    work = tempfile.mkdtemp(prefix="bench-hang-")
    layout = Layout(model_dir=work, output_path=f"{work}/output.json", files_dir=f"{work}/files")
    plan = build_plan(spec, "bench-hang", LocalAddressing(hook.free_ports(workers + 1)), layout,
                      ["python", "-c", script],
                      backend="local", launch=LOCAL_LAUNCH, env={ENV_STACKS_SIGNAL: STACKS_SIGNAL.name})
    job = hook.start(process_specs(plan, interpreter=sys.executable, cpu_count=2), cwd=work)
    pids = [r.pid for r in job.replicas]
    master = job.master

    def read() -> str | None:
        try:
            with open(layout.output_path, encoding="utf-8") as handle:
                return handle.read()
        except OSError:
            return None

    seen = {"lines": 0}

    def master_lines() -> int:
        if master.lines != seen["lines"]:
            seen["lines"], last_line["at"] = master.lines, time.monotonic()
        return master.lines

    hung = HangWatchdog(TIMEOUT, read_document=read, master_lines=master_lines) if watchdog else None
    cpu = time.process_time()
    outcome = job.wait(poll_interval=0.2, hung=hung)
    ended_at, cpu = time.monotonic(), time.process_time() - cpu
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids):
        time.sleep(0.01)
    gone_at = time.monotonic()
    result = {"ending": outcome.ending, "cpu_seconds": cpu}
    if "at" in last_line:
        result |= {"to_failure": ended_at - last_line["at"], "to_last_process_gone": gone_at - last_line["at"]}
    return result


def measure(rounds: int = 3) -> dict:
    hangs = [run(GLOO_HANG, 2, True) for _ in range(rounds)]
    watched, unwatched = [], []
    for _ in range(rounds):
        watched.append(run(SLOW_BUT_REPORTING, 0, True))
        unwatched.append(run(SLOW_BUT_REPORTING, 0, False))
    return {
        "progress_timeout": TIMEOUT,
        "hangs": hangs,
        "median_to_failure_seconds": statistics.median(r["to_failure"] for r in hangs),
        "median_to_last_process_gone_seconds": statistics.median(r["to_last_process_gone"] for r in hangs),
        "slow_job_endings": sorted({r["ending"] for r in watched + unwatched}),
        "median_cpu_seconds_watched": statistics.median(r["cpu_seconds"] for r in watched),
        "median_cpu_seconds_unwatched": statistics.median(r["cpu_seconds"] for r in unwatched),
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
