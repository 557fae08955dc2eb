"""Rules beyond one field's type: one framework section, index ranges, requests <= limits, Kubernetes' own rules."""

from __future__ import annotations

from airflow_distributed.spec import kubernetes_rules as k8s
from airflow_distributed.spec.limits import name_shown, shown
from airflow_distributed.spec.models import (
    FRAMEWORK_OF_SECTION,
    SECTION_OF,
    Environment,
    IndexedReplica,
    PodSettings,
    PSCluster,
    PytorchCluster,
    Resources,
    WorkerCluster,
)
from airflow_distributed.spec.quantities import QuantityError, amount_in_base_units

Problem = tuple[str, str]


def resolve_framework(framework: str | None, environment: Environment, root: str) -> tuple[str | None, list[Problem]]:
    """The job's framework, from the argument and/or the one cluster section present."""
    sections = list(environment.sections())
    if len(sections) > 1:
        found = " and ".join(f"'{s}'" for s in sections)
        return None, [(root, f"only one framework section is allowed, found {found}")]
    if framework is None:
        if not sections:
            allowed = ", ".join(FRAMEWORK_OF_SECTION)
            return None, [("framework", f"missing: give framework= or one section in environment ({allowed})")]
        return FRAMEWORK_OF_SECTION[sections[0]], []
    if sections and sections[0] != SECTION_OF[framework]:
        expected = SECTION_OF[framework]
        return None, [
            (f"{root}.{sections[0]}", f"does not match framework '{framework}', whose section is '{root}.{expected}'")
        ]
    return framework, []


def check_environment(environment: Environment, root: str) -> list[Problem]:
    problems = check_pod_settings(environment, root)
    for key, section in environment.sections().items():
        problems += _check_cluster(section, f"{root}.{key}", key)
    return problems


def check_pod_settings(settings: PodSettings, path: str) -> list[Problem]:
    """Everything the API server would refuse in one replica's settings, each problem with its path."""
    problems = check_resources(settings.resources, f"{path}.resources") if settings.resources else []
    problems += k8s.label_problems(settings.labels, f"{path}.labels")
    problems += k8s.label_problems(settings.node_selector, f"{path}.node_selector")
    problems += k8s.annotation_problems(settings.annotations, f"{path}.annotations")
    problems += k8s.toleration_problems(settings.tolerations, f"{path}.tolerations")
    problems += k8s.affinity_problems(settings.affinity, f"{path}.affinity")
    problems += k8s.security_context_problems(settings.security_context, f"{path}.security_context")
    problems += k8s.env_name_problems(settings.env_vars, f"{path}.env_vars")
    problems += k8s.name_problems(settings.service_account, f"{path}.service_account", "service account")
    problems += k8s.name_problems(settings.image_pull_secrets, f"{path}.image_pull_secrets", "Secret")
    problems += k8s.name_problems(settings.secret_refs, f"{path}.secret_refs", "Secret")
    problems += k8s.name_problems(settings.config_map_refs, f"{path}.config_map_refs", "ConfigMap")
    return problems


def check_resources(resources: Resources, path: str) -> list[Problem]:
    problems: list[Problem] = []
    for kind, amount in resources.amounts().items():
        if kind in k8s.DEVICE_KINDS:
            for side in ("requests", "limits"):
                value = getattr(amount, side)
                if value is not None:
                    problems += k8s.device_count_problems(kind, value, f"{path}.{kind}.{side}")
        if amount.requests is None or amount.limits is None:
            continue
        try:
            requested = amount_in_base_units(kind, amount.requests)
            limit = amount_in_base_units(kind, amount.limits)
        except QuantityError:
            continue  # already reported by the model
        if kind in k8s.DEVICE_KINDS and requested != limit:
            problems.append(
                (f"{path}.{kind}", f"requests ({name_shown(amount.requests)}) must equal limits "
                 f"({name_shown(amount.limits)}): Kubernetes does not overcommit devices")
            )
        elif requested > limit:
            problems.append(
                (f"{path}.{kind}", f"requests ({_shown(kind, amount.requests)}) exceed limits "
                 f"({_shown(kind, amount.limits)})")
            )
    return problems


# Sections whose n_ps chooses the job's mode (Paddle: 0 is collective, >= 1 parameter-server mode), so pserver
# settings without pservers are a mistake about the mode rather than settings for later.
PS_MODE_SECTIONS = ("paddle",)


def _check_cluster(section: WorkerCluster, path: str, key: str) -> list[Problem]:
    problems: list[Problem] = []
    # (``ps`` entries with n_ps 0 are out of range below.)
    if key in PS_MODE_SECTIONS and isinstance(section, PSCluster) and section.n_ps == 0 and section.default_ps:
        problems.append((f"{path}.default_ps", "is set but n_ps is 0, which means collective mode (no parameter "
                         "servers); give n_ps >= 1 for parameter-server mode, or remove it"))
    roles = [("worker", section.n_workers, section.default_worker, section.worker)]
    if isinstance(section, PSCluster):
        roles.append(("ps", section.n_ps, section.default_ps, section.ps))
    for role, count, default, overrides in roles:
        if default is not None:
            problems += check_pod_settings(default, f"{path}.default_{role}")
        problems += _check_overrides(overrides, count, f"{path}.{role}", f"n_{'workers' if role == 'worker' else role}")
    if isinstance(section, PytorchCluster) and section.elastic is not None:
        problems += _check_elastic(section, f"{path}.elastic")
    return problems


def _check_elastic(section: PytorchCluster, path: str) -> list[Problem]:
    """Counts are replicas (nodes), the master included: never more than the job has, min <= max."""
    assert section.elastic is not None
    replicas = 1 + section.n_workers
    low, high = section.elastic.min_workers, section.elastic.max_workers
    problems: list[Problem] = []
    for key, value in (("min_workers", low), ("max_workers", high)):
        if value is not None and value > replicas:
            problems.append((f"{path}.{key}", f"{shown(value)} is more than the job's {replicas} replicas (the master "
                             f"and n_workers={section.n_workers}); allowed: 1..{replicas}"))
    if low is not None and high is not None and low > high:
        problems.append((f"{path}.min_workers", f"{shown(low)} is more than max_workers ({shown(high)}); "
                         "min_workers <= max_workers"))
    return problems


def _check_overrides(overrides: list[IndexedReplica], count: int, path: str, count_key: str) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[int, int] = {}
    for position, entry in enumerate(overrides):
        where = f"{path}[{position}]"
        if not 0 <= entry.index < count:
            valid = f"valid: 0..{count - 1}" if count else "no replicas of this role"
            problems.append((f"{where}.index",
                             f"{shown(entry.index)} is out of range ({count_key} is {count}; {valid})"))
        if entry.index in seen:
            problems.append((f"{where}.index",
                             f"{shown(entry.index)} is already overridden by {path}[{seen[entry.index]}]"))
        seen.setdefault(entry.index, position)
        problems += check_pod_settings(entry, where)
    return problems


def _shown(kind: str, value: object) -> str:
    """An amount with its Polyaxon unit, so '2Gi' vs 1024 reads as the comparison it is."""
    if isinstance(value, str):
        return name_shown(value).strip("'")
    return f"{shown(value)} MiB" if kind == "memory" else f"{shown(value)} cores" if kind == "cpu" else shown(value)
