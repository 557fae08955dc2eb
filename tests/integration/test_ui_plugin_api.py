"""The UI plugin through Airflow's own API server app: a real DAG run, real users, real JWTs, no mocks.

The app is ``airflow.api_fastapi.app.create_app()`` (``tests.api_server``), which mounts the plugin found through
the ``airflow.plugins`` entry point. Users come from the SimpleAuthManager (users and passwords files), tokens
from ``POST /auth/token``; ``bob`` belongs to another team than the one owning the DAGs folder here, and must be
refused.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.api_server import api_client, as_user, token
from tests.helpers import run_dag, xcom
from tests.supervised_runs import supervised_tasks

pytestmark = pytest.mark.usefixtures("airflow_db")

DAG_ID, TASK_ID = "example_pytorch_ddp", "train"
TEAM, OTHER_TEAM = "ml", "nlp"
USERS = {"admin": "admin", "alice": f"viewer:{TEAM}", "bob": f"viewer:{OTHER_TEAM}"}


@pytest.fixture(scope="module")
def trained():
    with supervised_tasks():  # the task log file, where the view reads the replicas' lines
        run, states = run_dag(DAG_ID, conf={"steps": 20})
    assert states[TASK_ID] == "success"
    return run, xcom(run, TASK_ID, "job")


@pytest.fixture(scope="module")
def client(trained, tmp_path_factory):
    """Airflow's API server app with three users; the DAGs folder's bundle belongs to team ``ml``."""
    with api_client(USERS, TEAM, (TEAM, OTHER_TEAM), tmp_path_factory.mktemp("auth")) as test_client:
        yield test_client


def paths(run) -> tuple[str, str]:
    ids = f"{DAG_ID}/{quote(run.run_id, safe='')}/{TASK_ID}"
    return f"/distributed/api/jobs/{ids}", f"/distributed/jobs/{ids}"


def test_json_record_has_the_replicas_and_metrics(client, trained):
    run, job = trained
    api, _ = paths(run)
    response = client.get(api, headers=as_user(client, "admin"))

    assert response.status_code == 200, response.text
    record = response.json()
    assert record["source"] == "recorded" and record["state"] == "succeeded"
    assert record["job_name"] == job["job_name"]
    assert [(r["role"], r["index"], r["state"], r["exit_code"]) for r in record["replicas"]] == [
        ("master", 0, "succeeded", 0), ("worker", 0, "succeeded", 0), ("worker", 1, "succeeded", 0)
    ]
    assert record["metrics"] == job["metrics"] and record["metrics"]["world_size"] == 3
    assert record["history"] == job["history"] and record["duration_seconds"] > 0
    assert set(record["logs"]) == {r["name"] for r in record["replicas"]}  # from the task log
    assert any("final loss" in line for line in record["logs"][f"{job['job_name']}-master-0"])


def test_html_view_shows_replicas_metrics_history_and_logs(client, trained):
    run, job = trained
    _, view = paths(run)
    response = client.get(view, headers=as_user(client, "admin"))

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'self'" in response.headers["content-security-policy"]
    html = response.text
    for replica in job["replicas"]:
        assert f"<code>{replica['name']}</code>" in html
        assert f'data-replica="{replica["name"]}"' in html
    for metric in ("final_loss", "initial_loss", "world_size"):
        assert f"<th>{metric}</th>" in html
    assert job["model_path"] in html
    assert html.count('<svg class="chart"') == len({k for p in job["history"] for k in p if k != "step"})
    assert "<script" not in html and "http://" not in html and "https://" not in html  # self-contained


def test_map_index_placeholder_left_by_the_ui_means_unmapped(client, trained):
    run, _ = trained
    api, view = paths(run)
    headers = as_user(client, "admin")
    assert client.get(api + "?map_index={MAP_INDEX}", headers=headers).json()["state"] == "succeeded"
    assert client.get(view + "?map_index=%7BMAP_INDEX%7D", headers=headers).status_code == 200
    assert client.get(api + "?map_index=x", headers=headers).status_code == 422


def test_unknown_task_instance_is_404_with_the_reason(client, trained):
    run, _ = trained
    headers = as_user(client, "admin")
    response = client.get(f"/distributed/api/jobs/{DAG_ID}/{quote(run.run_id, safe='')}/report", headers=headers)
    assert response.status_code == 404
    assert response.json()["detail"] == "no job record; the task instance is success"
    response = client.get(f"/distributed/jobs/{DAG_ID}/{quote(run.run_id, safe='')}/nope", headers=headers)
    assert response.status_code == 404 and "There is no such task instance." in response.text


def test_no_data_without_a_logged_in_user(client, trained):
    run, job = trained
    api, view = paths(run)

    assert client.get(api).status_code == 401
    assert client.get(api, headers={"Authorization": "Bearer not-a-jwt"}).status_code in (401, 403)
    response = client.get(view, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/auth/login?next=")
    assert job["job_name"] not in response.text


def test_the_ui_cookie_is_accepted(client, trained):
    # The UI's frame carries no Authorization header, only the session cookie the login set.
    run, job = trained
    _, view = paths(run)
    client.cookies.set("_token", token(client, "alice"))
    try:
        response = client.get(view)
    finally:
        client.cookies.clear()
    assert response.status_code == 200 and job["job_name"] in response.text


def test_a_user_of_a_team_that_does_not_own_the_dag_is_refused(client, trained):
    run, job = trained
    api, view = paths(run)

    assert client.get(api, headers=as_user(client, "alice")).status_code == 200
    refused = client.get(api, headers=as_user(client, "bob"))
    assert refused.status_code == 403 and job["job_name"] not in refused.text
    refused = client.get(view, headers=as_user(client, "bob"))
    assert refused.status_code == 403 and job["job_name"] not in refused.text


def test_plugin_registers_the_task_instance_view(client):
    response = client.get("/api/v2/plugins", headers=as_user(client, "admin"))
    plugin = next(p for p in response.json()["plugins"] if p["name"] == "airflow_distributed")
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/distributed"
    [view] = plugin["external_views"]
    assert view["destination"] == "task_instance" and view["url_route"] == "distributed-job"
    assert view["href"] == "distributed/jobs/{DAG_ID}/{RUN_ID}/{TASK_ID}?map_index={MAP_INDEX}"


def test_extra_link_points_to_the_job_view_tab(client, trained):
    run, _ = trained
    response = client.get(
        f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run.run_id, safe='')}/taskInstances/{TASK_ID}/links",
        headers=as_user(client, "admin"),
    )
    assert response.status_code == 200, response.text
    link = response.json()["extra_links"]["Distributed job"]
    assert link.endswith(f"/dags/{DAG_ID}/runs/{quote(run.run_id, safe='')}/tasks/{TASK_ID}/plugin/distributed-job")


def test_template_link_is_filled_with_the_recorded_job_name(trained):
    from airflow_distributed.airflow_features.links import JobUrlLink

    run, job = trained
    ti = next(ti for ti in run.get_task_instances() if ti.task_id == TASK_ID)
    link = JobUrlLink(name="TensorBoard", template="https://tb.example.com/#scalars&regexInput={job_name}&run={run_id}")
    assert link.xcom_key == "_link_JobUrlLink_TensorBoard"
    assert link.get_link(None, ti_key=ti.key) == (
        f"https://tb.example.com/#scalars&regexInput={job['job_name']}&run={quote(run.run_id, safe='')}"
    )


def test_operator_links_are_checked_at_parse_time_and_serialized_by_name():
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import OperatorSerialization

    from airflow_distributed.operators import DistributedTrainingOperator
    from airflow_distributed.spec import SpecValidationError

    with DAG("links_check", schedule=None):
        plain = DistributedTrainingOperator(task_id="plain", framework="pytorch", command=["python", "train.py"])
        linked = DistributedTrainingOperator(
            task_id="linked", framework="pytorch", command=["python", "train.py"],
            job_links=[("TensorBoard", "https://tb.example.com/#scalars&regexInput={job_name}")],
        )
        with pytest.raises(SpecValidationError) as err:
            DistributedTrainingOperator(task_id="bad", framework="pytorch", command=["python", "train.py"],
                                        job_links=[("TensorBoard", "https://tb.example.com/{jobname}")])
    assert err.value.paths == ["job_links[0].template"]
    assert OperatorSerialization.serialize_operator(plain)["_operator_extra_links"] == {
        "Distributed job": "_link_DistributedJobLink"
    }
    assert OperatorSerialization.serialize_operator(linked)["_operator_extra_links"] == {
        "Distributed job": "_link_DistributedJobLink", "TensorBoard": "_link_JobUrlLink_TensorBoard"
    }


def test_page_escapes_what_a_job_wrote_and_shows_a_failure():
    from airflow_distributed.plugins.job_state import TaskInstanceRef
    from airflow_distributed.plugins.page import job_page

    record = {
        "job_name": "train-0000", "state": "failed", "metrics": {"<b>loss</b>": 1.5}, "model_path": None,
        "replicas": [
            {"name": "train-0000-master-0", "role": "master", "index": 0, "state": "stopped", "exit_code": -15},
            {"name": "train-0000-worker-0", "role": "worker", "index": 0, "state": "failed", "exit_code": 3},
        ],
        "history": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": float("nan")}, {"step": 3, "loss": 1.5}],
        "logs": {"train-0000-worker-0": ["\x1b[31mTraceback\x1b[0m", "<script>alert(1)</script>"]},
    }
    html = job_page(record, TaskInstanceRef(dag_id="d", run_id="r<1>", task_id="t"), source="recorded", show_logs=True,
                    json_href="x")

    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;loss&lt;/b&gt;" in html and "r&lt;1&gt;" in html
    assert "\x1b" not in html and "Traceback" in html
    assert 'class="badge s-failed"' in html and "<td class=num>3</td>" in html
    assert "No model was logged." in html
    assert html.count("<polyline") == 1  # one chart; the NaN point is left out


def test_page_shows_a_script_in_a_metric_name_replica_name_or_log_line_as_text():
    from airflow_distributed.plugins.job_state import TaskInstanceRef
    from airflow_distributed.plugins.page import job_page

    evil = "<script>alert(1)</script>"
    record = {
        "job_name": evil, "state": "succeeded", "metrics": {evil: 0.5}, "model_path": evil,
        "replicas": [{"name": evil, "role": "master", "index": 0, "state": "succeeded", "exit_code": 0}],
        "history": [{"step": 1, evil: 1.0}, {"step": 2, evil: 0.5}],
        "logs": {evil: [f"step 2 {evil}"]},
    }
    html = job_page(record, TaskInstanceRef(dag_id="d", run_id="r", task_id="t"), source="recorded", show_logs=True,
                    json_href=evil)

    assert "<script" not in html
    text = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert f"<th>{text}</th>" in html  # metric name
    assert f"<code>{text}</code>" in html and f'data-replica="{text}"' in html  # replica name, in text and attribute
    assert f"step 2 {text}</pre>" in html  # log line
    assert f"<figcaption>{text}</figcaption>" in html and html.count('<svg class="chart"') == 1  # chart title


def test_page_without_a_record_reloads_only_while_the_task_may_still_write_one():
    from airflow_distributed.plugins.job_state import TaskInstanceRef
    from airflow_distributed.plugins.page import missing_page

    ref = TaskInstanceRef(dag_id="d", run_id="r", task_id="t", map_index=2)
    assert 'http-equiv="refresh"' in missing_page(ref, "running")
    assert 'http-equiv="refresh"' not in missing_page(ref, "success")
    assert "no such task instance" in missing_page(ref, None)


def test_a_map_index_beyond_any_task_instance_is_refused_not_a_server_error(client, trained):
    run, _ = trained
    api, view = paths(run)
    headers = as_user(client, "admin")
    for too_large in (2**63, 10**30, 2**31):
        refused = client.get(f"{api}?map_index={too_large}", headers=headers)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == "map_index must be between -1 and 2147483647"
        assert client.get(f"{view}?map_index={too_large}", headers=headers).status_code == 422


def test_a_record_with_numbers_beyond_a_float_is_shown(client, trained):
    # A job writes its metrics and history: JSON numbers of any size reach the view, and must not break it.
    run, _ = trained
    huge = 10**400 + 123456
    record = {
        "job_name": "report-huge", "state": "succeeded", "replicas": [], "logs": {},
        "metrics": {"huge": huge, "negative": -huge, "ratio": 0.5},
        "history": [{"step": 1, "huge": huge, "loss": 1.0}, {"step": 2, "huge": -huge, "loss": 0.5}],
        "progress": {"percent": huge, "step": 2, "total": 2, "eta_seconds": huge},
        "duration_seconds": huge,
    }
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run.run_id, safe='')}/taskInstances/report/xcomEntries"
    headers = as_user(client, "admin")
    created = client.post(base, json={"key": "job", "value": record}, headers=headers)
    assert created.status_code == 201, created.text
    try:
        page = client.get(f"/distributed/jobs/{DAG_ID}/{quote(run.run_id, safe='')}/report", headers=headers)
        api = client.get(f"/distributed/api/jobs/{DAG_ID}/{quote(run.run_id, safe='')}/report", headers=headers)
    finally:
        assert client.delete(f"{base}/job", headers=headers).status_code == 204
    assert page.status_code == 200, page.text
    assert "<th>huge</th><td class=num>1.000e+400</td>" in page.text
    assert "<th>negative</th><td class=num>-1.000e+400</td>" in page.text
    assert page.text.count('<svg class="chart"') == 1  # loss; the huge points are no points a chart can place
    assert api.status_code == 200 and api.json()["metrics"]["huge"] == huge
