"""The Kubeflow training resources, one per framework, and how the API addresses each (pure).

``KINDS`` is the one table of the kinds: one ``KubeflowKind`` record per kind holds every fact of it (its name,
framework, API version and plural, replica specs key, replica types, and which replica decides its success), and
everything else (the manifests, ``kubeflow_status``, the hooks, the sensors) reads them from there. Standard
library and ``frameworks`` only, since ``kubeflow_status`` imports it in the triggerer.

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
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from airflow_distributed.frameworks import get_framework
from airflow_distributed.frameworks.horovod import SSH_DIR
from airflow_distributed.frameworks.xgboost import task_id

GROUP = "kubeflow.org"


@dataclass(frozen=True)
class SuccessRule:
    """Which replicas' success makes the job succeed, as the operator of the kind decides it.

    ``index`` is the one replica of ``replica_type`` that decides, or ``None``: every replica of it
    (``all_replicas``) or any one (elastic PyTorch).
    """

    replica_type: str
    index: int | None
    all_replicas: bool
    description: str


@dataclass(frozen=True)
class KubeflowKind:
    """One Kubeflow kind, all its facts: how a framework is written as it, how the API addresses it, how its
    objects are read back (``kubeflow_status``) and which replica's end decides its success."""

    framework: str
    kind: str
    version: str
    plural: str
    #: the spec key of the replica specs, e.g. ``tfReplicaSpecs``
    replica_specs_key: str
    #: our role -> the operator's replica type
    replica_types: Mapping[str, str]
    #: the container the operator gives its variables to and whose exit it reads
    container: str
    #: name of the container port the operator reads the framework's port from; ``None`` when it reads none
    port_name: str | None
    #: variables the operator sets itself, left out of the templates whoever gave them (the plan has only the
    #: framework variables the operator leaves out, ``Framework.kept_env``)
    operator_env: frozenset[str]
    #: the spec field that says how many processes each replica runs (``ClusterPlan.processes_per_replica``, as a
    #: string), given when that is more than one; ``None``: the kind has none
    processes_key: str | None = None
    #: spec fields every resource of this kind has, beside the replica specs and the run policy
    fixed_spec: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: variables that differ between the pods of one template and are derived in each pod at start...
    rank_derived_env: frozenset[str] = frozenset()
    #: ... by this command around the replica's (``(argv, world size) -> argv``)
    derive_rank_env: Callable[[Sequence[str], int], list[str]] | None = None
    #: why the kind cannot run the framework's parameter servers (``None``: it can, or the framework has none)
    pservers_refused: str | None = None
    #: an MPI job (mpi-operator): one Service for the whole job, the hostfile written by the operator, every host
    #: given the same ``slotsPerWorker``
    mpi: bool = False
    #: replica types the operator also takes for the master (jobs written by others), after ``master_type``
    older_master_types: tuple[str, ...] = ()
    #: the success rule of a job without any master replica, from its spec (``None``: the operator refuses to
    #: decide such a job, and so does ``kubeflow_status.success_rule``)
    success_without_master: Callable[[Mapping[str, Any]], SuccessRule] | None = None

    @property
    def group(self) -> str:
        return GROUP

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    @property
    def master_type(self) -> str:
        """The replica type of the framework's master role (``Framework.master_role``)."""
        return self.replica_types[get_framework(self.framework).master_role]

    @property
    def master_types(self) -> tuple[str, ...]:
        """The replica types that decide the job's success when the job has one, the first found deciding."""
        return (self.master_type, *self.older_master_types)

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


def _tfjob_workers(spec: Mapping[str, Any]) -> SuccessRule:
    if spec.get("successPolicy") == "AllWorkers":
        return SuccessRule("Worker", None, True, "every Worker succeeded (successPolicy AllWorkers)")
    return SuccessRule("Worker", 0, False, "worker 0 succeeded (a TFJob without a Chief)")


def _pytorchjob_workers(spec: Mapping[str, Any]) -> SuccessRule:
    if spec.get("elasticPolicy"):
        return SuccessRule("Worker", None, False, "a Worker succeeded (elastic, without a Master)")
    return SuccessRule("Worker", None, True, "every Worker succeeded (a PyTorchJob without a Master)")


def _paddlejob_workers(spec: Mapping[str, Any]) -> SuccessRule:
    return SuccessRule("Worker", None, True, "every Worker succeeded (a PaddleJob without a Master)")


KINDS: dict[str, KubeflowKind] = {
    "tensorflow": KubeflowKind(
        "tensorflow", "TFJob", "v1", "tfjobs", "tfReplicaSpecs",
        MappingProxyType({"chief": "Chief", "ps": "PS", "worker": "Worker"}),
        container="tensorflow", port_name="tfjob-port", operator_env=frozenset({"TF_CONFIG"}),
        # The operator still takes a Master for the chief, as older TFJobs named it.
        older_master_types=("Master",), success_without_master=_tfjob_workers,
    ),
    "pytorch": KubeflowKind(
        "pytorch", "PyTorchJob", "v1", "pytorchjobs", "pytorchReplicaSpecs",
        MappingProxyType({"master": "Master", "worker": "Worker"}),
        container="pytorch", port_name="pytorchjob-port", operator_env=_PYTORCH_ENV,
        # training-operator 1.7+: WORLD_SIZE = replicas x nprocPerNode, and PET_NPROC_PER_NODE, in every pod.
        processes_key="nprocPerNode", success_without_master=_pytorchjob_workers,
    ),
    "mxnet": KubeflowKind(
        "mxnet", "MXJob", "v1", "mxjobs", "mxReplicaSpecs",
        MappingProxyType({"scheduler": "Scheduler", "server": "Server", "worker": "Worker"}),
        container="mxnet", port_name="mxjob-port", operator_env=_MXNET_ENV,
        fixed_spec=MappingProxyType({"jobMode": "MXTrain"}),
    ),
    "horovod": KubeflowKind(
        "horovod", "MPIJob", "v2beta1", "mpijobs", "mpiReplicaSpecs",
        MappingProxyType({"launcher": "Launcher", "worker": "Worker"}),
        # mpi-operator sets OMPI_MCA_orte_default_hostfile (and its other MPI variables) itself.
        container="mpi", port_name=None, operator_env=frozenset({"OMPI_MCA_orte_default_hostfile"}),
        # The launcher runs ranks too (Polyaxon's rank 0), so it is a host of the hostfile.
        fixed_spec=MappingProxyType({"runLauncherAsWorker": True, "sshAuthMountPath": SSH_DIR}),
        mpi=True,
    ),
    "xgboost": KubeflowKind(
        "xgboost", "XGBoostJob", "v1", "xgboostjobs", "xgbReplicaSpecs",
        MappingProxyType({"master": "Master", "worker": "Worker"}),
        container="xgboost", port_name="xgboostjob-port",
        operator_env=frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}),
        rank_derived_env=frozenset({"DMLC_TASK_ID"}), derive_rank_env=derive_task_id_command,
    ),
    "paddle": KubeflowKind(
        "paddle", "PaddleJob", "v1", "paddlejobs", "paddleReplicaSpecs",
        MappingProxyType({"master": "Master", "worker": "Worker"}),
        container="paddle", port_name="master", operator_env=frozenset({"PYTHONUNBUFFERED"}),
        rank_derived_env=frozenset({"PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT"}),
        derive_rank_env=lambda argv, world_size: derive_trainer_id_command(argv),
        pservers_refused=(
            "a PaddleJob runs parameter servers as its Master replicas and succeeds when they exit, but Paddle's "
            "pservers serve until stopped and trainer 0 decides the job; backend='kubeflow' takes Paddle's "
            "collective mode only (n_ps: 0); use backend='kubernetes' for parameter-server mode"
        ),
        # Without a Master the operator runs the job in its collective mode.
        success_without_master=_paddlejob_workers,
    ),
}


#: The kinds by name (``TFJob`` -> its ``KubeflowKind``), in the order of ``KINDS``.
BY_KIND: Mapping[str, KubeflowKind] = MappingProxyType({kind.kind: kind for kind in KINDS.values()})


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


__all__ = ["BY_KIND", "GROUP", "KINDS", "KubeflowKind", "KubeflowResource", "SuccessRule", "kubeflow_kind",
           "kubeflow_resource"]
