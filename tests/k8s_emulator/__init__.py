"""A Kubernetes API server emulator for tests, served over HTTP on 127.0.0.1.

See README.md in this folder. The real ``kubernetes`` / ``kubernetes_asyncio`` clients and the Airflow
cncf-kubernetes hooks talk to it through the kubeconfig ``KubeEmulator.write_kubeconfig`` writes.
"""

from .cluster import ApiError
from .server import KubeEmulator, RecordedRequest

__all__ = ["ApiError", "KubeEmulator", "RecordedRequest"]
