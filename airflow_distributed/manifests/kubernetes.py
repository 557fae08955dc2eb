"""``ClusterPlan`` -> the Kubernetes objects of one job (pure: no I/O, no API call).

A job is a headless Service that owns everything else, one Pod per replica, a ConfigMap with the plan's files,
a Secret with the plan's secret files (a ``@task.distributed`` function's arguments) when it has some, a Secret with
the SSH key pair when replicas are on standby (Horovod), and a PodGroup with gang scheduling.

What the hook does with them, in this order:

1. create ``objects.service`` and read its uid back (it is only known once created);
2. take ``objects.owned_by(uid)`` (the same bodies as building again with ``owner_uid=uid`` and the same
   ``ssh_key``, at a fraction of the cost: only each object and its metadata are copied) and create its
   ``dependents()`` in list order: Secret and ConfigMap before the pods that mount them, the PodGroup before the
   pods its scheduler holds for it, then the pods;
3. watch the pods. The master's main container (``MAIN_CONTAINER``) ending decides the job; the master pod
   itself stays Running afterwards, because of the XCom sidecar, until the output document is read:
   from the sidecar (the cncf provider's ``PodManager.extract_xcom``: ``OUTPUT_PATH``, then the sidecar is
   stopped), or, when exec is not allowed or the sidecar is gone, from the main container's
   ``state.terminated.message``, where the master's output relay copies it (4096 bytes at most: a longer
   document is cut down to ``metrics`` and ``model_path`` with ``"truncated": true``);
4. delete the Service: the garbage collector removes every other object of the job. The Secrets
   (``job_secret_names``) are also deleted by name when the job ends, whatever the clean-up policy keeps of its pods.
"""

from __future__ import annotations

import copy
import functools
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from airflow.providers.cncf.kubernetes.utils.xcom_sidecar import PodDefaults, add_xcom_sidecar
from kubernetes import client

from airflow_distributed.contract import ENV_CLUSTER
from airflow_distributed.frameworks import get_framework
from airflow_distributed.frameworks.horovod import SSH_PORT
from airflow_distributed.launch import Launch
from airflow_distributed.manifests import horovod_ssh
from airflow_distributed.manifests.container_scripts import (
    TERMINATION_MESSAGE_PATH,
    relay_output_command,
    wait_for_peers_command,
)
from airflow_distributed.manifests.gang_scheduling import (
    GANG_SCHEDULERS,
    GangScheduler,
    PodGrouping,
    pod_group,
    pod_grouping,
)
from airflow_distributed.manifests.kubernetes_resources import (
    affinity,
    client_configuration,
    copy_model,
    env_from,
    env_vars,
    image_pull_secrets,
    model,
    model_from_dict,
    resource_requirements,
    split_security_context,
    tolerations,
)
from airflow_distributed.manifests.pod_names import (
    INDEX_LABEL,
    JOB_LABEL,
    LABEL_PREFIX,
    MAIN_CONTAINER,
    MASTER_LABEL,
    READINESS_CONTAINER,
    ROLE_LABEL,
    task_annotations,
    task_labels,
)
from airflow_distributed.manifests.shared_memory import AUTO, shm_mount, shm_size_problems, shm_volume
from airflow_distributed.plan import ClusterPlan, Layout, Replica
from airflow_distributed.task_instance import TaskInstanceRef

# Layout of the Kubernetes backend: where a replica finds its model dir, output path and the plan's files.
#: How the kubernetes backend starts replicas (``plan.build_plan``'s ``launch``): one pod each, which the plan
#: describes whole (every variable, an MPI launcher's hostfile and its SSH port to the replicas' sshd).
POD_LAUNCH = Launch(pods=True)
MODEL_DIR = "/airflow-distributed/model"
FILES_DIR = "/airflow-distributed/files"
SECRET_FILES_DIR = "/airflow-distributed/secret-files"
# Where the cncf provider's XCom sidecar reads a pod's result (ARCHITECTURE.md, "Outputs").
OUTPUT_PATH = posixpath.join(PodDefaults.XCOM_MOUNT_PATH, "return.json")

SIDECAR_CONTAINER = PodDefaults.SIDECAR_CONTAINER_NAME
#: The cncf provider's sidecar loop traps SIGINT only (its own end, after the read); as PID 1 of its container its
#: shell gets no SIGTERM it has no handler for, so a deleted master pod waited out its whole grace period for it.
#: The same loop, ended by either.
SIDECAR_COMMAND = ["sh", "-c", 'trap "exit 0" INT TERM; while true; do sleep 1; done;']
#: What the task execs in the sidecar once it has read the output: its loop is PID 1 of its container (its own
#: PID namespace), ended by SIGINT. Only the shell's ``kill``: the cncf provider's stop looks for the loop with
#: ``pgrep``, which minimal images (Debian's busybox-static) lack, and only then falls back to a scan of ``/proc``.
SIDECAR_STOP = ["sh", "-c", "kill -INT 1"]
MODEL_VOLUME = "model-dir"
FILES_VOLUME = "files"
SECRET_FILES_VOLUME = "secret-files"
CLUSTER_VARIABLE = ENV_CLUSTER
#: Key of the cluster map in the job's ConfigMap (also a file in the files directory).
CLUSTER_KEY = "cluster.json"
TRAINING_PORT_NAME = "training"

# Kubernetes has no TTL for bare pods: the hook's clean-up reads this from the Service.
TTL_ANNOTATION = LABEL_PREFIX + "ttl-seconds-after-finished"

# The readiness step only waits; it must not change what the pod reserves (init containers count as a maximum).
READINESS_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}

ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]
KubernetesObject = TypeVar("KubernetesObject")


def layout_for_kubernetes(model_dir: str | None = None, *, job_name: str | None = None,
                          checkpoint_dir: str | None = None) -> Layout:
    """The ``Layout`` to build a plan with for this backend.

    :param model_dir: the operator's ``model_dir``: an absolute path in the pods (a volume is mounted there) or
        a URL such as ``s3://bucket/models/run`` (nothing is mounted). Default: ``MODEL_DIR``.
    :param job_name: with no ``checkpoint_dir``, checkpoints go to ``<model_dir>/checkpoints/<job_name>``: on the
        model volume, and per task instance, since one claim may serve many jobs.
    :param checkpoint_dir: the operator's ``checkpoint_dir`` (a path on a mounted volume or a URL).

    The job's TensorBoard folder is ``<model_dir>/tensorboard/<job_name>``, on the model storage like the checkpoints.
    """
    model_dir = model_dir or MODEL_DIR
    if checkpoint_dir is None and job_name is not None:
        checkpoint_dir = posixpath.join(model_dir, "checkpoints", job_name)
    tensorboard_dir = posixpath.join(model_dir, "tensorboard", job_name) if job_name is not None else None
    return Layout(model_dir=model_dir, output_path=OUTPUT_PATH, files_dir=FILES_DIR, checkpoint_dir=checkpoint_dir,
                  secret_files_dir=SECRET_FILES_DIR, tensorboard_dir=tensorboard_dir)


def ssh_secret_name(job_name: str) -> str:
    """The Secret of a job's SSH key pair (Horovod)."""
    return f"{job_name}-ssh"


def secret_files_name(job_name: str) -> str:
    """The Secret of a job's secret files (a ``@task.distributed`` function's arguments)."""
    return f"{job_name}-secret-files"


def job_secret_names(job_name: str) -> tuple[str, ...]:
    """Every Secret a job of this name may have, for a clean-up that does not know which it made (a deferral by a
    release whose trigger did not carry ``JobObjects.secret_names``); a job has only those its plan asks for."""
    return ssh_secret_name(job_name), secret_files_name(job_name)


@dataclass(frozen=True)
class JobManifestOptions:
    """How a plan becomes Kubernetes objects: what the plan itself does not say.

    :param namespace: namespace of every object; must be the one of the plan's ``KubernetesAddressing``.
    :param image: the training image. It needs Python 3 (``image_python``) for the readiness step and the
        output relay, and, for Horovod, ``openssh-server`` and ``openssh-client``.
    :param image_pull_policy: ``Always``, ``IfNotPresent`` or ``Never``; the cluster's default when ``None``.
    :param gpu_resource_key: resource name of the spec's ``gpu``.
    :param tpu_resource_key: resource name of the spec's ``tpu``.
    :param task_instance: labels and annotations naming the Airflow task instance.
    :param labels: extra labels of every object (the job's own labels win over these).
    :param annotations: extra annotations of every object.
    :param model_volume: what is mounted at the layout's model dir: a PVC claim name, a ``V1Volume`` or a volume
        dict (its name is replaced); default an emptyDir, which lives only as long as each pod, so a model
        meant to outlast the job belongs on a claim or at a URL ``model_dir``.
    :param wait_for_master: start replicas only once the replicas they connect to accept TCP (an init
        container): workers wait for the master (Paddle's trainers in parameter-server mode, the master included,
        for every pserver: ``Framework.first_peers``); a Horovod launcher waits for every worker's sshd.
    :param readiness_timeout_seconds: how long that wait may take before the pod fails.
    :param relay_output: run the master's command under a relay that copies the output document into the
        container's termination message, readable from the pod status even if the sidecar cannot be reached.
    :param image_python: the Python 3 interpreter of the image, by name or path.
    :param xcom_sidecar_image: image of the XCom sidecar; the cncf provider's default when ``None``.
    :param scheduler_name: the pods' scheduler; with Volcano gang scheduling, ``volcano`` when ``None``.
    :param gang_scheduling: ``volcano`` or ``scheduler-plugins`` to create a PodGroup of all replicas.
    :param queue_name: a Kueue LocalQueue; the pods are then admitted by Kueue as one group.
    :param automount_service_account_token: mount an API token in the pods; training code rarely needs one.
    :param ttl_seconds_after_finished: kept as an annotation of the Service for the hook's clean-up.
    :param active_deadline_seconds: the most a pod may run before Kubernetes stops it.
    :param shm_size: the memory-backed ``/dev/shm`` of every training container (``manifests.shared_memory``):
        ``"auto"`` (half the replica's memory limit), a quantity, or ``None`` for the runtime's own.
    """

    namespace: str
    image: str
    image_pull_policy: ImagePullPolicy | None = None
    gpu_resource_key: str = "nvidia.com/gpu"
    tpu_resource_key: str = "cloud-tpus.google.com/v2"
    task_instance: TaskInstanceRef | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    model_volume: client.V1Volume | Mapping[str, Any] | str | None = None
    wait_for_master: bool = True
    readiness_timeout_seconds: float = 600.0
    relay_output: bool = True
    image_python: str = "python3"
    xcom_sidecar_image: str | None = None
    scheduler_name: str | None = None
    gang_scheduling: GangScheduler | None = None
    queue_name: str | None = None
    automount_service_account_token: bool = False
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    shm_size: str | None = AUTO

    def __post_init__(self) -> None:
        if not self.namespace:
            raise ValueError("namespace must not be empty")
        if not self.image:
            raise ValueError("image must not be empty: the kubernetes backend runs every replica from an image")
        if self.gang_scheduling is not None and self.gang_scheduling not in GANG_SCHEDULERS:
            raise ValueError(
                f"gang_scheduling {self.gang_scheduling!r} is not supported; allowed: {', '.join(GANG_SCHEDULERS)}"
            )
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise ValueError(f"image_pull_policy {self.image_pull_policy!r}: use Always, IfNotPresent or Never")
        for name, problem in shm_size_problems(self.shm_size):
            raise ValueError(f"{name}: {problem}")

    def resource_keys(self) -> dict[str, str]:
        return {"gpu": self.gpu_resource_key, "tpu": self.tpu_resource_key}


@dataclass(frozen=True)
class JobObjects:
    """Every object of one job. The Service is the owner; ``dependents()`` lists the rest in creation order."""

    service: client.V1Service
    pods: list[client.V1Pod]
    secrets: list[client.V1Secret] = field(default_factory=list)
    config_maps: list[client.V1ConfigMap] = field(default_factory=list)
    pod_group: dict[str, Any] | None = None

    @property
    def owner(self) -> client.V1Service:
        return self.service

    def secret_names(self) -> tuple[str, ...]:
        """The Secrets this job has (none, its SSH key pair, its secret files): deleted by name when it ends,
        whatever its pods' fate, and no others (a DELETE of one it never had is answered 404)."""
        return tuple(secret.metadata.name for secret in self.secrets)

    def dependents(self) -> list[Any]:
        group = [self.pod_group] if self.pod_group is not None else []
        return [*self.secrets, *self.config_maps, *group, *self.pods]

    def owned_by(self, uid: str) -> JobObjects:
        """A copy whose dependents carry an ownerReference to the Service with this uid (see ``with_owner``:
        the copies share everything but their metadata with these objects)."""
        name = self.service.metadata.name
        return replace(
            self,
            pods=[with_owner(pod, name, uid) for pod in self.pods],
            secrets=[with_owner(secret, name, uid) for secret in self.secrets],
            config_maps=[with_owner(config_map, name, uid) for config_map in self.config_maps],
            pod_group=with_owner(self.pod_group, name, uid) if self.pod_group is not None else None,
        )

    def as_dicts(self) -> list[dict[str, Any]]:
        """Owner first, then the dependents: the request bodies, in creation order."""
        return [to_dict(obj) for obj in [self.service, *self.dependents()]]


def build_job_objects(
    plan: ClusterPlan,
    options: JobManifestOptions,
    *,
    owner_uid: str | None = None,
    ssh_key: horovod_ssh.SshKeyPair | None = None,
) -> JobObjects:
    """The Service, pods, Secret, ConfigMap and PodGroup of a plan built with ``KubernetesAddressing``.

    :param owner_uid: uid of the created Service; ``None`` (before it exists) leaves ownerReferences out,
        see ``JobObjects.owned_by``.
    :param ssh_key: the job's key pair (``horovod_ssh.generate_ssh_key_pair()``), required when replicas are
        on standby (Horovod).
    :raises ValueError: a plan not built for this backend, or a missing key pair.
    :raises ManifestError: a pod setting that is not valid Kubernetes, naming the replica and field.
    """
    _check_plan(plan, options)
    job = _JobParts.of(plan, options, owner_uid)
    if job.ssh_secret is not None and ssh_key is None:
        raise ValueError(
            f"job {plan.job_name}: replicas on standby are reached over SSH; pass ssh_key="
            "generate_ssh_key_pair()"
        )
    config_maps = [_files_config_map(plan, options, job)]
    secrets = [_ssh_secret(options, job, ssh_key)] if job.ssh_secret is not None and ssh_key is not None else []
    if job.secret_files is not None:
        secrets.append(_secret_files_secret(plan, options, job))
    pods = [_pod(plan, replica, options, job) for replica in plan.replicas]
    group = pod_group(plan.job_name, options.namespace, options.gang_scheduling, pods, job.labels, job.annotations)
    if group is not None and owner_uid:
        group["metadata"]["ownerReferences"] = [to_dict(ref) for ref in job.owner_references() or []]
    return JobObjects(
        service=_service(plan, options, job),
        pods=pods,
        secrets=secrets,
        config_maps=config_maps,
        pod_group=group,
    )


def with_owner(obj: KubernetesObject, service_name: str, uid: str) -> KubernetesObject:
    """A copy of ``obj`` (client model or dict) whose ownerReferences include the job's Service.

    Only the object and its metadata are copied; the rest (spec, data) is shared with ``obj``. These are request
    bodies, serialised and never changed after they are built: a deep copy of a thousand pods cost more than
    building them again (about 0.5 s), while this costs about 10 ms.

    The Service is the owner because it is the one object every job has from first to last and nothing else
    of the job outlives it: deleting it lets the garbage collector delete the pods, Secret, ConfigMap and
    PodGroup (cascade), so clean-up is one call and a crashed hook leaves one thing to delete. Neither
    ``controller`` nor ``blockOwnerDeletion`` is set: nothing recreates these pods (``kubectl drain`` should not
    treat them as replaceable), and ``blockOwnerDeletion`` needs rights on ``services/finalizers``.
    """
    reference = _owner_reference(service_name, uid)
    if isinstance(obj, Mapping):
        metadata = dict(obj.get("metadata") or {})
        kept = [ref for ref in metadata.get("ownerReferences", []) if ref.get("uid") != uid]
        metadata["ownerReferences"] = [*kept, to_dict(reference)]
        return {**obj, "metadata": metadata}  # type: ignore[return-value]
    copied: Any = copy.copy(obj)  # a client model: every one of them has metadata
    copied.metadata = copy.copy(copied.metadata)
    kept = [ref for ref in copied.metadata.owner_references or [] if ref.uid != uid]
    copied.metadata.owner_references = [*kept, reference]
    return copied


def _owner_reference(service_name: str, uid: str) -> client.V1OwnerReference:
    return model(client.V1OwnerReference, api_version="v1", kind="Service", name=service_name, uid=uid)


def to_dict(obj: Any) -> dict[str, Any]:
    """A client model (or a dict such as the PodGroup) as the plain JSON body the API server takes."""
    return _api_client().sanitize_for_serialization(obj)


@functools.cache
def _api_client() -> client.ApiClient:
    # Only its serialiser is used: no request is ever made with it.
    return client.ApiClient(configuration=client_configuration())


def check_plan_layout(plan: ClusterPlan, backend: str, launch: Launch, addressing: str) -> None:
    """The plan was built for ``backend``, with its launch facts and this backend's layout (shared by the Kubeflow
    and TrainJob builders): a plan built with another backend's facts has that backend's variables and files."""
    if plan.backend != backend:
        raise ValueError(
            f"job {plan.job_name}: the plan was built for the {plan.backend!r} backend; build it with "
            f"backend={backend!r}, {addressing} and layout_for_kubernetes()"
        )
    if plan.launch != launch:
        raise ValueError(
            f"job {plan.job_name}: the plan was built with the launch facts {plan.launch}, not the {backend!r} "
            f"backend's ({launch}); build it with that backend's record as launch="
        )
    if plan.layout.output_path != OUTPUT_PATH:
        raise ValueError(
            f"job {plan.job_name}: the output path must be {OUTPUT_PATH}, where the master's output is read, "
            f"not {plan.layout.output_path}; build the plan with layout_for_kubernetes()"
        )


def _check_plan(plan: ClusterPlan, options: JobManifestOptions) -> None:
    check_plan_layout(plan, "kubernetes", POD_LAUNCH, "KubernetesAddressing")
    if plan.secret_files and plan.layout.secret_files_dir in (None, plan.layout.files_dir):
        raise ValueError(f"job {plan.job_name}: secret files need a secret_files_dir of their own (a Secret's "
                         "volume); build the plan with layout_for_kubernetes()")
    for replica in plan.replicas:
        if not replica.host.startswith(f"{replica.name}.{plan.job_name}.{options.namespace}."):
            raise ValueError(
                f"job {plan.job_name}: replica address {replica.host} is not under the job's Service in namespace "
                f"{options.namespace}; build the plan with KubernetesAddressing({options.namespace!r})"
            )


@dataclass(frozen=True)
class _JobParts:
    """What every object of a job shares: its labels and annotations, names and volumes.

    ``own_labels``/``own_annotations`` are the job's (task instance, job name); ``labels``/``annotations``
    add the options' extra ones below them.
    """

    job_name: str
    own_labels: dict[str, str]
    own_annotations: dict[str, str]
    labels: dict[str, str]
    annotations: dict[str, str]
    grouping: PodGrouping
    owner_uid: str | None
    model_volume: client.V1Volume | None
    files_config_map: str
    #: the Secret of the plan's secret files, if it has some
    secret_files: str | None
    ssh_secret: str | None
    #: hosts of the replicas on standby (sshd), which a launcher connects to
    standby_hosts: tuple[str, ...]

    @classmethod
    def of(cls, plan: ClusterPlan, options: JobManifestOptions, owner_uid: str | None) -> _JobParts:
        ti = options.task_instance
        own_labels = {**task_labels(ti), JOB_LABEL: plan.job_name}
        own_annotations = task_annotations(ti)
        standby_hosts = tuple(replica.host for replica in plan.replicas if replica.command is None)
        grouping = pod_grouping(
            plan.job_name, len(plan.replicas), options.gang_scheduling, options.queue_name, options.scheduler_name
        )
        return cls(
            job_name=plan.job_name,
            own_labels=own_labels,
            own_annotations=own_annotations,
            labels={**options.labels, **own_labels},
            annotations={**options.annotations, **own_annotations},
            grouping=grouping,
            owner_uid=owner_uid,
            model_volume=model_volume(options.model_volume) if plan.layout.model_dir.startswith("/") else None,
            # Always present: it carries the cluster map every replica reads (see _files_config_map).
            files_config_map=f"{plan.job_name}-files",
            secret_files=secret_files_name(plan.job_name) if plan.secret_files else None,
            ssh_secret=ssh_secret_name(plan.job_name) if standby_hosts else None,
            standby_hosts=standby_hosts,
        )

    def owner_references(self) -> list[client.V1OwnerReference] | None:
        """A new list for each object (models are mutable); ``None`` until the Service's uid is known."""
        if not self.owner_uid:
            return None
        return [_owner_reference(self.job_name, self.owner_uid)]


def _metadata(
    name: str,
    options: JobManifestOptions,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    owner_references: list[client.V1OwnerReference] | None = None,
) -> client.V1ObjectMeta:
    return model(
        client.V1ObjectMeta,
        name=name,
        namespace=options.namespace,
        labels=dict(labels),
        annotations=dict(annotations) or None,
        owner_references=owner_references,
    )


def _ssh_secret(options: JobManifestOptions, job: _JobParts, key_pair: horovod_ssh.SshKeyPair) -> client.V1Secret:
    assert job.ssh_secret is not None  # called only for a job that has one
    secret = horovod_ssh.ssh_secret(job.ssh_secret, options.namespace, key_pair, job.labels, job.annotations)
    secret.metadata.owner_references = job.owner_references()
    return secret


def _secret_files_secret(plan: ClusterPlan, options: JobManifestOptions, job: _JobParts) -> client.V1Secret:
    # Not the ConfigMap: whoever may read ConfigMaps of the namespace need not read these (rendered arguments).
    assert job.secret_files is not None  # called only for a plan that has some
    return model(
        client.V1Secret,
        api_version="v1",
        kind="Secret",
        metadata=_metadata(job.secret_files, options, job.labels, job.annotations, job.owner_references()),
        type="Opaque",
        immutable=True,
        string_data=dict(plan.secret_files),
    )


def _service(plan: ClusterPlan, options: JobManifestOptions, job: _JobParts) -> client.V1Service:
    """Headless, and listing pods before they are ready, so that every replica's name resolves at start-up."""
    annotations = dict(job.annotations)
    if options.ttl_seconds_after_finished is not None:
        annotations[TTL_ANNOTATION] = str(options.ttl_seconds_after_finished)
    ports = [
        model(client.V1ServicePort, name=_port_name(i, port), port=port, protocol="TCP")
        for i, port in enumerate(sorted({replica.port for replica in plan.replicas}))
    ]
    if job.ssh_secret is not None:
        ports.append(model(client.V1ServicePort, name="ssh", port=SSH_PORT, protocol="TCP"))
    spec = model(
        client.V1ServiceSpec,
        cluster_ip="None",
        publish_not_ready_addresses=True,
        selector={JOB_LABEL: plan.job_name},
        ports=ports,
    )
    return model(
        client.V1Service,
        api_version="v1",
        kind="Service",
        metadata=_metadata(plan.job_name, options, job.labels, annotations),
        spec=spec,
    )


def _port_name(position: int, port: int) -> str:
    return TRAINING_PORT_NAME if position == 0 else f"{TRAINING_PORT_NAME}-{port}"


def _files_config_map(plan: ClusterPlan, options: JobManifestOptions, job: _JobParts) -> client.V1ConfigMap:
    # Immutable: the files never change during a job, and the kubelet then stops watching the ConfigMap.
    # The cluster map is stored once here instead of inline in every pod: it grows with the job (about 50 KB
    # at 1000 replicas), and inline it would make a big job's pods a thousand times that through the API.
    return model(
        client.V1ConfigMap,
        api_version="v1",
        kind="ConfigMap",
        metadata=_metadata(job.files_config_map, options, job.labels, job.annotations, job.owner_references()),
        data={**plan.files, CLUSTER_KEY: plan.master.env[CLUSTER_VARIABLE]},
        immutable=True,
    )


def model_volume(setting: client.V1Volume | Mapping[str, Any] | str | None) -> client.V1Volume:
    """The volume mounted at the model dir (``JobManifestOptions.model_volume``), named ``MODEL_VOLUME``."""
    if setting is None:
        return model(client.V1Volume, name=MODEL_VOLUME, empty_dir=model(client.V1EmptyDirVolumeSource))
    if isinstance(setting, str):
        claim = model(client.V1PersistentVolumeClaimVolumeSource, claim_name=setting)
        return model(client.V1Volume, name=MODEL_VOLUME, persistent_volume_claim=claim)
    if isinstance(setting, client.V1Volume):
        setting = to_dict(setting)  # rebuilt below on the shared Configuration, and never the caller's object
    return model_from_dict({**setting, "name": MODEL_VOLUME}, "V1Volume", "model_volume")


def _pod(plan: ClusterPlan, replica: Replica, options: JobManifestOptions, job: _JobParts) -> client.V1Pod:
    where = f"replica {replica.name}"
    settings = replica.settings
    pod_security, container_security = split_security_context(settings.security_context, f"{where}: security_context")
    main = _main_container(plan, replica, options, job, container_security)
    peers = _peers_to_wait_for(plan, replica, job.standby_hosts) if options.wait_for_master else []
    init = [_readiness_container(peers, options, container_security)] if peers else None
    spec = model(
        client.V1PodSpec,
        hostname=replica.name,
        subdomain=plan.job_name,
        restart_policy="Never",
        init_containers=init,
        containers=[main],
        volumes=_volumes(replica, job, options) or None,
        node_selector=dict(settings.node_selector) if settings.node_selector else None,
        affinity=affinity(settings.affinity, f"{where}: affinity"),
        tolerations=tolerations(settings.tolerations, f"{where}: tolerations"),
        service_account_name=settings.service_account,
        automount_service_account_token=options.automount_service_account_token,
        image_pull_secrets=image_pull_secrets(settings.image_pull_secrets),
        security_context=pod_security,
        scheduler_name=job.grouping.scheduler_name,
        active_deadline_seconds=options.active_deadline_seconds,
        # Service links would put variables of every Service of the namespace into the replicas' environment
        # (MASTER_PORT=tcp://... from a Service called "master"), where training code may take them for its own.
        enable_service_links=False,
    )
    pod = model(
        client.V1Pod,
        api_version="v1",
        kind="Pod",
        metadata=_metadata(
            replica.name,
            options,
            _pod_labels(replica, options, job),
            _pod_annotations(replica, options, job),
            job.owner_references(),
        ),
        spec=spec,
    )
    if replica.is_master:
        # The sidecar keeps the pod up after the master exits, whatever its exit code, until the document is read.
        pod = add_xcom_sidecar(
            pod,
            sidecar_container_image=options.xcom_sidecar_image,
            sidecar_container_security_context=container_security,
        )
        pod.spec.containers[-1].command = list(SIDECAR_COMMAND)
    return pod


def _pod_labels(replica: Replica, options: JobManifestOptions, job: _JobParts) -> dict[str, str]:
    # Later wins: the job's own labels last, since the Service selects on them.
    return {
        **options.labels,
        **(replica.settings.labels or {}),
        **job.own_labels,
        **job.grouping.labels,
        ROLE_LABEL: replica.role,
        INDEX_LABEL: str(replica.index),
        MASTER_LABEL: "true" if replica.is_master else "false",
    }


def _pod_annotations(replica: Replica, options: JobManifestOptions, job: _JobParts) -> dict[str, str]:
    return {
        **options.annotations,
        **(replica.settings.annotations or {}),
        **job.own_annotations,
        **job.grouping.annotations,
    }


def _main_container(
    plan: ClusterPlan,
    replica: Replica,
    options: JobManifestOptions,
    job: _JobParts,
    security: client.V1SecurityContext | None,
) -> client.V1Container:
    settings = replica.settings
    if replica.command is None:
        command = horovod_ssh.sshd_command()
    elif replica.is_master and options.relay_output:
        command = relay_output_command(options.image_python, replica.command, plan.layout.output_path)
    else:
        command = list(replica.command)
    ports = [model(client.V1ContainerPort, name=TRAINING_PORT_NAME, container_port=replica.port, protocol="TCP")]
    if replica.command is None:
        ports.append(model(client.V1ContainerPort, name="ssh", container_port=SSH_PORT, protocol="TCP"))
    container = model(
        client.V1Container,
        name=MAIN_CONTAINER,
        image=options.image,
        image_pull_policy=options.image_pull_policy,
        command=command,
        env=env_vars(replica.env, from_config_map={CLUSTER_VARIABLE: (job.files_config_map, CLUSTER_KEY)}),
        env_from=env_from(settings.config_map_refs, settings.secret_refs) or None,
        resources=resource_requirements(settings.resources, options.resource_keys()),
        ports=ports,
        volume_mounts=_volume_mounts(plan.layout, job, options) or None,
        security_context=security,
    )
    if replica.is_master and options.relay_output:
        container.termination_message_path = TERMINATION_MESSAGE_PATH
        container.termination_message_policy = "File"
    return container


def _peers_to_wait_for(plan: ClusterPlan, replica: Replica, standby_hosts: tuple[str, ...]) -> list[tuple[str, int]]:
    """The (host, port)s a replica connects to first, so must not start before they listen."""
    if standby_hosts:
        # Launcher model: the launcher connects to every standby replica's sshd; those connect to nothing.
        return [(host, SSH_PORT) for host in standby_hosts] if replica.command is not None else []
    return get_framework(plan.framework).first_peers(replica, plan)


def _readiness_container(
    peers: list[tuple[str, int]], options: JobManifestOptions, security: client.V1SecurityContext | None
) -> client.V1Container:
    resources = model(
        client.V1ResourceRequirements,
        requests=dict(READINESS_RESOURCES["requests"]),
        limits=dict(READINESS_RESOURCES["limits"]),
    )
    return model(
        client.V1Container,
        name=READINESS_CONTAINER,
        image=options.image,
        image_pull_policy=options.image_pull_policy,
        command=wait_for_peers_command(options.image_python, peers, options.readiness_timeout_seconds),
        resources=resources,
        security_context=copy.deepcopy(security),
    )


def _volumes(replica: Replica, job: _JobParts, options: JobManifestOptions) -> list[client.V1Volume]:
    volumes = []
    if job.model_volume is not None:
        volumes.append(copy_model(job.model_volume))
    if job.files_config_map:
        source = model(client.V1ConfigMapVolumeSource, name=job.files_config_map)
        volumes.append(model(client.V1Volume, name=FILES_VOLUME, config_map=source))
    if job.secret_files is not None:
        secret = model(client.V1SecretVolumeSource, secret_name=job.secret_files)
        volumes.append(model(client.V1Volume, name=SECRET_FILES_VOLUME, secret=secret))
    if job.ssh_secret is not None:
        volumes.append(horovod_ssh.ssh_volume(job.ssh_secret, with_private_key=replica.command is not None))
    shm = shm_volume(options.shm_size, replica.settings.resources)
    if shm is not None:
        volumes.append(model_from_dict(shm, "V1Volume", f"replica {replica.name}: shm_size"))
    return volumes


def _volume_mounts(layout: Layout, job: _JobParts, options: JobManifestOptions) -> list[client.V1VolumeMount]:
    mounts = []
    if job.model_volume is not None:
        mounts.append(model(client.V1VolumeMount, name=MODEL_VOLUME, mount_path=layout.model_dir))
    if job.files_config_map:
        mounts.append(model(client.V1VolumeMount, name=FILES_VOLUME, mount_path=layout.files_dir, read_only=True))
    if job.secret_files is not None:
        mounts.append(model(client.V1VolumeMount, name=SECRET_FILES_VOLUME, mount_path=layout.secret_files_dir,
                            read_only=True))
    if job.ssh_secret is not None:
        mounts.append(horovod_ssh.ssh_volume_mount())
    if options.shm_size is not None:
        mounts.append(model_from_dict(shm_mount(), "V1VolumeMount", "shm_size"))
    return mounts
