"""The live state of a running local job: progress in the task log, and a ``job_live`` XCom for the job view.

While the replicas run, the task reads the master's output document every ``interval`` seconds. A change of
progress (``tracking.log_progress``) is logged; a change of the replicas, metrics or progress is published as the
``job_live`` XCom in the shape of the final ``job`` record (state ``running``), which the job view shows until
the final record replaces it. Publishing is paced, so a job of hours costs one small XCom write per interval at
most, and nothing while it is quiet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from airflow_distributed.outputs import UNREADABLE, job_record, job_result, parse_output_document
from airflow_distributed.status import ReplicaState, ReplicaStatus, progress_text

#: XCom key of the running job's record (the final one is ``job``).
LIVE_XCOM_KEY = "job_live"


class LiveJobReport:
    """Called at every poll of a job whose master's document the task reads (``local``; ``ray``, from the driver's
    reports); reads, logs and publishes at most once per ``interval``.

    :param read_document: the master's output document as text, or ``None`` before it exists.
    :param publish: stores the live record (``ti.xcom_push(key="job_live", ...)``); it holds no replica's line,
        which the task log has (``jobstate.last_lines``).
    """

    def __init__(self, *, job_name: str, framework: str, read_document: Callable[[], str | None],
                 publish: Callable[[dict[str, Any]], None], log: Any, interval: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, backend: str = "local") -> None:
        self.job_name, self.framework, self.backend = job_name, framework, backend
        self._read, self._publish, self._log = read_document, publish, log
        self.interval, self._clock = interval, clock
        self._started = clock()
        self._next = self._started
        self._last_progress: Any = None
        self._last_published: Any = None

    def __call__(self, replicas: Sequence[ReplicaStatus]) -> None:
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self.interval
        document = parse_output_document(self._read())
        if document.get(UNREADABLE):
            return  # a document being written by hand, not yet whole: read it at the next interval
        progress = document.get("progress")
        if progress and progress != self._last_progress:
            self._log.info("progress of %s: %s", self.job_name, progress_text(progress))
        self._last_progress = progress
        result = job_result(job_name=self.job_name, framework=self.framework, backend=self.backend,
                            state=ReplicaState.RUNNING.value, document=document, replicas=replicas)
        # The history is downsampled to a fixed number of points: its newest point, not its length, tells of a new one.
        state = (result["replicas"], result["metrics"], progress, document["history"][-1:])
        if state == self._last_published:
            return
        self._last_published = state
        self._publish(job_record(result, document, now - self._started))
