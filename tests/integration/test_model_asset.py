"""The model as an Asset with lineage: a training DAG's event schedules a deploy DAG that reads its extra."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import select

from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.spec.errors import SpecValidationError
from tests.conftest import ROOT
from tests.helpers import run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def _events(uri_prefix: str) -> list:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri, AssetEvent.extra).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri.startswith(uri_prefix)).order_by(AssetEvent.id)
        ).all()
        return [(uri, extra) for uri, extra in rows]


def _queued_for(dag_id: str) -> int:
    from airflow.models.asset import AssetDagRunQueue
    from airflow.utils.session import create_session

    with create_session() as session:
        return len(session.execute(select(AssetDagRunQueue).where(AssetDagRunQueue.target_dag_id == dag_id)).all())


def test_a_trained_model_event_schedules_the_deploy_dag_which_reads_its_metrics():
    # dag.test() syncs the whole DAGs folder to the metadata database first, as the DAG processor would: the deploy
    # DAG's schedule on the asset is known before the training DAG runs.
    train, states = run_dag("test_asset_train")
    assert states == {"train": "success"}
    events = _events("s3://models/test_asset_train/")
    assert len(events) == 1
    uri, extra = events[0]
    assert uri == "s3://models/test_asset_train/train"
    metrics = xcom(train, "train", "metrics")
    assert extra == {"model_path": xcom(train, "train", "model_path"), "metrics": metrics,
                     "job_name": xcom(train, "train", "job_name"), "framework": "pytorch", "backend": "local"}
    # The scheduler would start the deploy DAG: the event queued a run of it.
    assert _queued_for("test_asset_deploy") == 1

    deploy, states = run_dag("test_asset_deploy")
    assert states == {"deploy": "success"}
    assert xcom(deploy, "deploy") == {"model_path": extra["model_path"], "final_loss": metrics["final_loss"]}


def test_a_template_naming_the_run_adds_one_asset_per_run_through_an_alias():
    run, states = run_dag("test_asset_per_run")
    assert states == {"train": "success"}
    job = xcom(run, "train", "job_name")
    events = _events("s3://models/test_asset_per_run/")
    assert [uri for uri, _ in events] == [f"s3://models/test_asset_per_run/{job}"]
    assert events[0][1]["metrics"] == xcom(run, "train", "metrics")


@pytest.mark.parametrize(("template", "message"), [
    ("s3://models/{dag}/x", "unknown placeholder(s) dag; allowed: {dag_id}"),
    ("s3://models/{dag_id", "is not a valid template"),
    ("", "must be a URI template string"),
])
def test_a_bad_model_asset_template_is_refused_when_the_dag_is_parsed(template, message):
    with pytest.raises(SpecValidationError, match="model_asset") as error:
        DistributedTrainingOperator(task_id="t", framework="pytorch", command=["x"], model_asset=template)
    assert message in str(error.value)


def test_openlineage_gets_the_jobs_shape_and_the_model_as_output(tmp_path):
    """A real run with the OpenLineage provider enabled (file transport): its COMPLETE event carries our facets."""
    events_file = tmp_path / "openlineage.jsonl"
    script = tmp_path / "run.py"
    script.write_text(
        "import subprocess, sys\n"
        "from pathlib import Path\n"
        "subprocess.run([str(Path(sys.executable).with_name('airflow')), 'db', 'migrate'], check=True,\n"
        "               capture_output=True)\n"
        "from tests.helpers import run_dag\n"
        "run, states = run_dag('test_asset_per_run')\n"
        "assert states == {'train': 'success'}, states\n"
    )
    # The tests package through a link, not the checkout itself on sys.path: an editable install leaves
    # airflow_distributed.egg-info in the checkout, which would register the provider's plugin a second time and
    # keep the OpenLineage listener from loading.
    path = tmp_path / "path"
    path.mkdir()
    (path / "tests").symlink_to(ROOT / "tests")
    (path / "airflow_distributed").symlink_to(ROOT / "airflow_distributed")  # this checkout's, not the installed one
    env = {**os.environ, "PYTHONPATH": str(path),
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                          "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "tests",
           # The listener emits from a child process it waits for at most this long (10 s by default): enough
           # for a loaded CI machine.
           "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "300"}
    # A process of its own: the provider reads its configuration once, and the test session's is disabled.
    done = subprocess.run([sys.executable, "-c", f"import tests.conftest; exec(open({str(script)!r}).read())"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    emitted = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    complete = [e for e in emitted if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".train")]
    assert complete, [e["eventType"] for e in emitted]
    facet = complete[-1]["run"]["facets"]["airflowDistributed"]
    assert (facet["framework"], facet["backend"], facet["state"], facet["replicaCount"]) == (
        "pytorch", "local", "succeeded", 2)
    assert [(r["role"], r["count"]) for r in facet["roles"]] == [("master", 1), ("worker", 1)]
    assert facet["metrics"]["final_loss"] < facet["metrics"]["initial_loss"]
    # what the job cost, as the job record has it: both replicas ran, for no longer than the try
    usage = facet["usage"]
    assert usage["tries"] == 1 and len(usage["replicas"]) == 2
    assert 0 < max(r["running_seconds"] for r in usage["replicas"].values()) <= usage["wall_seconds"]
    # how it started, as the job record has it: both replicas' processes, no queue, scheduler or image locally
    startup = facet["startup"]
    assert len(startup["replicas"]) == 2 and set(startup["unknown"]) == {"admitted", "scheduled", "image_pulled"}
    assert 0.0 <= startup["job"]["running"] <= usage["wall_seconds"]
    (output,) = complete[-1]["outputs"]
    assert output["namespace"] == "file" and output["name"].endswith("/model.pt")
