"""``LocalJob.stop``: every replica's exit is read as it happened, never as a success it was not.

A replica's process is this task's child: it is reaped by the thread that watches it, and by nothing else. A second
waiter that reaped it first (psutil's, while waiting out the stop's grace) left ``subprocess`` an exit code of 0
for it, and a stopped job read as one whose master succeeded."""

from __future__ import annotations

import os
import sys
import time

from airflow_distributed.hooks.local import LocalProcessHook
from airflow_distributed.manifests.local import ProcessSpec

#: Exits 7 at SIGTERM, once it can (its handler installed before it says ``up``).
AT_SIGTERM_EXIT_7 = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
                     "print('up', flush=True)\nwhile True:\n    time.sleep(0.05)\n")


def test_replicas_stopped_by_sigterm_keep_the_exit_codes_they_chose(tmp_path):
    # Several rounds of eight: the reap race was lost by about one replica in six.
    seen = []
    for _ in range(3):
        specs = [ProcessSpec(f"job-worker-{i}", "worker", i, i == 0, (sys.executable, "-c", AT_SIGTERM_EXIT_7),
                             dict(os.environ)) for i in range(8)]
        job = LocalProcessHook().start(specs, cwd=str(tmp_path))
        deadline = time.monotonic() + 60
        while not all("up" in replica.tail for replica in job.replicas) and time.monotonic() < deadline:
            time.sleep(0.02)
        job.stop(10.0)
        seen += [(status.state, status.exit_code) for status in job.statuses()]
    assert seen == [("stopped", 7)] * 24
