"""The operator's MLflow and TensorBoard arguments, checked when the DAG is parsed, and the links they add."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_distributed.airflow_features.links import DistributedJobLink, JobUrlLink, MlflowRunLink
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.spec.errors import SpecValidationError

TEMPLATE = "https://tb.example.com/#scalars&regexInput={job_name}"


def _operator(**kwargs) -> DistributedTrainingOperator:
    with DAG("dag", schedule=None):
        return DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "x.py"], **kwargs)


@pytest.mark.parametrize(("kwargs", "paths"), [
    ({"mlflow_conn_id": "m", "wait_for_completion": False, "backend": "kubernetes", "image": "i"},
     ["mlflow_conn_id"]),
    ({"register_model": "model"}, ["register_model"]),
    ({"mlflow_conn_id": "m", "mlflow_params": "steps"}, ["mlflow_params"]),
    ({"tensorboard_url": "tb.example.com/{job}"}, ["job_links[0].template", "job_links[0].template"]),
    ({"tensorboard_url": TEMPLATE, "job_links": [("TensorBoard", TEMPLATE)]}, ["job_links[1].name"]),
])
def test_refused_when_the_dag_is_parsed(kwargs, paths):
    with pytest.raises(SpecValidationError) as error:
        _operator(**kwargs)
    assert error.value.paths == paths


def test_the_links_each_argument_adds():
    assert [type(link) for link in _operator().operator_extra_links] == [DistributedJobLink]
    links = _operator(mlflow_conn_id="m", tensorboard_url=TEMPLATE, job_links={"Grafana": "https://g/{run_id}"},
                      register_model="{{ params.name }}").operator_extra_links
    assert [(type(link), link.name) for link in links] == [
        (DistributedJobLink, "Distributed job"), (MlflowRunLink, "MLflow run"), (JobUrlLink, "TensorBoard"),
        (JobUrlLink, "Grafana")]
    assert {"mlflow_conn_id", "mlflow_experiment", "register_model"} <= set(DistributedTrainingOperator.template_fields)


def test_the_mlflow_link_is_the_run_the_try_opened():
    operator = _operator(mlflow_conn_id="m")
    assert MlflowRunLink().get_link(operator, ti_key=None) == ""  # no server reached: no link
    operator.mlflow_run_url = "http://127.0.0.1:5000/#/experiments/1/runs/abc"
    assert MlflowRunLink().get_link(operator, ti_key=None) == "http://127.0.0.1:5000/#/experiments/1/runs/abc"

