"""How every backend ends a job, whatever ran it: the output document read, the final table, each replica's last
lines (in the task log), the result and the ``job`` XCom, then the error of a job that failed or the lines of one
that succeeded.

Each backend gathers what it alone knows (its replicas' rows and last lines, what the job cost, what its clean-up
did) and hands it to ``end_job``, so that the same ending leaves the same record and reads the same everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_distributed.jobstate.failures import job_failure
from airflow_distributed.jobstate.last_lines import last_lines_block
from airflow_distributed.jobstate.replica_table import replica_table
from airflow_distributed.jobstate.startup import replica_lines, startup_line
from airflow_distributed.outputs import document_warning, job_record, job_result, parse_output_document
from airflow_distributed.status import ReplicaState

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.jobstate.outcome import JobOutcome
    from airflow_distributed.status import ReplicaStatus


def read_document(text: str | None, log: Any) -> dict[str, Any]:
    """The master's output document from its text (``outputs.parse_output_document``); what had to be changed in it,
    or why it could not be read, said once in the task log."""
    document = parse_output_document(text)
    if (warning := document_warning(document)) is not None:
        log.warning("%s", warning)
    return document


def end_job(context: Context, log: Any, *, name: str, framework: str, backend: str, outcome: JobOutcome,
            document: Mapping[str, Any], replicas: Sequence[ReplicaStatus], logs: Mapping[str, Sequence[str]],
            elapsed: float, cleanup: str, namespace: str | None = None, usage: Mapping[str, Any] | None = None,
            startup_timeout: float | None = None, queue_timeout: float | None = None,
            document_at: str | None = None, startup: Mapping[str, Any] | None = None,
            startup_logged: bool = False) -> dict[str, Any]:
    """The end of a job that ran: the final table, each replica's last lines in the task log, the ``job`` XCom
    (also on failure), then the result.

    :param replicas: the final rows of the table (none: no table).
    :param cleanup: what became of the replicas of a job that did not succeed, for its error.
    :param usage: what the job cost (``jobstate.usage``), when the backend knows it.
    :param document_at: where the master writes its output document, named when it wrote none.
    :param startup: how long each phase of its start took (``jobstate.startup``), when the backend knows it.
    :param startup_logged: the backend said it in the task log already, as the job began to train.
    :returns: the ``return_value`` XCom, whose keys Airflow pushes as XComs too (outputs.py).
    :raises DistributedJobError: the job did not succeed: ``job_failure``'s error.
    """
    job = f"{namespace}/{name}" if namespace else name
    if replicas:
        log.info("replicas of %s (final):\n%s", name, replica_table(replicas))
    result = job_result(job_name=name, framework=framework, backend=backend,
                        state=(ReplicaState.SUCCEEDED if outcome.succeeded else ReplicaState.FAILED).value,
                        document=document, replicas=replicas, namespace=namespace)
    if startup and not startup_logged:
        log_startup(log, name, startup)
    if (block := last_lines_block(name, logs)) is not None:
        # Once, at the end, in the task log: where Airflow's log permission guards a replica's output (no XCom).
        log.info("%s", block)
    context["ti"].xcom_push(key="job", value=job_record(result, document, elapsed, usage, startup))
    if not outcome.succeeded:
        raise job_failure(job, outcome, elapsed, cleanup, startup_timeout=startup_timeout,
                          queue_timeout=queue_timeout)
    if document["metrics"] == {} and document["model_path"] is None and document_warning(document) is None:
        log.warning("the master wrote no output document%s: no metrics or model path",
                    f" at {document_at}" if document_at else "")
    log.info("job %s succeeded in %.1fs; metrics: %s; model path: %s", job, elapsed, json.dumps(result["metrics"]),
             result["model_path"])
    return result


def log_startup(log: Any, name: str, startup: Mapping[str, Any]) -> None:
    """The job's startup in one line, and a line per replica when they did not start alike (more than one, and the
    slowest reached its rendezvous a second or more after the first)."""
    if (line := startup_line(name, startup)) is None:
        return
    moments = [row.get("rendezvous") for row in (startup.get("replicas") or {}).values()]
    known = [moment for moment in moments if isinstance(moment, (int, float))]
    if len(known) > 1 and max(known) - min(known) >= 1.0:
        line = "\n".join([line, *replica_lines(startup)])
    log.info("%s", line)


__all__ = ["end_job", "log_startup", "read_document"]
