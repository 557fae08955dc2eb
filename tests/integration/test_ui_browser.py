"""The job view in a real browser: ``airflow api-server`` as a subprocess, headless Chromium, a real login.

The example DAG runs in this process on the tests' SQLite database while the API server starts on a free
port. Chromium (Debian's ``chromium`` and ``chromium-driver``, driven with Selenium) opens the job view,
is sent to Airflow's login page, logs in as a viewer and comes back to the view; then it follows the task's
"Distributed job" extra link to the task instance page of the Airflow UI, where the view is a tab in a frame.
Screenshots of both go to ``test-output/``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import ROOT
from tests.dags.mlflow_dags import CONN_ID as MLFLOW_CONN_ID
from tests.dags.mlflow_dags import MODEL_NAME
from tests.helpers import run_dag, stop_group, xcom
from tests.mlflow_server import MlflowReader, MlflowServer, build_server_environment
from tests.supervised_runs import supervised_tasks

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = [
    pytest.mark.usefixtures("airflow_db"),
    pytest.mark.timeout(600),  # a bound on the DAG run and the server start too; the fixture's finally still runs
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="needs Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver",
    ),
]
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium: pip install -e '.[test]'")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

OUTPUT = ROOT / "test-output"
DAG_ID, TASK_ID = "example_pytorch_ddp", "train"
USER, PASSWORD = "ada", "ada-secret-password"
SERVER_START_TIMEOUT = 180.0
WAIT = 30.0
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1440,1500",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_health(base_url: str, server: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the API server exited with {server.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{base_url}/api/v2/monitor/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    log = log_path.read_text()[-4000:]
    raise AssertionError(f"the API server did not answer within {SERVER_START_TIMEOUT}s:\n{log}")


@pytest.fixture(scope="module")
def mlflow_server():
    """An MLflow tracking server the API server knows as the connection ``mlflow_test``, started only by the test
    that needs it (its address is fixed before the API server starts, its process is not)."""
    server = MlflowServer()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(f"AIRFLOW_CONN_{MLFLOW_CONN_ID.upper()}", server.connection())
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory, mlflow_server):
    """(base URL, dag run, job record): the API server up and the example DAG run, with one viewer user."""
    OUTPUT.mkdir(exist_ok=True)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    passwords = tmp_path_factory.mktemp("browser-auth") / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    log_path = OUTPUT / "api-server.log"
    with pytest.MonkeyPatch.context() as env:
        # Set here, so the server and this process (where the DAG runs and stores its links) agree.
        env.setenv("AIRFLOW__API__BASE_URL", base_url)
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", f"{USER}:viewer")
        env.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
        airflow = Path(sys.executable).with_name("airflow")
        command = [str(airflow), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                   "--apps", "core"]
        with open(log_path, "wb") as log:
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(),
                                      start_new_session=True)
        try:
            with supervised_tasks():  # while the server starts; the task log file holds the replicas' lines
                run, states = run_dag(DAG_ID, conf={"steps": 60})
            assert states[TASK_ID] == "success"
            wait_for_health(base_url, server, log_path)
            yield base_url, run, xcom(run, TASK_ID, "job")
        finally:
            stop_group(server)


@pytest.fixture
def browser(tmp_path):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT * 2)
    driver.set_script_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, timeout: float = WAIT):
    return WebDriverWait(driver, timeout).until(condition)


def log_in(driver) -> None:
    wait(driver, ec.visibility_of_element_located((By.NAME, "username"))).send_keys(USER)
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(driver, lambda d: "/auth/login" not in d.current_url)


def assert_job_view(driver, job: dict) -> None:
    """The page in ``driver`` (or its current frame) shows the job's replicas, metrics and charts."""
    wait(driver, ec.presence_of_element_located((By.CSS_SELECTOR, "table.replicas")))
    rows = driver.find_elements(By.CSS_SELECTOR, "table.replicas tbody tr")
    cells = [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    assert cells == [[r["name"], r["role"], str(r["index"]), r["state"], str(r["exit_code"]), str(r["restarts"])]
                     for r in job["replicas"]]
    metric_rows = driver.find_elements(By.CSS_SELECTOR, "table.metrics tr")
    metrics = {row.find_element(By.TAG_NAME, "th").text for row in metric_rows}
    assert {"final_loss", "initial_loss", "world_size"} <= metrics
    assert driver.find_elements(By.CSS_SELECTOR, "svg.chart polyline")
    # Log tabs are radio buttons: choosing the last replica shows its lines and hides the first one's.
    last = job["replicas"][-1]["name"]
    driver.find_element(By.XPATH, f"//label[text()='{last}']").click()
    panes = {pane.get_attribute("data-replica"): pane.is_displayed()
             for pane in driver.find_elements(By.CSS_SELECTOR, ".tabs pre")}
    assert panes[last] and not panes[job["replicas"][0]["name"]]


def test_job_view_after_login_and_inside_the_airflow_ui(served, browser):
    base_url, run, job = served
    run_id = quote(run.run_id, safe="")

    # Not logged in: the view sends the browser to Airflow's login page, and shows nothing of the job.
    browser.get(f"{base_url}/distributed/jobs/{DAG_ID}/{run_id}/{TASK_ID}")
    wait(browser, lambda d: "/auth/login" in d.current_url)
    assert job["job_name"] not in browser.page_source
    log_in(browser)

    # Back on the view (the login's "next"), as the viewer.
    wait(browser, lambda d: "/distributed/jobs/" in d.current_url)
    assert_job_view(browser, job)
    browser.save_screenshot(str(OUTPUT / "job-view-standalone.png"))

    # The extra link Airflow stored for the task leads to the view's tab on the task instance page.
    link = xcom(run, TASK_ID, "_link_DistributedJobLink")
    assert link == f"{base_url}/dags/{DAG_ID}/runs/{run_id}/tasks/{TASK_ID}/plugin/distributed-job"
    browser.get(link)
    frame = wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title='Distributed job']")))
    browser.switch_to.frame(frame)
    assert_job_view(browser, job)
    browser.switch_to.default_content()
    browser.save_screenshot(str(OUTPUT / "job-view.png"))


def _live_runs(dag_id: str) -> set[str]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(session.scalars(
            select(XComModel.run_id).where(XComModel.dag_id == dag_id, XComModel.key == "job_live")
        ).all())


def _live_run_id(dag_id: str, deadline: float, earlier: set[str]) -> str:
    """The run id of ``dag_id``'s new run (not in ``earlier``) once its running job has published a live record."""

    while time.monotonic() < deadline:
        new = _live_runs(dag_id) - earlier
        if new:
            return new.pop()
        time.sleep(0.5)
    raise AssertionError(f"{dag_id} published no live record")


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_a_running_local_jobs_view_shows_its_progress(served, browser):
    """A slow local job runs in ``airflow dags test`` beside the API server; its view is opened mid-run."""
    base_url, _, _ = served
    dag_id = "test_local_progress"
    airflow = Path(sys.executable).with_name("airflow")
    earlier = _live_runs(dag_id)  # another test may have run this DAG in the same database
    with open(OUTPUT / "dags-test.log", "wb") as log:
        job = subprocess.Popen([str(airflow), "dags", "test", dag_id, "-c", json.dumps({"steps": 3000})],
                               stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy(), start_new_session=True)
    try:
        run_id = quote(_live_run_id(dag_id, time.monotonic() + 180, earlier), safe="")
        browser.get(f"{base_url}/distributed/jobs/{dag_id}/{run_id}/train")
        wait(browser, lambda d: "/auth/login" in d.current_url)
        log_in(browser)
        wait(browser, lambda d: "/distributed/jobs/" in d.current_url)
        text = wait(browser, ec.visibility_of_element_located((By.CSS_SELECTOR, ".progress-text"))).text
        assert "% (" in text and "/3000 steps)" in text, text
        assert browser.find_element(By.CSS_SELECTOR, ".badge").text == "running"
        states = {cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table.replicas td.state")}
        assert states == {"running"}
        browser.save_screenshot(str(OUTPUT / "job-view-running.png"))
    finally:
        # The job is stopped like a task killed from the UI: SIGTERM to the task process, which stops its replicas.
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=10)
    from tests.helpers import replica_processes, wait_until

    wait_until(lambda: replica_processes("train-") == [], timeout=30)


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_the_job_view_links_to_the_mlflow_run_and_its_model_version(served, mlflow_server, browser):
    """A job logged to a real MLflow server: its view links to its run and its registered version, which open in the
    browser from the tracking server's own UI."""
    base_url, _, _ = served
    build_server_environment()
    mlflow_server.start()
    dag_id = "test_mlflow_ddp"
    run, states = run_dag(dag_id)
    assert states == {TASK_ID: "success"}
    reader = MlflowReader(mlflow_server.uri)
    [mlflow_run] = [found for found in reader.runs(dag_id) if found.tags["airflow_distributed.run_id"] == run.run_id]
    version = xcom(run, TASK_ID, "mlflow_model_version")
    assert reader.model_version(MODEL_NAME, version)["run_id"] == mlflow_run.run_id

    browser.get(f"{base_url}/distributed/jobs/{dag_id}/{quote(run.run_id, safe='')}/{TASK_ID}")
    wait(browser, lambda d: "/auth/login" in d.current_url)
    log_in(browser)
    wait(browser, lambda d: "/distributed/jobs/" in d.current_url)
    link = wait(browser, ec.presence_of_element_located((By.CSS_SELECTOR, "a.mlflow-run")))
    run_page = f"{mlflow_server.uri}/#/experiments/{mlflow_run.experiment_id}/runs/{mlflow_run.run_id}"
    assert link.get_attribute("href") == run_page
    model = browser.find_element(By.CSS_SELECTOR, "a.mlflow-model")
    assert model.get_attribute("href") == f"{mlflow_server.uri}/#/models/{MODEL_NAME}/versions/{version}"
    assert model.text == f"{MODEL_NAME} version {version}"
    browser.save_screenshot(str(OUTPUT / "job-view-mlflow.png"))

    # The link opens a new tab on the tracking server's UI, which shows that run (its name is the job's).
    view = browser.current_window_handle
    link.click()
    wait(browser, lambda d: len(d.window_handles) == 2)
    browser.switch_to.window(next(handle for handle in browser.window_handles if handle != view))
    assert browser.current_url == run_page
    wait(browser, lambda d: mlflow_run.name in d.find_element(By.TAG_NAME, "body").text, timeout=60)
    browser.save_screenshot(str(OUTPUT / "mlflow-run.png"))
    browser.close()
    browser.switch_to.window(view)
