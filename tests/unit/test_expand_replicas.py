"""``expand_replicas``: the one expansion of a spec into replicas that the plan and the Kubeflow checks share."""

from __future__ import annotations

import pytest

from airflow_distributed.plan import expand_replicas
from airflow_distributed.spec import load_spec

BIG = {"node_selector": {"pool": "big"}}
SMALL = {"node_selector": {"pool": "small"}}
GPU = {"node_selector": {"pool": "gpu"}}
MASTER = {"node_selector": {"pool": "master"}}

# (framework, environment, expected [(role, index, node_selector, spec_key, override position)])
CASES = {
    "no default: empty settings": (
        "pytorch", {"pytorch": {"n_workers": 2}},
        [("master", 0, None, None, None), ("worker", 0, None, "worker", None), ("worker", 1, None, "worker", None)],
    ),
    "master settings from environment, default for every worker": (
        "pytorch", {**MASTER, "pytorch": {"n_workers": 2, "default_worker": BIG}},
        [("master", 0, MASTER["node_selector"], None, None), ("worker", 0, BIG["node_selector"], "worker", None),
         ("worker", 1, BIG["node_selector"], "worker", None)],
    ),
    "an indexed entry replaces the default for its index only": (
        "pytorch", {"pytorch": {"n_workers": 3, "default_worker": BIG,
                                "worker": [{"index": 2, **GPU}, {"index": 0, **SMALL}]}},
        [("master", 0, None, None, None), ("worker", 0, SMALL["node_selector"], "worker", 1),
         ("worker", 1, BIG["node_selector"], "worker", None), ("worker", 2, GPU["node_selector"], "worker", 0)],
    ),
    "an indexed entry is not merged with the default": (
        "pytorch", {"pytorch": {"n_workers": 1, "default_worker": {**BIG, "env_vars": {"A": "1"}},
                                "worker": [{"index": 0, **SMALL}]}},
        [("master", 0, None, None, None), ("worker", 0, SMALL["node_selector"], "worker", 0)],
    ),
    "ps roles in framework order, with their own default and overrides": (
        "tensorflow", {"tensorflow": {"n_workers": 1, "n_ps": 2, "default_ps": BIG, "ps": [{"index": 1, **GPU}]}},
        [("chief", 0, None, None, None), ("ps", 0, BIG["node_selector"], "ps", None),
         ("ps", 1, GPU["node_selector"], "ps", 0), ("worker", 0, None, "worker", None)],
    ),
    "mxnet servers come from the ps section": (
        "mxnet", {"mxnet": {"n_workers": 1, "n_ps": 1, "default_ps": SMALL}},
        [("scheduler", 0, None, None, None), ("server", 0, SMALL["node_selector"], "ps", None),
         ("worker", 0, None, "worker", None)],
    ),
    "no ps replicas without n_ps": (
        "tensorflow", {"tensorflow": {"n_workers": 1}},
        [("chief", 0, None, None, None), ("worker", 0, None, "worker", None)],
    ),
}


@pytest.mark.parametrize(("framework", "environment", "expected"), CASES.values(), ids=CASES.keys())
def test_expand_replicas(framework, environment, expected):
    slots = expand_replicas(load_spec(framework, environment))
    got = [(s.role, s.index, s.settings.node_selector, s.spec_key, s.override) for s in slots]
    assert got == expected


def test_an_override_keeps_none_of_the_default():
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 2, "default_worker": {**BIG, "env_vars": {"A": "1"}},
                                             "worker": [{"index": 1, **SMALL}]}})
    default, override = expand_replicas(spec)[1:]
    assert default.settings.env_vars == {"A": "1"}
    assert not override.settings.env_vars
