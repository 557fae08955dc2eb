"""The test's stand-in for the Kubeflow Training Operator (and the kubelet of its pods) on the API emulator.

It does what the operator does that the task can see: pods made from the job's replica templates, with the
operator's labels and an ownerReference to the job (so deleting the job deletes them), and ``status.conditions``
written through the status subresource. ``play(script)`` runs a script in a thread; ``check()`` reports it
(``tests.kubernetes_helpers.CustomJobController``, shared with the Trainer controller's stand-in).
"""

from __future__ import annotations

from tests.helpers import wait_until
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import CustomJobController, now

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


class KubeflowController(CustomJobController):
    """Plays the Kubeflow operator for the jobs of one kind in one namespace."""

    thread_name = "kubeflow-controller"

    def __init__(self, emu: KubeEmulator, namespace: str, plural: str) -> None:
        version, self.kind, self.specs_key = KINDS[plural]
        super().__init__(emu, namespace, plural, GROUP, version)

    # -- the job object
    def submit(self, name: str, replicas: dict[str, int], container: str) -> dict:
        """A job created outside Airflow (for the sensors), with minimal templates."""
        specs = {rtype: {"replicas": count, "restartPolicy": "Never", "template": {"spec": {"containers": [
            {"name": container, "image": "registry.example.com/trainer:1.0"}]}}} for rtype, count in replicas.items()}
        body = {"apiVersion": f"{GROUP}/{self.version}", "kind": self.kind, "metadata": {"name": name},
                "spec": {self.specs_key: specs}}
        self.job = self.emu.create(self.plural, self.namespace, body, group=GROUP, version=self.version)
        return self.job

    def conditions(self, *types: tuple[str, str, str], false: tuple[str, ...] = ()) -> None:
        """Write ``status.conditions`` as (type, reason, message), the last one the latest; ``Running`` turns
        ``False`` once a terminal one follows, as the operator does, and so do the types in ``false`` (a resumed
        job's ``Suspended``)."""
        terminal = any(kind in ("Succeeded", "Failed") for kind, _, _ in types)
        conditions = [{"type": kind, "status": "False" if (terminal and kind == "Running") or kind in false else "True",
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

    def start(self) -> None:
        """The job the task made runs: its pods made and running, the job ``Created`` and ``Running``, and the task
        watching it (so the verdict that follows comes from a watch event, not from the first LIST)."""
        self.wait_for_job()
        self.create_pods()
        self.run_all()
        self.conditions(("Created", f"{self.kind}Created", ""), ("Running", f"{self.kind}Running", ""))
        wait_until(self.watched, timeout=60, interval=0.02)

    def log(self, key: str, *lines: str, container: str) -> None:
        self.emu.append_log(self.namespace, self.pods[key], "\n".join(lines), container=container)
