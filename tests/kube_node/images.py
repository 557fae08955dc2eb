"""What the real node's DAGs (``tests/dags/kube_node_*.py``) know of its images, in a module that defines no DAG: a
DAG file that imported another DAG file would define that file's DAGs a second time when Airflow parses it.

The images themselves are ``scripts/build-kube-node-images.sh``'s, named by the fixtures through the environment. DAG
files are parsed outside a node session too (every DAG file is): a placeholder then, which no test runs."""

from __future__ import annotations

import os

#: Where every trainer image holds the example training scripts.
TRAINING_DIR = "/opt/airflow-distributed/training"


def image_variable(framework: str = "") -> str:
    """The variable naming the trainer image (torch's), or ``trainer-<framework>``'s."""
    return f"KUBE_NODE_{framework.upper()}_IMAGE" if framework else "KUBE_NODE_TRAINER_IMAGE"


def trainer_image(framework: str = "") -> str:
    return os.environ.get(image_variable(framework),
                          f"127.0.0.1:5000/airflow-distributed/trainer{'-' + framework if framework else ''}:unbuilt")


def shared_model_volume() -> dict:
    """The one node's ``hostPath`` folder a test made (``KUBE_NODE_MODEL_DIR``): a model directory every replica
    shares and that outlives the pods, as a claim would on a cluster."""
    return {"hostPath": {"path": os.environ.get("KUBE_NODE_MODEL_DIR", "/nonexistent"), "type": "Directory"}}
