"""The provider's retry policy: what it decides for each error, how it serialises, and when the operator uses it."""

from __future__ import annotations

import importlib
import json
import sys
from datetime import timedelta

import pendulum
import pytest
from airflow.sdk import DAG, ExceptionRetryPolicy, RetryAction, task

from airflow_distributed.exceptions import (
    ApiUnavailableError,
    ClusterRefusedError,
    DistributedJobError,
    ImagePullError,
    JobHungError,
    ReplicaExitedError,
    ReplicaLostError,
    ReplicaNotStartedError,
    ReplicaOOMKilledError,
)
from airflow_distributed.jobstate.failures import job_failure
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.operators.training import default_retry_policy
from airflow_distributed.retry_policy import DistributedRetryPolicy
from airflow_distributed.spec import SpecValidationError

START = pendulum.datetime(2026, 1, 1, tz="UTC")


@pytest.mark.parametrize(("error", "action", "delay"), [
    (ReplicaLostError("m"), RetryAction.RETRY, timedelta(0)),
    (JobHungError("m"), RetryAction.RETRY, timedelta(0)),
    (ImagePullError("m"), RetryAction.FAIL, None),
    (ClusterRefusedError("m", 403), RetryAction.FAIL, None),
    (SpecValidationError([("namespace", "is not a valid namespace")]), RetryAction.FAIL, None),
    (ReplicaExitedError("m"), RetryAction.DEFAULT, None),
    (ReplicaOOMKilledError("m"), RetryAction.DEFAULT, None),
    (ReplicaNotStartedError("m"), RetryAction.DEFAULT, None),
    (ApiUnavailableError("m", 503), RetryAction.DEFAULT, None),
    (DistributedJobError("m"), RetryAction.DEFAULT, None),
    (RuntimeError("m"), RetryAction.DEFAULT, None),
], ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None)
def test_what_the_policy_decides(error, action, delay) -> None:
    decision = DistributedRetryPolicy().evaluate(error, try_number=1, max_tries=4)
    assert (decision.action, decision.retry_delay) == (action, delay)
    if action != RetryAction.DEFAULT:
        assert decision.reason is not None and decision.reason.startswith(type(error).__name__)


def test_its_reason_names_the_replica_and_why() -> None:
    outcome = JobOutcome(Ending.DELETED, replica="j-worker-1", disruption="EvictionByEvictionAPI")
    decision = DistributedRetryPolicy().evaluate(job_failure("ns/j", outcome, 1.0, "gone"), 1, 4)
    assert decision.reason is not None
    assert decision.reason.endswith("(replica j-worker-1: EvictionByEvictionAPI)")
    image = JobOutcome(Ending.IMAGE, replica="j-master-0", reason="ErrImagePull", image="reg/t:1")
    decision = DistributedRetryPolicy().evaluate(job_failure("ns/j", image, 1.0, "gone"), 1, 4)
    assert decision.reason is not None and "a retry pulls the same image (replica j-master-0: ErrImagePull)" in (
        decision.reason)


def test_it_serialises_to_json_and_back() -> None:
    data = DistributedRetryPolicy().serialize()
    assert json.loads(json.dumps(data)) == data
    assert DistributedRetryPolicy.deserialize(data) == DistributedRetryPolicy()
    # The type a serialised policy names is where DAGs import it, whichever module defines the class.
    assert data == {"__type": "airflow_distributed.retry_policy.DistributedRetryPolicy"}
    module, _, name = data["__type"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is DistributedRetryPolicy


def operator(**kwargs) -> DistributedTrainingOperator:
    return DistributedTrainingOperator(task_id="train", framework="pytorch", command=["python", "train.py"], **kwargs)


def test_the_operator_uses_it_when_it_has_retries() -> None:
    assert isinstance(operator(retries=3).retry_policy, DistributedRetryPolicy)
    assert operator(retries=0).retry_policy is None
    assert operator().retry_policy is None  # Airflow's default: no retries


def test_a_policy_given_replaces_it() -> None:
    mine = ExceptionRetryPolicy(rules=[])
    assert operator(retries=3, retry_policy=mine).retry_policy is mine


def test_retries_from_default_args_count_and_the_dag_serialises() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("policy", schedule=None, start_date=START, default_args={"retries": 2}) as dag:
        train = operator()

        @task.distributed(framework="pytorch")
        def fit() -> None:
            return None

        fitted = fit()
    assert isinstance(train.retry_policy, DistributedRetryPolicy)
    assert isinstance(fitted.operator.retry_policy, DistributedRetryPolicy)
    serialized = DagSerialization.to_dict(dag)
    tasks = {t["__var"]["task_id"]: t["__var"] for t in serialized["dag"]["tasks"]}
    assert tasks["train"].get("has_retry_policy") is True


def test_without_retry_policies_in_airflow_there_is_none_and_no_error(monkeypatch) -> None:
    # As on Airflow < 3.3: ``from airflow.sdk import RetryPolicy`` fails, so the module cannot be imported.
    monkeypatch.setitem(sys.modules, "airflow_distributed.airflow_features.retry_policy", None)
    assert default_retry_policy() is None
    assert operator(retries=3).retry_policy is None


@pytest.mark.parametrize("limit", ["progress_timeout", "queue_timeout"])
@pytest.mark.parametrize(("value", "seconds"), [(timedelta(minutes=2), 120.0), (30, 30), (None, None)])
def test_the_limits_are_kept_in_seconds(limit, value, seconds) -> None:
    assert getattr(operator(**{limit: value}), limit) == seconds


@pytest.mark.parametrize("limit", ["progress_timeout", "queue_timeout"])
@pytest.mark.parametrize("value", [0, -5, "10", True, float("inf")])
def test_a_bad_limit_is_refused_when_the_dag_is_parsed(limit, value) -> None:
    with pytest.raises(SpecValidationError, match=f"{limit}: is not allowed: a timedelta or seconds"):
        operator(**{limit: value})


@pytest.mark.parametrize("backend", ["kubernetes", "kubeflow", "trainjob"])
def test_the_cluster_backends_take_queue_timeout(backend) -> None:
    assert operator(queue_timeout=600, backend=backend, image="trainer:1").queue_timeout == 600


@pytest.mark.parametrize("backend", ["kubernetes", "kubeflow", "trainjob"])
@pytest.mark.parametrize("deferrable", [False, True])
def test_the_cluster_backends_take_progress_timeout(backend, deferrable) -> None:
    assert operator(progress_timeout=60, backend=backend, image="trainer:1",
                    deferrable=deferrable).progress_timeout == 60
