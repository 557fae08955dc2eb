"""A real MLflow tracking server for the tests: ``mlflow server`` on 127.0.0.1 with a SQLite backend store and a
local artifact store, from ``.venvs/mlflow`` (``scripts/framework-venv.sh mlflow``: the server's Flask, SQLAlchemy
and alembic pins are not Airflow's), stopped with every process it started.

The tests read what the task sent back with MLflow's own client (``mlflow-skinny``, the ``mlflow`` extra) over HTTP.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_PYTHON = ROOT / ".venvs" / "mlflow" / "bin" / "python"


def build_server_environment() -> Path:
    """``.venvs/mlflow``, built when missing (about 50 s; a no-op once built)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "framework-venv.sh"), "mlflow"], check=True, capture_output=True)
    return SERVER_PYTHON


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """One ``mlflow server`` process group; ``uri`` is its tracking URI (and UI)."""

    def __init__(self) -> None:
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
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder,
                                            start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.process.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"mlflow server not up within {timeout}s: {self.log()}")

    def stop(self) -> None:
        """SIGTERM to the server's process group (gunicorn or uvicorn and their workers), SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=15)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def connection(self, **fields: object) -> str:
        """An Airflow connection to this server, in JSON (``AIRFLOW_CONN_<ID>``)."""
        return json.dumps({"conn_type": "mlflow", "host": self.uri, **fields})
