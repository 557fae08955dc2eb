"""DAGs for the errors that tell Airflow what to do, with ``retries``, under the provider's retry policy.

A script's error follows ``retries``; an image that cannot be pulled fails at its first try; a replica evicted
mid-training, or a job that hangs, is retried at once, whatever ``retry_delay`` says.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from tests.hang_scripts import BURST_THEN_HANG, GLOO_HANG, SLOW_BUT_REPORTING

START = pendulum.datetime(2026, 1, 1, tz="UTC")
IMAGE = "registry.example.com/trainer:1.0"
#: A retry delay the policy overrides: without it, the retry would come a minute later (and the test would fail on
#: the delay recorded, not hang).
LONG_DELAY = timedelta(minutes=1)


def namespace_of(dag_id: str) -> str:
    return dag_id.replace("_", "-")


def _dag(dag_id: str, **task_kwargs) -> DAG:
    task_kwargs.setdefault("environment", {"pytorch": {"n_workers": 1}})
    task_kwargs.setdefault("retries", 3)
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        DistributedTrainingOperator(task_id="train", framework="pytorch", **task_kwargs)
    return dag


# The master's script exits 2: the DAG author's call, so the task's own retries (no delay, to keep it short).
script_exits_2 = _dag("failure_script_exits_2", command=["python", "-c", "import sys; print('bad input'); sys.exit(2)"],
                      retry_delay=timedelta(0), stop_grace_period=3.0)
_on_kubernetes = {"command": ["python", "/opt/jobs/train.py"], "image": IMAGE, "backend": "kubernetes",
                  "startup_timeout": 600.0}
# Without the policy these would take 4 tries at once (no delay): with it, one.
image_pull = _dag("failure_image_pull", namespace=namespace_of("failure_image_pull"), retry_delay=timedelta(0),
                  **_on_kubernetes)
image_pull_deferrable = _dag("failure_image_pull_deferrable", namespace=namespace_of("failure_image_pull_deferrable"),
                             retry_delay=timedelta(0), deferrable=True, **_on_kubernetes)
# Without the policy the retry would wait a minute.
evicted = _dag("failure_evicted", namespace=namespace_of("failure_evicted"), retry_delay=LONG_DELAY, **_on_kubernetes)
evicted_deferrable = _dag("failure_evicted_deferrable", namespace=namespace_of("failure_evicted_deferrable"),
                          retry_delay=LONG_DELAY, deferrable=True, **_on_kubernetes)

# The hang watchdog, on real gloo jobs (tests.hang_scripts): ranks blocked in an all-reduce, and a job slow but
# reporting.
hung = _dag("failure_hung", environment={"pytorch": {"n_workers": 2}}, command=["python", "-c", GLOO_HANG],
            progress_timeout=timedelta(seconds=10), stop_grace_period=3.0, retries=1, retry_delay=LONG_DELAY)
# Ten reports within one live record interval, then the all-reduce: the message names the last one.
hung_after_burst = _dag("failure_hung_after_burst", environment={"pytorch": {"n_workers": 2}},
                        command=["python", "-c", BURST_THEN_HANG], progress_timeout=timedelta(seconds=8),
                        stop_grace_period=3.0, retries=0)
slow = _dag("failure_slow_but_reporting", command=["python", "-c", SLOW_BUT_REPORTING], progress_timeout=3.0,
            retries=0)
# The cluster refuses the wait's first request (403): fails at its first try; a retry would be refused too.
_refused = {**_on_kubernetes, "startup_timeout": 2.0, "retry_delay": timedelta(0)}
refused = _dag("failure_refused", namespace=namespace_of("failure_refused"), **_refused)
refused_deferrable = _dag("failure_refused_deferrable", namespace=namespace_of("failure_refused_deferrable"),
                          deferrable=True, **_refused)
# Waiting for capacity is not starting: unschedulable longer than startup_timeout, then scheduled, succeeds within
# queue_timeout; unschedulable past queue_timeout fails, naming the scheduler's reason.
_queued = {**_on_kubernetes, "startup_timeout": 2.0, "retries": 0}
queue_then_scheduled = _dag("failure_queue_then_scheduled", namespace=namespace_of("failure_queue_then_scheduled"),
                            queue_timeout=timedelta(minutes=10), **_queued)
queue_then_scheduled_deferrable = _dag(
    "failure_queue_then_scheduled_deferrable", namespace=namespace_of("failure_queue_then_scheduled_deferrable"),
    queue_timeout=timedelta(minutes=10), deferrable=True, **_queued)
queue_timeout = _dag("failure_queue_timeout", namespace=namespace_of("failure_queue_timeout"), queue_timeout=3.0,
                     **_queued)
