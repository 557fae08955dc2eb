"""What a job's end deletes by default (``backends.job_run.clean_pod_policy``): everything after success or after the
task instance's last try, the pods still running after a try that a retry follows (its finished pods kept for
it), and what the user chose whenever they chose."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_distributed.backends.job_run import clean_pod_policy, last_try


@dataclass
class TaskInstance:
    """The fields of Airflow's task instance that say which try this is."""

    try_number: int
    max_tries: int | None
    task: Any = field(default_factory=lambda: SimpleNamespace(retries=None))


def settings(policy: str | None = None) -> Any:
    return SimpleNamespace(options=SimpleNamespace(clean_pod_policy=policy))


@pytest.mark.parametrize(("ti", "expected"), [
    (TaskInstance(try_number=1, max_tries=0), True),  # retries=0: the only try
    (TaskInstance(try_number=1, max_tries=2), False),
    (TaskInstance(try_number=2, max_tries=2), False),
    (TaskInstance(try_number=3, max_tries=2), True),
    # A task instance cleared after its tries: Airflow raises max_tries by the task's retries.
    (TaskInstance(try_number=4, max_tries=5), False),
    # No max_tries: the task's retries stand in.
    (TaskInstance(try_number=2, max_tries=None, task=SimpleNamespace(retries=1)), True),
    (TaskInstance(try_number=1, max_tries=None, task=SimpleNamespace(retries=1)), False),
    # Nothing known: keep what a retry may want.
    (TaskInstance(try_number=1, max_tries=None), False),
])
def test_the_last_try(ti: TaskInstance, expected: bool) -> None:
    assert last_try({"ti": ti}) is expected  # type: ignore[typeddict-item]


@pytest.mark.parametrize(("chosen", "succeeded", "last", "expected"), [
    (None, True, False, "all"),
    (None, False, False, "running"),  # a retry follows: it finds the finished pods
    (None, False, True, "all"),  # no try follows: nothing would ever delete them
    ("running", False, True, "running"),  # the user asked to keep them
    ("none", False, True, "none"),
    ("all", False, False, "all"),
])
def test_the_clean_up_policy(chosen: str | None, succeeded: bool, last: bool, expected: str) -> None:
    ti = TaskInstance(try_number=2 if last else 1, max_tries=1)
    assert clean_pod_policy(settings(chosen), succeeded, {"ti": ti}) == expected  # type: ignore[typeddict-item]
