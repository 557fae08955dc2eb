"""The backends' checks of the operator's arguments when the DAG is parsed: a namespace that is not a DNS-1123
label, settings a backend cannot honour (refused, naming the setting), settings it ignores harmlessly (said once
in the task log), and the ``trainjob`` extra missing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from typing import Any

import pytest

from airflow_distributed.backends.base import BackendSettings
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.spec import SpecValidationError, load_spec
from tests.conftest import ROOT
from tests.dags.check_dags import CLUSTER_ARGUMENTS, POD_SETTINGS

CLUSTER_BACKENDS = ["kubernetes", "kubeflow", "trainjob"]


def operator(backend: str = "kubernetes", environment: Any = None, **kwargs: Any) -> DistributedTrainingOperator:
    if backend != "local":
        kwargs.setdefault("image", "trainer:1")
    return DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "train.py"],
                                       environment=environment or {"pytorch": {"n_workers": 1}}, backend=backend,
                                       **kwargs)


def refused(**kwargs: Any) -> SpecValidationError:
    with pytest.raises(SpecValidationError) as error:
        operator(**kwargs)
    return error.value


# ---------------------------------------------------------------------------------------------- namespace

HOSTILE = ["ml-$(touch /tmp/owned)", "ml`id`", "ml;reboot", "ML-Training", "ml_training", "ml.training", "-ml", "ml-",
           "m" * 64, "ml\n", " ml", 42]


@pytest.mark.parametrize("backend", CLUSTER_BACKENDS)
@pytest.mark.parametrize("namespace", HOSTILE)
def test_a_namespace_that_is_not_a_dns_1123_label_is_refused_at_parse_without_echoing_it(backend, namespace):
    error = refused(backend=backend, namespace=namespace)
    assert error.problems == [("namespace", "is not a valid namespace: it must be a DNS-1123 label: lower-case "
                               "alphanumeric characters or '-', starting and ending with an alphanumeric character, "
                               "at most 63 characters (e.g. 'ml-training')")]


@pytest.mark.parametrize("backend", CLUSTER_BACKENDS)
def test_a_dns_1123_label_or_a_template_passes_the_parse(backend):
    for namespace in ("ml", "ml-training-2", "a" * 63, "{{ params.namespace }}", None, ""):
        operator(backend=backend, namespace=namespace)


class ConnectionNamespace:
    """What ``job_namespace`` asks of a hook: the connection's ``namespace`` extra (else ``default``)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def default_namespace(self) -> str:
        return self.namespace


@pytest.mark.parametrize(("given", "connection", "path"), [
    ("ml-{{ x }}", "ml", "namespace"),  # rendered from a value that held braces: no longer a template to skip
    ("ml-$(id)", "ml", "namespace"),
    (None, "Team_A", "namespace (of connection 'kubernetes_default')"),
])
def test_the_namespace_a_job_runs_in_is_refused_unless_a_dns_1123_label(given, connection, path):
    from airflow_distributed.backends.job_run import job_namespace

    settings = operator(namespace="ml")._settings()
    settings = replace(settings, options=replace(settings.options, namespace=given))
    with pytest.raises(SpecValidationError) as error:
        job_namespace(settings, ConnectionNamespace(connection), "train")
    assert error.value.paths == [path] and "DNS-1123 label" in str(error.value)
    assert "$(id)" not in str(error.value) and "{{" not in str(error.value)
    unset = replace(settings, options=replace(settings.options, namespace=None))
    assert job_namespace(unset, ConnectionNamespace("ml"), "train") == "ml"


# ---------------------------------------------------------------------------------------------- trainjob's settings


@pytest.mark.parametrize("backend", ["local", "kubernetes", "kubeflow"])
def test_the_trainjob_runtime_is_refused_on_the_other_backends_naming_it(backend):
    error = refused(backend=backend, runtime="torch-distributed")
    assert error.paths == ["runtime"] and "backend='trainjob' only" in str(error)
    error = refused(backend=backend, runtime="{{ params.runtime }}", runtime_kind="TrainingRuntime")
    assert error.paths == ["runtime", "runtime_kind"]
    operator(backend="trainjob", runtime="torch-distributed", runtime_kind="TrainingRuntime")


N_PROC = {"pytorch": {"n_workers": 1, "n_proc_per_node": 4}}


@pytest.mark.parametrize("form", ["dict", "yaml", "file", "polyaxonfile"])
def test_n_proc_per_node_is_accepted_by_every_backend_whatever_form_the_environment_has(form, tmp_path):
    environment: Any = N_PROC
    if form == "yaml":
        environment = "pytorch:\n  n_workers: 1\n  n_proc_per_node: 4\n"
    elif form == "file":
        path = tmp_path / "environment.json"
        path.write_text(json.dumps(N_PROC))
        environment = str(path)
    elif form == "polyaxonfile":
        path = tmp_path / "polyaxonfile.yaml"
        path.write_text("version: 1\nkind: experiment\nframework: pytorch\nenvironment:\n"
                        "  pytorch: {n_workers: 1, n_proc_per_node: 4}\n")
        environment = str(path)
    for backend in ("ray", "trainjob", "local", "kubernetes", "kubeflow"):
        # backend='ray' runs the job's Python, in no image
        operator(backend=backend, environment=environment, **({"image": None} if backend == "ray" else {}))


AUTO_UNEVEN = {"resources": {"gpu": {"limits": 2}}, "pytorch": {"n_workers": 2, "n_proc_per_node": "auto"}}


@pytest.mark.parametrize("backend", ["local", "kubernetes", "trainjob", "ray"])
def test_auto_processes_over_replicas_asking_different_gpu_counts_are_refused_naming_each_count(backend):
    error = refused(backend=backend, environment=AUTO_UNEVEN, **({"image": None} if backend == "ray" else {}))
    assert "environment.pytorch.n_proc_per_node" in error.paths
    assert "'auto' gives the replicas different process counts (master 0: 2, worker 0: 1, worker 1: 1)" in str(error)
    even = {**AUTO_UNEVEN, "pytorch": {**AUTO_UNEVEN["pytorch"], "default_worker": {"resources": {"gpu": {
        "limits": 2}}}}}
    operator(backend="kubernetes", environment=even)


@pytest.mark.parametrize("value", [0, -1, 1025, "all", 2.5, True])
def test_n_proc_per_node_takes_a_count_or_auto_only(value):
    error = refused(backend="local", environment={"pytorch": {"n_workers": 1, "n_proc_per_node": value}})
    assert error.paths == ["environment.pytorch.n_proc_per_node"]
    assert "a number of processes 1..1024, or 'auto' (the replica's GPUs, else 1)" in str(error)


def test_n_proc_per_node_is_refused_on_a_framework_whose_launcher_runs_one_process_per_replica():
    with pytest.raises(SpecValidationError) as raised:
        DistributedTrainingOperator(task_id="t", framework="jax", command=["python", "train.py"], backend="local",
                                    environment={"jax": {"n_workers": 1, "n_proc_per_node": 2}})
    error = raised.value
    assert error.paths == ["environment.jax.n_proc_per_node"] and "unknown key 'n_proc_per_node'" in str(error)



@pytest.mark.parametrize("value", ["mpirun", "DeepSpeed", "", 3])
def test_the_launcher_is_one_of_those_the_plan_can_wrap_a_command_in(value):
    error = refused(backend="local", environment={"pytorch": {"n_workers": 1, "launcher": value}})
    assert error.paths == ["environment.pytorch.launcher"]
    assert ("is not allowed: one of 'torchrun', 'deepspeed', 'accelerate' (a PyTorch job over MPI is "
            "framework='horovod')") in str(error)


@pytest.mark.parametrize("backend, why", [
    ("kubeflow", "each role's pods run one template, under torchrun only"),
    ("ray", "one actor per replica runs its command"),
    ("trainjob", "its runtime starts torchrun in every node"),
])
def test_a_launcher_the_backend_would_not_run_is_refused_naming_who_starts_the_processes(backend, why):
    environment = {"pytorch": {"n_workers": 1, "launcher": "deepspeed"}}
    extra = {"image": None} if backend == "ray" else {}
    error = refused(backend=backend, environment=environment, **extra)
    assert error.paths == ["environment.pytorch.launcher"]
    assert f"backend={backend!r} would not run 'deepspeed': {why}; use backend='local' or 'kubernetes'" in str(error)
    for allowed in ("local", "kubernetes"):
        operator(backend=allowed, environment=environment)
    for operators in ("kubeflow", "trainjob"):
        operator(backend=operators, environment={"pytorch": {"n_workers": 1, "launcher": "torchrun"}})


@pytest.mark.parametrize("launcher", ["deepspeed", "accelerate"])
def test_only_torchrun_runs_an_elastic_job(launcher):
    elastic = {"pytorch": {"n_workers": 1, "elastic": {"max_restarts": 1}, "launcher": launcher}}
    error = refused(backend="local", environment=elastic)
    assert error.paths == ["environment.pytorch.launcher"]
    assert f"{launcher!r} cannot run an elastic job" in str(error) and "use launcher 'torchrun'" in str(error)
    operator(backend="local", environment={"pytorch": {**elastic["pytorch"], "launcher": "torchrun"}})

# ---------------------------------------------------------------------------------------------- local


def test_the_local_backend_refuses_a_model_volume_naming_it():
    error = refused(backend="local", model_volume="models-claim")
    assert error.paths == ["model_volume"] and "model_dir" in str(error)


@pytest.mark.parametrize("setting", ["secret_refs", "config_map_refs"])
def test_the_local_backend_refuses_variables_from_secrets_or_config_maps_wherever_they_are(setting):
    environment = {setting: ["db"], "pytorch": {"n_workers": 2, "default_worker": {setting: ["db"]},
                                                "worker": [{"index": 1, setting: ["db"]}]}}
    error = refused(backend="local", environment=environment)
    assert error.paths == [f"environment.{setting}", f"environment.pytorch.default_worker.{setting}",
                           f"environment.pytorch.worker[0].{setting}"]
    assert "would start without their variables" in str(error)
    operator(backend="kubernetes", environment=environment)


def _local_settings(**kwargs: Any) -> BackendSettings:
    return operator(backend="local", **kwargs)._settings()


@pytest.mark.parametrize("argument", list(CLUSTER_ARGUMENTS))
def test_each_cluster_argument_the_local_backend_ignores_is_named_once(argument):
    from airflow_distributed.backends.local import ignored_by_local

    settings = _local_settings(**{argument: CLUSTER_ARGUMENTS[argument]})
    ignored = ignored_by_local(settings, load_spec("pytorch", {"pytorch": {"n_workers": 1}}))
    named = [setting for setting, _ in ignored]
    assert [name for name in named if name.split("=")[0] == argument] == named and len(named) == 1
    assert ignored_by_local(_local_settings(), load_spec("pytorch", None)) == []


@pytest.mark.parametrize("setting", list(POD_SETTINGS))
def test_each_pod_setting_the_local_backend_ignores_is_named_once_with_every_path_that_gives_it(setting):
    from airflow_distributed.backends.local import ignored_by_local

    environment = {setting: POD_SETTINGS[setting], "pytorch": {"n_workers": 1, "default_worker":
                                                               {setting: POD_SETTINGS[setting]}}}
    spec = load_spec("pytorch", environment)
    ignored = ignored_by_local(_local_settings(environment=environment), spec)
    assert [name for name, _ in ignored] == [f"environment.{setting}, environment.pytorch.default_worker.{setting}"]


def test_the_cluster_backends_name_python_and_log_replicas_they_ignore():
    from airflow_distributed.backends.job_run import ignored_in_cluster

    settings = operator(backend="kubeflow", python="/opt/venv/bin/python", log_replicas="all")._settings()
    assert [name for name, _ in ignored_in_cluster(settings, "kubeflow")] == ["python", "log_replicas"]
    assert [name for name, _ in ignored_in_cluster(settings, "kubernetes")] == ["python"]


# ---------------------------------------------------------------------------------------------- the trainjob extra


def test_without_the_trainjob_extra_the_parse_says_which_extra_to_install():
    """A Python where ``kubeflow_trainer_api`` cannot be imported (a ``None`` entry in ``sys.modules``, as for a
    module that is not there): parsing a DAG with ``backend="trainjob"`` names the extra, not a missing module."""
    code = textwrap.dedent("""
        import sys
        sys.modules["kubeflow_trainer_api"] = None
        from airflow.sdk import DAG
        from airflow_distributed.operators import DistributedTrainingOperator
        from airflow_distributed.spec import SpecValidationError
        try:
            with DAG(dag_id="d", schedule=None):
                DistributedTrainingOperator(task_id="train", framework="pytorch", command=["train"],
                                            image="trainer:1", backend="trainjob")
        except SpecValidationError as error:
            print(error)
        else:
            print("parsed")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "backend: backend='trainjob' needs the 'trainjob' extra" in out
    assert "pip install 'airflow-distributed[trainjob]'" in out


@pytest.mark.parametrize("interval", [0, -1.0, "15", True, float("inf")])
def test_a_logging_interval_that_is_not_seconds_above_zero_is_refused_at_parse_naming_it(interval):
    with pytest.raises(SpecValidationError, match=r"logging_interval: .* is not allowed: seconds, a number > 0"):
        operator(deferrable=True, logging_interval=interval)


@pytest.mark.parametrize("interval", [None, 0.5, 60])
def test_a_logging_interval_of_seconds_or_none_passes_the_parse(interval):
    assert operator(deferrable=True, logging_interval=interval).logging_interval == interval
