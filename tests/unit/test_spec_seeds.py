"""Every environment example of the seed documents loads unchanged and yields the topology its text describes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import SpecValidationError, load_spec

SEEDS = Path(__file__).resolve().parent.parent / "data" / "seeds"
LAYOUT = Layout(model_dir="/models/x", output_path="/jobs/x/output.json", files_dir="/jobs/x/files")


@dataclass(frozen=True)
class SeedCase:
    name: str
    file: str
    framework: str | None
    #: (role, count) in plan order
    topology: tuple[tuple[str, int], ...]
    #: replica name suffix -> (cpu limit, memory limit, gpu devices) of its effective resources
    resources: dict[str, tuple[object, object, int]]


CASES = [
    SeedCase("master only, gpu 'request'", "polyaxon_master_resources.yaml", "tensorflow",
             (("chief", 1),), {"chief-0": (2, 1024, 1)}),
    SeedCase("tensorflow 2 ps 4 workers", "polyaxon_tensorflow_counts.yaml", None,
             (("chief", 1), ("ps", 2), ("worker", 4)), {}),
    SeedCase("tensorflow with per-role and index-2 resources", "polyaxon_tensorflow_resources.yaml", None,
             (("chief", 1), ("ps", 2), ("worker", 4)),
             {"chief-0": (2, 1024, 1), "worker-0": (2, 1024, 1), "worker-1": (2, 1024, 1),
              "worker-2": (2, 1024, 0), "worker-3": (2, 1024, 1), "ps-0": (1, 256, 0), "ps-1": (1, 256, 0)}),
    SeedCase("mxnet 1 server 3 workers", "polyaxon_mxnet.yaml", None,
             (("scheduler", 1), ("server", 1), ("worker", 3)), {}),
    SeedCase("pytorch 3 workers", "polyaxon_pytorch.yaml", None, (("master", 1), ("worker", 3)), {}),
    SeedCase("horovod master resources", "polyaxon_horovod_master.yaml", None,
             (("launcher", 1),), {"launcher-0": (2, 1024, 1)}),
    SeedCase("horovod 3 workers", "polyaxon_horovod_counts.yaml", None, (("launcher", 1), ("worker", 3)), {}),
    SeedCase("horovod 7 workers, index 2 overridden", "polyaxon_horovod_resources.yaml", None,
             (("launcher", 1), ("worker", 7)), {"worker-2": (2, 1024, 1), "worker-6": (2, 1024, 1)}),
    SeedCase("horovod legacy worker_resources", "polyaxon_horovod_legacy_worker_resources.yaml", None,
             (("launcher", 1), ("worker", 7)), {"worker-2": (2, 1024, 1), "worker-3": (None, None, 1)}),
]


def _topology(plan):
    counts: dict[str, int] = {}
    for replica in plan.replicas:
        counts[replica.role] = counts.get(replica.role, 0) + 1
    return tuple(counts.items())


def _limits(replica):
    res = replica.resources
    if res is None:
        return (None, None, 0)
    cpu = res.cpu.limits if res.cpu else None
    memory = res.memory.limits if res.memory else None
    return (cpu, memory, res.device_count("gpu"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_seed_example_yields_described_topology(case: SeedCase):
    spec = load_spec(case.framework, str(SEEDS / case.file))
    total = sum(n for _, n in case.topology)
    plan = build_plan(spec, "job", LocalAddressing(ports=range(20000, 20000 + total)), LAYOUT, ["python", "t.py"],
                      backend="local", launch=LOCAL_LAUNCH)

    assert _topology(plan) == case.topology
    assert plan.master.is_master and plan.master.index == 0
    for suffix, expected in case.resources.items():
        assert _limits(plan.replica(f"job-{suffix}")) == expected, suffix


def test_seed_yaml_text_and_dict_load_the_same_as_the_file():
    path = SEEDS / "polyaxon_tensorflow_resources.yaml"
    import yaml

    text = path.read_text()
    assert load_spec(None, text) == load_spec(None, str(path)) == load_spec(None, yaml.safe_load(text))
    assert load_spec("tensorflow", yaml.safe_load(text)["environment"]) == load_spec(None, text)


def test_pytorch_seed_written_under_the_mxnet_key_is_named_as_a_mismatch():
    # One seed document shows its PyTorch cluster under an "mxnet:" key; with framework="pytorch" that is an error
    # that says where the section belongs, not a silent MXNet job.
    with pytest.raises(SpecValidationError) as err:
        load_spec("pytorch", {"mxnet": {"n_workers": 3}})
    assert err.value.problems == [
        ("environment.mxnet", "does not match framework 'pytorch', whose section is 'environment.pytorch'")
    ]


def test_a_whole_polyaxonfile_gives_its_framework_and_environment():
    polyaxonfile = """
version: 1
kind: experiment
logging: {level: INFO}
declarations: {lr: 0.01}
framework: mxnet
environment:
  resources: {cpu: {requests: 1, limits: 2}}
  mxnet: {n_workers: 3, n_ps: 1}
build: {image: mxnet/python:1.9.1, build_steps: [pip install -r requirements.txt]}
run:
  cmd: python train.py --lr={{ lr }}
"""
    spec = load_spec(None, polyaxonfile)
    assert spec.framework == "mxnet"
    assert (spec.cluster.n_workers, spec.cluster.n_ps) == (3, 1)
    with pytest.raises(SpecValidationError) as err:
        load_spec("pytorch", polyaxonfile)
    assert err.value.paths == ["environment.mxnet"]
