"""Several processes per replica on the local backend: a real DAG run of the DDP example on 2 replicas of 3
processes each, over gloo. Every process gets its global and local ranks from torch's launcher and its node rank
from the plan; only global rank 0 reports."""

from __future__ import annotations

import re

import pytest

from tests.helpers import run_dag, xcom
from tests.process_variables import ranks_expected, ranks_seen

# 8 Python processes importing torch (2 launchers, 6 ranks): about a minute on 2 cores.
pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.slow]


def test_two_replicas_of_three_processes_train_one_ddp_model_and_are_counted_as_three_processes_each(capfd):
    from airflow_distributed.plugins.job_state import TaskInstanceRef
    from airflow_distributed.plugins.page import job_page

    run, states = run_dag("local_nproc_ddp")

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    assert ranks_seen(out) == ranks_expected(2, 3), out[-6000:]
    result = xcom(run, "train")
    # The script fails unless all 6 ranks ended with the same parameters; rank 0 alone reports, having compared them.
    assert "parameters identical on all ranks" in out
    assert result["metrics"]["world_size"] == 6
    assert result["metrics"]["final_loss"] < result["metrics"]["initial_loss"]
    assert [r["state"] for r in result["replicas"]] == ["succeeded", "succeeded"]
    # The task log's table: a column of each replica's processes; none of GPUs, which no replica asked for.
    assert re.search(r"REPLICA +ROLE +INDEX +STATE +WHERE +PROCESSES +RESTARTS +EXIT\n", out), out[-6000:]
    assert re.search(r"-master-0 +master +0 +succeeded +pid \d+ +3 +0 +0\b", out), out[-6000:]
    assert re.search(r"-worker-0 +worker +0 +succeeded +pid \d+ +3 +0 +0\b", out), out[-6000:]
    record = xcom(run, "train", key="job")
    assert [(r["processes"], "gpus" in r) for r in record["replicas"]] == [(3, False), (3, False)]
    usage = record["usage"]
    assert [row["processes"] for row in usage["replicas"].values()] == [3, 3]
    # every process of a replica counts: 3 process-seconds per second a replica ran
    assert usage["process_seconds"] == pytest.approx(3 * usage["running_seconds"], abs=0.01)
    assert usage["running_seconds"] > 0
    page = job_page(record, TaskInstanceRef(dag_id=run.dag_id, run_id=run.run_id, task_id="train"),
                    source="recorded", show_logs=False, json_href="/x")
    assert "world size 6: 2 replicas \u00d7 3 processes" in page
    assert page.count('<td class="num processes">3</td>') == 2


def test_a_hung_replica_of_several_processes_prints_the_stacks_of_each(capfd):
    _, states = run_dag("local_nproc_hung")

    out = capfd.readouterr().out
    assert states == {"train": "failed"}, out[-6000:]
    assert "JobHungError: " in out, out[-6000:]
    # The replica's lines as the task log printed them live, one per line of its processes' output: faulthandler's
    # stack of each rank's main thread names the function it is blocked in.
    live = [line for line in out.splitlines() if re.search(r"\] \[train-[0-9a-f]+-master-0\] ", line)]
    assert sum("in block_in_all_reduce" in line for line in live) == 2, "\n".join(live[-60:])
    assert sum("in never_join" in line for line in live) == 1, "\n".join(live[-60:])
