"""The names a job's pods carry (containers, labels, annotations), apart from the builders so that pure job state
(``jobstate``) reads them without loading the Kubernetes client."""

from __future__ import annotations

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

__all__ = ["INDEX_LABEL", "JOB_LABEL", "LABEL_PREFIX", "MAIN_CONTAINER", "MASTER_LABEL", "READINESS_CONTAINER",
           "RESTARTS_ANNOTATION", "ROLE_LABEL"]
