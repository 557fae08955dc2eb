"""TF_CONFIG as TensorFlow itself reads it: TFConfigClusterResolver, for every replica of a job with ps."""

from __future__ import annotations

import json
import os

import pytest

from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.plan import Layout, LocalAddressing, build_plan
from airflow_distributed.spec import load_spec

tf = pytest.importorskip("tensorflow", reason="tensorflow-cpu is part of the test extra")


@pytest.fixture
def restore_tf_config():
    before = os.environ.get("TF_CONFIG")
    yield
    if before is None:
        os.environ.pop("TF_CONFIG", None)
    else:
        os.environ["TF_CONFIG"] = before


@pytest.mark.parametrize("n_ps", [0, 2])
def test_every_replica_tf_config_is_accepted_by_tensorflow(restore_tf_config, n_ps):
    spec = load_spec("tensorflow", {"tensorflow": {"n_workers": 3, "n_ps": n_ps}})
    ports = list(range(32000, 32000 + 4 + n_ps))
    plan = build_plan(spec, "job", LocalAddressing(ports=ports), Layout("/m", "/o", "/f"), ["x"],
                      backend="local", launch=LOCAL_LAUNCH)
    expected_jobs = {"chief": 1, "worker": 3, **({"ps": n_ps} if n_ps else {})}
    for replica in plan.replicas:
        os.environ["TF_CONFIG"] = replica.env["TF_CONFIG"]
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        cluster = resolver.cluster_spec()
        assert {job: cluster.num_tasks(job) for job in cluster.jobs} == expected_jobs
        assert (resolver.task_type, resolver.task_id) == (replica.role, replica.index)
        assert cluster.task_address(replica.role, replica.index) == replica.address
        assert resolver.master(rpc_layer="grpc") == f"grpc://{replica.address}"
        assert json.loads(replica.env["TF_CONFIG"])["cluster"] == cluster.as_dict()
