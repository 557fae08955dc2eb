"""DAG runs whose tasks run as an Airflow worker runs them: under the task SDK's supervisor, in a forked task
process, the task's log written to the file Airflow's log reader serves (``[logging] base_log_folder``).

``dag.test()`` runs each task inside the test's process and writes no task log file, so what a task logs cannot be
read back through Airflow's log access there. Inside ``supervised_tasks()`` the same ``dag.test()`` loop runs each
task through ``supervise_task`` (what the Local and Celery executors' workers call) against the same in-process
Execution API, and runs a deferred task's trigger in line, as ``dag.test()`` does, before the task resumes.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_PR_SET_DUMPABLE = 4


@contextmanager
def supervised_tasks() -> Iterator[None]:
    """Within it, ``dag.test()`` runs every task under the supervisor, its log in the task log file."""
    import airflow.sdk.definitions.dag as dag_module

    original = dag_module._run_task
    dag_module._run_task = _run_supervised
    try:
        yield
    finally:
        dag_module._run_task = original


def _run_supervised(*, ti: Any, task: Any, run_triggerer: bool = False) -> None:
    from uuid import UUID

    from airflow.configuration import conf
    from airflow.executors.workloads import BundleInfo
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk._shared.module_loading import import_string
    from airflow.sdk.api.datamodels._generated import TaskInstance as TaskInstanceSDK
    from airflow.sdk.execution_time.supervisor import InProcessTestSupervisor, supervise_task
    from airflow.sdk.serde import serialize
    from airflow.utils.helpers import log_filename_template_renderer
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy.orm import joinedload

    dags_folder = Path(conf.get("core", "dags_folder"))
    while True:
        ti.set_state(TaskInstanceState.QUEUED)
        with create_session() as session:
            row = session.query(TaskInstance).options(joinedload(TaskInstance.dag_run)).filter(
                TaskInstance.id == ti.id).one()
            log_path = log_filename_template_renderer()(ti=row)
        sdk_ti = TaskInstanceSDK(id=UUID(str(ti.id)), task_id=ti.task_id, dag_id=ti.dag_id, run_id=ti.run_id,
                                 try_number=ti.try_number, map_index=ti.map_index,
                                 dag_version_id=UUID(str(ti.dag_version_id)))
        try:
            supervise_task(ti=sdk_ti, bundle_info=BundleInfo(name="dags-folder"),
                           dag_rel_path=os.path.relpath(task.dag.fileloc, dags_folder), token="",
                           client=InProcessTestSupervisor._api_client(task.dag), log_path=log_path)
        finally:
            # supervise_task makes the calling process (a worker's; here the test's) non-dumpable.
            ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        with create_session() as session:
            row = session.query(TaskInstance).options(joinedload(TaskInstance.trigger)).filter(
                TaskInstance.id == ti.id).one()
            trigger = (row.trigger.classpath, row.trigger.kwargs) if row.trigger is not None else None
            deferred, next_method = row.state == TaskInstanceState.DEFERRED, row.next_method
        ti.refresh_from_db()
        if not (deferred and run_triggerer and trigger is not None):
            return
        classpath, kwargs = trigger
        event = InProcessTestSupervisor.run_trigger_in_process(trigger=import_string(classpath)(**kwargs), ti=sdk_ti)
        with create_session() as session:
            row = session.query(TaskInstance).filter(TaskInstance.id == ti.id).one()
            row.next_method = next_method
            if event is not None:
                row.next_kwargs = {"event": serialize(event.payload)}
            row.trigger_id = None
            row.state = TaskInstanceState.SCHEDULED
        ti.refresh_from_db()
