"""An auth manager that lets some users read a DAG's XComs but not its task logs, as the FAB and Keycloak auth
managers' permissions can ("can read on XComs" without "can read on Task Logs"): SimpleAuthManager grants by role
alone, so this is SimpleAuthManager with the task logs refused to the users named in ``NO_LOG_USERS``.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

#: Comma-separated user names that may not read any task log.
NO_LOG_USERS = "AIRFLOW_DISTRIBUTED_TEST_NO_LOG_USERS"


class XComsWithoutLogsAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: DagAccessEntity | None = None,
                          details: Any = None) -> bool:
        refused = os.environ.get(NO_LOG_USERS, "").split(",")
        if access_entity == DagAccessEntity.TASK_LOGS and user.get_name() in refused:
            return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
