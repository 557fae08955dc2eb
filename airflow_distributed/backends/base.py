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
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar

from airflow_distributed.exceptions import DistributedJobError
from airflow_distributed.manifests.trainjob_checks import RUNTIME_KINDS
from airflow_distributed.plan import process_count_problems
from airflow_distributed.spec import TrainingSpec
from airflow_distributed.spec.models import SECTION_OF

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.plan import Layout, ReplicaProgram

#: ``(argument or spec path, message)``, as ``SpecValidationError`` takes them.
Problem = tuple[str, str]


def has_template(value: Any) -> bool:
    """Whether ``value`` (a string, or a mapping or list of them) still holds a Jinja template."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(has_template(k) or has_template(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_template(v) for v in value)
    return False


def trainjob_only(settings: BackendSettings, spec: TrainingSpec | None, backend: str) -> list[Problem]:
    """The settings only ``backend="trainjob"`` reads, refused on ``backend`` when the DAG is parsed (and again once
    rendered): ignoring them would run another job than the one asked for (no runtime)."""
    where = "is read by backend='trainjob' only"
    problems: list[Problem] = []
    if settings.argument("runtime") is not None:
        problems.append(("runtime", f"{where} (the TrainJob's training runtime); backend={backend!r} runs no "
                         "training runtime: remove it, or use backend='trainjob'"))
    if settings.argument("runtime_kind") != RUNTIME_KINDS[0]:
        problems.append(("runtime_kind", f"{where} (the kind of the TrainJob's runtime); remove it, or use "
                         "backend='trainjob'"))
    return problems


def process_problems(spec: TrainingSpec | None) -> list[Problem]:
    """``n_proc_per_node`` problems, found when the DAG is parsed, whatever form ``environment`` was given in:
    replicas that would run different process counts. Every backend runs several processes per replica."""
    if spec is None or getattr(spec.cluster, "n_proc_per_node", None) is None:
        return []
    return process_count_problems(spec)


def launcher_problems(spec: TrainingSpec | None, backend: str, *, runs: tuple[str, ...] | None = None,
                      why: str = "") -> list[Problem]:
    """``launcher`` problems, found when the DAG is parsed: a launcher that cannot run an elastic job, or one that
    ``backend`` would not run (its operator or its actors start each replica's processes).

    :param runs: the launchers ``backend`` runs; ``None`` where it runs the one the plan wraps each command in.
    :param why: who starts the processes on ``backend`` instead, for the message.
    """
    launcher = getattr(spec.cluster, "launcher", None) if spec is not None else None
    if spec is None or launcher is None:
        return []
    field = f"environment.{SECTION_OF[spec.framework]}.launcher"
    if getattr(spec.cluster, "elastic", None) is not None and launcher != "torchrun":
        return [(field, f"{launcher!r} cannot run an elastic job: its replicas run under torch's elastic agent "
                 "(torchrun); use launcher 'torchrun', or drop elastic")]
    if runs is not None and launcher not in runs:
        instead = f", or launcher {' or '.join(repr(name) for name in runs)}" if runs else ""
        return [(field, f"backend={backend!r} would not run {launcher!r}: {why}; use backend='local' or "
                 f"'kubernetes'{instead}")]
    return []


def log_ignored(log: Any, backend: str, ignored: Sequence[Problem]) -> None:
    """Say once, in the task log, each setting ``backend`` accepts and does not use."""
    for setting, why in ignored:
        log.warning("%s is ignored by backend=%r: %s", setting, backend, why)


@dataclass(frozen=True)
class ClusterSettings:
    """The options of the backends that run on a Kubernetes cluster (``kubernetes``, ``kubeflow``, ``trainjob``)."""

    image: str | None
    kubernetes_conn_id: str | None
    namespace: str | None
    clean_pod_policy: Literal["all", "running", "none"] | None
    gpu_resource_key: str
    shm_size: str | None
    scheduler_name: str | None
    gang_scheduling: Literal["volcano", "scheduler-plugins"] | None
    queue_name: str | None
    model_volume: Any
    log_replicas: str | Sequence[str] | None
    watch_timings: Mapping[str, Any] | None
    image_pull_grace: float
    logging_interval: float | None
    queue_timeout: float | None


@dataclass(frozen=True)
class TrainJobSettings(ClusterSettings):
    """The options of ``backend="trainjob"``: a Kubernetes-side backend's, and the training runtime's."""

    runtime: str | None
    runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"]


def trainjob_options(settings: BackendSettings[Any]) -> TrainJobSettings:
    """The options of ``backend="trainjob"`` (the training runtime's besides the Kubernetes-side ones)."""
    options = settings.options
    if not isinstance(options, TrainJobSettings):
        raise TypeError(f"backend='trainjob' receives TrainJobSettings, not {type(options).__name__}")
    return options


@dataclass(frozen=True)
class ProcessSettings:
    """The options of the backends whose replicas are processes the job starts (``local``, ``ray``)."""

    python: str | None
    stop_grace_period: float
    settle_period: float
    poll_interval: float


@dataclass(frozen=True)
class RaySettings(ProcessSettings):
    """The options of ``backend="ray"``: a process backend's, and the Ray cluster's."""

    ray_conn_id: str | None
    ray_options: Mapping[str, Any] | None


#: Every option of a backend, by the operator argument that gives it.
OPTION_NAMES = tuple(dict.fromkeys(name for options in (TrainJobSettings, RaySettings)
                                   for name in options.__dataclass_fields__))
Options = TypeVar("Options")


@dataclass(frozen=True)
class BackendSettings(Generic[Options]):
    """The operator's arguments a backend reads (rendered, when built at run time): those of every backend here,
    the backend's own typed ``options``, and ``others``, the arguments of the other backends as given, which the
    backend reads only to refuse or ignore them by name. See the operator's docstring for each."""

    dag_id: str
    framework: str | None
    command: Sequence[str]
    args: Sequence[str] | None
    env: Mapping[str, str] | None
    model_dir: str | None
    checkpoint_dir: str | None
    keep_checkpoints: bool
    wait_for_completion: bool
    startup_timeout: float
    deferrable: bool
    execution_timeout: timedelta | None
    progress_timeout: float | None
    options: Options
    others: Mapping[str, Any]

    @classmethod
    def of(cls, operator: Any, options: type[Options]) -> BackendSettings[Options]:
        """The settings of ``operator`` as they are now (unrendered at parse time, rendered in ``execute``) for a
        backend whose options are ``options``."""
        own = set(options.__dataclass_fields__)  # type: ignore[attr-defined]
        common = {name: getattr(operator, name) for name in cls.__dataclass_fields__
                  if name not in ("options", "others")}
        return cls(**common, options=options(**{name: getattr(operator, name) for name in own}),
                   others={name: getattr(operator, name) for name in OPTION_NAMES if name not in own})

    def argument(self, name: str) -> Any:
        """The operator argument ``name`` as given, whichever backend it is for (``None`` when it is not given)."""
        if name in ("options", "others"):
            raise KeyError(name)
        if name in self.__dataclass_fields__:
            return getattr(self, name)
        return getattr(self.options, name) if hasattr(self.options, name) else self.others.get(name)


#: What each kind of backend receives.
ForCluster = BackendSettings[ClusterSettings]
ForProcesses = BackendSettings[ProcessSettings]
ForRay = BackendSettings[RaySettings]
#: The old public names of these, from when "kubernetes" named both the platform and the pods backend: kept for
#: the users who import them.
KubernetesSettings = ClusterSettings
ForKubernetes = ForCluster


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
    #: its options (``ClusterSettings``...): what of the operator's arguments it receives as ``settings.options``
    options_class: ClassVar[type]

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


__all__ = ["OPTION_NAMES", "Backend", "BackendSettings", "ClusterSettings", "DistributedJobError", "ForCluster",
           "ForKubernetes", "ForProcesses", "ForRay", "KubernetesSettings", "Problem", "ProcessSettings", "RaySettings",
           "TaskCalls", "TrainJobSettings", "has_template", "launcher_problems", "log_ignored", "process_problems",
           "trainjob_only",
           "trainjob_options"]
