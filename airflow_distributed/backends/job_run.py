"""Steps a task's job takes the same way on the Kubernetes-side backends (``kubernetes``, ``kubeflow``, ``trainjob``):
the arguments they all check, the namespace, the replicas' variables, the deferral's deadline and the names of the
XComs and constants they share.

Kept apart from the backends so that none imports another for them. Light to import: the backends' checks run
when a DAG is parsed, and the ray backend and the job view read its deadline and names; what needs the Kubernetes
manifests or the hooks (the manifest options, the watch timings) is ``job_options``, which the run-time modules
import.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.base import BackendSettings, DistributedJobError, ForCluster, Problem, has_template
from airflow_distributed.backends.local import pod_settings
from airflow_distributed.contract import ENV_RECORD_INTERVAL, ENV_STACKS_DIR, ENV_STACKS_SIGNAL
from airflow_distributed.jobstate.hang_watch import STACKS_DIR, STACKS_SIGNAL
from airflow_distributed.manifests.gang_scheduling import GANG_SCHEDULERS
from airflow_distributed.manifests.shared_memory import limit_problems, path_problems, shm_size_problems
from airflow_distributed.naming import DNS_LABEL_RULE, is_dns_label
from airflow_distributed.replica.live_report import record_interval
from airflow_distributed.spec import SpecValidationError

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.kube_api import KubeApiHook
    from airflow_distributed.spec import TrainingSpec

CLEAN_POD_POLICIES = ("all", "running", "none")
#: XCom of a cluster job while it runs: where the job view finds it live.
LIVE_JOB_XCOM_KEY = "kubernetes_job"
#: How many of a failed replica's last lines the error and the ``job`` XCom quote.
TAIL_LINES = 30


def check_kubernetes_arguments(settings: ForCluster, spec: TrainingSpec | None = None) -> list[Problem]:
    """Problems with the Kubernetes arguments every Kubernetes-side backend takes, as ``(argument, message)``;
    with the spec (not a template), also a ``shm_size`` larger than a replica's memory limit."""
    problems = namespace_problems(settings.options.namespace)
    problems.extend(shm_problems(settings, spec))
    policy = settings.options.clean_pod_policy
    if policy is not None and policy not in CLEAN_POD_POLICIES:
        problems.append(("clean_pod_policy", f"{policy!r} is not supported; allowed: {', '.join(CLEAN_POD_POLICIES)}"))
    gang = settings.options.gang_scheduling
    if gang is not None and gang not in GANG_SCHEDULERS:
        problems.append(("gang_scheduling", f"{gang!r} is not supported; allowed: {', '.join(GANG_SCHEDULERS)}"))
    return problems


def shm_problems(settings: ForCluster, spec: TrainingSpec | None) -> list[Problem]:
    """``shm_size`` (``manifests.shared_memory``): its value; the paths that would land on the pods' ``/dev/shm``;
    with the spec, a fixed size above a replica's memory limit."""
    shm_size = settings.options.shm_size
    problems = shm_size_problems(shm_size)
    if problems:
        return problems
    paths = [(name, value) for name in ("model_dir", "checkpoint_dir")
             if not has_template(value := getattr(settings, name))]
    problems += path_problems(shm_size, paths)
    return problems + limit_problems(shm_size, [(path, pod.resources) for path, pod in pod_settings(spec)])


def stacks_env(settings: ForCluster) -> Mapping[str, str] | None:
    """The replicas' variables: with ``progress_timeout``, those on which ``tracking`` prints its process's stacks
    and notes its pid for the hang watchdog's exec, and paces its live records within reach of the watchdog's
    deadline (the watchdog reads the master's report in its log)."""
    if settings.progress_timeout is None:
        return settings.env
    return {**(settings.env or {}), ENV_STACKS_SIGNAL: STACKS_SIGNAL, ENV_STACKS_DIR: STACKS_DIR,
            ENV_RECORD_INTERVAL: f"{record_interval(settings.progress_timeout):g}"}


#: The failure's note when the clean-up after a failed wait was itself refused or failed (its error is logged).
NOT_CLEANED_UP = "it could not be cleaned up (see the error above): delete it by hand"


def job_error(message: str) -> Exception:
    return DistributedJobError(message)


def require_image(settings: ForCluster, backend: str) -> None:
    if not settings.options.image:
        raise job_error(f"backend={backend!r} runs every replica from an image: set image=")


def namespace_problems(namespace: Any) -> list[Problem]:
    """``namespace``, when given and not a template (that is checked once rendered, by ``job_namespace``), must be a
    DNS-1123 label. The value is not repeated in the message: it may hold anything."""
    if not namespace or has_template(namespace) or is_dns_label(namespace):  # none given: the connection's
        return []
    return [("namespace", f"is not a valid namespace: it must be {DNS_LABEL_RULE}")]


def job_namespace(settings: ForCluster, hook: KubeApiHook, task_id: str) -> str:
    """The namespace of the job: ``namespace`` as rendered, else the connection's; refused unless a DNS-1123 label,
    before anything is created (it is also part of every replica's address)."""
    options = settings.options
    namespace = options.namespace or hook.default_namespace()
    if not is_dns_label(namespace):
        given = "namespace" if options.namespace else f"namespace (of connection {options.kubernetes_conn_id!r})"
        raise SpecValidationError([(given, f"is not a valid namespace: it must be {DNS_LABEL_RULE}")],
                                  source=f"task {task_id}")
    return namespace


def ignored_in_cluster(settings: ForCluster, backend: str) -> list[Problem]:
    """Settings a Kubernetes-side ``backend`` accepts and does not use, harmless to ignore: said once per try
    (``log_ignored``)."""
    ignored: list[Problem] = []
    if settings.argument("python") is not None:
        ignored.append(("python", "it names the interpreter of the local backend's replicas; in a pod a leading "
                        "'python' in command is the image's own"))
    if settings.options.log_replicas is not None and backend != "kubernetes":
        ignored.append(("log_replicas", "only backend='kubernetes' follows other replicas' logs; a failed "
                        "replica's last lines are in the error"))
    return ignored


def deferral_deadline(settings: BackendSettings[Any], context: Context) -> tuple[float | None, timedelta | None]:
    """When the task's ``execution_timeout`` ends (epoch seconds, for the trigger), and the deferral's timeout."""
    execution_timeout = settings.execution_timeout
    start_date = getattr(context["ti"], "start_date", None)
    if execution_timeout is None or start_date is None:
        return None, None
    deadline = start_date.timestamp() + execution_timeout.total_seconds()
    # Past the trigger's own deadline event, so that execute_complete (and its clean-up) always runs.
    return deadline, timedelta(seconds=max(0.0, deadline - time.time()) + 60)


def last_try(context: Context) -> bool:
    """Whether this is the task instance's last try: it has no retry left (``try_number`` past ``max_tries``), so
    no later try will look at what this one leaves behind. Without ``max_tries`` (an Airflow that does not give
    it), the task's ``retries`` stand in: the first try is try 1."""
    ti = context["ti"]
    try_number = getattr(ti, "try_number", None)
    if not isinstance(try_number, int):
        return False  # not known: keep what a retry may want
    max_tries = getattr(ti, "max_tries", None)
    if not isinstance(max_tries, int):
        retries = getattr(getattr(ti, "task", None), "retries", None)
        if not isinstance(retries, int):
            return False
        max_tries = retries
    return try_number > max_tries


def clean_pod_policy(settings: ForCluster, succeeded: bool, context: Context) -> str:
    """What the end of a job deletes (``clean_pod_policy``): the user's choice when they made one; else ``all``
    after success or after the last try (nothing would ever delete what it kept), and ``running`` after a failed
    try that a retry follows (it finds the finished pods, their logs)."""
    chosen = settings.options.clean_pod_policy
    if chosen is not None:
        return chosen
    return "all" if succeeded or last_try(context) else "running"


__all__ = ["CLEAN_POD_POLICIES", "LIVE_JOB_XCOM_KEY", "NOT_CLEANED_UP", "TAIL_LINES", "check_kubernetes_arguments",
           "clean_pod_policy", "deferral_deadline", "ignored_in_cluster", "job_error",
           "job_namespace", "last_try", "namespace_problems", "require_image", "shm_problems", "stacks_env"]
