"""``ClusterPlan`` -> one Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``), built with the
typed models of ``kubeflow-trainer-api`` (pure).

Run-time: it imports the typed models (the ``trainjob`` extra) and the Kubernetes manifests at its top, and the
backend imports it when a job runs; what a DAG parse checks (the spec, the runtime) is ``trainjob_checks``.

A TrainJob names a training runtime (``runtimeRef``: a ``ClusterTrainingRuntime`` by default, or a namespaced
``TrainingRuntime``) and says what differs from it; the Trainer controller runs it as a JobSet whose replicated job
``node`` is one indexed Job of ``numNodes`` pods, all from one pod template. The spec maps onto it as:

- ``trainer``: ``numNodes`` = 1 + n_workers (the Polyaxon master is node 0), ``numProcPerNode`` =
  ``environment.pytorch.n_proc_per_node`` when given, ``resourcesPerNode`` = the master's resources, ``image``,
  ``command`` (see below), ``env`` = the plan's variables less those the runtime sets (``PET_*``) and those that
  differ between nodes;
- ``runtimePatches`` (manager ``airflow-distributed``), on the ``node`` replicated job's pod template: node selector,
  affinity, tolerations, service account, image pull secrets, pod security context, labels and annotations, and
  the volumes mounted into the ``node`` container (the model dir, the output relay's directory, the memory-backed
  ``/dev/shm`` of ``manifests.shared_memory``).

Targeted release: Kubeflow Trainer 2.3 (``kubeflow-trainer-api`` 2.3.x). Frameworks and their default runtime:
pytorch -> ``torch-distributed``, jax -> ``jax-distributed`` (its runtime sets ``JAX_COORDINATOR_ADDRESS``, node 0
on port 29500, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``), xgboost -> ``xgboost-distributed`` (its runtime sets
``DMLC_TRACKER_URI``/``DMLC_TRACKER_PORT``, node 0 on port 29500, an unpadded ``DMLC_TASK_ID`` and a
``DMLC_NUM_WORKER`` of nodes x GPUs per node; the prologue puts the project's contract on top, see ``node_program``).
TensorFlow and MXNet have no Trainer v2 runtime and are refused (``trainjob_checks.trainjob_problems``), as is
Paddle (not mapped).

Horovod runs on the cluster's MPI runtime, named with ``runtime=`` (Trainer 2.3 ships no plain MPI runtime: its
built-in ``mlPolicy.mpi`` runtimes, ``deepspeed-distributed`` and ``mlx-distributed``, are for those frameworks'
images). The runtime must be OpenMPI with ``runLauncherAsNode: true``: its ``launcher`` replicated job (one pod, the
Polyaxon launcher, node 0) runs ``trainer.command``, i.e. ``horovodrun`` over the controller's hostfile
(``/etc/mpi/hostfile``: the launcher and every ``node`` pod, ``slots`` = ``numProcPerNode``); its ``node``
replicated job (``numNodes`` - 1 pods, workers 0..n-1) runs the runtime's own command and image (sshd). So
``numNodes`` = 1 + n_workers and ``numProcPerNode`` = the slots the other backends give a replica (its GPUs, else
1); the runtime patch goes to both replicated jobs.

One template per node. A spec is refused when one replica would need settings of its own: an indexed worker entry,
or ``default_worker`` settings other than the master's (a spec with no ``default_worker`` runs every node with the
master's settings). ``config_map_refs``/``secret_refs`` and per-container security contexts are refused too, as a
TrainJob has no place for ``envFrom`` in 2.3.

Variables that differ between nodes are set when the container starts, from the Job controller's
``JOB_COMPLETION_INDEX`` and the runtime's ``PET_*`` (``node_program``): ``AIRFLOW_DISTRIBUTED_ROLE``/``INDEX``
(node 0 is ``master`` 0, node i is ``worker`` i-1), ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``
(for scripts started with ``python``; ``torchrun`` sets its own), XGBoost's ``DMLC_TASK_ID``/``DMLC_NUM_WORKER``,
and ``AIRFLOW_DISTRIBUTED_OUTPUT`` on node 0 only. Node 0's command runs under the output relay, so its termination
message holds the output document.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeflow_trainer_api import models as tm

from airflow_distributed.contract import ENV_INDEX, ENV_ROLE
from airflow_distributed.frameworks.horovod import slots
from airflow_distributed.frameworks.xgboost import task_id
from airflow_distributed.launch import Launch, Operator
from airflow_distributed.manifests.container_scripts import relay_output_command
from airflow_distributed.manifests.gang_scheduling import KUEUE_QUEUE_LABEL
from airflow_distributed.manifests.kubernetes import (
    JOB_LABEL,
    MODEL_VOLUME,
    JobManifestOptions,
    check_plan_layout,
    model_volume,
    to_dict,
)
from airflow_distributed.manifests.kubernetes_resources import (
    affinity,
    image_pull_secrets,
    resource_requirements,
    split_security_context,
    tolerations,
)
from airflow_distributed.manifests.pod_names import task_annotations, task_labels
from airflow_distributed.manifests.shared_memory import shm_mount, shm_volume
from airflow_distributed.manifests.trainjob_checks import MPI_FRAMEWORKS, RUNTIME_KINDS, RuntimeKind, default_runtime
from airflow_distributed.manifests.trainjob_status import GROUP, KIND, NODE, VERSION
from airflow_distributed.plan import ClusterPlan
from airflow_distributed.spec.models import PodSettings

#: The replicated job of an MPI runtime whose pod runs ``trainer.command`` (Trainer's ``constants.Launcher``).
LAUNCHER = "launcher"
#: The ``manager`` of this project's runtime patch (the key other managers, e.g. Kueue, keep theirs apart by).
PATCH_MANAGER = "airflow-distributed.apache.org/operator"
#: Where Kubeflow Trainer's MPI plugin mounts the hostfile on the launcher (``constants.MPIHostfileDir``/``Name``).
TRAINER_HOSTFILE = "/etc/mpi/hostfile"
#: How the trainjob backend starts replicas (``plan.build_plan``'s ``launch``): a TrainJob's nodes, every one from
#: the master's settings (its one node template), whose runtime sets the framework's variables by Trainer's
#: conventions and, for an MPI runtime, writes the hostfile.
TRAINJOB_LAUNCH = Launch(operator=Operator.TRAINER, pods=True, mpi_hostfile=TRAINER_HOSTFILE, nodes_like_master=True)
#: Trainer's default port of the trainer nodes (``constants.ContainerTrainerPort``).
NODE_PORT = 29500
OUTPUT_VOLUME = "output"
# The runtimes compute these per node (the torch and xgboost runtimes' webhooks refuse a TrainJob that sets its own).
RUNTIME_ENV = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                         "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS",
                         "DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER",
                         "OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args", "OMPI_MCA_orte_keep_fqdn_hostnames",
                         "OMPI_MCA_orte_set_default_slots"})
# Set per node by node_program, from the completion index.
NODE_ENV = frozenset({ENV_ROLE, ENV_INDEX, "RANK", "WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"})

@dataclass(frozen=True)
class TrainJobAddressing:
    """The DNS names JobSet gives the nodes: ``<job>-node-0-<rank>.<job>.<namespace>.svc`` (the JobSet's headless
    Service is named like the JobSet, itself named like the TrainJob), port 29500."""

    namespace: str
    domain: str = "svc"

    def endpoint(self, ordinal: int, job: str, name: str, default_port: int) -> tuple[str, int]:
        return f"{job}-{NODE}-0-{ordinal}.{job}.{self.namespace}.{self.domain}", NODE_PORT


@dataclass(frozen=True)
class TrainJobOptions:
    """How a plan becomes a TrainJob.

    :param pods: the ``kubernetes`` backend's options that apply: namespace, image, resource keys, task instance
        labels, extra labels and annotations, model volume, output relay and the image's Python,
        ``active_deadline_seconds`` (the TrainJob's own), ``queue_name`` (Kueue's label on the TrainJob).
    :param runtime: the runtime's name; default: the framework's (``DEFAULT_RUNTIMES``).
    :param runtime_kind: ``ClusterTrainingRuntime`` (cluster-wide) or ``TrainingRuntime`` (in the job's namespace).
    :param n_proc_per_node: processes per node (``numProcPerNode``); the runtime's default when ``None``.
    """

    pods: JobManifestOptions
    runtime: str | None = None
    runtime_kind: RuntimeKind = "ClusterTrainingRuntime"
    n_proc_per_node: int | None = None

    def __post_init__(self) -> None:
        if self.runtime_kind not in RUNTIME_KINDS:
            allowed = ", ".join(RUNTIME_KINDS)
            raise ValueError(f"runtime_kind {self.runtime_kind!r} is not supported; allowed: {allowed}")


# -------------------------------------------------------------------------------------------------------- build


def build_trainjob(plan: ClusterPlan, options: TrainJobOptions) -> dict[str, Any]:
    """The TrainJob of a plan built with ``backend="trainjob"``, ``TrainJobAddressing`` and
    ``layout_for_kubernetes()``, as the JSON body the API server takes (validated by the typed models).

    :raises ValueError: a plan not built for this backend, or one the typed models refuse.
    :raises ManifestError: a pod setting that is not valid Kubernetes, naming the field.
    """
    check_plan_layout(plan, "trainjob", TRAINJOB_LAUNCH, "TrainJobAddressing")
    if plan.files or plan.secret_files:
        names = ", ".join(sorted([*plan.files, *plan.secret_files]))
        raise ValueError(f"job {plan.job_name}: a TrainJob has no way to ship the files {names}")
    pods = options.pods
    ti = pods.task_instance
    own_labels = {**task_labels(ti), JOB_LABEL: plan.job_name}
    labels = {**pods.labels, **own_labels}
    if pods.queue_name:
        labels[KUEUE_QUEUE_LABEL] = pods.queue_name
    annotations = {**pods.annotations, **task_annotations(ti)}
    runtime = options.runtime or default_runtime(plan.framework)
    if runtime is None:
        raise ValueError(f"job {plan.job_name}: framework {plan.framework!r} has no default Trainer runtime; "
                         "give runtime=")
    master = plan.master
    trainer = tm.TrainerV1alpha1Trainer(
        image=pods.image,
        command=node_program(plan, pods),
        env=[tm.IoK8sApiCoreV1EnvVar.from_dict(item) for item in _trainer_env(plan)] or None,
        numNodes=len(plan.replicas),
        numProcPerNode=_proc_per_node(plan, options),
        resourcesPerNode=_resources(master.settings, pods),
    )
    spec = tm.TrainerV1alpha1TrainJobSpec(
        runtimeRef=tm.TrainerV1alpha1RuntimeRef(apiGroup=GROUP, kind=options.runtime_kind, name=runtime),
        trainer=trainer,
        runtimePatches=[_runtime_patch(plan, options, own_labels)],
        activeDeadlineSeconds=pods.active_deadline_seconds,
    )
    job = tm.TrainerV1alpha1TrainJob(
        apiVersion=f"{GROUP}/{VERSION}",
        kind=KIND,
        metadata=tm.IoK8sApimachineryPkgApisMetaV1ObjectMeta(
            name=plan.job_name, namespace=pods.namespace, labels=labels, annotations=annotations or None),
        spec=spec,
    )
    return job.to_dict()


def _proc_per_node(plan: ClusterPlan, options: TrainJobOptions) -> int | None:
    if plan.framework in MPI_FRAMEWORKS:
        # The hostfile's slots, which horovodrun's -np counts on: the slots every other backend gives a replica.
        return slots(plan.master)
    return options.n_proc_per_node


def replicated_jobs(framework: str) -> tuple[str, ...]:
    """The replicated jobs of the runtime whose pods run a framework's replicas (and get the runtime patch)."""
    return (LAUNCHER, NODE) if framework in MPI_FRAMEWORKS else (NODE,)


def node_program(plan: ClusterPlan, pods: JobManifestOptions) -> list[str]:
    """The ``node`` container's argv: a POSIX shell prologue that sets what differs between nodes, then the
    command, under the output relay (which copies the document only where node 0 wrote one)."""
    command = list(plan.master.command or ())
    if pods.relay_output:
        command = relay_output_command(pods.image_python, command, plan.layout.output_path)
    # Node 0 is the Polyaxon master; node i > 0 is worker i-1.
    # Values go into the script shlex-quoted, and a ${VAR:-default} takes its default from a script variable.
    prologue = (
        'rank="${JOB_COMPLETION_INDEX:-${PET_NODE_RANK:-0}}"; '
        f'if [ "$rank" = 0 ]; then AIRFLOW_DISTRIBUTED_ROLE={shlex.quote(plan.master.role)}; '
        'AIRFLOW_DISTRIBUTED_INDEX=0; '
        'else AIRFLOW_DISTRIBUTED_ROLE=worker; AIRFLOW_DISTRIBUTED_INDEX=$((rank - 1)); '
        'unset AIRFLOW_DISTRIBUTED_OUTPUT; fi; '
        'export AIRFLOW_DISTRIBUTED_ROLE AIRFLOW_DISTRIBUTED_INDEX; '
        f'node_port={shlex.quote(str(NODE_PORT))}; '
    )
    if plan.framework == "pytorch":
        # With one process per node the node rank is the process rank; torchrun overrides RANK/WORLD_SIZE for
        # its own processes. (The JAX runtime sets JAX_PROCESS_ID and the rest itself.)
        prologue += (
            'export RANK="$rank" WORLD_SIZE="${PET_NNODES:-1}" MASTER_ADDR="${PET_MASTER_ADDR:-localhost}" '
            'MASTER_PORT="${PET_MASTER_PORT:-$node_port}"; '
        )
    elif plan.framework == "xgboost":
        prologue += _xgboost_prologue(plan)
    prologue += 'exec "$@"'
    return ["sh", "-c", prologue, "sh", *command]


def _xgboost_prologue(plan: ClusterPlan) -> str:
    """The project's XGBoost contract over the ``xgboost-distributed`` runtime's variables.

    The runtime's tracker address (node 0, port 29500) is the one the plan gives the master, so it is kept. Its
    ``DMLC_TASK_ID`` is the bare completion index, which the tracker (``sortby="task"``) orders as a string (task 10
    before task 2), and its ``DMLC_NUM_WORKER`` counts one worker per GPU; the contract runs one process per node,
    so both are replaced: the index zero-padded to the width of the largest rank, and the number of nodes.
    The tracker's default address holds the namespace: it is quoted into a variable of its own.
    """
    world = shlex.quote(str(len(plan.replicas)))
    task_format = shlex.quote(f"%0{len(task_id(len(plan.replicas) - 1, len(plan.replicas)))}d")
    return (
        f'tracker={shlex.quote(plan.master.host)}; '
        'DMLC_TRACKER_URI="${DMLC_TRACKER_URI:-$tracker}"; '
        'DMLC_TRACKER_PORT="${DMLC_TRACKER_PORT:-$node_port}"; '
        f'export DMLC_TRACKER_URI DMLC_TRACKER_PORT DMLC_NUM_WORKER={world} '
        f'DMLC_TASK_ID="$(printf {task_format} "$rank")" RANK="$rank" WORLD_SIZE={world} '
        'MASTER_ADDR="$DMLC_TRACKER_URI" MASTER_PORT="$DMLC_TRACKER_PORT"; '
    )


def _trainer_env(plan: ClusterPlan) -> list[dict[str, Any]]:
    """The master's variables that every node shares (``node_program`` sets the rest), as ``EnvVar`` dicts; a plan
    for this backend has none of the framework's (``Framework.kept_env``): the runtime sets them."""
    master = plan.master
    dropped = RUNTIME_ENV | NODE_ENV
    return [{"name": name, "value": value} for name, value in sorted(master.env.items()) if name not in dropped]


def _resources(settings: PodSettings, pods: JobManifestOptions) -> Any:
    found = resource_requirements(settings.resources, pods.resource_keys())
    return tm.IoK8sApiCoreV1ResourceRequirements.from_dict(to_dict(found)) if found is not None else None


def _runtime_patch(plan: ClusterPlan, options: TrainJobOptions, own_labels: Mapping[str, str]) -> Any:
    """Everything of the pod the ``trainer`` section has no field for, as a patch of the ``node`` pod template."""
    pods = options.pods
    settings = plan.master.settings
    where = f"nodes of {plan.job_name}"
    pod_security, _ = split_security_context(settings.security_context, f"{where}: security_context")
    volumes: list[Any] = []
    mounts: list[dict[str, Any]] = []
    if plan.layout.model_dir.startswith("/"):
        volumes.append(to_dict(model_volume(pods.model_volume)))
        mounts.append({"name": MODEL_VOLUME, "mountPath": plan.layout.model_dir})
    if pods.relay_output:
        volumes.append({"name": OUTPUT_VOLUME, "emptyDir": {}})
        mounts.append({"name": OUTPUT_VOLUME, "mountPath": plan.layout.output_path.rsplit("/", 1)[0]})
    # Every node runs from one template with the master's resources (trainjob_checks), so one size serves all.
    shm = shm_volume(pods.shm_size, settings.resources)
    if shm is not None:
        volumes.append(shm)
        mounts.append(shm_mount())
    found_affinity = affinity(settings.affinity, f"{where}: affinity")
    found_tolerations = tolerations(settings.tolerations, f"{where}: tolerations")
    secrets = image_pull_secrets(settings.image_pull_secrets)
    pod_spec = tm.TrainerV1alpha1PodSpecPatch(
        nodeSelector=dict(settings.node_selector) if settings.node_selector else None,
        affinity=tm.IoK8sApiCoreV1Affinity.from_dict(to_dict(found_affinity)) if found_affinity else None,
        tolerations=[tm.IoK8sApiCoreV1Toleration.from_dict(to_dict(t)) for t in found_tolerations or []] or None,
        serviceAccountName=settings.service_account,
        imagePullSecrets=[tm.IoK8sApiCoreV1LocalObjectReference.from_dict(to_dict(s)) for s in secrets or []] or None,
        securityContext=(tm.IoK8sApiCoreV1PodSecurityContext.from_dict(to_dict(pod_security))
                         if pod_security is not None else None),
        volumes=[tm.IoK8sApiCoreV1Volume.from_dict(v) for v in volumes] or None,
        containers=[tm.TrainerV1alpha1ContainerPatch(
            name=NODE, volumeMounts=[tm.IoK8sApiCoreV1VolumeMount.from_dict(m) for m in mounts])] if mounts else None,
    )
    pod_labels = {**pods.labels, **(settings.labels or {}), **own_labels}
    own_annotations = task_annotations(pods.task_instance)
    pod_annotations = {**pods.annotations, **(settings.annotations or {}), **own_annotations}
    metadata = tm.IoK8sApimachineryPkgApisMetaV1ObjectMeta(labels=pod_labels, annotations=pod_annotations or None)
    return tm.TrainerV1alpha1RuntimePatch(
        manager=PATCH_MANAGER,
        trainingRuntimeSpec=tm.TrainerV1alpha1TrainingRuntimeSpecPatch(
            template=tm.TrainerV1alpha1JobSetTemplatePatch(
                spec=tm.TrainerV1alpha1JobSetSpecPatch(replicatedJobs=[tm.TrainerV1alpha1ReplicatedJobPatch(
                    name=name,
                    template=tm.TrainerV1alpha1JobTemplatePatch(
                        spec=tm.TrainerV1alpha1JobSpecPatch(template=tm.TrainerV1alpha1PodTemplatePatch(
                            metadata=metadata, spec=pod_spec)),
                    ),
                ) for name in replicated_jobs(plan.framework)]),
            ),
        ),
    )


__all__ = [
    "LAUNCHER",
    "NODE_PORT",
    "PATCH_MANAGER",
    "TrainJobAddressing",
    "TrainJobOptions",
    "build_trainjob",
    "node_program",
    "replicated_jobs",
]
