"""The XGBoost example DAG, end to end: a tracker on the master, three real workers all-reducing histograms."""

from __future__ import annotations

import pytest

from tests.helpers import assert_master_and_two_workers_exchanged, run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_xgboost_example_trains_one_booster_over_three_workers_and_reports_through_xcom(capfd):
    xgboost = pytest.importorskip("xgboost", reason="xgboost-cpu is part of the test extra")
    run, states = run_dag("example_xgboost_dist", conf={"rounds": 12})

    assert states == {"train": "success", "report": "success"}
    # XGBoost's own view of each replica once joined: rank (master 0, worker i -> i + 1) and world size.
    metrics = assert_master_and_two_workers_exchanged(run, "xgboost", lambda rank: [
        f"worker {rank}/3: task {rank}", f"worker {rank}: all-reduce sum of ranks + 1 is 6.0"], capfd.readouterr().out)
    # 1 + 2 + 3: every worker took part in the all-reduce.
    assert (metrics["allreduce_sum"], metrics["allreduce_expected"]) == (6.0, 6.0)
    assert metrics["boosters_identical"] is True
    assert metrics["final_rmse"] < metrics["initial_rmse"] and metrics["final_loss"] < metrics["initial_loss"]
    model_path = xcom(run, "train", "model_path")
    assert model_path.endswith("model.ubj")
    booster = xgboost.Booster(model_file=model_path)
    assert booster.num_boosted_rounds() == 12 == xcom(run, "report")["rounds"]
