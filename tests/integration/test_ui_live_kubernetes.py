"""The job view's live source: a running Kubernetes job read from its pods through the connection, over HTTP."""

from __future__ import annotations

import uuid

import pytest

from airflow_distributed.manifests.kubernetes import to_dict
from airflow_distributed.plugins.job_state import _list_pods, live_record
from tests.kubernetes_helpers import make_job

pytestmark = pytest.mark.usefixtures("kubernetes_connection")


def test_a_running_job_is_shown_from_its_pods(emulator):
    namespace = f"live-{uuid.uuid4().hex[:6]}"
    emulator.create_namespace(namespace)
    build, slots, name = make_job(namespace)
    service = emulator.create("services", namespace, to_dict(build(None).service))
    for pod in build(service["metadata"]["uid"]).pods:
        emulator.create("pods", namespace, to_dict(pod))
    master, worker0, worker1 = (slot.name for slot in slots)
    emulator.run_pod(namespace, master)
    emulator.append_log(namespace, master, "step 10 loss 0.5\n")
    emulator.run_pod(namespace, worker0)
    emulator.fail_pod(namespace, worker1, exit_code=137, reason="OOMKilled")

    announced = {"job_name": name, "namespace": namespace, "kubernetes_conn_id": "kubernetes_default",
                 "framework": "pytorch"}
    record = live_record(announced, _list_pods(announced))

    assert record["state"] == "running" and record["backend"] == "kubernetes"
    assert [(r["name"], r["state"], r["exit_code"]) for r in record["replicas"]] == [
        (master, "running", None), (worker0, "running", None), (worker1, "failed", 137)
    ]
    assert record["replicas"][2]["reason"] == "OOMKilled"
    assert record["logs"] == {master: ["step 10 loss 0.5"]}
