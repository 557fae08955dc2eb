"""``MlflowHook``: an MLflow tracking server reached through an Airflow connection, and ``MlflowJobRun``, the run
of one task instance on it (``mlflow_conn_id=``).

What is sent is built by the pure ``mlflow_run`` module; this module only sends it, through MLflow's own client
(``mlflow-skinny``, the ``mlflow`` extra). A tracking server is never in a job's way: every request has a short
timeout and a bounded retry, and the first failure (down, slow, credentials refused) is one warning in the task
log, after which this try sends nothing more; the job and its XComs go on as without MLflow.

Credentials: MLflow's client reads them from ``MLFLOW_TRACKING_*`` variables only. They are set in this process for
the duration of the client's calls and restored after (``_client_environment``), never while a replica starts, so
no replica and no child process inherits them; the tracking URI handed to the client never holds them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow.sdk import BaseHook
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from airflow_distributed.mlflow_run import (
    BATCH_METRICS,
    BATCH_PARAMS_AND_TAGS,
    MODEL_VERSION_TAG,
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

#: Seconds one request to the tracking server may take, and the retries after a failed one (MLflow's own backoff,
#: about 1 s then 2 s): a server that is down costs a try about 20 s at most, in two places (start and end).
REQUEST_TIMEOUT = 5
REQUEST_RETRIES = 2
#: What a warning quotes of a failed request's error, at most (characters).
REASON_LIMIT = 400
#: A model larger than this (bytes) is not uploaded as an artifact: the run keeps its path as a tag.
MODEL_ARTIFACT_LIMIT = 2**30
#: The artifact folder of the run where the model is uploaded, and the registry's source for it.
MODEL_ARTIFACT_PATH = "model"
#: What MLflow's client reads from the environment for each request; set only while it is called.
_CREDENTIAL_VARIABLES = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
                         "MLFLOW_TRACKING_INSECURE_TLS")
_REQUEST_VARIABLES = ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                      "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR")


class MlflowHook(BaseHook):
    """An MLflow tracking server, from an Airflow connection.

    The connection: ``host`` a URL (``http://mlflow.example.com:5000``) or a host name with ``port`` and, as
    ``schema``, ``http`` (default) or ``https``; ``login``/``password`` for HTTP basic auth, or ``extra``
    ``{"token": "..."}`` for a bearer token; ``extra`` ``{"insecure": true}`` skips TLS verification.

    :param mlflow_conn_id: the Airflow connection of the tracking server.
    :param timeout: seconds one request may take.
    :param retries: retries of a failed request (MLflow's backoff between them).
    """

    conn_name_attr = "mlflow_conn_id"
    default_conn_name = "mlflow_default"
    conn_type = "mlflow"
    hook_name = "MLflow"

    def __init__(self, mlflow_conn_id: str = default_conn_name, *, timeout: int = REQUEST_TIMEOUT,
                 retries: int = REQUEST_RETRIES) -> None:
        super().__init__()
        self.mlflow_conn_id = mlflow_conn_id
        self.timeout = timeout
        self.retries = retries
        connection = self.get_connection(mlflow_conn_id)
        self.tracking_uri = tracking_uri_of(connection.host, connection.port, connection.schema)
        extra = connection.extra_dejson
        self._credentials = {
            "MLFLOW_TRACKING_USERNAME": connection.login or None,
            "MLFLOW_TRACKING_PASSWORD": connection.password or None,
            "MLFLOW_TRACKING_TOKEN": str(extra["token"]) if extra.get("token") else None,
            "MLFLOW_TRACKING_INSECURE_TLS": "true" if extra.get("insecure") else None,
        }
        self.client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    @contextmanager
    def _client_environment(self) -> Iterator[None]:
        """The credentials and request limits in the environment while the client is called, as they were after."""
        wanted: dict[str, str | None] = {
            **self._credentials,
            "MLFLOW_HTTP_REQUEST_TIMEOUT": str(self.timeout),
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(self.retries),
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        }
        saved = {name: os.environ.get(name) for name in wanted}
        try:
            for name, value in wanted.items():
                if value is None:
                    os.environ.pop(name, None)  # a variable of the worker's must not pass for the connection's
                else:
                    os.environ[name] = value
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def call(self, request: Callable[[MlflowClient], T]) -> T:
        """``request(client)`` with the connection's credentials and the request limits."""
        with self._client_environment():
            return request(self.client)

    def secrets(self) -> list[str]:
        """The connection's secret values, to keep out of what is logged."""
        return [value for name, value in self._credentials.items()
                if value and name in ("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")]


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
        self._given_up = False

    def _attempt(self, what: str, request: Callable[[MlflowClient], T]) -> T | None:
        if self._given_up:
            return None
        try:
            return self.hook.call(request)
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

        def find_or_create(client: MlflowClient) -> OpenRun:
            found = client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found is not None else _create_experiment(client, experiment)
            runs = client.search_runs([experiment_id], filter_string=key.search_filter(), max_results=1,
                                      order_by=["attributes.start_time ASC"])
            if runs:
                run_id = runs[0].info.run_id
                client.update_run(run_id, status=RUNNING)
                client.log_batch(run_id, tags=[RunTag(name, value) for name, value in tags.items()])
            else:
                run_id = client.create_run(experiment_id, tags={**key.tags(), **tags}).info.run_id
                for batch in batches([Param(name, value) for name, value in params.items()], BATCH_PARAMS_AND_TAGS):
                    client.log_batch(run_id, params=list(batch))
            return OpenRun(experiment_id, run_id, run_url(self.hook.tracking_uri, experiment_id, run_id))

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
        points = metric_points(record, try_number=try_number)
        model_path = record.get("model_path")

        def log_ending(client: MlflowClient) -> None:
            logged_at = _now_ms()
            metrics = [Metric(key, value, logged_at, step) for key, value, step in points]
            for batch in batches(metrics, BATCH_METRICS):
                client.log_batch(run.run_id, metrics=list(batch))
            client.log_batch(run.run_id, tags=[RunTag(name, value) for name, value in ending_tags(record).items()])

        self._attempt("logging the job's metrics", log_ending)
        uploaded = False
        if succeeded and isinstance(model_path, str) and _uploadable(model_path):
            uploaded = self._attempt("uploading the model", lambda client: _upload(client, run.run_id,
                                                                                    model_path)) is not None
        if succeeded and register_model:
            source = (f"runs:/{run.run_id}/{MODEL_ARTIFACT_PATH}" if uploaded
                      else model_path if isinstance(model_path, str) and "://" in model_path else None)
            if source is None:
                self.log.warning("MLflow: the model is not registered as %s: its path %s is neither uploaded nor a "
                                 "URL the registry can point at", register_model, model_path)
            else:
                self.model_version = self._attempt(
                    "registering the model", lambda client: _register(client, register_model, source, run.run_id))
                if self.model_version is not None:
                    self.model_version_url = model_version_url(self.hook.tracking_uri, register_model,
                                                               self.model_version)
                    self.log.info("MLflow: the model is version %s of %s: %s", self.model_version, register_model,
                                  self.model_version_url)
                    tag = f"{register_model}/{self.model_version}"
                    self._attempt("tagging the run with its model version",
                                  lambda client: client.set_tag(run.run_id, MODEL_VERSION_TAG, tag))
        status = run_status(succeeded)
        self._attempt("ending the run", lambda client: client.set_terminated(run.run_id, status))


def _create_experiment(client: MlflowClient, name: str) -> str:
    try:
        return client.create_experiment(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        # Created meanwhile by another task: the one that exists is ours too.
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return str(found.experiment_id)


def _uploadable(model_path: str) -> bool:
    """A local file or folder the worker can read, not too large to send from it."""
    if not os.path.exists(model_path):
        return False
    if os.path.isfile(model_path):
        return os.path.getsize(model_path) <= MODEL_ARTIFACT_LIMIT
    total = 0
    for folder, _, files in os.walk(model_path):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
        if total > MODEL_ARTIFACT_LIMIT:
            return False
    return True


def _upload(client: MlflowClient, run_id: str, model_path: str) -> bool:
    if os.path.isdir(model_path):
        client.log_artifacts(run_id, model_path, MODEL_ARTIFACT_PATH)
    else:
        client.log_artifact(run_id, model_path, MODEL_ARTIFACT_PATH)
    return True


def _register(client: MlflowClient, name: str, source: str, run_id: str) -> int:
    try:
        client.create_registered_model(name)
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    # No wait for the version to be READY: a server copies nothing for a source it only points at.
    version = client.create_model_version(name, source, run_id=run_id, await_creation_for=0)
    return int(version.version)


def _now_ms() -> int:
    return int(time.time() * 1000)
