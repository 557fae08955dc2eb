"""One triggerer process relaying the master's log of 100 deferred jobs, each master printing 1 MB: the process's
memory growth and its event loop's longest stall, side by side with the same jobs and no relay.

This process plays Airflow's triggerer, as ``triggerer_scale.py`` does: ``jobs`` ``DistributedJobTrigger``
instances, each ``run()`` as one task of one asyncio loop, spread over ``namespaces`` namespaces of the API emulator
(``EmulatorProcess``, a process of its own, which serves ``pods/log`` with ``sinceTime``, ``limitBytes`` and
timestamps). Every job has two running pods. Once the watches are open, every master prints ``megabytes`` MB of
80-character lines, in ``rounds`` pieces one second apart; the triggers relay them every ``interval`` seconds
(``logging_interval``) into this process's log, a file (as the triggerer writes a trigger's records to one).

Measured, for ``--relay on`` (``logging_interval`` = ``interval``) and ``--relay off`` (``logging_interval=None``:
the same triggers and jobs, nothing relayed), each in a fresh interpreter:

- ``rss_mb``: resident memory once the watches are open, and the most it reached from the first line printed until
  every line was relayed (or, without the relay, as long as the relay took); ``growth_mb`` the difference;
- ``loop_lag_ms``: a timer of the loop due every 10 ms: how late it ran, at most and at the 99th percentile, over
  the same span (the longest a loop iteration took, give or take 10 ms);
- ``relayed``: lines of the masters in the log file, lines printed, and the seconds from the first line printed
  until the last was relayed;
- ``cpu_seconds`` of this process over the span;
- ``longest_slice_ms``: the relay's longest synchronous piece of work between two yields (one slice of lines), in
  wall and in CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import psutil  # noqa: E402 (an Airflow dependency)
from triggerer_scale import LagMonitor, _create_jobs, _namespace, _steady, _watches  # noqa: E402

from airflow_distributed.triggers.kubernetes import DistributedJobTrigger  # noqa: E402
from airflow_distributed.triggers.log_relay import LogRelay  # noqa: E402
from tests.k8s_emulator.process import EmulatorProcess  # noqa: E402

JOBS = 100
NAMESPACES = 10
MEGABYTES = 1.0
ROUNDS = 10
INTERVAL = 2.0
LINE = 80
MB = 1024 * 1024


def _print(emu: EmulatorProcess, jobs: list[tuple[str, str, list]], megabytes: float, rounds: int) -> int:
    """Every master prints ``megabytes`` MB over ``rounds`` seconds; returns the lines each printed."""
    per_round = int(megabytes * MB / LINE / rounds)
    for round_ in range(rounds):
        started = time.monotonic()
        for namespace, name, replicas in jobs:  # the lines are made in the emulator's process
            emu.print_lines(namespace, replicas[0][0], f"{name} round {round_:03d}", per_round, LINE, "base")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return per_round * rounds


def _relayed_lines(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(1 for line in lines if b" round " in line)


def _skips(path: Path) -> int:
    with path.open("rb") as lines:
        return sum(1 for line in lines if b"skipped to the last" in line)


class _SliceTimes:
    """The relay's synchronous work between two yields (``LogRelay._show`` of one slice of lines): the longest
    in wall time and in this thread's CPU time; much more wall than CPU is the OS taking the core away."""

    def __init__(self) -> None:
        self.wall, self.cpu = 0.0, 0.0
        show = LogRelay._show

        def timed(relay: LogRelay, *args: Any) -> None:
            wall, cpu = time.perf_counter(), time.thread_time()
            show(relay, *args)
            self.wall = max(self.wall, time.perf_counter() - wall)
            self.cpu = max(self.cpu, time.thread_time() - cpu)

        LogRelay._show = timed  # type: ignore[method-assign]


async def _hold(emu: EmulatorProcess, config: str, jobs: list[tuple[str, str, list]], interval: float | None,
                megabytes: float, rounds: int, log_file: Path) -> dict[str, Any]:
    me = psutil.Process()
    triggers = [
        DistributedJobTrigger(job_name=name, namespace=namespace, replicas=replicas, startup_timeout=3600,
                              started_at=time.time(), kubernetes_conn_id=None,
                              connection_extras={"kube_config_path": config}, logging_interval=interval)
        for namespace, name, replicas in jobs
    ]
    monitor, slices = LagMonitor(), _SliceTimes()
    tasks = [asyncio.create_task(monitor.run())]

    async def run(trigger: DistributedJobTrigger) -> None:
        async for _ in trigger.run():
            pass

    tasks += [asyncio.create_task(run(trigger)) for trigger in triggers]
    figures: dict[str, Any] = {}
    try:
        await _steady(lambda: _watches(emu), min(len(jobs), NAMESPACES), timeout=300)
        await asyncio.sleep(2 * (interval or 1.0))  # the first relays (nothing printed yet) behind
        before = me.memory_info().rss
        cpu = sum(me.cpu_times()[:2])
        monitor.rss_peak, monitor.recording = before, True
        started = time.monotonic()
        printed = await asyncio.to_thread(_print, emu, jobs, megabytes, rounds)
        expected = printed * len(jobs)
        if interval:
            # Caught up: every line relayed, or nothing more for three intervals (a relay that fell behind skipped).
            relayed, last, since = 0, -1, time.monotonic()
            while time.monotonic() - started < 600 and relayed < expected:
                await asyncio.sleep(0.5)
                relayed = await asyncio.to_thread(_relayed_lines, log_file)
                if relayed != last:
                    last, since = relayed, time.monotonic()
                elif time.monotonic() - since > 3 * interval:
                    break
        else:
            await asyncio.sleep(rounds + 2 * INTERVAL)  # as long as the relay would take, about
        span = time.monotonic() - started
        monitor.recording = False
        figures = {
            "rss_mb": {"before": round(before / MB, 1), "peak": round(monitor.rss_peak / MB, 1),
                       "growth": round((monitor.rss_peak - before) / MB, 1)},
            "loop_lag_ms": monitor.summary(),
            "relayed": {"lines_printed": expected, "lines_relayed": await asyncio.to_thread(_relayed_lines, log_file),
                        "skips": await asyncio.to_thread(_skips, log_file),
                        "seconds_from_first_line_to_last_relayed": round(span, 1)},
            "cpu_seconds": round(sum(me.cpu_times()[:2]) - cpu, 1),
            "longest_slice_ms": {"wall": round(slices.wall * 1000, 1), "cpu": round(slices.cpu * 1000, 1)},
        }
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return figures


def measure_one(relay: bool, jobs: int = JOBS, megabytes: float = MEGABYTES, rounds: int = ROUNDS,
                interval: float = INTERVAL) -> dict[str, Any]:
    results: dict[str, Any] = {"relay": relay, "jobs": jobs, "megabytes_per_master": megabytes,
                               "logging_interval": interval if relay else None}
    with tempfile.TemporaryDirectory() as tmp, EmulatorProcess(bookmark_interval=60.0, tls=True) as emu:
        config = emu.write_kubeconfig(Path(tmp) / "config")
        for index in range(NAMESPACES):
            emu.create_namespace(_namespace(index))
        made = _create_jobs(emu, jobs, 2, NAMESPACES)
        # The triggers' records (Airflow's structlog, to this process's output) into a file, as the triggerer
        # writes them to one; counted there.
        log_file = Path(os.environ.get("TRIGGERER_LOGS_FILE") or Path(tmp) / "triggers.log")
        saved = [os.dup(1), os.dup(2)]
        with log_file.open("wb") as sink:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
        try:
            results.update(asyncio.run(_hold(emu, config, made, interval if relay else None, megabytes, rounds,
                                             log_file)))
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    return results


def measure(jobs: int = JOBS, megabytes: float = MEGABYTES, rounds: int = ROUNDS,
            interval: float = INTERVAL) -> dict[str, Any]:
    """With and without the relay, each in a fresh interpreter (memory once taken is not given back)."""
    results = {}
    for relay in ("on", "off"):
        with tempfile.TemporaryDirectory() as tmp:
            output = Path(tmp) / "figures.json"
            subprocess.run([sys.executable, __file__, "--relay", relay, "--jobs", str(jobs), "--megabytes",
                            str(megabytes), "--rounds", str(rounds), "--interval", str(interval), "--output",
                            str(output)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            results[relay] = json.loads(output.read_text())
    on, off = results["on"], results["off"]
    results["relay_minus_none"] = {"rss_growth_mb": round(on["rss_mb"]["growth"] - off["rss_mb"]["growth"], 1),
                                   "loop_lag_max_ms": round(on["loop_lag_ms"]["max"] - off["loop_lag_ms"]["max"], 1)}
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--relay", choices=("on", "off", "both"), default="both")
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--megabytes", type=float, default=MEGABYTES)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--interval", type=float, default=INTERVAL)
    parser.add_argument("--output", help="write the figures to this file instead of stdout")
    args = parser.parse_args()
    with contextlib.redirect_stdout(sys.stderr):
        if args.relay == "both":
            figures = measure(args.jobs, args.megabytes, args.rounds, args.interval)
        else:
            figures = measure_one(args.relay == "on", args.jobs, args.megabytes, args.rounds, args.interval)
    if args.output:
        Path(args.output).write_text(json.dumps(figures))
    else:
        print(json.dumps(figures, indent=2))
