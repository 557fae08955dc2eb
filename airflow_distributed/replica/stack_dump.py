"""A replica's Python stacks printed on a signal, for the hang watchdog (standard library only)."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

from airflow_distributed.contract import ENV_STACKS_DIR, ENV_STACKS_SIGNAL


def register_stack_dump() -> None:
    """Print every thread's stack to stderr on the signal ``AIRFLOW_DISTRIBUTED_STACKS_SIGNAL`` names: the backend
    sends it to the replicas of a job it found hung, and their last lines show where each was stuck."""
    name = os.environ.get(ENV_STACKS_SIGNAL)
    if not name:
        return
    number = getattr(signal, name, None)
    if not isinstance(number, int) or not name.startswith("SIG"):
        return
    try:
        faulthandler.register(number, file=sys.stderr, all_threads=True)
    except (AttributeError, OSError, RuntimeError, ValueError):  # no such signal here, or no real stderr
        return
    folder = os.environ.get(ENV_STACKS_DIR)
    if folder:
        try:
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, str(os.getpid())), "w").close()
        except OSError:  # a read-only /tmp: the stacks are not obtainable, the job runs all the same
            pass


__all__ = ["register_stack_dump"]
