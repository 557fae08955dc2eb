"""The test's stand-in for the Kubeflow Training Operator (and the kubelet of its pods) on the API emulator.

It does what the operator does that the task can see: pods made from the job's replica templates, with the
operator's labels and an ownerReference to the job (so deleting the job deletes them), and ``status.conditions``
written through the status subresource. ``play(script)`` runs a script in a thread; ``check()`` reports it.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from tests.helpers import wait_until
from tests.k8s_emulator import KubeEmulator

GROUP = "kubeflow.org"
#: plural -> (version, kind, replica specs key)
KINDS = {
    "tfjobs": ("v1", "TFJob", "tfReplicaSpecs"),
    "pytorchjobs": ("v1", "PyTorchJob", "pytorchReplicaSpecs"),
    "mxjobs": ("v1", "MXJob", "mxReplicaSpecs"),
    "mpijobs": ("v2beta1", "MPIJob", "mpiReplicaSpecs"),
    "xgboostjobs": ("v1", "XGBoostJob", "xgbReplicaSpecs"),
    "paddlejobs": ("v1", "PaddleJob", "paddleReplicaSpecs"),
}


def register_kubeflow_crds(emu: KubeEmulator) -> None:
    for plural, (version, kind, _) in KINDS.items():
        emu.register_crd(GROUP, version, plural, kind)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class KubeflowController:
    """Plays the Kubeflow operator for the jobs of one kind in one namespace."""

    def __init__(self, emu: KubeEmulator, namespace: str, plural: str) -> None:
        self.emu, self.namespace, self.plural = emu, namespace, plural
        self.version, self.kind, self.specs_key = KINDS[plural]
        self.job: dict[str, Any] | None = None
        self.pods: dict[str, str] = {}
        self.errors: list[str] = []
        self._thread: threading.Thread | None = None

    # -- the job object
    def jobs(self) -> list[dict]:
        return self.emu.list(self.plural, self.namespace, group=GROUP, version=self.version)

    def get(self, name: str | None = None) -> dict | None:
        return self.emu.get(self.plural, self.namespace, name or self.name, group=GROUP, version=self.version)

    @property
    def name(self) -> str:
        assert self.job is not None
        return self.job["metadata"]["name"]

    def wait_for_job(self, timeout: float = 60.0) -> dict:
        self.job = wait_until(lambda: next(iter(self.jobs()), None), timeout=timeout, interval=0.02)
        return self.job

    def submit(self, name: str, replicas: dict[str, int], container: str) -> dict:
        """A job created outside Airflow (for the sensors), with minimal templates."""
        specs = {rtype: {"replicas": count, "restartPolicy": "Never", "template": {"spec": {"containers": [
            {"name": container, "image": "registry.example.com/trainer:1.0"}]}}} for rtype, count in replicas.items()}
        body = {"apiVersion": f"{GROUP}/{self.version}", "kind": self.kind, "metadata": {"name": name},
                "spec": {self.specs_key: specs}}
        self.job = self.emu.create(self.plural, self.namespace, body, group=GROUP, version=self.version)
        return self.job

    def conditions(self, *types: tuple[str, str, str]) -> None:
        """Write ``status.conditions`` as (type, reason, message), the last one the latest; ``Running`` turns
        ``False`` once a terminal one follows, as the operator does."""
        terminal = any(kind in ("Succeeded", "Failed") for kind, _, _ in types)
        conditions = [{"type": kind, "status": "False" if terminal and kind == "Running" else "True",
                       "reason": reason, "message": message, "lastUpdateTime": now(), "lastTransitionTime": now()}
                      for kind, reason, message in types]
        self.emu.update_status(self.plural, self.namespace, self.name, {"conditions": conditions}, group=GROUP,
                               version=self.version)

    # -- pods
    def create_pods(self) -> dict[str, str]:
        """One pod per replica of every replica spec: ``{"worker-1": pod name, ...}``."""
        job = self.job = self.get() or self.job
        assert job is not None
        owner = {"apiVersion": f"{GROUP}/{self.version}", "kind": self.kind, "name": self.name,
                 "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        for rtype, spec in job["spec"][self.specs_key].items():
            template = spec["template"]
            for index in range(spec.get("replicas", 1)):
                name = f"{self.name}-{rtype.lower()}-{index}"
                labels = {**(template.get("metadata") or {}).get("labels", {}),
                          "training.kubeflow.org/job-name": self.name,
                          "training.kubeflow.org/replica-type": rtype.lower(),
                          "training.kubeflow.org/replica-index": str(index)}
                pod = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": labels, "ownerReferences": [owner],
                                    "annotations": (template.get("metadata") or {}).get("annotations") or {}},
                       "spec": {**template["spec"], "restartPolicy": "Never"}}
                self.emu.create("pods", self.namespace, pod)
                self.pods[f"{rtype.lower()}-{index}"] = name
        return self.pods

    def run_all(self) -> None:
        for name in self.pods.values():
            self.emu.run_pod(self.namespace, name)

    def succeed(self, key: str, document: dict | None = None) -> None:
        self.emu.succeed_pod(self.namespace, self.pods[key], message=json.dumps(document) if document else None)

    def fail(self, key: str, code: int, reason: str = "Error") -> None:
        self.emu.fail_pod(self.namespace, self.pods[key], exit_code=code, reason=reason)

    def log(self, key: str, *lines: str, container: str) -> None:
        self.emu.append_log(self.namespace, self.pods[key], "\n".join(lines), container=container)

    def watched(self) -> bool:
        """The task (or trigger) has a watch open on this kind: the verdict will come from an event."""
        return any(r.is_watch and f"/{self.plural}" in r.path and f"/namespaces/{self.namespace}/" in r.path
                   for r in self.emu.requests)

    # -- a script in a thread
    def play(self, script: Callable[[KubeflowController], None]) -> KubeflowController:
        def body() -> None:
            try:
                script(self)
            except Exception:
                self.errors.append(traceback.format_exc())

        self._thread = threading.Thread(target=body, name="kubeflow-controller", daemon=True)
        self._thread.start()
        return self

    def check(self, timeout: float = 10.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        assert not self.errors, "\n".join(self.errors)
