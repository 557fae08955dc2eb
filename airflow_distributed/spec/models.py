"""Pydantic models of the Polyaxon ``environment`` section.

Structure only: unknown keys and wrong types are rejected here; rules that need the whole spec
(index ranges, requests <= limits, one framework section) live in ``spec.checks``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from airflow_distributed.spec.limits import shown, type_shown
from airflow_distributed.spec.quantities import amount_in_base_units

Framework = Literal["tensorflow", "mxnet", "pytorch", "horovod", "jax", "xgboost", "paddle"]
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
# The key of each framework's cluster subsection; Horovod's is Polyaxon's generic ``replicas``.
SECTION_OF: dict[str, str] = {"tensorflow": "tensorflow", "mxnet": "mxnet", "pytorch": "pytorch", "horovod": "replicas",
                              "jax": "jax", "xgboost": "xgboost", "paddle": "paddle"}
FRAMEWORK_OF_SECTION: dict[str, str] = {section: fw for fw, section in SECTION_OF.items()}

# Large enough for any real job (the 1000-replica benchmark included), small enough to catch a typo like 40000.
MAX_REPLICAS_PER_ROLE = 2000
RESOURCE_KINDS = ("cpu", "memory", "gpu", "tpu")

Count = Annotated[StrictInt, Field(ge=0, le=MAX_REPLICAS_PER_ROLE)]
# Processes per replica: a node's GPUs, or CPU processes for tests; far above any real machine's device count.
MAX_PROCESSES_PER_REPLICA = 1024
#: ``n_proc_per_node: auto``: as many processes as the replica asks GPUs for, else one (Polyaxon's spelling)
AUTO_PROCESSES = "auto"
#: ``environment.pytorch.launcher``: the program each replica runs to start its processes, given the whole topology
#: on its command line (``frameworks/pytorch_launchers.py``); ``torchrun`` when a replica runs several and none is
#: named. ``mpirun`` is not one: a PyTorch job over MPI is a Horovod job (``framework="horovod"``).
LAUNCHERS = ("torchrun", "deepspeed", "accelerate")


def _launcher(value: Any) -> str:
    if value in LAUNCHERS:
        return str(value)
    listed = ", ".join(repr(name) for name in LAUNCHERS)
    raise ValueError(f"{shown(value)} is not allowed: one of {listed} (a PyTorch job over MPI is "
                     "framework='horovod')")


Launcher = Annotated[str, PlainValidator(_launcher)]


def _amount(value: Any) -> int | float | str:
    amount_in_base_units("cpu", value)  # raises a QuantityError (a ValueError) saying what is wrong, not the value
    return value


# One validator instead of a union, whose every failed branch pydantic would report.
Amount = Annotated[int | float | str, PlainValidator(_amount)]


def _process_count(value: Any) -> int | str:
    if value == AUTO_PROCESSES or (type(value) is int and 1 <= value <= MAX_PROCESSES_PER_REPLICA):
        return value
    raise ValueError(f"{shown(value)} is not allowed: a number of "
                     f"processes 1..{MAX_PROCESSES_PER_REPLICA}, or '{AUTO_PROCESSES}' (the replica's GPUs, else 1)")


ProcessCount = Annotated[int | str, PlainValidator(_process_count)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _rename_singular(data: Any, pairs: tuple[tuple[str, str], ...]) -> Any:
    """Accept Polyaxon's singular spellings (``request``) beside the plural ones."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for singular, plural in pairs:
        if singular in data:
            if plural in data:
                raise ValueError(f"give either '{singular}' or '{plural}', not both")
            data[plural] = data.pop(singular)
    return data


class ResourceAmount(_Section):
    """Requests and limits of one resource kind."""

    requests: Amount | None = None
    limits: Amount | None = None

    @model_validator(mode="before")
    @classmethod
    def _singular(cls, data: Any) -> Any:
        return _rename_singular(data, (("request", "requests"), ("limit", "limits")))


class Resources(_Section):
    """``cpu``/``memory``/``gpu``/``tpu``, or the Kubernetes form ``{requests: {...}, limits: {...}}``."""

    cpu: ResourceAmount | None = None
    memory: ResourceAmount | None = None
    gpu: ResourceAmount | None = None
    tpu: ResourceAmount | None = None

    @model_validator(mode="before")
    @classmethod
    def _kubernetes_form(cls, data: Any) -> Any:
        data = _rename_singular(data, (("request", "requests"), ("limit", "limits")))
        if not isinstance(data, dict) or not data or not set(data) <= {"requests", "limits"}:
            return data
        by_kind: dict[str, dict[str, Any]] = {}
        for side in ("requests", "limits"):
            amounts = data.get(side) or {}
            if not isinstance(amounts, dict):
                raise ValueError(f"'{side}' must map resource names to amounts, got {type_shown(amounts)}")
            for kind, amount in amounts.items():
                key = "gpu" if kind == "nvidia.com/gpu" else kind
                by_kind.setdefault(key, {})[side] = amount
        return by_kind

    def amounts(self) -> dict[str, ResourceAmount]:
        return {kind: getattr(self, kind) for kind in RESOURCE_KINDS if getattr(self, kind) is not None}

    def device_count(self, kind: str = "gpu") -> int:
        """Devices a replica gets: the limit, else the request (Kubernetes never overcommits devices)."""
        amount = getattr(self, kind)
        if amount is None:
            return 0
        value = amount.limits if amount.limits is not None else amount.requests
        return 0 if value is None else int(amount_in_base_units(kind, value))

    def cpu_limit(self) -> float | None:
        """CPU limit in cores (else the request), for thread-count hints on the local backend."""
        if self.cpu is None:
            return None
        value = self.cpu.limits if self.cpu.limits is not None else self.cpu.requests
        return None if value is None else float(amount_in_base_units("cpu", value))




def _env_pairs(value: Any) -> Any:
    """Polyaxon wrote env_vars as ``[[name, value], ...]``: read as a mapping, so one shape goes downstream."""
    if not isinstance(value, list):
        return value
    for position, pair in enumerate(value):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"entry [{position}] is not a [name, value] pair: env_vars is a mapping of names to "
                             "strings, or a list of [name, value] pairs")
        if not isinstance(pair[0], str):
            raise ValueError(f"entry [{position}]: a variable name must be a string, got {type_shown(pair[0])}")
    return dict(value)


class PodSettings(_Section):
    """What Polyaxon lets a user set on the master and on each replica."""

    resources: Resources | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    service_account: StrictStr | None = None
    image_pull_secrets: list[StrictStr] | None = None
    env_vars: dict[str, str] | None = None
    secret_refs: list[StrictStr] | None = None
    config_map_refs: list[StrictStr] | None = None
    security_context: dict[str, Any] | None = None

    @field_validator("node_selector", "labels", "annotations", "env_vars", mode="before")
    @classmethod
    def _string_keys(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name == "env_vars":
            value = _env_pairs(value)
        # Said here, at the mapping: pydantic would report the key as a path of its own.
        bad = [key for key in value if not isinstance(key, str)] if isinstance(value, dict) else []
        if bad:
            raise ValueError(f"keys must be strings, got {type_shown(bad[0])}")
        return value


class IndexedReplica(PodSettings):
    """An override for one replica index; it replaces the default (Polyaxon semantics)."""

    index: StrictInt


def _fold_legacy_resources(data: Any, role: str) -> Any:
    """Turn Polyaxon's older ``default_<role>_resources`` / ``<role>_resources`` keys into the current form."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    default_key, list_key = f"default_{role}_resources", f"{role}_resources"
    if default_key in data:
        default = data.get(f"default_{role}") or {}
        if not isinstance(default, dict):
            raise ValueError(f"'default_{role}' must be a mapping of settings when '{default_key}' is given")
        default = dict(default)
        if "resources" in default:
            raise ValueError(f"give either '{default_key}' or 'default_{role}.resources', not both")
        default["resources"] = data.pop(default_key)
        data[f"default_{role}"] = default
    if list_key in data:
        legacy = data.pop(list_key)
        if not isinstance(legacy, list):
            raise ValueError(f"'{list_key}' must be a list of {{index, cpu, memory, gpu}} entries")
        entries = data.get(role) or []
        if not isinstance(entries, list):
            raise ValueError(f"'{role}' must be a list of overrides, like '{list_key}'")
        entries = list(entries)
        for position, item in enumerate(legacy):
            if not isinstance(item, dict) or "index" not in item:
                raise ValueError(f"'{list_key}' entry [{position}] needs an 'index' (a mapping of index, cpu, "
                                 "memory, gpu)")
            rest = {k: v for k, v in item.items() if k != "index"}
            entries.append({"index": item["index"], "resources": rest})
        data[role] = entries
    return data


class WorkerCluster(_Section):
    """A cluster of workers only (PyTorch, Horovod)."""

    n_workers: Count = 0
    default_worker: PodSettings | None = None
    worker: list[IndexedReplica] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _fold_legacy_resources(data, "worker")


class ElasticPolicy(_Section):
    """``environment.pytorch.elastic``: replicas run under torch's elastic agent (torchrun, c10d rendezvous).

    Counts are replicas (nodes), the master included; ``None`` means every replica of the job.
    """

    min_workers: Annotated[StrictInt, Field(ge=1)] | None = None
    max_workers: Annotated[StrictInt, Field(ge=1)] | None = None
    #: restarts of each replica's worker group (by its agent) or of the replica itself (by the backend)
    max_restarts: Annotated[StrictInt, Field(ge=0, le=100)] = 3
    #: seconds the agents wait for the rendezvous to complete (torchrun's ``join_timeout``)
    rdzv_timeout: Annotated[StrictInt, Field(ge=1, le=86400)] = 900


class PytorchCluster(WorkerCluster):
    """PyTorch's workers, optionally elastic, how many processes each replica (node) runs (``backend="trainjob"``:
    ``numProcPerNode``), and the launcher that starts them (torch's unless ``launcher`` names another)."""

    n_proc_per_node: ProcessCount | None = None
    elastic: ElasticPolicy | None = None
    launcher: Launcher | None = None


class PSCluster(WorkerCluster):
    """Workers plus parameter servers (TensorFlow ``ps``, MXNet servers, Paddle pservers)."""

    n_ps: Count = 0
    default_ps: PodSettings | None = None
    ps: list[IndexedReplica] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _legacy_ps(cls, data: Any) -> Any:
        return _fold_legacy_resources(data, "ps")


class Environment(PodSettings):
    """The ``environment`` section: the master's settings plus at most one framework cluster."""

    tensorflow: PSCluster | None = None
    mxnet: PSCluster | None = None
    pytorch: PytorchCluster | None = None
    replicas: WorkerCluster | None = None
    jax: WorkerCluster | None = None
    xgboost: WorkerCluster | None = None
    paddle: PSCluster | None = None

    def sections(self) -> dict[str, WorkerCluster]:
        return {key: getattr(self, key) for key in FRAMEWORK_OF_SECTION if getattr(self, key) is not None}


class TrainingSpec(_Section):
    """A validated spec: the framework (given or inferred) and its environment."""

    framework: Framework
    environment: Environment

    @property
    def cluster(self) -> WorkerCluster:
        """The framework's cluster section; an empty one when the spec asks for the master alone."""
        section = getattr(self.environment, SECTION_OF[self.framework])
        if section is not None:
            return section
        return PSCluster() if _has_parameter_servers(SECTION_OF[self.framework]) else WorkerCluster()


def _has_parameter_servers(section: str) -> bool:
    """The environment's ``section`` is a parameter-server cluster: its shape is the ``Environment`` field's type,
    named nowhere else."""
    return any(isinstance(shape, type) and issubclass(shape, PSCluster)
               for shape in get_args(Environment.model_fields[section].annotation))
