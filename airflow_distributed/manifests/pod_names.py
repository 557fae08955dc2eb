"""The names a job's pods carry (containers, labels, annotations), apart from the builders so that pure job state
(``jobstate``) reads them without loading the Kubernetes client."""

from __future__ import annotations

from airflow_distributed.naming import label_value
from airflow_distributed.task_instance import TaskInstanceRef

# The KubernetesPodOperator's name for the main container, so the provider's PodManager helpers work unchanged.
MAIN_CONTAINER = "base"
READINESS_CONTAINER = "wait-for-peers"

LABEL_PREFIX = "airflow-distributed/"
JOB_LABEL = LABEL_PREFIX + "job"
ROLE_LABEL = LABEL_PREFIX + "role"
INDEX_LABEL = LABEL_PREFIX + "index"
MASTER_LABEL = LABEL_PREFIX + "master"
# How often the task recreated this replica's pod (elastic jobs): kept on the pod, so a deferred or reattached
# task, the job view and a sensor all count the same restarts.
RESTARTS_ANNOTATION = LABEL_PREFIX + "restarts"



def task_labels(ti: TaskInstanceRef | None) -> dict[str, str]:
    """The labels of the task instance a job belongs to (for selectors); none without one."""
    if ti is None:
        return {}
    labels = {
        LABEL_PREFIX + "dag-id": label_value(ti.dag_id),
        LABEL_PREFIX + "task-id": label_value(ti.task_id),
        LABEL_PREFIX + "run-id": label_value(ti.run_id),
    }
    # label_value would turn -1 into "1": an unmapped task gets no map-index label at all.
    if ti.map_index >= 0:
        labels[LABEL_PREFIX + "map-index"] = str(ti.map_index)
    if ti.try_number is not None:
        labels[LABEL_PREFIX + "try-number"] = str(ti.try_number)
    return labels


def task_annotations(ti: TaskInstanceRef | None) -> dict[str, str]:
    """The exact ids of the task instance a job belongs to: a label value keeps 63 of ``[A-Za-z0-9_.-]``, so ``+``,
    ``:`` and long ids are lost."""
    if ti is None:
        return {}
    return {
        LABEL_PREFIX + "dag-id": ti.dag_id,
        LABEL_PREFIX + "task-id": ti.task_id,
        LABEL_PREFIX + "run-id": ti.run_id,
    }


__all__ = ["INDEX_LABEL", "JOB_LABEL", "LABEL_PREFIX", "MAIN_CONTAINER", "MASTER_LABEL", "READINESS_CONTAINER",
           "RESTARTS_ANNOTATION", "ROLE_LABEL", "task_annotations", "task_labels"]
