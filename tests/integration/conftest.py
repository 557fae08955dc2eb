"""Fixtures of the modules that run against the Kubernetes API emulator (one emulator per module).

A module that needs another emulator (a bookmark interval of its own, Kubeflow's CRDs) overrides ``emulator``.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.k8s_emulator import KubeEmulator


@pytest.fixture(scope="module")
def emulator():
    with KubeEmulator(kubernetes_version="1.31", bookmark_interval=0.5) as emu:
        yield emu
        assert emu.errors == [], "\n".join(emu.errors)


@pytest.fixture
def ns(emulator) -> str:
    """A fresh namespace of the module's emulator: each test's objects apart from the others'."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    emulator.create_namespace(name)
    return name


@pytest.fixture(scope="module")
def kubernetes_connection(kubeconfig):
    """``kubernetes_default`` pointing at the emulator, as an Airflow connection in the environment."""
    value = json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", value)
        yield value
