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
  trigger's event, median and most; target the same as with a watch per job;
- ``all_end``: every other job ends at once (8 threads write the masters' exits): seconds from the first write to
  the last verdict, each verdict after its own write, the loop's lag meanwhile; ``quiet`` has the loop's lag too.

``--api real``: the real control plane of ``tests/kube_control_plane`` (``make kube`` builds it) instead of the
emulator, over TLS: kube-apiserver at its default timings, the real scheduler binding every pod to one test kubelet,
the triggers talking as one service account bound to the Role of docs/rbac.yaml in every namespace, requests from
the audit log. No drop there (the real server has no control for it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402 (an Airflow dependency)

from airflow_distributed.jobstate.verdicts import replica_slots, slots_to_json  # noqa: E402
from airflow_distributed.manifests.kubernetes import (  # noqa: E402
    POD_LAUNCH,
    JobManifestOptions,
    build_job_objects,
    layout_for_kubernetes,
    to_dict,
)
from airflow_distributed.plan import KubernetesAddressing, build_plan  # noqa: E402
from airflow_distributed.spec import load_spec  # noqa: E402
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger  # noqa: E402
from tests.integration.test_kubernetes_rbac import role  # noqa: E402
from tests.k8s_emulator.process import EmulatorProcess  # noqa: E402
from tests.kube_control_plane.control_plane import ControlPlane, missing  # noqa: E402
from tests.kube_control_plane.kubelet import CAPACITY, KubeletNode  # noqa: E402

JOBS = 1000
REPLICAS = 2
NAMESPACES = 10
IMAGE = "registry.example.com/trainer:1.0"
MB = 1024 * 1024
#: The real server's writers of the kubelet's pod statuses, at once (the test kubelet's calls block on each answer).
WRITERS = 8
#: The triggers' identity on the real server: one service account, bound in every namespace to the Role of
#: docs/rbac.yaml (a triggerer holds one connection for every job).
TRIGGERER_ACCOUNT = "airflow-triggerer"
#: Audit verbs as the emulator's ``request_summary`` names requests (HTTP method, WATCH for a watch).
METHODS = {"get": "GET", "list": "GET", "watch": "WATCH", "create": "POST", "update": "PUT", "patch": "PATCH",
           "delete": "DELETE", "deletecollection": "DELETE"}


class LagMonitor:
    """How late a 10 ms timer of the loop runs: the loop's longest iteration, give or take the period; and the
    longest pause of the garbage collector meanwhile (a full collection walks every trigger's objects)."""

    def __init__(self, period: float = 0.01) -> None:
        self.period, self.lags, self.rss_peak = period, [], 0
        self.recording = False
        self.gc_pauses: list[float] = []
        self._gc_started = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self.recording:
            self.gc_pauses.append(time.perf_counter() - self._gc_started)

    async def run(self) -> None:
        me = psutil.Process()
        ticks = 0
        while True:
            due = time.perf_counter() + self.period
            await asyncio.sleep(self.period)
            if self.recording:
                self.lags.append(time.perf_counter() - due)
                ticks += 1
                if ticks % 10 == 0:
                    self.rss_peak = max(self.rss_peak, me.memory_info().rss)

    def start(self) -> None:
        self.lags, self.gc_pauses, self.recording = [], [], True

    def summary(self) -> dict[str, float]:
        """The lateness since ``start``, in ms: most, 99th percentile, median (and the ticks measured); the longest
        collection of the garbage collector and how many there were."""
        self.recording = False
        lags = sorted(self.lags) or [0.0]
        return {"max": round(lags[-1] * 1000, 1), "p99": round(lags[int(len(lags) * 0.99)] * 1000, 1),
                "median": round(lags[len(lags) // 2] * 1000, 1), "ticks": len(self.lags),
                "gc_longest": round(max(self.gc_pauses, default=0.0) * 1000, 1), "gc_runs": len(self.gc_pauses)}


class AuditTail:
    """The requests of one user in the real server's audit log, read on from where the last read ended."""

    def __init__(self, path: Path, user: str) -> None:
        self.path, self.user = path, user
        self.needle = f'"username":"{user}"'.encode()
        self.offset = 0
        #: auditID -> (Kubernetes verb, request path without its query, "METHOD resource[/subresource]")
        self.requests: dict[str, tuple[str, str, str]] = {}

    def read(self) -> dict[str, tuple[str, str, str]]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        data = data[:data.rfind(b"\n") + 1]  # a last line still being written is read next time
        self.offset += len(data)
        for line in data.splitlines():
            if self.needle not in line:
                continue
            event = json.loads(line)
            if (event.get("user") or {}).get("username") != self.user or event["auditID"] in self.requests:
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            self.requests[event["auditID"]] = (event["verb"], event["requestURI"].split("?")[0],
                                               f"{METHODS.get(event['verb'], event['verb'])} {resource}")
        return self.requests


class RealCluster:
    """What the benchmark asks of the emulator, of the real control plane of ``tests/kube_control_plane``: one test
    kubelet with room for every pod, the real scheduler binding them to it, the triggers' requests from the audit
    log. The triggers talk over TLS as ``TRIGGERER_ACCOUNT``, bound to the Role of docs/rbac.yaml in each namespace.
    """

    def __init__(self, pods: int) -> None:
        self.pods = pods
        self.plane = ControlPlane()
        self.node: KubeletNode | None = None
        self.audit: AuditTail | None = None
        self._since: set[str] = set()

    def __enter__(self) -> RealCluster:
        reason = missing()
        assert reason is None, reason
        self.plane.start()
        try:
            capacity = {**CAPACITY, "cpu": "4000", "memory": "64Ti", "pods": str(self.pods + 10)}
            # A kubelet's Lease every 10 s. No reaping: the pods go with the control plane, and each look would
            # list every pod of the node in this process (10 MB of JSON parsed, the loop's GIL held meanwhile).
            self.node = KubeletNode(self.plane, capacity=capacity, heartbeat=10.0, reap_interval=3600.0).start()
        except BaseException:
            self.plane.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.node is not None:
            self.node.stop()
        self.plane.stop()

    @property
    def port(self) -> int:
        return self.plane.port

    def create_namespace(self, namespace: str) -> None:
        self.plane.create_namespace(namespace)

    def write_kubeconfig(self, path: Path, namespaces: list[str]) -> str:
        """The triggers' kubeconfig: ``TRIGGERER_ACCOUNT`` (in the first namespace), bound in every namespace."""
        home = namespaces[0]
        self.plane.request("POST", f"/api/v1/namespaces/{home}/serviceaccounts",
                           {"metadata": {"name": TRIGGERER_ACCOUNT}})
        granted = role("airflow-distributed")
        name = granted["metadata"]["name"]
        for namespace in namespaces:
            self.plane.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                               {**granted, "metadata": {"name": name}})
            self.plane.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
                "metadata": {"name": f"{name}-{TRIGGERER_ACCOUNT}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": TRIGGERER_ACCOUNT, "namespace": home}]})
        self.audit = AuditTail(self.plane.audit_log, f"system:serviceaccount:{home}:{TRIGGERER_ACCOUNT}")
        return self.plane.kubeconfig(path, self.plane.service_account_token(home, TRIGGERER_ACCOUNT), home)

    def create_pods(self, pods: list[dict]) -> None:
        """Create every pod (as the admin), then run each once the scheduler has bound it."""
        def create(pod: dict) -> None:
            self.plane.request("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)

        def run(pod: dict) -> None:
            assert self.node is not None
            self.node.run_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])

        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(create, pods))
            list(pool.map(run, pods))

    def _requests(self) -> list[tuple[str, str, str]]:
        assert self.audit is not None
        return [request for audit_id, request in self.audit.read().items() if audit_id not in self._since]

    def reset_requests(self) -> None:
        assert self.audit is not None
        self._since = set(self.audit.read())

    def request_count(self) -> int:
        return len(self._requests())

    def request_summary(self) -> dict[str, int]:
        return dict(Counter(summary for _, _, summary in self._requests()))

    def request_counts(self, path_regex: str = ".*") -> dict[str, int]:
        pattern = re.compile(path_regex)
        return dict(Counter(verb for verb, path, _ in self._requests() if pattern.search(path)))

    def set_pod_phase(self, namespace: str, name: str, phase: str, **kwargs: Any) -> dict:
        assert self.node is not None
        return self.node.set_pod_phase(namespace, name, phase, **kwargs)

    def call(self, name: str) -> Any:
        """The emulator's controls: ``errors`` (the kubelet's); no other (no count of open watches, no drop)."""
        if name == "errors":
            assert self.node is not None
            return list(self.node.errors)
        raise AttributeError(f"the real server has no control {name!r}")


def _namespace(index: int) -> str:
    return f"triggerer-{index}"


def _create_jobs(emu: EmulatorProcess | RealCluster, jobs: int, replicas: int, namespaces: int
                 ) -> list[tuple[str, str, list]]:
    """``jobs`` jobs of ``replicas`` running pods each, spread over ``namespaces``, written straight into the
    server (no Service, no ConfigMap: the triggers read pods only); (namespace, name, slots) each."""
    spec = load_spec("pytorch", {"pytorch": {"n_workers": replicas - 1}})
    made, pods = [], []
    for index in range(jobs):
        namespace, name = _namespace(index % namespaces), f"job-{index:04d}"
        plan = build_plan(spec, name, KubernetesAddressing(namespace), layout_for_kubernetes(),
                          ["python", "train.py"], backend="kubernetes", launch=POD_LAUNCH)
        pods += [to_dict(pod) for pod in build_job_objects(plan, JobManifestOptions(namespace=namespace,
                                                                                    image=IMAGE)).pods]
        made.append((namespace, name, slots_to_json(replica_slots(plan))))
    if isinstance(emu, RealCluster):
        emu.create_pods(pods)
        return made
    for pod in pods:
        emu.create("pods", pod["metadata"]["namespace"], pod)
        emu.run_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
    return made


def _trimmed_rss_mb(me: psutil.Process) -> float:
    """Resident memory once the garbage is collected and the C allocator has given its free pages back: what is
    held, not what was freed but kept (a diagnosis; a triggerer does not do this)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return round(me.memory_info().rss / MB, 1)


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


async def _hold(emu: EmulatorProcess | RealCluster, config: str, jobs: list[tuple[str, str, list]], namespaces: int,
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
    monitor = LagMonitor()
    tasks = [asyncio.create_task(monitor.run())]
    tasks += [asyncio.create_task(run(trigger)) for trigger in triggers]
    try:
        # Settled: every namespace watched and no new watch for 3 s (a watch per job: 1000; shared: 10).
        settled = await _steady(lambda: _watches(emu), namespaces, timeout=300)
        figures["settle_seconds"] = round(time.monotonic() - started, 1)
        # (on the real server this process's other clients, the kubelet's and the admin's, use the same port)
        connections = _open_connections(emu.port) if isinstance(emu, EmulatorProcess) else None
        figures["watches"] = {"requests": _watches(emu), "open_connections": connections,
                              "open_watches": _open_watches(emu),
                              "most_of_one_namespace": _most_watches_of_a_namespace(emu, namespaces),
                              "requests_until_settled": emu.request_summary(), "seconds_to_open": round(settled, 1)}
        figures["rss_mb"]["holding"] = round(me.memory_info().rss / MB, 1)
        figures["rss_mb"]["per_job_kb"] = round(
            (figures["rss_mb"]["holding"] - figures["rss_mb"]["before"]) * 1024 / len(jobs), 1)
        figures["rss_mb"]["holding_after_trim"] = _trimmed_rss_mb(me)

        if quiet_seconds > 0:
            emu.reset_requests()
            monitor.start()
            cpu = time.thread_time()  # the loop's thread: the triggers' work, not the kubelet's threads
            await asyncio.sleep(quiet_seconds)
            quiet = emu.request_count()
            figures["quiet"] = {"seconds": quiet_seconds, "requests": quiet,
                                "per_minute": round(quiet * 60 / quiet_seconds, 1), "by_kind": emu.request_summary(),
                                "loop_lag_ms": monitor.summary(),
                                "loop_cpu_seconds": round(time.thread_time() - cpu, 2)}

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
        figures["all_end"] = await _end_all(emu, jobs[namespaces:], events, monitor)
        figures["rss_mb"]["after"] = round(me.memory_info().rss / MB, 1)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return figures


def _master_exits(emu: EmulatorProcess | RealCluster, namespace: str, replicas: list) -> None:
    """The master's ``base`` container ends with 0 (the pod still Running: its XCom sidecar)."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": 0, "reason": "Completed", "startedAt": at, "finishedAt": at}
    emu.set_pod_phase(namespace, replicas[0][0], "Running", container_states={"base": {"terminated": terminated}})


async def _end_all(emu: EmulatorProcess | RealCluster, jobs: list[tuple[str, str, list]],
                   events: dict[str, tuple[float, dict[str, Any]]], monitor: LagMonitor) -> dict[str, Any]:
    """Every job left ends at once, its master's exit written by ``WRITERS`` threads (the kubelets): seconds from the
    first write to the last verdict, each job's verdict after the start of its own write, the loop's lag meanwhile.
    """
    written: dict[str, float] = {}

    def end(job: tuple[str, str, list]) -> None:
        namespace, name, replicas = job
        written[name] = time.monotonic()
        _master_exits(emu, namespace, replicas)

    def write_all() -> float:
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(end, jobs))
        return time.monotonic()

    emu.reset_requests()
    monitor.start()
    cpu = time.thread_time()
    started = time.monotonic()
    writes_done = await asyncio.to_thread(write_all)
    await _until(lambda: all(name in events for _, name, _ in jobs), timeout=900, step=0.05)
    lag, cpu = monitor.summary(), time.thread_time() - cpu
    last = max(events[name][0] for _, name, _ in jobs)
    late = sorted(events[name][0] - written[name] for _, name, _ in jobs)
    return {"jobs": len(jobs), "statuses": sorted({events[name][1]["status"] for _, name, _ in jobs}),
            "seconds_writing": round(writes_done - started, 1),
            "seconds_to_last_verdict": round(last - started, 1),
            "verdict_after_write_seconds": {"median": round(late[len(late) // 2], 3),
                                            "p99": round(late[int(len(late) * 0.99)], 3), "most": round(late[-1], 3)},
            "loop_lag_ms": lag, "loop_cpu_seconds": round(cpu, 1),
            "requests": emu.request_summary()}


async def _end_one_job_per_namespace(emu: EmulatorProcess | RealCluster, jobs: list[tuple[str, str, list]],
                                     namespaces: int, events: dict[str, tuple[float, dict[str, Any]]]
                                     ) -> dict[str, Any]:
    """The first job of each namespace ends, one after the other: seconds from the write to its trigger's event."""
    seconds, statuses = [], []
    for namespace, name, replicas in jobs[:namespaces]:
        written = time.monotonic()
        await asyncio.to_thread(_master_exits, emu, namespace, replicas)
        await _until(lambda name=name: name in events, timeout=60, step=0.005)
        fired, payload = events[name]
        seconds.append(fired - written)
        statuses.append(payload["status"])
    seconds.sort()
    return {"jobs": len(seconds), "statuses": sorted(set(statuses)),
            "median_seconds": round(seconds[len(seconds) // 2], 3), "most_seconds": round(seconds[-1], 3)}


def measure_real(jobs: int = JOBS, replicas: int = REPLICAS, quiet_seconds: float = 60.0,
                 namespaces: int = NAMESPACES) -> dict[str, Any]:
    """One triggerer (this process) against the real control plane, over TLS (no drop: it has no control for it)."""
    results: dict[str, Any] = {"jobs": jobs, "namespaces": namespaces, "replicas_per_job": replicas,
                               "api": "real kube-apiserver, https, cluster CA and a service account's token",
                               "load_before": os.getloadavg()}
    names = [_namespace(index) for index in range(namespaces)]
    with tempfile.TemporaryDirectory() as tmp, RealCluster(jobs * replicas) as cluster:
        for namespace in names:
            cluster.create_namespace(namespace)
        config = cluster.write_kubeconfig(Path(tmp) / "config", names)
        created = time.monotonic()
        made = _create_jobs(cluster, jobs, replicas, namespaces)
        results["seconds_to_create_and_run_pods"] = round(time.monotonic() - created, 1)
        results.update(asyncio.run(_hold(cluster, config, made, namespaces, quiet_seconds, 0.0)))
        results["refused"] = cluster.plane.refused(cluster.audit.user) if cluster.audit else None
        results["kubelet_errors"] = len(cluster.call("errors"))
        results["load_after"] = os.getloadavg()
    return results


def measure_one(jobs: int = JOBS, replicas: int = REPLICAS, quiet_seconds: float = 60.0,
                after_drop_seconds: float = 20.0, *, tls: bool = True, namespaces: int = NAMESPACES
                ) -> dict[str, Any]:
    """One triggerer (this process) against one emulator; ``tls``: HTTPS with a cluster CA in the kubeconfig."""
    results: dict[str, Any] = {"jobs": jobs, "namespaces": namespaces, "replicas_per_job": replicas,
                               "api": "https, cluster CA in the kubeconfig" if tls else "http, no CA",
                               "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp, EmulatorProcess(bookmark_interval=60.0, tls=tls) as emu:
        config = emu.write_kubeconfig(Path(tmp) / "config")
        for index in range(namespaces):
            emu.create_namespace(_namespace(index))
        made = _create_jobs(emu, jobs, replicas, namespaces)
        results.update(asyncio.run(_hold(emu, config, made, namespaces, quiet_seconds, after_drop_seconds)))
        errors = emu.call("errors")
        results["emulator_errors"] = len(errors)
        results["load_after"] = os.getloadavg()
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
    parser.add_argument("--api", choices=("https", "http", "both", "real"), default="both",
                        help="the emulator over https, http or both (each in a fresh interpreter), or the real "
                             "control plane of tests/kube_control_plane over https (`make kube` builds it)")
    parser.add_argument("--ssl-read-buffer-kb", type=int, default=None,
                        help="experiment: asyncio's read buffer of every TLS connection, in KiB (default 256), to "
                             "show how much of the memory of 1000 open watches it is; not something the triggers set")
    args = parser.parse_args()
    if args.ssl_read_buffer_kb is not None:
        import asyncio.sslproto

        asyncio.sslproto.SSLProtocol.max_size = args.ssl_read_buffer_kb * 1024
    with contextlib.redirect_stdout(sys.stderr):  # the triggers' logs aside: only the figures on stdout
        if args.api == "real":
            figures = measure_real(args.jobs, args.replicas, args.quiet_seconds, args.namespaces)
        elif args.api == "both":
            figures = measure(args.jobs, args.replicas, args.quiet_seconds, args.after_drop_seconds, args.namespaces)
        else:
            figures = measure_one(args.jobs, args.replicas, args.quiet_seconds, args.after_drop_seconds,
                                  tls=args.api == "https", namespaces=args.namespaces)
    if args.output:
        Path(args.output).write_text(json.dumps(figures))
    else:
        print(json.dumps(figures, indent=2))
