"""What a valid spec asks that its Kubeflow resource cannot express, said when the DAG is parsed (pure).

Per-index overrides. A replica spec is one pod template for every replica of its role, and its key *is* the role
(it names the role in ``TF_CONFIG``, ``DMLC_ROLE``, the ranks of a PyTorchJob, the MPI hostfile), so none of these
CRDs lets one role be split over two replica specs. The Polyaxon master is always a replica spec of its own
(Chief, Master, Scheduler, Launcher), so its settings always fit. Any other index whose effective settings differ
from the rest of its role is refused, naming the index and the settings that differ: ``kubeflow_problems`` when
the DAG is parsed, ``ManifestError`` when building. An override equal to the default, or the same override on
every index of a role, fits. An MPIJob also gives every host of its hostfile the same ``slotsPerWorker`` (the
launcher too, as it runs ranks), so the launcher must have as many GPUs as a worker.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_distributed.manifests.kubeflow_kinds import KINDS, KubeflowKind, kubeflow_kind
from airflow_distributed.plan import SpecReplica, expand_replicas, master_settings
from airflow_distributed.spec.models import SECTION_OF, PodSettings, PSCluster, TrainingSpec


def kubeflow_problems(spec: TrainingSpec) -> list[tuple[str, str]]:
    """``(path, message)`` for every part of a valid spec that its Kubeflow resource cannot express.

    For the operator's checks when the DAG is parsed; ``build_kubeflow_job`` raises the same as ``ManifestError``.
    """
    if spec.framework not in KINDS:
        return [("backend", f"framework '{spec.framework}' has no Kubeflow resource; backend='kubeflow' takes "
                 f"{', '.join(KINDS)}; use backend='kubernetes' (one pod per replica, no operator needed)")]
    kind = kubeflow_kind(spec.framework)
    cluster = spec.cluster
    section = f"environment.{SECTION_OF[spec.framework]}"
    problems: list[tuple[str, str]] = []
    if kind.pservers_refused and isinstance(cluster, PSCluster) and cluster.n_ps:
        problems.append((f"{section}.n_ps", kind.pservers_refused))
    if getattr(cluster, "elastic", None) is not None:
        # The task wraps every replica in torchrun with its own rendezvous; a PyTorchJob's elasticPolicy does that
        # in the operator instead, with other names and restart rules.
        problems.append((f"{section}.elastic", "is not supported with backend='kubeflow'; use backend='kubernetes' "
                         "or 'local', where the task restarts lost replicas itself"))
    by_role: dict[str, list[SpecReplica]] = {}
    for slot in expand_replicas(spec):
        # The master has a replica type of its own; a role the kind has none for was refused above (Paddle's pservers).
        if slot.spec_key is not None and slot.role in kind.replica_types:
            by_role.setdefault(slot.role, []).append(slot)
    for role, slots in by_role.items():
        spec_key = slots[0].spec_key
        default = getattr(cluster, f"default_{spec_key}") or PodSettings()
        for index, message in role_conflicts(kind, role, [slot.settings for slot in slots], default):
            override = slots[index].override
            where = f"{section}.{spec_key}" + (f"[{override}]" if override is not None else "")
            problems.append((where, message))
    if kind.mpi:
        workers = by_role.get("worker", [])
        conflict = slots_conflict(master_settings(spec), workers[0].settings if workers else None)
        if conflict:
            problems.append(("environment.resources.gpu", conflict))
    return problems


def role_conflicts(
    kind: KubeflowKind, role: str, settings: Sequence[PodSettings], default: PodSettings | None = None
) -> list[tuple[int, str]]:
    """(index, message) for each replica whose settings are not those most of its role share.

    :param default: the role's default settings, which stand for the role on a tie.
    """
    if len(settings) < 2 or all(item == settings[0] for item in settings):
        return []
    # The settings most replicas share stand for the role (on a tie the default's, else the lowest index's), so
    # the message names the odd ones out, usually the overridden indices.
    distinct: list[PodSettings] = []
    counts: list[int] = []
    for item in settings:
        if item in distinct:
            counts[distinct.index(item)] += 1
        else:
            distinct.append(item)
            counts.append(1)
    tied = [item for item, count in zip(distinct, counts) if count == max(counts)]
    reference = default if default in tied else tied[0]
    rtype = kind.replica_type(role)
    conflicts = []
    for index, item in enumerate(settings):
        if item == reference:
            continue
        differing = sorted(
            key for key in PodSettings.model_fields if getattr(item, key) != getattr(reference, key)
        )
        conflicts.append((
            index,
            f"index {index} of {role} has its own {', '.join(differing)}, but {kind.a_kind} runs all "
            f"{len(settings)} {rtype} replicas from one pod template; give every {role} the same settings, "
            "or use backend='kubernetes'",
        ))
    return conflicts


def mpi_slots(settings: PodSettings) -> int:
    return max(settings.resources.device_count("gpu"), 1) if settings.resources else 1


def slots_conflict(launcher: PodSettings, worker: PodSettings | None) -> str | None:
    if worker is None or mpi_slots(launcher) == mpi_slots(worker):
        return None
    return (
        f"the launcher has {mpi_slots(launcher)} slot(s) (GPUs, else 1) and each worker {mpi_slots(worker)}, but an "
        "MPIJob gives every host, launcher included, the same slotsPerWorker; give the launcher as many GPUs as a "
        "worker, or use backend='kubernetes'"
    )


__all__ = ["kubeflow_problems", "mpi_slots", "role_conflicts", "slots_conflict"]
