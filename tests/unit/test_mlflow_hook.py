"""``MlflowHook.request`` against a small HTTP server on 127.0.0.1 that answers as the test says: what is retried
(no answer, 429/5xx) and how often, what is not (a refusal), and the credentials it sends. Sleeps are recorded, not
slept."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_distributed.hooks.mlflow import MlflowApiError, MlflowHook, tracking_uri_of


class ScriptedServer(ThreadingHTTPServer):
    """Answers each request with the next ``(status, body)`` of ``answers``; keeps each request's path and
    Authorization header."""

    def __init__(self, answers: list[tuple[int, dict]]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers
        self.seen: list[tuple[str, str | None]] = []


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        status, body = self.server.answers.pop(0)
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve(monkeypatch) -> Iterator:
    servers: list[ScriptedServer] = []

    def start(answers: list[tuple[int, dict]], **connection: object) -> tuple[ScriptedServer, MlflowHook, list]:
        server = ScriptedServer(answers)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        monkeypatch.setenv("AIRFLOW_CONN_MLFLOW_UNIT", json.dumps(
            {"conn_type": "mlflow", "host": f"http://127.0.0.1:{server.server_address[1]}", **connection}))
        slept: list[float] = []
        return server, MlflowHook("mlflow_unit", sleep=slept.append), slept

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_busy_server_is_asked_again_after_1_then_2_seconds(serve):
    server, hook, slept = serve([(503, {}), (429, {}), (200, {"experiment_id": "7"})])
    assert hook.request("POST", "experiments/create", body={"name": "x"}) == {"experiment_id": "7"}
    assert slept == [1.0, 2.0]
    assert [path for path, _ in server.seen] == ["/api/2.0/mlflow/experiments/create"] * 3


def test_a_refusal_is_not_retried_and_names_mlflows_error_code(serve):
    server, hook, slept = serve([(400, {"error_code": "RESOURCE_ALREADY_EXISTS", "message": "exists"})])
    with pytest.raises(MlflowApiError) as error:
        hook.request("POST", "experiments/create", body={"name": "x"})
    assert (error.value.status, error.value.error_code) == (400, "RESOURCE_ALREADY_EXISTS")
    assert slept == [] and len(server.seen) == 1


def test_a_server_still_busy_after_the_retries_is_an_error(serve):
    server, hook, slept = serve([(503, {})] * 3)
    with pytest.raises(MlflowApiError) as error:
        hook.request("GET", "experiments/get-by-name", params={"experiment_name": "x"})
    assert error.value.status == 503 and slept == [1.0, 2.0] and len(server.seen) == 3


def test_basic_auth_and_a_bearer_token_go_in_the_header(serve):
    server, hook, _ = serve([(200, {})], login="trainer", password="pw-1")
    hook.request("GET", "experiments/get-by-name", params={"experiment_name": "x"})
    assert server.seen[0][1] == "Basic " + base64.b64encode(b"trainer:pw-1").decode()
    assert hook.secrets() == ["pw-1"]
    server, hook, _ = serve([(200, {})], extra={"token": "tok-2"})
    hook.request("GET", "experiments/get-by-name", params={"experiment_name": "x"})
    assert server.seen[0][1] == "Bearer tok-2"


@pytest.mark.parametrize(("host", "port", "schema", "uri"), [
    ("http://mlflow.example.com:5000/", None, None, "http://mlflow.example.com:5000"),
    ("mlflow.example.com", 443, "https", "https://mlflow.example.com:443"),
    ("127.0.0.1", 5000, None, "http://127.0.0.1:5000"),
    ("https://mlflow.example.com", None, "", "https://mlflow.example.com"),
])
def test_the_tracking_uri_of_a_connection(host, port, schema, uri):
    assert tracking_uri_of(host, port, schema) == uri
