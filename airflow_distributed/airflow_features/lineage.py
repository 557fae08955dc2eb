"""OpenLineage facets of a distributed training job: the job's shape as a run facet, the model as output dataset.

Imported only by the operator's ``get_openlineage_facets_on_*`` methods (``_lineage``), which the OpenLineage
provider calls when it is installed and enabled; nothing here is loaded otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import RunFacet

from airflow_distributed.plan import role_summary
from airflow_distributed.spec import TrainingSpec

FACET = "airflowDistributed"


@attr.define
class DistributedTrainingRunFacet(RunFacet):
    """The shape of the job: framework, backend, its replicas per role with their resources, its outcome and what it
    cost and how it started (``usage`` and ``startup``, as in the ``job`` XCom; empty when the job never ran or its
    backend records none)."""

    framework: str
    backend: str
    state: str
    # camelCase, as OpenLineage facets are
    replicaCount: int
    roles: list[dict[str, Any]]
    jobName: str | None = None
    metrics: dict[str, Any] = attr.field(factory=dict)
    usage: dict[str, Any] = attr.field(factory=dict)
    startup: dict[str, Any] = attr.field(factory=dict)


def model_dataset(model_path: str) -> Dataset:
    """The model as a dataset, named as OpenLineage names storage: ``s3://bucket`` + ``key``, or ``file`` + path."""
    parsed = urlparse(model_path)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:  # not a Windows drive letter
        return Dataset(namespace=f"{parsed.scheme}://{parsed.netloc}", name=parsed.path.lstrip("/") or "/")
    return Dataset(namespace="file", name=parsed.path if parsed.scheme == "file" else model_path)


def job_lineage(spec: TrainingSpec, backend: str, result: Mapping[str, Any] | None, state: str,
                usage: Mapping[str, Any] | None = None, startup: Mapping[str, Any] | None = None) -> OperatorLineage:
    """The lineage of one try: its run facet (with the job's ``usage`` and ``startup``, when recorded), and the model
    as output once a model path is known."""
    result = result or {}
    roles = role_summary(spec)
    facet = DistributedTrainingRunFacet(
        framework=spec.framework, backend=backend, state=state, replicaCount=sum(r["count"] for r in roles),
        roles=roles, jobName=result.get("job_name"), metrics=dict(result.get("metrics") or {}),
        usage=dict(usage or {}), startup=dict(startup or {}),
    )
    model_path = result.get("model_path")
    outputs = [model_dataset(model_path)] if isinstance(model_path, str) and model_path else []
    return OperatorLineage(outputs=outputs, run_facets={FACET: facet})
