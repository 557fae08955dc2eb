"""Helpers shared by the tests that run against the Kubernetes API emulator.

``Player`` runs a test's script in a background thread and surfaces its failure; ``CustomJobController`` is the
part the stand-in Kubeflow and Trainer controllers share; ``crd_emulator`` is the module fixture of their tests.
``Kubelet`` plays the kubelet for a job's pods; ``make_job``/``new_hook`` build a job and a hook the way the
operator does; ``trigger_for``/``first_event`` run the deferrable trigger; the rest read what the emulator holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from typing import Any, Self

import pytest
from kubernetes import client

from airflow_distributed.hooks.api_retry import RetryPolicy
from airflow_distributed.hooks.kubernetes import PodJobHook
from airflow_distributed.jobstate.verdicts import replica_slots, slots_to_json
from airflow_distributed.manifests.horovod_ssh import generate_ssh_key_pair
from airflow_distributed.manifests.kubernetes import (
    POD_LAUNCH,
    JobManifestOptions,
    TaskInstanceRef,
    build_job_objects,
    layout_for_kubernetes,
)
from airflow_distributed.naming import job_name
from airflow_distributed.plan import KubernetesAddressing, build_plan
from airflow_distributed.spec import load_spec
from airflow_distributed.triggers.kubernetes import DistributedJobTrigger
from tests.helpers import wait_until
from tests.k8s_emulator import KubeEmulator

JOB_LABEL = "airflow-distributed/job"
#: ``path_regex`` of a namespace's pod collection, for ``KubeEmulator.wait_for_requests``: the job's list and watches.
PODS = "/api/v1/namespaces/{}/pods$"
DOCUMENT = {
    "metrics": {"loss": 0.125, "accuracy": 0.97},
    "model_path": "s3://models/nightly/run-42",
    "history": [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}, {"step": 3, "loss": 0.125}],
}


# ---------------------------------------------------------------------------------------------- players


class Player:
    """Something a test plays in a background thread while the code under test runs.

    ``play(script)`` runs ``prepare()`` then ``script(self)`` in a daemon thread; ``check()`` waits for it and fails
    the test with the script's traceback, which would otherwise be lost in its thread.
    """

    thread_name = "player"

    def __init__(self) -> None:
        self.errors: list[str] = []
        self._thread: threading.Thread | None = None

    def prepare(self) -> None:
        """What the thread does before the script: nothing here."""

    def play(self, script: Callable[[Self], object]) -> Self:
        def body() -> None:
            try:
                self.prepare()
                script(self)
            except Exception:
                self.errors.append(traceback.format_exc())

        self._thread = threading.Thread(target=body, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def check(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        assert not self.errors, "\n".join(self.errors)


def now() -> str:
    """A timestamp as the API server writes them."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class CustomJobController(Player):
    """What the stand-in controllers of a custom job kind share: finding the job the task made, and playing the
    kubelet of the pods they made for it (``pods`` maps the test's key of a replica to its pod name)."""

    thread_name = "controller"

    def __init__(self, emu: KubeEmulator, namespace: str, plural: str, group: str, version: str) -> None:
        super().__init__()
        self.emu, self.namespace, self.plural, self.group, self.version = emu, namespace, plural, group, version
        self.job: dict[str, Any] | None = None
        self.pods: dict[Any, str] = {}

    # -- the job object
    def jobs(self) -> list[dict]:
        return self.emu.list(self.plural, self.namespace, group=self.group, version=self.version)

    def get(self, name: str | None = None) -> dict | None:
        return self.emu.get(self.plural, self.namespace, name or self.name, group=self.group, version=self.version)

    @property
    def name(self) -> str:
        assert self.job is not None
        return self.job["metadata"]["name"]

    def wait_for_job(self, timeout: float = 60.0) -> dict:
        self.job = wait_until(lambda: next(iter(self.jobs()), None), timeout=timeout, interval=0.02)
        return self.job

    def watched(self, pods: bool = False) -> bool:
        """The task (or trigger) has a watch open on this kind: the verdict will come from an event. With ``pods``,
        one on the namespace's pods too: the operator's wait opens that one beside the job's, from a thread (task)
        or an asyncio task of its own, and a job judged before it opened it ends the wait without it."""
        watches = [r.path for r in self.emu.requests if r.is_watch and f"/namespaces/{self.namespace}/" in r.path]
        return (any(f"/{self.plural}" in path for path in watches)
                and (not pods or any(path.endswith("/pods") for path in watches)))

    # -- its pods
    def run_all(self) -> None:
        for name in self.pods.values():
            self.emu.run_pod(self.namespace, name)

    def succeed(self, key: Any, document: dict | None = None) -> None:
        self.emu.succeed_pod(self.namespace, self.pods[key], message=json.dumps(document) if document else None)

    def fail(self, key: Any, code: int, reason: str = "Error") -> None:
        self.emu.fail_pod(self.namespace, self.pods[key], exit_code=code, reason=reason)


def crd_emulator(register: Callable[[KubeEmulator], None]):
    """The ``emulator`` fixture of a module whose jobs are custom objects: the shared one (conftest), with the CRDs
    that ``register`` serves. In a test module: ``emulator = crd_emulator(register_kubeflow_crds)``."""

    @pytest.fixture(scope="module", name="emulator")
    def emulator_with_crds(emulator: KubeEmulator) -> KubeEmulator:
        register(emulator)
        return emulator

    return emulator_with_crds


def custom_jobs_left(emu: KubeEmulator, namespace: str, plural: str, group: str,
                     version: str = "v1") -> tuple[list[str], list[str]]:
    """Names of the jobs of one custom kind, and of the pods, left in a namespace."""
    jobs = sorted(o["metadata"]["name"] for o in emu.list(plural, namespace, group=group, version=version))
    return jobs, sorted(o["metadata"]["name"] for o in emu.list("pods", namespace))


def comes_to(probe: Callable[[], Any], expected: Any, timeout: float = 5.0) -> None:
    """``probe()`` equals ``expected`` within ``timeout``; if not, the assertion shows what it is instead."""
    try:
        wait_until(lambda: probe() == expected, timeout=timeout, interval=0.05)
    except AssertionError:
        assert probe() == expected


# ---------------------------------------------------------------------------------------------- kubelet


class Kubelet(Player):
    """Plays the kubelet for the pods of one namespace: runs them, writes logs, ends containers.

    ``play(script)`` runs ``script(self)`` in a thread once ``pods`` pods exist; a failing script is
    reported by ``check()`` instead of being lost in its thread.
    """

    thread_name = "kubelet"

    def __init__(self, emu: KubeEmulator, namespace: str, pods: int = 3) -> None:
        super().__init__()
        self.emu, self.namespace, self.count = emu, namespace, pods
        self.seen: dict[str, dict] = {}

    def prepare(self) -> None:
        self.wait_for_pods()

    # -- discovery
    def wait_for_pods(self, timeout: float = 60.0) -> dict[str, str]:
        """``{"master-0": pod, "worker-0": pod, ...}`` once every pod exists."""
        def ready():
            pods = self.emu.list("pods", self.namespace, label_selector=JOB_LABEL)
            return pods if len(pods) >= self.count else None

        for pod in wait_until(ready, timeout=timeout, interval=0.02):
            self.seen[pod["metadata"]["name"]] = pod
        return self.names()

    def names(self) -> dict[str, str]:
        names = {}
        for name, pod in self.seen.items():
            labels = pod["metadata"]["labels"]
            names[f"{labels['airflow-distributed/role']}-{labels['airflow-distributed/index']}"] = name
        return names

    @property
    def master(self) -> str:
        return next(n for n, p in self.seen.items() if p["metadata"]["labels"]["airflow-distributed/master"] == "true")

    def pod(self, key: str) -> str:
        return self.names()[key]

    # -- kubelet acts
    def run_all(self, *, except_: tuple[str, ...] = ()) -> None:
        for key, name in self.names().items():
            if key not in except_:
                self.emu.run_pod(self.namespace, name)

    def log(self, pod: str, *lines: str) -> None:
        self.emu.append_log(self.namespace, pod, "\n".join(lines), container="base")

    def master_exits(self, code: int = 0, reason: str = "Completed", document: dict | None = None) -> None:
        """The master's ``base`` container ends; its XCom sidecar keeps the pod Running, as on a cluster."""
        at = now()
        terminated = {"exitCode": code, "reason": reason, "startedAt": at, "finishedAt": at}
        if document is not None:
            terminated["message"] = json.dumps(document)
        self.emu.set_pod_phase(self.namespace, self.master, "Running",
                               container_states={"base": {"terminated": terminated}})

    def fail(self, pod: str, code: int, reason: str = "Error") -> None:
        self.emu.fail_pod(self.namespace, pod, exit_code=code, reason=reason)


def as_the_pod(pod: dict, code: str) -> str:
    """Run ``code`` (using ``airflow_distributed.tracking``) in a real Python process with the variables of
    ``pod``'s main container, as the training script in it would; returns what it prints."""
    from tests.conftest import ROOT

    variables = {item["name"]: item["value"] for item in pod["spec"]["containers"][0].get("env") or []
                 if "value" in item}
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **variables}, check=True,
                          capture_output=True, text=True, cwd=ROOT).stdout.strip()


def train_and_succeed(kubelet: Kubelet, document: dict = DOCUMENT, steps: int = 3, pause: float = 0.05) -> None:
    kubelet.run_all()
    for step in range(1, steps + 1):
        kubelet.log(kubelet.master, f"step {step} loss {0.5 ** step:.3f}")
        time.sleep(pause)
    kubelet.master_exits(0, document=document)


# ---------------------------------------------------------------------------------------------- helpers


def objects(emu: KubeEmulator, namespace: str) -> dict[str, list[str]]:
    """Names of what is left in a namespace, per kind (the ``default`` service account aside)."""
    left = {}
    for plural in ("services", "pods", "configmaps", "secrets"):
        left[plural] = sorted(o["metadata"]["name"] for o in emu.list(plural, namespace))
    return left


def settled(emu: KubeEmulator, namespace: str, expected: dict[str, list[str]], timeout: float = 5.0) -> None:
    """What is left equals ``expected`` (the garbage collector takes ~50 ms after an owner goes)."""
    comes_to(lambda: objects(emu, namespace), expected, timeout)


def failure_line(output: str) -> str:
    """The line of a task's output that tells why the job failed."""
    return next(line for line in output.splitlines() if "DistributedJobError" in line or " failed after " in line)


NOTHING = {"services": [], "pods": [], "configmaps": [], "secrets": []}


def task_requests(emu: KubeEmulator, namespace: str) -> list[Any]:
    return [r for r in emu.requests if f"/namespaces/{namespace}/" in r.path]


def lists_and_watches(emu: KubeEmulator, namespace: str) -> tuple[list, list]:
    reads = [r for r in task_requests(emu, namespace) if r.method == "GET" and r.path.endswith("/pods")]
    return [r for r in reads if not r.is_watch], [r for r in reads if r.is_watch]

# ---------------------------------------------------------------------------------------------- hook


FAST = RetryPolicy(attempts=5, initial_delay=0.01, max_delay=0.05, jitter=0.0)


def make_job(namespace: str, environment: dict | None = None, framework: str = "pytorch", **options):
    """``(build, slots, name)`` of a job as the operator makes it (``build(owner_uid) -> JobObjects``; the hook takes
    ``build(None)``)."""
    name = job_name("hook_tests", "train", uuid.uuid4().hex)
    spec = load_spec(framework, environment if environment is not None else {"pytorch": {"n_workers": 2}})
    plan = build_plan(spec, name, KubernetesAddressing(namespace), layout_for_kubernetes(), ["python", "train.py"],
                      backend="kubernetes", launch=POD_LAUNCH)
    settings = JobManifestOptions(namespace=namespace, image="registry.example.com/trainer:1.0",
                                  task_instance=TaskInstanceRef(dag_id="hook_tests", task_id="train", run_id=name),
                                  **options)
    key = generate_ssh_key_pair() if any(r.command is None for r in plan.replicas) else None
    return (lambda uid: build_job_objects(plan, settings, owner_uid=uid, ssh_key=key)), replica_slots(plan), name


def new_hook(kubeconfig: str, sleep=None, **kwargs) -> PodJobHook:
    return PodJobHook(kubernetes_conn_id=None, config_file=kubeconfig,
                                   client_configuration=client.Configuration(), retry=FAST,
                                   sleep=sleep or (lambda seconds: None), **kwargs)

# ---------------------------------------------------------------------------------------------- trigger


def trigger_for(config: str, namespace: str, name: str, slots, **kwargs) -> DistributedJobTrigger:
    kwargs.setdefault("startup_timeout", 30.0)
    return DistributedJobTrigger(job_name=name, namespace=namespace, replicas=slots_to_json(slots),
                                 started_at=time.time(), kubernetes_conn_id=None,
                                 connection_extras={"kube_config_path": config}, **kwargs)


def first_event(trigger: DistributedJobTrigger) -> dict:
    async def run():
        return await anext(trigger.run())

    return asyncio.run(run()).payload


def custom_job_watches(requests: list, plural: str, job: str, deferred: bool) -> None:
    """A custom kind's wait watched its job once and the job's pods once (a pod the cluster takes away is seen as
    it goes): in the task, its own job by name and its own pods by label; deferred, the kind's objects and the job-
    labelled pods of the namespace, each watch shared by the triggerer's jobs there (``shared_watch``)."""
    jobs = [r for r in requests if r.is_watch and r.path.endswith(f"/{plural}")]
    pods = [r for r in requests if r.is_watch and r.path.endswith("/pods")]
    assert len(jobs) == 1 and len(pods) == 1, [r.path for r in jobs + pods]
    assert jobs[0].query.get("fieldSelector") == (None if deferred else f"metadata.name={job}")
    assert pods[0].query.get("labelSelector") == ("airflow-distributed/job" if deferred
                                                  else f"airflow-distributed/job={job}")
