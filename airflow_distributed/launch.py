"""``Launch``: how a backend starts a job's replicas, the facts the frameworks read instead of the backend's name.

Each backend supplies its own record (the class that builds its plans holds it), ``plan.build_plan`` keeps it on the
plan, and a framework module reads the facts it needs from ``plan.launch``: a new backend states its facts here and
touches no framework. Below both ``cluster_plan`` and the frameworks; pure, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_distributed.status import StrEnum


class Operator(StrEnum):
    """A training operator in the cluster that runs a job's replicas and sets the frameworks' variables itself, by
    its own conventions (which variables it leaves out differs between the two)."""

    #: the Kubeflow Training Operator v1 (``PyTorchJob``, ``XGBoostJob``, ``PaddleJob``, ``MPIJob``...)
    TRAINING_OPERATOR = "kubeflow-training-operator-v1"
    #: Kubeflow Trainer v2 (``TrainJob`` and its training runtimes)
    TRAINER = "kubeflow-trainer-v2"


@dataclass(frozen=True)
class Launch:
    """The facts of how one backend starts its replicas that decide a replica's variables, files or command."""

    #: the training operator that runs the job and sets the frameworks' variables: the plan then asks a framework
    #: only for those the operator leaves out (``Framework.kept_env``); ``None``: the plan sets them all
    #: (``Framework.replica_env``)
    operator: Operator | None = None
    #: every replica runs on one host (processes of one machine): an MPI hostfile names that host once, with the
    #: replicas' slots added up, and the MPI launcher starts them without SSH
    shared_host: bool = False
    #: the replicas are Kubernetes pods: a framework that can find its peers' network by itself there is told so
    #: (MXNet's ``DMLC_USE_KUBERNETES``) instead of being pinned to an interface
    pods: bool = False
    #: where the operator's MPI runtime writes the hostfile on the launcher (Kubeflow Trainer's MPI plugin), whose
    #: image then also decides the MPI launcher's controller and SSH port; ``None``: the plan ships its own hostfile
    #: in the job's files and its launcher reaches replicas on other hosts over the replicas' sshd
    mpi_hostfile: str | None = None
    #: every replica runs from the master's settings (a TrainJob's one node template), so its resources, not each
    #: replica's own, size each replica (an MPI hostfile's slots)
    nodes_like_master: bool = False
