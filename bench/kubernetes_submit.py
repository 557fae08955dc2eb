"""Submitting a job of 10, 100 and 1000 replicas to the Kubernetes API emulator: requests made and wall time.

Side by side in one run, each in a namespace of its own:

- ``hook``: ``DistributedTrainingHook.ensure_job`` (look-up, Service, dependents, pods concurrently, bounded);
- ``plain_same_pods``: the same pod manifests created one by one with the plain ``CoreV1Api`` (no Service, no
  owner, no retries): what any submitter has to send;
- ``plain_bare_pods``: as many one-container pods with no environment, one by one.

Targets: requests = pods + O(1); 1000 replicas in under 2x the time of ``plain_same_pods``. The emulator runs in
this process (it is test infrastructure), so client and server share the CPU, as on the 2-core machines here.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from airflow_distributed.hooks.job_watch import replica_slots  # noqa: E402
from airflow_distributed.hooks.kubernetes import DistributedTrainingHook  # noqa: E402
from airflow_distributed.manifests.kubernetes import (  # noqa: E402
    JobManifestOptions,
    TaskInstanceRef,
    build_job_objects,
    layout_for_kubernetes,
)
from airflow_distributed.plan import KubernetesAddressing, build_plan  # noqa: E402
from airflow_distributed.spec import load_spec  # noqa: E402
from tests.k8s_emulator import KubeEmulator  # noqa: E402

SIZES = (10, 100, 1000)
IMAGE = "registry.example.com/trainer:1.0"


def _job(namespace: str, replicas: int):
    name = f"bench-{replicas}"
    spec = load_spec("pytorch", {"pytorch": {"n_workers": replicas - 1}})
    plan = build_plan(spec, name, KubernetesAddressing(namespace), layout_for_kubernetes(), ["python", "train.py"],
                      backend="kubernetes")
    options = JobManifestOptions(namespace=namespace, image=IMAGE,
                                 task_instance=TaskInstanceRef("bench", "train", f"run-{replicas}"))
    return (lambda uid: build_job_objects(plan, options, owner_uid=uid)), replica_slots(plan)


def _bare_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "base", "image": IMAGE}]}}


def measure(sizes: tuple[int, ...] = SIZES) -> dict:
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results.update(_submit(tmp, sizes))
    return results


def _submit(tmp: str, sizes: tuple[int, ...]) -> dict:
    results: dict[str, dict] = {}
    with KubeEmulator(collect_orphans=False) as emu:
        config = emu.write_kubeconfig(Path(tmp) / "config")

        def core() -> client.CoreV1Api:
            from kubernetes import config as kube_config

            return client.CoreV1Api(kube_config.new_client_from_config(config_file=config))

        for replicas in sizes:
            figures = {}
            # Same bodies for both: built once, outside the timings.
            build, slots = _job(f"plain-{replicas}", replicas)
            same_pods = build(None).pods
            plain = core()
            for label, bodies, namespace in (
                ("plain_same_pods", same_pods, f"plain-{replicas}"),
                ("plain_bare_pods", [_bare_pod(f"bare-{i}") for i in range(replicas)], f"bare-{replicas}"),
            ):
                emu.create_namespace(namespace)
                emu.reset_requests()
                started = time.perf_counter()
                for body in bodies:
                    # The answer read but not turned into a model, as the hook does.
                    answer = plain.create_namespaced_pod(namespace, body, _preload_content=False)
                    answer.data  # noqa: B018
                    answer.release_conn()
                figures[label] = {"seconds": round(time.perf_counter() - started, 3), "requests": len(emu.requests)}

            namespace = f"hook-{replicas}"
            emu.create_namespace(namespace)
            build, slots = _job(namespace, replicas)
            hook = DistributedTrainingHook(kubernetes_conn_id=None, config_file=config,
                                           client_configuration=client.Configuration())
            hook.get_service(namespace, "warm-up")  # connection set-up, as plain's client above had it
            emu.reset_requests()
            started = time.perf_counter()
            handle = hook.ensure_job(namespace, build, slots)
            seconds = time.perf_counter() - started
            methods = Counter(f"{r.method} {r.path.rsplit('/', 1)[-1] if r.method != 'GET' else 'get'}"
                              for r in emu.requests)
            pods = len(emu.list("pods", namespace))
            figures["hook"] = {
                "seconds": round(seconds, 3),
                "requests": len(emu.requests),
                "requests_beyond_pods": len(emu.requests) - pods,
                "by_kind": dict(methods),
                "pods": pods,
                "objects_created": handle.created,
                "concurrency_bound": hook.max_concurrency,
            }
            figures["ratio_hook_vs_plain_same_pods"] = round(seconds / figures["plain_same_pods"]["seconds"], 2)
            figures["ratio_hook_vs_plain_bare_pods"] = round(seconds / figures["plain_bare_pods"]["seconds"], 2)
            results[str(replicas)] = figures
        assert emu.errors == [], emu.errors
    return results


if __name__ == "__main__":
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # logs aside: only the figures on stdout
        figures = measure(tuple(int(arg) for arg in sys.argv[1:]) or SIZES)
    print(json.dumps(figures, indent=2))
