"""What every framework module declares: its roles, its master, its port and its replicas' variables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from airflow_distributed.cluster_plan import ClusterPlan, Replica


@dataclass(frozen=True)
class Role:
    """A replica role and where the spec describes it.

    ``spec_key`` is ``None`` for the master (the environment's top level) or ``worker``/``ps`` for the
    cluster keys (``n_workers``/``default_worker``/``worker``, ``n_ps``/``default_ps``/``ps``).
    """

    name: str
    spec_key: str | None


class Framework:
    """Base of the per-framework modules. Subclasses are stateless and pure."""

    name: ClassVar[str]
    #: Roles in launch order; the first is the master (Polyaxon always creates it, index 0).
    roles: ClassVar[tuple[Role, ...]]
    default_port: ClassVar[int]
    #: Kubeflow Trainer v2: the built-in runtime this framework's TrainJobs reference when none is given.
    trainer_runtime: ClassVar[str | None] = None
    #: Kubeflow Trainer v2: the framework runs on an MPI runtime (``mlPolicy.mpi``), which Trainer does not ship
    #: for it, so the DAG names the cluster's.
    trainer_mpi: ClassVar[bool] = False
    #: Why Kubeflow Trainer v2 cannot run the framework at all (``None``: it can, or nothing is known against it).
    no_trainer_runtime: ClassVar[str | None] = None
    #: The master reaches the other replicas over SSH (an MPI launcher): a backend whose replicas run no sshd
    #: cannot run it.
    launches_over_ssh: ClassVar[bool] = False

    @property
    def master_role(self) -> str:
        return self.roles[0].name

    def replica_env(self, replica: Replica, plan: ClusterPlan) -> dict[str, str]:
        """The framework's own variables for one replica (the common ones are added by the plan). How the backend
        launches the replicas is ``plan.launch``: a framework reads those facts, never the backend's name."""
        raise NotImplementedError

    def kept_env(self, replica: Replica, plan: ClusterPlan) -> dict[str, str]:
        """The framework's variables for one replica of a job that a training operator in the cluster runs
        (``plan.launch.operator``: the Kubeflow Training Operator, Kubeflow Trainer), which sets the rest itself:
        the plan asks for these instead of ``replica_env``, so nothing is computed only to be dropped. Default:
        none, the operator sets them all."""
        return {}

    def files(self, plan: ClusterPlan) -> Mapping[str, str]:
        """Files (name -> text) every replica needs in the job's files directory, e.g. an MPI hostfile."""
        return {}

    def replica_command(
        self, replica: Replica, plan: ClusterPlan, command: Sequence[str], files_dir: str
    ) -> tuple[str, ...] | None:
        """The argv a replica runs; ``None`` means standby (the backend keeps it alive, e.g. sshd for MPI)."""
        return tuple(command)

    def first_peers(self, replica: Replica, plan: ClusterPlan) -> list[tuple[str, int]]:
        """The (host, port)s a replica connects to first, so that it must not start before they listen
        (Kubernetes readiness); by default every replica but the master waits for the master."""
        return [] if replica.is_master else [(plan.master.host, plan.master.port)]

    def succeeded(self, exit_codes: Mapping[str, int | None], master_name: str) -> bool:
        """The success rule of CONTRACT.md: the master exited 0."""
        return exit_codes.get(master_name) == 0


def rank_of(replica: Replica) -> int:
    """The global rank where the master is a worker too: master 0, worker i -> i + 1."""
    return 0 if replica.is_master else replica.index + 1


def master_rank_env(replica: Replica, plan: ClusterPlan) -> dict[str, str]:
    """``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``: PyTorch's names, which XGBoostJob uses too."""
    return {
        "MASTER_ADDR": plan.master.host,
        "MASTER_PORT": str(plan.master.port),
        "WORLD_SIZE": str(len(plan.replicas)),
        "RANK": str(rank_of(replica)),
    }
