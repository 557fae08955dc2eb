"""A job's usage over the tries of its task instance: this try's figures plus those the earlier tries kept.

Each try adds its own usage (``jobstate.usage``) to what the earlier tries of the task instance left in Airflow's
``task_state_store`` (Airflow 3.3+; it outlives a try, which the XComs do not) and leaves the sum there for the next
one. Without a store, or when it cannot be read, the figures are this try's alone (``tries`` says how many tries
they count). Best effort: what a job cost never fails it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_distributed.jobstate.usage import ReplicaRun, add_usage, job_usage

#: ``task_state_store`` key of the usage of the task instance's tries so far.
USAGE_STATE_KEY = "airflow_distributed_usage"


def usage_over_tries(context: Mapping[str, Any], runs: Iterable[ReplicaRun], wall_seconds: float,
                     log: Any = None) -> dict[str, Any]:
    """This try's usage (``runs``: every run of every replica) with the earlier tries' added; stored for the next."""
    store = context.get("task_state_store")
    earlier = None
    if store is not None:
        try:
            earlier = store.get(USAGE_STATE_KEY)
        except Exception as error:
            if log is not None:
                log.warning("the usage of earlier tries could not be read (%s): counting this try only",
                            type(error).__name__)
    usage = add_usage(earlier if isinstance(earlier, Mapping) else None, job_usage(runs, wall_seconds))
    if store is not None:
        try:
            store.set(USAGE_STATE_KEY, usage)
        except Exception as error:
            if log is not None:
                log.warning("the usage of this try could not be kept for the next (%s)", type(error).__name__)
    return usage


__all__ = ["USAGE_STATE_KEY", "usage_over_tries"]
