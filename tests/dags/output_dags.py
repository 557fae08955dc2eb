"""DAGs about what the master reports (local backend): metrics and no model path, nothing, a document that is not
strict JSON, and one that is not JSON at all."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
# Reports through the tracking API, as training code does, and never calls log_model.
METRICS_ONLY = "from airflow_distributed import tracking; tracking.log_metrics(loss=0.5, accuracy=0.9)"
NOTHING = "print('trained, reported nothing')"
#: Written by hand, as the contract allows: NaN and infinities, 1e999, a progress percent as a string, a metric
#: nested five levels deep, a history point that is not an object. The master then waits past the live record's
#: interval, so the running job's record is published from this document too.
BAD_DOCUMENT = (
    '{"metrics": {"loss": NaN, "accuracy": 0.9, "best": Infinity, "huge": 1e999,'
    ' "nested": {"a": {"b": {"c": {"d": {"e": NaN, "f": 1.5}}}}}},'
    ' "model_path": "/models/bad-report",'
    ' "history": [{"step": 1, "loss": NaN}, "garbage", {"step": 2, "loss": -Infinity}, {"step": 3, "loss": 0.5}],'
    ' "progress": {"step": 5, "total": 10, "percent": "10", "eta_seconds": 1e999}}'
)
# Only the master is given AIRFLOW_DISTRIBUTED_OUTPUT.
BAD_REPORT = (
    "import os, time; path = os.environ.get('AIRFLOW_DISTRIBUTED_OUTPUT');"
    " path and open(path, 'w').write(" + repr(BAD_DOCUMENT) + "); time.sleep(3)"
)
NOT_JSON = ("import os; path = os.environ.get('AIRFLOW_DISTRIBUTED_OUTPUT');"
            " path and open(path, 'wb').write(b'\\x00\\xff{metrics: garbage')")


def _dag(dag_id: str, code: str, **operator_args) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        train = DistributedTrainingOperator(
            task_id="train", framework="pytorch", environment={"pytorch": {"n_workers": 1}},
            command=["python", "-c", code], settle_period=0.5, **operator_args,
        )

        @task
        def evaluate(metrics: dict, model_path: str | None) -> dict:
            return {"metrics": metrics, "model_path": model_path}

        evaluate(train.output["metrics"], train.output["model_path"])
    return dag


metrics_only = _dag("local_metrics_only", METRICS_ONLY)
no_output = _dag("local_no_output", NOTHING)
bad_report = _dag("local_bad_report", BAD_REPORT, model_asset="file:///models/{dag_id}/{task_id}",
                  retries=1, retry_delay=timedelta(0))
not_json = _dag("local_not_json_report", NOT_JSON)
