"""The stand-ins for the Kubeflow Training Operator and for Trainer v2 (with JobSet and the Job controller) on the
real node: what they do for a ``PyTorchJob`` and a ``TrainJob`` that the task and its pods can see, with the real
kubelet running the pods.

``PyTorchJobOperator``:
For each replica of the job the task created: a headless Service ``<job>-<type>-<index>`` (the operator's per
replica Service, whose DNS name the replicas meet at, answered by the node's DNS stand-in from its Endpoints) and a
pod of the replica's template with the operator's labels, an ownerReference to the job (deleting the job deletes
them) and the variables the operator (v1.9) sets in the ``pytorch`` container: ``MASTER_ADDR``, ``MASTER_PORT``,
``RANK`` and ``PET_NODE_RANK`` (the node's rank), ``WORLD_SIZE`` (replicas x ``nprocPerNode``), ``PET_NNODES``,
``PET_NPROC_PER_NODE`` (where the job sets ``nprocPerNode``) and ``PYTHONUNBUFFERED``; torch's launcher reads the
``PET_*`` as its defaults, so the task's launch line must hold against them. Then ``status`` follows the real pods,
as the operator's does: ``Created``, ``Running`` once every pod runs, ``Succeeded`` when the master's container exits
0, ``Failed`` when a replica's does not (the ``Running`` condition turned ``False`` at the end), and the replicas'
counts.

``TrainJobOperator``: the node pods of ``tests/integration/trainjob_controller.py``'s stand-in (its ``create_pods``,
over the real API), JobSet's headless Service ``<job>`` (``<job>-node-0-<rank>.<job>`` is torch's master address,
``PET_MASTER_ADDR``) and the status as Trainer writes it from JobSet's: ``jobsStatus``, then ``Complete`` once every
node's container exited 0, ``Failed`` once one did not.

Not the controllers' code: only their rules as the project relies on them (``manifests/kubeflow.py``,
``manifests/trainjob.py``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client

from airflow_distributed.manifests.kubeflow_status import JOB_NAME_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from tests.integration import trainjob_controller as trainjob
from tests.integration.trainjob_controller import TrainerController
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"
SPECS_KEY, CONTAINER, PORT_NAME, DEFAULT_PORT = "pytorchReplicaSpecs", "pytorch", "pytorchjob-port", 23456


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class AdminApi:
    """The calls the stand-ins of ``tests/integration`` make on the emulator, over the real API as the admin: the
    test kubelet's own (they use nothing of it but its control plane)."""

    list = KubeletNode.list
    get = KubeletNode.get
    create = KubeletNode.create
    update_status = KubeletNode.update_status

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane


class JobOperator:
    """A controller loop in a thread for the jobs of one kind in one namespace (``start``/``stop``): each new job's
    objects made once (``create``), then its status from its pods at every look (``follow``). ``errors`` holds what
    went wrong in it, for the test to show."""

    group, version, plural = GROUP, VERSION, PLURAL

    def __init__(self, plane: ControlPlane, namespace: str, interval: float = 0.5) -> None:
        self.plane, self.namespace, self.interval = plane, namespace, interval
        self.base = f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}"
        self.errors: list[str] = []
        self.handled: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"{self.plural}-operator", daemon=True)

    def start(self) -> JobOperator:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for job in self.plane.request("GET", self.base)["items"]:
                    if job["metadata"].get("deletionTimestamp"):
                        continue
                    if job["metadata"]["uid"] not in self.handled:
                        self._create(job)
                        self.handled.add(job["metadata"]["uid"])
                    self._follow(job)
            except Exception as error:  # shown by the test; the loop goes on, as a controller's does
                self.errors.append(f"{type(error).__name__}: {error}")

    def _create(self, job: dict) -> None:
        raise NotImplementedError

    def _follow(self, job: dict) -> None:
        raise NotImplementedError

    def _post(self, plural: str, body: dict) -> None:
        try:
            self.plane.request("POST", f"/api/v1/namespaces/{self.namespace}/{plural}", body)
        except client.ApiException as error:
            if error.status != 409:
                raise

    def _pods(self, selector: str) -> list[dict]:
        return self.plane.request("GET", f"/api/v1/namespaces/{self.namespace}/pods",
                                  query=[("labelSelector", selector)])["items"]


def exit_code(pod: dict, container: str) -> int | None:
    """The exit code of a pod's container, once it has terminated."""
    for entry in (pod.get("status") or {}).get("containerStatuses") or []:
        if entry["name"] == container and ((entry.get("state") or {}).get("terminated")) is not None:
            return entry["state"]["terminated"].get("exitCode")
    return None


def running(pod: dict, container: str) -> bool:
    return any(entry["name"] == container and (entry.get("state") or {}).get("running") is not None
               for entry in (pod.get("status") or {}).get("containerStatuses") or [])


class PyTorchJobOperator(JobOperator):
    """The Training Operator's part for the PyTorchJobs of one namespace."""

    # ------------------------------------------------------------------ the job's Services and pods

    def _replicas(self, job: dict) -> list[tuple[str, int, dict]]:
        """(type, index, template) of every replica, the master first."""
        specs = job["spec"][SPECS_KEY]
        ordered = sorted(specs, key=lambda rtype: rtype != "Master")
        return [(rtype, index, specs[rtype]["template"]) for rtype in ordered
                for index in range(specs[rtype].get("replicas", 1))]

    def _create(self, job: dict) -> None:
        name = job["metadata"]["name"]
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name, "uid": job["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        replicas = self._replicas(job)
        master_port = next((port["containerPort"] for _, _, template in replicas[:1]
                            for container in template["spec"]["containers"] if container["name"] == CONTAINER
                            for port in container.get("ports") or [] if port.get("name") == PORT_NAME),
                           DEFAULT_PORT)
        processes = (job["spec"].get("nprocPerNode") or "1")
        world_size = len(replicas) * (int(processes) if processes.isdigit() else 1)  # "auto": the operator's 1
        for rank, (rtype, index, template) in enumerate(replicas):
            pod_name = f"{name}-{rtype.lower()}-{index}"
            labels = {**((template.get("metadata") or {}).get("labels") or {}), JOB_NAME_LABEL: name,
                      REPLICA_TYPE_LABEL: rtype.lower(), REPLICA_INDEX_LABEL: str(index)}
            selector = {JOB_NAME_LABEL: name, REPLICA_TYPE_LABEL: rtype.lower(), REPLICA_INDEX_LABEL: str(index)}
            self._post("services", {"metadata": {"name": pod_name, "labels": selector, "ownerReferences": [owner]},
                                    "spec": {"clusterIP": "None", "selector": selector,
                                             "ports": [{"name": PORT_NAME, "port": master_port}]}})
            variables = [{"name": "MASTER_ADDR", "value": f"{name}-master-0"},
                         {"name": "MASTER_PORT", "value": str(master_port)},
                         {"name": "WORLD_SIZE", "value": str(world_size)}, {"name": "RANK", "value": str(rank)},
                         {"name": "PET_NODE_RANK", "value": str(rank)},
                         {"name": "PET_NNODES", "value": str(len(replicas))},
                         *([{"name": "PET_NPROC_PER_NODE", "value": processes}] if "nprocPerNode" in job["spec"]
                           else []),
                         {"name": "PYTHONUNBUFFERED", "value": "1"}]
            spec = {**template["spec"], "restartPolicy": "Never"}
            spec["containers"] = [{**container, "env": [*(container.get("env") or []), *variables]}
                                  if container["name"] == CONTAINER else container
                                  for container in template["spec"]["containers"]]
            self._post("pods", {"metadata": {"name": pod_name, "labels": labels, "ownerReferences": [owner],
                                             "annotations": (template.get("metadata") or {}).get("annotations") or {}},
                                "spec": spec})
        self._status(job, [("Created", f"{KIND}Created", f"{KIND} {name} is created.")], {})

    # ------------------------------------------------------------------ its status, from the real pods

    def _follow(self, job: dict) -> None:
        status = job.get("status") or {}
        types = [c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"]
        if "Succeeded" in types or "Failed" in types:
            return
        name = job["metadata"]["name"]
        counts: dict[str, dict[str, int]] = {}
        master_code, failed = None, None
        for pod in self._pods(f"{JOB_NAME_LABEL}={name}"):
            rtype = pod["metadata"]["labels"][REPLICA_TYPE_LABEL].capitalize()
            counted = counts.setdefault(rtype, {"active": 0, "succeeded": 0, "failed": 0})
            code = exit_code(pod, CONTAINER)
            if code is not None:
                counted["succeeded" if code == 0 else "failed"] += 1
                if rtype == "Master":
                    master_code = code
                if code != 0 and failed is None:
                    failed = (pod["metadata"]["name"], code)
            elif running(pod, CONTAINER):
                counted["active"] += 1
        all_running = sum(c["active"] for c in counts.values()) == len(self._replicas(job))
        created = ("Created", f"{KIND}Created", f"{KIND} {name} is created.")
        if master_code == 0:
            self._status(job, [created, ("Running", f"{KIND}Running", ""),
                               ("Succeeded", f"{KIND}Succeeded", f"{KIND} {name} is successfully completed.")],
                         counts, false=("Running",))
        elif failed is not None:
            self._status(job, [created, ("Running", f"{KIND}Running", ""),
                               ("Failed", f"{KIND}Failed", f"{KIND} {name} is failed because {failed[0]} exited "
                                                           f"with code {failed[1]}.")], counts, false=("Running",))
        elif all_running and "Running" not in types:
            self._status(job, [created, ("Running", f"{KIND}Running", f"{KIND} {name} is running.")], counts)

    def _status(self, job: dict, conditions: list[tuple[str, str, str]], counts: dict[str, Any],
                false: tuple[str, ...] = ()) -> None:
        """Replace the job's status (its conditions kept where they were, so their times stay)."""
        name = job["metadata"]["name"]
        before = {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}
        written = []
        for kind, reason, message in conditions:
            value = "False" if kind in false else "True"
            kept = before.get(kind)
            if kept is not None and kept.get("status") == value:
                written.append(kept)
                continue
            written.append({"type": kind, "status": value, "reason": reason, "message": message,
                            "lastUpdateTime": now(), "lastTransitionTime": now()})
        status = {"conditions": written, "replicaStatuses": counts,
                  "startTime": (job.get("status") or {}).get("startTime") or now()}
        while True:
            current = self.plane.get(f"{self.base}/{name}")
            if current is None:
                return
            try:
                self.plane.request("PUT", f"{self.base}/{name}/status", {**current, "status": status})
                job["status"] = status
                return
            except client.ApiException as error:
                if error.status != 409:
                    raise


class TrainJobOperator(JobOperator):
    """Trainer's (and JobSet's) part for the TrainJobs of one namespace, torch-distributed runtime."""

    group, version, plural = trainjob.GROUP, trainjob.VERSION, trainjob.PLURAL

    def __init__(self, plane: ControlPlane, namespace: str, interval: float = 0.5) -> None:
        super().__init__(plane, namespace, interval)
        self.trainers: dict[str, TrainerController] = {}

    def _create(self, job: dict) -> None:
        name = job["metadata"]["name"]
        owner = {"apiVersion": f"{self.group}/{self.version}", "kind": trainjob.KIND, "name": name,
                 "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        # JobSet's headless Service: the nodes' hostname.subdomain names (torch's master is node 0's), ready or not.
        selector = {"jobset.sigs.k8s.io/jobset-name": name}
        self._post("services", {"metadata": {"name": name, "ownerReferences": [owner]},
                                "spec": {"clusterIP": "None", "selector": selector, "publishNotReadyAddresses": True,
                                         "ports": [{"name": "node", "port": 29500}]}})
        trainer = self.trainers[name] = TrainerController(AdminApi(self.plane), self.namespace)  # type: ignore[arg-type]
        trainer.job = job
        trainer.create_pods()
        trainer.write_status(active=1)

    def _follow(self, job: dict) -> None:
        name = job["metadata"]["name"]
        trainer = self.trainers.get(name)
        status = job.get("status") or {}
        if trainer is None or any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                                  for c in status.get("conditions") or []):
            return
        codes = {pod["metadata"]["name"]: exit_code(pod, "node")
                 for pod in self._pods(f"jobset.sigs.k8s.io/jobset-name={name}")}
        failed = next(((pod, code) for pod, code in codes.items() if code not in (None, 0)), None)
        if failed is not None:
            trainer.condition("Failed", "True", "JobSetFailed", f"jobset failed: {failed[0]} exited with code "
                                                                f"{failed[1]}")
        elif codes and len(codes) == len(trainer.pods) and all(code == 0 for code in codes.values()):
            trainer.condition("Complete", "True", "JobSetCompleted", "jobset completed successfully")
