"""Distributed XGBoost on the local backend: the master runs the tracker, it and two workers train one booster.

Every replica joins XGBoost's collective from the contract's ``DMLC_TRACKER_URI``/``DMLC_TRACKER_PORT`` and
``DMLC_TASK_ID``; gradient histograms are all-reduced every round, so the three train one booster on their three
shards. The master saves ``model.ubj`` and reports the evaluation metric (rmse); a downstream task loads the
booster. Needs the ``xgboost`` extra (``pip install airflow-distributed[xgboost]``); without it the DAG still parses.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"

with DAG(
    dag_id="example_xgboost_dist",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"rounds": 20},
    tags=["example", "distributed", "xgboost"],
) as dag:
    train = DistributedTrainingOperator(
        task_id="train",
        framework="xgboost",
        environment={
            "resources": {"cpu": {"requests": 1, "limits": 1}},
            "xgboost": {"n_workers": 2, "default_worker": {"resources": {"cpu": {"requests": 1, "limits": 1}}}},
        },
        command=["python", str(TRAINING_DIR / "xgboost_dist.py"), "--steps", "{{ params.rounds }}"],
    )

    @task
    def report(metrics: dict, model_path: str) -> dict:
        """What an evaluation step sees: the evaluation metric and a booster it can load."""
        import xgboost

        booster = xgboost.Booster(model_file=model_path)
        print(f"metrics: {metrics}; booster of {booster.num_boosted_rounds()} rounds at {model_path}")
        return {"final_rmse": metrics["final_rmse"], "rounds": booster.num_boosted_rounds()}

    report(train.output["metrics"], train.output["model_path"])
