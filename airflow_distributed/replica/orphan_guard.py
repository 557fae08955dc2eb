"""Stops what is left of a replica once the process that started it is gone without stopping it.

A ``backend="ray"`` replica that runs a launcher (torch's, for ``n_proc_per_node``) has processes in sessions of
their own. When its actor dies unannounced (its driver SIGKILLed: Ray kills the driver's actors, and SIGKILLs their
direct children), the launcher dies and its processes live on, orphans that would go on training. This guard is
started by the actor beside the replica, detached from it (not its child, so that Ray's killing of the actor's
children spares it): it remembers every descendant of the replica it sees, and when the actor is gone it SIGKILLs
the replica's process group and every descendant it remembers. It exits once the replica and its descendants are
gone, whichever way they went.

Run as ``python -m airflow_distributed.replica.orphan_guard ACTOR_PID REPLICA_PID``. Needs psutil only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import psutil

#: Seconds between two looks at the actor and the replica's tree.
INTERVAL = 0.5


def family(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and its descendants alive now; none once it is gone."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def guard(actor: psutil.Process, root: psutil.Process, interval: float = INTERVAL) -> bool:
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
            # One more look first: processes the launcher started since the last one (the actor may die within
            # ``interval`` of their start) are still its children while it lives.
            alive = look()
            for member in reversed(alive):  # the launcher's processes before the launcher, which would orphan them
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    member.kill()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(root.pid, signal.SIGKILL)
            return True
        time.sleep(interval)


def main(argv: list[str]) -> int:
    try:
        actor, root = psutil.Process(int(argv[0])), psutil.Process(int(argv[1]))
    except psutil.NoSuchProcess:
        return 0
    guard(actor, root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
