"""Paddle's parameter-server variables as Paddle itself reads them: Fleet's ``PaddleCloudRoleMaker``, every replica.

Run in each Paddle environment (``make paddle``, ``make paddle-ps``), one child process per replica with exactly
that replica's variables, as the TensorFlow test does with ``TFConfigClusterResolver``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec
from tests.conftest import ROOT

# Both Paddle environments: 3.3 (collective mode's) and 2.6 (the one whose CPU wheel runs parameter-server mode).
PADDLE_PYTHONS = {
    "paddle": Path(os.environ.get("AIRFLOW_DISTRIBUTED_PADDLE_PYTHON", ROOT / ".venvs" / "paddle" / "bin" / "python")),
    "paddle-ps": Path(os.environ.get("AIRFLOW_DISTRIBUTED_PADDLE_PS_PYTHON",
                                     ROOT / ".venvs" / "paddle-ps" / "bin" / "python")),
}

# What the role maker makes of the environment it is given (private methods: the public ones need fleet.init).
READ_ROLE = """
import json
from paddle.distributed.fleet import PaddleCloudRoleMaker
role = PaddleCloudRoleMaker(is_collective=False)
role._generate_role()
print(json.dumps({"server": role._is_server(), "worker": role._is_worker(), "id": role._role_id(),
                  "first_worker": role._is_first_worker(), "trainers": role._worker_num(),
                  "pservers": role._get_pserver_endpoints(), "trainer_endpoints": role._get_trainer_endpoints()}))
"""


def _read_role(python: Path, env: dict[str, str]) -> dict:
    child = {"PATH": os.environ.get("PATH", ""), "GLOG_minloglevel": "2", **env}
    out = subprocess.run([str(python), "-c", READ_ROLE], env=child, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("environment", list(PADDLE_PYTHONS))
def test_every_replica_of_a_ps_job_is_what_paddles_role_maker_reads(environment):
    python = PADDLE_PYTHONS[environment]
    if not python.exists():
        pytest.skip(f"no {environment} environment: run `make {environment}`")
    spec = load_spec("paddle", {"paddle": {"n_workers": 2, "n_ps": 2}})
    plan = build_plan(spec, "job", LocalAddressing(ports=range(33000, 33005)), Layout("/m", "/o", "/f"), ["x"],
                      backend="local", launch=LOCAL_LAUNCH)
    pservers = ["127.0.0.1:33001", "127.0.0.1:33002"]
    trainers = ["127.0.0.1:33000", "127.0.0.1:33003", "127.0.0.1:33004"]
    seen = {}
    for replica in plan.replicas:
        seen[replica.name] = _read_role(python, dict(replica.env))
    assert seen == {
        "job-master-0": {"server": False, "worker": True, "id": 0, "first_worker": True, "trainers": 3,
                         "pservers": pservers, "trainer_endpoints": trainers},
        "job-pserver-0": {"server": True, "worker": False, "id": 0, "first_worker": False, "trainers": 3,
                          "pservers": pservers, "trainer_endpoints": trainers},
        "job-pserver-1": {"server": True, "worker": False, "id": 1, "first_worker": False, "trainers": 3,
                          "pservers": pservers, "trainer_endpoints": trainers},
        "job-worker-0": {"server": False, "worker": True, "id": 1, "first_worker": False, "trainers": 3,
                         "pservers": pservers, "trainer_endpoints": trainers},
        "job-worker-1": {"server": False, "worker": True, "id": 2, "first_worker": False, "trainers": 3,
                         "pservers": pservers, "trainer_endpoints": trainers},
    }
