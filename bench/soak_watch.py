"""Soak: a job whose pods stay quiet for a long time (30 minutes by default) must be waited for to the end.

The client runs at the project's defaults (``WatchTimings()``: ``timeoutSeconds`` 300, read timeout 330 s). Two jobs
of three replicas run at once against one server, so that both modes take the time once:

- ``sync``: ``PodJobHook.wait_for_job`` (the operator's wait in a worker), in a thread;
- ``deferrable``: ``DistributedJobTrigger`` (the triggerer's side), in an event loop.

The server is a choice:

- the API emulator (default) with kube-apiserver's timings: a bookmark about every 60 s (the watch cache), watches
  without ``timeoutSeconds`` ended after a random 1x-2x of ``--min-request-timeout`` 1800 s;
- ``--real``: the real control plane of ``tests/kube_control_plane`` (``make kube`` builds it) at its default
  ``--min-request-timeout`` of 1800 s, etcd's progress notifications every 5 s and ``EfficientWatchResumption`` (what
  kubeadm sets from 1.21 on), over TLS, the task as the service account bound to the Role of ``docs/rbac.yaml``,
  the pods bound by the real scheduler to the test kubelet (a Lease renewed every 10 s, as a kubelet does), which
  plays them. Requests come from the audit log.

The benchmark plays the kubelet: the pods run, nothing happens for ``--minutes``, then the master succeeds. It
reports each mode's verdict, how long after the master's exit it came, its requests by verb (in all and per hour),
the bookmarks its watch received, and the CPU seconds of its waiting threads over the quiet spell. Not part of
``bench/run.py`` (it takes the time it soaks); run it as ``python bench/soak_watch.py --minutes 30 [--real]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from airflow_distributed.hooks.kubernetes import PodJobHook  # noqa: E402
from airflow_distributed.jobstate.verdicts import slots_to_json  # noqa: E402
from airflow_distributed.jobstate.watch_stream import ResumableWatch  # noqa: E402
from airflow_distributed.jobstate.watch_timings import WatchTimings  # noqa: E402
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger  # noqa: E402
from bench.kubernetes_submit import _job  # noqa: E402
from tests.integration.test_kubernetes_rbac import role  # noqa: E402
from tests.k8s_emulator import KubeEmulator  # noqa: E402
from tests.kube_control_plane.control_plane import TASK_ACCOUNT, ControlPlane, missing  # noqa: E402
from tests.kube_control_plane.kubelet import KubeletNode  # noqa: E402

REPLICAS = 3
BOOKMARK_INTERVAL = 60.0
MIN_REQUEST_TIMEOUT = 1800
#: Seconds after the waits start before the quiet spell's CPU is counted (the list, the first watch, the log stream).
SETTLE = 15.0
MODES = ("sync", "deferrable")

#: BOOKMARK events seen by the watches, by the watching class (``JobWatch``: the sync wait; ``NamespaceWatch``: the
#: triggers' shared watch of a namespace).
BOOKMARKS: Counter[str] = Counter()


def _count_bookmarks() -> None:
    """Count the bookmarks every watch receives (the product drops them once their resourceVersion is kept)."""
    event = ResumableWatch._event

    def counted(self: ResumableWatch, line: str | bytes) -> Any:
        text = line.decode("utf-8", "replace") if isinstance(line, (bytes, bytearray)) else line
        if '"BOOKMARK"' in text:
            BOOKMARKS[type(self).__name__] += 1
        return event(self, line)

    ResumableWatch._event = counted  # type: ignore[method-assign]


def _thread_cpu(native_id: int) -> float:
    """CPU seconds (user + system) of one thread of this process so far."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class EmulatorServer:
    """The API emulator with kube-apiserver's timings; the benchmark's kubelet is the emulator itself."""

    name = "emulator"

    def __init__(self, tmp: Path) -> None:
        self.emu = KubeEmulator(bookmark_interval=BOOKMARK_INTERVAL, min_request_timeout=MIN_REQUEST_TIMEOUT)
        self.kubelet: Any = self.emu
        self.tmp = tmp

    def __enter__(self) -> EmulatorServer:
        self.emu.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.emu.errors == [], self.emu.errors
        self.emu.__exit__(*exc)

    def namespace(self, namespace: str) -> str:
        """Create ``namespace``; the kubeconfig the task talks there with."""
        self.emu.create_namespace(namespace)
        return self.emu.write_kubeconfig(self.tmp / f"{namespace}.config")

    def reset(self) -> None:
        self.emu.reset_requests()

    def requests(self, namespace: str) -> dict[str, int]:
        return self.emu.request_counts(rf"/namespaces/{namespace}/pods$")

    def close_namespace(self, namespace: str) -> None:
        pass


class RealServer:
    """The real control plane at its default timings, one test kubelet; the task's requests from the audit log."""

    name = "real"

    def __init__(self, tmp: Path) -> None:
        self.plane = ControlPlane(min_request_timeout=MIN_REQUEST_TIMEOUT)
        self.kubelet: Any = None
        self._before: set[str] = set()

    def __enter__(self) -> RealServer:
        reason = missing()
        assert reason is None, reason
        self.plane.start()
        try:
            # A Lease renewal every 10 s, as a kubelet's; pods deleted only at the end, so a slow reaper.
            self.kubelet = KubeletNode(self.plane, heartbeat=10.0, reap_interval=2.0).start()
        except BaseException:
            self.plane.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        errors = list(self.kubelet.errors)
        self.kubelet.stop()
        self.plane.stop()
        assert errors == [], errors

    def namespace(self, namespace: str) -> str:
        self.plane.create_namespace(namespace)
        return self.plane.bind_role(namespace, role("airflow-distributed"), TASK_ACCOUNT)

    def _events(self, namespace: str) -> dict[str, dict]:
        user = f"system:serviceaccount:{namespace}:{TASK_ACCOUNT}"
        return {e["auditID"]: e for e in self.plane.audit_events(user)}

    def reset(self) -> None:
        self._before = {audit_id for ns in (f"soak-{m}" for m in MODES) for audit_id in self._events(ns)}

    def requests(self, namespace: str) -> dict[str, int]:
        """The task's requests since ``reset`` by ``verb resource[/subresource]``."""
        counts: Counter[str] = Counter()
        for audit_id, event in self._events(namespace).items():
            if audit_id not in self._before:
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                counts[f"{event['verb']} {resource}"] += 1
        return dict(sorted(counts.items()))

    def close_namespace(self, namespace: str) -> None:
        self.plane.delete_namespace(namespace)


def _succeed_master(kubelet: Any, namespace: str) -> None:
    master = next(p["metadata"]["name"] for p in kubelet.list("pods", namespace)
                  if p["metadata"]["name"].endswith("-master-0"))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    kubelet.set_pod_phase(namespace, master, "Running", container_states={"base": {"terminated": {
        "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
        "message": json.dumps({"metrics": {"loss": 0.1}})}}})


def soak(minutes: float, real: bool = False) -> dict:
    quiet = minutes * 60
    timings = WatchTimings()
    _count_bookmarks()
    results: dict = {"server": "real" if real else "emulator", "minutes_quiet": minutes, "replicas": REPLICAS,
                     "min_request_timeout": MIN_REQUEST_TIMEOUT, "watch_timings": timings.as_dict(),
                     "load_before": os.getloadavg()}
    if not real:
        results["bookmark_interval"] = BOOKMARK_INTERVAL
    with tempfile.TemporaryDirectory() as tmp, (RealServer if real else EmulatorServer)(Path(tmp)) as server:
        jobs = {}
        for mode in MODES:
            namespace = f"soak-{mode}"
            config = server.namespace(namespace)
            hook = PodJobHook(kubernetes_conn_id=None, config_file=config,
                                           client_configuration=client.Configuration())
            build, slots = _job(namespace, REPLICAS)
            handle = hook.ensure_job(namespace, build(None), slots)
            for pod in server.kubelet.list("pods", namespace):
                server.kubelet.run_pod(namespace, pod["metadata"]["name"])
            jobs[mode] = (namespace, handle.name, slots, hook, config)
        server.reset()
        started = time.monotonic()
        outcome: dict = {}
        waiters: dict[str, list[int]] = {"sync": [], "deferrable": [threading.get_native_id()]}
        cpu: dict[str, float] = {}
        exited: list[float] = []

        def sync_wait() -> None:
            waiters["sync"].append(threading.get_native_id())
            namespace, name, slots, hook, _ = jobs["sync"]
            try:
                ended = hook.wait_for_job(namespace, name, slots, startup_timeout=60, watch_timings=timings)
                outcome["sync"] = ("succeeded" if ended.succeeded else "failed", time.monotonic())
            except Exception as error:
                outcome["sync"] = (f"error: {error}", time.monotonic())

        async def deferred_wait() -> None:
            namespace, name, slots, _, config = jobs["deferrable"]
            trigger = DistributedJobTrigger(job_name=name, namespace=namespace, replicas=slots_to_json(slots),
                                            startup_timeout=60, started_at=time.time(), kubernetes_conn_id=None,
                                            connection_extras={"kube_config_path": config},
                                            watch_timings=timings.as_dict())
            event = await anext(trigger.run())
            state = event.payload["status"]
            if state == "error":
                state = f"error: {event.payload.get('message')}"
            outcome["deferrable"] = (state, time.monotonic())

        def waiting_cpu() -> dict[str, float]:
            # the sync wait's own thread and its master-log follower (a thread named log-<pod>)
            followers = [t.native_id for t in threading.enumerate() if t.name.startswith("log-") and t.native_id]
            ids = {"sync": waiters["sync"] + followers, "deferrable": waiters["deferrable"]}
            return {mode: sum(_thread_cpu(i) for i in ids[mode]
                              if Path(f"/proc/self/task/{i}").exists()) for mode in MODES}

        def kubelet() -> None:
            time.sleep(SETTLE)
            cpu.update({f"{mode}_start": value for mode, value in waiting_cpu().items()})
            time.sleep(max(0.0, quiet - SETTLE))  # the quiet hours: no pod changes, no log line
            cpu.update({f"{mode}_end": value for mode, value in waiting_cpu().items()})
            results["load_at_end_of_quiet"] = os.getloadavg()
            exited.append(time.monotonic())
            for namespace, *_ in jobs.values():
                _succeed_master(server.kubelet, namespace)

        threads = [threading.Thread(target=sync_wait, daemon=True), threading.Thread(target=kubelet, daemon=True)]
        for thread in threads:
            thread.start()
        asyncio.run(deferred_wait())
        for thread in threads:
            thread.join(quiet + 600)
        time.sleep(2.0)  # the audit log's last lines
        for mode, (namespace, name, _, hook, _) in jobs.items():
            state, at = outcome.get(mode, ("no verdict", time.monotonic()))
            seconds = at - started
            requests = server.requests(namespace)
            results[mode] = {
                "state": state, "seconds": round(seconds, 1),
                "after_master_exit": round(at - exited[0], 3) if exited else None,
                "requests": requests,
                "per_hour": {verb: round(n * 3600 / seconds, 1) for verb, n in requests.items()},
                "bookmarks": BOOKMARKS["JobWatch" if mode == "sync" else "NamespaceWatch"],
                "cpu_quiet_seconds": round(cpu.get(f"{mode}_end", 0) - cpu.get(f"{mode}_start", 0), 4)
                if cpu else None,
            }
            hook.delete_job(namespace, name)
            server.close_namespace(namespace)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the pods stay quiet")
    parser.add_argument("--real", action="store_true", help="the real control plane instead of the emulator")
    arguments = parser.parse_args()
    with contextlib.redirect_stdout(sys.stderr):  # the replicas' tables are logged: only the figures on stdout
        figures = soak(arguments.minutes, real=arguments.real)
    print(json.dumps(figures, indent=2))
