"""Spec + framework -> ``ClusterPlan``: every replica with its name, address, settings, command and variables.

Pure: the same inputs give the same plan. Addresses come from an ``Addressing`` so one plan serves local
processes (127.0.0.1 and ports the caller picked) and Kubernetes pods (stable DNS names). The plan's types
(``ClusterPlan``, ``Replica``, ``Layout``) are defined in ``cluster_plan``, below the frameworks that read them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

from airflow_distributed.cluster_plan import ClusterPlan, Layout, Replica
from airflow_distributed.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_CLUSTER,
    ENV_FRAMEWORK,
    ENV_INDEX,
    ENV_JOB,
    ENV_MODEL_DIR,
    ENV_OUTPUT,
    ENV_ROLE,
    ENV_TENSORBOARD_DIR,
    ENV_TRY_NUMBER,
)
from airflow_distributed.elastic import elastic_plan
from airflow_distributed.frameworks import get_framework
from airflow_distributed.launch import Launch
from airflow_distributed.naming import replica_name
from airflow_distributed.spec.models import (
    AUTO_PROCESSES,
    SECTION_OF,
    IndexedReplica,
    PodSettings,
    PSCluster,
    TrainingSpec,
)


@dataclass(frozen=True)
class LocalAddressing:
    """Replicas on one machine: one host, one port per replica in plan order (picked free by the caller)."""

    ports: Sequence[int]
    host: str = "127.0.0.1"

    def endpoint(self, ordinal: int, job: str, name: str, default_port: int) -> tuple[str, int]:
        return self.host, self.ports[ordinal]


@dataclass(frozen=True)
class KubernetesAddressing:
    """``<replica>.<job>.<namespace>.svc``: the pod's hostname under the job's headless Service."""

    namespace: str
    domain: str = "svc"

    def endpoint(self, ordinal: int, job: str, name: str, default_port: int) -> tuple[str, int]:
        return f"{name}.{job}.{self.namespace}.{self.domain}", default_port


class Addressing(Protocol):
    """Where replica ``ordinal`` (named ``name``) of ``job`` listens: (host, port)."""

    def endpoint(self, ordinal: int, job: str, name: str, default_port: int) -> tuple[str, int]: ...


@dataclass(frozen=True)
class ReplicaProgram:
    """What every replica of a job runs, and the files it needs besides the framework's."""

    command: list[str]
    #: for the layout's ``files_dir`` (a ConfigMap on Kubernetes)
    files: Mapping[str, str] = field(default_factory=dict)
    #: for the layout's ``secret_files_dir``: contents that may be secret (a Secret on Kubernetes)
    secret_files: Mapping[str, str] = field(default_factory=dict)


def build_plan(
    spec: TrainingSpec,
    job_name: str,
    addressing: Addressing,
    layout: Layout,
    command: Sequence[str],
    *,
    backend: str,
    launch: Launch,
    env: Mapping[str, str] | None = None,
    try_number: int = 1,
    files: Mapping[str, str] | None = None,
    secret_files: Mapping[str, str] | None = None,
) -> ClusterPlan:
    """Expand a validated spec into the ordered replicas of one job.

    :param backend: the backend's name, kept on the plan for the manifest builders' check.
    :param launch: how that backend starts the replicas: the facts the frameworks read (``launch.Launch``); where a
        training operator in the cluster runs the job (``launch.operator``) the plan asks the framework only for the
        variables the operator leaves out (``Framework.kept_env``).
    :param env: variables for every replica (the operator's ``env``); a replica's own ``env_vars`` come on top,
        and the contract's variables last, because a job cannot run with those overridden.
    :param try_number: the Airflow try (``AIRFLOW_DISTRIBUTED_TRY_NUMBER``), e.g. to resume from a checkpoint.
    :param files: more files for the job's files directory besides the framework's (e.g. the script of a
        ``@task.distributed`` function).
    :param secret_files: files whose contents may be secret, for ``layout.secret_files_dir`` (e.g. that function's
        arguments).
    """
    framework = get_framework(spec.framework)
    replicas = []
    for ordinal, slot in enumerate(expand_replicas(spec)):
        role, index, settings = slot.role, slot.index, slot.settings
        name = replica_name(job_name, role, index)
        host, port = addressing.endpoint(ordinal, job_name, name, framework.default_port)
        replicas.append(Replica(role, index, name, host, port, ordinal == 0, settings))
    plan = ClusterPlan(job_name, framework.name, backend, tuple(replicas), layout, launch, try_number=try_number,
                       elastic=elastic_plan(spec), secret_files=MappingProxyType(dict(secret_files or {})),
                       processes_per_replica=processes_per_replica(spec),
                       launcher=getattr(spec.cluster, "launcher", None))
    job_files = dict(framework.files(plan))
    clash = sorted(set(job_files) & set(files or {}))
    if clash:
        raise ValueError(f"job {job_name}: the files {', '.join(clash)} are the {framework.name} framework's own")
    plan = replace(plan, files=MappingProxyType({**job_files, **(files or {})}))
    cluster_json = json.dumps(plan.cluster, separators=(",", ":"))
    finished = []
    for replica in plan.replicas:
        variables = dict(env or {})
        variables.update(replica.settings.env_vars or {})
        variables.update(_common_env(plan, replica, cluster_json))
        variables.update(framework.kept_env(replica, plan) if launch.operator is not None
                         else framework.replica_env(replica, plan))
        argv = framework.replica_command(replica, plan, command, layout.files_dir)
        finished.append(replace(replica, command=argv, env=MappingProxyType(variables)))
    return replace(plan, replicas=tuple(finished))


@dataclass(frozen=True)
class SpecReplica:
    """One replica the spec asks for, before it has a name or an address."""

    role: str
    index: int
    settings: PodSettings
    #: the spec's section the settings come from (``"worker"``, ``"ps"``), ``None`` for the master (``environment``)
    spec_key: str | None = None
    #: position in that section's indexed list of the entry that set these settings; ``None`` for the default
    override: int | None = None


def expand_replicas(spec: TrainingSpec) -> list[SpecReplica]:
    """Every replica of a validated spec with its effective settings, master first, then role by role in the
    framework's order and index by index.

    A role's replicas take ``default_<role>`` (empty settings without one); an indexed entry (``worker: [{index: 1,
    ...}]``) replaces the default for its index, it is not merged into it (Polyaxon semantics). Parameter-server
    roles are expanded only for a spec with a parameter-server cluster.
    """
    master = master_settings(spec)
    cluster = spec.cluster
    slots: list[SpecReplica] = []
    for role in get_framework(spec.framework).roles:
        if role.spec_key is None:
            slots.append(SpecReplica(role.name, 0, master))
            continue
        if role.spec_key == "ps" and not isinstance(cluster, PSCluster):
            continue
        count = getattr(cluster, "n_workers" if role.spec_key == "worker" else "n_ps")
        default = getattr(cluster, f"default_{role.spec_key}") or PodSettings()
        overrides = {entry.index: (position, entry) for position, entry in enumerate(getattr(cluster, role.spec_key))}
        for index in range(count):
            if index in overrides:
                position, entry = overrides[index]
                slots.append(SpecReplica(role.name, index, indexed_settings(entry), role.spec_key, position))
            else:
                slots.append(SpecReplica(role.name, index, default, role.spec_key))
    return slots


def replica_processes(spec: TrainingSpec) -> list[tuple[SpecReplica, int]]:
    """Every replica of the spec with the training processes it runs: ``n_proc_per_node``, where ``"auto"`` is the
    replica's GPUs (its limit, else its request), else 1; one process when the spec does not say."""
    asked = getattr(spec.cluster, "n_proc_per_node", None)
    counted = []
    for slot in expand_replicas(spec):
        if asked == AUTO_PROCESSES:
            gpus = slot.settings.resources.device_count("gpu") if slot.settings.resources else 0
            counted.append((slot, max(1, gpus)))
        else:
            counted.append((slot, 1 if asked is None else int(asked)))
    return counted


def process_count_problems(spec: TrainingSpec) -> list[tuple[str, str]]:
    """A job whose replicas would run different numbers of processes (``"auto"`` over replicas asking different
    GPU counts): torchrun takes one ``--nproc-per-node`` for every node of a job."""
    counted = replica_processes(spec)
    if len({count for _, count in counted}) <= 1:
        return []
    shown = ", ".join(f"{slot.role} {slot.index}: {count}" for slot, count in counted[:6])
    more = f" (and {len(counted) - 6} more)" if len(counted) > 6 else ""
    return [(f"environment.{SECTION_OF[spec.framework]}.n_proc_per_node",
             f"'{AUTO_PROCESSES}' gives the replicas different process counts ({shown}{more}), and torch's launcher "
             "runs the same number on every replica: give every replica the same gpu count, or a number")]


def processes_per_replica(spec: TrainingSpec) -> int:
    """The training processes every replica of the job runs (see ``replica_processes``).

    :raises ValueError: the replicas would run different counts (refused when the DAG is parsed:
        ``process_count_problems``).
    """
    counts = sorted({count for _, count in replica_processes(spec)})
    if len(counts) != 1:
        raise ValueError(process_count_problems(spec)[0][1])
    return counts[0]


def asked_processes(spec: TrainingSpec) -> int | None:
    """``n_proc_per_node`` resolved (``processes_per_replica``), or ``None`` where the spec does not set it (a
    TrainJob then takes its runtime's default)."""
    return None if getattr(spec.cluster, "n_proc_per_node", None) is None else processes_per_replica(spec)


def role_summary(spec: TrainingSpec) -> list[dict[str, Any]]:
    """``[{"role", "count", "resources"}]`` in the plan's order; replicas of one role with different resources
    (an indexed override) are listed apart."""
    summary: list[dict[str, Any]] = []
    for slot in expand_replicas(spec):
        role, settings = slot.role, slot.settings
        resources = settings.resources.model_dump(mode="json", exclude_none=True) if settings.resources else {}
        if summary and summary[-1]["role"] == role and summary[-1]["resources"] == resources:
            summary[-1]["count"] += 1
        else:
            summary.append({"role": role, "count": 1, "resources": resources})
    return summary


def master_settings(spec: TrainingSpec) -> PodSettings:
    """The master's pod settings, which the spec keeps at the top of ``environment``."""
    return PodSettings.model_validate({key: getattr(spec.environment, key) for key in PodSettings.model_fields})


def indexed_settings(entry: IndexedReplica) -> PodSettings:
    """The settings of an indexed entry (``worker: [{index: 1, ...}]``), its ``index`` left out."""
    return PodSettings.model_validate(entry.model_dump(exclude={"index"}))


def _common_env(plan: ClusterPlan, replica: Replica, cluster_json: str) -> dict[str, str]:
    env = {
        ENV_JOB: plan.job_name,
        ENV_FRAMEWORK: plan.framework,
        ENV_ROLE: replica.role,
        ENV_INDEX: str(replica.index),
        ENV_CLUSTER: cluster_json,
        ENV_MODEL_DIR: plan.layout.model_dir,
        ENV_TRY_NUMBER: str(plan.try_number),
        "PYTHONUNBUFFERED": "1",
    }
    if plan.layout.checkpoint_dir:
        env[ENV_CHECKPOINT_DIR] = plan.layout.checkpoint_dir
    if plan.layout.tensorboard_dir:
        env[ENV_TENSORBOARD_DIR] = plan.layout.tensorboard_dir
    if replica.is_master:
        env[ENV_OUTPUT] = plan.layout.output_path
    return env


def replica_count(spec: TrainingSpec) -> int:
    """How many replicas the spec asks for, master included (e.g. to pick that many free ports first)."""
    return len(expand_replicas(spec))
