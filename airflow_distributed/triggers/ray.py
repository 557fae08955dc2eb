"""The trigger of a deferred ``backend="ray"`` task: polls the Ray Jobs API until the job is in a final state.

It fires one event: ``final`` (the job ended; ``execute_complete`` reads its outcome from the driver's log),
``timeout`` (the task's ``execution_timeout`` passed) or ``error`` (the job is gone, or the Jobs API stayed
unreachable for longer than ``reconnect_budget`` seconds in a row, whichever request found it so: a dropped or
refused connection is retried meanwhile, never taken for a failure of the job). Each look is judged by
``jobstate.ray_poll``, as in the synchronous wait. Every event makes ``execute_complete`` run, which stops the job
unless it ended. A deferred task the user kills (Airflow 3.3+ calls the trigger's ``on_kill``) stops its job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_distributed.hooks.ray import UNREACHABLE, RayJobHook, renew_liveness
from airflow_distributed.jobstate.job_event import EventKind, JobEvent
from airflow_distributed.jobstate.ray_poll import FINAL, GONE, OUTAGE, RayLook, RayPoll, job_ending


class RayJobTrigger(BaseTrigger):
    """Wait for Ray job ``job_name`` of the cluster of ``ray_conn_id``, one look every ``poll_interval`` seconds.

    :param execution_deadline: when the task's ``execution_timeout`` ends (epoch seconds), if it has one.
    :param reconnect_budget: seconds the Jobs API may stay unreachable in a row before the trigger gives up.
    :param renew_every: seconds between two renewals of the job's liveness (``None``: none): the driver stops a
        job whose liveness is not renewed within its grace, so a lost task leaves nothing running.
    :param resume_state: what ``execute_complete`` needs of the spec (its framework).
    """

    def __init__(self, *, job_name: str, ray_conn_id: str, poll_interval: float,
                 execution_deadline: float | None = None, reconnect_budget: float = 300.0,
                 renew_every: float | None = None, resume_state: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.job_name = job_name
        self.ray_conn_id = ray_conn_id
        self.poll_interval = poll_interval
        self.execution_deadline = execution_deadline
        self.reconnect_budget = reconnect_budget
        self.renew_every = renew_every
        self.resume_state = resume_state
        self._fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job_name": self.job_name, "ray_conn_id": self.ray_conn_id, "poll_interval": self.poll_interval,
            "execution_deadline": self.execution_deadline, "reconnect_budget": self.reconnect_budget,
            "renew_every": self.renew_every, "resume_state": self.resume_state,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # A trigger built without ``resume_state`` (the backend always gives one) fires no such key: read back, an
        # absent key and one set to ``None`` are the same event.
        event = replace(await self._wait(), job_name=self.job_name, resume_state=self.resume_state)
        payload = event.to_payload()
        self._fired = True
        yield TriggerEvent(payload)

    async def on_kill(self) -> None:
        """Airflow 3.3+: the user killed the deferred task; its Ray job must not keep running."""
        if self._fired:
            return
        hook = RayJobHook(ray_conn_id=self.ray_conn_id)
        try:
            if await asyncio.to_thread(hook.stop, self.job_name):
                await asyncio.to_thread(hook.wait_final, self.job_name, 15.0)
            self.log.info("stopped Ray job %s (task killed)", self.job_name)
        except Exception:
            self.log.exception("could not stop Ray job %s; stop it with `ray job stop %s`", self.job_name,
                               self.job_name)

    async def _wait(self) -> JobEvent:
        hook = RayJobHook(ray_conn_id=self.ray_conn_id)
        started = time.time()
        poll = RayPoll(self.reconnect_budget, self.renew_every)
        while True:
            if self.execution_deadline is not None and time.time() >= self.execution_deadline:
                return JobEvent(EventKind.TIMEOUT, elapsed=time.time() - started,
                                message=f"Ray job {self.job_name} reached the task's execution_timeout")
            info: dict[str, Any] | None = None
            renewed_at: float | None = None
            failure: BaseException | None = None
            try:
                info = await asyncio.to_thread(hook.info, self.job_name)
            except UNREACHABLE as error:
                failure = error
            except Exception as error:
                return JobEvent(EventKind.ERROR, message=f"reading Ray job {self.job_name}: {error}")
            if failure is None and job_ending(info) is None and poll.renewal_due(time.monotonic()):
                renewed_at = time.monotonic()
                try:
                    await asyncio.to_thread(renew_liveness, hook, self.job_name, self.log)
                except UNREACHABLE as error:
                    failure = error
                    self.log.warning("could not renew the liveness of Ray job %s (%s)", self.job_name,
                                     type(error).__name__)
            poll, verdict = poll.step(RayLook(info, failure is not None, renewed_at), time.monotonic())
            if verdict == FINAL and info is not None:
                return JobEvent(EventKind.FINAL, state=info["status"])
            if verdict == GONE:
                return JobEvent(EventKind.ERROR, message=f"Ray job {self.job_name} is gone from the cluster")
            if verdict == OUTAGE:
                return JobEvent(EventKind.ERROR, message=f"the Ray Jobs API stayed unreachable for "
                                f"{self.reconnect_budget:g}s while job {self.job_name} ran: {type(failure).__name__}")
            if failure is not None and renewed_at is None:  # a failed renewal was said above
                self.log.warning("the Ray Jobs API is unreachable (%s); trying again", type(failure).__name__)
            await asyncio.sleep(self.poll_interval)


__all__ = ["RayJobTrigger"]
