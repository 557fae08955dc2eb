"""A command that starts its own launcher (torchrun, DeepSpeed's, Accelerate's): recognised by its program, its
``python -m`` module or the first words of an ``sh -c`` line, and refused when the DAG is parsed wherever the product
starts the replica's processes itself or the launcher would train at another world size than the plan's (issue 32)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import SpecValidationError, load_spec
from airflow_distributed.spec.commands import launcher_call

CLUSTER_BACKENDS = ["kubernetes", "kubeflow", "trainjob"]
ALL_BACKENDS = ["local", *CLUSTER_BACKENDS, "ray"]


def operator(backend: str, command: list[str], environment: dict[str, Any],
             **kwargs: Any) -> DistributedTrainingOperator:
    if backend in CLUSTER_BACKENDS:
        kwargs.setdefault("image", "trainer:1")
    return DistributedTrainingOperator(task_id="t", framework="pytorch", command=command, environment=environment,
                                       backend=backend, **kwargs)


def refused(backend: str, command: list[str], environment: dict[str, Any], **kwargs: Any) -> SpecValidationError:
    with pytest.raises(SpecValidationError) as error:
        operator(backend, command, environment, **kwargs)
    return error.value


# ---------------------------------------------------------------------------------------------- recognised

@pytest.mark.parametrize("argv, launcher, spelling", [
    (["torchrun", "--nproc-per-node", "4", "train.py"], "torchrun", "torchrun"),
    (["/opt/venv/bin/torchrun", "train.py"], "torchrun", "torchrun"),
    (["python", "-m", "torch.distributed.run", "train.py"], "torchrun", "python -m torch.distributed.run"),
    (["python3.11", "-u", "-mtorch.distributed.launch", "train.py"], "torchrun", "python -m torch.distributed.launch"),
    (["env", "NCCL_DEBUG=INFO", "torchrun", "train.py"], "torchrun", "torchrun"),
    (["deepspeed", "--num_gpus", "2", "train.py"], "deepspeed", "deepspeed"),
    (["python", "-m", "deepspeed.launcher.runner", "train.py"], "deepspeed", "python -m deepspeed.launcher.runner"),
    (["python3", "-m", "deepspeed.launcher.launch", "train.py"], "deepspeed", "python -m deepspeed.launcher.launch"),
    (["accelerate", "launch", "train.py"], "accelerate", "accelerate launch"),
    (["python", "-m", "accelerate.commands.launch", "train.py"], "accelerate", "python -m accelerate.commands.launch"),
    (["sh", "-c", "torchrun --nproc-per-node 4 train.py"], "torchrun", "torchrun (in sh -c)"),
    (["bash", "-lc", "cd /app && pip install -q . && exec deepspeed train.py"], "deepspeed", "deepspeed (in bash -c)"),
    (["sh", "-c", "set -e\nNCCL_DEBUG=INFO python -m torch.distributed.run train.py"], "torchrun",
     "python -m torch.distributed.run (in sh -c)"),
])
def test_each_spelling_of_a_launcher_is_recognised(argv, launcher, spelling):
    found = launcher_call(argv)
    assert found is not None and (found.launcher, found.spelling) == (launcher, spelling)


@pytest.mark.parametrize("argv", [
    ["python", "train.py", "torchrun"],
    ["python", "train.py", "--launcher", "deepspeed"],
    ["python", "-c", "import torch.distributed.run"],
    ["python", "torchrun.py"],
    ["accelerate", "config"],
    ["sh", "-c", "echo torchrun is not used here; python train.py"],
    ["sh", "train_with_torchrun.sh"],
])
def test_a_command_that_only_mentions_a_launcher_starts_none(argv):
    assert launcher_call(argv) is None


# ---------------------------------------------------------------------------------------------- refused at parse

@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("command", [["torchrun", "--nproc-per-node", "2", "train.py"],
                                     ["python", "-m", "torch.distributed.run", "train.py"],
                                     ["sh", "-c", "cd /app && torchrun train.py"]])
def test_a_launcher_in_the_command_is_refused_where_the_product_starts_the_processes(backend, command):
    error = refused(backend, command, {"pytorch": {"n_workers": 1, "n_proc_per_node": 2}})
    assert error.paths == ["command"]
    message = error.problems[0][1]
    assert ("environment.pytorch.n_proc_per_node=2 already has each replica's processes started under a "
            "launcher") in message
    assert "start the script with python, and set environment.pytorch.n_proc_per_node" in message
    operator(backend, ["python", "train.py"], {"pytorch": {"n_workers": 1, "n_proc_per_node": 2}})


@pytest.mark.parametrize("environment, said", [
    ({"launcher": "deepspeed"}, "environment.pytorch.launcher='deepspeed' already has"),
    ({"launcher": "torchrun", "n_proc_per_node": "auto"}, "launcher='torchrun' and n_proc_per_node='auto' already"),
    ({"elastic": {"max_restarts": 1}}, "environment.pytorch.elastic already runs each replica under torch's elastic"),
])
def test_the_setting_that_starts_the_processes_is_named(environment, said):
    error = refused("local", ["deepspeed", "train.py"], {"pytorch": {"n_workers": 1, **environment}})
    assert error.paths == ["command"] and said in str(error)


def test_a_launcher_that_args_start_is_refused_naming_args():
    error = refused("local", ["bash", "-c"], {"pytorch": {"n_workers": 1, "launcher": "torchrun"}},
                    args=["torchrun train.py"])
    assert error.paths == ["args"] and "starts torchrun (in bash -c)" in str(error)


@pytest.mark.parametrize("backend", ["local", "kubernetes"])
@pytest.mark.parametrize("command", [["torchrun", "train.py"], ["torchrun", "--nproc_per_node=1", "train.py"],
                                     ["torchrun", "--nnodes", "2", "train.py"], ["python", "train.py", "torchrun"]])
def test_where_the_product_starts_no_launcher_a_torchrun_at_the_plans_world_size_is_kept(backend, command):
    # torchrun reads the replica's PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE=1 and the master's address.
    assert operator(backend, command, {"pytorch": {"n_workers": 1}}).spec is not None


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_a_torchrun_at_another_world_size_is_refused_naming_both(backend):
    error = refused(backend, ["torchrun", "--nproc-per-node", "4", "train.py"], {"pytorch": {"n_workers": 1}})
    assert error.paths == ["command"]
    assert "--nproc-per-node '4': world size 8, not the plan's 2 (2 replicas x 1 process)" in str(error)


@pytest.mark.parametrize("command, said", [
    (["torchrun", "--standalone", "train.py"], "--standalone: each of the 2 replicas would train alone"),
    (["torchrun", "--nnodes=1", "train.py"], "--nnodes '1', but the job has 2 replicas"),
])
def test_a_torchrun_whose_nodes_are_not_the_jobs_replicas_is_refused(command, said):
    error = refused("local", command, {"pytorch": {"n_workers": 1}})
    assert error.paths == ["command"] and said in str(error)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("command", [["deepspeed", "train.py"], ["accelerate", "launch", "train.py"]])
def test_deepspeed_or_accelerate_in_the_command_is_refused_even_for_one_process(backend, command):
    error = refused(backend, command, {"pytorch": {"n_workers": 1}})
    assert error.paths == ["command"] and "reads none of the replica's variables" in str(error)


@pytest.mark.parametrize("backend", ["kubeflow", "trainjob"])
def test_under_a_training_operator_a_torchrun_must_say_its_one_process(backend):
    error = refused(backend, ["torchrun", "train.py"], {"pytorch": {"n_workers": 1}})
    assert error.paths == ["command"] and "give --nproc-per-node 1" in str(error)
    operator(backend, ["torchrun", "--nproc-per-node", "1", "train.py"], {"pytorch": {"n_workers": 1}})


def test_a_templated_program_is_checked_once_rendered_before_anything_starts():
    task = operator("local", ["{{ params.program }}", "train.py"], {"pytorch": {"n_workers": 1, "n_proc_per_node": 2}})
    task.render_template_fields({"params": {"program": "torchrun"}})
    assert task.command == ["torchrun", "train.py"]
    with pytest.raises(SpecValidationError) as error:
        task.execute({})  # refused before the context is read: no job is named, no process started
    assert error.value.paths == ["command"] and "starts torchrun, but" in str(error.value)


def test_a_command_that_mentions_torchrun_as_an_argument_is_still_wrapped():
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1, "n_proc_per_node": 2}})
    plan = build_plan(spec, "job", LocalAddressing(ports=range(31000, 31004)),
                      Layout(model_dir="/m", output_path="/o/output.json", files_dir="/f"),
                      ["python", "train.py", "torchrun"], backend="local", launch=LOCAL_LAUNCH)
    assert plan.master.command[:3] == ("python3", "-m", "torch.distributed.run")
    assert plan.master.command[-3:] == ("python", "train.py", "torchrun")


NESTED_LAUNCHER_DAG = '''
import pendulum
from airflow.sdk import DAG
from airflow_distributed.operators import DistributedTrainingOperator

with DAG("nested_launcher", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    DistributedTrainingOperator(
        task_id="train", framework="pytorch", backend="local",
        command=["torchrun", "--nproc-per-node", "4", "train.py"],
        environment={"pytorch": {"n_workers": 1, "n_proc_per_node": 4}},
    )
'''


def test_a_dag_whose_command_starts_a_second_launcher_does_not_import(tmp_path: Path):
    # Refused when the file is parsed: no task instance, hence no process, ever exists.
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "nested_launcher.py").write_text(NESTED_LAUNCHER_DAG)
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.dags == {}
    (error,) = bag.import_errors.values()
    assert ("command: starts torchrun, but environment.pytorch.n_proc_per_node=4 already has each replica's "
            "processes started under a launcher") in error


def test_a_templated_count_is_left_for_the_check_once_rendered_the_launcher_is_not():
    environment = {"pytorch": {"n_workers": 1}}
    assert operator("local", ["torchrun", "--nproc-per-node", "{{ params.n }}", "train.py"], environment)
    error = refused("local", ["torchrun", "train.py"], {"pytorch": {"n_workers": 1, "n_proc_per_node": 2}},
                    args=["--epochs", "{{ params.epochs }}"])
    assert error.paths == ["command"]
