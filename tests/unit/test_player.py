"""``Player``, the thread the kubelet and the stand-in controllers play their scripts in: a failing script fails
the test at ``check()`` with its traceback, and ``prepare()`` runs before the script."""

from __future__ import annotations

import threading

import pytest

from tests.kubernetes_helpers import Player


class Prepared(Player):
    def __init__(self) -> None:
        super().__init__()
        self.steps: list[str] = []

    def prepare(self) -> None:
        self.steps.append("prepare")


def test_a_script_that_raises_fails_check_with_its_traceback():
    def script(player: Player) -> None:
        raise RuntimeError("the pod never started")

    player = Player().play(script)
    with pytest.raises(AssertionError) as failure:
        player.check()
    assert "RuntimeError: the pod never started" in str(failure.value)
    assert "Traceback (most recent call last)" in str(failure.value)


def test_a_script_runs_after_prepare_in_a_thread_of_its_own_and_check_waits_for_it():
    player = Prepared()
    assert player.play(lambda p: p.steps.append(threading.current_thread().name)) is player
    player.check()
    assert player.steps == ["prepare", "player"] and player.errors == []


def test_a_failing_prepare_fails_check_and_the_script_does_not_run():
    class Unprepared(Prepared):
        def prepare(self) -> None:
            raise TimeoutError("no pods after 60 s")

    player = Unprepared()
    player.play(lambda p: p.steps.append("script"))
    with pytest.raises(AssertionError, match="TimeoutError: no pods after 60 s"):
        player.check()
    assert player.steps == []
