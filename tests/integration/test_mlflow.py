"""MLflow tracking (``mlflow_conn_id``) against a real tracking server on 127.0.0.1 (``tests/mlflow_server.py``):
what a job sends, read back over MLflow's REST API; one run across a retry; the registry; a server that is down
or stops mid-job; credentials kept out of logs and XComs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy import select

from tests.api_server import api_client, as_user
from tests.dags.mlflow_dags import (
    CRASH_AT,
    DEFERRED_NAMESPACE,
    EVERY,
    KILLED_GRACE,
    LOG_EVERY,
    MODEL_NAME,
    RESUME_STEPS,
    STEPS,
    TENSORBOARD,
)
from tests.helpers import replica_processes, run_dag, run_dag_at, wait_until, xcom
from tests.kubernetes_helpers import DOCUMENT, Kubelet, task_requests, train_and_succeed
from tests.mlflow_server import MlflowReader, MlflowServer, build_server_environment

pytestmark = pytest.mark.usefixtures("airflow_db")

LOGIN, PASSWORD, TOKEN = "trainer", "pa55-Xq81-never-shown", "tok-7Hc2-never-shown"
CONN_VARIABLE = "AIRFLOW_CONN_MLFLOW_TEST"


@pytest.fixture(scope="module")
def mlflow_server():
    build_server_environment()
    server = MlflowServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert server.process is not None and server.process.poll() is not None


@pytest.fixture
def connection(mlflow_server, monkeypatch):
    """``mlflow_test`` with credentials (the test server does not ask for them: they must still go nowhere else)."""
    monkeypatch.setenv(CONN_VARIABLE, mlflow_server.connection(login=LOGIN, password=PASSWORD,
                                                              extra={"token": TOKEN}))
    return mlflow_server


def _runs(server: MlflowServer, experiment: str, auth: tuple[str, str] | None = None) -> list:
    return MlflowReader(server.uri, auth).runs(experiment)


def _history(server: MlflowServer, run_id: str, key: str) -> list[tuple[int, float]]:
    return MlflowReader(server.uri).history(run_id, key)


def _all_xcoms(run) -> list[tuple[str, str]]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.execute(select(XComModel.key, XComModel.value).where(XComModel.run_id == run.run_id)).all()
    return [(key, json.dumps(value, default=str)) for key, value in rows]


def _asset_extras(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri).order_by(AssetEvent.id)).all()
    return [extra for (extra,) in rows]


def _assert_no_secret(text: str) -> None:
    assert PASSWORD not in text and TOKEN not in text


def test_a_ddp_job_is_one_mlflow_run_with_its_history_params_tags_model_and_status(connection, capfd):
    server = connection
    run, states = run_dag("test_mlflow_ddp")
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    runs = _runs(server, "test_mlflow_ddp")
    assert len(runs) == 1
    mlflow_run = runs[0]
    job = xcom(run, "train", "job")
    job_name = xcom(run, "train", "job_name")
    assert mlflow_run.status == "FINISHED"
    assert mlflow_run.name == job_name
    # The job's shape and the DAG's chosen params.
    params = mlflow_run.params
    assert params["framework"] == "pytorch" and params["backend"] == "local"
    assert (params["replicas"], params["replicas.master"], params["replicas.worker"]) == ("3", "1", "2")
    assert json.loads(params["resources.worker"]) == {"cpu": {"limits": 1, "requests": 1}}
    assert (params["param.steps"], params["param.lr"]) == (str(STEPS), "0.05")
    # Tags that name the task instance and how it ended.
    tags = mlflow_run.tags
    assert {key: tags[f"airflow_distributed.{key}"] for key in
            ("dag_id", "task_id", "run_id", "map_index", "try_number", "job_name", "backend", "framework", "state")} \
        == {"dag_id": "test_mlflow_ddp", "task_id": "train", "run_id": run.run_id, "map_index": "-1",
            "try_number": "1", "job_name": job_name, "backend": "local", "framework": "pytorch",
            "state": "succeeded"}
    assert tags["airflow_distributed.model_path"] == xcom(run, "train", "model_path")
    # The master's whole history at its steps, as the job record has it; the final metrics at the last step.
    expected = [(point["step"], point["loss"]) for point in job["history"] if "loss" in point]
    assert [step for step, _ in expected] == [*range(LOG_EVERY, STEPS + 1, LOG_EVERY)]
    assert _history(server, mlflow_run.run_id, "loss") == expected
    assert mlflow_run.metrics["final_loss"] == pytest.approx(job["metrics"]["final_loss"])
    assert mlflow_run.metrics["usage.cpu_seconds"] == pytest.approx(job["usage"]["cpu_seconds"])
    # The model file as an artifact, registered as version 1; its number in XCom and in the asset event.
    artifacts = MlflowReader(server.uri).artifacts(mlflow_run.run_id, "model")
    assert artifacts == ["model/" + Path(job["model_path"]).name]
    assert xcom(run, "train", "mlflow_model_version") == 1
    assert tags["airflow_distributed.model_version"] == f"{MODEL_NAME}/1"
    assert MlflowReader(server.uri).model_version(MODEL_NAME, 1)["run_id"] == mlflow_run.run_id
    assert _asset_extras("file:///models/test_mlflow_ddp/train")[-1]["mlflow_model_version"] == 1
    assert f"MLflow: the model is version 1 of {MODEL_NAME}: {server.uri}/#/models/{MODEL_NAME}/versions/1" in out
    # The task's links: the run, and TensorBoard filtered on the job.
    experiment_id = mlflow_run.experiment_id
    assert xcom(run, "train", "_link_MlflowRunLink") == \
        f"{server.uri}/#/experiments/{experiment_id}/runs/{mlflow_run.run_id}"
    assert xcom(run, "train", "_link_JobUrlLink_TensorBoard") == TENSORBOARD.format(job_name=job_name)
    # The credentials reached the server's client only.
    _assert_no_secret(out)
    xcoms = dict(_all_xcoms(run))
    assert {"job", "metrics", "mlflow_model_version", "_link_MlflowRunLink"} <= set(xcoms)
    for value in xcoms.values():
        _assert_no_secret(value)
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ
    assert replica_processes(job_name) == []

    # Another run of the DAG: a run of its own, the next version of the registered model.
    again, states = run_dag("test_mlflow_ddp")
    assert states == {"train": "success"}
    assert len(_runs(server, "test_mlflow_ddp")) == 2
    assert xcom(again, "train", "mlflow_model_version") == 2
    assert MlflowReader(server.uri).model_versions(MODEL_NAME) == [1, 2]


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_the_retraining_example_with_a_tracking_server(connection):
    server = connection
    run, states = run_dag("example_retraining_pipeline", conf={"steps": 20, "mlflow_conn_id": "mlflow_test"})

    # Whether it promotes depends on the models earlier runs of the session left: it promotes only a better one.
    assert states["train"] == "success" and states["promote"] in ("success", "skipped")
    runs = _runs(server, "example_retraining_pipeline")
    assert len(runs) == 1 and runs[0].status == "FINISHED"
    assert runs[0].params["param.steps"] == "20"
    version = xcom(run, "train", "mlflow_model_version")
    assert MlflowReader(server.uri).model_version("example-retraining", version)["run_id"] == runs[0].run_id
    assert xcom(run, "train", "_link_MlflowRunLink").endswith(f"/runs/{runs[0].run_id}")


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
@pytest.mark.usefixtures("kubernetes_connection")
def test_a_deferred_kubernetes_job_is_one_run_opened_before_and_closed_after_the_deferral(connection, emulator,
                                                                                          capfd):
    server = connection
    emulator.create_namespace(DEFERRED_NAMESPACE)

    def script(kubelet: Kubelet) -> None:
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, DEFERRED_NAMESPACE)), timeout=60)
        train_and_succeed(kubelet)

    kubelet = Kubelet(emulator, DEFERRED_NAMESPACE).play(script)
    run, states = run_dag_at("test_mlflow_deferred")
    kubelet.check()
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    assert "waiting in the triggerer" in out
    runs = _runs(server, "test_mlflow_deferred")
    assert len(runs) == 1
    mlflow_run = runs[0]
    assert mlflow_run.status == "FINISHED"
    assert mlflow_run.tags["airflow_distributed.backend"] == "kubernetes"
    assert _history(server, mlflow_run.run_id, "loss") == [
        (point["step"], point["loss"]) for point in DOCUMENT["history"]]
    assert mlflow_run.metrics["accuracy"] == DOCUMENT["metrics"]["accuracy"]
    # A model on storage is registered from its URL, not uploaded.
    version = MlflowReader(server.uri).model_version(MODEL_NAME + "-deferred", 1)
    assert (version["source"], version["run_id"]) == (DOCUMENT["model_path"], mlflow_run.run_id)
    assert xcom(run, "train", "mlflow_model_version") == 1


def test_a_retried_job_is_one_run_whose_steps_go_on(connection, capfd):
    server = connection
    run, states = run_dag("test_mlflow_resume")
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    assert "exited with code 3" in out  # try 1 failed
    runs = _runs(server, "test_mlflow_resume")
    assert len(runs) == 1
    mlflow_run = runs[0]
    assert mlflow_run.status == "FINISHED"
    assert mlflow_run.tags["airflow_distributed.try_number"] == "2"
    assert mlflow_run.tags["airflow_distributed.first_try"] == "1"
    steps = [step for step, _ in _history(server, mlflow_run.run_id, "loss")]
    last_saved = (CRASH_AT // EVERY) * EVERY
    # Try 1's points up to the crash, then try 2's from its checkpoint on: no step starts again at the beginning.
    try_2 = [point["step"] for point in xcom(run, "train", "job")["history"] if "loss" in point]
    assert min(try_2) > last_saved and max(try_2) == RESUME_STEPS
    assert steps == [*range(EVERY, last_saved + 1, EVERY), *try_2]
    # Each try's usage at its own try number: the run knows both.
    assert [step for step, _ in _history(server, mlflow_run.run_id, "usage.tries")] == [1, 2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_tracking_server_that_is_down_does_not_stop_the_job(monkeypatch, tmp_path, capfd):
    go = tmp_path / "go"
    go.touch()
    nobody = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv(CONN_VARIABLE, json.dumps({"conn_type": "mlflow", "host": nobody, "password": PASSWORD}))
    run, states = run_dag("test_mlflow_outage", conf={"go_file": str(go)})
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == {"loss": pytest.approx(1 / 3), "done": 1}
    assert f"MLflow tracking at {nobody}: opening the job's run failed" in out
    assert xcom(run, "train", "_link_MlflowRunLink") == ""
    _assert_no_secret(out)


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_a_tracking_server_that_never_answers_does_not_stall_the_job(monkeypatch, tmp_path, capfd):
    # A server that takes connections and answers nothing: each request ends at the hook's timeout, not MLflow's
    # default (120 s, 7 retries), and the job goes on.
    go = tmp_path / "go"
    go.touch()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # never accepted: the kernel completes the handshakes, nobody reads or answers
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv(CONN_VARIABLE, json.dumps({"conn_type": "mlflow", "host": uri}))
        run, states = run_dag("test_mlflow_outage", conf={"go_file": str(go)})
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == {"loss": pytest.approx(1 / 3), "done": 1}
    assert f"MLflow tracking at {uri}: opening the job's run failed" in out
    assert "timed out" in out.split(f"MLflow tracking at {uri}")[1].splitlines()[0].lower()


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_the_credentials_reach_the_server_and_refused_ones_do_not_stop_the_job(monkeypatch, tmp_path, capfd):
    build_server_environment()
    server = MlflowServer(admin_password=PASSWORD).start()
    go = tmp_path / "go"
    go.touch()
    try:
        monkeypatch.setenv(CONN_VARIABLE, server.connection(login="admin", password="not-" + PASSWORD))
        refused, refused_states = run_dag("test_mlflow_outage", conf={"go_file": str(go)})
        monkeypatch.setenv(CONN_VARIABLE, server.connection(login="admin", password=PASSWORD))
        accepted, accepted_states = run_dag("test_mlflow_outage", conf={"go_file": str(go)})
        runs = _runs(server, "test_mlflow_outage", auth=("admin", PASSWORD))
    finally:
        server.stop()
    out = capfd.readouterr().out

    assert refused_states == accepted_states == {"train": "success"}
    assert f"MLflow tracking at {server.uri}: opening the job's run failed" in out
    assert "401" in out.split(f"MLflow tracking at {server.uri}")[1].splitlines()[0]
    # Only the job with the right password has a run: its credentials reached the server.
    assert [run.tags["airflow_distributed.run_id"] for run in runs] == [accepted.run_id]
    assert xcom(refused, "train", "_link_MlflowRunLink") == ""
    assert PASSWORD not in out
    for run in (refused, accepted):
        for _key, value in _all_xcoms(run):
            assert PASSWORD not in value


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_a_tracking_server_stopped_mid_job_does_not_fail_it(airflow_db, monkeypatch, tmp_path, capfd):
    build_server_environment()
    server = MlflowServer().start()
    go = tmp_path / "go"
    monkeypatch.setenv(CONN_VARIABLE, server.connection())

    def stop_once_the_run_is_open() -> None:
        try:
            wait_until(lambda: _runs(server, "test_mlflow_outage"), timeout=120, interval=0.5)
            server.stop()
        finally:
            go.touch()

    stopper = threading.Thread(target=stop_once_the_run_is_open, daemon=True)
    stopper.start()
    try:
        run, states = run_dag("test_mlflow_outage", conf={"go_file": str(go)})
    finally:
        stopper.join(timeout=150)
        server.stop()
    out = capfd.readouterr().out

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == {"loss": pytest.approx(1 / 3), "done": 1}
    assert f"MLflow tracking at {server.uri}: logging the job's metrics failed" in out
    assert server.process is not None and server.process.poll() is not None


def _clear_and_run_again(run, task_id: str = "train") -> str:
    """Clear the task instance as the UI's "Clear" does (Airflow's ``clear_task_instances``), then run it again as
    the scheduler would (its next try, in ``dag.test()``'s own task runner); its state after."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    where = (TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id, TaskInstance.task_id == task_id)
    with create_session() as session:
        clear_task_instances(session.scalars(select(TaskInstance).where(*where)).all(), session)
    with create_session() as session:
        ti = session.scalars(select(TaskInstance).where(*where)).one()
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        task = DagBag().get_dag(run.dag_id).task_dict[task_id]
        _run_task(ti=ti, task=task)
        session.expire_all()
        return str(session.scalars(select(TaskInstance.state).where(*where)).one())


def test_a_cleared_task_starts_a_new_run_and_the_job_view_links_to_it(connection, monkeypatch, tmp_path,
                                                                      tmp_path_factory):
    server = connection
    go = tmp_path / "go"
    go.touch()
    run, states = run_dag("test_mlflow_outage", conf={"go_file": str(go)})
    assert states == {"train": "success"}
    [first] = [found for found in _runs(server, "test_mlflow_outage")
               if found.tags["airflow_distributed.run_id"] == run.run_id]
    # A value a user could write: the task's own link XCom, pointing elsewhere. The view never reads it.
    _forge_link_xcom(run, "https://attacker.example/#/experiments/0/runs/forged")
    team = "ml"
    with api_client({"alice": f"viewer:{team}", "bob": "viewer:nlp"}, team, (team, "nlp"),
                    tmp_path_factory.mktemp("auth")) as client:
        view = f"/distributed/jobs/test_mlflow_outage/{quote(run.run_id, safe='')}/train"

        def links() -> str:
            answer = client.get(view, headers=as_user(client, "alice"))
            assert answer.status_code == 200, answer.text
            return answer.text

        page = links()
        assert f'href="{server.uri}/#/experiments/{first.experiment_id}/runs/{first.run_id}"' in page
        assert "attacker.example" not in page
        assert client.get(view, headers=as_user(client, "bob")).status_code == 403  # not the DAG's team

        # Cleared and run again: a run of its own, from the try after the clear; the first is left as it ended.
        assert _clear_and_run_again(run) == "success"
        runs = {found.run_id: found for found in _runs(server, "test_mlflow_outage")
                if found.tags["airflow_distributed.run_id"] == run.run_id}
        assert len(runs) == 2 and runs[first.run_id].status == "FINISHED"
        [second] = [found for run_id, found in runs.items() if run_id != first.run_id]
        assert (second.status, second.tags["airflow_distributed.first_try"]) == ("FINISHED", "2")
        assert second.tags["airflow_distributed.try_number"] == "2"
        page = links()
        assert f'href="{server.uri}/#/experiments/{second.experiment_id}/runs/{second.run_id}"' in page
        assert first.run_id not in page

        # The tracking server gone: a note without its address, and no link.
        monkeypatch.setenv(CONN_VARIABLE, json.dumps({"conn_type": "mlflow", "host": f"http://127.0.0.1:{_free_port()}"}))
        page = links()
        assert "MLflow: the tracking server did not answer" in page
        assert "mlflow-run" not in page and "127.0.0.1" not in page


def _forge_link_xcom(run, value: str) -> None:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import update

    with create_session() as session:
        changed = session.execute(update(XComModel).where(
            XComModel.run_id == run.run_id, XComModel.dag_id == run.dag_id,
            XComModel.key == "_link_MlflowRunLink").values(value=json.dumps(value)))
        assert changed.rowcount == 1


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_a_killed_task_ends_its_run_killed_before_its_replicas_are_stopped(connection, tmp_path):
    """SIGTERM to the task (what the supervisor sends when the task is marked failed), whose replicas hold on for
    their whole stop grace: the run is KILLED without waiting for them."""
    server = connection
    airflow = Path(sys.executable).with_name("airflow")
    with open(tmp_path / "dags-test.log", "wb") as log:
        task = subprocess.Popen([str(airflow), "dags", "test", "test_mlflow_killed"], stdout=log,
                                stderr=subprocess.STDOUT, env=os.environ.copy(), start_new_session=True)
    try:
        opened = wait_until(lambda: _runs(server, "test_mlflow_killed"), timeout=120, interval=0.5)
        name = opened[0].name
        wait_until(lambda: len(replica_processes(name)) == 2, timeout=60, interval=0.2)
        assert _runs(server, "test_mlflow_killed")[0].status == "RUNNING"
        os.killpg(task.pid, signal.SIGTERM)
        # Well within the replicas' grace, which the task's stop waits out.
        wait_until(lambda: _runs(server, "test_mlflow_killed")[0].status != "RUNNING", timeout=KILLED_GRACE / 2,
                   interval=0.2)
        assert _runs(server, "test_mlflow_killed")[0].status == "KILLED"
        assert replica_processes(name)  # still holding on: the run did not wait for them
        task.wait(timeout=KILLED_GRACE + 60)
    finally:
        if task.poll() is None:
            os.killpg(task.pid, signal.SIGKILL)
            task.wait(timeout=10)
    log_text = (tmp_path / "dags-test.log").read_text(errors="replace")
    [ended] = _runs(server, "test_mlflow_killed")
    assert ended.status == "KILLED", log_text[-3000:]  # and the task's own close, once they stopped, kept it
    assert ended.tags["airflow_distributed.state"] == "failed"
    wait_until(lambda: replica_processes(name) == [], timeout=30)
