"""DAGs for the backends' checks of the rendered arguments: settings a backend ignores (said once in the task log),
and templated values it refuses once rendered, before anything starts."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
#: Every replica exits at once: the checks, not the training, are under test.
QUICK = ["python", "-c", "pass"]
#: The pod settings the local backend ignores, on the master and on the workers.
POD_SETTINGS = {
    "node_selector": {"pool": "gpu"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}]}}},
    "labels": {"team": "ml"}, "annotations": {"note": "x"}, "service_account": "trainer",
    "image_pull_secrets": ["registry"], "security_context": {"runAsUser": 1000},
}
#: The Kubernetes-side arguments the local backend ignores.
CLUSTER_ARGUMENTS = {
    "image": "registry.example.com/trainer:1.0", "namespace": "ml", "deferrable": True, "clean_pod_policy": "none",
    "scheduler_name": "volcano", "gang_scheduling": "volcano", "queue_name": "team-a",
    "watch_timings": {"server_timeout": 50}, "image_pull_grace": 30.0,
}


def _dag(dag_id: str, **task_kwargs) -> DAG:
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["test"]) as dag:
        task_kwargs.setdefault("command", QUICK)
        DistributedTrainingOperator(task_id="train", framework="pytorch", **task_kwargs)
    return dag


local_ignored = _dag("check_local_ignored", backend="local", settle_period=0.0,
                     environment={**POD_SETTINGS, "pytorch": {"n_workers": 1, "default_worker": POD_SETTINGS}},
                     **CLUSTER_ARGUMENTS)
# The environment is a template: its secret_refs are seen once rendered, and refused before a replica starts.
local_templated_secret_refs = _dag(
    "check_local_templated_secret_refs", backend="local", params={"secret": "db-credentials", "marker": "unused"},
    environment="secret_refs: ['{{ params.secret }}']\npytorch: {n_workers: 1}",
    command=["python", "-c", "import pathlib, sys; pathlib.Path(sys.argv[1]).touch()", "{{ params.marker }}"],
)
# A namespace that is not a DNS-1123 label once rendered: refused before any object is created.
k8s_templated_namespace = _dag(
    "check_k8s_templated_namespace", backend="kubernetes", image="registry.example.com/trainer:1.0",
    namespace="{{ params.namespace }}", params={"namespace": "ml-$(id)"},
    environment={"pytorch": {"n_workers": 1}},
)
