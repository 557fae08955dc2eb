"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from airflow_distributed import __version__


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-distributed",
        "name": "Distributed Training",
        "description": "Distributed training (TensorFlow, MXNet, PyTorch, Horovod, JAX, XGBoost, Paddle) from a "
        "Polyaxon-style environment spec, on local processes, Kubernetes pods, the Kubeflow Training Operator or a "
        "Ray cluster.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Distributed Training",
                "external-doc-url": "https://github.com/airflow-distributed/airflow-distributed",
                "tags": ["software"],
            }
        ],
        "operators": [
            {"integration-name": "Distributed Training", "python-modules": ["airflow_distributed.operators.training"]}
        ],
        "sensors": [
            {
                "integration-name": "Distributed Training",
                "python-modules": ["airflow_distributed.sensors.base", "airflow_distributed.sensors.frameworks"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Distributed Training",
                "python-modules": [
                    "airflow_distributed.triggers.kubernetes",
                    "airflow_distributed.triggers.kubeflow",
                    "airflow_distributed.triggers.trainjob",
                    "airflow_distributed.triggers.sensors",
                    "airflow_distributed.triggers.ray",
                ],
            }
        ],
        "task-decorators": [
            {"name": "distributed", "class-name": "airflow_distributed.decorators.distributed.distributed_task"}
        ],
        "extra-links": [
            "airflow_distributed.airflow_features.links.DistributedJobLink",
            "airflow_distributed.airflow_features.links.JobUrlLink",
            "airflow_distributed.airflow_features.links.MlflowRunLink",
        ],
        "hooks": [
            {
                "integration-name": "Distributed Training",
                "python-modules": [
                    "airflow_distributed.hooks.local",
                    "airflow_distributed.hooks.kubernetes",
                    "airflow_distributed.hooks.kubeflow",
                    "airflow_distributed.hooks.trainjob",
                    "airflow_distributed.hooks.ray",
                ],
            }
        ],
        "connection-types": [
            {"hook-class-name": "airflow_distributed.hooks.ray.RayJobHook", "connection-type": "ray"},
        ],
    }
