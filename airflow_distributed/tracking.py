"""Helpers used inside training code run as a replica of a distributed job.

This module tells a replica where it stands in the job and lets the master report what the job produced:

- :func:`get_cluster_info` -- the whole job, ``{role: ["host:port", ...]}``;
- :func:`get_task_info` -- this replica: job name, role, index and whether it is the master;
- :func:`get_model_dir` -- where to save the model;
- :func:`log_metrics`, :func:`log_model` -- record metrics and the saved model's path;
- :func:`log_progress` -- how far training is, for the task log's replica table and the job view (and, in a
  Kubeflow Trainer v2 TrainJob with the ``TrainJobStatus`` feature gate, for the TrainJob's ``status.trainerStatus``);
- :func:`get_outputs` -- the output document recorded so far;
- :func:`save_checkpoint`, :func:`latest_checkpoint` -- training state that survives a failed try, so that Airflow's
  retry resumes where the last try stopped instead of at step 0; :func:`get_try_number` tells which try this is.

The output document is ``{"metrics": {...}, "model_path": ..., "history": [...]}``. It is written to the path in
``AIRFLOW_DISTRIBUTED_OUTPUT`` after every call to :func:`log_metrics` or :func:`log_model`, atomically (a temporary
file in the same directory, then :func:`os.replace`), so the backend reading it never sees half a document, even
when the replica is killed in the middle of a write. The master also prints the document's progress, metrics and
history as one ``live_report`` line on stdout, at most every ``RECORD_INTERVAL`` seconds: the job view of a running
cluster job reads it from the master's log (docs/ui.md, "The live record"); the task log leaves it out.

Only the master replica is given ``AIRFLOW_DISTRIBUTED_OUTPUT``. Everywhere else the logging calls do nothing and
return quietly, so the same script can run unchanged on every replica. Processes started by a launcher inside a
replica (``horovodrun``, ``mpirun``, ``torchrun``) inherit that variable from their parent; of those, only the one
with global rank 0 counts as the master (see :func:`get_task_info`).

It uses the standard library only: training images need neither Airflow nor pydantic to import it.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import pickle
import re
import tempfile
import threading
import time
from typing import Any

from airflow_distributed.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_CLUSTER,
    ENV_INDEX,
    ENV_JOB,
    ENV_MODEL_DIR,
    ENV_OUTPUT,
    ENV_ROLE,
    ENV_STACKS_DIR,
    ENV_STACKS_SIGNAL,
    ENV_TRY_NUMBER,
    empty_document,
)
from airflow_distributed.live_report import record_line
from airflow_distributed.strict_json import strict_number

__all__ = [
    "get_checkpoint_dir",
    "get_cluster_info",
    "get_model_dir",
    "get_outputs",
    "get_task_info",
    "get_try_number",
    "latest_checkpoint",
    "log_metrics",
    "log_model",
    "log_progress",
    "save_checkpoint",
]

#: Checkpoint files are ``checkpoint-<step>.pkl`` with the step zero-padded, so that names sort like steps.
CHECKPOINT_FILE = re.compile(r"^checkpoint-(\d{12})\.pkl$")
#: In the checkpoint directory, what one job's :func:`save_checkpoint` wrote there: one path a line, relative to
#: the directory, folders it created ending in ``/``. A shared directory holds other jobs' checkpoints too; this
#: list is how a job reads, prunes and removes only its own.
WRITTEN_LIST = ".airflow-distributed-{job}.checkpoints"

# Global-rank variables set by the launchers that start several processes inside one replica. Horovod's own comes
# first because under horovodrun + MPI the MPI ones are set as well and agree with it; RANK is torchrun's (and the
# contract's: the PyTorch master replica has RANK=0, so a plain master still counts).
_LAUNCHER_RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK")

# "s3://bucket/x", "gs://...", "hdfs://..." are left to the training framework; only plain paths are created here.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


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
        "is_master": _output_path() is not None,
    }


_fallback_model_dir: str | None = None


def get_model_dir() -> str:
    """Return the directory to save the model in, from ``AIRFLOW_DISTRIBUTED_MODEL_DIR``.

    A local path is created if missing; a URL (``s3://...``) is returned as it is, for the framework to write to.
    When the variable is unset (the script runs by hand, outside a job), a temporary directory is created once per
    process and returned on every call.
    """
    global _fallback_model_dir
    model_dir = os.environ.get(ENV_MODEL_DIR, "").strip()
    if model_dir:
        if not _URL.match(model_dir):
            os.makedirs(model_dir, exist_ok=True)
        return model_dir
    with _lock:
        if _fallback_model_dir is None or not os.path.isdir(_fallback_model_dir):
            _fallback_model_dir = tempfile.mkdtemp(prefix="airflow-distributed-model-")
        return _fallback_model_dir


def log_metrics(step: int | None = None, **values: Any) -> None:
    """Record metrics on the master and rewrite the output document.

    Each value replaces the latest one under its name in ``metrics``. When ``step`` is given, ``{"step": step,
    **values}`` is also appended to ``history`` (the whole document is rewritten on each call, so log the history
    per epoch or every few steps rather than on every step of a long run).

    Values must be JSON-safe once converted: numbers, strings, booleans, ``None``, and lists or string-keyed dicts of
    those. Scalars of other libraries (NumPy, PyTorch, TensorFlow, MXNet) are converted by duck typing, with
    ``.item()`` or ``float()``; arrays and tensors with ``.tolist()``, ``.numpy()`` or ``.asnumpy()``. A NaN or
    infinite value is stored as ``null`` (an integer beyond 64 bits as a float) and training goes on: a diverging
    run still reports what it has, and the document stays strict JSON. Anything else raises ``TypeError`` naming the
    metric.

    On a replica that is not the master it does nothing.
    """
    if not values and step is None:
        return
    # Conversion comes first and on every replica, so that a bad value fails the same way in a one-process test run
    # as on the master of a real job.
    clean = {name: _json_safe(value, name) for name, value in values.items()}
    clean_step = None if step is None else _json_safe(step, "step")
    path = _output_path()
    if path is None:
        return
    with _lock:
        document = _document_for(path)
        document["metrics"].update(clean)
        if step is not None:
            document["history"].append({"step": clean_step, **clean})
        _write(path, document)


def log_model(path: str | os.PathLike[str]) -> None:
    """Record where the model was saved (a local path or a URL) and rewrite the output document.

    On a replica that is not the master it does nothing.
    """
    model_path = os.fspath(path)
    if not isinstance(model_path, str):
        model_path = os.fsdecode(model_path)
    _set_in_document("model_path", model_path)


def _set_in_document(key: str, value: Any) -> None:
    """On the master: ``document[key] = value``, then the document rewritten (atomically)."""
    output = _output_path()
    if output is None:
        return
    with _lock:
        document = _document_for(output)
        document[key] = value
        _write(output, document)


def log_progress(step: int, total: int) -> None:
    """Record that ``step`` of ``total`` steps is done; the job's table and view show a percentage and an estimate
    of the time left.

    The estimate is the pace since this process's first call, so a resumed run (from a checkpoint) estimates from
    its own steps. The document is rewritten at most once a second: call it every step if you like. On a replica
    that is not the master it does nothing.
    """
    if isinstance(step, bool) or not isinstance(step, int) or isinstance(total, bool) or not isinstance(total, int):
        raise TypeError(f"step and total must be whole numbers, got {step!r} and {total!r}")
    if total < 1 or not 0 <= step <= total:
        raise ValueError(f"need 0 <= step <= total and total >= 1, got step={step} total={total}")
    output = _output_path()
    if output is None:
        return
    now = time.monotonic()
    with _lock:
        first = _progress.setdefault("first", (now, step))
        if step < total and now - _progress.get("written", -math.inf) < 1.0:
            return
        _progress["written"] = now
        elapsed, done = now - first[0], step - first[1]
        eta = round(elapsed / done * (total - step), 1) if done > 0 else None
        _set_in_document("progress", {"step": step, "total": total, "percent": round(100.0 * step / total, 1),
                                      "eta_seconds": eta})
        _report_to_trainer(now, int(100 * step / total), eta, step == total)


_progress: dict[str, Any] = {}

# Kubeflow Trainer v2 (``TrainJobStatus`` feature gate) gives a TrainJob's trainer containers an HTTPS endpoint
# for its status.trainerStatus, a CA file and a bearer token file (a projected token that rotates: read each time).
ENV_TRAINER_URL = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_TRAINER_CA = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TRAINER_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
#: At most one report per interval (seconds), as the Trainer asks of its clients; the last step is always sent.
TRAINER_REPORT_INTERVAL = 5.0
_trainer: dict[str, Any] = {}


def _report_to_trainer(now: float, percent: int, eta: float | None, last: bool) -> None:
    """POST the progress and the latest scalar metrics to the Trainer's status endpoint, if there is one.

    Never raises, and gives up on a slow endpoint after a few seconds: a report must not stop training.
    """
    url = os.environ.get(ENV_TRAINER_URL)
    if not url or (not last and now - _trainer.get("sent", -math.inf) < TRAINER_REPORT_INTERVAL):
        return
    _trainer["sent"] = now
    import ssl
    import sys
    import urllib.request
    from datetime import datetime, timezone

    metrics = [{"name": str(name)[:64], "value": str(value)[:64]}
               for name, value in (_state.get("document") or {}).get("metrics", {}).items()
               if isinstance(value, (int, float, str)) and not isinstance(value, bool) and str(name)][:256]
    status: dict[str, Any] = {"progressPercentage": max(0, min(100, percent)),
                              "lastUpdatedTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if eta is not None:
        status["estimatedRemainingSeconds"] = max(0, int(eta))
    if metrics:
        status["metrics"] = metrics
    headers = {"Content-Type": "application/json"}
    try:
        token_path = os.environ.get(ENV_TRAINER_TOKEN)
        if token_path:
            with open(token_path, encoding="utf-8") as handle:
                headers["Authorization"] = f"Bearer {handle.read().strip()}"
        context = ssl.create_default_context(cafile=os.environ.get(ENV_TRAINER_CA) or None) \
            if url.startswith("https:") else None
        request = urllib.request.Request(url, data=json.dumps({"trainerStatus": status}).encode(), headers=headers,
                                         method="POST")
        with urllib.request.urlopen(request, timeout=3, context=context) as response:
            response.read()
    except Exception as error:  # best effort: a failed report must not stop training
        if not _trainer.get("warned"):
            _trainer["warned"] = True
            print(f"airflow_distributed.tracking: could not report progress to {url}: {error}", file=sys.stderr,
                  flush=True)


def record_return_value(value: Any) -> None:
    """Record a ``@task.distributed`` function's return value (``return_value`` in the output document).

    Called by the script that runs the function; on a replica that is not the master it does nothing. The value
    is converted like a metric (:func:`log_metrics`) and must be JSON-safe once converted.
    """
    _set_in_document("return_value", _json_safe(value, "the return value"))


def get_outputs() -> dict[str, Any]:
    """Return a copy of the output document this process has recorded so far.

    It starts empty in every process (``{"metrics": {}, "model_path": None, "history": []}``); on a replica that is
    not the master it stays empty.
    """
    path = _output_path()
    with _lock:
        document = _document_for(path) if path is not None else empty_document()
        return json.loads(json.dumps(document))


# --- internals -------------------------------------------------------------------------------------------------

def get_try_number() -> int:
    """Return the Airflow try this job runs in (1 for the first), from ``AIRFLOW_DISTRIBUTED_TRY_NUMBER``; 1 outside
    a job."""
    raw = os.environ.get(ENV_TRY_NUMBER, "").strip()
    try:
        return int(raw) if raw else 1
    except ValueError:
        raise ValueError(f"{ENV_TRY_NUMBER} must be an integer, got {raw!r}") from None


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
    if directory is None or root is None or (not every_replica and _output_path() is None):
        return None
    path = os.path.join(directory, f"checkpoint-{step:012d}.pkl")
    created = _make_folders(directory)
    # Recorded before it is written: a replica killed mid-write leaves a file the clean-up still knows of.
    _record_written(root, [*(folder + os.sep for folder in created), path])
    _write_atomic(path, pickle.dumps({"step": step, "state": state}, protocol=pickle.HIGHEST_PROTOCOL))
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
    if directory is None or _URL.match(directory):
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


_lock = threading.RLock()
# The document belongs to the output path it was recorded for: if the variable changes within a process (tests do
# this), recording starts afresh instead of carrying one job's metrics into another's file.
_state: dict[str, Any] = {"path": None, "document": None}


def _output_path() -> str | None:
    path = os.environ.get(ENV_OUTPUT, "").strip()
    if not path:
        return None
    for variable in _LAUNCHER_RANK_VARIABLES:
        rank = os.environ.get(variable, "").strip()
        if rank:
            # Only the first variable set decides: under mpirun both HOROVOD_RANK and OMPI_COMM_WORLD_RANK are set.
            return path if rank == "0" else None
    return path


def _document_for(path: str) -> dict[str, Any]:
    if _state["path"] != path or _state["document"] is None:
        _state["path"] = path
        _state["document"] = _continued_document(path) or empty_document()
    return _state["document"]


def _continued_document(path: str) -> dict[str, Any] | None:
    """Under torch's elastic agent, the document a process of the same try wrote before its worker group was
    restarted, so that the history goes on; the backends remove it before each try, so it is never a past try's."""
    if not os.environ.get("TORCHELASTIC_RUN_ID"):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            # NaN or Infinity written by hand would make the next write (strict JSON) fail: they are null
            document = json.load(handle, parse_constant=lambda name: None)
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("history"), list):
        return None
    return {**empty_document(), **document}


def _write(path: str, document: dict[str, Any]) -> None:
    _write_atomic(path, (json.dumps(document, allow_nan=False, sort_keys=False) + "\n").encode("utf-8"))
    _print_record(document)


#: At most one live record per interval (seconds); one held back is printed when the interval ends.
RECORD_INTERVAL = 5.0
_records: dict[str, Any] = {"printed": -math.inf, "timer": None}


def _print_record(document: dict[str, Any]) -> None:
    """The live record of the document on stdout (the container's log), where the job view of a running cluster
    job reads it; the task log leaves it out (``live_report``). Paced: a master that logs every step prints one
    record per ``RECORD_INTERVAL``, the newest state, and never leaves one unprinted for longer."""
    wait = _records["printed"] + RECORD_INTERVAL - time.monotonic()
    if wait <= 0:
        _print_now(document)
    elif _records["timer"] is None:
        timer = threading.Timer(wait, _print_held_back)
        timer.daemon = True
        _records["timer"] = timer
        if not _records.get("at_exit"):  # a master that ends within the interval still prints its last state
            _records["at_exit"] = True
            atexit.register(_print_held_back)
        timer.start()


def _print_held_back() -> None:
    with _lock:
        if _records["timer"] is None:
            return
        _records["timer"] = None
        if _state.get("document") is not None:
            _print_now(_state["document"])


def _print_now(document: dict[str, Any]) -> None:
    _records["printed"] = time.monotonic()
    line = record_line(document)
    if line is not None:
        import sys

        try:
            # one write, so that a line the training prints from another thread cannot split it
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):  # stdout closed or gone: the report must not stop training
            pass


def _write_atomic(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Same directory as the target, so os.replace is a rename within one filesystem and therefore atomic.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates the file readable by its owner only; the backend reading it may run as another user
        # (the Kubernetes XCom sidecar), so give it the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _json_safe(value: Any, name: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        # NaN and infinities become null, an integer beyond 64 bits a float: what the task's reader keeps anyway
        return strict_number(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"metric {name!r}: dict keys must be strings, got {key!r}")
            out[key] = _json_safe(item, f"{name}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [_json_safe(item, f"{name}[{i}]") for i, item in enumerate(value)]
    # Scalars of array libraries: NumPy scalars and 0-d arrays, torch/TF/MXNet one-element tensors all have .item(),
    # which keeps integers integral; a tensor on a GPU is copied to the host by it.
    item = getattr(value, "item", None)
    if callable(item):
        try:
            scalar = item()
        except (ValueError, RuntimeError, TypeError):
            scalar = value  # more than one element: try .tolist() below
        if scalar is not value:
            return _json_safe(scalar, name)
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _json_safe(tolist(), name)
    # TensorFlow eager tensors and MXNet NDArrays have neither: they hand out a NumPy array, converted as above.
    for method in ("numpy", "asnumpy"):
        to_numpy = getattr(value, method, None)
        if callable(to_numpy):
            return _json_safe(to_numpy(), name)
    if hasattr(value, "__float__"):
        return _json_safe(float(value), name)
    raise TypeError(
        f"metric {name!r} has a value of type {type(value).__name__} that is not a number, string, bool, "
        "None, or a list or dict of those"
    )


def _register_stack_dump() -> None:
    """Print every thread's stack to stderr on the signal ``AIRFLOW_DISTRIBUTED_STACKS_SIGNAL`` names: the backend
    sends it to the replicas of a job it found hung, and their last lines show where each was stuck."""
    name = os.environ.get(ENV_STACKS_SIGNAL)
    if not name:
        return
    import faulthandler
    import signal
    import sys

    number = getattr(signal, name, None)
    if not isinstance(number, int) or not name.startswith("SIG"):
        return
    try:
        faulthandler.register(number, file=sys.stderr, all_threads=True)
    except (AttributeError, OSError, RuntimeError, ValueError):  # no such signal here, or no real stderr
        return
    folder = os.environ.get(ENV_STACKS_DIR)
    if folder:
        try:
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, str(os.getpid())), "w").close()
        except OSError:  # a read-only /tmp: the stacks are not obtainable, the job runs all the same
            pass


_register_stack_dump()
