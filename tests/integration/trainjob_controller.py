"""The test's stand-in for the Kubeflow Trainer v2 controller, JobSet and the Job controller on the API emulator.

What the task can see of them: the TrainJob CRD served with its strict schema (derived from the typed models,
``tests/data/trainjob``); node pods made from the TrainJob (``trainer`` and the runtime patch of the ``node`` pod
template, on top of a ``torch-distributed`` runtime), with JobSet's and the Job controller's labels, the runtime's
``PET_*`` variables and ``JOB_COMPLETION_INDEX``, and an ownerReference to the TrainJob (so deleting it deletes
them); ``status`` (conditions, ``jobsStatus``, ``trainerStatus``) written through the status subresource.

On ``MPI_RUNTIME`` (a cluster's Horovod runtime: ``mlPolicy.mpi``, OpenMPI, ``runLauncherAsNode``) it plays
Trainer's MPI plugin: the hostfile ConfigMap and SSH key Secret, one ``launcher`` pod running ``trainer.command``
with the hostfile at ``/etc/mpi/hostfile`` and the ``OMPI_MCA_*`` variables, and ``numNodes`` - 1 ``node`` pods
running the runtime's sshd.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import wait_until
from tests.k8s_emulator import KubeEmulator
from tests.kubernetes_helpers import CustomJobController, now

GROUP, VERSION, PLURAL, KIND = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"
#: The cluster's Horovod runtime in the tests, and what it runs on its ``node`` pods.
MPI_RUNTIME = "horovod-mpi"
MPI_NODE_IMAGE = "registry.example.com/horovod-runtime:1.0"
SSH_AUTH_PATH = "/home/mpiuser/.ssh"
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "data" / "trainjob" / "trainjob-v1alpha1.json"


def trainjob_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def register_trainjob_crd(emu: KubeEmulator) -> None:
    emu.register_crd(GROUP, VERSION, PLURAL, KIND, schema=trainjob_schema())


class TrainerController(CustomJobController):
    """Plays the Trainer controller for the TrainJobs of one namespace (``pods`` is ``{rank: pod name}``)."""

    thread_name = "trainer-controller"

    def __init__(self, emu: KubeEmulator, namespace: str) -> None:
        super().__init__(emu, namespace, PLURAL, GROUP, VERSION)
        self._conditions: dict[str, dict[str, Any]] = {}
        self._jobs: list[dict[str, Any]] = []
        self._progress: dict[str, Any] = {}
        self.hostfile = ""

    def submit(self, name: str, nodes: int) -> dict:
        """A TrainJob created outside Airflow (for the sensors), as the Kubeflow SDK would make it."""
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name},
                "spec": {"runtimeRef": {"name": "torch-distributed"},
                         "trainer": {"numNodes": nodes, "image": "registry.example.com/trainer:1.0",
                                     "command": ["torchrun", "train.py"]},
                         "runtimePatches": [{"manager": "trainer.kubeflow.org/sdk", "trainingRuntimeSpec": {
                             "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                                 "template": {}}}}]}}}}]}}
        self.job = self.emu.create(PLURAL, self.namespace, body, group=GROUP, version=VERSION)
        return self.job

    # -- status
    def condition(self, kind: str, status: str, reason: str, message: str = "") -> None:
        """Set one condition (``meta.SetStatusCondition``: one per type) and write the status."""
        self._conditions[kind] = {"type": kind, "status": status, "reason": reason, "message": message,
                                  "lastTransitionTime": now()}
        self.write_status()

    def write_status(self, active: int | None = None, progress: dict | None = None) -> None:
        """The whole status; what is not given stays as last written, as the controller keeps it."""
        status: dict[str, Any] = {}
        if self._conditions:
            status["conditions"] = list(self._conditions.values())
        if active is not None:
            self._jobs = [{"name": "node", "active": active, "ready": active, "succeeded": 0, "failed": 0,
                           "suspended": 0}]
        if self._jobs:
            status["jobsStatus"] = self._jobs
        if progress is not None:
            self._progress = {**progress, "lastUpdatedTime": now()}
        if self._progress:
            status["trainerStatus"] = self._progress
        if status:
            self.emu.update_status(PLURAL, self.namespace, self.name, status, group=GROUP, version=VERSION)

    # -- pods
    def create_pods(self) -> dict[int, str]:
        """One pod per node, as JobSet's indexed Job makes them: ``{rank: pod name}``."""
        job = self.job = self.get() or self.job
        assert job is not None
        if job["spec"]["runtimeRef"]["name"] == MPI_RUNTIME:
            return self.create_mpi_pods(job)
        spec, name = job["spec"], self.name
        trainer = spec.get("trainer") or {}
        patch = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
        assert patch["name"] == "node"
        template = patch["template"]["spec"]["template"]
        pod_spec = dict(template.get("spec") or {})
        container_patch = next(iter(pod_spec.pop("containers", None) or []), {})
        nodes = int(trainer.get("numNodes") or 1)
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name, "uid": job["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        for rank in range(nodes):
            runtime_env = [*self.runtime_env(job, rank, nodes), {"name": "JOB_COMPLETION_INDEX", "value": str(rank)}]
            container = {"name": "node", "image": trainer["image"], "command": trainer["command"],
                         "env": [*(trainer.get("env") or []), *runtime_env],
                         "ports": [{"containerPort": 29500}]}
            if trainer.get("resourcesPerNode"):
                container["resources"] = trainer["resourcesPerNode"]
            if container_patch.get("volumeMounts"):
                container["volumeMounts"] = container_patch["volumeMounts"]
            pod_name = f"{name}-node-0-{rank}-x{rank}k2p"
            labels = {**(template.get("metadata") or {}).get("labels", {}),
                      "jobset.sigs.k8s.io/jobset-name": name,
                      "jobset.sigs.k8s.io/replicatedjob-name": "node",
                      "jobset.sigs.k8s.io/job-index": "0",
                      "batch.kubernetes.io/job-completion-index": str(rank),
                      "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "labels": labels, "ownerReferences": [owner],
                                "annotations": {**((template.get("metadata") or {}).get("annotations") or {}),
                                                "batch.kubernetes.io/job-completion-index": str(rank)}},
                   "spec": {**pod_spec, "containers": [container], "restartPolicy": "Never",
                            "hostname": f"{name}-node-0-{rank}", "subdomain": name}}
            self.emu.create("pods", self.namespace, pod)
            self.pods[rank] = pod_name
        return self.pods

    def create_mpi_pods(self, job: dict) -> dict[int, str]:
        """The MPI plugin's objects and JobSet's pods: rank 0 is the launcher, rank i the ``node`` pod of
        completion index i - 1."""
        spec, name, uid = job["spec"], self.name, job["metadata"]["uid"]
        trainer = spec.get("trainer") or {}
        nodes, slots = int(trainer.get("numNodes") or 1), int(trainer.get("numProcPerNode") or 1)
        patches = {p["name"]: p["template"]["spec"]["template"]
                   for p in spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]}
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name, "uid": uid, "controller": True,
                 "blockOwnerDeletion": True}
        endpoints = [f"{name}-launcher-0-0.{name}", *(f"{name}-node-0-{i}.{name}" for i in range(nodes - 1))]
        self.hostfile = "".join(f"{host} slots={slots}\n" for host in endpoints)
        self.emu.create("configmaps", self.namespace, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{name}-mpi-hostfile", "ownerReferences": [owner]},
            "data": {"hostfile": self.hostfile}})
        self.emu.create("secrets", self.namespace, {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth", "immutable": True,
            "metadata": {"name": f"{name}-mpi-ssh-auth", "ownerReferences": [owner]},
            "stringData": {"ssh-privatekey": "test key", "ssh-publickey": "ecdsa-sha2-nistp521 test"}})
        ssh = {"name": "mpi-ssh-auth", "secret": {"secretName": f"{name}-mpi-ssh-auth", "defaultMode": 0o400}}
        hostfile = {"name": "mpi-hostfile", "configMap": {"name": f"{name}-mpi-hostfile",
                                                          "items": [{"key": "hostfile", "path": "hostfile"}]}}
        ompi = [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots)},
                {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"}]
        members = [("launcher", 0, trainer["image"], {"command": trainer["command"]}, ompi, [hostfile])]
        members += [("node", i, MPI_NODE_IMAGE, {"command": ["/usr/sbin/sshd"], "args": ["-De"]}, [], [])
                    for i in range(nodes - 1)]
        for rank, (replicated, index, image, argv, extra_env, extra_volumes) in enumerate(members):
            template = patches[replicated]
            pod_spec = dict(template.get("spec") or {})
            container_patch = next(iter(pod_spec.pop("containers", None) or []), {})
            mounts = [*(container_patch.get("volumeMounts") or []), {"name": "mpi-ssh-auth",
                                                                      "mountPath": SSH_AUTH_PATH}]
            if extra_volumes:
                mounts.append({"name": "mpi-hostfile", "mountPath": "/etc/mpi"})
            container = {"name": "node", "image": image, **argv,
                         "env": [*(trainer.get("env") or []), *extra_env,
                                 {"name": "JOB_COMPLETION_INDEX", "value": str(index)}],
                         "volumeMounts": mounts}
            if trainer.get("resourcesPerNode"):
                container["resources"] = trainer["resourcesPerNode"]
            labels = {**(template.get("metadata") or {}).get("labels", {}),
                      "jobset.sigs.k8s.io/jobset-name": name,
                      "jobset.sigs.k8s.io/replicatedjob-name": replicated,
                      "jobset.sigs.k8s.io/job-index": "0",
                      "batch.kubernetes.io/job-completion-index": str(index)}
            if replicated == "launcher":
                labels["trainer.kubeflow.org/trainjob-ancestor-step"] = "trainer"
            pod_name = f"{name}-{replicated}-0-{index}-x{rank}m7q"
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": pod_name, "labels": labels, "ownerReferences": [owner],
                                "annotations": (template.get("metadata") or {}).get("annotations") or {}},
                   "spec": {**pod_spec, "containers": [container], "restartPolicy": "Never",
                            "volumes": [*(pod_spec.get("volumes") or []), ssh, *extra_volumes],
                            "hostname": f"{name}-{replicated}-0-{index}", "subdomain": name}}
            self.emu.create("pods", self.namespace, pod)
            self.pods[rank] = pod_name
        return self.pods

    @staticmethod
    def runtime_env(job: dict, rank: int, nodes: int) -> list[dict[str, str]]:
        """What the referenced runtime's plugin gives node ``rank``: torch-distributed's ``PET_*``, or
        xgboost-distributed's ``DMLC_*`` (the bare completion index as the task id; one worker per GPU)."""
        name, trainer = job["metadata"]["name"], job["spec"].get("trainer") or {}
        if job["spec"]["runtimeRef"]["name"] == "xgboost-distributed":
            gpus = int(((trainer.get("resourcesPerNode") or {}).get("limits") or {}).get("nvidia.com/gpu", 1))
            return [{"name": "DMLC_TRACKER_URI", "value": f"{name}-node-0-0.{name}"},
                    {"name": "DMLC_TRACKER_PORT", "value": "29500"},
                    {"name": "DMLC_TASK_ID", "value": str(rank)},
                    {"name": "DMLC_NUM_WORKER", "value": str(nodes * gpus)}]
        return [{"name": "PET_NNODES", "value": str(nodes)},
                {"name": "PET_NPROC_PER_NODE", "value": str(trainer.get("numProcPerNode") or 1)},
                {"name": "PET_NODE_RANK", "value": str(rank)},
                {"name": "PET_MASTER_ADDR", "value": f"{name}-node-0-0.{name}"},
                {"name": "PET_MASTER_PORT", "value": "29500"}]

    def start(self, pods_watched: bool = False) -> None:
        """The TrainJob the task made runs: its node pods made and running, one active Job in ``jobsStatus``, and
        the task watching it (so the verdict that follows comes from a watch event, not from the first LIST), and with
        ``pods_watched`` its pods too."""
        self.wait_for_job()
        self.create_pods()
        self.run_all()
        self.write_status(active=1)
        wait_until(lambda: self.watched(pods=pods_watched), timeout=60, interval=0.02)

    def log(self, rank: int, *lines: str) -> None:
        self.emu.append_log(self.namespace, self.pods[rank], "\n".join(lines), container="node")
