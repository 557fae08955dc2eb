"""``AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR`` served by a real ``tensorboard`` (``.venvs/tensorboard``, built by
``scripts/framework-venv.sh tensorboard``): a local job's replicas write their events there with TensorBoard's own
writer, on both tries of the task, and TensorBoard lists every replica's run of both, read over its HTTP API."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT
from tests.dags.tensorboard_dags import STEPS, TENSORBOARD_PYTHON
from tests.helpers import run_dag, stop_group, wait_until, xcom

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]  # the environment's build, two tries


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_tensorboard_lists_the_runs_every_try_of_a_job_wrote(tmp_path):
    subprocess.run(["bash", str(ROOT / "scripts" / "framework-venv.sh"), "tensorboard"], check=True,
                   capture_output=True)
    run, states = run_dag("test_tensorboard_events")
    assert states == {"train": "success"}
    assert xcom(run, "train", "job")["usage"]["tries"] == 2
    folder = Path(os.environ["AIRFLOW_HOME"], "distributed", "tensorboard", run.dag_id, xcom(run, "train", "job_name"))

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with open(tmp_path / "tensorboard.log", "wb") as log:
        server = subprocess.Popen(
            [str(Path(TENSORBOARD_PYTHON).with_name("tensorboard")), "--logdir", str(folder), "--host", "127.0.0.1",
             "--port", str(port), "--load_fast", "false", "--reload_interval", "1"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    expected = ["try-1/master-0", "try-1/worker-0", "try-2/master-0", "try-2/worker-0"]

    def runs() -> list[str]:
        assert server.poll() is None, (tmp_path / "tensorboard.log").read_text()[-3000:]
        try:
            return sorted(requests.get(f"{base}/data/runs", timeout=5).json())
        except (requests.RequestException, ValueError):
            return []

    try:
        wait_until(lambda: runs() == expected, timeout=90, interval=0.5)
        answer = requests.get(f"{base}/data/plugin/scalars/scalars", params={"run": "try-2/master-0", "tag": "loss"},
                              timeout=5)
        answer.raise_for_status()
        assert [(step, value) for _, step, value in answer.json()] == [
            (step, pytest.approx(1 / (step + 2))) for step in range(1, STEPS + 1)]
    finally:
        stop_group(server, grace=10)
