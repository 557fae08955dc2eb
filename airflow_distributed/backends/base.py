"""The ``Backend`` protocol: what ``DistributedTrainingOperator`` asks of the place a job runs.

A backend checks the operator's arguments when the DAG is parsed, runs a job, resumes it after a deferral and
kills it. It reads the operator's arguments from one frozen ``BackendSettings`` (built from the operator, once
when the DAG is parsed and once per try after rendering), and calls back into the task only through
``TaskCalls`` (its log, ``defer``, and the program its replicas run). The state of a running job is the backend
object's own, so ``on_kill`` finds it there.

Light to import: the operator imports it when a DAG is parsed; no Kubernetes client is loaded here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from airflow.sdk.exceptions import AirflowException

from airflow_distributed.spec import TrainingSpec

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.plan import Layout, ReplicaProgram

#: ``(argument or spec path, message)``, as ``SpecValidationError`` takes them.
Problem = tuple[str, str]


class DistributedJobError(AirflowException):
    """The job ran and failed: a replica exited non-zero, or it timed out."""


def has_template(value: Any) -> bool:
    """Whether ``value`` (a string, or a mapping or list of them) still holds a Jinja template."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(has_template(k) or has_template(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_template(v) for v in value)
    return False


def one_process_per_replica(environment: Any) -> list[Problem]:
    """``pytorch.n_proc_per_node`` is a TrainJob's (``numProcPerNode``): every other backend runs one process per
    replica and refuses it at parse time."""
    n_proc = None
    if isinstance(environment, Mapping) and isinstance(environment.get("pytorch"), Mapping):
        n_proc = environment["pytorch"].get("n_proc_per_node")
    if n_proc in (None, 1):
        return []
    return [("environment.pytorch.n_proc_per_node", "is read by backend='trainjob' only (the TrainJob's "
             "numProcPerNode); the other backends run one process per replica")]


@dataclass(frozen=True)
class BackendSettings:
    """The operator's arguments a backend reads (rendered, when built at run time). See the operator's docstring
    for each."""

    dag_id: str
    framework: str | None
    environment: Any
    command: Sequence[str]
    args: Sequence[str] | None
    image: str | None
    env: Mapping[str, str] | None
    model_dir: str | None
    checkpoint_dir: str | None
    keep_checkpoints: bool
    wait_for_completion: bool
    startup_timeout: float
    image_pull_grace: float
    poll_interval: float
    python: str | None
    stop_grace_period: float
    settle_period: float
    kubernetes_conn_id: str | None
    namespace: str | None
    deferrable: bool
    clean_pod_policy: Literal["all", "running", "none"] | None
    gpu_resource_key: str
    scheduler_name: str | None
    gang_scheduling: Literal["volcano", "scheduler-plugins"] | None
    queue_name: str | None
    model_volume: Any
    log_replicas: str | Sequence[str] | None
    watch_timings: Mapping[str, Any] | None
    runtime: str | None
    runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"]
    execution_timeout: timedelta | None

    @classmethod
    def of(cls, operator: Any) -> BackendSettings:
        """The settings of ``operator`` as they are now (unrendered at parse time, rendered in ``execute``)."""
        return cls(**{name: getattr(operator, name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TaskCalls:
    """What a backend may call on the task that runs it."""

    #: the task's logger
    log: Any
    #: ``BaseOperator.defer(trigger=..., method_name=..., timeout=...)``
    defer: Callable[..., Any]
    #: ``(command, layout) -> ReplicaProgram``: what every replica runs and the files it needs besides the
    #: framework's (``@task.distributed`` ships its function and, as a secret file, its arguments this way)
    replica_program: Callable[[list[str], Layout], ReplicaProgram]
    #: the spec of this try, from the rendered arguments, parsed at most once per try: for a backend that needs
    #: more of it after a deferral than the trigger's event carries
    spec: Callable[[], TrainingSpec]


class Backend(Protocol):
    """One place a job runs. One object per operator: the state of the job it runs is its own."""

    #: the ``backend=`` name it is registered under (``backends.registry``)
    name: ClassVar[str]

    def check(self, settings: BackendSettings, spec: TrainingSpec | None) -> list[Problem]:
        """Problems with the arguments when the DAG is parsed; ``spec`` is ``None`` while it is a template or
        invalid (the operator reports the spec's own problems)."""
        ...

    def run(self, task: TaskCalls, settings: BackendSettings, context: Context, spec: TrainingSpec, job_name: str,
            command: Sequence[str]) -> dict[str, Any]:
        """``execute``: start the job and wait for it (here, or by deferring); returns the ``return_value`` XCom.

        :raises DistributedJobError: the job failed, timed out or was stopped.
        """
        ...

    def resume(self, task: TaskCalls, settings: BackendSettings, context: Context,
               event: dict[str, Any]) -> dict[str, Any]:
        """``execute_complete``: the trigger's event -> the same result (or error) as a synchronous wait. The event
        carries what ``run`` knew of the spec (its framework, ...), so that the spec is not parsed again for it."""
        ...

    def kill(self) -> None:
        """``on_kill``: stop the running job, if any; no replica may be left running."""
        ...


__all__ = ["Backend", "BackendSettings", "DistributedJobError", "Problem", "TaskCalls", "has_template",
           "one_process_per_replica"]
