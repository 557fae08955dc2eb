"""The sensors' deferred wait for a job of the ``kubernetes`` backend: ``DistributedJobTrigger``, watch only.

A sensor watches a job it did not start, so a user killing the deferred sensor must leave the job running:
this trigger is ``DistributedJobTrigger`` (the same LIST + one watch of the job's pods) without its clean-up.
"""

from __future__ import annotations

from airflow_distributed.triggers.kubernetes import DistributedJobTrigger


class JobSensorTrigger(DistributedJobTrigger):
    """``DistributedJobTrigger`` that never deletes the job (same arguments and events)."""

    async def on_kill(self) -> None:
        return None

    async def cleanup(self) -> None:
        return None


__all__ = ["JobSensorTrigger"]
