"""The Kubernetes objects of a job: valid for the API server's strict schema, and right in the values that matter.

Table-driven. Built-in kinds are checked against the strict JSON schema of ``SCHEMA_VERSION`` that
kubernetes-validate ships (no unknown field, every type right); the PodGroup, a custom resource, on values.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client

from airflow_distributed.manifests.container_scripts import (
    TERMINATION_MESSAGE_PATH,
    relay_output_command,
    wait_for_peers_command,
)
from airflow_distributed.manifests.horovod_ssh import SSH_DIR, SshKeyPair, generate_ssh_key_pair
from airflow_distributed.manifests.kubeflow import KUBEFLOW_LAUNCH
from airflow_distributed.manifests.kubernetes import (
    FILES_DIR,
    JOB_LABEL,
    MAIN_CONTAINER,
    MODEL_DIR,
    OUTPUT_PATH,
    POD_LAUNCH,
    READINESS_CONTAINER,
    SECRET_FILES_DIR,
    SIDECAR_CONTAINER,
    SIDECAR_STOP,
    JobManifestOptions,
    JobObjects,
    TaskInstanceRef,
    build_job_objects,
    job_secret_names,
    layout_for_kubernetes,
    to_dict,
    with_owner,
)
from airflow_distributed.manifests.kubernetes_resources import ManifestError
from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.outputs import document_warning, parse_output_document
from airflow_distributed.plan import KubernetesAddressing, Layout, LocalAddressing, build_plan
from airflow_distributed.spec import Environment, SpecValidationError, TrainingSpec, load_spec

# The newest Kubernetes version whose schemas kubernetes-validate ships (1.37 with kubernetes-validate 1.37),
# and an older one the objects must suit too.
SCHEMA_VERSION = kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version())
OLDEST_SCHEMA_VERSION = "1.29"
SEEDS = Path(__file__).resolve().parent.parent / "data" / "seeds"
SEED_000_TENSORFLOW = str(SEEDS / "polyaxon_tensorflow_resources.yaml")  # master + 2 ps + 4 workers, index 2 own
SEED_001_HOROVOD = str(SEEDS / "polyaxon_horovod_resources.yaml")  # launcher + 7 gpu workers

NAMESPACE = "ml-team"
JOB = "train-3f9a1c2b"
UID = "5b1d0c7e-9a7f-4f43-9d0e-3f3c1f0f6a11"
RUN_ID = "manual__2026-11-21T20:14:30.689650+00:00"
TASK = TaskInstanceRef(dag_id="nightly_training", task_id="models.train", run_id=RUN_ID, map_index=-1,
                       try_number=2)
# A fixed key pair: the manifests must not depend on randomness (generate_ssh_key_pair is tested on its own).
KEY = SshKeyPair(
    private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
    public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests job",
)
COMMAND = ("python", "train.py", "--epochs", "3")

EVERY_SETTING = {
    "resources": {"cpu": {"requests": 0.5, "limits": 2}, "memory": {"requests": 256, "limits": "2Gi"}},
    "node_selector": {"cloud.google.com/gke-nodepool": "training"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["a100", "h100"]}]}]}}},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "spot", "operator": "Equal", "value": "true", "tolerationSeconds": 60,
                     "effect": "NoExecute"}],
    "labels": {"team": "vision"},
    "annotations": {"cost-center": "ml-42"},
    "service_account": "trainer",
    "image_pull_secrets": ["registry-credentials"],
    "env_vars": [["LOG_LEVEL", "debug"]],
    "secret_refs": ["wandb-api-key"],
    "config_map_refs": ["training-defaults"],
    "security_context": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                         "seccompProfile": {"type": "RuntimeDefault"},
                         "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
}


def _options(**overrides: Any) -> JobManifestOptions:
    values: dict[str, Any] = {"namespace": NAMESPACE, "image": "registry.example/trainer:1.4", "task_instance": TASK}
    values.update(overrides)
    return JobManifestOptions(**values)


def _plan(framework: str | None, environment: Any, namespace: str = NAMESPACE, model_dir: str | None = None,
          checked: bool = True):
    # checked=False: a spec built in code past load_spec's checks, which the builder must still refuse.
    spec = load_spec(framework, environment) if checked else TrainingSpec(
        framework=framework, environment=Environment.model_validate(environment))
    return build_plan(spec, JOB, KubernetesAddressing(namespace), layout_for_kubernetes(model_dir), list(COMMAND),
                      backend="kubernetes", launch=POD_LAUNCH, env={"EPOCHS": "3"})


def _build(framework, environment, model_dir: str | None = None, **options: Any) -> JobObjects:
    return build_job_objects(_plan(framework, environment, model_dir=model_dir), _options(**options), ssh_key=KEY)


def _pod(objects: JobObjects, suffix: str) -> client.V1Pod:
    matches = [pod for pod in objects.pods if pod.metadata.name == f"{JOB}-{suffix}"]
    assert len(matches) == 1, [pod.metadata.name for pod in objects.pods]
    return matches[0]


def _container(pod: client.V1Pod, name: str = MAIN_CONTAINER) -> client.V1Container:
    return next(c for c in [*(pod.spec.init_containers or []), *pod.spec.containers] if c.name == name)


def _env(pod: client.V1Pod) -> dict[str, str]:
    """The container's plain variables (those read from a ConfigMap are left out)."""
    return {var.name: var.value for var in _container(pod).env if var.value_from is None}


def test_the_cluster_map_is_read_from_the_job_config_map_not_inlined():
    plan = _plan("tensorflow", {"tensorflow": {"n_workers": 2}})
    objects = build_job_objects(plan, _options())
    (config_map,) = objects.config_maps
    assert config_map.data["cluster.json"] == plan.master.env["AIRFLOW_DISTRIBUTED_CLUSTER"]
    for pod in objects.pods:
        (var,) = [v for v in _container(pod).env if v.name == "AIRFLOW_DISTRIBUTED_CLUSTER"]
        assert var.value is None
        assert (var.value_from.config_map_key_ref.name, var.value_from.config_map_key_ref.key) == (
            config_map.metadata.name, "cluster.json")


def _validate(body: dict[str, Any], version: str = SCHEMA_VERSION) -> None:
    try:
        kubernetes_validate.validate(body, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        pytest.fail(f"{body['kind']} {body['metadata']['name']} at {list(err.path)}: {err.message}")


# ------------------------------------------------------------------ schema validity, every framework and option


@dataclass(frozen=True)
class JobCase:
    name: str
    framework: str | None
    environment: Any
    options: dict[str, Any] = field(default_factory=dict)
    model_dir: str | None = None
    #: kinds expected besides Service, the job's ConfigMap and Pods
    kinds: tuple[str, ...] = ()


JOB_CASES = [
    JobCase("tensorflow with ps", "tensorflow", {"tensorflow": {"n_workers": 2, "n_ps": 1}}),
    JobCase("mxnet", "mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}),
    JobCase("pytorch", "pytorch", {"pytorch": {"n_workers": 3}}),
    JobCase("horovod", "horovod", {"replicas": {"n_workers": 2}}, kinds=("Secret",)),
    JobCase("jax", "jax", {"jax": {"n_workers": 2, "default_worker": {"resources": {"cpu": {"limits": 2}}}}}),
    JobCase("paddle", "paddle", {"paddle": {"n_workers": 2}}),
    JobCase("paddle parameter-server mode", "paddle",
            {"paddle": {"n_workers": 2, "n_ps": 2, "default_ps": {"resources": {"cpu": {"limits": 4}}}}}),
    JobCase("xgboost", "xgboost", {"xgboost": {"n_workers": 2, "worker": [{"index": 1, "node_selector": {"a": "b"}}]}}),
    JobCase("seed 000: tensorflow master, 2 ps, 4 workers, index 2 own", None, SEED_000_TENSORFLOW),
    JobCase("seed 001: horovod launcher and 7 gpu workers", None, SEED_001_HOROVOD, kinds=("Secret",)),
    JobCase("master alone", "tensorflow", None),
    JobCase("every pod setting on master and workers", "pytorch",
            {**EVERY_SETTING, "pytorch": {"n_workers": 2, "default_worker": EVERY_SETTING}}),
    JobCase("volcano, kueue, claim, deadlines, pull policy", "horovod", {"replicas": {"n_workers": 2}},
            {"gang_scheduling": "volcano", "queue_name": "team-a", "model_volume": "models-claim",
             "active_deadline_seconds": 86400, "ttl_seconds_after_finished": 600, "image_pull_policy": "Always",
             "labels": {"owner": "ml"}, "annotations": {"note": "x"}, "automount_service_account_token": True},
            kinds=("Secret", "PodGroup")),
    JobCase("scheduler-plugins, volume dict, no readiness, no relay", "mxnet", {"mxnet": {"n_workers": 1}},
            {"gang_scheduling": "scheduler-plugins", "scheduler_name": "scheduler-plugins-scheduler",
             "model_volume": {"nfs": {"server": "nfs.example", "path": "/models"}},
             "wait_for_master": False, "relay_output": False, "xcom_sidecar_image": "alpine:3.20"},
            kinds=("PodGroup",)),
    JobCase("model dir at a URL: nothing mounted", "pytorch", {"pytorch": {"n_workers": 1}},
            model_dir="s3://bucket/models/run-42"),
    JobCase("gpu and tpu under other resource names", "pytorch",
            {"resources": {"gpu": {"limits": 2}, "tpu": {"requests": 8}}, "pytorch": {"n_workers": 1}},
            {"gpu_resource_key": "amd.com/gpu", "tpu_resource_key": "google.com/tpu"}),
]


@pytest.mark.parametrize("case", JOB_CASES, ids=[c.name for c in JOB_CASES])
def test_every_object_validates_against_the_strict_kubernetes_schema(case: JobCase):
    objects = _build(case.framework, case.environment, case.model_dir, **case.options).owned_by(UID)
    bodies = objects.as_dicts()

    kinds = [body["kind"] for body in bodies]
    secrets = [k for k in case.kinds if k == "Secret"]
    others = [k for k in case.kinds if k != "Secret"]
    assert kinds == ["Service", *secrets, "ConfigMap", *others, *["Pod"] * len(objects.pods)]
    for body in bodies:
        if body["kind"] != "PodGroup":  # a custom resource: no schema shipped, checked in test_pod_group
            _validate(body)
    json.dumps(bodies)  # plain JSON all the way down


@pytest.mark.parametrize("case", [c for c in JOB_CASES if c.name.startswith(("every pod setting", "volcano"))],
                         ids=lambda c: c.name)
def test_objects_also_validate_against_an_older_kubernetes(case: JobCase):
    for body in _build(case.framework, case.environment, **case.options).owned_by(UID).as_dicts():
        if body["kind"] != "PodGroup":
            _validate(body, OLDEST_SCHEMA_VERSION)


def test_schema_version_is_a_current_kubernetes():
    major, minor = (int(part) for part in SCHEMA_VERSION.split("."))
    assert (major, minor) >= (1, 33)


# ------------------------------------------------------------------ addresses and contract variables


def test_tf_config_of_worker_1_names_dns_hosts_under_the_job_service():
    objects = _build(None, SEED_000_TENSORFLOW)
    tf_config = json.loads(_env(_pod(objects, "worker-1"))["TF_CONFIG"])

    assert tf_config["task"] == {"type": "worker", "index": 1}
    assert set(tf_config["cluster"]) == {"chief", "ps", "worker"}
    assert len(tf_config["cluster"]["worker"]) == 4 and len(tf_config["cluster"]["ps"]) == 2
    for role, addresses in tf_config["cluster"].items():
        for index, address in enumerate(addresses):
            assert address == f"{JOB}-{role}-{index}.{JOB}.{NAMESPACE}.svc:2222"


@pytest.mark.parametrize("framework, environment", [
    ("tensorflow", {"tensorflow": {"n_workers": 2, "n_ps": 1}}),
    ("mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}),
    ("pytorch", {"pytorch": {"n_workers": 2}}),
    ("horovod", {"replicas": {"n_workers": 2}}),
    ("jax", {"jax": {"n_workers": 2}}),
    ("xgboost", {"xgboost": {"n_workers": 2}}),
    ("paddle", {"paddle": {"n_workers": 2}}),
])
def test_pod_names_hostnames_and_subdomain_give_each_replica_its_planned_address(framework, environment):
    plan = _plan(framework, environment)
    objects = build_job_objects(plan, _options(), ssh_key=KEY)

    assert [pod.metadata.name for pod in objects.pods] == [replica.name for replica in plan.replicas]
    for pod, replica in zip(objects.pods, plan.replicas):
        assert f"{pod.spec.hostname}.{pod.spec.subdomain}.{NAMESPACE}.svc" == replica.host
        assert pod.spec.subdomain == objects.service.metadata.name == JOB
        assert pod.spec.restart_policy == "Never"
        assert _env(pod)["AIRFLOW_DISTRIBUTED_ROLE"] == replica.role
        assert list(_env(pod)) == sorted(_env(pod))  # deterministic order
        assert _env(pod)["EPOCHS"] == "3"


def test_jax_processes_find_the_coordinator_on_the_masters_pod_port():
    objects = _build("jax", {"jax": {"n_workers": 2}})
    master = _pod(objects, "master-0")
    (port,) = _container(master).ports
    coordinator = f"{master.spec.hostname}.{master.spec.subdomain}.{NAMESPACE}.svc:{port.container_port}"
    assert [(_env(pod)["JAX_COORDINATOR_ADDRESS"], _env(pod)["JAX_PROCESS_ID"], _env(pod)["JAX_NUM_PROCESSES"])
            for pod in objects.pods] == [(coordinator, "0", "3"), (coordinator, "1", "3"), (coordinator, "2", "3")]


def test_xgboost_workers_join_the_tracker_on_the_masters_pod_port():
    objects = _build("xgboost", {"xgboost": {"n_workers": 2}})
    master = _pod(objects, "master-0")
    (port,) = _container(master).ports
    host = f"{master.spec.hostname}.{master.spec.subdomain}.{NAMESPACE}.svc"
    assert [(_env(pod)["DMLC_TRACKER_URI"], _env(pod)["DMLC_TRACKER_PORT"], _env(pod)["DMLC_TASK_ID"])
            for pod in objects.pods] == [(host, str(port.container_port), str(rank)) for rank in range(3)]


def test_paddle_trainers_list_every_pods_address_in_trainer_id_order():
    objects = _build("paddle", {"paddle": {"n_workers": 2}})
    addresses = [f"{pod.spec.hostname}.{pod.spec.subdomain}.{NAMESPACE}.svc:{_container(pod).ports[0].container_port}"
                 for pod in objects.pods]
    names = ("PADDLE_TRAINER_ENDPOINTS", "PADDLE_CURRENT_ENDPOINT", "PADDLE_TRAINER_ID")
    seen = [tuple(_env(pod)[name] for name in names) for pod in objects.pods]
    assert seen == [(",".join(addresses), address, str(i)) for i, address in enumerate(addresses)]


def test_mxnet_replicas_are_told_they_run_on_kubernetes():
    objects = _build("mxnet", {"mxnet": {"n_workers": 1, "n_ps": 1}})
    assert {_env(pod)["DMLC_USE_KUBERNETES"] for pod in objects.pods} == {"1"}


# ------------------------------------------------------------------ resources


@dataclass(frozen=True)
class ResourceCase:
    name: str
    environment: Any
    pod: str
    requests: dict[str, str] | None
    limits: dict[str, str] | None
    options: dict[str, Any] = field(default_factory=dict)


RESOURCE_CASES = [
    ResourceCase("seed 000 chief: Polyaxon units, gpu requests == limits", SEED_000_TENSORFLOW, "chief-0",
                 {"cpu": "1", "memory": "256Mi", "nvidia.com/gpu": "1"},
                 {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": "1"}),
    ResourceCase("seed 000 worker 0: default_worker", SEED_000_TENSORFLOW, "worker-0",
                 {"cpu": "1", "memory": "256Mi", "nvidia.com/gpu": "1"},
                 {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": "1"}),
    ResourceCase("seed 000 worker 2: the index entry replaces the default (no gpu)", SEED_000_TENSORFLOW, "worker-2",
                 {"cpu": "1", "memory": "256Mi"}, {"cpu": "2", "memory": "1024Mi"}),
    ResourceCase("seed 000 ps 1: default_ps", SEED_000_TENSORFLOW, "ps-1",
                 {"cpu": "1", "memory": "256Mi"}, {"cpu": "1", "memory": "256Mi"}),
    ResourceCase("fractions: cpu 0.5 -> 500m, memory 0.5 -> 512Ki, strings kept", {
        "resources": {"cpu": {"requests": 0.5, "limits": "1500m"}, "memory": {"requests": 0.5, "limits": "2Gi"}}},
        "chief-0", {"cpu": "500m", "memory": "512Ki"}, {"cpu": "1500m", "memory": "2Gi"}),
    ResourceCase("a gpu request alone becomes the limit too", {"resources": {"gpu": {"requests": 2}}},
                 "chief-0", {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"}),
    ResourceCase("gpu and tpu resource keys are options",
                 {"resources": {"gpu": {"limits": 1}, "tpu": {"requests": 8, "limits": 8}}}, "chief-0",
                 {"amd.com/gpu": "1", "google.com/tpu": "8"}, {"amd.com/gpu": "1", "google.com/tpu": "8"},
                 {"gpu_resource_key": "amd.com/gpu", "tpu_resource_key": "google.com/tpu"}),
    ResourceCase("zero gpus ask for nothing", {"resources": {"gpu": {"requests": 0, "limits": 0}}},
                 "chief-0", None, None),
    ResourceCase("no resources", None, "chief-0", None, None),
]


@pytest.mark.parametrize("case", RESOURCE_CASES, ids=[c.name for c in RESOURCE_CASES])
def test_resources_in_kubernetes_quantities(case: ResourceCase):
    framework = None if case.environment == SEED_000_TENSORFLOW else "tensorflow"
    resources = _container(_pod(_build(framework, case.environment, **case.options), case.pod)).resources

    assert (resources.requests if resources else None) == case.requests
    assert (resources.limits if resources else None) == case.limits


def test_seed_001_horovod_every_replica_gets_one_gpu_and_one_slot():
    objects = _build(None, SEED_001_HOROVOD)

    assert len(objects.pods) == 8
    for pod in objects.pods:
        resources = _container(pod).resources
        assert resources.requests["nvidia.com/gpu"] == resources.limits["nvidia.com/gpu"] == "1"
    hostfile = objects.config_maps[0].data["hostfile"].splitlines()
    assert hostfile == [f"{pod.metadata.name}.{JOB}.{NAMESPACE}.svc slots=1" for pod in objects.pods]


# ------------------------------------------------------------------ labels and annotations

# Kubernetes' syntax for label keys (optional DNS-subdomain prefix, then a name) and values.
LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{LABEL_NAME}$")
LABEL_VALUE = re.compile(rf"^({LABEL_NAME})?$")


@pytest.mark.parametrize("run_id", [
    RUN_ID,
    "scheduled__2026-11-21T00:00:00+00:00",
    "backfill__" + "x" * 200,
    "++++",
])
def test_labels_are_valid_for_any_run_id_and_the_exact_id_is_an_annotation(run_id):
    task = TaskInstanceRef(dag_id="dag.with spaces", task_id="group.train", run_id=run_id, map_index=3, try_number=1)
    objects = _build("pytorch", {"pytorch": {"n_workers": 1}}, task_instance=task, queue_name="team-a",
                     gang_scheduling="scheduler-plugins").owned_by(UID)

    for body in objects.as_dicts():
        for key, value in body["metadata"]["labels"].items():
            assert LABEL_KEY.match(key), key
            assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)
        assert body["metadata"]["annotations"]["airflow-distributed/run-id"] == run_id
        assert body["metadata"]["labels"]["airflow-distributed/map-index"] == "3"


def test_pod_labels_name_job_role_index_master_and_task_instance():
    pod = _pod(_build("tensorflow", {"tensorflow": {"n_workers": 2, "default_worker": {"labels": {"team": "x"}}}},
                      labels={"owner": "ml"}), "worker-1")

    assert pod.metadata.labels == {
        "owner": "ml", "team": "x",
        JOB_LABEL: JOB, "airflow-distributed/role": "worker", "airflow-distributed/index": "1",
        "airflow-distributed/master": "false",
        "airflow-distributed/dag-id": "nightly_training", "airflow-distributed/task-id": "models.train",
        "airflow-distributed/run-id": "manual__2026-11-21T20_14_30.689650_00_00",
        "airflow-distributed/try-number": "2",  # no map-index label for an unmapped task (-1)
    }


class _TaskInstance:
    """The attributes of ``context["ti"]`` that a job's labels use."""

    def __init__(self, map_index):
        self.dag_id, self.task_id, self.run_id, self.try_number = "d", "t", RUN_ID, 1
        self.map_index = map_index


@pytest.mark.parametrize("map_index, expected", [(None, -1), (-1, -1), (4, 4)])
def test_task_instance_ref_of_a_task_instance(map_index, expected):
    assert TaskInstanceRef.of(_TaskInstance(map_index)) == TaskInstanceRef(
        dag_id="d", task_id="t", run_id=RUN_ID, map_index=expected, try_number=1)


def test_the_jobs_own_labels_win_over_user_labels():
    spec = {"labels": {JOB_LABEL: "someone-else", "airflow-distributed/role": "x"}}
    pod = _pod(_build("tensorflow", spec, labels={JOB_LABEL: "other"}), "chief-0")
    assert pod.metadata.labels[JOB_LABEL] == JOB
    assert pod.metadata.labels["airflow-distributed/role"] == "chief"


# ------------------------------------------------------------------ Service and ownership


@pytest.mark.parametrize("framework, environment, ports", [
    ("tensorflow", {"tensorflow": {"n_workers": 1}}, [("training", 2222)]),
    ("mxnet", {"mxnet": {"n_workers": 1}}, [("training", 9091)]),
    ("pytorch", {"pytorch": {"n_workers": 1}}, [("training", 23456)]),
    ("horovod", {"replicas": {"n_workers": 1}}, [("training", 2222), ("ssh", 22)]),
    ("jax", {"jax": {"n_workers": 1}}, [("training", 6666)]),
    ("xgboost", {"xgboost": {"n_workers": 1}}, [("training", 9999)]),
    ("paddle", {"paddle": {"n_workers": 1}}, [("training", 36543)]),
])
def test_service_is_headless_publishes_unready_pods_and_selects_the_job(framework, environment, ports):
    service = _build(framework, environment, ttl_seconds_after_finished=300).service

    assert service.metadata.name == JOB
    assert service.spec.cluster_ip == "None"
    assert service.spec.publish_not_ready_addresses is True
    assert service.spec.selector == {JOB_LABEL: JOB}
    assert [(port.name, port.port) for port in service.spec.ports] == ports
    assert service.metadata.annotations["airflow-distributed/ttl-seconds-after-finished"] == "300"
    assert service.metadata.owner_references is None


@pytest.mark.parametrize("case", JOB_CASES, ids=[c.name for c in JOB_CASES])
def test_every_dependent_is_owned_by_the_service_after_with_owner(case: JobCase):
    built = _build(case.framework, case.environment, case.model_dir, **case.options)
    assert all(not to_dict(obj)["metadata"].get("ownerReferences") for obj in built.dependents())

    owned = built.owned_by(UID)
    expected = [{"apiVersion": "v1", "kind": "Service", "name": JOB, "uid": UID}]
    assert [to_dict(obj)["metadata"]["ownerReferences"] for obj in owned.dependents()] == (
        [expected] * len(owned.dependents())
    )
    assert owned.owner is owned.service and owned.service.metadata.owner_references is None
    # Building with the uid gives the same bodies as adding it afterwards.
    direct = build_job_objects(_plan(case.framework, case.environment, model_dir=case.model_dir),
                               _options(**case.options), ssh_key=KEY, owner_uid=UID)
    assert direct.as_dicts() == owned.as_dicts()


def test_with_owner_copies_and_does_not_repeat_a_reference():
    pod = _build("pytorch", {"pytorch": {"n_workers": 1}}).pods[0]
    owned = with_owner(with_owner(pod, JOB, UID), JOB, UID)
    group = {"apiVersion": "x/v1", "kind": "PodGroup", "metadata": {"name": JOB}}

    assert pod.metadata.owner_references is None
    assert [ref.uid for ref in owned.metadata.owner_references] == [UID]
    assert with_owner(group, JOB, UID)["metadata"]["ownerReferences"][0]["uid"] == UID
    assert "ownerReferences" not in group["metadata"]


# ------------------------------------------------------------------ readiness step


@pytest.mark.parametrize("framework, environment", [
    ("tensorflow", {"tensorflow": {"n_workers": 2, "n_ps": 1}}),
    ("mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}),
    ("pytorch", {"pytorch": {"n_workers": 2}}),
    ("jax", {"jax": {"n_workers": 2}}),
    ("xgboost", {"xgboost": {"n_workers": 2}}),
    ("paddle", {"paddle": {"n_workers": 2}}),
])
def test_workers_wait_for_the_master_and_the_master_waits_for_nobody(framework, environment):
    plan = _plan(framework, environment)
    objects = build_job_objects(plan, _options(readiness_timeout_seconds=120))
    master = plan.master

    for pod, replica in zip(objects.pods, plan.replicas):
        names = [c.name for c in pod.spec.init_containers or []]
        if replica.is_master:
            assert names == []
            continue
        assert names == [READINESS_CONTAINER]
        init = _container(pod, READINESS_CONTAINER)
        assert init.image == "registry.example/trainer:1.4"
        assert init.command == wait_for_peers_command("python3", [(master.host, master.port)], 120)
        assert init.command[-2:] == ["120", f"{JOB}-{master.role}-0.{JOB}.{NAMESPACE}.svc:{master.port}"]


def test_paddle_trainers_wait_for_every_pserver_and_pservers_wait_for_nobody():
    # In parameter-server mode the master is trainer 0, which listens on nothing: waiting for it would never end.
    objects = _build("paddle", {"paddle": {"n_workers": 2, "n_ps": 2}})
    pservers = [f"{JOB}-pserver-{i}.{JOB}.{NAMESPACE}.svc:36543" for i in range(2)]

    for suffix in ("master-0", "worker-0", "worker-1"):
        assert _container(_pod(objects, suffix), READINESS_CONTAINER).command[-2:] == pservers, suffix
    for suffix in ("pserver-0", "pserver-1"):
        assert _pod(objects, suffix).spec.init_containers is None, suffix


def test_horovod_launcher_waits_for_every_workers_sshd_and_workers_wait_for_nothing():
    objects = _build("horovod", {"replicas": {"n_workers": 3}})
    launcher = _pod(objects, "launcher-0")

    assert _container(launcher, READINESS_CONTAINER).command[-3:] == [
        f"{JOB}-worker-{i}.{JOB}.{NAMESPACE}.svc:22" for i in range(3)
    ]
    assert all(pod.spec.init_containers is None for pod in objects.pods[1:])


def test_no_readiness_step_when_not_asked():
    objects = _build("pytorch", {"pytorch": {"n_workers": 2}}, wait_for_master=False)
    assert all(pod.spec.init_containers is None for pod in objects.pods)


# ------------------------------------------------------------------ master output


@pytest.mark.parametrize("framework, environment", [
    ("tensorflow", {"tensorflow": {"n_workers": 1}}),
    ("horovod", {"replicas": {"n_workers": 1}}),
])
def test_master_output_is_readable_from_the_xcom_sidecar_and_the_termination_message(framework, environment):
    objects = _build(framework, environment)
    master, other = objects.pods[0], objects.pods[1]
    main = _container(master)

    assert _env(master)["AIRFLOW_DISTRIBUTED_OUTPUT"] == OUTPUT_PATH == "/airflow/xcom/return.json"
    assert "AIRFLOW_DISTRIBUTED_OUTPUT" not in _env(other)
    assert [c.name for c in master.spec.containers] == [MAIN_CONTAINER, SIDECAR_CONTAINER]
    assert [c.name for c in other.spec.containers] == [MAIN_CONTAINER]
    sidecar = _container(master, SIDECAR_CONTAINER)
    assert main.volume_mounts[0].mount_path == sidecar.volume_mounts[0].mount_path == "/airflow/xcom"
    assert main.volume_mounts[0].name == sidecar.volume_mounts[0].name == master.spec.volumes[0].name
    assert master.spec.volumes[0].empty_dir is not None
    assert (main.termination_message_path, main.termination_message_policy) == (TERMINATION_MESSAGE_PATH, "File")
    assert main.command[:3] == ["python3", "-I", "-c"]
    assert main.command[4:6] == [OUTPUT_PATH, TERMINATION_MESSAGE_PATH]


PID_1 = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None,
                           reason="a process of PID 1 needs a PID namespace of its own (root, unshare, nsenter)")


def _first_child(pid: int) -> int | None:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0]) if children else None


def _wait_for(probe: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert found
    return found


@contextmanager
def as_pid_1(command: Sequence[str], cwd: str | None = None) -> Iterator[tuple[subprocess.Popen, int]]:
    """``command`` as PID 1 of a PID namespace of its own, as in its container: ``unshare``'s process (its exit
    status is the command's) and the command's pid, once it runs. With the signals' default dispositions, as a
    container's runtime starts it: a shell cannot trap a signal ignored when it started, and the test session may
    ignore SIGINT by then (so did a CI run's: the sidecar's ``trap ... INT`` then did nothing)."""

    def default_signals() -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)

    outer = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", *command], cwd=cwd,
                             preexec_fn=default_signals)
    try:
        yield outer, _wait_for(lambda: _first_child(outer.pid))
    finally:
        outer.kill()
        outer.wait()


@contextmanager
def sidecar_as_pid_1() -> Iterator[tuple[subprocess.Popen, int]]:
    """The master's XCom sidecar's command as PID 1, once its loop runs (its trap set: the shell then has a
    ``sleep`` of its own)."""
    sidecar = _container(_build("pytorch", {"pytorch": {"n_workers": 1}}).pods[0], SIDECAR_CONTAINER)
    with as_pid_1(sidecar.command) as (shell, child):
        _wait_for(lambda: _first_child(child))
        yield shell, child


@PID_1
def test_the_xcom_sidecar_stops_at_sigterm_as_pid_1():
    # In its container the sidecar's shell is PID 1, which the kernel sends no signal it has no handler for: a
    # deleted master pod would wait out its whole grace period (30 s by default) for the shell to go.
    with sidecar_as_pid_1() as (shell, child):
        os.kill(child, signal.SIGTERM)
        assert shell.wait(timeout=15) == 0


@PID_1
@pytest.mark.skipif(shutil.which("busybox") is None, reason="the sidecar's image's shell: busybox")
def test_the_xcom_sidecar_stops_at_the_tasks_exec_with_busybox_and_no_pgrep():
    # What the task execs once it has read the output, run inside the sidecar's PID namespace by a shell with only
    # busybox's applets that the node's sidecar image has (no pgrep there).
    with sidecar_as_pid_1() as (shell, child), tempfile.TemporaryDirectory() as applets:
        for applet in ("sh", "kill"):
            os.symlink(shutil.which("busybox"), os.path.join(applets, applet))
        stop = subprocess.run(["nsenter", "--target", str(child), "--pid", "--",
                               "env", f"PATH={applets}", *SIDECAR_STOP], capture_output=True, text=True, timeout=15)
        assert stop.returncode == 0 and stop.stderr == "", stop
        assert shell.wait(timeout=15) == 0


@PID_1
@pytest.mark.parametrize("role", ["master", "worker"])
def test_a_replicas_command_without_a_sigterm_handler_stops_at_sigterm_as_pid_1(role, tmp_path):
    # A training script rarely handles SIGTERM; run as its container's PID 1 it would ignore the kubelet's, and a
    # deleted pod (a failed, timed-out or killed job) would wait out its whole grace period (30 s by default). Under
    # the forwarder (the master's relay does the same) it gets the signal's default action.
    main = _container(_build("pytorch", {"pytorch": {"n_workers": 1}}).pods[0 if role == "master" else 1])
    parent = main.command[:-len(COMMAND)]
    assert main.command[-len(COMMAND):] == list(COMMAND) and parent[:3] == ["python3", "-I", "-c"]
    if role == "master":  # the relay's output and message paths, here in the test's folder
        parent[4:6] = [str(tmp_path / "return.json"), str(tmp_path / "message")]
    sleeper = "import pathlib, time; pathlib.Path('sleeping').touch(); time.sleep(120)"
    with as_pid_1([sys.executable, *parent[1:], sys.executable, "-c", sleeper], cwd=str(tmp_path)) as (outer, pid):
        _wait_for(lambda: (tmp_path / "sleeping").exists())
        os.kill(pid, signal.SIGTERM)
        assert outer.wait(timeout=15) == 128 + signal.SIGTERM


@PID_1
def test_a_readiness_step_still_waiting_stops_at_sigterm_as_pid_1():
    # A worker's readiness step, its container's PID 1, waits for a master that never listens (a closed port); its
    # pod is deleted (the job failed at startup_timeout, or was killed): it must not wait out the grace period.
    worker = _build("pytorch", {"pytorch": {"n_workers": 1}}).pods[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
    port = closed.getsockname()[1]
    command = [*_container(worker, READINESS_CONTAINER).command[:-1], f"127.0.0.1:{port}"]
    command[0] = sys.executable
    step = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", *command], stdout=subprocess.PIPE, text=True)
    try:
        assert step.stdout is not None and step.stdout.readline().startswith("waiting for 127.0.0.1:")
        [child] = Path(f"/proc/{step.pid}/task/{step.pid}/children").read_text().split()
        os.kill(int(child), signal.SIGTERM)
        assert step.wait(timeout=15) == 128 + signal.SIGTERM
    finally:
        closed.close()
        step.kill()
        step.wait()


def test_without_relay_the_master_runs_its_command_directly():
    objects = _build("pytorch", {"pytorch": {"n_workers": 1}}, relay_output=False)
    main = _container(objects.pods[0])
    assert main.command == list(COMMAND)
    assert main.termination_message_path is None
    assert _container(objects.pods[1]).command == list(COMMAND)


def test_relay_keeps_exit_code_and_copies_a_shortened_document(tmp_path):
    output, message = tmp_path / "return.json", tmp_path / "message"
    writer = ("import json, sys; json.dump({'metrics': {'loss': 0.1}, 'model_path': 's3://m', "
              f"'history': [{{'step': i}} for i in range(1000)]}}, open({str(output)!r}, 'w')); sys.exit(3)")
    done = subprocess.run(relay_output_command(sys.executable, [sys.executable, "-c", writer], str(output),
                                               str(message)), timeout=60)

    assert done.returncode == 3
    assert json.loads(message.read_text()) == {"metrics": {"loss": 0.1}, "model_path": "s3://m", "truncated": True}
    # Read back (no XCom sidecar: the kubeflow and trainjob backends, or a sidecar that did not start), the cut is
    # said: the history the master wrote is not the one the task has.
    document = parse_output_document(message.read_text())
    assert (document["metrics"], document["model_path"], document["history"]) == ({"loss": 0.1}, "s3://m", [])
    assert "longer than a termination message holds (4096 bytes)" in (document_warning(document) or "")


def test_wait_for_peers_gives_up_after_its_timeout():
    done = subprocess.run(wait_for_peers_command(sys.executable, [("nothing-here.invalid", 1)], 0.5),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "nothing-here.invalid:1 is not reachable after 0.5s" in done.stderr


# ------------------------------------------------------------------ Horovod


def test_horovod_launcher_runs_horovodrun_and_workers_run_sshd():
    objects = _build(None, SEED_001_HOROVOD)
    launcher_command = _container(objects.pods[0]).command

    user_command = launcher_command[6:]  # after the relay's python -I -c <script> <output> <message>
    assert user_command[0] == "horovodrun"
    assert user_command[user_command.index("-np") + 1] == "8"
    assert user_command[-len(COMMAND):] == list(COMMAND)
    for worker in objects.pods[1:]:
        command = _container(worker).command
        assert command[:2] == ["sh", "-c"] and "exec /usr/sbin/sshd -D -e -p 22" in command[2]
        assert [(p.name, p.container_port) for p in _container(worker).ports] == [("training", 2222), ("ssh", 22)]


def test_horovod_key_pair_secret_and_mounts():
    objects = _build("horovod", {"replicas": {"n_workers": 2}})
    (secret,) = objects.secrets

    assert secret.metadata.name == f"{JOB}-ssh" and secret.immutable is True
    assert secret.string_data["authorized_keys"] == KEY.public_key + "\n"
    assert secret.string_data["id_ed25519"] == KEY.private_key
    for pod in objects.pods:
        volume = next(v for v in pod.spec.volumes if v.secret is not None)
        mount = next(m for m in _container(pod).volume_mounts if m.name == volume.name)
        items = [item.key for item in volume.secret.items]
        assert volume.secret.secret_name == secret.metadata.name and volume.secret.default_mode == 0o600
        assert (mount.mount_path, mount.read_only) == (SSH_DIR, True) == ("/root/.ssh", True)
        assert "authorized_keys" in items
        assert ("id_ed25519" in items) == (pod is objects.pods[0])  # private key on the launcher only


def test_horovod_hostfile_config_map_is_mounted_where_the_plan_points():
    plan = _plan("horovod", {"replicas": {"n_workers": 2}})
    objects = build_job_objects(plan, _options(), ssh_key=KEY)
    (config_map,) = objects.config_maps

    assert config_map.metadata.name == f"{JOB}-files" and config_map.immutable is True
    assert config_map.data == {**plan.files, "cluster.json": plan.master.env["AIRFLOW_DISTRIBUTED_CLUSTER"]}
    for pod in objects.pods:
        mount = next(m for m in _container(pod).volume_mounts if m.name == "files")
        assert (mount.mount_path, mount.read_only) == (FILES_DIR, True)
        assert _env(pod)["OMPI_MCA_orte_default_hostfile"] == f"{FILES_DIR}/hostfile"


def test_secret_files_go_to_a_secret_of_the_job_mounted_on_every_pod_never_to_the_config_map():
    spec = load_spec("horovod", {"replicas": {"n_workers": 1}})
    plan = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout_for_kubernetes(), list(COMMAND),
                      backend="kubernetes", launch=POD_LAUNCH, files={"task.py": "print(1)"},
                      secret_files={"arguments.json": '{"token": "s3cr3t"}'})
    objects = build_job_objects(plan, _options(), ssh_key=KEY, owner_uid=UID)

    (config_map,) = objects.config_maps
    assert "arguments.json" not in config_map.data and "s3cr3t" not in str(to_dict(config_map))
    secret = next(s for s in objects.secrets if s.metadata.name == f"{JOB}-secret-files")
    assert secret.string_data == {"arguments.json": '{"token": "s3cr3t"}'} and secret.immutable is True
    assert [ref.uid for ref in secret.metadata.owner_references] == [UID]  # goes with the job's Service
    assert job_secret_names(JOB) == (f"{JOB}-ssh", f"{JOB}-secret-files")
    assert sorted(s.metadata.name for s in objects.secrets) == sorted(job_secret_names(JOB))
    for pod in objects.pods:  # standby workers too: the launcher runs the command on them over SSH
        mount = next(m for m in _container(pod).volume_mounts if m.name == "secret-files")
        assert (mount.mount_path, mount.read_only) == (SECRET_FILES_DIR, True)
        volume = next(v for v in pod.spec.volumes if v.name == "secret-files")
        assert volume.secret.secret_name == f"{JOB}-secret-files"
        assert "s3cr3t" not in str(to_dict(pod))


def test_secret_files_without_a_directory_of_their_own_are_refused():
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1}})
    layout = Layout(model_dir=MODEL_DIR, output_path=OUTPUT_PATH, files_dir=FILES_DIR)
    plan = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout, list(COMMAND),
                      backend="kubernetes", launch=POD_LAUNCH,
                      secret_files={"arguments.json": "{}"})
    with pytest.raises(ValueError, match="secret files need a secret_files_dir of their own"):
        build_job_objects(plan, _options())


def test_generated_key_pair_is_a_matching_ed25519_pair():
    from cryptography.hazmat.primitives import serialization

    pair = generate_ssh_key_pair("job-x")
    private = serialization.load_ssh_private_key(pair.private_key.encode(), password=None)
    public = private.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)

    assert pair.public_key == public.decode() + " job-x"
    assert pair.public_key.startswith("ssh-ed25519 ")
    assert pair.private_key not in repr(pair)
    assert generate_ssh_key_pair().public_key != pair.public_key


# ------------------------------------------------------------------ pod settings


def test_every_pod_setting_reaches_the_pod():
    pod = _pod(_build("pytorch", {**EVERY_SETTING, "pytorch": {"n_workers": 1}}), "master-0")
    main = _container(pod)

    assert pod.spec.node_selector == {"cloud.google.com/gke-nodepool": "training"}
    term = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
    assert term.match_expressions[0].values == ["a100", "h100"]
    assert [(t.key, t.toleration_seconds) for t in pod.spec.tolerations] == [("nvidia.com/gpu", None), ("spot", 60)]
    assert pod.metadata.labels["team"] == "vision" and pod.metadata.annotations["cost-center"] == "ml-42"
    assert pod.spec.service_account_name == "trainer"
    assert [s.name for s in pod.spec.image_pull_secrets] == ["registry-credentials"]
    assert _env(pod)["LOG_LEVEL"] == "debug"
    assert [(s.config_map_ref.name if s.config_map_ref else s.secret_ref.name) for s in main.env_from] == [
        "training-defaults", "wandb-api-key"]  # secrets last: they win
    # Fields both levels know go to the pod (they then cover the sidecar too); container-only ones to containers.
    assert (pod.spec.security_context.run_as_user, pod.spec.security_context.fs_group) == (1000, 1000)
    assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    for container in pod.spec.containers:
        assert container.security_context.allow_privilege_escalation is False
        assert container.security_context.capabilities.drop == ["ALL"]


def test_python_names_of_the_client_are_accepted_too():
    snake = {"affinity": {"node_affinity": {"preferred_during_scheduling_ignored_during_execution": [
        {"weight": 1, "preference": {"match_expressions": [{"key": "k", "operator": "Exists"}]}}]}},
        "security_context": {"run_as_non_root": True}}
    pod = _pod(_build("tensorflow", snake), "chief-0")
    assert pod.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution[0].weight == 1
    assert pod.spec.security_context.run_as_non_root is True


@pytest.mark.parametrize("token, expected", [(None, False), (True, True)])
def test_no_service_account_token_unless_asked(token, expected):
    options = {} if token is None else {"automount_service_account_token": token}
    objects = _build("pytorch", {"pytorch": {"n_workers": 1}}, **options)
    assert {pod.spec.automount_service_account_token for pod in objects.pods} == {expected}
    assert {pod.spec.enable_service_links for pod in objects.pods} == {False}


@pytest.mark.parametrize("setting, expected", [
    (None, {"emptyDir": {}}),
    ("models-claim", {"persistentVolumeClaim": {"claimName": "models-claim"}}),
    ({"name": "ignored", "nfs": {"server": "nfs.example", "path": "/m"}},
     {"nfs": {"server": "nfs.example", "path": "/m"}}),
    (client.V1Volume(name="ignored", host_path=client.V1HostPathVolumeSource(path="/data")),
     {"hostPath": {"path": "/data"}}),
])
def test_model_dir_volume(setting, expected):
    objects = _build("pytorch", {"pytorch": {"n_workers": 1}}, model_volume=setting)
    for pod in objects.pods:
        volume = next(to_dict(v) for v in pod.spec.volumes if v.name == "model-dir")
        mount = next(m for m in _container(pod).volume_mounts if m.name == "model-dir")
        assert volume == {"name": "model-dir", **expected}
        assert mount.mount_path == MODEL_DIR == _env(pod)["AIRFLOW_DISTRIBUTED_MODEL_DIR"]


def test_layout_for_kubernetes():
    assert layout_for_kubernetes() == Layout(model_dir=MODEL_DIR, output_path=OUTPUT_PATH, files_dir=FILES_DIR,
                                             secret_files_dir=SECRET_FILES_DIR)
    assert layout_for_kubernetes("/mnt/models").model_dir == "/mnt/models"


# ------------------------------------------------------------------ gang scheduling and queues


@dataclass(frozen=True)
class GroupCase:
    name: str
    options: dict[str, Any]
    pod_group: dict[str, Any] | None
    labels: dict[str, str]
    annotations: dict[str, str]
    scheduler: str | None


GROUP_CASES = [
    GroupCase("volcano", {"gang_scheduling": "volcano"},
              {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "spec": {"minMember": 3, "minResources": {"cpu": "3001m", "memory": "778Mi"}}},
              {}, {"scheduling.k8s.io/group-name": JOB}, "volcano"),
    GroupCase("scheduler-plugins", {"gang_scheduling": "scheduler-plugins", "scheduler_name": "sp-scheduler"},
              {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
               "spec": {"minMember": 3, "minResources": {"cpu": "3001m", "memory": "778Mi"}}},
              {"scheduling.x-k8s.io/pod-group": JOB}, {}, "sp-scheduler"),
    GroupCase("kueue", {"queue_name": "team-a"}, None,
              {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/pod-group-name": JOB},
              {"kueue.x-k8s.io/pod-group-total-count": "3", "kueue.x-k8s.io/retriable-in-group": "false"}, None),
    GroupCase("none", {}, None, {}, {}, None),
]


@pytest.mark.parametrize("case", GROUP_CASES, ids=[c.name for c in GROUP_CASES])
def test_pod_group(case: GroupCase):
    # master 1 cpu/256Mi (+ sidecar 1m/10Mi), 2 workers 1 cpu/256Mi (their 10m/32Mi readiness step is smaller)
    environment = {"resources": {"cpu": {"requests": 1}, "memory": {"requests": 256}},
                   "pytorch": {"n_workers": 2, "default_worker": {
                       "resources": {"cpu": {"requests": 1}, "memory": {"requests": 256}}}}}
    objects = _build("pytorch", environment, **case.options).owned_by(UID)

    if case.pod_group is None:
        assert objects.pod_group is None
    else:
        group = objects.pod_group
        assert {key: group[key] for key in ("apiVersion", "kind", "spec")} == case.pod_group
        assert (group["metadata"]["name"], group["metadata"]["namespace"]) == (JOB, NAMESPACE)
        assert group["metadata"]["ownerReferences"][0]["uid"] == UID
    for pod in objects.pods:
        assert case.labels.items() <= pod.metadata.labels.items()
        assert case.annotations.items() <= (pod.metadata.annotations or {}).items()
        assert pod.spec.scheduler_name == case.scheduler


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("environment, message", [
    ({"affinity": {"nodeAfinity": {}}}, f"replica {JOB}-chief-0: affinity: unknown field 'nodeAfinity'"),
    ({"tolerations": [{"key": "a", "tolerationSeconds": "60"}]},
     f"replica {JOB}-chief-0: tolerations[0].tolerationSeconds: expected int, got '60'"),
    ({"tensorflow": {"n_workers": 2, "worker": [{"index": 1, "security_context": {"runAsUsr": 1}}]}},
     f"replica {JOB}-worker-1: security_context: unknown field 'runAsUsr'"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
     f"replica {JOB}-chief-0: affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: "
     "'nodeSelectorTerms' is required"),
])
def test_invalid_pod_settings_name_the_replica_and_field(environment, message):
    with pytest.raises(SpecValidationError):  # refused when the DAG is parsed
        load_spec("tensorflow", environment)
    plan = _plan("tensorflow", environment, checked=False)
    with pytest.raises(ManifestError, match=re.escape(message)):
        build_job_objects(plan, _options(), ssh_key=KEY)


def test_plans_not_built_for_this_backend_are_refused():
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1}})
    local = build_plan(spec, JOB, LocalAddressing(ports=[1, 2]), layout_for_kubernetes(), ["t"],
                       backend="local", launch=LOCAL_LAUNCH)
    other_layout = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), Layout("/m", "/out.json", "/f"), ["t"],
                              backend="kubernetes", launch=POD_LAUNCH)
    # Named for this backend, built with another's launch facts: its replicas would get the other's variables.
    other_facts = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout_for_kubernetes(), ["t"],
                             backend="kubernetes", launch=KUBEFLOW_LAUNCH)

    with pytest.raises(ValueError, match="built for the 'local' backend"):
        build_job_objects(local, _options())
    with pytest.raises(ValueError, match=r"built with the launch facts .*, not the 'kubernetes' backend's"):
        build_job_objects(other_facts, _options())
    with pytest.raises(ValueError, match=r"output path must be /airflow/xcom/return\.json"):
        build_job_objects(other_layout, _options())
    with pytest.raises(ValueError, match=r"KubernetesAddressing\('elsewhere'\)"):
        build_job_objects(_plan("pytorch", {"pytorch": {"n_workers": 1}}), _options(namespace="elsewhere"))
    with pytest.raises(ValueError, match="ssh_key=generate_ssh_key_pair"):
        build_job_objects(_plan("horovod", {"replicas": {"n_workers": 1}}), _options())


@pytest.mark.parametrize("options, message", [
    ({"image": ""}, "image must not be empty"),
    ({"gang_scheduling": "yunikorn"}, "gang_scheduling 'yunikorn' is not supported"),
    ({"image_pull_policy": "always"}, "image_pull_policy 'always'"),
])
def test_invalid_options(options, message):
    with pytest.raises(ValueError, match=message):
        _options(**options)


# ------------------------------------------------------------------ purity


@pytest.mark.parametrize("case", JOB_CASES, ids=[c.name for c in JOB_CASES])
def test_builders_leave_their_inputs_unchanged_and_are_deterministic(case: JobCase):
    plan = _plan(case.framework, case.environment, model_dir=case.model_dir)
    options = _options(**case.options)
    # The plan's containers are immutable; what inside them can change is compared as deep copies.
    before = ([copy.deepcopy(r.settings) for r in plan.replicas], [dict(r.env) for r in plan.replicas],
              [r.command for r in plan.replicas], dict(plan.files), copy.deepcopy(options), copy.deepcopy(KEY))

    first = build_job_objects(plan, options, ssh_key=KEY)
    owned = first.owned_by(UID)
    for obj in owned.dependents():
        to_dict(obj)
    second = build_job_objects(plan, options, ssh_key=KEY)

    after = ([r.settings for r in plan.replicas], [dict(r.env) for r in plan.replicas],
             [r.command for r in plan.replicas], dict(plan.files), options, KEY)
    assert after == before
    assert first.as_dicts() == second.as_dicts()
    assert all("ownerReferences" not in body["metadata"] for body in first.as_dicts())


@pytest.mark.parametrize(("framework", "environment", "secret_files", "expected"), [
    ("pytorch", {"pytorch": {"n_workers": 1}}, None, ()),
    ("pytorch", {"pytorch": {"n_workers": 1}}, {"arguments.json": "{}"}, ("secret-files",)),
    ("horovod", {"replicas": {"n_workers": 1}}, None, ("ssh",)),
    ("horovod", {"replicas": {"n_workers": 1}}, {"arguments.json": "{}"}, ("ssh", "secret-files")),
])
def test_the_secrets_a_job_deletes_when_it_ends_are_those_it_made(framework, environment, secret_files, expected):
    # A DELETE of a Secret the job never had is answered 404: a request the clean-up can know is useless.
    spec = load_spec(framework, environment)
    plan = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout_for_kubernetes(), list(COMMAND),
                      backend="kubernetes", launch=POD_LAUNCH, secret_files=secret_files)
    objects = build_job_objects(plan, _options(), ssh_key=KEY)

    assert objects.secret_names() == tuple(f"{JOB}-{suffix}" for suffix in expected)
    assert sorted(objects.secret_names()) == sorted(s.metadata.name for s in objects.owned_by(UID).secrets)
