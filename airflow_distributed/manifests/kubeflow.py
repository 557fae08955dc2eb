"""``ClusterPlan`` -> one Kubeflow training resource: ``TFJob``, ``PyTorchJob``, ``MXJob``, ``MPIJob``,
``XGBoostJob`` or ``PaddleJob`` (pure).

The ``kubeflow`` backend submits the same spec as a custom resource, and the operator in the cluster creates
the pods, their Services and the framework's variables. Resources, their replica types and the releases targeted:

- tensorflow: ``TFJob`` kubeflow.org/v1, Chief (the master), PS, Worker; training-operator 1.8 / 1.9.
- pytorch: ``PyTorchJob`` kubeflow.org/v1, Master, Worker; training-operator 1.8 / 1.9.
- mxnet: ``MXJob`` kubeflow.org/v1, Scheduler, Server, Worker, ``jobMode: MXTrain``; training-operator <= 1.8
  (1.9 removed MXJob).
- horovod: ``MPIJob`` kubeflow.org/v2beta1, Launcher, Worker, ``slotsPerWorker``, ``runLauncherAsWorker`` (the
  launcher is rank 0, as in Polyaxon), ``sshAuthMountPath``, ``mpiImplementation``; mpi-operator 0.5 / 0.6.
- xgboost: ``XGBoostJob`` kubeflow.org/v1, Master (runs the tracker, rank 0), Worker; training-operator 1.8 / 1.9.
- paddle: ``PaddleJob`` kubeflow.org/v1, Master (trainer 0), Worker (trainer i + 1); training-operator 1.8 / 1.9;
  collective mode only. With a Master the operator takes a PaddleJob for what it calls PS mode: it decides success by
  the Master, as here, and adds ``PADDLE_MASTER`` (the Master's address, where ``init_parallel_env`` then puts its
  TCP store: the first trainer endpoint, as on the other backends), ``PADDLE_NNODES``, ``PADDLE_JOB_ID`` and
  ``PADDLE_SERVER_NUM``/``PADDLE_TRAINER_NUM`` = 1, which only ``paddle.distributed.launch`` reads; the
  contract's scripts call ``init_parallel_env`` with the plan's ``PADDLE_*`` variables. Paddle's own
  parameter-server mode is refused: a PaddleJob runs pservers as its Master replicas and succeeds when they exit,
  but pservers serve until stopped and trainer 0 decides the job here.
- jax: none. JAXJob (training-operator 1.9) has Worker replicas only, worker 0 being the coordinator, so the
  Polyaxon master would share one template with the workers, the output relay and ``AIRFLOW_DISTRIBUTED_OUTPUT``
  included; ``kubeflow_problems`` refuses it and the ``kubernetes`` backend runs it.

Every replica type has ``restartPolicy: Never`` and the run policy ``backoffLimit: 0``: any replica exiting
non-zero fails the job (CONTRACT.md).

Per-index overrides. A replica spec is one pod template for every replica of its role, and its key *is* the role
(it names the role in ``TF_CONFIG``, ``DMLC_ROLE``, the ranks of a PyTorchJob, the MPI hostfile), so none of these
CRDs lets one role be split over two replica specs. The Polyaxon master is always a replica spec of its own
(Chief, Master, Scheduler, Launcher), so its settings always fit. Any other index whose effective settings differ
from the rest of its role is refused, naming the index and the settings that differ: ``kubeflow_problems`` when
the DAG is parsed, ``ManifestError`` when building. An override equal to the default, or the same override on
every index of a role, fits. An MPIJob also gives every host of its hostfile the same ``slotsPerWorker`` (the
launcher too, as it runs ranks), so the launcher must have as many GPUs as a worker.

Variables. The operator sets its framework's variables itself, so a plan built for this backend asks the
framework only for those it leaves out (``Framework.kept_env``), and the templates leave out the names the operator
sets (``KubeflowKind.operator_env``), whoever gave them: ``TF_CONFIG``; ``MASTER_ADDR``/``MASTER_PORT``/
``WORLD_SIZE``/``RANK``/``PET_*``/``PYTHONUNBUFFERED``; ``DMLC_*`` (ps-lite numbers servers and workers itself, so
the plan has no ``DMLC_SERVER_ID``/``DMLC_WORKER_ID``); and the MPI hostfile (the launcher's ``horovodrun`` is
pointed at the operator's ``/etc/mpi/hostfile``); XGBoost's ``MASTER_*``/``WORLD_SIZE``/``RANK``; Paddle's
``PYTHONUNBUFFERED``. What the framework keeps: ``LOCAL_RANK=0`` (the PyTorch operator does not set it), XGBoost's
``DMLC_*`` and Paddle's ``PADDLE_TRAINER_*``/``PADDLE_CURRENT_ENDPOINT``, which their operators do not set: they
are the same in every pod except
``DMLC_TASK_ID`` (derived by the Worker template from the operator's ``RANK`` when the container starts,
``derive_task_id_command``) and ``PADDLE_TRAINER_ID``/``PADDLE_CURRENT_ENDPOINT`` (derived from the pod's replica
index, ``derive_trainer_id_command``). Every ``AIRFLOW_DISTRIBUTED_*`` variable keeps its
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

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from kubernetes import client

from airflow_distributed.contract import ENV_INDEX
from airflow_distributed.frameworks import get_framework
from airflow_distributed.frameworks.horovod import HOSTFILE, SSH_PORT
from airflow_distributed.frameworks.paddle import PSERVER
from airflow_distributed.frameworks.xgboost import task_id
from airflow_distributed.manifests import horovod_ssh
from airflow_distributed.manifests.container_scripts import (
    TERMINATION_MESSAGE_PATH,
    relay_output_command,
    wait_for_peers_command,
)
from airflow_distributed.manifests.gang_scheduling import KUEUE_QUEUE_LABEL, VOLCANO_SCHEDULER
from airflow_distributed.manifests.kubeflow_status import (
    GROUP,
    JOB_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_SPECS_KEY,
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
    resource_requirements,
    split_security_context,
    tolerations,
)
from airflow_distributed.plan import ClusterPlan, Replica, SpecReplica, expand_replicas, master_settings
from airflow_distributed.spec.models import SECTION_OF, PodSettings, PSCluster, TrainingSpec

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
class KubeflowKind:
    """How one framework is written as a Kubeflow resource."""

    framework: str
    kind: str
    version: str
    plural: str
    #: our role -> the operator's replica type
    replica_types: Mapping[str, str]
    #: the container the operator gives its variables to and whose exit it reads
    container: str
    #: name of the container port the operator reads the framework's port from; ``None`` when it reads none
    port_name: str | None
    #: variables the operator sets itself, left out of the templates whoever gave them (the plan has only the
    #: framework variables the operator leaves out, ``Framework.kept_env``)
    operator_env: frozenset[str]
    #: spec fields every resource of this kind has, beside the replica specs and the run policy
    fixed_spec: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: variables that differ between the pods of one template and are derived from the operator's ``RANK`` at start
    rank_derived_env: frozenset[str] = frozenset()

    @property
    def group(self) -> str:
        return GROUP

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    @property
    def replica_specs_key(self) -> str:
        """The spec key of the replica specs, e.g. ``tfReplicaSpecs``."""
        return REPLICA_SPECS_KEY[self.kind]

    @property
    def master_type(self) -> str:
        return self.replica_types[get_framework(self.framework).master_role]

    def replica_type(self, role: str) -> str:
        return self.replica_types[role]

    @property
    def a_kind(self) -> str:
        """The kind with its article, for messages: "a TFJob", "an MPIJob" (said "em-pee-eye")."""
        return f"{'an' if self.kind.startswith('M') else 'a'} {self.kind}"


_PYTORCH_ENV = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED",
    "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE",
})
_MXNET_ENV = frozenset({
    "MX_CONFIG", "DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER", "DMLC_NUM_WORKER",
    "DMLC_USE_KUBERNETES",
})

KINDS: dict[str, KubeflowKind] = {
    "tensorflow": KubeflowKind(
        "tensorflow", "TFJob", "v1", "tfjobs",
        MappingProxyType({"chief": "Chief", "ps": "PS", "worker": "Worker"}),
        container="tensorflow", port_name="tfjob-port", operator_env=frozenset({"TF_CONFIG"}),
    ),
    "pytorch": KubeflowKind(
        "pytorch", "PyTorchJob", "v1", "pytorchjobs",
        MappingProxyType({"master": "Master", "worker": "Worker"}),
        container="pytorch", port_name="pytorchjob-port", operator_env=_PYTORCH_ENV,
    ),
    "mxnet": KubeflowKind(
        "mxnet", "MXJob", "v1", "mxjobs",
        MappingProxyType({"scheduler": "Scheduler", "server": "Server", "worker": "Worker"}),
        container="mxnet", port_name="mxjob-port", operator_env=_MXNET_ENV,
        fixed_spec=MappingProxyType({"jobMode": "MXTrain"}),
    ),
    "horovod": KubeflowKind(
        "horovod", "MPIJob", "v2beta1", "mpijobs",
        MappingProxyType({"launcher": "Launcher", "worker": "Worker"}),
        # mpi-operator sets OMPI_MCA_orte_default_hostfile (and its other MPI variables) itself.
        container="mpi", port_name=None, operator_env=frozenset({"OMPI_MCA_orte_default_hostfile"}),
        # The launcher runs ranks too (Polyaxon's rank 0), so it is a host of the hostfile.
        fixed_spec=MappingProxyType({"runLauncherAsWorker": True, "sshAuthMountPath": horovod_ssh.SSH_DIR}),
    ),
    "xgboost": KubeflowKind(
        "xgboost", "XGBoostJob", "v1", "xgboostjobs",
        MappingProxyType({"master": "Master", "worker": "Worker"}),
        container="xgboost", port_name="xgboostjob-port",
        operator_env=frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}),
        rank_derived_env=frozenset({"DMLC_TASK_ID"}),
    ),
    "paddle": KubeflowKind(
        "paddle", "PaddleJob", "v1", "paddlejobs",
        MappingProxyType({"master": "Master", "worker": "Worker"}),
        container="paddle", port_name="master", operator_env=frozenset({"PYTHONUNBUFFERED"}),
        rank_derived_env=frozenset({"PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT"}),
    ),
}


def kubeflow_kind(framework: str) -> KubeflowKind:
    try:
        return KINDS[framework]
    except KeyError:
        raise ValueError(f"framework {framework!r} has no Kubeflow resource; allowed: {', '.join(KINDS)}") from None


@dataclass(frozen=True)
class KubeflowResource:
    """What ``CustomObjectsApi`` calls take to address a kind."""

    group: str
    version: str
    plural: str
    kind: str


def kubeflow_resource(framework: str) -> KubeflowResource:
    kind = kubeflow_kind(framework)
    return KubeflowResource(kind.group, kind.version, kind.plural, kind.kind)


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
        if self.framework != "horovod":
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


# ------------------------------------------------------------------------------------------ one template per role


PADDLE_PS_REFUSED = (
    "a PaddleJob runs parameter servers as its Master replicas and succeeds when they exit, but Paddle's pservers "
    "serve until stopped and trainer 0 decides the job; backend='kubeflow' takes Paddle's collective mode only "
    "(n_ps: 0); use backend='kubernetes' for parameter-server mode"
)


def kubeflow_problems(spec: TrainingSpec) -> list[tuple[str, str]]:
    """``(path, message)`` for every part of a valid spec that its Kubeflow resource cannot express.

    For the operator's checks when the DAG is parsed; ``build_kubeflow_job`` raises the same as ``ManifestError``.
    """
    if spec.framework not in KINDS:
        return [("backend", f"framework '{spec.framework}' has no Kubeflow resource; backend='kubeflow' takes "
                 f"{', '.join(KINDS)}; use backend='kubernetes' (one pod per replica, no operator needed)")]
    kind = kubeflow_kind(spec.framework)
    cluster = spec.cluster
    section = f"environment.{SECTION_OF[spec.framework]}"
    problems: list[tuple[str, str]] = []
    if spec.framework == "paddle" and isinstance(cluster, PSCluster) and cluster.n_ps:
        problems.append((f"{section}.n_ps", PADDLE_PS_REFUSED))
    if getattr(cluster, "elastic", None) is not None:
        # The task wraps every replica in torchrun with its own rendezvous; a PyTorchJob's elasticPolicy does that
        # in the operator instead, with other names and restart rules.
        problems.append((f"{section}.elastic", "is not supported with backend='kubeflow'; use backend='kubernetes' "
                         "or 'local', where the task restarts lost replicas itself"))
    by_role: dict[str, list[SpecReplica]] = {}
    for slot in expand_replicas(spec):
        # The master has a replica type of its own; a role the kind has none for was refused above (Paddle's pservers).
        if slot.spec_key is not None and slot.role in kind.replica_types:
            by_role.setdefault(slot.role, []).append(slot)
    for role, slots in by_role.items():
        spec_key = slots[0].spec_key
        default = getattr(cluster, f"default_{spec_key}") or PodSettings()
        for index, message in _role_conflicts(kind, role, [slot.settings for slot in slots], default):
            override = slots[index].override
            where = f"{section}.{spec_key}" + (f"[{override}]" if override is not None else "")
            problems.append((where, message))
    if spec.framework == "horovod":
        workers = by_role.get("worker", [])
        conflict = _slots_conflict(master_settings(spec), workers[0].settings if workers else None)
        if conflict:
            problems.append(("environment.resources.gpu", conflict))
    return problems


def _role_conflicts(
    kind: KubeflowKind, role: str, settings: Sequence[PodSettings], default: PodSettings | None = None
) -> list[tuple[int, str]]:
    """(index, message) for each replica whose settings are not those most of its role share.

    :param default: the role's default settings, which stand for the role on a tie.
    """
    if len(settings) < 2 or all(item == settings[0] for item in settings):
        return []
    # The settings most replicas share stand for the role (on a tie the default's, else the lowest index's), so
    # the message names the odd ones out, usually the overridden indices.
    distinct: list[PodSettings] = []
    counts: list[int] = []
    for item in settings:
        if item in distinct:
            counts[distinct.index(item)] += 1
        else:
            distinct.append(item)
            counts.append(1)
    tied = [item for item, count in zip(distinct, counts) if count == max(counts)]
    reference = default if default in tied else tied[0]
    rtype = kind.replica_type(role)
    conflicts = []
    for index, item in enumerate(settings):
        if item == reference:
            continue
        differing = sorted(
            key for key in PodSettings.model_fields if getattr(item, key) != getattr(reference, key)
        )
        conflicts.append((
            index,
            f"index {index} of {role} has its own {', '.join(differing)}, but {kind.a_kind} runs all "
            f"{len(settings)} {rtype} replicas from one pod template; give every {role} the same settings, "
            "or use backend='kubernetes'",
        ))
    return conflicts


def _slots(settings: PodSettings) -> int:
    return max(settings.resources.device_count("gpu"), 1) if settings.resources else 1


def _slots_conflict(launcher: PodSettings, worker: PodSettings | None) -> str | None:
    if worker is None or _slots(launcher) == _slots(worker):
        return None
    return (
        f"the launcher has {_slots(launcher)} slot(s) (GPUs, else 1) and each worker {_slots(worker)}, but an "
        "MPIJob gives every host, launcher included, the same slotsPerWorker; give the launcher as many GPUs as a "
        "worker, or use backend='kubernetes'"
    )


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
    own_labels = {**(ti.labels() if ti else {}), JOB_LABEL: plan.job_name}
    job_labels = {**pods.labels, **own_labels}
    if pods.queue_name:
        job_labels[KUEUE_QUEUE_LABEL] = pods.queue_name
    job_annotations = {**pods.annotations, **(ti.annotations() if ti else {})}

    replica_specs = {
        kind.replica_type(role): {
            "replicas": len(replicas),
            "restartPolicy": "Never",
            "template": to_dict(_pod_template(plan, kind, replicas, options, own_labels)),
        }
        for role, replicas in by_role.items()
    }
    spec: dict[str, Any] = {**kind.fixed_spec, "runPolicy": _run_policy(plan, options)}
    if plan.framework == "horovod":
        spec["slotsPerWorker"] = _slots(plan.master.settings)
        spec["mpiImplementation"] = options.mpi_implementation
    spec[kind.replica_specs_key] = replica_specs
    metadata: dict[str, Any] = {"name": plan.job_name, "namespace": pods.namespace, "labels": job_labels}
    if job_annotations:
        metadata["annotations"] = job_annotations
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata, "spec": spec}


def _check_plan(plan: ClusterPlan, options: KubeflowJobOptions, kind: KubeflowKind) -> None:
    check_plan_layout(plan, "kubeflow", "KubeflowAddressing")
    addressing = KubeflowAddressing(options.pods.namespace, plan.framework)
    for replica in plan.replicas:
        expected, _ = addressing.endpoint(0, plan.job_name, replica.name, replica.port)
        if not replica.host.startswith(expected.rsplit(".", 1)[0] + "."):
            raise ValueError(
                f"job {plan.job_name}: replica address {replica.host} is not the one the {kind.kind} operator gives "
                f"it in namespace {options.pods.namespace}; build the plan with "
                f"KubeflowAddressing({options.pods.namespace!r}, {plan.framework!r})"
            )
    if any(replica.role == PSERVER for replica in plan.replicas) and plan.framework == "paddle":
        raise ManifestError(f"job {plan.job_name}: {PADDLE_PS_REFUSED}")
    # The only file a framework ships today is Horovod's hostfile, which mpi-operator writes itself.
    extra = sorted(name for name in [*plan.files, *plan.secret_files]
                   if not (plan.framework == "horovod" and name == HOSTFILE))
    if extra:
        raise ManifestError(f"job {plan.job_name}: {kind.a_kind} has no way to ship the files {', '.join(extra)}")


def _check_templates(plan: ClusterPlan, kind: KubeflowKind, by_role: Mapping[str, list[Replica]]) -> None:
    problems = []
    for role, replicas in by_role.items():
        problems += [message for _, message in _role_conflicts(kind, role, [r.settings for r in replicas])]
    if plan.framework == "horovod":
        workers = by_role.get("worker", [])
        message = _slots_conflict(plan.master.settings, workers[0].settings if workers else None)
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
    own_annotations = pods.task_instance.annotations() if pods.task_instance else {}
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
        if plan.framework == "horovod":
            command = _with_hostfile(command, MPI_HOSTFILE)
        if len(replicas) > 1 and kind.rank_derived_env:
            command = (derive_trainer_id_command(command) if plan.framework == "paddle"
                       else derive_task_id_command(command, len(plan.replicas)))
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


def derive_task_id_command(argv: Sequence[str], world_size: int) -> list[str]:
    """``argv`` run with ``DMLC_TASK_ID`` set from the operator's ``RANK``, padded as ``frameworks.xgboost.task_id``.

    One template serves every Worker, so the one variable that differs between them is computed in the pod.
    """
    task_format = shlex.quote(f"%0{len(task_id(world_size - 1, world_size))}d")
    script = f'DMLC_TASK_ID=$(printf {task_format} "$RANK") && export DMLC_TASK_ID && exec "$@"'
    return ["sh", "-c", script, "sh", *argv]


def derive_trainer_id_command(argv: Sequence[str]) -> list[str]:
    """``argv`` run with Paddle's ``PADDLE_TRAINER_ID`` and ``PADDLE_CURRENT_ENDPOINT`` of a Worker pod.

    One template serves every Worker, so these are computed in the pod from its replica index (the
    ``AIRFLOW_DISTRIBUTED_INDEX`` the template reads from the operator's label): worker i is trainer i + 1, and its
    endpoint is entry i + 2 (1-based) of ``PADDLE_TRAINER_ENDPOINTS``, as ``frameworks.paddle`` gives them.
    """
    script = (
        'PADDLE_TRAINER_ID=$((AIRFLOW_DISTRIBUTED_INDEX + 1)) && '
        'PADDLE_CURRENT_ENDPOINT=$(printf %s "$PADDLE_TRAINER_ENDPOINTS" | cut -d, -f$((PADDLE_TRAINER_ID + 1))) && '
        'export PADDLE_TRAINER_ID PADDLE_CURRENT_ENDPOINT && exec "$@"'
    )
    return ["sh", "-c", script, "sh", *argv]


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
        dropped |= kind.rank_derived_env  # set by the command, see derive_task_id_command
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
    "KINDS",
    "MPI_HOSTFILE",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "KubeflowAddressing",
    "KubeflowJobOptions",
    "KubeflowKind",
    "KubeflowResource",
    "ManifestError",
    "build_kubeflow_job",
    "derive_task_id_command",
    "derive_trainer_id_command",
    "kubeflow_kind",
    "kubeflow_problems",
    "kubeflow_resource",
]
