"""The hang watchdog's real jobs, shared by the local and Ray backends' DAGs.

``GLOO_HANG``: the master and worker 0 block in a gloo all-reduce that worker 1 never joins (gloo's own timeout is 10
minutes), each line before it a sign of life (importing torch may take seconds on a busy machine).
``SLOW_BUT_REPORTING``: a job that is slow but reports each step, no step slower than the limit.
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


__all__ = ["GLOO_HANG", "SLOW_BUT_REPORTING", "gloo_hang_failure"]
