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

Every report is stamped with its time (``reported_at``), and the newest one always gets out, even when the master
blocks right after it (a rank stuck in a collective): what the pacing holds back (a progress within a second of the
last write, a record within its interval) is written, and printed, by a timer thread when its interval ends, not by
the next call, which may never come. The hang watchdog names that report and times the master's silence from it.
The timer needs Python's GIL, which blocking collectives (gloo, NCCL, MPI, Horovod) release while they wait.

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
import sys
import tempfile
import threading
import time
from typing import Any

from airflow_distributed.contract import (
    ENV_MODEL_DIR,
    ENV_RECORD_INTERVAL,
    REPORTED_AT,
    empty_document,
)
from airflow_distributed.replica import live_report
from airflow_distributed.replica.atomic_file import write_atomic
from airflow_distributed.replica.checkpoints import (
    URL,
    get_checkpoint_dir,
    latest_checkpoint,
    save_checkpoint,
)
from airflow_distributed.replica.info import get_cluster_info, get_task_info, get_try_number, master_output_path
from airflow_distributed.replica.live_report import record_line
from airflow_distributed.replica.stack_dump import register_stack_dump
from airflow_distributed.replica.trainer_status import report_to_trainer
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
        if not URL.match(model_dir):
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
    path = master_output_path()
    if path is None:
        return
    with _lock:
        document = _document_for(path)
        document["metrics"].update(clean)
        if step is not None:
            document["history"].append({"step": clean_step, **clean})
        _stamp(document)
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
    output = master_output_path()
    if output is None:
        return
    with _lock:
        document = _document_for(output)
        document[key] = value
        _stamp(document)
        _write(output, document)


def log_progress(step: int, total: int) -> None:
    """Record that ``step`` of ``total`` steps is done; the job's table and view show a percentage and an estimate
    of the time left.

    The estimate is the pace since this process's first call, so a resumed run (from a checkpoint) estimates from
    its own steps. The document is rewritten at most once a second: call it every step if you like. A call within
    the second is held back and written when the second ends (by a timer thread, so that the last step reported
    gets out even if the master blocks right after it), or with the next metric. On a replica that is not the master
    it does nothing.
    """
    if isinstance(step, bool) or not isinstance(step, int) or isinstance(total, bool) or not isinstance(total, int):
        raise TypeError(f"step and total must be whole numbers, got {step!r} and {total!r}")
    if total < 1 or not 0 <= step <= total:
        raise ValueError(f"need 0 <= step <= total and total >= 1, got step={step} total={total}")
    output = master_output_path()
    if output is None:
        return
    now = time.monotonic()
    with _lock:
        first = _progress.setdefault("first", (now, step))
        elapsed, done = now - first[0], step - first[1]
        eta = round(elapsed / done * (total - step), 1) if done > 0 else None
        document = _document_for(output)
        document["progress"] = {"step": step, "total": total, "percent": round(100.0 * step / total, 1),
                                "eta_seconds": eta}
        _stamp(document)
        report_to_trainer(now, int(100 * step / total), eta, step == total, document.get("metrics", {}))
        wait = _progress.get("written", -math.inf) + 1.0 - now
        if step < total and wait > 0:
            _progress["held"] = True
            if _progress.get("timer") is None:
                _progress["timer"] = _start_timer(wait, _write_held_back)
            return
        _progress["written"] = now
        _write(output, document)


#: The pace of ``log_progress``: its first call, the last write of the document, whether a progress is held back
#: and the timer that writes it.
_progress: dict[str, Any] = {}


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
    path = master_output_path()
    with _lock:
        document = _document_for(path) if path is not None else empty_document()
        return json.loads(json.dumps(document))


_lock = threading.RLock()
# The document belongs to the output path it was recorded for: if the variable changes within a process (tests do
# this), recording starts afresh instead of carrying one job's metrics into another's file.
_state: dict[str, Any] = {"path": None, "document": None}


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


def _stamp(document: dict[str, Any]) -> None:
    """A report was made now: the watchdog times the master's silence from it, whenever it reads it."""
    document[REPORTED_AT] = round(time.time(), 3)


def _write(path: str, document: dict[str, Any]) -> None:
    write_atomic(path, (json.dumps(document, allow_nan=False, sort_keys=False) + "\n").encode("utf-8"))
    _progress["held"] = False  # a progress held back is in this write
    _print_record(document)


def _write_held_back() -> None:
    """The end of the second of a held-back progress: the document written with it, unless a write since did."""
    with _lock:
        _progress["timer"] = None
        if _progress.get("held") and _state["path"] is not None and _state["document"] is not None:
            _progress["written"] = time.monotonic()
            _write(_state["path"], _state["document"])


def _record_interval() -> float:
    """``RECORD_INTERVAL``: the backend's (``ENV_RECORD_INTERVAL``, shorter with ``progress_timeout``), else 5 s."""
    try:
        seconds = float(os.environ.get(ENV_RECORD_INTERVAL, ""))
    except ValueError:
        return live_report.RECORD_INTERVAL
    return seconds if 0 <= seconds < math.inf else live_report.RECORD_INTERVAL


#: At most one live record per interval (seconds); one held back is printed when the interval ends.
RECORD_INTERVAL = _record_interval()
_records: dict[str, Any] = {"printed": -math.inf, "timer": None}


def _new_process() -> None:
    """Forget what this process recorded, as a new process of the replica starts: the document and its path, the
    pace of ``log_progress`` and of the live records (a timer still pending then finds nothing to do). The one reset
    of the module's state, for the tests; the model folder made outside a job is kept (one per process)."""
    with _lock:
        _state.update(path=None, document=None)
        _progress.clear()
        _records.update(printed=-math.inf, timer=None)


def _print_record(document: dict[str, Any]) -> None:
    """The live record of the document on stdout (the container's log), where the job view of a running cluster
    job and the hang watchdog read it; the task log leaves it out (``live_report``). Paced: a master that logs every
    step prints one record per ``RECORD_INTERVAL``, the newest state, and never leaves one unprinted for longer."""
    wait = _records["printed"] + RECORD_INTERVAL - time.monotonic()
    if wait <= 0:
        _print_now(document)
    elif _records["timer"] is None:
        _records["timer"] = _start_timer(wait, _print_held_back)


def _start_timer(wait: float, call: Any) -> Any:
    """A daemon thread that calls ``call`` in ``wait`` seconds, whatever the master's main thread is doing then."""
    timer = threading.Timer(wait, call)
    timer.daemon = True
    timer.start()
    return timer


def _print_held_back() -> None:
    with _lock:
        if _records["timer"] is None:
            return
        _records["timer"] = None
        if _state.get("document") is not None:
            _print_now(_state["document"])


def _flush_held_back() -> None:
    """At exit: a master that ends within an interval still writes and prints its last state."""
    _write_held_back()
    _print_held_back()


atexit.register(_flush_held_back)


def _print_now(document: dict[str, Any]) -> None:
    _records["printed"] = time.monotonic()
    line = record_line(document)
    if line is not None:
        try:
            # one write, so that a line the training prints from another thread cannot split it
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):  # stdout closed or gone: the report must not stop training
            pass


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


register_stack_dump()
