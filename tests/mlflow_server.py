"""A real MLflow tracking server for the tests: ``mlflow server`` on 127.0.0.1 with a SQLite backend store and a
local artifact store, from ``.venvs/mlflow`` (``scripts/framework-venv.sh mlflow``: the server's Flask, SQLAlchemy
and alembic pins are not Airflow's), stopped with every process it started.

The tests read back what the task sent over MLflow's REST API (``MlflowReader``), as any client does: MLflow's own
client (``mlflow-skinny`` 3.17) would downgrade Airflow's ``cachetools`` and ``importlib_metadata``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
SERVER_PYTHON = ROOT / ".venvs" / "mlflow" / "bin" / "python"
#: The Airflow connection the test DAGs log to (``mlflow_conn_id``), given as ``AIRFLOW_CONN_MLFLOW_TEST``.
CONN_ID = "mlflow_test"


def build_server_environment() -> Path:
    """``.venvs/mlflow``, built when missing (about 50 s; a no-op once built)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "framework-venv.sh"), "mlflow"], check=True, capture_output=True)
    return SERVER_PYTHON


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """One ``mlflow server`` process group; ``uri`` is its tracking URI (and UI).

    :param admin_password: run MLflow's ``basic-auth`` app, whose user ``admin`` has this password: a request
        without it is refused (401).
    """

    def __init__(self, admin_password: str | None = None) -> None:
        self.admin_password = admin_password
        self.folder = Path(tempfile.mkdtemp(prefix="mlflow-server-"))
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.folder / "server.log"

    def start(self, timeout: float = 120.0) -> MlflowServer:
        mlflow = SERVER_PYTHON.with_name("mlflow")
        command = [str(mlflow), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
                   "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
                   "--artifacts-destination", str(self.folder / "artifacts")]
        # No job runner and its task queues (a dozen processes for prompt optimisation and trace roll-ups): the
        # tests track runs only, on 2 cores.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        if self.admin_password is not None:
            command += ["--app-name", "basic-auth"]
            env.update(MLFLOW_AUTH_ADMIN_PASSWORD=self.admin_password, MLFLOW_FLASK_SERVER_SECRET_KEY="tests-only")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
                                            start_new_session=True, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:  # open to all
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"mlflow server not up within {timeout}s: {self.log()}")

    def stop(self) -> None:
        """SIGTERM to the server's process group (the ``mlflow server`` command, uvicorn and its worker), then
        SIGKILL to whatever of the group is left: what the server stored is of no use after the tests."""
        if self.process is None:
            return
        for signal_number in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, signal_number)
            except ProcessLookupError:
                break  # the whole group is gone
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def connection(self, **fields: object) -> str:
        """An Airflow connection to this server, in JSON (``AIRFLOW_CONN_<ID>``)."""
        return json.dumps({"conn_type": "mlflow", "host": self.uri, **fields})


@contextmanager
def running_server(**options: object) -> Iterator[MlflowServer]:
    """A started ``MlflowServer`` (its environment built when missing), stopped at the end whatever happened."""
    build_server_environment()
    server = MlflowServer(**options).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def serving_connection(conn_id: str) -> Iterator[MlflowServer]:
    """A running server, named to the tasks as the Airflow connection ``conn_id`` (``AIRFLOW_CONN_<ID>``) while
    it runs."""
    with running_server() as server:
        previous = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = server.connection()
        try:
            yield server
        finally:
            if previous is None:
                os.environ.pop(f"AIRFLOW_CONN_{conn_id.upper()}", None)
            else:
                os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = previous


@dataclass(frozen=True)
class RunView:
    """An MLflow run as its REST API gives it back: info, and params, tags and latest metrics as dicts."""

    run_id: str
    experiment_id: str
    status: str
    name: str
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]

    @classmethod
    def of(cls, run: dict) -> RunView:
        info, data = run["info"], run.get("data", {})
        pairs = lambda key: {item["key"]: item["value"] for item in data.get(key, [])}  # noqa: E731
        return cls(info["run_id"], info["experiment_id"], info["status"], info.get("run_name", ""), pairs("params"),
                   pairs("tags"), pairs("metrics"))


class MlflowReader:
    """What a tracking server holds, read back over MLflow's documented REST API (the tests' side; the provider's
    is ``hooks.mlflow``). ``auth``: (user, password) for a server that asks."""

    def __init__(self, uri: str, auth: tuple[str, str] | None = None) -> None:
        self.uri = uri
        self.auth = auth

    def _get(self, endpoint: str, **params: object) -> dict:
        answer = requests.get(f"{self.uri}/api/2.0/mlflow/{endpoint}", params=params, auth=self.auth, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def runs(self, experiment: str) -> list[RunView]:
        answer = requests.get(f"{self.uri}/api/2.0/mlflow/experiments/get-by-name",
                              params={"experiment_name": experiment}, auth=self.auth, timeout=30)
        if answer.status_code == 404:
            return []
        answer.raise_for_status()
        experiment_id = answer.json()["experiment"]["experiment_id"]
        found = requests.post(f"{self.uri}/api/2.0/mlflow/runs/search", json={"experiment_ids": [experiment_id]},
                              auth=self.auth, timeout=30)
        found.raise_for_status()
        return [RunView.of(run) for run in found.json().get("runs", [])]

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        points = self._get("metrics/get-history", run_id=run_id, metric_key=key).get("metrics", [])
        return sorted((int(point.get("step", 0)), point["value"]) for point in points)

    def artifacts(self, run_id: str, path: str) -> list[str]:
        return [item["path"] for item in self._get("artifacts/list", run_id=run_id, path=path).get("files", [])]

    def model_version(self, name: str, version: int) -> dict:
        return self._get("model-versions/get", name=name, version=str(version))["model_version"]

    def model_versions(self, name: str) -> list[int]:
        found = self._get("model-versions/search", filter=f"name = '{name}'").get("model_versions", [])
        return sorted(int(version["version"]) for version in found)
