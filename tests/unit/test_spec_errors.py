"""Bad input: one SpecValidationError naming every problem with its path, never a traceback from deep inside."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_distributed.spec import SpecValidationError, load_spec


@dataclass(frozen=True)
class BadCase:
    name: str
    environment: Any
    framework: str | None = None
    #: (path, message fragment) that must each be among the problems
    expected: list[tuple[str, str]] = field(default_factory=list)


CASES = [
    BadCase("index out of range", {"tensorflow": {"n_workers": 4, "worker": [{"index": 7}]}},
            expected=[("environment.tensorflow.worker[0].index", "7 is out of range (n_workers is 4")]),
    BadCase("duplicate index", {"mxnet": {"n_workers": 2, "n_ps": 1, "ps": [{"index": 0}, {"index": 0}]}},
            expected=[("environment.mxnet.ps[1].index", "already overridden by environment.mxnet.ps[0]")]),
    BadCase("negative count", {"pytorch": {"n_workers": -2}},
            expected=[("environment.pytorch.n_workers", "-2 is out of range (must be >= 0)")]),
    BadCase("absurd count", {"pytorch": {"n_workers": 50000}},
            expected=[("environment.pytorch.n_workers", "must be <= 2000")]),
    BadCase("count as a string", {"tensorflow": {"n_workers": "4"}},
            expected=[("environment.tensorflow.n_workers", "expected an integer, got a string of 1 character")]),
    BadCase("count as a bool", {"tensorflow": {"n_ps": True}},
            expected=[("environment.tensorflow.n_ps", "expected an integer")]),
    BadCase("misspelt key suggests the right one", {"tensorflow": {"n_worker": 2}},
            expected=[("environment.tensorflow.n_worker", "did you mean 'n_workers'?")]),
    BadCase("misspelt resource key", {"resources": {"cpus": {"requests": 1}}},
            expected=[("environment.resources.cpus", "did you mean 'cpu'?")]),
    BadCase("misspelt requests", {"resources": {"cpu": {"requets": 1}}},
            expected=[("environment.resources.cpu.requets", "did you mean 'requests'?")]),
    BadCase("ps for pytorch", {"pytorch": {"n_workers": 2, "n_ps": 1}},
            expected=[("environment.pytorch.n_ps", "no parameter servers")]),
    BadCase("requests over limits", {"resources": {"cpu": {"requests": 3, "limits": 2}}},
            expected=[("environment.resources.cpu", "requests (3 cores) exceed limits (2 cores)")]),
    BadCase("memory units compared", {"resources": {"memory": {"requests": "2Gi", "limits": 1024}}},
            expected=[("environment.resources.memory", "requests (2Gi) exceed limits (1024 MiB)")]),
    BadCase("gpu requests must equal limits", {"resources": {"gpu": {"requests": 1, "limits": 2}}},
            expected=[("environment.resources.gpu", "must equal limits")]),
    BadCase("bad quantity", {"resources": {"memory": {"limits": "12 gigs"}}},
            expected=[("environment.resources.memory.limits", "is not a Kubernetes quantity")]),
    BadCase("both spellings", {"resources": {"gpu": {"request": 1, "requests": 1}}},
            expected=[("environment.resources.gpu", "either 'request' or 'requests'")]),
    BadCase("two framework sections", {"tensorflow": {}, "mxnet": {}},
            expected=[("environment", "only one framework section is allowed, found 'tensorflow' and 'mxnet'")]),
    BadCase("section does not match framework", {"tensorflow": {"n_workers": 1}}, framework="pytorch",
            expected=[("environment.tensorflow", "does not match framework 'pytorch'")]),
    BadCase("unknown framework", {}, framework="caffe2", expected=[("framework", "'caffe2' is not supported")]),
    BadCase("ps for jax", {"jax": {"n_workers": 2, "n_ps": 1}},
            expected=[("environment.jax.n_ps", "no parameter servers")]),
    BadCase("misspelt jax key", {"jax": {"n_worker": 2}},
            expected=[("environment.jax.n_worker", "did you mean 'n_workers'?")]),
    BadCase("jax index out of range", {"jax": {"n_workers": 2, "worker": [{"index": 2}]}},
            expected=[("environment.jax.worker[0].index", "2 is out of range (n_workers is 2; valid: 0..1)")]),
    BadCase("jax count as a string", {"jax": {"n_workers": "2"}},
            expected=[("environment.jax.n_workers", "expected an integer, got a string of 1 character")]),
    BadCase("jax section for pytorch", {"jax": {"n_workers": 1}}, framework="pytorch",
            expected=[("environment.jax", "does not match framework 'pytorch', whose section is "
                       "'environment.pytorch'")]),
    BadCase("pytorch section for jax", {"pytorch": {"n_workers": 1}}, framework="jax",
            expected=[("environment.pytorch", "does not match framework 'jax', whose section is 'environment.jax'")]),
    BadCase("ps for xgboost", {"xgboost": {"n_workers": 2, "n_ps": 1}},
            expected=[("environment.xgboost.n_ps", "no parameter servers")]),
    BadCase("misspelt xgboost key", {"xgboost": {"default_workers": {}}},
            expected=[("environment.xgboost.default_workers", "did you mean 'default_worker'?")]),
    BadCase("xgboost duplicate index", {"xgboost": {"n_workers": 2, "worker": [{"index": 1}, {"index": 1}]}},
            expected=[("environment.xgboost.worker[1].index", "already overridden by environment.xgboost.worker[0]")]),
    BadCase("xgboost negative count", {"xgboost": {"n_workers": -1}},
            expected=[("environment.xgboost.n_workers", "-1 is out of range (must be >= 0)")]),
    BadCase("xgboost section for jax", {"xgboost": {"n_workers": 1}}, framework="jax",
            expected=[("environment.xgboost", "does not match framework 'jax', whose section is 'environment.jax'")]),
    BadCase("paddle pserver settings without pservers", {"paddle": {"n_workers": 2, "default_ps": {}}},
            expected=[("environment.paddle.default_ps", "is set but n_ps is 0, which means collective mode")]),
    BadCase("paddle pserver index without pservers", {"paddle": {"n_workers": 2, "ps": [{"index": 0}]}},
            expected=[("environment.paddle.ps[0].index", "0 is out of range (n_ps is 0; no replicas")]),
    BadCase("paddle pserver index out of range", {"paddle": {"n_ps": 2, "ps": [{"index": 2}]}},
            expected=[("environment.paddle.ps[0].index", "2 is out of range (n_ps is 2; valid: 0..1)")]),
    BadCase("paddle negative pservers", {"paddle": {"n_ps": -1}},
            expected=[("environment.paddle.n_ps", "-1 is out of range (must be >= 0)")]),
    BadCase("paddle pservers as a string", {"paddle": {"n_ps": "2"}},
            expected=[("environment.paddle.n_ps", "expected an integer, got a string of 1 character")]),
    BadCase("misspelt paddle pserver key", {"paddle": {"n_ps": 1, "defualt_ps": {}}},
            expected=[("environment.paddle.defualt_ps", "did you mean 'default_ps'?")]),
    BadCase("paddle pserver settings Kubernetes refuses", {"paddle": {"n_ps": 1, "default_ps": {
        "resources": {"gpu": {"requests": 0.5, "limits": 0.5}}}}},
            expected=[("environment.paddle.default_ps.resources.gpu.requests", "0.5 is not a whole number")]),
    BadCase("misspelt paddle key", {"paddle": {"n_workers": 1, "worker": [{"index": 0, "node_selectr": {}}]}},
            expected=[("environment.paddle.worker[0].node_selectr", "did you mean 'node_selector'?")]),
    BadCase("paddle index out of range", {"paddle": {"n_workers": 0, "worker": [{"index": 0}]}},
            expected=[("environment.paddle.worker[0].index", "0 is out of range (n_workers is 0; no replicas")]),
    BadCase("paddle and xgboost sections", {"paddle": {}, "xgboost": {}},
            expected=[("environment", "only one framework section is allowed, found 'xgboost' and 'paddle'")]),
    BadCase("jax and pytorch sections", {"jax": {}, "pytorch": {}},
            expected=[("environment", "only one framework section is allowed, found 'pytorch' and 'jax'")]),
    BadCase("no framework at all", {"resources": {}}, expected=[("framework", "missing")]),
    BadCase("wrong type of node_selector", {"pytorch": {"default_worker": {"node_selector": ["a"]}}},
            expected=[("environment.pytorch.default_worker.node_selector", "expected a mapping")]),
    BadCase("label key Kubernetes refuses", {"labels": {"bad key!": "v"}},
            expected=[("environment.labels", "key 'bad key!' is not valid: a key must be a qualified name")]),
    BadCase("label value too long", {"pytorch": {"default_worker": {"labels": {"team": "x" * 64}}}},
            expected=[("environment.pytorch.default_worker.labels.team", "at most 63 characters")]),
    BadCase("fractional gpu", {"resources": {"gpu": {"requests": 0.5, "limits": 0.5}}},
            expected=[("environment.resources.gpu.limits", "0.5 is not a whole number: gpu is counted in whole")]),
    BadCase("toleration operator", {"tolerations": [{"key": "spot", "operator": "In"}]},
            expected=[("environment.tolerations[0].operator", "'In' is not supported; allowed: Exists, Equal")]),
    BadCase("tolerationSeconds without NoExecute", {"tolerations": [{"key": "a", "tolerationSeconds": 9}]},
            expected=[("environment.tolerations[0].tolerationSeconds", "only allowed with effect 'NoExecute'")]),
    BadCase("affinity misspelt on an indexed replica",
            {"mxnet": {"n_workers": 2, "worker": [{"index": 1, "affinity": {"podAfinity": {}}}]}},
            expected=[("environment.mxnet.worker[0].affinity", "unknown field 'podAfinity'; allowed: nodeAffinity")]),
    BadCase("service account name", {"service_account": "ML_Trainer"},
            expected=[("environment.service_account", "not a valid service account name: it must be a DNS-1123")]),
    BadCase("env var name", {"env_vars": [["2FAST", "1"]]},
            expected=[("environment.env_vars", "'2FAST' is not a valid variable name")]),
    BadCase("framework not a string", {}, framework=["pytorch"],  # type: ignore[arg-type]
            expected=[("framework", "expected a string, got list; allowed: tensorflow")]),
    BadCase("not a mapping", [1, 2], framework="pytorch", expected=[("environment", "must be a mapping")]),
    BadCase("invalid YAML", "tensorflow: [1", expected=[("environment", "is not valid YAML")]),
    BadCase("missing spec file", "/nonexistent/spec.yaml", expected=[("environment", "cannot read")]),
    BadCase("override index missing", {"pytorch": {"n_workers": 2, "worker": [{"resources": {}}]}},
            expected=[("environment.pytorch.worker[0].index", "is required")]),
    BadCase("elastic min over max", {"pytorch": {"n_workers": 3, "elastic": {"min_workers": 3, "max_workers": 2}}},
            expected=[("environment.pytorch.elastic.min_workers", "3 is more than max_workers (2)")]),
    BadCase("elastic max over the replicas", {"pytorch": {"n_workers": 2, "elastic": {"max_workers": 4}}},
            expected=[("environment.pytorch.elastic.max_workers", "4 is more than the job's 3 replicas (the master "
                       "and n_workers=2); allowed: 1..3")]),
    BadCase("elastic negative restarts", {"pytorch": {"n_workers": 1, "elastic": {"max_restarts": -1}}},
            expected=[("environment.pytorch.elastic.max_restarts", "-1 is out of range (must be >= 0)")]),
    BadCase("elastic zero workers", {"pytorch": {"n_workers": 1, "elastic": {"min_workers": 0}}},
            expected=[("environment.pytorch.elastic.min_workers", "0 is out of range (must be >= 1)")]),
    BadCase("elastic timeout as a string", {"pytorch": {"elastic": {"rdzv_timeout": "10m"}}},
            expected=[("environment.pytorch.elastic.rdzv_timeout",
                       "expected an integer, got a string of 3 characters")]),
    BadCase("elastic misspelt", {"pytorch": {"elastic": {"max_restart": 2}}},
            expected=[("environment.pytorch.elastic.max_restart", "did you mean 'max_restarts'?")]),
    BadCase("elastic for jax", {"jax": {"n_workers": 1, "elastic": {}}},
            expected=[("environment.jax.elastic", "unknown key 'elastic'")]),
    BadCase(
        "every problem at once",
        {"tensorflow": {"n_worker": 2, "n_workers": 4, "worker": [{"index": 9}]},
         "resources": {"cpu": {"requests": 4, "limits": 1}}},
        expected=[
            ("environment.tensorflow.n_worker", "did you mean 'n_workers'?"),
            ("environment.tensorflow.worker[0].index", "9 is out of range"),
            ("environment.resources.cpu", "exceed limits"),
        ],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_names_the_path_and_what_is_allowed(case: BadCase):
    with pytest.raises(SpecValidationError) as err:
        load_spec(case.framework, case.environment)
    problems = err.value.problems
    for path, fragment in case.expected:
        assert any(p == path and fragment in m for p, m in problems), (path, fragment, problems)
    rendered = str(err.value)
    assert rendered.startswith("invalid distributed training spec")
    assert "Traceback" not in rendered and "pydantic" not in rendered
    assert err.value.__cause__ is None  # nothing from inside the validator leaks into the error chain


def test_a_framework_that_is_not_a_string_is_reported_once():
    with pytest.raises(SpecValidationError) as err:
        load_spec({"name": "pytorch"}, {"pytorch": {"n_workers": 1}})  # type: ignore[arg-type]
    assert err.value.paths == ["framework"]


def test_message_lists_every_problem_on_its_own_line():
    with pytest.raises(SpecValidationError) as err:
        load_spec(None, {"pytorch": {"n_workers": 2, "worker": [{"index": 5}]}, "resourcs": {}})
    lines = str(err.value).splitlines()
    assert lines[0] == "invalid distributed training spec: 2 problems"
    assert "  environment.resourcs: unknown key 'resourcs'; did you mean 'resources'?" in lines
    assert "  environment.pytorch.worker[0].index: 5 is out of range (n_workers is 2; valid: 0..1)" in lines


def test_an_elastic_job_is_refused_on_the_kubeflow_backend_when_the_dag_is_parsed():
    from airflow_distributed.operators import DistributedTrainingOperator

    with pytest.raises(SpecValidationError) as err:
        DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "t.py"], image="i:1",
                                    backend="kubeflow", environment={"pytorch": {"n_workers": 1, "elastic": {}}})
    assert ("environment.pytorch.elastic", "is not supported with backend='kubeflow'; use backend='kubernetes' or "
            "'local', where the task restarts lost replicas itself") in err.value.problems


def test_operator_env_names_are_checked_when_the_dag_is_parsed():
    from airflow_distributed.operators import DistributedTrainingOperator

    with pytest.raises(SpecValidationError) as err:
        DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "t.py"],
                                    env={"EPOCHS": "3", "LEARNING RATE": "0.1"})
    assert err.value.problems == [("env", "'LEARNING RATE' is not a valid variable name: use letters, digits, '-', "
                                          "'_' or '.', not starting with a digit (e.g. 'MY_VAR')")]
