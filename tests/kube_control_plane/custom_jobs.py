"""The stand-in controllers of ``tests/integration`` (the Kubeflow Training Operator's, Trainer's) over the real API:
the same scripts, with the test kubelet's node in place of the emulator, and "the task watches the job" read from
the real server's audit log instead of the emulator's request record."""

from __future__ import annotations

from airflow_distributed.manifests.kubeflow_kinds import KINDS, kubeflow_resource
from tests.integration import trainjob_controller as trainjob
from tests.integration.kubeflow_controller import KubeflowController
from tests.integration.trainjob_controller import PLURAL, TrainerController
from tests.kube_control_plane.control_plane import ControlPlane
from tests.kube_control_plane.kubelet import KubeletNode


def custom_job_kinds() -> dict:
    """``ControlPlane``'s ``crds`` and ``schemas`` of the Kubeflow v1 kinds (open) and the TrainJob CRD with the
    project's schema of it (tests/data/trainjob)."""
    kinds = tuple((r.group, r.version, r.plural, r.kind) for r in map(kubeflow_resource, KINDS))
    kinds += ((trainjob.GROUP, trainjob.VERSION, trainjob.PLURAL, trainjob.KIND),)
    return {"crds": kinds, "schemas": {trainjob.PLURAL: trainjob.trainjob_schema()}}


def control_plane_with_custom_jobs() -> ControlPlane:
    """A control plane (not started) serving the custom job kinds (``custom_job_kinds``)."""
    return ControlPlane(min_request_timeout=5, **custom_job_kinds())


def watched(plane: ControlPlane, namespace: str, plural: str, pods: bool = False) -> bool:
    """Some identity has a watch open on ``plural`` in ``namespace`` (the task's, or its trigger's), and with ``pods``
    one on its pods too (``CustomJobController.watched``)."""
    resources = {(e.get("objectRef") or {}).get("resource") for e in plane.audit_events()
                 if e["verb"] == "watch" and (e.get("objectRef") or {}).get("namespace") == namespace}
    return plural in resources and (not pods or "pods" in resources)


class RealKubeflowController(KubeflowController):
    def __init__(self, plane: ControlPlane, node: KubeletNode, namespace: str, plural: str) -> None:
        super().__init__(node, namespace, plural)  # type: ignore[arg-type]  # the node answers the same calls
        self.plane = plane

    def watched(self, pods: bool = False) -> bool:
        return watched(self.plane, self.namespace, self.plural, pods)


class RealTrainerController(TrainerController):
    def __init__(self, plane: ControlPlane, node: KubeletNode, namespace: str) -> None:
        super().__init__(node, namespace)  # type: ignore[arg-type]  # the node answers the same calls
        self.plane = plane

    def watched(self, pods: bool = False) -> bool:
        return watched(self.plane, self.namespace, PLURAL, pods)
