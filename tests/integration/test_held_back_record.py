"""The live record a master's ``tracking`` holds back reaches its log while the master blocks in a collective: real
gloo ranks (``BURST_THEN_HANG``: steps 1 to 10 within one record interval, then the master and worker 0 block in
an all-reduce that worker 1 never joins), the master's stdout read as a pod's log would get it. The last record,
printed at the end of its interval (1 s here) by tracking's timer thread while the main thread waits in gloo, is
the last report: step 10."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time

from airflow_distributed.contract import ENV_OUTPUT, ENV_RECORD_INTERVAL
from airflow_distributed.replica.live_report import PREFIX
from tests.conftest import ROOT
from tests.hang_scripts import BURST_THEN_HANG

#: The most the test waits for the master's record of step 10 (a limit, not a measure: it comes about 2 s after
#: the burst, once torch is imported).
PATIENCE = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_record_held_back_when_the_master_blocks_in_an_all_reduce_reaches_its_log(tmp_path) -> None:
    port = _free_port()
    ranks = []
    for rank in range(3):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "RANK": str(rank), "WORLD_SIZE": "3", ENV_RECORD_INTERVAL: "1"}
        if rank == 0:
            env[ENV_OUTPUT] = str(tmp_path / "output.json")
        ranks.append(subprocess.Popen([sys.executable, "-c", BURST_THEN_HANG], cwd=ROOT, env=env, text=True,
                                      stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in ranks[0].stdout or ()], daemon=True).start()
    records: list[dict] = []
    try:
        deadline = time.monotonic() + PATIENCE
        while not records or (records[-1].get("progress") or {}).get("step") != 10:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line.startswith(PREFIX):
                records.append(json.loads(line[len(PREFIX):]))
        alive = [process.poll() is None for process in ranks]
    except queue.Empty:
        alive = []
    finally:
        for process in ranks:
            process.kill()
            process.wait()

    steps = [(record["progress"]["step"], (record["history"] or [{}])[-1].get("step")) for record in records]
    assert steps and steps[-1] == (10, 10), steps
    # Printed while every rank still ran: the master blocked in the all-reduce, worker 1 never joining it.
    assert alive == [True, True, True]
    assert records[-1]["reported_at"] > records[0]["reported_at"]
