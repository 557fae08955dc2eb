"""Requests the waiting side makes while a 100-replica job runs, against one polling pod operator per replica.

The job runs for ``seconds`` on the API emulator (the benchmark plays the kubelet: pods run, the master logs a
line every half second, then succeeds). Measured from the first request of the wait to its verdict:

- ``sync``: ``PodJobHook.wait_for_job`` with the master's log followed into the task log;
- ``deferrable``: ``DistributedJobTrigger`` (the triggerer's side);
- ``sync_short_watch``: the sync wait with a 5 s watch timeout, to show what reconnects cost: one request each.

``per_5_minutes`` extrapolates with the default watch timeout (300 s): a LIST, one watch and its reconnect, and
(sync) one log follow, reconnected once when the master's container ends. The polling figure is what one
``KubernetesPodOperator`` per replica costs at the provider's default ``poll_interval`` of 2 s: replicas x seconds / 2
reads of a pod.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from airflow_distributed.hooks.kubernetes import PodJobHook  # noqa: E402
from airflow_distributed.jobstate.verdicts import slots_to_json  # noqa: E402
from airflow_distributed.jobstate.watch_timings import WATCH_TIMEOUT  # noqa: E402
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger  # noqa: E402
from bench.kubernetes_submit import _job  # noqa: E402
from tests.k8s_emulator import KubeEmulator  # noqa: E402

REPLICAS = 100
#: The cncf provider's KubernetesPodOperator: ``poll_interval: float = 2`` (operators/pod.py, deferrable mode) and
#: ``time.sleep(2)`` between pod reads in ``PodManager.await_pod_completion`` (utils/pod_manager.py, sync mode).
POD_OPERATOR_POLL_INTERVAL = 2.0
MINUTES_5 = 300.0


def _kubelet(emu: KubeEmulator, namespace: str, seconds: float, stop: threading.Event) -> threading.Thread:
    def play() -> None:
        pods = [p["metadata"]["name"] for p in emu.list("pods", namespace)]
        master = next(p for p in pods if p.endswith("-master-0"))
        for pod in pods:
            emu.run_pod(namespace, pod)
        end = time.monotonic() + seconds
        step = 0
        while time.monotonic() < end and not stop.is_set():
            step += 1
            emu.append_log(namespace, master, f"step {step} loss {1 / step:.4f}", container="base")
            time.sleep(0.5)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        emu.set_pod_phase(namespace, master, "Running", container_states={"base": {"terminated": {
            "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
            "message": json.dumps({"metrics": {"loss": 1 / max(step, 1)}})}}})

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def _count(requests: list) -> dict:
    counts = {"list": 0, "watch": 0, "log": 0, "other": 0}
    for request in requests:
        if request.path.endswith("/log"):
            counts["log"] += 1
        elif request.method == "GET" and request.path.endswith("/pods"):
            counts["watch" if request.is_watch else "list"] += 1
        else:
            counts["other"] += 1
    counts["total"] = sum(counts.values())
    return counts


def _run(emu: KubeEmulator, config: str, mode: str, seconds: float) -> dict:
    namespace = f"wait-{mode.replace('_', '-')}"
    emu.create_namespace(namespace)
    build, slots = _job(namespace, REPLICAS)
    hook = PodJobHook(kubernetes_conn_id=None, config_file=config,
                                   client_configuration=client.Configuration())
    handle = hook.ensure_job(namespace, build(None), slots)
    stop = threading.Event()
    emu.reset_requests()
    started = time.monotonic()
    kubelet = _kubelet(emu, namespace, seconds, stop)
    if mode == "deferrable":
        trigger = DistributedJobTrigger(job_name=handle.name, namespace=namespace, replicas=slots_to_json(slots),
                                        startup_timeout=60, started_at=time.time(), kubernetes_conn_id=None,
                                        connection_extras={"kube_config_path": config})

        async def first_event():
            return await anext(trigger.run())

        state = asyncio.run(first_event()).payload["status"]
    else:
        outcome = hook.wait_for_job(namespace, handle.name, slots, startup_timeout=60,
                                    watch_timeout=5 if mode == "sync_short_watch" else WATCH_TIMEOUT,
                                    follow=[slots[0].name], emit=lambda replica, line: None)
        state = "succeeded" if outcome.succeeded else "failed"
    elapsed = time.monotonic() - started
    counts = _count(emu.requests)
    stop.set()
    kubelet.join(5)
    hook.delete_job(namespace, handle.name)
    return {"state": state, "seconds": round(elapsed, 1), "requests": counts}


def measure(seconds: float = 20.0) -> dict:
    results: dict = {"replicas": REPLICAS, "job_seconds": seconds}
    with tempfile.TemporaryDirectory() as tmp, KubeEmulator(bookmark_interval=5.0) as emu:
        config = emu.write_kubeconfig(Path(tmp) / "config")
        for mode in ("sync", "deferrable", "sync_short_watch"):
            results[mode] = _run(emu, config, mode, seconds)
        assert emu.errors == [], emu.errors
    watches = 1 + math.ceil(MINUTES_5 / WATCH_TIMEOUT)  # the first watch, and a reconnect when it times out
    results["per_5_minutes"] = {
        "sync": 1 + watches + 2,  # LIST, watches, the log follow and its reconnect when the container ends
        "deferrable": 1 + watches,
        "polling_pod_operators": int(REPLICAS * MINUTES_5 / POD_OPERATOR_POLL_INTERVAL),
        "poll_interval_seconds": POD_OPERATOR_POLL_INTERVAL,
    }
    return results


if __name__ == "__main__":
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # the replicas' tables are logged: only the figures on stdout
        figures = measure(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0)
    print(json.dumps(figures, indent=2))
