"""The XGBoost variables as XGBoost itself reads them: a real tracker and workers joined with each replica's env.

More than ten replicas, so that task ids of two digits are compared with those of one: the tracker orders
workers by task id as strings, and the ranks it gives must still be the contract's ``RANK``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_distributed.hooks.local import LocalProcessHook
from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec

pytest.importorskip("xgboost", reason="xgboost-cpu is part of the test extra")

# What each replica runs: the master starts the tracker first; every replica joins and prints XGBoost's view.
JOIN = """
import json, os
from xgboost import collective
from xgboost.tracker import RabitTracker
env = os.environ
tracker = None
if env["AIRFLOW_DISTRIBUTED_ROLE"] == "master":
    tracker = RabitTracker(host_ip=env["DMLC_TRACKER_URI"], n_workers=int(env["DMLC_NUM_WORKER"]),
                           port=int(env["DMLC_TRACKER_PORT"]), sortby="task", timeout=120)
    tracker.start()
with collective.CommunicatorContext(dmlc_tracker_uri=env["DMLC_TRACKER_URI"], dmlc_task_id=env["DMLC_TASK_ID"],
                                    dmlc_tracker_port=int(env["DMLC_TRACKER_PORT"]), dmlc_retry=10, dmlc_timeout=120):
    print(json.dumps([collective.get_rank(), collective.get_world_size()]), flush=True)
if tracker is not None:
    tracker.wait_for(120)
"""


def test_every_replica_gets_the_contract_rank_and_world_size_from_xgboost():
    n_workers = 10
    spec = load_spec("xgboost", {"xgboost": {"n_workers": n_workers}})
    ports = LocalProcessHook.free_ports(n_workers + 1)
    plan = build_plan(spec, "job", LocalAddressing(ports=ports), Layout("/m", "/o", "/f"), ["x"],
                      backend="local", launch=LOCAL_LAUNCH)
    base = {key: value for key, value in os.environ.items() if not key.startswith(("DMLC_", "AIRFLOW_DISTRIBUTED_"))}
    procs = [
        subprocess.Popen([sys.executable, "-c", JOIN], env={**base, **replica.env, "OMP_NUM_THREADS": "1"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for replica in plan.replicas
    ]
    try:
        outputs = [proc.communicate(timeout=240) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    seen = {}
    for replica, proc, (out, err) in zip(plan.replicas, procs, outputs):
        assert proc.returncode == 0, (replica.name, err[-2000:])
        seen[replica.name] = tuple(json.loads(out.strip().splitlines()[-1]))
    assert seen == {r.name: (int(r.env["RANK"]), int(r.env["WORLD_SIZE"])) for r in plan.replicas}
