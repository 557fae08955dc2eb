"""The job view's live source through Airflow's API server app: a running Kubernetes job read from its pods.

A real DAG run starts the job on the Kubernetes API emulator (over HTTP) and leaves it running; the view is asked
as users of the team that owns the DAG. The announcement XCom (``kubernetes_job``) is written through Airflow's
core REST API by a user of that team, as anyone who may write the DAG's XComs can: the view must read only where
the DAG says its job runs, through the team's connection. The emulators' request logs show where it went.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_distributed.manifests.pod_names import MAIN_CONTAINER
from tests.api_server import api_client, as_user
from tests.dags.ui_live_dags import CONN_ID, DAG_ID, NAMESPACE
from tests.helpers import run_dag, xcom
from tests.k8s_emulator import KubeEmulator

pytestmark = pytest.mark.usefixtures("airflow_db", "kubernetes_connection")

TEAM, OTHER_TEAM = "ml", "nlp"
USERS = {"alice": f"viewer:{TEAM}", "carol": f"user:{TEAM}"}
#: Another team's namespace in the same cluster, and another cluster reachable through a global connection.
OTHER_NAMESPACE, OTHER_CONN_ID = "nlp-training", "other_cluster"
SECRET = "the other team's private log line"


def kube_extra(kubeconfig: str) -> str:
    return json.dumps({"kube_config_path": kubeconfig})


def plant_job(emulator, namespace: str, name: str, log: str) -> None:
    """A master pod labelled as job ``name`` that prints ``log``: what the view must not read elsewhere."""
    pod = {
        "metadata": {"name": f"{name}-master-0", "labels": {
            "airflow-distributed/job": name, "airflow-distributed/master": "true",
            "airflow-distributed/role": "master", "airflow-distributed/index": "0"}},
        "spec": {"containers": [{"name": MAIN_CONTAINER, "image": "registry.example.com/other:1.0"}]},
    }
    emulator.create("pods", namespace, pod)
    emulator.run_pod(namespace, pod["metadata"]["name"])
    emulator.append_log(namespace, pod["metadata"]["name"], log + "\n", container=MAIN_CONTAINER)


@pytest.fixture(scope="module")
def other_cluster(tmp_path_factory):
    with KubeEmulator(kubernetes_version="1.31") as emu:
        yield emu, emu.write_kubeconfig(tmp_path_factory.mktemp("other") / "config")


@pytest.fixture(scope="module")
def started(emulator, kubeconfig):
    """The DAG's job, started and left running: master running with a log line, worker 0 running, worker 1
    OOMKilled. The same job name is planted in another team's namespace and in another cluster."""
    emulator.create_namespace(NAMESPACE)
    with pytest.MonkeyPatch.context() as env:
        # The worker's connection while the task runs; the view resolves the team's own below.
        env.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "kubernetes",
                                                                   "extra": json.loads(kube_extra(kubeconfig))}))
        run, states = run_dag(DAG_ID)
    assert states == {"train": "success"}
    name = xcom(run, "train", "job_name")
    master, worker0, worker1 = (f"{name}-{replica}" for replica in ("master-0", "worker-0", "worker-1"))
    emulator.run_pod(NAMESPACE, master)
    emulator.append_log(NAMESPACE, master, "step 10 loss 0.5\n", container=MAIN_CONTAINER)
    emulator.run_pod(NAMESPACE, worker0)
    emulator.fail_pod(NAMESPACE, worker1, exit_code=137, reason="OOMKilled")
    emulator.create_namespace(OTHER_NAMESPACE)
    plant_job(emulator, OTHER_NAMESPACE, name, SECRET)
    return run, name


@pytest.fixture(scope="module")
def client(started, kubeconfig, other_cluster, tmp_path_factory):
    """The API server app; the DAG's connection is team ``ml``'s, ``other_cluster`` a global one, and the API
    server's own kubeconfig (no connection) reaches the whole cluster."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from kubernetes.config import kube_config
    from sqlalchemy import delete

    other, other_kubeconfig = other_cluster
    other.create_namespace(NAMESPACE)
    plant_job(other, NAMESPACE, started[1], SECRET)
    with (pytest.MonkeyPatch.context() as env,
          api_client(USERS, TEAM, (TEAM, OTHER_TEAM), tmp_path_factory.mktemp("auth")) as test_client):
        env.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
        env.setenv(f"AIRFLOW_CONN_{OTHER_CONN_ID.upper()}", json.dumps({
            "conn_type": "kubernetes", "extra": json.loads(kube_extra(other_kubeconfig))}))
        with create_session() as session:
            session.add(Connection(conn_id=CONN_ID, conn_type="kubernetes", extra=kube_extra(kubeconfig),
                                   team_name=TEAM))
        try:
            yield test_client
        finally:
            with create_session() as session:
                session.execute(delete(Connection).where(Connection.conn_id == CONN_ID))


def announce(client, run, value: dict) -> None:
    """Write the ``kubernetes_job`` XCom as a user of the DAG's team, through the core REST API."""
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run.run_id, safe='')}/taskInstances/train/xcomEntries"
    headers = as_user(client, "carol")
    response = client.post(base, json={"key": "kubernetes_job", "value": value}, headers=headers)
    if response.status_code == 409:
        response = client.patch(f"{base}/kubernetes_job", json={"value": value}, headers=headers)
    assert response.status_code in (200, 201), response.text


def view(client, run):
    api = f"/distributed/api/jobs/{DAG_ID}/{quote(run.run_id, safe='')}/train"
    return client.get(api, headers=as_user(client, "alice"))


def paths(emulator) -> list[str]:
    return [request.path for request in emulator.requests]


def test_a_running_job_is_read_through_the_teams_connection(client, started, emulator, other_cluster):
    run, name = started
    announce(client, run, {"job_name": name, "namespace": NAMESPACE, "kubernetes_conn_id": CONN_ID,
                           "framework": "pytorch"})
    emulator.reset_requests()
    other_cluster[0].reset_requests()

    response = view(client, run)

    assert response.status_code == 200, response.text
    record = response.json()
    assert record["source"] == "live" and record["state"] == "running" and record["namespace"] == NAMESPACE
    assert [(r["name"], r["state"], r["exit_code"]) for r in record["replicas"]] == [
        (f"{name}-master-0", "running", None), (f"{name}-worker-0", "running", None),
        (f"{name}-worker-1", "failed", 137),
    ]
    assert record["replicas"][2]["reason"] == "OOMKilled"
    assert record["logs"] == {f"{name}-master-0": ["step 10 loss 0.5"]}
    assert paths(emulator) and all(path.startswith(f"/api/v1/namespaces/{NAMESPACE}/") for path in paths(emulator))
    assert paths(other_cluster[0]) == []


@pytest.mark.parametrize("pointing", ["another namespace", "the API server's own credentials", "another connection"])
def test_an_announcement_pointing_elsewhere_reads_nothing_there(client, started, emulator, other_cluster, pointing):
    run, name = started
    announce(client, run, {
        "another namespace": {"job_name": name, "namespace": OTHER_NAMESPACE, "kubernetes_conn_id": CONN_ID},
        "the API server's own credentials": {"job_name": name, "namespace": OTHER_NAMESPACE,
                                             "kubernetes_conn_id": None},
        "another connection": {"job_name": name, "namespace": NAMESPACE, "kubernetes_conn_id": OTHER_CONN_ID},
    }[pointing])
    emulator.reset_requests()
    other_cluster[0].reset_requests()

    response = view(client, run)

    assert response.status_code == 200, response.text
    assert SECRET not in response.text
    assert response.json()["namespace"] == NAMESPACE and len(response.json()["replicas"]) == 3  # its own job
    assert not [path for path in paths(emulator) if f"/namespaces/{OTHER_NAMESPACE}/" in path]
    assert paths(other_cluster[0]) == []


def test_an_announcement_of_another_job_is_not_read(client, started, emulator, other_cluster):
    run, name = started
    announce(client, run, {"job_name": "victim-0123abcd", "namespace": OTHER_NAMESPACE, "kubernetes_conn_id": None})
    emulator.reset_requests()

    response = view(client, run)

    assert response.status_code == 404 and response.json()["detail"] == "no job record; the task instance is success"
    assert paths(emulator) == []


@pytest.fixture
def unanswered_cluster(kubeconfig, tmp_path):
    """The team's connection pointed at a port that takes connections and never answers, for as long as the test."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session
    from sqlalchemy import select

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # never accepted: a request sent there waits for an answer that does not come
    config = json.loads(Path(kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{silent.getsockname()[1]}"
    silent_config = tmp_path / "silent-config"
    silent_config.write_text(json.dumps(config))

    def point(extra: str) -> None:
        with create_session() as session:
            session.scalars(select(Connection).where(Connection.conn_id == CONN_ID)).one().extra = extra

    point(kube_extra(str(silent_config)))
    try:
        yield
    finally:
        point(kube_extra(kubeconfig))
        silent.close()  # the connections it held are reset, which ends the view's read that still waits


def test_an_unreachable_cluster_gives_a_clear_state(client, started, unanswered_cluster, monkeypatch):
    run, name = started
    announce(client, run, {"job_name": name, "namespace": NAMESPACE, "kubernetes_conn_id": CONN_ID})
    monkeypatch.setenv("AIRFLOW__DISTRIBUTED__LIVE_VIEW_TIMEOUT", "0.5")

    response = view(client, run)

    assert response.status_code == 200, response.text
    record = response.json()
    assert record["state"] == "unreachable" and record["replicas"] == []
    assert record["note"] == ("The Kubernetes API could not be reached within 0.5 s; the page tries again when it "
                              "reloads.")
    page = client.get(f"/distributed/jobs/{DAG_ID}/{quote(run.run_id, safe='')}/train",
                      headers=as_user(client, "alice"))
    assert page.status_code == 200 and 'class="badge s-unreachable">unreachable<' in page.text
    assert "could not be reached within 0.5 s" in page.text


def test_a_cluster_that_resets_every_connection_gives_a_clear_state_at_once(client, started, emulator):
    # One try, no backoff: before, six tries held the request about 14 s and then answered 500.
    run, name = started
    announce(client, run, {"job_name": name, "namespace": NAMESPACE, "kubernetes_conn_id": CONN_ID})
    before = len(emulator.refused)
    emulator.refuse_connections = True
    try:
        response = view(client, run)
    finally:
        emulator.refuse_connections = False

    assert response.status_code == 200, response.text
    record = response.json()
    assert record["state"] == "unreachable" and record["replicas"] == []
    assert record["note"].startswith("The Kubernetes API could not be reached within")
    assert len(emulator.refused) - before == 1  # the LIST, tried once
