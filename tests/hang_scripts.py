"""The hang watchdog's real jobs, shared by the local and Ray backends' DAGs.

``GLOO_HANG``: the master and worker 0 block in a gloo all-reduce that worker 1 never joins (gloo's own timeout is 10
minutes), each line before it a sign of life (importing torch may take seconds on a busy machine).
``SLOW_BUT_REPORTING``: a job that is slow but reports each step, no step slower than the limit.
``BURST_THEN_HANG``: every rank reports steps 1 to 10 (``log_progress`` and ``log_metrics``), 0.2 s apart, well within
one live record interval, then the master and worker 0 block in a gloo all-reduce that worker 1 never joins; the
master prints nothing after its last report.
``BURST_THEN_BLOCK``: the master's part of it alone, for a pod whose process the test runs (it blocks in a sleep).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

GLOO_HANG = """
import sys, time
print("importing torch", flush=True)
from datetime import timedelta
import torch
import torch.distributed as dist
from airflow_distributed import tracking

def block_in_all_reduce():
    dist.all_reduce(torch.ones(1))

def never_join():
    time.sleep(3600)

print("joining the others", flush=True)
dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
dist.barrier()
tracking.log_progress(step=1, total=10)
print(f"rank {rank}: step 1 done", flush=True)
block_in_all_reduce() if rank < 2 else never_join()
"""
SLOW_BUT_REPORTING = """
import time
from airflow_distributed import tracking

for step in range(1, 7):
    time.sleep(1.0)
    tracking.log_progress(step=step, total=6)
tracking.log_metrics(loss=0.5)
"""

_BURST = """
for step in range(1, 11):
    if step > 1:
        time.sleep(0.2)
    tracking.log_progress(step, 100)
    tracking.log_metrics(step=step, loss=1.0 / step)
"""
BURST_THEN_HANG = """
import time
from datetime import timedelta
import torch
import torch.distributed as dist
from airflow_distributed import tracking

def block_in_all_reduce():
    dist.all_reduce(torch.ones(1))

def never_join():
    time.sleep(3600)

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
dist.barrier()
""" + _BURST + """
block_in_all_reduce() if rank < 2 else never_join()
"""
BURST_THEN_BLOCK = """
import time
from airflow_distributed import tracking
""" + _BURST + """
time.sleep(3600)
"""


def last_report_named(failure: str, progress_timeout: int) -> None:
    """The ``JobHungError`` message of a ``BURST_THEN_HANG`` job names the master's last report, step 10, and times
    the silence from it: the master printed nothing after it, so its age is the silence."""
    found = re.search(rf"the master reported no progress or metric and printed no line for (\d+)s \(progress_timeout "
                      rf"{progress_timeout}s\) while every replica ran; its last step reported was (\d+), (\d+)s ago",
                      failure)
    assert found is not None, failure
    quiet, step, age = found.groups()
    assert (step, age) == ("10", quiet), failure


def gloo_hang_failure(out: str, job: Mapping[str, Any]) -> str:
    """The ``JobHungError`` of a ``GLOO_HANG`` job (``progress_timeout`` 10 s) in the task's output ``out``, checked:
    it names how long the master was quiet and its last step (1), and quotes each replica's stacks, printed by
    faulthandler on the watchdog's signal, where each one was stuck. ``job``: the ``job`` XCom."""
    failure = out[out.rindex("JobHungError: job "):]
    assert re.search(r"the master reported no progress or metric and printed no line for \d+s \(progress_timeout "
                     r"10s\) while every replica ran; its last step reported was 1, \d+s ago", failure), failure
    names = {r["role"] + "-" + str(r["index"]): r["name"] for r in job["replicas"]}
    for key, where in (("master-0", "block_in_all_reduce"), ("worker-0", "block_in_all_reduce"),
                       ("worker-1", "never_join")):
        section = failure[failure.index(f"  {names[key]}, last lines:"):]
        assert f"in {where}" in section.split(", last lines:")[1], (key, section)
    return failure


__all__ = ["BURST_THEN_BLOCK", "BURST_THEN_HANG", "GLOO_HANG", "SLOW_BUT_REPORTING", "gloo_hang_failure",
           "last_report_named"]
