"""TensorFlow: chief + workers + parameter servers, described to every replica by ``TF_CONFIG``."""

from __future__ import annotations

import json

from airflow_distributed.frameworks.base import Framework, Role


class TensorFlow(Framework):
    name = "tensorflow"
    # ps before workers: with ParameterServerStrategy workers block until the servers answer.
    roles = (Role("chief", None), Role("ps", "ps"), Role("worker", "worker"))
    default_port = 2222
    no_trainer_runtime = "TensorFlow has no Kubeflow Trainer v2 runtime"

    def replica_env(self, replica, plan):
        tf_config = {
            "cluster": plan.cluster,  # roles with no replicas are already left out
            "task": {"type": replica.role, "index": replica.index},
            "environment": "cloud",
        }
        return {"TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))}
