"""Soak: a job whose pods stay quiet for a long time (30 minutes by default) must be waited for to the end.

Real-server timings on the API emulator: a bookmark about every 60 s (kube-apiserver's watch cache), watches
without ``timeoutSeconds`` ended after a random 1x-2x of ``--min-request-timeout`` 1800 s, and the client at the
project's defaults (``WatchTimings()``: ``timeoutSeconds`` 300, read timeout 330 s). Two jobs of three replicas
run at once against one emulator, so that both modes take the time once:

- ``sync``: ``DistributedTrainingHook.wait_for_job`` (the operator's wait in a worker), in a thread;
- ``deferrable``: ``DistributedJobTrigger`` (the triggerer's side), in an event loop.

The benchmark plays the kubelet: the pods run, nothing happens for ``--minutes``, then the master succeeds.
It reports each mode's verdict and its requests by verb, in all and per hour. Not part of ``bench/run.py`` (it
takes the time it soaks); run it as ``python bench/soak_watch.py --minutes 30``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from airflow_distributed.hooks.kubernetes import DistributedTrainingHook  # noqa: E402
from airflow_distributed.hooks.watch_loop import WatchTimings  # noqa: E402
from airflow_distributed.jobstate.verdicts import slots_to_json  # noqa: E402
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger  # noqa: E402
from bench.kubernetes_submit import _job  # noqa: E402
from tests.k8s_emulator import KubeEmulator  # noqa: E402

REPLICAS = 3
BOOKMARK_INTERVAL = 60.0
MIN_REQUEST_TIMEOUT = 1800.0


def _succeed_master(emu: KubeEmulator, namespace: str) -> None:
    master = next(p["metadata"]["name"] for p in emu.list("pods", namespace)
                  if p["metadata"]["name"].endswith("-master-0"))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    emu.set_pod_phase(namespace, master, "Running", container_states={"base": {"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
        "message": json.dumps({"metrics": {"loss": 0.1}})}}})


def _per_verb(emu: KubeEmulator, namespace: str, seconds: float) -> dict:
    counts = emu.request_counts(rf"/namespaces/{namespace}/pods$")
    return {"total": counts, "per_hour": {verb: round(n * 3600 / seconds, 1) for verb, n in counts.items()}}


def soak(minutes: float) -> dict:
    quiet = minutes * 60
    timings = WatchTimings()
    results: dict = {"minutes_quiet": minutes, "replicas": REPLICAS, "bookmark_interval": BOOKMARK_INTERVAL,
                     "min_request_timeout": MIN_REQUEST_TIMEOUT, "watch_timings": timings.as_dict()}
    with tempfile.TemporaryDirectory() as tmp, KubeEmulator(bookmark_interval=BOOKMARK_INTERVAL,
                                                            min_request_timeout=MIN_REQUEST_TIMEOUT) as emu:
        config = emu.write_kubeconfig(Path(tmp) / "config")
        hook = DistributedTrainingHook(kubernetes_conn_id=None, config_file=config,
                                       client_configuration=client.Configuration())
        jobs = {}
        for mode in ("sync", "deferrable"):
            namespace = f"soak-{mode}"
            emu.create_namespace(namespace)
            build, slots = _job(namespace, REPLICAS)
            handle = hook.ensure_job(namespace, build(None), slots)
            for pod in emu.list("pods", namespace):
                emu.run_pod(namespace, pod["metadata"]["name"])
            jobs[mode] = (namespace, handle.name, slots)
        emu.reset_requests()
        started = time.monotonic()
        outcome: dict = {}

        def sync_wait() -> None:
            namespace, name, slots = jobs["sync"]
            try:
                ended = hook.wait_for_job(namespace, name, slots, startup_timeout=60, watch_timings=timings)
                outcome["sync"] = ("succeeded" if ended.succeeded else "failed", time.monotonic() - started)
            except Exception as error:
                outcome["sync"] = (f"error: {error}", time.monotonic() - started)

        async def deferred_wait() -> None:
            namespace, name, slots = jobs["deferrable"]
            trigger = DistributedJobTrigger(job_name=name, namespace=namespace, replicas=slots_to_json(slots),
                                            startup_timeout=60, started_at=time.time(), kubernetes_conn_id=None,
                                            connection_extras={"kube_config_path": config},
                                            watch_timings=timings.as_dict())
            event = await anext(trigger.run())
            state = event.payload["status"]
            if state == "error":
                state = f"error: {event.payload.get('message')}"
            outcome["deferrable"] = (state, time.monotonic() - started)

        def kubelet() -> None:
            time.sleep(quiet)  # the quiet hours: no pod changes, no log line
            for namespace, _, _ in jobs.values():
                _succeed_master(emu, namespace)

        threads = [threading.Thread(target=sync_wait, daemon=True), threading.Thread(target=kubelet, daemon=True)]
        for thread in threads:
            thread.start()
        asyncio.run(deferred_wait())
        for thread in threads:
            thread.join(quiet + 600)
        for mode, (namespace, name, _) in jobs.items():
            state, seconds = outcome.get(mode, ("no verdict", time.monotonic() - started))
            results[mode] = {"state": state, "seconds": round(seconds, 1),
                             "requests": _per_verb(emu, namespace, seconds)}
            hook.delete_job(namespace, name)
        assert emu.errors == [], emu.errors
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the pods stay quiet")
    arguments = parser.parse_args()
    with contextlib.redirect_stdout(sys.stderr):  # the replicas' tables are logged: only the figures on stdout
        figures = soak(arguments.minutes)
    print(json.dumps(figures, indent=2))
