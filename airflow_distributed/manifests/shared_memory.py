"""The memory-backed ``/dev/shm`` of every training pod (pure, no client: the parse-time checks import it).

A container runtime gives a pod a 64 MiB ``/dev/shm``; PyTorch's data loader workers pass batches through it and
NCCL puts its intra-node buffers there, so both fail ("No space left on device", "unable to allocate shared
memory") or fall back to slow paths on it. Every pod of the ``kubernetes``, ``kubeflow`` and ``trainjob`` backends
therefore mounts an ``emptyDir`` with ``medium: Memory`` at ``/dev/shm``, sized by the operator's ``shm_size``:

- ``"auto"`` (the default): half the replica's memory limit; with no memory limit, no ``sizeLimit`` (the kubelet
  then sizes the tmpfs to the node's allocatable memory). Half, because the pages written there are charged to the
  container's memory limit like any other memory: a ``/dev/shm`` as large as the limit lets a data loader fill it
  and have the container OOM-killed instead of a clear "No space left on device", and the process itself needs
  the rest.
- a Kubernetes quantity (``"8Gi"``): that size on every pod; refused at parse time when larger than a replica's
  memory limit, for the same reason.
- ``None``: no volume: the runtime's own ``/dev/shm``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from airflow_distributed.spec.models import Resources
from airflow_distributed.spec.quantities import QuantityError, amount_in_base_units, parse_quantity

#: The volume's name; none of the project's other volumes (model dir, files, secret files, SSH, output) is named so,
#: and no user volume reaches a pod but ``model_volume``, which is renamed.
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
#: ``shm_size``'s default: half the replica's memory limit.
AUTO = "auto"
#: The share of the memory limit ``"auto"`` gives ``/dev/shm``.
AUTO_SHARE = Decimal(1) / 2
SHM_SIZE_ALLOWED = (f"a Kubernetes quantity of memory such as '8Gi', {AUTO!r} (half of each replica's memory "
                    "limit) or None (no memory-backed /dev/shm)")
_BINARY_SUFFIXES = (("Ti", 2 ** 40), ("Gi", 2 ** 30), ("Mi", 2 ** 20), ("Ki", 2 ** 10))


def shm_size_problems(shm_size: Any) -> list[tuple[str, str]]:
    """``shm_size`` as given: ``"auto"``, ``None`` or a quantity string > 0 (the value is not repeated: it may
    hold anything)."""
    if shm_size is None or shm_size == AUTO:
        return []
    if not isinstance(shm_size, str):
        return [("shm_size", f"a {type(shm_size).__name__} is not allowed: {SHM_SIZE_ALLOWED}")]
    try:
        size = parse_quantity(shm_size)
    except QuantityError as error:
        return [("shm_size", f"{error}; allowed: {SHM_SIZE_ALLOWED}")]
    if size < 1:
        return [("shm_size", f"must be at least one byte; allowed: {SHM_SIZE_ALLOWED}")]
    return []


def memory_limit(resources: Resources | None) -> Decimal | None:
    """A replica's memory limit in bytes, ``None`` without one (a request alone does not bound the container)."""
    if resources is None or resources.memory is None or resources.memory.limits is None:
        return None
    return amount_in_base_units("memory", resources.memory.limits)


def limit_problems(shm_size: Any, replicas: Iterable[tuple[str, Resources | None]]) -> list[tuple[str, str]]:
    """A fixed ``shm_size`` above the memory limit of a replica, named by its spec path: writing it full would
    OOM-kill the container (the tmpfs pages count against its limit)."""
    if shm_size is None or shm_size == AUTO or shm_size_problems(shm_size):
        return []
    size = parse_quantity(shm_size)
    return [
        ("shm_size", f"{shm_size} is more than the memory limit of {path}.resources ({_quantity(limit)}): "
         "/dev/shm's pages count against it; give a smaller size, 'auto' (half the limit) or None")
        for path, resources in replicas
        if (limit := memory_limit(resources)) is not None and size > limit
    ]


def path_problems(shm_size: Any, paths: Iterable[tuple[str, str | None]]) -> list[tuple[str, str]]:
    """A path argument (``model_dir``, ``checkpoint_dir``) at or under ``/dev/shm`` while the volume is mounted
    there: the pod would have two volumes at one path, or the model on memory the pod loses when it ends."""
    if shm_size is None:
        return []
    return [
        (name, f"is at or under {SHM_PATH}, where the pods mount their shared memory (shm_size); choose another "
         "path, or set shm_size=None")
        for name, path in paths
        if isinstance(path, str) and _under(path, SHM_PATH)
    ]


def shm_size_limit(shm_size: str | None, resources: Resources | None) -> str | None:
    """The ``sizeLimit`` of a replica's volume: ``shm_size`` as given, else half its memory limit, else ``None``."""
    if shm_size is not None and shm_size != AUTO:
        return shm_size
    limit = memory_limit(resources)
    if limit is None or limit <= 0:
        return None
    return _quantity((limit * AUTO_SHARE).to_integral_value(rounding="ROUND_FLOOR"))


def shm_volume(shm_size: str | None, resources: Resources | None) -> dict[str, Any] | None:
    """The volume (Kubernetes JSON) of a replica with these resources, ``None`` when ``shm_size`` is ``None``."""
    if shm_size is None:
        return None
    source: dict[str, Any] = {"medium": "Memory"}
    limit = shm_size_limit(shm_size, resources)
    if limit is not None:
        source["sizeLimit"] = limit
    return {"name": SHM_VOLUME, "emptyDir": source}


def shm_mount() -> dict[str, Any]:
    """Its mount in the training container (Kubernetes JSON)."""
    return {"name": SHM_VOLUME, "mountPath": SHM_PATH}


def _quantity(amount: Decimal) -> str:
    """Bytes as the shortest exact binary quantity (``"1536Mi"``, ``"4Gi"``)."""
    whole = int(amount)
    for suffix, unit in _BINARY_SUFFIXES:
        if whole and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def _under(path: str, root: str) -> bool:
    normal = posixpath.normpath(path)
    return normal == root or normal.startswith(root + "/")


__all__ = [
    "AUTO",
    "SHM_PATH",
    "SHM_SIZE_ALLOWED",
    "SHM_VOLUME",
    "limit_problems",
    "memory_limit",
    "path_problems",
    "shm_mount",
    "shm_size_limit",
    "shm_size_problems",
    "shm_volume",
]
