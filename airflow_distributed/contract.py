"""The replica contract's names, shared by the side that starts replicas and the side that runs in them.

Standard library only, with no import of the package's other modules: training images import it (through
``tracking``) without Airflow, and the plan, the manifests, the backends and the readers of the master's report
name these facts from here, so that both sides cannot drift apart. What each variable holds is in
docs/architecture.md ("From ``environment=`` to a pod's variable").
"""

from __future__ import annotations

from typing import Any

#: The job's name (the same on every replica and every try).
ENV_JOB = "AIRFLOW_DISTRIBUTED_JOB"
#: The framework the job runs (``pytorch``, ``tensorflow``...).
ENV_FRAMEWORK = "AIRFLOW_DISTRIBUTED_FRAMEWORK"
#: This replica's role (``master``, ``worker``, ``chief``, ``ps``...).
ENV_ROLE = "AIRFLOW_DISTRIBUTED_ROLE"
#: This replica's index within its role.
ENV_INDEX = "AIRFLOW_DISTRIBUTED_INDEX"
#: The whole job as JSON, ``{role: ["host:port", ...]}``.
ENV_CLUSTER = "AIRFLOW_DISTRIBUTED_CLUSTER"
#: Where the model is saved.
ENV_MODEL_DIR = "AIRFLOW_DISTRIBUTED_MODEL_DIR"
#: Where the master writes its output document; given to the master only.
ENV_OUTPUT = "AIRFLOW_DISTRIBUTED_OUTPUT"
#: The task instance's checkpoint directory, when the task has one.
ENV_CHECKPOINT_DIR = "AIRFLOW_DISTRIBUTED_CHECKPOINT_DIR"
#: The job's TensorBoard folder, where every replica writes its event files: the same for every try of the task
#: instance (per job), on the model storage on clusters.
ENV_TENSORBOARD_DIR = "AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR"
#: The Airflow try the job runs in (1 for the first).
ENV_TRY_NUMBER = "AIRFLOW_DISTRIBUTED_TRY_NUMBER"
#: The signal (``SIGUSR1``) on which a replica prints every thread's Python stack, set by a backend that watches for
#: hangs (``progress_timeout``).
ENV_STACKS_SIGNAL = "AIRFLOW_DISTRIBUTED_STACKS_SIGNAL"
#: A folder where the process notes its pid once it prints its stacks on that signal: a backend that does not start
#: the process itself signals those noted there (``kill`` through pods/exec; a Ray replica's actor).
ENV_STACKS_DIR = "AIRFLOW_DISTRIBUTED_STACKS_DIR"
#: Seconds between two live records the master prints at most (``live_report.record_interval``), set by a backend
#: that watches the master's log for hangs, so that a record held back (the master's last report before it blocks)
#: is printed well within ``progress_timeout``.
ENV_RECORD_INTERVAL = "AIRFLOW_DISTRIBUTED_RECORD_INTERVAL"
#: The job's world size as planned (replicas x processes per replica), given to the replicas of a PyTorch job whose
#: processes a launcher starts (``environment.pytorch.launcher``): each process compares it with the ``WORLD_SIZE``
#: its launcher gave it before it trains (``replica/world_size.py``).
ENV_WORLD_SIZE = "AIRFLOW_DISTRIBUTED_WORLD_SIZE"
#: The GPUs a ``local`` replica was given (its ``CUDA_VISIBLE_DEVICES``, kept under this name too): a launcher that
#: sets its processes' ``CUDA_VISIBLE_DEVICES`` to its own slot numbers (DeepSpeed's, from ``--world_info``) would
#: hand them GPUs 0..n-1 of the machine; each launched process maps its slots back onto these first
#: (``replica/world_size.py``).
ENV_REPLICA_GPUS = "AIRFLOW_DISTRIBUTED_REPLICA_GPUS"

#: The output document's keys: what the master reported. ``progress`` and ``return_value`` are there once reported.
METRICS, MODEL_PATH, HISTORY, PROGRESS, RETURN_VALUE = "metrics", "model_path", "history", "progress", "return_value"
#: When the master made its newest report (seconds since the epoch, its clock), there once it reported: the hang
#: watchdog times the master's silence from it, not from when it read the report.
REPORTED_AT = "reported_at"


def empty_document() -> dict[str, Any]:
    """The output document of a master that reported nothing (a new one each call: callers fill it in)."""
    return {METRICS: {}, MODEL_PATH: None, HISTORY: []}


__all__ = [
    "ENV_CHECKPOINT_DIR",
    "ENV_CLUSTER",
    "ENV_FRAMEWORK",
    "ENV_INDEX",
    "ENV_JOB",
    "ENV_MODEL_DIR",
    "ENV_OUTPUT",
    "ENV_RECORD_INTERVAL",
    "ENV_REPLICA_GPUS",
    "ENV_ROLE",
    "ENV_STACKS_DIR",
    "ENV_STACKS_SIGNAL",
    "ENV_TENSORBOARD_DIR",
    "ENV_TRY_NUMBER",
    "ENV_WORLD_SIZE",
    "HISTORY",
    "METRICS",
    "MODEL_PATH",
    "PROGRESS",
    "REPORTED_AT",
    "RETURN_VALUE",
    "empty_document",
]
