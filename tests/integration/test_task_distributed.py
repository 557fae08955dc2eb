"""``@task.distributed`` through a real Airflow: the function runs on every replica, the master's value flows on."""

from __future__ import annotations

import re
import textwrap

import pytest
from airflow.sdk import DAG, task

from airflow_distributed.decorators.distributed import DistributedDecoratedOperator
from airflow_distributed.manifests.function_script import (
    ARGUMENTS_FILE,
    FUNCTION_FILE,
    function_arguments,
    function_script,
    shipping_problems,
)
from airflow_distributed.spec.errors import SpecValidationError
from tests.helpers import replica_processes, run_dag, xcom

SEEN = 3


@pytest.mark.usefixtures("airflow_db")
def test_a_dag_of_decorated_tasks_trains_with_ddp_and_hands_the_masters_value_downstream(capfd):
    run, states = run_dag("example_task_distributed", conf={"steps": 40})

    assert states == {"train": "success", "report": "success"}
    result = xcom(run, "train")
    # The master's value (rank 0 of 3), not a worker's, and the job really all-reduced.
    assert result["rank"] == 0 and result["world_size"] == 3 and result["identical"] is True
    assert result["final_loss"] < result["initial_loss"]
    assert xcom(run, "report") == result["final_loss"]
    # tracking works inside the function: its metrics are the operator's XComs.
    assert xcom(run, "train", "metrics")["loss"] > 0
    out = capfd.readouterr().out
    # Every replica ran the function (each set up its process group), as the job's own script.
    for replica in ("master-0", "worker-0", "worker-1"):
        assert f"starting {xcom(run, 'train', 'job_name')}-{replica}" in out
    assert replica_processes(xcom(run, "train", "job_name")) == []


@pytest.mark.usefixtures("airflow_db")
def test_a_functions_arguments_stay_out_of_the_log_readable_by_its_user_only_and_go_with_the_job(capfd):
    import os

    token = "s3cr3t-token-4711"
    run, states = run_dag("local_task_distributed_secret", conf={"token": token})

    assert states == {"stored": "success"}
    seen = xcom(run, "stored")
    assert seen["token_length"] == len(token)  # the function got it
    # Script and arguments readable by the job's user only, in a work folder that is its user's only...
    assert seen["modes"] == {"script": "0o600", "arguments": "0o600", "files": "0o700", "work": "0o700"}
    assert os.path.basename(seen["paths"]["script"]) == FUNCTION_FILE
    # ... and gone with the job.
    assert not any(os.path.exists(path) for path in seen["paths"].values())
    # Nowhere in the task's log: no replica's command line, where the values of arguments are, is logged.
    out = capfd.readouterr().out
    assert f"starting {xcom(run, 'stored', 'job_name')}-master-0: " in out
    assert token not in out


def _dag():
    return DAG("decorator_checks", schedule=None)


def test_a_function_that_cannot_be_shipped_is_refused_when_the_dag_is_parsed():
    import json as json_module

    limit = 3

    def uses_closure() -> int:
        return limit

    def uses_dag_globals() -> str:
        return json_module.dumps(SEEN)

    def wants_context(ti=None) -> None:
        return None

    with _dag():
        for function, message in [
            (uses_closure, "variables of an enclosing function (limit)"),
            (uses_dag_globals, "uses SEEN from the DAG file"),
            (wants_context, "ti are Airflow context keys"),
        ]:
            with pytest.raises(SpecValidationError, match=re.escape(message)) as error:
                task.distributed(framework="pytorch")(function)()
            assert "python_callable" in str(error.value)


def test_kubeflow_trainjob_and_command_are_refused():
    def fine() -> None:
        import os

        os.getpid()

    assert shipping_problems(fine) == []
    with _dag():
        for backend in ("kubeflow", "trainjob", "ray"):
            with pytest.raises(SpecValidationError, match=f"backend: '{backend}' cannot ship a function"):
                task.distributed(framework="pytorch", backend=backend, image="x")(fine)()
        with pytest.raises(TypeError, match="takes no 'command'"):
            task.distributed(framework="pytorch", command=["x"])(fine)()


def test_the_script_calls_the_function_with_json_arguments_and_records_the_return(tmp_path):
    source = textwrap.dedent('''
        def add(a, b=0):
            return {"sum": a + b}
    ''')
    script = function_script(source, "add")
    output = tmp_path / "output.json"
    path = tmp_path / FUNCTION_FILE
    path.write_text(script)
    arguments = tmp_path / ARGUMENTS_FILE
    arguments.write_text(function_arguments([2], {"b": {"x": 1}["x"]}))
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "AIRFLOW_DISTRIBUTED_OUTPUT": str(output), "PYTHONPATH": str(ROOT)}
    env.pop("RANK", None)
    subprocess.run([sys.executable, str(path), str(arguments)], check=True, env=env)
    import json

    assert json.loads(output.read_text())["return_value"] == {"sum": 3}
    with pytest.raises(TypeError, match=r"argument 'b' \(set\) cannot be sent"):
        function_arguments([1], {"b": {1}})


def test_the_decorated_operator_keeps_the_operators_template_fields_but_command():
    fields = DistributedDecoratedOperator.template_fields
    assert {"op_args", "op_kwargs", "environment", "env", "image"} <= set(fields)
    assert "command" not in fields and "args" not in fields


@pytest.mark.usefixtures("airflow_db", "kubernetes_connection")
def test_on_kubernetes_the_function_ships_in_a_configmap_its_arguments_in_a_secret_and_its_script_runs(emulator,
                                                                                                       tmp_path):
    """The ConfigMap's script is run here with the Secret's arguments, as the master's container would run them, with
    the pod's variables."""
    import base64
    import json
    import os
    import subprocess
    import sys

    from airflow_distributed.manifests.kubernetes import SECRET_FILES_DIR
    from tests.conftest import ROOT
    from tests.dags.kubernetes_dags import namespace_of
    from tests.helpers import wait_until
    from tests.kubernetes_helpers import NOTHING, Kubelet, settled, task_requests

    namespace = namespace_of("k8s_task_distributed")
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    seen: dict = {}

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        kubelet.run_all()
        (config_map,) = emulator.list("configmaps", namespace)
        (secret,) = emulator.list("secrets", namespace)
        master = kubelet.seen[kubelet.master]
        container = master["spec"]["containers"][0]
        seen.update(config_map=config_map, secret=secret, command=container["command"], pod=master)
        (tmp_path / FUNCTION_FILE).write_text(config_map["data"][FUNCTION_FILE])
        (tmp_path / ARGUMENTS_FILE).write_bytes(base64.b64decode(secret["data"][ARGUMENTS_FILE]))
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        env.update(AIRFLOW_DISTRIBUTED_OUTPUT=str(tmp_path / "return.json"), PYTHONPATH=str(ROOT),
                   PATH=os.environ["PATH"])
        subprocess.run([sys.executable, str(tmp_path / FUNCTION_FILE), str(tmp_path / ARGUMENTS_FILE)], check=True,
                       env=env)
        kubelet.master_exits(0, document=json.loads((tmp_path / "return.json").read_text()))

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag("k8s_task_distributed", conf={"b": "4711"})
    kubelet.check()

    assert states == {"add": "success", "downstream": "success"}
    assert xcom(run, "add") == {"sum": 4713, "rank": 0, "world_size": 3}
    assert xcom(run, "downstream") == 4713
    # One ConfigMap carries the function's source, and no argument; every pod runs it from the files volume.
    source = seen["config_map"]["data"][FUNCTION_FILE]
    assert "def add(a: int, b: str) -> dict:" in source and "@task.distributed(" not in source
    assert "4711" not in json.dumps(seen["config_map"]) and "4711" not in json.dumps(seen["pod"])
    # The arguments are in the job's Secret, mounted read-only where the command reads them.
    job = seen["secret"]["metadata"]["name"].removesuffix("-secret-files")
    assert seen["secret"]["metadata"]["name"] == f"{job}-secret-files"
    assert seen["secret"]["metadata"]["ownerReferences"][0]["name"] == job
    assert json.loads(base64.b64decode(seen["secret"]["data"][ARGUMENTS_FILE])) == {"args": [2, "4711"], "kwargs": {}}
    assert seen["command"][-3:] == ["python3", f"/airflow-distributed/files/{FUNCTION_FILE}",
                                    f"{SECRET_FILES_DIR}/{ARGUMENTS_FILE}"]
    mounts = {m["name"]: m for m in seen["pod"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["secret-files"] == {"name": "secret-files", "mountPath": SECRET_FILES_DIR, "readOnly": True}
    volumes = {v["name"]: v for v in seen["pod"]["spec"]["volumes"]}
    assert volumes["secret-files"]["secret"]["secretName"] == f"{job}-secret-files"
    settled(emulator, namespace, NOTHING)
