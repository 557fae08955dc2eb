"""The plan's data: ``ClusterPlan`` (a job's replicas, in order, with where its files go and how its backend
launches them) and its ``Replica`` and ``Layout``.

Below both ``plan`` (which builds a plan) and ``frameworks`` (which read one to name each replica's variables, files
and command): the two name these types, and neither names the other's. Pure, no I/O.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from airflow_distributed.elastic import ElasticPlan
from airflow_distributed.launch import Launch
from airflow_distributed.spec.models import PodSettings, Resources


@dataclass(frozen=True)
class Layout:
    """Where a backend puts things a replica is told about."""

    model_dir: str
    output_path: str
    files_dir: str
    #: the same for every try of one task instance, so that a retry resumes from what the failed try saved
    checkpoint_dir: str | None = None
    #: where the plan's ``secret_files`` are (a Secret's volume on Kubernetes); ``files_dir`` when ``None``
    secret_files_dir: str | None = None
    #: the job's TensorBoard folder, the same for every try like the checkpoints'
    tensorboard_dir: str | None = None


@dataclass(frozen=True)
class Replica:
    role: str
    index: int
    name: str
    host: str
    port: int
    is_master: bool
    settings: PodSettings
    #: argv to run; ``None`` means standby (see ``Framework.replica_command``).
    command: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def resources(self) -> Resources | None:
        return self.settings.resources


@dataclass(frozen=True)
class ClusterPlan:
    job_name: str
    framework: str
    #: the backend's name, for what outside the frameworks checks (a manifest builder: the plan was built for it);
    #: the frameworks read ``launch``, never this
    backend: str
    replicas: tuple[Replica, ...]
    layout: Layout
    #: how the backend starts the replicas (the facts the frameworks read)
    launch: Launch
    files: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: files whose contents may be secret (a ``@task.distributed`` function's arguments), in
    #: ``layout.secret_files_dir``: kept out of ConfigMaps and logs, readable by the job's user only
    secret_files: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: the Airflow try the job runs in (1 for the first)
    try_number: int = 1
    #: replicas run under an elastic agent and are restarted within this budget (``environment.pytorch.elastic``)
    elastic: ElasticPlan | None = None
    #: training processes each replica runs under its framework's launcher (``environment.pytorch.n_proc_per_node``
    #: resolved; the same on every replica, as torchrun needs)
    processes_per_replica: int = 1
    #: the launcher each replica runs (``environment.pytorch.launcher``), ``None`` where the spec names none
    launcher: str | None = None

    @property
    def master(self) -> Replica:
        return self.replicas[0]

    @property
    def cluster(self) -> dict[str, list[str]]:
        """``{role: [host:port, ...]}`` in index order; roles with no replicas are left out."""
        roles: dict[str, list[str]] = {}
        for replica in self.replicas:
            roles.setdefault(replica.role, []).append(replica.address)
        return roles

    def file_path(self, name: str) -> str:
        return posixpath.join(self.layout.files_dir, name)

    def replica(self, name: str) -> Replica:
        for replica in self.replicas:
            if replica.name == name:
                return replica
        raise KeyError(name)
