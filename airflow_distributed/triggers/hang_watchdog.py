"""The hang watchdog in the triggerer (``progress_timeout`` of a deferred job): the trigger keeps the clock.

Between the deliveries of its job's shared watch, a trigger asks ``check()`` (due every ``MasterLogWatch.interval``)
to read the master's new lines (one bounded pods/log request, as the task's own wait makes) and ``verdict()``
whether the job is hung. What a look needs of the pods (every replica running? which is the master?) comes from
the trigger's tracker of them (the kubernetes backend) or from a LIST of them at each look (the Kubeflow kinds,
whose trigger watches the custom object). The trigger then fires a ``failed`` event with the ``hung`` verdict;
the resumed task asks the replicas for their stacks, quotes their last lines and deletes the job, as the
synchronous wait does. A triggerer that restarts starts the clock again (at most one ``progress_timeout`` later
than without the restart).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from airflow_distributed.hooks.kube_api import LOG_ACCEPT
from airflow_distributed.jobstate.hang_watch import MasterLogWatch, all_running, hung_verdict
from airflow_distributed.jobstate.job_watch import JobTracker
from airflow_distributed.jobstate.verdicts import JobVerdict
from airflow_distributed.manifests.pod_names import MAIN_CONTAINER

#: What a look needs to know of the job's pods: whether every replica runs, the master pod's name (``None``: none
#: yet) and the container whose log is read.
Sample = tuple[bool, str | None, str]


class TriggerHangWatchdog:
    """``progress_timeout`` for one deferred job.

    :param timeout: ``progress_timeout`` in seconds.
    :param namespace: the job's namespace.
    :param sample: what a look needs of the job's pods (``Sample``): the trigger's tracker of them, or a LIST of
        them for a job whose pods a controller makes.
    :param api_client: the trigger's shared API client (``JobWaitTrigger.api_client``).
    :param answer: raises a non-2xx answer (``JobWaitTrigger._answer``).
    :param log: the trigger's logger.
    :param still_running: whether every replica still runs now, when the trigger sees its pods between looks (a
        replica that stopped since the last look is not hung).
    :param clock: epoch seconds (the trigger's clock).
    """

    def __init__(self, timeout: float, namespace: str, sample: Callable[[], Awaitable[Sample]],
                 api_client: Callable[[], AbstractAsyncContextManager[Any]], answer: Callable[[Any], Any], log: Any,
                 still_running: Callable[[], bool] = lambda: True, clock: Callable[[], float] = time.time) -> None:
        self.namespace, self._sample, self._api_client, self._answer, self._log = (
            namespace, sample, api_client, answer, log)
        self._still_running, self._clock = still_running, clock
        self.watch = MasterLogWatch(timeout, clock())
        self.master: str | None = None

    @classmethod
    def of_tracker(cls, timeout: float, namespace: str, tracker: JobTracker, api_client: Callable[[], Any],
                   answer: Callable[[Any], Any], log: Any) -> TriggerHangWatchdog:
        """The watchdog of a job whose pods the trigger itself watches (``tracker``)."""
        def running() -> bool:
            return all_running(row.state for row in tracker.statuses())

        async def sample() -> Sample:
            return running(), tracker.master.name, MAIN_CONTAINER

        return cls(timeout, namespace, sample, api_client, answer, log, still_running=running)

    def wake_in(self) -> float:
        return self.watch.seconds_to_look(self._clock())

    def verdict(self) -> JobVerdict | None:
        return hung_verdict(self.watch, self.master, self._still_running, self._clock())

    async def check(self) -> bool:
        """A look at the master's log when one is due; returns whether it made one."""
        if not self.watch.due(self._clock()):
            return False
        try:
            running, self.master, container = await self._sample()
        except Exception as error:  # as a log that cannot be read: tells nothing
            self._log.warning("progress_timeout: could not see the job's pods (%s); the watchdog's clock starts "
                              "again", error)
            self.watch.observe(None, False, self._clock())
            return True
        lines: list[str] | None = None
        if running and self.master is not None:
            try:
                lines = await self._read(self.master, container)
            except Exception as error:  # tells nothing: the clock starts again rather than stop a job unseen
                self._log.warning("progress_timeout: could not read the master's log (%s); the watchdog's clock "
                                  "starts again", error)
        self.watch.observe(lines, running, self._clock())
        return True

    async def _read(self, pod: str, container: str) -> list[str]:
        async with self._api_client() as api:
            # The generated client has no sinceTime argument: the same endpoint through the client's call_api.
            response = await self._answer(api.call_api(
                "/api/v1/namespaces/{namespace}/pods/{name}/log", "GET",
                path_params={"namespace": self.namespace, "name": pod},
                query_params=[("container", container), *self.watch.query()],
                header_params={"Accept": LOG_ACCEPT}, auth_settings=["BearerToken"], _preload_content=False,
                _return_http_data_only=True, _request_timeout=30))
            try:
                return (await response.read()).decode("utf-8", "replace").splitlines()
            finally:
                response.release()


__all__ = ["Sample", "TriggerHangWatchdog"]
