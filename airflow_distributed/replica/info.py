"""Where this replica stands in its job, from the variables the backend gave it (standard library only)."""

from __future__ import annotations

import json
import os
from typing import Any

from airflow_distributed.contract import ENV_CLUSTER, ENV_INDEX, ENV_JOB, ENV_OUTPUT, ENV_ROLE, ENV_TRY_NUMBER

# Global-rank variables set by the launchers that start several processes inside one replica. Horovod's own comes
# first because under horovodrun + MPI the MPI ones are set as well and agree with it; RANK is torchrun's (and the
# contract's: the PyTorch master replica has RANK=0, so a plain master still counts).
_LAUNCHER_RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK")


def get_cluster_info() -> dict[str, list[str]]:
    """Return the whole job as ``{role: ["host:port", ...]}``, from ``AIRFLOW_DISTRIBUTED_CLUSTER``.

    An empty dict when the variable is unset (the script runs outside a job). Raises ``ValueError`` when it is set
    but is not a JSON object of lists of addresses.
    """
    raw = os.environ.get(ENV_CLUSTER)
    if raw is None or not raw.strip():
        return {}
    try:
        cluster = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{ENV_CLUSTER} is not valid JSON: {exc}") from None
    if not isinstance(cluster, dict) or not all(
        isinstance(role, str) and isinstance(addresses, list) and all(isinstance(a, str) for a in addresses)
        for role, addresses in cluster.items()
    ):
        raise ValueError(f'{ENV_CLUSTER} must be a JSON object like {{"worker": ["host:port", ...]}}, got {raw!r}')
    return cluster


def get_task_info() -> dict[str, Any]:
    """Return this replica as ``{"job": str | None, "role": str | None, "index": int, "is_master": bool}``.

    ``is_master`` is true on the replica given ``AIRFLOW_DISTRIBUTED_OUTPUT`` (the master), and there only in the
    process of global rank 0 when a launcher inside the replica started several processes that inherited the
    variable (``HOROVOD_RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK`` or ``RANK`` set to something other than 0).
    """
    raw_index = os.environ.get(ENV_INDEX, "").strip()
    try:
        index = int(raw_index) if raw_index else 0
    except ValueError:
        raise ValueError(f"{ENV_INDEX} must be an integer, got {raw_index!r}") from None
    return {
        "job": os.environ.get(ENV_JOB) or None,
        "role": os.environ.get(ENV_ROLE) or None,
        "index": index,
        "is_master": master_output_path() is not None,
    }


def master_output_path() -> str | None:
    """Where the master writes its output document: ``AIRFLOW_DISTRIBUTED_OUTPUT``, in the process of global rank 0
    only (``None`` elsewhere)."""
    path = os.environ.get(ENV_OUTPUT, "").strip()
    if not path:
        return None
    for variable in _LAUNCHER_RANK_VARIABLES:
        rank = os.environ.get(variable, "").strip()
        if rank:
            # Only the first variable set decides: under mpirun both HOROVOD_RANK and OMPI_COMM_WORLD_RANK are set.
            return path if rank == "0" else None
    return path


def get_try_number() -> int:
    """Return the Airflow try this job runs in (1 for the first), from ``AIRFLOW_DISTRIBUTED_TRY_NUMBER``; 1 outside
    a job."""
    raw = os.environ.get(ENV_TRY_NUMBER, "").strip()
    try:
        return int(raw) if raw else 1
    except ValueError:
        raise ValueError(f"{ENV_TRY_NUMBER} must be an integer, got {raw!r}") from None


__all__ = ["get_cluster_info", "get_task_info", "get_try_number", "master_output_path"]
