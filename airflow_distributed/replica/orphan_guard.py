"""Stops what is left of a replica once the process that started it is gone without stopping it.

A ``backend="ray"`` replica that runs a launcher (torch's, for ``n_proc_per_node``) has processes in sessions of
their own. When its actor dies unannounced (its driver SIGKILLed: Ray kills the driver's actors, and an actor's core
worker SIGKILLs its direct children as it exits), the launcher dies and its processes live on, orphans that would go
on training. This guard is started by the actor beside the replica, detached from it (not its child, so that Ray's
killing of the actor's children spares it). While the actor lives it remembers every descendant of the replica it
sees; once the actor is gone it SIGKILLs those, the replica's process group, and every process whose environment
carries the replica's mark (``MARK_VARIABLE``, which the actor gives the replica's command and every process it
starts inherits). The mark is what makes the sweep whole: a process the launcher started after the guard's last look
at the tree is no longer in it once the launcher is killed (reparented away, it shows no link to the replica), and
the actor may die within the same ``INTERVAL``. The guard exits once the replica's tree is gone, whichever way it
went.

Run as ``python -m airflow_distributed.replica.orphan_guard ACTOR_PID REPLICA_PID MARK``. Needs psutil only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable

import psutil

#: Seconds between two looks at the actor and the replica's tree.
INTERVAL = 0.5
#: The variable whose value (one per replica start, ``new_mark``) every process of the replica carries.
MARK_VARIABLE = "AIRFLOW_DISTRIBUTED_REPLICA_MARK"
#: Seconds the sweep goes on while it still finds marked processes (one forked as the previous pass killed).
SWEEP_TIME = 5.0


def new_mark() -> str:
    """A value of ``MARK_VARIABLE`` that no other replica's processes carry."""
    return os.urandom(16).hex()


def family(root: psutil.Process | None) -> list[psutil.Process]:
    """``root`` and its descendants alive now; none once it is gone."""
    if root is None:
        return []
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def marked(mark: str) -> list[psutil.Process]:
    """The processes of this machine whose environment carries ``mark`` (as they were started: a process cannot
    change what its own ``/proc/PID/environ`` says), zombies left out."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):  # gone, a zombie, or another user's
            if proc.environ().get(MARK_VARIABLE) == mark:
                found.append(proc)
    return found


def kill(processes: Iterable[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            process.kill()


def sweep(mark: str, seen: list[psutil.Process], root: psutil.Process | None, sweep_time: float = SWEEP_TIME) -> None:
    """SIGKILL ``seen`` (the launcher's processes before the launcher, which would orphan them), ``root``'s process
    group and every process carrying ``mark``, until none of them is found again or ``sweep_time`` has passed."""
    kill(reversed([member for member in seen if member.is_running()]))
    if root is not None and root.is_running():  # a zombie too: it still holds its group's id, no other group has it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(root.pid, signal.SIGKILL)
    deadline = time.monotonic() + sweep_time
    while (left := marked(mark)) and time.monotonic() < deadline:
        kill(left)
        psutil.wait_procs(left, timeout=0.2)


def guard(actor: psutil.Process, root: psutil.Process | None, mark: str, interval: float = INTERVAL) -> bool:
    """Watch until the replica's tree is gone (``False``) or ``actor`` is (``True``, what was left killed)."""
    # Every process ever seen in the tree, not the last look only: once the launcher is a zombie (SIGKILLed, not yet
    # reaped) its tree shows it alone, its processes already reparented away.
    known: dict[int, psutil.Process] = {}

    def look() -> list[psutil.Process]:
        known.update((member.pid, member) for member in family(root)
                     if member.pid not in known or not known[member.pid].is_running())
        return [member for member in known.values() if member.is_running()]

    while True:
        alive = look()
        if not alive:
            return False
        if not actor.is_running():
            # One more look first: processes the launcher started since the last one are still its children while it
            # lives; those it started before it was killed are found by their mark.
            sweep(mark, look(), root)
            return True
        time.sleep(interval)


def _process(pid: str) -> psutil.Process | None:
    try:
        return psutil.Process(int(pid))
    except psutil.NoSuchProcess:
        return None


def main(argv: list[str]) -> int:
    actor, root, mark = _process(argv[0]), _process(argv[1]), argv[2]
    if actor is None:  # gone before this guard could watch it: whatever of the replica it started is left
        sweep(mark, family(root), root)
    else:
        guard(actor, root, mark)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
