"""A scheduled retraining pipeline: prepare data -> distributed training -> evaluate -> promote only if better.

``prepare_data`` writes the week's data set; ``train`` runs PyTorch DDP on it (master + 2 workers);
``evaluate`` reads the master's metrics from XCom; ``choose`` compares the candidate with the model in
production (a small JSON registry beside the models) and branches to ``promote`` or ``keep_current``.

With ``--conf '{"mlflow_conn_id": "mlflow_default"}'`` (an Airflow connection of an MLflow tracking server), each
training job is also one MLflow run, its model a new version of the registered model ``example-retraining``
(docs/mlflow.md writes the promotion itself against MLflow's registry).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, task

from airflow_distributed.operators import DistributedTrainingOperator

# The training scripts sit beside the DAG; resolve() follows the link when the DAGs folder holds one.
TRAINING_DIR = Path(__file__).resolve().parent / "training"


def _root() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow") / "distributed"


def _registry() -> Path:
    return _root() / "production" / "example_retraining_pipeline.json"


with DAG(
    dag_id="example_retraining_pipeline",
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 60, "samples": 768, "mlflow_conn_id": ""},
    tags=["example", "distributed", "pytorch", "pipeline"],
) as dag:

    @task
    def prepare_data(params: dict | None = None, ds: str | None = None) -> str:
        """The week's training data (synthetic here; a real pipeline would extract and clean it)."""
        import torch

        generator = torch.Generator().manual_seed(int(ds.replace("-", "")) % 2**31)
        x = torch.randn(int(params["samples"]), 8, generator=generator)
        y = x @ torch.linspace(-1.0, 1.0, 8).reshape(8, 1) + 0.1 * torch.randn(x.shape[0], 1, generator=generator)
        path = _root() / "data" / ds / "train.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"x": x, "y": y}, path)
        return str(path)

    data = prepare_data()
    train = DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 2}},
        command=["python", str(TRAINING_DIR / "pytorch_ddp.py")],
        args=["--data", "{{ ti.xcom_pull(task_ids='prepare_data') }}", "--steps", "{{ params.steps }}"],
        # Empty by default: nothing is sent to MLflow.
        mlflow_conn_id="{{ params.mlflow_conn_id }}",
        mlflow_params=["steps", "samples"],
        register_model="example-retraining",
    )
    data >> train

    @task
    def evaluate(metrics: dict, model_path: str) -> dict:
        if not Path(model_path).is_file():
            raise FileNotFoundError(model_path)
        return {"loss": metrics["final_loss"], "model_path": model_path}

    @task.branch
    def choose(candidate: dict) -> str:
        registry = _registry()
        current = json.loads(registry.read_text()) if registry.exists() else None
        if current is None or candidate["loss"] < current["loss"]:
            print(f"candidate loss {candidate['loss']:.4f} beats {current and current['loss']}: promoting")
            return "promote"
        print(f"candidate loss {candidate['loss']:.4f} does not beat {current['loss']:.4f}: keeping the current model")
        return "keep_current"

    @task
    def promote(candidate: dict) -> str:
        target = _registry().parent / "example_retraining_pipeline.pt"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(candidate["model_path"], target)
        _registry().write_text(json.dumps({"loss": candidate["loss"], "model_path": str(target),
                                           "source": candidate["model_path"]}))
        return str(target)

    candidate = evaluate(train.output["metrics"], train.output["model_path"])
    choose(candidate) >> [promote(candidate), EmptyOperator(task_id="keep_current")]
