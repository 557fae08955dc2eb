"""One triggerer process holding 1000 deferred jobs in 10 namespaces: its memory, its watches, its requests while
the jobs are quiet, what happens when the API server drops every watch at once, and how soon a job that ends is
reported.

This process plays Airflow's triggerer: ``jobs`` ``DistributedJobTrigger`` instances, built with their public
constructor, each ``run()`` as one task of one asyncio loop, the jobs spread evenly over ``namespaces``
namespaces. The API emulator runs in a process of its own (``EmulatorProcess``) with bookmarks every 60 s, as a
real API server sends them. Every job has ``replicas`` pods, all running, so that the jobs stay quiet: no event,
no verdict, until the end, when one job per namespace ends.

Measured:

- ``rss_mb``: resident memory of this process before the triggers start (Airflow, the clients and the plans
  imported and built) and once the watches are open; target < 300 MB in all;
- ``watches``: watch requests made, watches the emulator serves and connections open to it once settled, and
  the most watch requests of one namespace; target at most one per (namespace, kind);
- ``quiet``: requests during ``quiet_seconds`` with nothing happening, as requests per minute;
- ``drop``: every watch of the API server cut at once (``drop_watches()``: a restart); the requests after it, the
  busiest second, and the watches open again. Target: as many reconnects as there were watches;
- ``ended``: one job per namespace ends (its master exits 0), one after the other: seconds from the write to the
  trigger's event, median and most; target the same as with a watch per job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402 (an Airflow dependency)

from airflow_distributed.jobstate.verdicts import replica_slots, slots_to_json  # noqa: E402
from airflow_distributed.manifests.kubernetes import (  # noqa: E402
    JobManifestOptions,
    build_job_objects,
    layout_for_kubernetes,
    to_dict,
)
from airflow_distributed.plan import KubernetesAddressing, build_plan  # noqa: E402
from airflow_distributed.spec import load_spec  # noqa: E402
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger  # noqa: E402
from tests.k8s_emulator.process import EmulatorProcess  # noqa: E402

JOBS = 1000
REPLICAS = 2
NAMESPACES = 10
IMAGE = "registry.example.com/trainer:1.0"
MB = 1024 * 1024


def _namespace(index: int) -> str:
    return f"triggerer-{index}"


def _create_jobs(emu: EmulatorProcess, jobs: int, replicas: int, namespaces: int) -> list[tuple[str, str, list]]:
    """``jobs`` jobs of ``replicas`` running pods each, spread over ``namespaces``, written straight into the
    emulator; (namespace, name, slots) each."""
    spec = load_spec("pytorch", {"pytorch": {"n_workers": replicas - 1}})
    made = []
    for index in range(jobs):
        namespace, name = _namespace(index % namespaces), f"job-{index:04d}"
        plan = build_plan(spec, name, KubernetesAddressing(namespace), layout_for_kubernetes(),
                          ["python", "train.py"], backend="kubernetes")
        for pod in build_job_objects(plan, JobManifestOptions(namespace=namespace, image=IMAGE)).pods:
            emu.create("pods", namespace, to_dict(pod))
            emu.run_pod(namespace, pod.metadata.name)
        made.append((namespace, name, slots_to_json(replica_slots(plan))))
    return made


def _open_connections(port: int) -> int:
    return sum(1 for c in psutil.Process().net_connections("tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def _watches(emu: EmulatorProcess) -> int:
    return emu.request_summary().get("WATCH pods", 0)


def _most_watches_of_a_namespace(emu: EmulatorProcess, namespaces: int) -> int:
    return max(emu.request_counts(rf"/namespaces/{_namespace(index)}/pods$").get("watch", 0)
               for index in range(namespaces))


def _open_watches(emu: EmulatorProcess) -> int | None:
    """Watches the emulator is serving, when it counts them."""
    try:
        return emu.call("open_watches")
    except AttributeError:
        return None


def _drop_every_watch(emu: EmulatorProcess) -> str:
    """The emulator's own control when it has one, else shut every connection of it."""
    try:
        emu.call("drop_watches")
        return "drop_watches()"
    except AttributeError:
        emu.call("drop_connections")
        return "every connection shut (drop_connections)"


async def _steady(count, least: int, timeout: float, still: float = 3.0) -> float:
    """Seconds until ``count()`` (run in a thread) is at least ``least`` and has not changed for ``still`` seconds."""
    started = time.monotonic()
    last, since = None, started
    while True:
        value = await asyncio.to_thread(count)
        if value != last:
            last, since = value, time.monotonic()
        elif value >= least and time.monotonic() - since >= still:
            return since - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"not steady in {timeout:g}s")
        await asyncio.sleep(0.25)


async def _until(condition, timeout: float, step: float = 0.25) -> float:
    """Seconds until ``condition()`` (run in a thread: it talks to the emulator) is true; raises after ``timeout``."""
    started = time.monotonic()
    while not await asyncio.to_thread(condition):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"not reached in {timeout:g}s")
        await asyncio.sleep(step)
    return time.monotonic() - started


async def _hold(emu: EmulatorProcess, config: str, jobs: list[tuple[str, str, list]], namespaces: int,
                quiet_seconds: float, after_drop_seconds: float) -> dict[str, Any]:
    import kubernetes_asyncio.client  # noqa: F401 - imported by the first trigger; counted in "before", not per job

    me = psutil.Process()
    figures: dict[str, Any] = {"rss_mb": {"before": round(me.memory_info().rss / MB, 1)}}
    triggers = [
        DistributedJobTrigger(job_name=name, namespace=namespace, replicas=replicas, startup_timeout=3600,
                              started_at=time.time(), kubernetes_conn_id=None,
                              connection_extras={"kube_config_path": config})
        for namespace, name, replicas in jobs
    ]
    events: dict[str, tuple[float, dict[str, Any]]] = {}

    async def run(trigger: DistributedJobTrigger) -> None:
        async for event in trigger.run():
            events[trigger.job_name] = (time.monotonic(), event.payload)

    emu.reset_requests()
    started = time.monotonic()
    tasks = [asyncio.create_task(run(trigger)) for trigger in triggers]
    try:
        # Settled: every namespace watched and no new watch for 3 s (a watch per job: 1000; shared: 10).
        settled = await _steady(lambda: _watches(emu), namespaces, timeout=300)
        figures["settle_seconds"] = round(time.monotonic() - started, 1)
        figures["watches"] = {"requests": _watches(emu), "open_connections": _open_connections(emu.port),
                              "open_watches": _open_watches(emu),
                              "most_of_one_namespace": _most_watches_of_a_namespace(emu, namespaces),
                              "requests_until_settled": emu.request_summary(), "seconds_to_open": round(settled, 1)}
        figures["rss_mb"]["holding"] = round(me.memory_info().rss / MB, 1)
        figures["rss_mb"]["per_job_kb"] = round(
            (figures["rss_mb"]["holding"] - figures["rss_mb"]["before"]) * 1024 / len(jobs), 1)

        if quiet_seconds > 0:
            emu.reset_requests()
            await asyncio.sleep(quiet_seconds)
            quiet = emu.request_count()
            figures["quiet"] = {"seconds": quiet_seconds, "requests": quiet,
                                "per_minute": round(quiet * 60 / quiet_seconds, 1), "by_kind": emu.request_summary()}

        if after_drop_seconds > 0:
            emu.reset_requests()
            how = await asyncio.to_thread(_drop_every_watch, emu)
            dropped_at = time.monotonic()
            counts: list[tuple[float, int]] = []
            while time.monotonic() - dropped_at < after_drop_seconds:
                await asyncio.sleep(0.1)
                counts.append((time.monotonic() - dropped_at, await asyncio.to_thread(emu.request_count)))
            per_second: dict[int, int] = {}
            previous, busiest_tenth, first, last = 0, 0, None, None
            for at, count in counts:
                per_second[int(at)] = per_second.get(int(at), 0) + count - previous
                busiest_tenth = max(busiest_tenth, count - previous)
                if count > previous:
                    first = at if first is None else first
                    last = at
                previous = count
            summary = emu.request_summary()
            figures["drop"] = {
                "how": how,
                "seconds_observed": after_drop_seconds,
                "requests": previous,
                "by_kind": summary,
                "busiest_second": max(per_second.values(), default=0),
                "busiest_tenth_of_a_second": busiest_tenth,
                "seconds_from_first_to_last_request": round(last - first, 1) if first is not None else None,
                "per_second": [per_second.get(second, 0) for second in range(int(after_drop_seconds))],
                "watches_again": summary.get("WATCH pods", 0),
                "open_connections_after": _open_connections(emu.port),
                "open_watches_after": _open_watches(emu),
            }
        figures["events_while_quiet"] = len(events)  # quiet jobs: none expected
        figures["ended"] = await _end_one_job_per_namespace(emu, jobs, namespaces, events)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return figures


async def _end_one_job_per_namespace(emu: EmulatorProcess, jobs: list[tuple[str, str, list]], namespaces: int,
                                     events: dict[str, tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """The first job of each namespace ends, one after the other: seconds from the write to its trigger's event."""
    seconds, statuses = [], []
    for namespace, name, replicas in jobs[:namespaces]:
        master = replicas[0][0]
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        terminated = {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}
        written = time.monotonic()
        await asyncio.to_thread(emu.set_pod_phase, namespace, master, "Running",
                                container_states={"base": {"terminated": terminated}})
        await _until(lambda name=name: name in events, timeout=60, step=0.005)
        fired, payload = events[name]
        seconds.append(fired - written)
        statuses.append(payload["status"])
    seconds.sort()
    return {"jobs": len(seconds), "statuses": sorted(set(statuses)),
            "median_seconds": round(seconds[len(seconds) // 2], 3), "most_seconds": round(seconds[-1], 3)}


def measure_one(jobs: int = JOBS, replicas: int = REPLICAS, quiet_seconds: float = 60.0,
                after_drop_seconds: float = 20.0, *, tls: bool = True, namespaces: int = NAMESPACES
                ) -> dict[str, Any]:
    """One triggerer (this process) against one emulator; ``tls``: HTTPS with a cluster CA in the kubeconfig."""
    results: dict[str, Any] = {"jobs": jobs, "namespaces": namespaces, "replicas_per_job": replicas,
                               "api": "https, cluster CA in the kubeconfig" if tls else "http, no CA"}
    with tempfile.TemporaryDirectory() as tmp, EmulatorProcess(bookmark_interval=60.0, tls=tls) as emu:
        config = emu.write_kubeconfig(Path(tmp) / "config")
        for index in range(namespaces):
            emu.create_namespace(_namespace(index))
        made = _create_jobs(emu, jobs, replicas, namespaces)
        results.update(asyncio.run(_hold(emu, config, made, namespaces, quiet_seconds, after_drop_seconds)))
        errors = emu.call("errors")
        results["emulator_errors"] = len(errors)
    return results


def measure(jobs: int = JOBS, replicas: int = REPLICAS, quiet_seconds: float = 60.0,
            after_drop_seconds: float = 20.0, namespaces: int = NAMESPACES) -> dict[str, Any]:
    """Both kubeconfig shapes, each in a fresh interpreter (memory once taken is not given back); the quiet spell
    and the drop are measured with the first only."""
    results = {}
    for variant, quiet, drop in (("https", quiet_seconds, after_drop_seconds), ("http", 0.0, 0.0)):
        command = [sys.executable, __file__, "--jobs", str(jobs), "--replicas", str(replicas),
                   "--quiet-seconds", str(quiet), "--after-drop-seconds", str(drop), "--api", variant,
                   "--namespaces", str(namespaces)]
        with tempfile.TemporaryDirectory() as tmp:
            # The figures through a file: the shared watch's logs go to the stdout Airflow's logging holds.
            output = Path(tmp) / "figures.json"
            subprocess.run([*command, "--output", str(output)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            results[variant] = json.loads(output.read_text())
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--replicas", type=int, default=REPLICAS)
    parser.add_argument("--namespaces", type=int, default=NAMESPACES)
    parser.add_argument("--output", help="write the figures to this file instead of stdout")
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--after-drop-seconds", type=float, default=20.0)
    parser.add_argument("--api", choices=("https", "http", "both"), default="both")
    parser.add_argument("--ssl-read-buffer-kb", type=int, default=None,
                        help="experiment: asyncio's read buffer of every TLS connection, in KiB (default 256), to "
                             "show how much of the memory of 1000 open watches it is; not something the triggers set")
    args = parser.parse_args()
    if args.ssl_read_buffer_kb is not None:
        import asyncio.sslproto

        asyncio.sslproto.SSLProtocol.max_size = args.ssl_read_buffer_kb * 1024
    with contextlib.redirect_stdout(sys.stderr):  # the triggers' logs aside: only the figures on stdout
        if args.api == "both":
            figures = measure(args.jobs, args.replicas, args.quiet_seconds, args.after_drop_seconds, args.namespaces)
        else:
            figures = measure_one(args.jobs, args.replicas, args.quiet_seconds, args.after_drop_seconds,
                                  tls=args.api == "https", namespaces=args.namespaces)
    if args.output:
        Path(args.output).write_text(json.dumps(figures))
    else:
        print(json.dumps(figures, indent=2))
