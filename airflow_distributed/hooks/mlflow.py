"""``MlflowHook``: an MLflow tracking server reached through an Airflow connection, over MLflow's REST API, and
``MlflowJobRun``, the run of one task instance on it (``mlflow_conn_id=``).

What is sent is built by the pure ``mlflow_run`` module; this module only sends it. It speaks MLflow's documented REST
API (``/api/2.0/mlflow/...``) with ``requests`` rather than through MLflow's own client: ``mlflow-skinny`` 3.17 pins
``cachetools<8`` and ``importlib_metadata<10``, and would downgrade what Airflow 3.3 installs; over HTTP the
credentials also go in each request's header, not through process-wide ``MLFLOW_TRACKING_*`` variables that a
replica started meanwhile could inherit.

A tracking server is never in a job's way: every request has a short timeout and a bounded retry, and the first
failure (down, slow, credentials refused) is one warning in the task log, after which this try sends nothing more;
the job and its XComs go on as without MLflow.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import requests
from airflow.sdk import BaseHook

from airflow_distributed.mlflow_run import (
    BATCH_METRICS,
    BATCH_PARAMS_AND_TAGS,
    KILLED,
    MODEL_VERSION_TAG,
    RUN_NAME_TAG,
    RUNNING,
    RunKey,
    batches,
    ending_tags,
    metric_points,
    model_version_url,
    run_status,
    run_url,
)

T = TypeVar("T")

#: Seconds one request to the tracking server may take, and the retries after a failed one (1 s, then 2 s apart):
#: a server that is down or silent costs a try about 20 s at most, in two places (start and end).
REQUEST_TIMEOUT = 5.0
REQUEST_RETRIES = 2
#: Seconds the request that ends a killed try's run may take (one attempt, in a thread of its own): a kill waits for
#: it no longer than this, and Airflow's supervisor sends SIGKILL 5 s after its SIGTERM.
KILL_TIMEOUT = 2.0
#: What a warning quotes of a failed request's error, at most (characters).
REASON_LIMIT = 400
#: A model larger than this (bytes) is not uploaded from the worker: the run keeps its path as a tag (a model on
#: storage, ``s3://...``, is registered from its URL).
MODEL_ARTIFACT_LIMIT = 256 * 2**20
#: The artifact folder of the run where the model is uploaded, and the registry's source for it.
MODEL_ARTIFACT_PATH = "model"
#: Answers worth another attempt: the server is busy or restarting.
_TRANSIENT = frozenset({429, 500, 502, 503, 504})
#: The artifact URIs of a server that proxies artifacts (``mlflow server``'s default): uploaded over its HTTP API.
_PROXIED_ARTIFACTS = "mlflow-artifacts:"


class MlflowApiError(RuntimeError):
    """A request the tracking server refused or did not answer: ``status`` (None without an answer) and MLflow's
    ``error_code`` (``RESOURCE_ALREADY_EXISTS``...)."""

    def __init__(self, message: str, status: int | None = None, error_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class MlflowHook(BaseHook):
    """An MLflow tracking server, from an Airflow connection.

    The connection: ``host`` a URL (``http://mlflow.example.com:5000``) or a host name with ``port`` and, as
    ``schema``, ``http`` (default) or ``https``; ``login``/``password`` for HTTP basic auth, or ``extra``
    ``{"token": "..."}`` for a bearer token; ``extra`` ``{"insecure": true}`` skips TLS verification.

    :param mlflow_conn_id: the Airflow connection of the tracking server.
    :param timeout: seconds one request may take.
    :param retries: attempts after a failed one (no answer, or 429/5xx).
    :param sleep: waits between attempts (a test passes its own).
    :param connection: the connection already resolved (the job view resolves it with the DAG's team in the API
        server, where the task SDK's lookup is not available); default: looked up by ``mlflow_conn_id``.
    """

    conn_name_attr = "mlflow_conn_id"
    default_conn_name = "mlflow_default"
    conn_type = "mlflow"
    hook_name = "MLflow"

    def __init__(self, mlflow_conn_id: str = default_conn_name, *, timeout: float = REQUEST_TIMEOUT,
                 retries: int = REQUEST_RETRIES, sleep: Callable[[float], None] = time.sleep,
                 connection: Any = None) -> None:
        super().__init__()
        self.mlflow_conn_id = mlflow_conn_id
        self.timeout = timeout
        self.retries = retries
        self._sleep = sleep
        connection = connection if connection is not None else self.get_connection(mlflow_conn_id)
        self.tracking_uri = tracking_uri_of(connection.host, connection.port, connection.schema)
        extra = connection.extra_dejson
        self._auth = (connection.login, connection.password or "") if connection.login else None
        self._token = str(extra["token"]) if extra.get("token") else None
        self._verify = not extra.get("insecure")
        self._session = requests.Session()

    def secrets(self) -> list[str]:
        """The connection's secret values, to keep out of what is logged."""
        return [value for value in (self._auth[1] if self._auth else None, self._token) if value]

    def request(self, method: str, endpoint: str, *, params: Mapping[str, Any] | None = None,
                body: Mapping[str, Any] | None = None, data: bytes | None = None,
                api: str = "mlflow", once: float | None = None) -> dict[str, Any]:
        """One call of MLflow's REST API (``/api/2.0/<api>/<endpoint>``), retried while the server does not answer
        or answers 429/5xx; its JSON answer.

        :param once: one attempt only, bounded by these seconds, on a connection of its own (the kill's request,
            sent while another may be under way on the hook's session).
        :raises MlflowApiError: refused, or no answer after the retries.
        """
        url = f"{self.tracking_uri}/api/2.0/{api}/{endpoint}"
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        retries, timeout = (0, once) if once is not None else (self.retries, self.timeout)
        send = requests.request if once is not None else self._session.request
        for attempt in range(retries + 1):
            last = attempt == retries
            try:
                answer = send(method, url, params=params, json=body, data=data, auth=self._auth,
                              headers=headers, timeout=timeout, verify=self._verify)
            except requests.RequestException as error:  # refused, timed out, cut
                if last:
                    raise MlflowApiError(f"{method} {endpoint}: no answer ({type(error).__name__}: {error})") from error
                self._sleep(2.0 ** attempt)
                continue
            if answer.status_code in _TRANSIENT and not last:
                self._sleep(2.0 ** attempt)
                continue
            if not answer.ok:
                try:
                    code = answer.json().get("error_code")
                except (ValueError, AttributeError):
                    code = None
                raise MlflowApiError(f"{method} {endpoint}: {answer.status_code} {code or answer.reason}",
                                     answer.status_code, code)
            return answer.json() if answer.content else {}
        raise AssertionError("unreachable")  # the last attempt returns or raises

    def upload(self, artifact_uri: str, local_path: str, artifact_path: str) -> None:
        """``local_path`` (a file, or a folder's files) into the run's artifacts under ``artifact_path``, through a
        server that proxies artifacts (``mlflow-artifacts:`` URIs)."""
        root = artifact_uri[len(_PROXIED_ARTIFACTS):].lstrip("/")
        files = ([(local_path, os.path.basename(local_path))] if os.path.isfile(local_path) else
                 [(os.path.join(folder, name), os.path.relpath(os.path.join(folder, name), local_path))
                  for folder, _, names in os.walk(local_path) for name in names])
        for path, relative in files:
            with open(path, "rb") as source:
                self.request("PUT", quote(f"{root}/{artifact_path}/{relative}"), data=source.read(),
                             api="mlflow-artifacts/artifacts")


def tracking_uri_of(host: str | None, port: int | None, schema: str | None) -> str:
    """The tracking URI of a connection's fields, without credentials."""
    host = (host or "").strip().rstrip("/")
    if not host:
        raise ValueError("the MLflow connection has no host: give the tracking server's URL as its host")
    if "://" not in host:
        host = f"{schema or 'http'}://{host}"
    if port and host.count(":") < 2:
        host = f"{host}:{port}"
    return host


@dataclass(frozen=True)
class OpenRun:
    """The MLflow run a try logs to."""

    experiment_id: str
    run_id: str
    artifact_uri: str
    url: str


class MlflowJobRun:
    """The MLflow run of one task instance, for one try: ``open`` at the start, ``close`` when the job ended.

    Never raises: the first request that fails is one warning through ``log``, and nothing is sent after it.

    :param hook: the tracking server.
    :param log: the task's logger.
    """

    def __init__(self, hook: MlflowHook, log: Any) -> None:
        self.hook = hook
        self.log = log
        self.run: OpenRun | None = None
        self.model_version: int | None = None
        self.model_version_url: str | None = None
        #: Airflow stopped the try (``end_killed``): the run ends ``KILLED`` whatever the job's record says
        self.killed = False
        self._given_up = False

    def _attempt(self, what: str, request: Callable[[MlflowHook], T]) -> T | None:
        if self._given_up:
            return None
        try:
            return request(self.hook)
        except Exception as error:
            self._given_up = True
            self.log.warning("MLflow tracking at %s: %s failed (%s); the job goes on without MLflow for the rest of "
                             "this try", self.hook.tracking_uri, what, self._reason(error))
            return None

    def _reason(self, error: Exception) -> str:
        reason = f"{type(error).__name__}: {' '.join(str(error).split())}"
        for secret in self.hook.secrets():  # before it is cut, so that no part of a secret is left
            reason = reason.replace(secret, "***")
        if len(reason) > REASON_LIMIT:  # the request's start and the cause at the end (a timeout, a refusal)
            reason = f"{reason[:REASON_LIMIT // 2]} ... {reason[-REASON_LIMIT // 2:]}"
        return reason

    def open(self, key: RunKey, *, experiment: str, tags: Mapping[str, str], params: Mapping[str, str]) -> None:
        """Continue the run of ``key`` (a retry, a resumed deferral), marked running again, or create it with
        ``params``; the try's ``tags`` set either way."""

        def find_or_create(hook: MlflowHook) -> OpenRun:
            experiment_id = _experiment_id(hook, experiment)
            found = hook.request("POST", "runs/search", body={
                "experiment_ids": [experiment_id], "filter": key.search_filter(), "max_results": 1,
                "order_by": ["attributes.start_time ASC"]}).get("runs") or []
            if found:
                info = found[0]["info"]
                hook.request("POST", "runs/update", body={"run_id": info["run_id"], "status": RUNNING})
                hook.request("POST", "runs/log-batch", body={"run_id": info["run_id"], "tags": _pairs(tags)})
            else:
                info = hook.request("POST", "runs/create", body={
                    "experiment_id": experiment_id, "start_time": _now_ms(), "run_name": tags.get(RUN_NAME_TAG, ""),
                    "tags": _pairs({**key.tags(), **tags})})["run"]["info"]
                for batch in batches(_pairs(params), BATCH_PARAMS_AND_TAGS):
                    hook.request("POST", "runs/log-batch", body={"run_id": info["run_id"], "params": list(batch)})
            return OpenRun(experiment_id, info["run_id"], info.get("artifact_uri", ""),
                           run_url(hook.tracking_uri, experiment_id, info["run_id"]))

        self.run = self._attempt("opening the job's run", find_or_create)
        if self.run is not None:
            self.log.info("MLflow run of this job: %s", self.run.url)

    def close(self, record: Mapping[str, Any] | None, *, succeeded: bool, try_number: int,
              register_model: str | None = None) -> None:
        """Log what the try's ``job`` record holds, upload the model, register it after success, and end the run
        as the try ended."""
        run = self.run
        if run is None:
            return
        record = record or {}
        logged_at = _now_ms()
        metrics = [{"key": key, "value": value, "timestamp": logged_at, "step": step}
                   for key, value, step in metric_points(record, try_number=try_number)]
        model_path = record.get("model_path")

        def log_ending(hook: MlflowHook) -> None:
            for batch in batches(metrics, BATCH_METRICS):
                hook.request("POST", "runs/log-batch", body={"run_id": run.run_id, "metrics": list(batch)})
            hook.request("POST", "runs/log-batch", body={"run_id": run.run_id, "tags": _pairs(ending_tags(record))})

        self._attempt("logging the job's metrics", log_ending)
        uploaded = False
        if succeeded and isinstance(model_path, str) and _uploadable(model_path, run.artifact_uri):
            uploaded = self._attempt("uploading the model", lambda hook: _upload(hook, run, model_path)) is not None
        if succeeded and register_model:
            self._register(run, register_model, model_path, uploaded)
        ending = {"run_id": run.run_id, "status": run_status(succeeded, self.killed), "end_time": _now_ms()}
        self._attempt("ending the run", lambda hook: hook.request("POST", "runs/update", body=ending))

    def end_killed(self, timeout: float = KILL_TIMEOUT) -> threading.Thread | None:
        """Airflow is stopping the try (``on_kill``, in the task's SIGTERM handler): end the run ``KILLED`` now, in a
        thread of its own with one attempt of at most ``timeout`` seconds, so that the kill's SIGKILL, which may
        come before the job's end is logged, leaves no run ``RUNNING``; the kill never waits for the server.

        :return: the thread sending it (None when there is no run to end); ``close`` later logs the try's metrics
            and ends the run ``KILLED`` again.
        """
        self.killed = True
        run = self.run
        if run is None or self._given_up:
            return None
        ending = {"run_id": run.run_id, "status": KILLED, "end_time": _now_ms()}

        def send() -> None:
            try:
                self.hook.request("POST", "runs/update", body=ending, once=timeout)
            except Exception as error:
                self.log.warning("MLflow tracking at %s: ending the killed try's run failed (%s)",
                                 self.hook.tracking_uri, self._reason(error))

        sender = threading.Thread(target=send, name="mlflow-run-killed", daemon=True)
        sender.start()
        return sender

    def _register(self, run: OpenRun, name: str, model_path: Any, uploaded: bool) -> None:
        source = (f"runs:/{run.run_id}/{MODEL_ARTIFACT_PATH}" if uploaded
                  else model_path if isinstance(model_path, str) and "://" in model_path else None)
        if source is None:
            self.log.warning("MLflow: the model is not registered as %s: its path %s is neither uploaded nor a URL "
                             "the registry can point at", name, model_path)
            return
        self.model_version = self._attempt("registering the model",
                                           lambda hook: _register(hook, name, source, run.run_id))
        if self.model_version is None:
            return
        self.model_version_url = model_version_url(self.hook.tracking_uri, name, self.model_version)
        self.log.info("MLflow: the model is version %s of %s: %s", self.model_version, name, self.model_version_url)
        tag = {"run_id": run.run_id, "key": MODEL_VERSION_TAG, "value": f"{name}/{self.model_version}"}
        self._attempt("tagging the run with its model version",
                      lambda hook: hook.request("POST", "runs/set-tag", body=tag))


def _experiment_id(hook: MlflowHook, name: str) -> str:
    """The experiment named ``name``, created when missing."""
    try:
        return str(hook.request("GET", "experiments/get-by-name",
                                params={"experiment_name": name})["experiment"]["experiment_id"])
    except MlflowApiError as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    try:
        return str(hook.request("POST", "experiments/create", body={"name": name})["experiment_id"])
    except MlflowApiError as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    # Created meanwhile by another task: the one that exists is ours too.
    return str(hook.request("GET", "experiments/get-by-name",
                            params={"experiment_name": name})["experiment"]["experiment_id"])


def _uploadable(model_path: str, artifact_uri: str) -> bool:
    """A local file or folder the worker can read, not too large to send from it, to a server that takes artifacts
    over its own API."""
    if not artifact_uri.startswith(_PROXIED_ARTIFACTS) or not os.path.exists(model_path):
        return False
    if os.path.isfile(model_path):
        return os.path.getsize(model_path) <= MODEL_ARTIFACT_LIMIT
    total = 0
    for folder, _, files in os.walk(model_path):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
        if total > MODEL_ARTIFACT_LIMIT:
            return False
    return True


def _upload(hook: MlflowHook, run: OpenRun, model_path: str) -> bool:
    hook.upload(run.artifact_uri, model_path, MODEL_ARTIFACT_PATH)
    return True


def _register(hook: MlflowHook, name: str, source: str, run_id: str) -> int:
    try:
        hook.request("POST", "registered-models/create", body={"name": name})
    except MlflowApiError as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    version = hook.request("POST", "model-versions/create", body={"name": name, "source": source, "run_id": run_id})
    return int(version["model_version"]["version"])


def _pairs(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"key": key, "value": value} for key, value in values.items()]


def _now_ms() -> int:
    return int(time.time() * 1000)


__all__ = ["KILL_TIMEOUT", "MlflowApiError", "MlflowHook", "MlflowJobRun", "OpenRun", "tracking_uri_of"]
