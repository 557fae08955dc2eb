"""Submitting a job of 10, 100 and 1000 replicas to the Kubernetes API emulator: requests made and wall time.

Side by side in one run, each in a namespace of its own:

- ``hook``: ``PodJobHook.ensure_job`` (look-up, Service, dependents, pods concurrently, bounded);
- ``plain_same_pods``: the same pod bodies (ownerReference included, built outside the timing) created one by
  one with the plain ``CoreV1Api`` (no Service, no retries): what any submitter has to send;
- ``plain_bare_pods``: as many one-container pods with no environment, one by one.

``ROUNDS`` rounds in a rotating order; medians. Targets: requests = pods + O(1); at 1000 replicas the hook in at
most 1.15x the time of ``plain_same_pods``. The emulator runs in a process of its own (``EmulatorProcess``), so
that the client's and the server's work do not share one GIL; the CPU seconds of both are printed too.

``--real``: against the real control plane of ``tests/kube_control_plane`` (``make kube`` builds it) instead, as its
admin: requests counted from its audit log, the server's CPU that of kube-apiserver (etcd's apart). No node: the
pods stay pending (the scheduler's attempts load the server as on a cluster short of room).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402 (an Airflow dependency)
from kubernetes import client  # noqa: E402
from kubernetes import config as kube_config  # noqa: E402

from airflow_distributed.hooks.kubernetes import PodJobHook  # noqa: E402
from airflow_distributed.jobstate.verdicts import replica_slots  # noqa: E402
from airflow_distributed.manifests.kubernetes import (  # noqa: E402
    POD_LAUNCH,
    JobManifestOptions,
    TaskInstanceRef,
    build_job_objects,
    layout_for_kubernetes,
    to_dict,
)
from airflow_distributed.plan import KubernetesAddressing, build_plan  # noqa: E402
from airflow_distributed.spec import load_spec  # noqa: E402
from tests.k8s_emulator.process import EmulatorProcess  # noqa: E402
from tests.kube_control_plane.control_plane import ControlPlane, missing  # noqa: E402

SIZES = (10, 100, 1000)
ROUNDS = 5
SUBMITTERS = ("hook", "plain_same_pods", "plain_bare_pods")
IMAGE = "registry.example.com/trainer:1.0"


def _job(namespace: str, replicas: int):
    name = f"bench-{replicas}"
    spec = load_spec("pytorch", {"pytorch": {"n_workers": replicas - 1}})
    plan = build_plan(spec, name, KubernetesAddressing(namespace), layout_for_kubernetes(), ["python", "train.py"],
                      backend="kubernetes", launch=POD_LAUNCH)
    options = JobManifestOptions(namespace=namespace, image=IMAGE,
                                 task_instance=TaskInstanceRef("bench", "train", f"run-{replicas}"))
    return (lambda uid: build_job_objects(plan, options, owner_uid=uid)), replica_slots(plan)


def to_dicts(models: list) -> list[dict]:
    return [to_dict(m) for m in models]


def _cpu(server: psutil.Process) -> tuple[float, float]:
    """CPU seconds used so far by this process (the client) and by the emulator's."""
    times = server.cpu_times()
    return time.process_time(), times.user + times.system


def _bare_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": IMAGE}]}}


class RealServer:
    """What ``_size`` asks of the emulator, of the real control plane: its admin's requests from the audit log."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.pid = next(p.popen.pid for p in plane.processes if p.name == "kube-apiserver")
        self._namespace, self._before = "", 0

    def write_kubeconfig(self, path: Path) -> str:
        return self.plane.kubeconfig(path, self.plane.tokens["admin"])

    def create_namespace(self, namespace: str) -> None:
        self.plane.create_namespace(namespace)  # with its default service account: pods are admitted only then
        self._namespace = namespace

    def _requests(self) -> int:
        return len({e["auditID"] for e in self.plane.audit_events("admin")
                    if (e.get("objectRef") or {}).get("namespace") == self._namespace})

    def reset_requests(self) -> None:
        self._before = self._requests()

    def count(self, plural: str, namespace: str) -> int:
        return len(self.plane.request("GET", f"/api/v1/namespaces/{namespace}/{plural}")["items"])

    def request_count(self) -> int:
        """The admin's requests in the namespace since ``reset_requests``, but for ``count``'s own LIST."""
        return self._requests() - self._before - 1

    def delete(self, plural: str, namespace: str | None, name: str) -> None:
        self.plane.delete_namespace(name)

    def call(self, what: str) -> list:
        self.plane.check_alive()
        return []


def measure(sizes: tuple[int, ...] = SIZES, rounds: int = ROUNDS, real: bool = False) -> dict:
    results: dict[str, dict] = {}
    if real:
        reason = missing()
        assert reason is None, reason
        with tempfile.TemporaryDirectory() as tmp, ControlPlane() as plane:
            server = RealServer(plane)
            config = server.write_kubeconfig(Path(tmp) / "config")
            for replicas in sizes:
                results[str(replicas)] = _size(server, config, replicas, rounds)  # type: ignore[arg-type]
        return results
    with tempfile.TemporaryDirectory() as tmp, EmulatorProcess(collect_orphans=False) as emu:
        config = emu.write_kubeconfig(Path(tmp) / "config")
        for replicas in sizes:
            results[str(replicas)] = _size(emu, config, replicas, rounds)
        errors = emu.call("errors")
        assert errors == [], errors
    return results


def _size(emu: EmulatorProcess, config: str, replicas: int, rounds: int) -> dict:
    """``rounds`` rounds of the three submitters, in a rotating order; medians, and every round's seconds."""
    plain = client.CoreV1Api(kube_config.new_client_from_config(config_file=config))
    hook = PodJobHook(kubernetes_conn_id=None, config_file=config,
                                   client_configuration=client.Configuration())
    hook.get_service("default", "warm-up")  # connection set-up, as plain's client has it after its first round
    plain.list_namespaced_pod("default")
    runs: dict[str, list[dict]] = {label: [] for label in SUBMITTERS}
    server = psutil.Process(emu.pid)
    for round_ in range(rounds):
        order = SUBMITTERS[round_ % len(SUBMITTERS):] + SUBMITTERS[:round_ % len(SUBMITTERS)]
        for label in order:
            namespace = f"{label.replace('_', '-')}-{replicas}-{round_}"
            emu.create_namespace(namespace)
            build, slots = _job(namespace, replicas)
            emu.reset_requests()
            cpu = _cpu(server)
            if label == "hook":
                started = time.perf_counter()
                handle = hook.ensure_job(namespace, build(None), slots)
                seconds = time.perf_counter() - started
                extra = {"objects_created": handle.created}
            else:
                # Same bodies as the hook's (built once, outside the timing), or bare one-container pods.
                bodies = (to_dicts(build("0" * 8).pods) if label == "plain_same_pods"
                          else [_bare_pod(f"bare-{i}") for i in range(replicas)])
                started = time.perf_counter()
                for body in bodies:
                    # The answer read but not turned into a model, as the hook does.
                    answer = plain.create_namespaced_pod(namespace, body, _preload_content=False)
                    answer.data  # noqa: B018
                    answer.release_conn()
                seconds = time.perf_counter() - started
                extra = {}
            client_cpu, server_cpu = (after - before for after, before in zip(_cpu(server), cpu, strict=True))
            extra.update(client_cpu=client_cpu, server_cpu=server_cpu)
            pods = emu.count("pods", namespace)
            requests = emu.request_count()
            runs[label].append({"seconds": seconds, "requests": requests, "pods": pods, **extra})
            emu.delete("namespaces", None, namespace)  # keep the emulator's store the same size for every round
    figures: dict[str, Any] = {"rounds": rounds}
    for label, measured in runs.items():
        figures[label] = {
            "seconds": round(statistics.median(r["seconds"] for r in measured), 3),
            "each": [round(r["seconds"], 3) for r in measured],
            # CPU seconds: less noisy than wall time on a shared machine, and they say which side the time is on
            "client_cpu": round(statistics.median(r["client_cpu"] for r in measured), 3),
            "server_cpu": round(statistics.median(r["server_cpu"] for r in measured), 3),
            "requests": measured[-1]["requests"],
            "pods": measured[-1]["pods"],
        }
    hook_runs = runs["hook"]
    figures["hook"].update(requests_beyond_pods=hook_runs[-1]["requests"] - hook_runs[-1]["pods"],
                           objects_created=hook_runs[-1]["objects_created"], concurrency_bound=hook.max_concurrency)
    figures["ratio_hook_vs_plain_same_pods"] = round(
        figures["hook"]["seconds"] / figures["plain_same_pods"]["seconds"], 2)
    figures["ratio_hook_vs_plain_bare_pods"] = round(
        figures["hook"]["seconds"] / figures["plain_bare_pods"]["seconds"], 2)
    return figures


if __name__ == "__main__":
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # logs aside: only the figures on stdout
        args = [arg for arg in sys.argv[1:] if arg != "--real"]
        rounds = ROUNDS
        if "--rounds" in args:
            at = args.index("--rounds")
            rounds = int(args[at + 1])
            del args[at:at + 2]
        figures = measure(tuple(int(arg) for arg in args) or SIZES, rounds, real="--real" in sys.argv[1:])
    print(json.dumps(figures, indent=2))
