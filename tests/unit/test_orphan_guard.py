"""The orphan guard of a Ray replica that runs a launcher (``replica/orphan_guard.py``), with real processes.

A stand-in for the actor starts a stand-in for torch's launcher (in a session of its own, with the replica's mark in
its environment, as the actor does), which starts two processes in sessions of their own, as torch's does. The actor
and the launcher are then SIGKILLed, as Ray's killing of an actor whose driver died does (the core worker SIGKILLs its
children as it exits): the launcher's processes are orphans, reparented away from the replica's tree, and only the
guard can stop them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from airflow_distributed.replica import orphan_guard
from tests.helpers import wait_until

# The launcher's stand-in: once GO exists, two processes in sessions of their own (they inherit its environment,
# the mark with it), their pids written to PIDS; then it waits to be killed.
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    go, pids = sys.argv[1:3]
    while not os.path.exists(go):
        time.sleep(0.02)
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
                for _ in range(2)]
    with open(pids + ".tmp", "w") as handle:
        handle.write(" ".join(str(child.pid) for child in children))
    os.replace(pids + ".tmp", pids)
    time.sleep(600)
""")
# The actor's stand-in: the launcher with the replica's mark, as ``ReplicaActor.start`` starts it; its pid printed.
ACTOR = textwrap.dedent("""
    import os, subprocess, sys, time
    name, value, *rest = sys.argv[1:]
    launcher = subprocess.Popen([sys.executable, "-c", *rest], env={**os.environ, name: value},
                                start_new_session=True)
    print(launcher.pid, flush=True)
    time.sleep(600)
""")


class Replica:
    """The stand-ins, started: ``actor`` (a child of this test), ``launcher``'s pid, and once ``go`` is called,
    the launcher's ``children``."""

    def __init__(self, folder: Path) -> None:
        self.mark = os.urandom(16).hex()
        self.go_file, self.pids_file = folder / "go", folder / "pids"
        self.actor = subprocess.Popen(
            [sys.executable, "-c", ACTOR, orphan_guard.MARK_VARIABLE, self.mark, LAUNCHER, str(self.go_file),
             str(self.pids_file)], stdout=subprocess.PIPE, text=True)
        assert self.actor.stdout is not None
        self.launcher = int(self.actor.stdout.readline())
        self.children: list[psutil.Process] = []

    def go(self) -> None:
        """The launcher starts its two processes; they are running on return."""
        self.go_file.touch()
        wait_until(self.pids_file.exists, timeout=30)
        self.children = [psutil.Process(int(pid)) for pid in self.pids_file.read_text().split()]

    def kill_actor(self) -> None:
        """What Ray does to an actor whose driver died: its children SIGKILLed, then the actor; Ray reaps it."""
        os.kill(self.launcher, signal.SIGKILL)
        self.actor.kill()
        self.actor.wait(timeout=10)

    def guard_argv(self) -> list[str]:
        return [str(self.actor.pid), str(self.launcher), self.mark]

    def left(self) -> list[psutil.Process]:
        """The launcher's processes still running (a zombie has ended)."""
        left = []
        for child in self.children:
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    left.append(child)
            except psutil.NoSuchProcess:
                continue
        return left

    def clean_up(self) -> None:
        for pid in [self.launcher, *(child.pid for child in self.left())]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.actor.poll() is None:
            self.actor.kill()
            self.actor.wait(timeout=10)


@pytest.fixture
def replica(tmp_path) -> Iterator[Replica]:
    started = Replica(tmp_path)
    try:
        yield started
    finally:
        started.clean_up()


def test_processes_the_launcher_started_since_the_guards_last_look_are_killed_once_the_actor_is_gone(
        replica, monkeypatch):
    # The guard's looks at the replica's tree are held in step with the test: its first look sees the launcher
    # alone; its next is let through only once the launcher and the actor were killed, so it never sees the
    # launcher's processes in the tree (the race of a driver SIGKILLed just after they started).
    first_look, killed = threading.Event(), threading.Event()
    looks = 0
    real_family = orphan_guard.family

    def family_in_step(root):
        nonlocal looks
        looks += 1
        if looks == 2:
            killed.wait(timeout=30)
        found = real_family(root)
        first_look.set()
        return found

    monkeypatch.setattr(orphan_guard, "family", family_in_step)
    guard = threading.Thread(target=orphan_guard.main, args=(replica.guard_argv(),), daemon=True)
    guard.start()
    assert first_look.wait(timeout=30)
    replica.go()
    replica.kill_actor()
    killed.set()
    guard.join(timeout=30)

    assert not guard.is_alive()
    assert replica.children and not replica.left(), [child.cmdline() for child in replica.left()]


def test_a_guard_started_after_its_actor_died_kills_what_the_actor_started(replica):
    replica.go()
    replica.kill_actor()

    assert orphan_guard.main(replica.guard_argv()) == 0
    wait_until(lambda: not replica.left(), timeout=10)
