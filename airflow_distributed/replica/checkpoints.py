"""Checkpoints that survive a failed try: saved by the master (or every replica), read back by the retry, each
job's files listed so that jobs may share a directory and the clean-up removes only a job's own (standard library
only; ``tracking`` re-exports the public calls)."""

from __future__ import annotations

import os
import pickle
import re
from typing import Any

from airflow_distributed.contract import ENV_CHECKPOINT_DIR, ENV_JOB, ENV_ROLE
from airflow_distributed.replica.atomic_file import write_atomic
from airflow_distributed.replica.info import get_task_info, master_output_path

#: Checkpoint files are ``checkpoint-<step>.pkl`` with the step zero-padded, so that names sort like steps.
CHECKPOINT_FILE = re.compile(r"^checkpoint-(\d{12})\.pkl$")
#: In the checkpoint directory, what one job's :func:`save_checkpoint` wrote there: one path a line, relative to
#: the directory, folders it created ending in ``/``. A shared directory holds other jobs' checkpoints too; this
#: list is how a job reads, prunes and removes only its own.
WRITTEN_LIST = ".airflow-distributed-{job}.checkpoints"

# "s3://bucket/x", "gs://...", "hdfs://..." are left to the training framework; only plain paths are created here.
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def get_checkpoint_dir() -> str | None:
    """Return the checkpoint directory of this task instance, from ``AIRFLOW_DISTRIBUTED_CHECKPOINT_DIR``.

    Every try of the same task instance (and every replica) is given the same directory, so a retry finds what the
    failed try saved. ``None`` when the variable is unset; a URL (``s3://...``) is returned as it is, for the
    framework's own checkpointing to write to (:func:`save_checkpoint` writes plain paths only).
    """
    return os.environ.get(ENV_CHECKPOINT_DIR, "").strip() or None


def save_checkpoint(state: Any, step: int, *, keep: int = 3, every_replica: bool = False) -> str | None:
    """Save ``state`` (anything :mod:`pickle` takes: a ``state_dict``, NumPy arrays, plain values) as of ``step``.

    The file is written atomically (a killed replica leaves the previous checkpoint intact, never half a file), then
    all but the newest ``keep`` checkpoints are removed. Only the master saves, since in data-parallel training
    every replica holds the same state; ``every_replica=True`` gives each replica a folder of its own
    (``<role>-<index>``) for state that differs per replica (parameter-server shards, data-loader positions).
    In a job, every file and folder it writes is added to the job's list in the directory (``WRITTEN_LIST``):
    pruning, :func:`latest_checkpoint` and the backend's clean-up after success see only those, so jobs may share
    a directory. Returns the path written, or ``None`` where nothing was saved (another replica, or no checkpoint
    directory).
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a whole number >= 0, got {step!r}")
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep!r}")
    directory = _checkpoint_folder(every_replica)
    root = get_checkpoint_dir()
    if directory is None or root is None or (not every_replica and master_output_path() is None):
        return None
    path = os.path.join(directory, f"checkpoint-{step:012d}.pkl")
    created = _make_folders(directory)
    # Recorded before it is written: a replica killed mid-write leaves a file the clean-up still knows of.
    _record_written(root, [*(folder + os.sep for folder in created), path])
    write_atomic(path, pickle.dumps({"step": step, "state": state}, protocol=pickle.HIGHEST_PROTOCOL))
    for _, old in _checkpoints(directory)[:-keep]:
        try:
            os.unlink(old)
        except FileNotFoundError:
            pass
    return path


def latest_checkpoint(*, every_replica: bool = False) -> tuple[int, Any] | None:
    """Return ``(step, state)`` of the newest checkpoint saved by :func:`save_checkpoint`, or ``None``.

    Any replica may read the master's checkpoints when the directory is shared (always on the local backend; on
    Kubernetes when it is on a volume every pod mounts). A file that cannot be read (a try killed by the kernel
    mid-write on a filesystem without atomic rename) is skipped for the one before it. In a job, only checkpoints
    of this job (any of its tries) are read, never another job's in a shared directory.
    """
    directory = _checkpoint_folder(every_replica)
    if directory is None:
        return None
    for _, path in reversed(_checkpoints(directory)):
        try:
            with open(path, "rb") as handle:
                saved = pickle.load(handle)
        except (OSError, EOFError, pickle.UnpicklingError):
            continue
        return saved["step"], saved["state"]
    return None


def _checkpoint_folder(every_replica: bool) -> str | None:
    directory = get_checkpoint_dir()
    if directory is None or URL.match(directory):
        return None
    if every_replica:
        role = os.environ.get(ENV_ROLE) or "replica"
        directory = os.path.join(directory, f"{role}-{get_task_info()['index']}")
    return directory


def _checkpoints(directory: str) -> list[tuple[int, str]]:
    """(step, path) of the checkpoints in ``directory``, oldest first: in a job, only those the job wrote."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = [(int(match.group(1)), os.path.join(directory, name))
             for name in names if (match := CHECKPOINT_FILE.match(name))]
    job, root = os.environ.get(ENV_JOB), get_checkpoint_dir()
    if job and root:
        own = {os.path.normpath(os.path.join(root, name)) for name in written_checkpoints(root, job)[0]}
        found = [(step, path) for step, path in found if os.path.normpath(path) in own]
    return sorted(found)


def written_list_path(directory: str, job: str) -> str:
    """The list of what job ``job`` wrote in checkpoint directory ``directory`` (see ``WRITTEN_LIST``)."""
    return os.path.join(directory, WRITTEN_LIST.format(job=job))


def written_checkpoints(directory: str, job: str) -> tuple[list[str], list[str]]:
    """``(files, folders)`` job ``job`` wrote in ``directory`` (relative paths, in the order written); names that
    would leave the directory are left out, whoever wrote them."""
    try:
        with open(written_list_path(directory, job), encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return [], []
    files: list[str] = []
    folders: list[str] = []
    for line in dict.fromkeys(lines):
        name = os.path.normpath(line)
        if not line or os.path.isabs(line) or name == os.pardir or name.startswith(os.pardir + os.sep):
            continue
        (folders if line.endswith(os.sep) else files).append(name)
    return files, folders


def _make_folders(directory: str) -> list[str]:
    """Create ``directory`` and any missing parent; returns those created here, outermost first."""
    missing = []
    folder = os.path.abspath(directory)
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    os.makedirs(directory, exist_ok=True)
    return missing[::-1]


def _record_written(root: str, paths: list[str]) -> None:
    """Append ``paths`` under ``root`` to this job's list of what it wrote; nothing outside a job (no one cleans)."""
    job = os.environ.get(ENV_JOB)
    if not job:
        return
    lines = []
    for path in paths:
        relative = os.path.relpath(path.rstrip(os.sep), root)
        if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
            lines.append(relative + (os.sep if path.endswith(os.sep) else "") + "\n")
    # One append per call: replicas saving at once (every_replica) each add whole lines.
    fd = os.open(written_list_path(root, job), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, "".join(lines).encode("utf-8"))
    finally:
        os.close(fd)


__all__ = [
    "CHECKPOINT_FILE",
    "URL",
    "WRITTEN_LIST",
    "get_checkpoint_dir",
    "latest_checkpoint",
    "save_checkpoint",
    "written_checkpoints",
    "written_list_path",
]
