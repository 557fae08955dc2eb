"""``@task.distributed`` through a real Airflow: the function runs on every replica, the master's value flows on."""

from __future__ import annotations

import re
import textwrap

import pytest
from airflow.sdk import DAG, task

from airflow_distributed.decorators.distributed import DistributedDecoratedOperator
from airflow_distributed.manifests.function_script import FUNCTION_FILE, function_script, shipping_problems
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
    assert FUNCTION_FILE in out
    assert replica_processes(xcom(run, "train", "job_name")) == []


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
        for backend in ("kubeflow", "trainjob"):
            with pytest.raises(SpecValidationError, match=f"backend: '{backend}' cannot ship a function"):
                task.distributed(framework="pytorch", backend=backend, image="x")(fine)()
        with pytest.raises(TypeError, match="takes no 'command'"):
            task.distributed(framework="pytorch", command=["x"])(fine)()


def test_the_script_calls_the_function_with_json_arguments_and_records_the_return(tmp_path):
    source = textwrap.dedent('''
        def add(a, b=0):
            return {"sum": a + b}
    ''')
    script = function_script(source, "add", [2], {"b": {"x": 1}["x"]})
    output = tmp_path / "output.json"
    path = tmp_path / FUNCTION_FILE
    path.write_text(script)
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "AIRFLOW_DISTRIBUTED_OUTPUT": str(output), "PYTHONPATH": str(ROOT)}
    env.pop("RANK", None)
    subprocess.run([sys.executable, str(path)], check=True, env=env)
    import json

    assert json.loads(output.read_text())["return_value"] == {"sum": 3}
    with pytest.raises(TypeError, match=r"argument 'b' \(set\) cannot be sent"):
        function_script(source, "add", [1], {"b": {1}})


def test_the_decorated_operator_keeps_the_operators_template_fields_but_command():
    fields = DistributedDecoratedOperator.template_fields
    assert {"op_args", "op_kwargs", "environment", "env", "image"} <= set(fields)
    assert "command" not in fields and "args" not in fields


@pytest.mark.usefixtures("airflow_db", "kubernetes_connection")
def test_on_kubernetes_the_function_ships_in_the_jobs_configmap_and_its_script_runs(emulator, tmp_path):
    """The ConfigMap's script is run here as the master's container would run it, with the pod's variables."""
    import json
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT
    from tests.dags.kubernetes_dags import namespace_of
    from tests.helpers import run_dag_at, wait_until
    from tests.kubernetes_helpers import NOTHING, Kubelet, settled, task_requests

    namespace = namespace_of("k8s_task_distributed")
    emulator.create_namespace(namespace)
    emulator.reset_requests()
    seen: dict = {}

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=60)
        kubelet.run_all()
        (config_map,) = emulator.list("configmaps", namespace)
        master = kubelet.seen[kubelet.master]
        container = master["spec"]["containers"][0]
        seen.update(config_map=config_map, command=container["command"])
        (tmp_path / FUNCTION_FILE).write_text(config_map["data"][FUNCTION_FILE])
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        env.update(AIRFLOW_DISTRIBUTED_OUTPUT=str(tmp_path / "return.json"), PYTHONPATH=str(ROOT),
                   PATH=os.environ["PATH"])
        subprocess.run([sys.executable, str(tmp_path / FUNCTION_FILE)], check=True, env=env)
        kubelet.master_exits(0, document=json.loads((tmp_path / "return.json").read_text()))

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("k8s_task_distributed")
    kubelet.check()

    assert states == {"add": "success", "downstream": "success"}
    assert xcom(run, "add") == {"sum": 5, "rank": 0, "world_size": 3}
    assert xcom(run, "downstream") == 5
    # One ConfigMap carries the function; every pod runs it from the files volume.
    source = seen["config_map"]["data"][FUNCTION_FILE]
    assert "def add(a: int, b: str) -> dict:" in source and "@task.distributed(" not in source
    assert seen["command"][-2:] == ["python", f"/airflow-distributed/files/{FUNCTION_FILE}"]
    settled(emulator, namespace, NOTHING)
