"""Hostile and malformed input: a spec or an operator argument is refused with a SpecValidationError that names the
field, stays small and shows no value, or it is accepted; never a raw error, never unbounded memory."""

from __future__ import annotations

import gc
import tracemalloc
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.spec import SpecValidationError, load_spec
from airflow_distributed.spec.errors import MAX_MESSAGE_CHARS, MAX_PATH_CHARS, MAX_PROBLEMS_SHOWN
from airflow_distributed.spec.quantities import parse_quantity

# One problem line at most: two spaces, path, ": ", message.
MAX_LINE = MAX_PATH_CHARS + MAX_MESSAGE_CHARS + 4
MAX_RENDERED = 2 * MAX_PATH_CHARS + (MAX_PROBLEMS_SHOWN + 1) * MAX_LINE + 200


def alias_bomb(size: int = 458) -> str:
    """A YAML document of ``size`` bytes whose aliases expand 4x per line (about 10^8 values)."""
    lines = ["pytorch: {n_workers: 1}", "labels:", "  l0: &l0 [lol, lol, lol, lol]"]
    level = 1
    while sum(len(line) + 1 for line in lines) + 34 <= size:
        lines.append(f"  l{level}: &l{level} [*l{level - 1},*l{level - 1},*l{level - 1},*l{level - 1}]")
        level += 1
    text = "\n".join(lines) + "\n"
    return text + "#" * (size - len(text) - 1) + "\n"


def assert_bounded(error: SpecValidationError, *secrets: str) -> None:
    """The message of a refusal: bounded, one line per problem, none of the given values in it."""
    rendered = str(error)
    assert len(rendered) <= MAX_RENDERED, len(rendered)
    assert all(len(line) <= MAX_LINE for line in rendered.splitlines())
    assert all(len(path) <= MAX_PATH_CHARS and len(message) <= MAX_MESSAGE_CHARS for path, message in error.problems)
    for secret in secrets:
        assert secret not in rendered


@dataclass(frozen=True)
class HostileCase:
    name: str
    environment: Any
    framework: str | None = None
    #: (path, message fragment) that must be among the problems
    expected: tuple[str, str] = ("", "")
    #: text that must not be in the message
    hidden: tuple[str, ...] = field(default_factory=tuple)


def nested(depth: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    node = top
    for _ in range(depth):
        node["x"] = {}
        node = node["x"]
    return top


def inside_itself() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


DEEP = 500
DEEP_DICT = nested(5000)
CASES = [
    HostileCase("key with a bracket", {"a[": 1}, "pytorch", ("environment.a[", "unknown key 'a['")),
    HostileCase("quantity with a huge exponent", {"pytorch": {}, "resources": {"cpu": {"requests": "1e9999999"}}},
                expected=("environment.resources.cpu.requests", "is out of range: at most 2^63-1")),
    HostileCase("quantity with a thousand-digit exponent",
                {"pytorch": {}, "resources": {"cpu": {"limits": "1e" + "9" * 1000}}},
                expected=("environment.resources.cpu.limits", "is out of range")),
    HostileCase("legacy resources beside a worker that is not a list",
                {"pytorch": {"worker": 5, "worker_resources": [{"index": 0, "cpu": 1}]}},
                expected=("environment.pytorch", "'worker' must be a list of overrides")),
    HostileCase("legacy default resources beside a default that is not a mapping",
                {"pytorch": {"default_worker": 5, "default_worker_resources": {"cpu": 1}}},
                expected=("environment.pytorch", "'default_worker' must be a mapping")),
    HostileCase("YAML nested 500 deep", "[" * DEEP + "]" * DEEP, expected=("environment", "is nested too deeply")),
    HostileCase("YAML mapping nested 500 deep", "".join(f"{' ' * i}k:\n" for i in range(DEEP)),
                expected=("environment", "is nested too deeply")),
    HostileCase("dict nested 5000 deep", {"pytorch": {}, "affinity": DEEP_DICT},
                expected=("environment", "is nested too deeply")),
    HostileCase("a 458-byte alias bomb", alias_bomb(), expected=("environment", "is too large")),
    HostileCase("tolerationSeconds beyond 64 bits",
                {"pytorch": {}, "tolerations": [{"key": "a", "operator": "Exists", "effect": "NoExecute",
                                                 "tolerationSeconds": 10**400}]},
                expected=("environment.tolerations[0].tolerationSeconds", "is out of range")),
    HostileCase("gpu 1e308", {"pytorch": {}, "resources": {"gpu": {"requests": 1e308, "limits": 1e308}}},
                expected=("environment.resources.gpu.limits", "is out of range")),
    HostileCase("cpu of 400 digits", {"pytorch": {}, "resources": {"cpu": {"limits": 10**400}}},
                expected=("environment.resources.cpu.limits", "is out of range")),
    HostileCase("index of 5000 digits", {"pytorch": {"n_workers": 1, "worker": [{"index": 10**5000}]}},
                expected=("environment.pytorch.worker[0].index", "an integer of about 5000 digits is out of range")),
    HostileCase("count of 5000 digits", {"pytorch": {"n_workers": 10**5000}},
                expected=("environment.pytorch.n_workers", "is out of range (must be <= 2000)")),
    HostileCase("YAML integer of 5000 digits", "pytorch: {n_workers: " + "1" * 5000 + "}",
                expected=("environment", "is not valid YAML")),
    HostileCase("YAML impossible date", "pytorch: {n_workers: 2020-13-45}", expected=("environment", "not valid YAML")),
    HostileCase("YAML unknown alias", "pytorch: *nowhere", expected=("environment", "is not valid YAML")),
    HostileCase("YAML error does not quote the document", "env_vars: {TOKEN: 'hunter2'\n", framework="pytorch",
                expected=("environment", "is not valid YAML"), hidden=("hunter2",)),
    HostileCase("env value of the wrong type", {"pytorch": {}, "env_vars": {"DB_PASSWORD": 987654321}},
                expected=("environment.env_vars.DB_PASSWORD", "expected a string, got int"), hidden=("987654321",)),
    HostileCase("env pair of the wrong type", {"pytorch": {}, "env_vars": [["DB_PASSWORD", 987654321]]},
                expected=("environment.env_vars.DB_PASSWORD", "expected a string, got int"), hidden=("987654321",)),
    HostileCase("env pair that is not a pair", {"pytorch": {}, "env_vars": [["TOKEN", "hunter2", "x"]]},
                expected=("environment.env_vars", "entry [0] is not a [name, value] pair"), hidden=("hunter2",)),
    HostileCase("env name that is not a string", {"pytorch": {}, "env_vars": {7: "hunter2"}},
                expected=("environment.env_vars", "keys must be strings, got int"), hidden=("hunter2",)),
    HostileCase("a megabyte label value", {"pytorch": {}, "labels": {"team": "v" * 1_000_000}},
                expected=("environment.labels.team", "(a string of 1000000 characters) is not valid"),
                hidden=("v" * 100,)),
    HostileCase("toleration value", {"pytorch": {}, "tolerations": [{"key": "k", "value": "hunter 2"}]},
                expected=("environment.tolerations[0].value", "is not valid (a string of 8 characters)"),
                hidden=("hunter",)),
    HostileCase("a long unknown key is not quoted", {"pytorch": {}, "x" * 10_000: 1},
                expected=("environment." + "x" * 10, "unknown key a name of 10000 characters")),
    HostileCase("a mapping inside itself", {"pytorch": {}, "affinity": inside_itself()},
                expected=("environment", "holds itself")),
    HostileCase("a key that is not a string", {"pytorch": {1: 2}}, expected=("environment.pytorch", "keys must be "
                                                                             "strings, got int")),
    HostileCase("amount of a wrong type", {"pytorch": {}, "resources": {"cpu": {"limits": [1]}}},
                expected=("environment.resources.cpu.limits", "expected a number or a quantity string")),
    HostileCase("a thousand bad labels", {"pytorch": {}, "labels": {f"bad key {i}": "v" for i in range(1000)}},
                expected=("environment.labels", "is not valid: a key must be")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_spec_is_refused_naming_the_field(case: HostileCase):
    with pytest.raises(SpecValidationError) as err:
        load_spec(case.framework, case.environment)
    path, fragment = case.expected
    assert any(p.startswith(path) and fragment in m for p, m in err.value.problems), err.value.problems
    assert_bounded(err.value, *case.hidden)


def test_a_thousand_problems_are_counted_not_all_listed():
    with pytest.raises(SpecValidationError) as err:
        load_spec("pytorch", {"labels": {f"bad key {i}": "v" for i in range(1000)}})
    assert len(err.value.problems) == 1000
    assert str(err.value).splitlines()[-1] == f"  ... and {1000 - MAX_PROBLEMS_SHOWN} more"


@pytest.mark.parametrize(("text", "base_units"), [("1E", 10**18), ("1Ei", 2**60), ("2Ki", 2048), ("1e3", 1000),
                                                  ("0e999999999", 0), ("500m", 0.5)])
def test_every_kubernetes_suffix_is_a_quantity(text: str, base_units: float):
    assert float(parse_quantity(text)) == pytest.approx(base_units)
    spec = load_spec("pytorch", {"resources": {"memory": {"requests": text, "limits": text}}})
    assert spec.environment.resources is not None


def test_the_alias_bomb_is_refused_with_bounded_memory():
    bomb = alias_bomb()
    assert len(bomb.encode()) == 458
    assert yaml.safe_load(bomb)["labels"]  # valid YAML: what is refused is its size once expanded
    gc.collect()
    tracemalloc.start()
    try:
        with pytest.raises(SpecValidationError) as err:
            load_spec(None, bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.problems == [("environment", "is too large: a spec holds at most 100,000 values, each YAML alias "
                                                  "counted as what it stands for")]
    assert peak < 50 * 2**20, peak


def test_the_alias_bomb_as_objects_is_refused_with_bounded_memory():
    level: Any = ["lol"] * 4
    for _ in range(30):
        level = [level] * 4  # 4^30 values once expanded, a few hundred objects in memory
    tracemalloc.start()
    try:
        with pytest.raises(SpecValidationError) as err:
            load_spec("pytorch", {"labels": {"x": level}})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.paths == ["environment"]
    assert peak < 50 * 2**20, peak


def test_a_spec_file_too_large_is_not_read_whole(tmp_path):
    big = tmp_path / "spec.yaml"
    big.write_text("pytorch: {}\n" + "# padding\n" * 200_000)
    with pytest.raises(SpecValidationError) as err:
        load_spec(None, str(big))
    assert err.value.problems == [("environment", "is too large: a spec is at most 1,000,000 characters")]


# ------------------------------------------------------------------ operator arguments at DAG parse


def construct(dag_id: str = "hostile", **arguments: Any) -> DistributedTrainingOperator:
    """As DAG parsing does: the operator built inside a DAG."""
    arguments.setdefault("command", ["python", "train.py"])
    arguments.setdefault("framework", "pytorch")
    with DAG(dag_id, schedule=None):
        return DistributedTrainingOperator(task_id="train", **arguments)


@pytest.mark.parametrize(("arguments", "path", "fragment", "hidden"), [
    ({"env": {1: "x"}}, "env", "variable names must be strings, got int", ()),
    ({"env": {"DB_PASSWORD": 987654321}}, "env.DB_PASSWORD", "expected a string, got int", ("987654321",)),
    ({"env": {"TOKEN": None}}, "env.TOKEN", "expected a string, got null", ()),
    ({"env": ["A=1"]}, "env", "expected a mapping of variable names to strings, got list", ("A=1",)),
    ({"env": {"BAD NAME": "hunter2"}}, "env", "'BAD NAME' is not a valid variable name", ("hunter2",)),
    ({"watch_timings": 5}, "watch_timings", "expected a mapping of WatchTimings field names", ()),
    ({"watch_timings": "fast"}, "watch_timings", "expected a mapping of WatchTimings field names", ()),
    ({"watch_timings": {1: 2, "jitter": 0.5}}, "watch_timings", "keys must be WatchTimings field names", ()),
    ({"watch_timings": {"jitter": "hunter2"}}, "watch_timings.jitter", "expected a number of seconds, got a string",
     ("hunter2",)),
    ({"watch_timings": {"server_timeout": 10**400}}, "watch_timings.server_timeout", "is out of range", ()),
    ({"model_asset": "s3://models/" + "m" * 1500}, "model_asset", "cannot exceed 1500 characters", ()),
    ({"model_asset": "airflow://models/x"}, "model_asset", "is not a valid Asset URI", ()),
    ({"model_asset": "s3://user:hunter2@models/{dag_id"}, "model_asset", "is not a valid template", ("hunter2",)),
    ({"image_pull_grace": "10s"}, "image_pull_grace", "a string of 3 characters is not allowed", ()),
    ({"backend": "x" * 1000}, "backend", "a name of 1000 characters is not supported", ()),
    ({"environment": "[" * DEEP + "]" * DEEP}, "environment", "is nested too deeply", ()),
    ({"environment": {"pytorch": {}, "affinity": DEEP_DICT}}, "environment", "is nested too deeply", ()),
    ({"environment": {"pytorch": {}, "labels": {"team": "v" * 1_000_000}}}, "environment.labels.team",
     "is not valid", ("v" * 100,)),
])
def test_bad_operator_arguments_are_refused_naming_the_argument(arguments, path, fragment, hidden):
    with pytest.raises(SpecValidationError) as err:
        construct(**arguments)
    assert any(p == path and fragment in m for p, m in err.value.problems), err.value.problems
    assert_bounded(err.value, *hidden)


def test_templated_env_names_and_lazy_values_are_left_for_run_time():
    operator = construct(env={"{{ params.name }}": "1", "EPOCHS": "{{ params.epochs }}"})
    assert operator.env == {"{{ params.name }}": "1", "EPOCHS": "{{ params.epochs }}"}
    assert construct(dag_id="t2", env="{{ params.env }}").env == "{{ params.env }}"
