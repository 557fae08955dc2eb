"""What a spec and the operator's arguments may ask of a Kubeflow Trainer v2 ``TrainJob``, checked when the DAG is
parsed (``trainjob_problems``), and the runtimes a framework's TrainJobs reference (pure).

Light: a DAG parse imports it, without the typed models of ``kubeflow-trainer-api`` or a Kubernetes client; the
TrainJob itself is built by ``manifests.trainjob`` when a job runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from airflow_distributed.frameworks import all_frameworks
from airflow_distributed.plan import indexed_settings, master_settings
from airflow_distributed.spec.models import SECTION_OF, PodSettings, TrainingSpec

RuntimeKind = Literal["ClusterTrainingRuntime", "TrainingRuntime"]
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
#: framework -> the built-in runtime its TrainJobs reference when ``runtime`` is not given (``trainer_runtime``).
DEFAULT_RUNTIMES: dict[str, str] = {fw.name: fw.trainer_runtime for fw in all_frameworks() if fw.trainer_runtime}
#: Frameworks that run on an MPI runtime (``mlPolicy.mpi``), which Trainer does not ship for them: ``runtime`` is
#: required.
MPI_FRAMEWORKS = frozenset(fw.name for fw in all_frameworks() if fw.trainer_mpi)

_NO_RUNTIME = {fw.name: fw.no_trainer_runtime for fw in all_frameworks() if fw.no_trainer_runtime}


def default_runtime(framework: str) -> str | None:
    return DEFAULT_RUNTIMES.get(framework)


def trainjob_problems(spec: TrainingSpec, runtime: str | None = None) -> list[tuple[str, str]]:
    """``(path, message)`` for every part of a valid spec that a TrainJob cannot express (when the DAG is parsed).

    :param runtime: the operator's ``runtime``; without one the framework must have a default runtime.
    """
    framework = spec.framework
    if framework in _NO_RUNTIME:
        return [("backend", f"backend='trainjob' cannot run framework '{framework}': {_NO_RUNTIME[framework]}; "
                 "use backend='kubernetes' (one pod per replica) or backend='kubeflow' (a TFJob/MXJob of the "
                 "Training Operator v1)")]
    if framework in MPI_FRAMEWORKS and not runtime:
        return [("runtime", f"backend='trainjob' runs framework '{framework}' on the cluster's MPI runtime, which "
                 "Kubeflow Trainer 2.3 does not ship: give runtime= the name of a ClusterTrainingRuntime (or "
                 "TrainingRuntime) with mlPolicy.mpi (OpenMPI, runLauncherAsNode: true) whose image runs sshd and has "
                 "Horovod (docs/trainjob.md)")]
    if framework not in DEFAULT_RUNTIMES and framework not in MPI_FRAMEWORKS:
        return [("backend", f"backend='trainjob' takes framework {', '.join([*DEFAULT_RUNTIMES, *MPI_FRAMEWORKS])} "
                 f"(runtime {', '.join(DEFAULT_RUNTIMES.values())}, or the cluster's MPI runtime); '{framework}' "
                 "is not mapped onto a Trainer v2 runtime yet: use backend='kubernetes' or backend='kubeflow'")]
    section = f"environment.{SECTION_OF[framework]}"
    master = master_settings(spec)
    cluster = spec.cluster
    problems: list[tuple[str, str]] = []
    one_template = ("but a TrainJob runs every node from one pod template; give every node the master's settings "
                    "(environment.*), or use backend='kubernetes'")
    if getattr(cluster, "elastic", None) is not None:
        # Trainer v2 has no elastic mode: its torch runtime runs a fixed numNodes, and the controller restarts nothing.
        problems.append((f"{section}.elastic", "is not supported with backend='trainjob' (Kubeflow Trainer v2 has no "
                         "elastic mode); use backend='kubernetes' or 'local', where the task restarts lost replicas"))
    default = cluster.default_worker
    if default is not None and cluster.n_workers and default != master:
        problems.append((f"{section}.default_worker", f"has its own {', '.join(_differing(default, master))}, "
                         + one_template))
    for position, entry in enumerate(cluster.worker):
        settings = indexed_settings(entry)
        if settings != master:
            problems.append((f"{section}.worker[{position}]", f"index {entry.index} has settings of its own ("
                             f"{', '.join(_differing(settings, master)) or 'an override'}), " + one_template))
    for key in ("config_map_refs", "secret_refs"):
        if getattr(master, key):
            problems.append((f"environment.{key}", "a TrainJob (Trainer 2.3) has no envFrom for the training "
                             "container; pass the values with env= or env_vars, or use backend='kubernetes'"))
    if master.security_context and _container_security_keys(master.security_context):
        keys = ", ".join(_container_security_keys(master.security_context))
        problems.append(("environment.security_context", f"{keys} apply to a container, and a TrainJob patches "
                         "only the pod's security context; use backend='kubernetes'"))
    return problems


def _differing(a: PodSettings, b: PodSettings) -> list[str]:
    return sorted(key for key in PodSettings.model_fields if getattr(a, key) != getattr(b, key))


# Fields of a container's securityContext that a pod's has not (Kubernetes 1.29+), in both spellings the spec takes.
_CONTAINER_ONLY_SECURITY = frozenset({
    "allowPrivilegeEscalation", "allow_privilege_escalation", "capabilities", "privileged", "procMount",
    "proc_mount", "readOnlyRootFilesystem", "read_only_root_filesystem",
})


def _container_security_keys(context: Mapping[str, Any]) -> list[str]:
    return sorted(key for key in context if key in _CONTAINER_ONLY_SECURITY)


__all__ = ["DEFAULT_RUNTIMES", "MPI_FRAMEWORKS", "RUNTIME_KINDS", "RuntimeKind", "default_runtime", "trainjob_problems"]
