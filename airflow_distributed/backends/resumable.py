"""A job's identity kept in the task's ``task_state_store`` (Airflow 3.3+), so that a retry reattaches to its job.

``ResumableKubernetesJob`` is the ``ResumableJobMixin`` (common-compat provider) adapter of a ``KubernetesJobRun``:
the mixin submits the job once and keeps its identity; a later try of the task instance finds it there and waits
for that job instead of submitting. On a common-compat provider that predates the mixin, its stand-in submits on
every try, and the submission itself finds the job by name and labels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_distributed.status import ReplicaState

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.kubernetes_run import KubernetesJobRun

#: ``task_state_store`` key of the job's identity; renaming it breaks the reattach of tries in flight.
STATE_KEY = "airflow_distributed_job"

try:
    from airflow.providers.common.compat.sdk import ResumableJobMixin
except ImportError:  # a common-compat provider that predates it: submit on every try (the job is still found)

    class ResumableJobMixin:  # type: ignore[no-redef]
        def execute_resumable(self, context: Any) -> Any:
            external_id = self.submit_job(context)  # type: ignore[attr-defined]
            self.poll_until_complete(external_id, context)  # type: ignore[attr-defined]
            return self.get_job_result(external_id, context)  # type: ignore[attr-defined]


class ResumableKubernetesJob(ResumableJobMixin):
    """``ResumableJobMixin`` around a ``KubernetesJobRun``: the job's identity goes to ``task_state_store``.

    Not an operator: the mixin's own ``__init__`` (operator argument defaults) does not apply.
    """

    external_id_key = STATE_KEY

    def __init__(self, run: KubernetesJobRun) -> None:
        self.run = run
        self.durable = True
        self.log = run.log
        self._result: dict[str, Any] | None = None

    def submit_job(self, context: Context) -> Any:
        return self.run.submit().as_id()

    def get_job_status(self, external_id: Any, context: Context) -> str:
        return self.run.status_of(external_id if isinstance(external_id, dict) else {})

    def is_job_active(self, status: str) -> bool:
        return status == ReplicaState.RUNNING

    def is_job_succeeded(self, status: str) -> bool:
        return status == ReplicaState.SUCCEEDED

    def poll_until_complete(self, external_id: Any, context: Context) -> Any:
        # The mixin returns this value itself when it reconnects, so it is the whole result.
        self._result = self.run.wait()
        return self._result

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        if self._result is None:  # succeeded in an earlier try: collect it
            self._result = self.run.wait()
        return self._result


__all__ = ["STATE_KEY", "ResumableKubernetesJob"]
