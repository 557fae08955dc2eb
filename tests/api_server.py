"""Airflow's own API server app for the UI tests: multi-team SimpleAuthManager users and real JWTs, no mocks.

SimpleAuthManager decides by role for every DAG alike; per-DAG access exists in it only in multi-team mode, through
the team that owns a DAG's bundle: the DAGs folder's bundle is given to one team here, and users of another team
must be refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.auth_manager import NO_LOG_USERS

BUNDLE = "dags-folder"


@contextmanager
def api_client(users: Mapping[str, str], owner: str, teams: tuple[str, ...], tmp: Path,
               no_log_users: tuple[str, ...] = ()) -> Iterator[Any]:
    """A ``TestClient`` of ``airflow.api_fastapi.app.create_app()`` (which mounts the plugin from its entry point).

    :param users: ``{user: role or "role:team"}``; each user's password is ``<user>-secret``.
    :param owner: the team the DAGs folder's bundle belongs to; ``teams`` are created, then removed.
    :param no_log_users: users who may read what their role allows but no task log (``tests.auth_manager``).
    """
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.models.dag import clear_team_name_cache
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session
    from fastapi.testclient import TestClient
    from sqlalchemy import delete, select

    passwords = tmp / "passwords.json"
    passwords.write_text(json.dumps({user: f"{user}-secret" for user in users}))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AIRFLOW__CORE__MULTI_TEAM", "True")
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", ",".join(f"{u}:{r}" for u, r in users.items()))
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
        if no_log_users:
            env.setenv("AIRFLOW__CORE__AUTH_MANAGER", "tests.auth_manager.XComsWithoutLogsAuthManager")
            env.setenv(NO_LOG_USERS, ",".join(no_log_users))
        # The DAGs folder's bundle has its row once a DAG of it was run or parsed; a test may ask before.
        DagBundlesManager().sync_bundles_to_db()
        with create_session() as session:
            created = [Team(name=team) for team in teams]
            session.add_all(created)
            bundle = session.scalars(select(DagBundleModel).where(DagBundleModel.name == BUNDLE)).one()
            bundle.teams = [team for team in created if team.name == owner]
        clear_team_name_cache()
        purge_cached_app()
        try:
            with TestClient(create_app(), base_url="http://testserver") as client:
                yield client
        finally:
            purge_cached_app()
            with create_session() as session:
                session.scalars(select(DagBundleModel).where(DagBundleModel.name == BUNDLE)).one().teams = []
                session.execute(delete(Team).where(Team.name.in_(teams)))
            clear_team_name_cache()


def token(client: Any, user: str) -> str:
    response = client.post("/auth/token", json={"username": user, "password": f"{user}-secret"})
    assert response.status_code == 201, response.text
    return response.json()["access_token"]


def as_user(client: Any, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(client, user)}"}


def task_reads(client: Any, dag_id: str, run_id: str, task_id: str, headers: dict[str, str]) -> dict[str, str]:
    """What a caller reads of one task instance: every XCom entry through the REST API (as stored and
    deserialized), and the job view's JSON and HTML (empty when refused), each as the text it received."""
    from urllib.parse import quote

    base = f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/xcomEntries"
    listing = client.get(base, headers=headers)
    assert listing.status_code == 200, listing.text
    texts = {"xcomEntries": listing.text}
    for entry in listing.json()["xcom_entries"]:
        for deserialize in ("false", "true"):
            response = client.get(f"{base}/{entry['key']}", params={"deserialize": deserialize}, headers=headers)
            assert response.status_code == 200, response.text
            texts[f"xcomEntries/{entry['key']}?deserialize={deserialize}"] = response.text
    ids = f"{dag_id}/{quote(run_id, safe='')}/{task_id}"
    for name, path in (("view json", f"/distributed/api/jobs/{ids}"), ("view html", f"/distributed/jobs/{ids}")):
        response = client.get(path, headers=headers)
        texts[name] = response.text if response.status_code == 200 else ""
    return texts
