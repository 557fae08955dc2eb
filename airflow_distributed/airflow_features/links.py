"""Operator extra links of ``DistributedTrainingOperator``: its job view in the Airflow UI, and URL templates.

Airflow 3 calls ``get_link`` on the worker when the task finishes and stores each URL in XCom under the link's
``xcom_key``; the UI reads it back from there. So a link may depend only on what the worker knows: the task
instance's ids, and the job name, which is a pure function of them (``naming.job_name``).

``JobUrlLink`` fills a template such as ``https://tensorboard.example.com/#scalars&regexInput={job_name}``
with ``{job_name}``, ``{dag_id}``, ``{run_id}``, ``{task_id}``, ``{map_index}`` and ``{try_number}``, each
URL-quoted; templates are checked when the DAG is parsed.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs
from airflow.sdk import BaseOperatorLink
from airflow.sdk.configuration import conf

from airflow_distributed.naming import job_name
from airflow_distributed.plugins.urls import ui_tab_path
from airflow_distributed.spec.errors import SpecValidationError

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

PLACEHOLDERS = ("job_name", "dag_id", "run_id", "task_id", "map_index", "try_number")
#: Names are shown as buttons and become part of an XCom key: keep them short.
NAME_MAX = 64

JobLinks = Sequence[tuple[str, str]] | Mapping[str, str]


def _map_index(ti_key: Any) -> int:
    value = getattr(ti_key, "map_index", -1)
    return -1 if value is None else int(value)


def _base_url() -> str:
    # The same setting and default Airflow uses for a task instance's own log_url.
    return conf.get("api", "base_url", fallback="http://localhost:8080/").rstrip("/")


class DistributedJobLink(BaseOperatorLink):
    """The job view of this task instance: its tab on the task instance page of the Airflow UI."""

    name = "Distributed job"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return _base_url() + ui_tab_path(ti_key.dag_id, ti_key.run_id, ti_key.task_id, _map_index(ti_key))


@attrs.define()
class JobUrlLink(BaseOperatorLink):
    """A link named ``name`` to ``template`` filled with the job's name and the task instance's ids."""

    # A field, not the base class's property: one operator can carry several of these, each with its own name.
    name: str
    template: str

    @property
    def xcom_key(self) -> str:
        # The default key is per class; two template links on one task would overwrite each other's URL.
        return f"_link_{type(self).__name__}_{self.name}"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        map_index = _map_index(ti_key)
        values = {
            "job_name": job_name(ti_key.dag_id, ti_key.task_id, ti_key.run_id, map_index),
            "dag_id": ti_key.dag_id,
            "run_id": ti_key.run_id,
            "task_id": ti_key.task_id,
            "map_index": map_index,
            "try_number": getattr(ti_key, "try_number", ""),
        }
        return self.template.format_map({key: quote(str(value), safe="") for key, value in values.items()})


def template_problems(template: Any) -> list[str]:
    """What is wrong with a URL template (empty when nothing is)."""
    if not isinstance(template, str) or not template:
        return ["the template must be a non-empty string"]
    problems = []
    if not template.startswith(("http://", "https://", "/")):
        problems.append(f"{template!r} must start with http://, https:// or /")
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as err:
        return [*problems, f"{template!r} is not a valid template: {err}"]
    for field in fields:
        if field not in PLACEHOLDERS:
            problems.append(f"unknown placeholder {{{field}}}; allowed: " + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
    return problems


def job_url_links(job_links: JobLinks | None) -> list[JobUrlLink]:
    """``JobUrlLink``s from ``[(name, template), ...]`` or ``{name: template}``; every mistake raised at once."""
    if not job_links:
        return []
    pairs = list(job_links.items()) if isinstance(job_links, Mapping) else list(job_links)
    problems: list[tuple[str, str]] = []
    links: list[JobUrlLink] = []
    seen = {DistributedJobLink.name}
    for i, pair in enumerate(pairs):
        path = f"job_links[{i}]"
        if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            problems.append((path, "must be a (name, template) pair"))
            continue
        name, template = pair
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_MAX:
            problems.append((f"{path}.name", f"must be a non-empty string of at most {NAME_MAX} characters"))
        elif name in seen:
            problems.append((f"{path}.name", f"{name!r} is used by another link of this task"))
        else:
            seen.add(name)
        problems.extend((f"{path}.template", message) for message in template_problems(template))
        links.append(JobUrlLink(name=name, template=template))
    if problems:
        raise SpecValidationError(problems, source="job_links")
    return links


class MlflowRunLink(BaseOperatorLink):
    """The MLflow run of this task instance (``mlflow_conn_id=``): the URL the try that ran found or created, empty
    when it reached no tracking server. Airflow asks for it in the process that ran the try, after it ran."""

    name = "MLflow run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return str(getattr(operator, "mlflow_run_url", None) or "")


#: The name of the link that ``tensorboard_url=`` adds.
TENSORBOARD_LINK = "TensorBoard"


def operator_links(job_links: JobLinks | None = None, *, mlflow: bool = False,
                   tensorboard_url: str | None = None) -> tuple[BaseOperatorLink, ...]:
    """The operator's ``operator_extra_links``: the job view, the MLflow run (with ``mlflow``), TensorBoard (a URL
    template, with the same placeholders as ``job_links``), then one link per URL template."""
    pairs = list(job_links.items()) if isinstance(job_links, Mapping) else list(job_links or [])
    if tensorboard_url is not None:  # checked with job_links: one name, one button
        pairs.insert(0, (TENSORBOARD_LINK, tensorboard_url))
    return (DistributedJobLink(), *([MlflowRunLink()] if mlflow else []), *job_url_links(pairs))

