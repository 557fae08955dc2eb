"""What downstream tasks receive when the master reports less than everything (local backend, real DAG runs).

The Kubernetes backend's and the sensors' versions of these runs are in ``test_kubernetes_backend.py`` and
``test_sensors.py``.
"""

from __future__ import annotations

import pytest

from tests.helpers import run_dag, xcom

pytestmark = pytest.mark.usefixtures("airflow_db")


def test_a_master_with_metrics_and_no_model_path_hands_none_downstream():
    run, states = run_dag("local_metrics_only")

    assert states == {"train": "success", "evaluate": "success"}
    assert xcom(run, "evaluate") == {"metrics": {"loss": 0.5, "accuracy": 0.9}, "model_path": None}
    assert xcom(run, "train")["model_path"] is None


def test_a_master_that_reports_nothing_hands_empty_metrics_and_none_downstream():
    run, states = run_dag("local_no_output")

    assert states == {"train": "success", "evaluate": "success"}
    assert xcom(run, "evaluate") == {"metrics": {}, "model_path": None}
