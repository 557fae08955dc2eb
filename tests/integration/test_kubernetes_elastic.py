"""Retries on the Kubernetes backend (API emulator, the test playing the kubelet): the pods of a retried job find
the checkpoints the failed try saved, pruned to the newest ones.

Elastic jobs (a lost worker created again, the restart budget, carrying on with ``min_workers``) run as DAG runs
against the real control plane: ``tests/kube_control_plane/test_elastic_dag_runs.py``."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from tests.dags.kubernetes_dags import namespace_of
from tests.helpers import run_dag_at, wait_until, xcom
from tests.kubernetes_helpers import (
    NOTHING,
    Kubelet,
    as_the_pod,
    settled,
    task_requests,
)

pytestmark = [pytest.mark.usefixtures("airflow_db", "kubernetes_connection")]


def test_a_retried_job_resumes_from_the_checkpoint_of_the_failed_try(emulator, airflow_home, capfd):
    namespace = namespace_of("k8s_checkpoint_retry")
    emulator.create_namespace(namespace)
    seen: dict[str, str] = {}

    def pods_of_try(kubelet: Kubelet, exclude: set[str]) -> dict[str, dict]:
        def fresh():
            pods = [p for p in emulator.list("pods", namespace, label_selector="airflow-distributed/job")
                    if p["metadata"]["uid"] not in exclude]
            return pods if len(pods) == 3 else None
        found = wait_until(fresh, timeout=60, interval=0.05)
        return {f"{p['metadata']['labels']['airflow-distributed/role']}-"
                f"{p['metadata']['labels']['airflow-distributed/index']}": p for p in found}

    def script(kubelet: Kubelet) -> None:
        first = pods_of_try(kubelet, set())
        for pod in first.values():
            emulator.run_pod(namespace, pod["metadata"]["name"])
        # Try 1: the master saves checkpoints at steps 10..40 (keep 3), then a worker crashes at step 45.
        seen["try 1"] = as_the_pod(first["master-0"], textwrap.dedent("""
            from airflow_distributed import tracking
            for step in (10, 20, 30, 40):
                tracking.save_checkpoint({"w": step}, step)
            print(tracking.get_try_number())
        """))
        emulator.fail_pod(namespace, first["worker-0"]["metadata"]["name"], exit_code=3)
        # Try 2: new pods of the same job; the master finds try 1's newest checkpoint and trains from there.
        second = pods_of_try(kubelet, {p["metadata"]["uid"] for p in first.values()})
        for pod in second.values():
            emulator.run_pod(namespace, pod["metadata"]["name"])
        seen["try 2"] = as_the_pod(second["master-0"], textwrap.dedent("""
            from airflow_distributed import tracking
            step, state = tracking.latest_checkpoint()
            print(tracking.get_try_number(), step, state["w"])
        """))
        try_number, step, _ = seen["try 2"].split()
        wait_until(lambda: any(r.is_watch for r in task_requests(emulator, namespace)), timeout=30)
        kubelet.emu.set_pod_phase(namespace, second["master-0"]["metadata"]["name"], "Running", container_states={
            "base": {"terminated": {"exitCode": 0, "reason": "Completed", "message": json.dumps(
                {"metrics": {"resumed_from_step": int(step), "try": int(try_number)}})}}})

    kubelet = Kubelet(emulator, namespace).play(script)
    run, states = run_dag_at("k8s_checkpoint_retry")
    kubelet.check(30)

    assert states == {"train": "success"}
    assert seen == {"try 1": "1", "try 2": "2 40 40"}
    assert xcom(run, "train", "metrics") == {"resumed_from_step": 40, "try": 2}
    out = capfd.readouterr().out
    assert "exited with code 3" in out  # try 1's failure, then the retry
    # The same directory for both tries, outside the pods (here: the test's AIRFLOW_HOME), holding try 1's files.
    folder = os.path.join(airflow_home, "k8s-checkpoints")
    checkpoints = sorted(name for name in os.listdir(folder) if not name.startswith(".airflow-distributed-"))
    assert checkpoints == [f"checkpoint-{step:012d}.pkl" for step in (20, 30, 40)]
    # Beside them, the list of what the job saved, which its clean-up after success goes by.
    assert [name for name in os.listdir(folder) if name.endswith(".checkpoints")] != []
    settled(emulator, namespace, NOTHING)
