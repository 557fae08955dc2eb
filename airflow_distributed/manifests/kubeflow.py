"""``ClusterPlan`` -> one Kubeflow training resource: ``TFJob``, ``PyTorchJob``, ``MXJob``, ``MPIJob``,
``XGBoostJob`` or ``PaddleJob`` (pure). The kinds and the releases targeted are in ``kubeflow_kinds``, what a
resource cannot express (checked when the DAG is parsed) in ``kubeflow_checks``.

Every replica type has ``restartPolicy: Never`` and the run policy ``backoffLimit: 0``: any replica exiting
non-zero fails the job (CONTRACT.md).

Variables. The operator sets its framework's variables itself, so a plan built for this backend asks the
framework only for those it leaves out (``Framework.kept_env``), and the templates leave out the names the operator
sets (``KubeflowKind.operator_env``), whoever gave them: ``TF_CONFIG``; ``MASTER_ADDR``/``MASTER_PORT``/
``WORLD_SIZE``/``RANK``/``PET_*``/``PYTHONUNBUFFERED``; ``DMLC_*`` (ps-lite numbers servers and workers itself, so
the plan has no ``DMLC_SERVER_ID``/``DMLC_WORKER_ID``); and the MPI hostfile (the launcher's ``horovodrun`` is
pointed at the operator's ``/etc/mpi/hostfile``); XGBoost's ``MASTER_*``/``WORLD_SIZE``/``RANK``; Paddle's
``PYTHONUNBUFFERED``. What the framework keeps: ``LOCAL_RANK=0`` (the PyTorch operator does not set it), XGBoost's
``DMLC_*`` and Paddle's ``PADDLE_TRAINER_*``/``PADDLE_CURRENT_ENDPOINT``, which their operators do not set: they
are the same in every pod except ``DMLC_TASK_ID`` (derived by the Worker template from the operator's ``RANK``
when the container starts, ``kubeflow_kinds.derive_task_id_command``) and ``PADDLE_TRAINER_ID``/
``PADDLE_CURRENT_ENDPOINT`` (derived from the pod's replica index, ``kubeflow_kinds.derive_trainer_id_command``).
Every ``AIRFLOW_DISTRIBUTED_*`` variable keeps its
meaning: ``JOB``, ``FRAMEWORK``, ``ROLE``, ``MODEL_DIR``, ``CLUSTER`` (the addresses of the operator's Services,
from ``KubeflowAddressing``), ``OUTPUT`` on the master, and ``INDEX``, read from the pod's
``training.kubeflow.org/replica-index`` label by the downward API, as one template serves every index.

What the hook does with the body ``build_kubeflow_job`` returns:

1. create it with ``CustomObjectsApi.create_namespaced_custom_object(group, version, namespace, plural, body)``
   (``kubeflow_resource(framework)`` gives the four); a 409 means an earlier try's job, found by name;
2. watch the object (``job_status``: state, reason, message from ``status.conditions``) and its pods
   (label ``training.kubeflow.org/job-name=<job>``; ``pod_selector`` narrows to one replica type);
3. read the output document from the master's main container (``KubeflowKind.container``)
   ``state.terminated.message`` (the relay copies it there; no sidecar, as the operator decides success from
   the pods' phases), in the pod that ``master_pod_selector`` finds: from the pod event in which that container
   terminates, since with ``cleanPodPolicy: All`` the operator deletes the pod as soon as the job ends;
4. delete the object: the operator's ownerReferences remove its pods and Services. ``runPolicy.cleanPodPolicy``
   already stops (``Running``) or removes (``All``) the pods when the job ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client

from airflow_distributed.contract import ENV_INDEX
from airflow_distributed.frameworks.horovod import HOSTFILE, SSH_PORT
from airflow_distributed.frameworks.paddle import PSERVER
from airflow_distributed.launch import Launch, Operator
from airflow_distributed.manifests import horovod_ssh
from airflow_distributed.manifests.container_scripts import (
    TERMINATION_MESSAGE_PATH,
    relay_output_command,
    wait_for_peers_command,
)
from airflow_distributed.manifests.gang_scheduling import KUEUE_QUEUE_LABEL, VOLCANO_SCHEDULER
from airflow_distributed.manifests.kubeflow_checks import mpi_slots, role_conflicts, slots_conflict
from airflow_distributed.manifests.kubeflow_kinds import KINDS, KubeflowKind, kubeflow_kind
from airflow_distributed.manifests.kubeflow_status import (
    JOB_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
)
from airflow_distributed.manifests.kubernetes import (
    JOB_LABEL,
    MASTER_LABEL,
    MODEL_VOLUME,
    READINESS_CONTAINER,
    READINESS_RESOURCES,
    ROLE_LABEL,
    JobManifestOptions,
    check_plan_layout,
    model_volume,
    to_dict,
)
from airflow_distributed.manifests.kubernetes_resources import (
    ManifestError,
    affinity,
    env_from,
    env_vars,
    image_pull_secrets,
    model,
    model_from_dict,
    resource_requirements,
    split_security_context,
    tolerations,
)
from airflow_distributed.manifests.pod_names import task_annotations, task_labels
from airflow_distributed.manifests.shared_memory import shm_mount, shm_volume
from airflow_distributed.plan import ClusterPlan, Replica

#: How the kubeflow backend starts replicas (``plan.build_plan``'s ``launch``): pods of a Kubeflow Training Operator
#: v1 job, whose operator sets the framework's variables by its conventions.
KUBEFLOW_LAUNCH = Launch(operator=Operator.TRAINING_OPERATOR, pods=True)
# Where mpi-operator mounts the hostfile it writes (OpenMPI's default hostfile on the launcher).
MPI_HOSTFILE = "/etc/mpi/hostfile"
OUTPUT_VOLUME = "output"
# The flag of horovodrun's argv (frameworks.horovod) whose value is the hostfile.
HOROVOD_HOSTFILE_FLAG = "--hostfile"

CleanPodPolicy = Literal["all", "running", "none"]
CLEAN_POD_POLICIES: dict[str, str] = {"all": "All", "running": "Running", "none": "None"}
MPIImplementation = Literal["OpenMPI", "Intel", "MPICH"]
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")


@dataclass(frozen=True)
class KubeflowAddressing:
    """The DNS names the operators give replicas, for the plan's ``AIRFLOW_DISTRIBUTED_CLUSTER``.

    training-operator: a Service per replica, ``<job>-<type>-<index>.<namespace>.svc``. mpi-operator: one
    Service per job, ``<job>-worker-<index>.<job>.<namespace>.svc``, and ``<job>-launcher.<job>...`` for the launcher.
    """

    namespace: str
    framework: str
    domain: str = "svc"

    def endpoint(self, ordinal: int, job: str, name: str, default_port: int) -> tuple[str, int]:
        kind = KINDS.get(self.framework)  # a framework without a kind is refused by the checks, not here
        if kind is None or not kind.mpi:
            return f"{name}.{self.namespace}.{self.domain}", default_port
        host = f"{job}-launcher" if name == f"{job}-launcher-0" else name
        return f"{host}.{job}.{self.namespace}.{self.domain}", default_port


@dataclass(frozen=True)
class KubeflowJobOptions:
    """How a plan becomes a Kubeflow resource.

    :param pods: what every pod template takes from the ``kubernetes`` backend's options: namespace, image, pull
        policy, resource keys, task instance labels, extra labels and annotations, model volume, output relay and
        the image's Python, scheduler name, gang scheduler, Kueue queue (a label of the resource, which Kueue
        admits as one workload), service account token, ``ttl_seconds_after_finished`` and
        ``active_deadline_seconds`` (both into ``runPolicy``). ``wait_for_master`` applies to the MPIJob
        launcher only (it waits for the workers' sshd); the other operators order start-up themselves.
        The XCom sidecar options are not used.
    :param clean_pod_policy: ``all``, ``running`` or ``none``: which pods the operator deletes when the job ends
        (``runPolicy.cleanPodPolicy`` ``All``/``Running``/``None``). Default ``running``: what still runs (e.g.
        parameter servers) is stopped, finished pods keep their logs until the job is deleted.
    :param scheduling_queue: the gang scheduler's queue (``runPolicy.schedulingPolicy.queue``; Volcano's).
    :param priority_class: the PodGroup's PriorityClass (``runPolicy.schedulingPolicy.priorityClass``).
    :param mpi_implementation: MPIJob's ``mpiImplementation``: ``OpenMPI``, ``Intel`` or ``MPICH``.
    """

    pods: JobManifestOptions
    clean_pod_policy: CleanPodPolicy | None = None
    scheduling_queue: str | None = None
    priority_class: str | None = None
    mpi_implementation: MPIImplementation = "OpenMPI"

    def __post_init__(self) -> None:
        if self.clean_pod_policy is not None and self.clean_pod_policy not in CLEAN_POD_POLICIES:
            raise ValueError(
                f"clean_pod_policy {self.clean_pod_policy!r} is not supported; allowed: {', '.join(CLEAN_POD_POLICIES)}"
            )
        if self.mpi_implementation not in MPI_IMPLEMENTATIONS:
            raise ValueError(
                f"mpi_implementation {self.mpi_implementation!r}: use {', '.join(MPI_IMPLEMENTATIONS)}"
            )
        if (self.scheduling_queue or self.priority_class) and self.pods.gang_scheduling is None:
            raise ValueError(
                "scheduling_queue and priority_class go into runPolicy.schedulingPolicy, which the operator reads "
                "only with gang scheduling: set gang_scheduling ('volcano' or 'scheduler-plugins')"
            )

    @property
    def cleanup(self) -> str:
        return CLEAN_POD_POLICIES[self.clean_pod_policy or "running"]


# -------------------------------------------------------------------------------------------------------- build


def build_kubeflow_job(plan: ClusterPlan, options: KubeflowJobOptions) -> dict[str, Any]:
    """The Kubeflow resource of a plan built with ``backend="kubeflow"``, ``KubeflowAddressing`` and
    ``layout_for_kubernetes()``, as the JSON body the API server takes.

    :raises ValueError: a plan not built for this backend.
    :raises ManifestError: a role whose replicas need different templates, or a pod setting that is not valid
        Kubernetes, naming the replica and field.
    """
    kind = kubeflow_kind(plan.framework)
    _check_plan(plan, options, kind)
    by_role: dict[str, list[Replica]] = {}
    for replica in plan.replicas:
        by_role.setdefault(replica.role, []).append(replica)
    _check_templates(plan, kind, by_role)

    pods = options.pods
    ti = pods.task_instance
    own_labels = {**task_labels(ti), JOB_LABEL: plan.job_name}
    job_labels = {**pods.labels, **own_labels}
    if pods.queue_name:
        job_labels[KUEUE_QUEUE_LABEL] = pods.queue_name
    job_annotations = {**pods.annotations, **task_annotations(ti)}

    replica_specs = {
        kind.replica_type(role): {
            "replicas": len(replicas),
            "restartPolicy": "Never",
            "template": to_dict(_pod_template(plan, kind, replicas, options, own_labels)),
        }
        for role, replicas in by_role.items()
    }
    spec: dict[str, Any] = {**kind.fixed_spec, "runPolicy": _run_policy(plan, options)}
    if kind.mpi:
        spec["slotsPerWorker"] = mpi_slots(plan.master.settings)
        spec["mpiImplementation"] = options.mpi_implementation
    spec[kind.replica_specs_key] = replica_specs
    if kind.processes_key is not None and plan.processes_per_replica > 1:
        spec[kind.processes_key] = str(plan.processes_per_replica)
    metadata: dict[str, Any] = {"name": plan.job_name, "namespace": pods.namespace, "labels": job_labels}
    if job_annotations:
        metadata["annotations"] = job_annotations
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata, "spec": spec}


def _check_plan(plan: ClusterPlan, options: KubeflowJobOptions, kind: KubeflowKind) -> None:
    check_plan_layout(plan, "kubeflow", KUBEFLOW_LAUNCH, "KubeflowAddressing")
    addressing = KubeflowAddressing(options.pods.namespace, plan.framework)
    for replica in plan.replicas:
        expected, _ = addressing.endpoint(0, plan.job_name, replica.name, replica.port)
        if not replica.host.startswith(expected.rsplit(".", 1)[0] + "."):
            raise ValueError(
                f"job {plan.job_name}: replica address {replica.host} is not the one the {kind.kind} operator gives "
                f"it in namespace {options.pods.namespace}; build the plan with "
                f"KubeflowAddressing({options.pods.namespace!r}, {plan.framework!r})"
            )
    if kind.pservers_refused and any(replica.role == PSERVER for replica in plan.replicas):
        raise ManifestError(f"job {plan.job_name}: {kind.pservers_refused}")
    # The only file a framework ships today is Horovod's hostfile, which mpi-operator writes itself.
    extra = sorted(name for name in [*plan.files, *plan.secret_files]
                   if not (kind.mpi and name == HOSTFILE))
    if extra:
        raise ManifestError(f"job {plan.job_name}: {kind.a_kind} has no way to ship the files {', '.join(extra)}")


def _check_templates(plan: ClusterPlan, kind: KubeflowKind, by_role: Mapping[str, list[Replica]]) -> None:
    problems = []
    for role, replicas in by_role.items():
        problems += [message for _, message in role_conflicts(kind, role, [r.settings for r in replicas])]
    if kind.mpi:
        workers = by_role.get("worker", [])
        message = slots_conflict(plan.master.settings, workers[0].settings if workers else None)
        if message:
            problems.append(message)
    if problems:
        raise ManifestError(f"job {plan.job_name}: " + "; ".join(problems))


def _run_policy(plan: ClusterPlan, options: KubeflowJobOptions) -> dict[str, Any]:
    pods = options.pods
    # No retry: any replica exiting non-zero fails the job at once (CONTRACT.md); the MPIJob launcher is a
    # batch Job, whose own default would retry it six times.
    policy: dict[str, Any] = {"cleanPodPolicy": options.cleanup, "backoffLimit": 0}
    if pods.ttl_seconds_after_finished is not None:
        policy["ttlSecondsAfterFinished"] = pods.ttl_seconds_after_finished
    if pods.active_deadline_seconds is not None:
        policy["activeDeadlineSeconds"] = pods.active_deadline_seconds
    if pods.gang_scheduling is not None:
        # Every replica is needed: a job with one replica missing waits forever, holding the others' nodes.
        scheduling: dict[str, Any] = {"minAvailable": len(plan.replicas)}
        if options.scheduling_queue:
            scheduling["queue"] = options.scheduling_queue
        if options.priority_class:
            scheduling["priorityClass"] = options.priority_class
        policy["schedulingPolicy"] = scheduling
    return policy


def _pod_template(
    plan: ClusterPlan,
    kind: KubeflowKind,
    replicas: Sequence[Replica],
    options: KubeflowJobOptions,
    own_labels: Mapping[str, str],
) -> client.V1PodTemplateSpec:
    """One template for every replica of a role (``_check_templates`` made sure they share their settings)."""
    pods = options.pods
    first = replicas[0]
    settings = first.settings
    where = f"{kind.replica_type(first.role)} replicas of {plan.job_name}"
    pod_security, container_security = split_security_context(settings.security_context, f"{where}: security_context")
    init = None
    standby = [r.host for r in plan.replicas if r.command is None]
    if first.is_master and standby and pods.wait_for_master:
        peers = [(host, SSH_PORT) for host in standby]
        init = [model(
            client.V1Container,
            name=READINESS_CONTAINER,
            image=pods.image,
            image_pull_policy=pods.image_pull_policy,
            command=wait_for_peers_command(pods.image_python, peers, pods.readiness_timeout_seconds),
            resources=model(client.V1ResourceRequirements, requests=dict(READINESS_RESOURCES["requests"]),
                            limits=dict(READINESS_RESOURCES["limits"])),
            security_context=container_security,
        )]
    volume = model_volume(pods.model_volume) if plan.layout.model_dir.startswith("/") else None
    volumes = [volume] if volume is not None else []
    if first.is_master and pods.relay_output:
        volumes.append(model(client.V1Volume, name=OUTPUT_VOLUME, empty_dir=model(client.V1EmptyDirVolumeSource)))
    # One template serves the role: its replicas share their resources (_check_templates), so their size too.
    shm = shm_volume(pods.shm_size, settings.resources)
    if shm is not None:
        volumes.append(model_from_dict(shm, "V1Volume", f"{where}: shm_size"))
    scheduler_name = pods.scheduler_name
    if pods.gang_scheduling == "volcano":
        scheduler_name = scheduler_name or VOLCANO_SCHEDULER
    spec = model(
        client.V1PodSpec,
        init_containers=init,
        containers=[_main_container(plan, kind, replicas, options, container_security, volume is not None)],
        volumes=volumes or None,
        node_selector=dict(settings.node_selector) if settings.node_selector else None,
        affinity=affinity(settings.affinity, f"{where}: affinity"),
        tolerations=tolerations(settings.tolerations, f"{where}: tolerations"),
        service_account_name=settings.service_account,
        automount_service_account_token=pods.automount_service_account_token,
        image_pull_secrets=image_pull_secrets(settings.image_pull_secrets),
        security_context=pod_security,
        scheduler_name=scheduler_name,
        # See the kubernetes backend: other Services' variables would shadow the framework's own.
        enable_service_links=False,
    )
    labels = {
        **pods.labels,
        **(settings.labels or {}),
        **own_labels,
        ROLE_LABEL: first.role,
        MASTER_LABEL: "true" if first.is_master else "false",
    }
    own_annotations = task_annotations(pods.task_instance)
    annotations = {**pods.annotations, **(settings.annotations or {}), **own_annotations}
    metadata = model(client.V1ObjectMeta, labels=labels, annotations=annotations or None)
    return model(client.V1PodTemplateSpec, metadata=metadata, spec=spec)


def _main_container(
    plan: ClusterPlan,
    kind: KubeflowKind,
    replicas: Sequence[Replica],
    options: KubeflowJobOptions,
    security: client.V1SecurityContext | None,
    with_model_volume: bool,
) -> client.V1Container:
    pods = options.pods
    first = replicas[0]
    settings = first.settings
    relay = first.is_master and pods.relay_output
    if first.command is None:
        command = horovod_ssh.sshd_command()
    else:
        command = list(first.command)
        if kind.mpi:
            command = _with_hostfile(command, MPI_HOSTFILE)
        if len(replicas) > 1 and kind.derive_rank_env is not None:
            command = kind.derive_rank_env(command, len(plan.replicas))
        if relay:
            command = relay_output_command(pods.image_python, command, plan.layout.output_path)
    ports = None
    if kind.port_name is not None:
        ports = [model(client.V1ContainerPort, name=kind.port_name, container_port=first.port, protocol="TCP")]
    elif first.command is None:
        ports = [model(client.V1ContainerPort, name="ssh", container_port=SSH_PORT, protocol="TCP")]
    mounts = []
    if with_model_volume:
        mounts.append(model(client.V1VolumeMount, name=MODEL_VOLUME, mount_path=plan.layout.model_dir))
    if relay:
        output_dir = plan.layout.output_path.rsplit("/", 1)[0]
        mounts.append(model(client.V1VolumeMount, name=OUTPUT_VOLUME, mount_path=output_dir))
    if pods.shm_size is not None:
        mounts.append(model_from_dict(shm_mount(), "V1VolumeMount", "shm_size"))
    container = model(
        client.V1Container,
        name=kind.container,
        image=pods.image,
        image_pull_policy=pods.image_pull_policy,
        command=command,
        env=_template_env(plan, kind, replicas),
        env_from=env_from(settings.config_map_refs, settings.secret_refs) or None,
        resources=resource_requirements(settings.resources, pods.resource_keys()),
        ports=ports,
        volume_mounts=mounts or None,
        security_context=security,
    )
    if relay:
        container.termination_message_path = TERMINATION_MESSAGE_PATH
        container.termination_message_policy = "File"
    return container


def _with_hostfile(argv: Sequence[str], path: str) -> list[str]:
    """The launcher's ``horovodrun`` argv pointed at another hostfile (the operator's)."""
    argv = list(argv)
    if HOROVOD_HOSTFILE_FLAG in argv:
        argv[argv.index(HOROVOD_HOSTFILE_FLAG) + 1] = path
    return argv


def _template_env(plan: ClusterPlan, kind: KubeflowKind, replicas: Sequence[Replica]) -> list[client.V1EnvVar]:
    """The role's variables: the plan's (with only the framework variables the operator leaves out) less those the
    operator sets and less the index."""
    first = replicas[0]
    dropped = kind.operator_env | {ENV_INDEX}
    if len(replicas) > 1:
        dropped |= kind.rank_derived_env  # set in the pod by the kind's derive_rank_env
    shared = {name: value for name, value in first.env.items() if name not in dropped}
    for replica in replicas[1:]:
        own = {name: value for name, value in replica.env.items() if name not in dropped}
        if own != shared:
            differing = sorted(name for name in set(own) | set(shared) if own.get(name) != shared.get(name))
            raise ManifestError(
                f"replica {replica.name}: variables {', '.join(differing)} differ from {first.name}'s, but "
                f"{kind.a_kind} runs every {kind.replica_type(first.role)} replica from one template"
            )
    variables = env_vars(shared)
    if len(replicas) == 1 and first.index == 0:
        variables += env_vars({ENV_INDEX: "0"})
    else:
        # One template, many indices: each pod reads its own from the label the operator gives it.
        selector = model(client.V1ObjectFieldSelector, field_path=f"metadata.labels['{REPLICA_INDEX_LABEL}']")
        source = model(client.V1EnvVarSource, field_ref=selector)
        variables.append(model(client.V1EnvVar, name=ENV_INDEX, value_from=source))
    return sorted(variables, key=lambda var: var.name)


__all__ = [
    "CLEAN_POD_POLICIES",
    "HOROVOD_HOSTFILE_FLAG",
    "JOB_NAME_LABEL",
    "MPI_HOSTFILE",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "KubeflowAddressing",
    "KubeflowJobOptions",
    "ManifestError",
    "build_kubeflow_job",
]
