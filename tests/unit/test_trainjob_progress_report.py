"""``tracking.log_progress`` in a TrainJob: the master's progress and metrics are POSTed to the endpoint Kubeflow
Trainer gives its nodes for ``status.trainerStatus`` (here a real HTTP server on 127.0.0.1), throttled, with the
bearer token read from its file; an endpoint that is down does not stop training."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from airflow_distributed.replica.live_report import without_records

SCRIPT = """
from airflow_distributed import tracking
tracking.log_metrics(loss=0.5, accuracy=0.75, note="warm")
for step in range(1, 5):
    tracking.log_progress(step, 4)
print("trained")
"""


def run_script(tmp_path: Path, url: str, **extra: str) -> subprocess.CompletedProcess[str]:
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "AIRFLOW_DISTRIBUTED_OUTPUT": str(tmp_path / "out.json"), "AIRFLOW_DISTRIBUTED_ROLE": "master",
           "KUBEFLOW_TRAINER_SERVER_URL": url, "KUBEFLOW_TRAINER_SERVER_TOKEN": str(token), **extra}
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60,
                          check=True)


def test_the_masters_progress_reaches_the_trainers_status_endpoint(tmp_path):
    received: list[tuple[str, str, dict]] = []

    class Endpoint(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, self.headers.get("Authorization", ""), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/j"
        result = run_script(tmp_path, url)
    finally:
        server.shutdown()
    assert without_records(result.stdout.splitlines()) == ["trained"]  # the job view's live records aside
    # The first step, then (within the 5 s interval) only the last one.
    assert [status["trainerStatus"]["progressPercentage"] for _, _, status in received] == [25, 100]
    path, auth, body = received[-1]
    assert path.endswith("/trainjobs/j") and auth == "Bearer secret-token"
    status = body["trainerStatus"]
    assert status["metrics"] == [{"name": "loss", "value": "0.5"}, {"name": "accuracy", "value": "0.75"},
                                 {"name": "note", "value": "warm"}]
    assert status["estimatedRemainingSeconds"] == 0 and status["lastUpdatedTime"].endswith("Z")
    # The output document is written as ever.
    assert json.loads((tmp_path / "out.json").read_text())["progress"]["percent"] == 100.0


def test_an_endpoint_that_is_down_is_reported_once_and_training_goes_on(tmp_path):
    result = run_script(tmp_path, "http://127.0.0.1:9/unreachable")
    assert without_records(result.stdout.splitlines()) == ["trained"]  # the job view's live records aside
    assert result.stderr.count("could not report progress") == 1
