"""Fixtures shared by the unit tests: this process as a job's master replica for ``tracking``.

``tracking`` keeps what a process recorded in module state (the document, the pace of its writes and records);
``tracking._new_process`` is its one reset, called before and after each test that uses ``master``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_distributed import contract, tracking

#: Launchers' rank variables (``replica.info``): one set to a non-zero rank makes this process not the master.
LAUNCHER_VARIABLES = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class Master:
    #: ``AIRFLOW_DISTRIBUTED_OUTPUT``: where the output document is written
    output: Path
    #: ``AIRFLOW_DISTRIBUTED_CHECKPOINT_DIR`` (not made until a checkpoint is saved)
    checkpoints: Path


@pytest.fixture
def master(tmp_path, monkeypatch) -> Iterator[Master]:
    """This process as the master replica (``master-0``) of a job with an output document and a checkpoint folder,
    ``tracking`` as a new process finds it."""
    found = Master(output=tmp_path / "output.json", checkpoints=tmp_path / "ckpt")
    monkeypatch.setenv(contract.ENV_OUTPUT, str(found.output))
    monkeypatch.setenv(contract.ENV_CHECKPOINT_DIR, str(found.checkpoints))
    monkeypatch.setenv(contract.ENV_ROLE, "master")
    monkeypatch.setenv(contract.ENV_INDEX, "0")
    for variable in LAUNCHER_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    tracking._new_process()
    yield found
    tracking._new_process()


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """``tracking``'s monotonic clock, at ``clock[0]`` (100 s to start with): the test moves it."""
    now = [100.0]
    monkeypatch.setattr(tracking.time, "monotonic", lambda: now[0])
    return now


class _Timer:
    """``threading.Timer`` as the tests see it: noted (``timers``), fired by the test, not by time."""

    def __init__(self, noted: list, wait: float, call) -> None:
        noted.append((wait, call))

    def start(self) -> None:
        pass


@pytest.fixture
def timers(monkeypatch) -> list:
    """The timers ``tracking`` started, ``(wait, call)``; none is left to fire in another test."""
    noted: list = []
    monkeypatch.setattr(tracking.threading, "Timer", lambda wait, call: _Timer(noted, wait, call))
    return noted
