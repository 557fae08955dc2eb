"""Properties over random and mutated specs and operator arguments: ``load_spec`` and the operator (built in a DAG,
as DAG parsing does) either succeed or raise the project's ``SpecValidationError``, whose message stays bounded
and never shows a value written under ``env``/``env_vars``, a label or a toleration's value.

The default run throws a few hundred examples at each; ``-m slow`` throws 20,000."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk import DAG
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.spec import SpecValidationError, load_spec
from tests.unit.test_spec_hostile_input import assert_bounded

SEEDS = Path(__file__).resolve().parent.parent / "data" / "seeds"
CANARY = "S3cr3tCanary"

# Valid specs to mutate: every kind of setting the models know, in both spellings where there are two.
BASES: list[dict[str, Any]] = [
    yaml.safe_load(path.read_text())["environment"] for path in sorted(SEEDS.glob("*.yaml"))
] + [
    {"pytorch": {"n_workers": 2, "elastic": {"min_workers": 1, "max_workers": 3}, "worker": [{"index": 1}]},
     "env_vars": {"A": "1"}, "labels": {"team": "ml"}, "annotations": {"example.com/x": "free text"},
     "tolerations": [{"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute",
                      "tolerationSeconds": 30}],
     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
     "security_context": {"runAsUser": 1000, "capabilities": {"drop": ["ALL"]}},
     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 2, "nvidia.com/gpu": 1}},
     "service_account": "trainer", "image_pull_secrets": ["regcred"], "secret_refs": ["s"], "config_map_refs": ["c"]},
    {"tensorflow": {"n_workers": 2, "n_ps": 1, "default_ps": {"node_selector": {"pool": "cpu"}},
                    "ps": [{"index": 0, "env_vars": [["B", "2"]]}], "default_worker_resources": {"cpu": 1}}},
    {"paddle": {"n_ps": 1, "n_workers": 1}, "mxnet": {}},
    {"xgboost": {"n_workers": 3}, "resources": {"memory": {"request": "1E", "limit": "1Ei"}}},
]

MODEL_KEYS = ["pytorch", "tensorflow", "mxnet", "replicas", "jax", "xgboost", "paddle", "n_workers", "n_ps",
              "default_worker", "default_ps", "worker", "ps", "index", "resources", "cpu", "memory", "gpu", "tpu",
              "requests", "limits", "request", "limit", "worker_resources", "ps_resources", "default_worker_resources",
              "node_selector", "labels", "annotations", "tolerations", "affinity", "security_context", "env_vars",
              "service_account", "image_pull_secrets", "secret_refs", "config_map_refs", "elastic", "min_workers",
              "max_workers", "max_restarts", "rdzv_timeout", "n_proc_per_node", "launcher", "nodeAffinity", "key",
              "operator",
              "value", "effect", "tolerationSeconds", "environment", "framework", "a[", "[key]", "int", "str"]

keys = st.one_of(st.sampled_from(MODEL_KEYS), st.text(max_size=8), st.integers(-3, 3), st.none(), st.booleans())
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5000), st.integers(), st.sampled_from([10**400, -(10**30), 2**63]),
    st.floats(), st.text(max_size=10),
    st.sampled_from(["1E", "1Ei", "1e9999999", "1e-9999999", "500m", "2Gi", "-1", "0.5", "Exists", "Equal", "In",
                     "NoExecute", "", " ", "{{ params.x }}", "pytorch", "deepspeed", "x" * 300, "a\nb"]),
    st.binary(max_size=4),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4),
                               st.tuples(children, children)),
    max_leaves=20,
)


def _slots(node: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in ``node``, each container once (a shared one may hold its parent)."""
    found: list[tuple[Any, Any]] = []
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        items = current.items() if isinstance(current, dict) else enumerate(current) if isinstance(current, list) \
            else ()
        for key, child in items:
            found.append((current, key))
            stack.append(child)
    return found


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with a few random edits: a value replaced, a key dropped or renamed, a value wrapped in a list
    or a mapping, a value shared with another place (as a YAML alias would)."""
    spec = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        slots = _slots(spec)
        if not slots:
            break
        parent, key = draw(st.sampled_from(slots))
        edit = draw(st.sampled_from(["replace", "drop", "rename", "wrap", "nest", "share"]))
        if edit == "replace":
            parent[key] = draw(values)
        elif edit == "drop":
            parent.pop(key)
        elif edit == "rename" and isinstance(parent, dict):
            parent[draw(keys)] = parent.pop(key)
        elif edit == "wrap":
            parent[key] = [parent[key]]
        elif edit == "nest":
            parent[key] = {draw(keys): parent[key]}
        elif edit == "share":
            other, other_key = draw(st.sampled_from(slots))
            parent[key] = other[other_key]
    return spec


@st.composite
def alias_yaml(draw: st.DrawFn) -> str:
    """YAML whose aliases fan out ``fanout`` times per level, under a random place of a valid spec."""
    levels, fanout = draw(st.integers(1, 14)), draw(st.integers(1, 6))
    lines = [f"  l0: &l0 [{', '.join(['x'] * fanout)}]"]
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * fanout)
        lines.append(f"  l{level}: &l{level} [{refs}]" if draw(st.booleans())
                     else f"  l{level}: &l{level} {{{', '.join(f'k{i}: *l{level - 1}' for i in range(fanout))}}}")
    section = draw(st.sampled_from(["labels", "annotations", "env_vars", "affinity", "pytorch", "resources"]))
    return "pytorch: {n_workers: 1}\n" * (section != "pytorch") + f"{section}:\n" + "\n".join(lines) + "\n"


@st.composite
def nested_yaml(draw: st.DrawFn) -> str:
    depth = draw(st.integers(0, 700))
    form = draw(st.sampled_from(["flow-list", "flow-map", "block"]))
    if form == "flow-list":
        return "[" * depth + "]" * depth
    if form == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    return "".join(f"{' ' * i}k:\n" for i in range(min(depth, 300)))


@st.composite
def mangled_yaml(draw: st.DrawFn) -> str:
    """A spec's YAML with a few characters inserted, deleted or changed."""
    text = yaml.safe_dump(draw(mutated_specs()), sort_keys=False)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.text(max_size=3)) + text[at + draw(st.integers(0, 3)):]
    return text


environments = st.one_of(
    mutated_specs(), values, alias_yaml(), nested_yaml(), mangled_yaml(), st.text(max_size=40),
    st.builds(lambda spec: {"version": 1, "kind": "experiment", "environment": spec}, mutated_specs()),
)
frameworks = st.one_of(st.none(), st.sampled_from(["pytorch", "tensorflow", "mxnet", "horovod", "jax", "xgboost",
                                                   "paddle", "caffe", ""]), scalars)


def loads_or_refuses(framework: Any, environment: Any, *hidden: str) -> None:
    try:
        load_spec(framework, environment)
    except SpecValidationError as err:
        assert err.problems and all(isinstance(p, str) and isinstance(m, str) and m for p, m in err.problems)
        assert_bounded(err, *hidden)


# ------------------------------------------------------------------ operator arguments

canary_values = st.one_of(st.just(CANARY), st.builds(lambda n: CANARY * n, st.integers(1, 50)),
                          st.builds(lambda s: f"{CANARY} {s}\n", st.text(max_size=5)))
env_arguments = st.one_of(
    st.none(), st.dictionaries(keys, st.one_of(canary_values, scalars), max_size=4), values,
    st.just("{{ params.env }}"),
)
watch_timings = st.one_of(
    st.none(), scalars, values,
    st.dictionaries(st.one_of(st.sampled_from(["server_timeout", "read_timeout_margin", "connect_timeout",
                                               "reconnect_budget", "reconnect_delay", "max_reconnect_delay",
                                               "jitter", "pending_pods_interval"]), keys), scalars, max_size=4),
)
model_assets = st.one_of(
    st.none(), scalars, st.text(max_size=20),
    st.builds(lambda scheme, body: f"{scheme}://{body}", st.sampled_from(["s3", "file", "airflow", "x y", ""]),
              st.one_of(st.text(max_size=20), st.sampled_from(["{dag_id}/{task_id}", "{job_name}", "{a[}", "{x}",
                                                               "m" * 1600, "{", "}"]))),
)
operator_arguments = st.fixed_dictionaries(
    {"command": st.one_of(st.just(["python", "train.py"]), values)},
    optional={
        "framework": frameworks, "environment": environments, "env": env_arguments, "watch_timings": watch_timings,
        "model_asset": model_assets, "image_pull_grace": scalars,
        "backend": st.one_of(st.sampled_from(["local", "kubernetes", "kubeflow", "trainjob"]), scalars),
        "image": st.just("trainer:1"),
    },
)


def constructs_or_refuses(arguments: dict[str, Any]) -> None:
    """As DAG parsing does: the operator built inside a DAG."""
    try:
        with DAG("fuzz", schedule=None):
            DistributedTrainingOperator(task_id="train", **arguments)
    except SpecValidationError as err:
        assert err.problems
        assert_bounded(err, CANARY)


# ------------------------------------------------------------------ the properties

LIGHT = settings(max_examples=300, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HEAVY = settings(LIGHT, max_examples=20_000)


@LIGHT
@given(frameworks, environments)
def test_any_spec_loads_or_is_refused_with_a_bounded_message(framework, environment):
    loads_or_refuses(framework, environment)


@LIGHT
@given(mutated_specs(), st.sampled_from(["env_vars", "labels", "annotations", "node_selector"]),
       st.dictionaries(keys, st.one_of(canary_values, st.integers(10**8, 10**9)), min_size=1, max_size=3))
def test_values_of_secret_like_fields_never_appear_in_a_message(spec, field, secret_values):
    # The integers stand for numeric secrets: they must not appear either.
    hidden = [CANARY, *(str(v) for v in secret_values.values() if isinstance(v, int))]
    loads_or_refuses(None, {**spec, field: secret_values}, *hidden)
    loads_or_refuses(None, {**spec, "tolerations": [{"key": "k", "value": v} for v in secret_values.values()]},
                     *hidden)


@LIGHT
@given(operator_arguments)
def test_any_operator_arguments_build_the_task_or_are_refused(arguments):
    constructs_or_refuses(arguments)


@pytest.mark.slow
@HEAVY
@given(frameworks, environments)
def test_twenty_thousand_specs_load_or_are_refused(framework, environment):
    loads_or_refuses(framework, environment)


@pytest.mark.slow
@HEAVY
@given(operator_arguments)
def test_twenty_thousand_operator_arguments_build_the_task_or_are_refused(arguments):
    constructs_or_refuses(arguments)
