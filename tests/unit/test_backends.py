"""The backend registry is the only list of backend names, and each entry follows the ``Backend`` protocol."""

from __future__ import annotations

import typing

import pytest

from airflow_distributed.backends.base import (
    OPTION_NAMES,
    ClusterSettings,
    ProcessSettings,
    RaySettings,
    TrainJobSettings,
)
from airflow_distributed.backends.registry import REGISTRY, backend_named
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.operators.training import BACKENDS, Backend
from airflow_distributed.spec import SpecValidationError


def test_the_operators_backend_names_are_the_registrys():
    assert BACKENDS == tuple(REGISTRY) == ("local", "kubernetes", "kubeflow", "trainjob", "ray")
    assert typing.get_args(Backend) == BACKENDS  # the Literal a type checker sees says the same


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_backend_is_registered_under_its_own_name_and_is_a_new_object_per_operator(name):
    first, second = backend_named(name), backend_named(name)
    assert first is not None and type(first).name == name
    assert first is not second  # the state of one task's job is not another's
    for method in ("check", "run", "resume", "kill"):
        assert callable(getattr(first, method))


def test_an_unknown_backend_is_refused_at_parse_time_naming_the_allowed_ones():
    assert backend_named("slurm") is None
    with pytest.raises(SpecValidationError) as error:
        DistributedTrainingOperator(task_id="t", command=["python", "x.py"], backend="slurm")  # type: ignore[arg-type]
    assert "backend" in str(error.value) and "local, kubernetes, kubeflow, trainjob, ray" in str(error.value)


def test_a_new_backend_needs_only_a_registration(monkeypatch):
    """A backend the operator has never heard of runs a job through the protocol alone."""
    calls: list[tuple[str, object]] = []

    class EchoBackend:
        name = "echo"
        options_class = ClusterSettings  # it receives the Kubernetes-side backends' options

        def check(self, settings, spec):
            calls.append(("check", spec.framework if spec else None))
            return []

        def run(self, task, settings, context, spec, job_name, command):
            calls.append(("run", (settings.options.image, job_name, tuple(command))))
            return {"job_name": job_name, "state": "started"}

        def resume(self, task, settings, context, event):
            return {"job_name": event["job_name"], "state": "started"}

        def kill(self):
            calls.append(("kill", None))

    monkeypatch.setitem(REGISTRY, "echo", EchoBackend)
    operator = DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "x.py"],
                                           args=["--n", "1"], image="img:1", backend="echo")  # type: ignore[arg-type]

    class TI:
        dag_id, task_id, run_id, map_index, try_number = "d", "t", "r", -1, 1

    result = operator.execute({"ti": TI()})  # type: ignore[arg-type]
    operator.on_kill()
    # Checked when the DAG is parsed, and again with the rendered values before the job starts.
    assert calls[:2] == [("check", "pytorch"), ("check", "pytorch")]
    assert calls[2][0] == "run" and calls[2][1][0] == "img:1" and calls[2][1][2] == ("python", "x.py", "--n", "1")
    assert result == {"job_name": calls[2][1][1], "state": "started"}
    assert calls[3] == ("kill", None)


def test_settings_are_frozen_and_hold_the_operators_arguments():
    operator = DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "x.py"],
                                           backend="kubernetes",
                                           image="img:1", namespace="ml", startup_timeout=12)
    settings = operator._settings()
    assert (settings.options.image, settings.options.namespace, settings.startup_timeout) == ("img:1", "ml", 12)
    with pytest.raises(AttributeError):
        settings.options.image = "other"  # type: ignore[misc]


@pytest.mark.parametrize("backend, options", [("local", ProcessSettings), ("kubernetes", ClusterSettings),
                                              ("kubeflow", ClusterSettings), ("trainjob", TrainJobSettings),
                                              ("ray", RaySettings)])
def test_a_backend_receives_its_own_options_typed_and_the_others_only_by_name(backend, options):
    operator = DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "x.py"],
                                           backend=backend)
    settings = operator._settings()
    assert type(settings.options) is options
    own = set(options.__dataclass_fields__)
    # Every option is either the backend's own or another's, never both, and every one is the operator's argument.
    assert own.isdisjoint(settings.others) and own | set(settings.others) == set(OPTION_NAMES)
    assert all(hasattr(operator, name) for name in OPTION_NAMES)
    assert settings.argument("startup_timeout") == operator.startup_timeout
    assert settings.argument("ray_conn_id") == "ray_default" and settings.argument("namespace") is None


def test_kubernetes_names_the_platform_and_the_first_names_still_import():
    """``ClusterSettings`` holds the options of the three backends on a cluster and ``PodJobHook`` is the pods
    backend's hook; DAGs written against the first names (``KubernetesSettings``, ``DistributedTrainingHook``) work."""
    from airflow_distributed.backends import base
    from airflow_distributed.hooks import kubernetes

    assert base.KubernetesSettings is base.ClusterSettings and base.ForKubernetes == base.ForCluster
    assert issubclass(TrainJobSettings, base.ClusterSettings)
    assert kubernetes.DistributedTrainingHook is kubernetes.PodJobHook
    assert kubernetes.PodJobHook.hook_name == "Distributed training (Kubernetes)"
    assert {"ClusterSettings", "KubernetesSettings", "ForCluster", "ForKubernetes"} <= set(base.__all__)
    assert {"PodJobHook", "DistributedTrainingHook"} <= set(kubernetes.__all__)
