"""What every hook that talks to the Kubernetes API shares: the connection, the retries, the logger, the clock.

``KubeApiHook`` is the cncf provider's ``KubernetesHook`` (same ``kubernetes_default`` connection and extras)
with one retry loop for every call (``api_retry``: transient failures retried with backoff, the rest raised as a
``KubernetesJobError`` naming the object), injectable clock and sleep (tests do not wait), the task's logger, and
the create-or-reattach helpers. The pod hook (``kubernetes.PodJobHook``), the Kubeflow hook
(``kubeflow.KubeflowJobHook``) and the TrainJob hook (``trainjob.TrainJobHook``, a Kubeflow hook) derive from it.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from kubernetes import client
from kubernetes.client import rest
from kubernetes.stream import stream

from airflow_distributed.hooks.api_retry import (
    KubernetesJobError,
    RetryPolicy,
    call_with_retries,
    classified,
    short_error,
)
from airflow_distributed.jobstate.hang_watch import STACKS_COMMAND, STACKS_WAIT
from airflow_distributed.jobstate.log_cursor import strip_timestamps
from airflow_distributed.logs import TaskLog
from airflow_distributed.manifests.kubernetes import MAIN_CONTAINER

#: What ``KubeApiHook.api_call`` returns for 404 NotFound (``missing_ok``) and 409 AlreadyExists (``exists_ok``).
MISSING = object()
EXISTS = object()


class _Response:
    """What ``ApiClient.deserialize`` reads: an object with ``data``."""

    def __init__(self, data: str) -> None:
        self.data = data


#: What the generated client's ``read_namespaced_pod_log`` accepts: an API server of 1.20 refuses ``text/plain``
#: alone with 406 (its pods/log negotiates only json, yaml and protobuf) and streams the plain log all the same.
LOG_ACCEPT = "text/plain, application/json, application/yaml, application/vnd.kubernetes.protobuf"

class KubeApiHook(KubernetesHook):
    """A ``KubernetesHook`` whose calls are retried after transient failures and report the others by name.

    :param kubernetes_conn_id: the cncf provider's Kubernetes connection (``kube_config_path``, ``kube_config``,
        ``in_cluster``, ``cluster_context``, ``namespace`` extras); ``None`` with ``config_file`` or
        ``config_dict`` instead.
    :param max_concurrency: requests made at the same time (the size of the connection pool follows).
    :param retry: backoff for transient API failures.
    :param clock: monotonic clock (deadlines, pacing).
    :param sleep: how to wait between retries and polls.
    :param logger: where the hook logs (the task's logger in an operator).
    :param kwargs: passed to ``KubernetesHook`` (``config_file``, ``client_configuration``, ``cluster_context``...).
    """

    hook_name = "Distributed training (Kubernetes API)"

    def __init__(
        self,
        kubernetes_conn_id: str | None = KubernetesHook.default_conn_name,
        *,
        max_concurrency: int = 16,
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        logger: TaskLog | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=None, kubernetes_conn_id=kubernetes_conn_id, **kwargs)
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.max_concurrency = max_concurrency
        self.retry = retry or RetryPolicy()
        self._clock, self._sleep = clock, sleep
        self._logger = logger

    @property
    def job_log(self) -> TaskLog:
        return self._logger or self.log

    # ------------------------------------------------------------------ connection

    def get_conn(self) -> client.ApiClient:
        api = super().get_conn()
        settings = copy.copy(api.configuration)
        # This hook's RetryPolicy is the one retry loop: urllib3 would otherwise retry some GETs on its own
        # (429/503 with Retry-After), unseen and uncounted.
        settings.retries = False
        maxsize = max(self.max_concurrency + 4, settings.connection_pool_maxsize or 0)
        api.rest_client = rest.RESTClientObject(settings, maxsize=maxsize)
        return api

    @cached_property
    def custom_objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def default_namespace(self) -> str:
        """The connection's ``namespace`` extra, else ``default``."""
        return self.get_namespace() or self.DEFAULT_NAMESPACE

    # ------------------------------------------------------------------ calls

    def _call(self, what: str, call: Callable[..., Any], *args: Any, missing_ok: bool = False,
              exists_ok: bool = False, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` with retries; 404 -> ``MISSING`` and 409 -> ``EXISTS`` when allowed; any other
        API or connection failure -> ``KubernetesJobError`` ``<what>: <status> <reason>: <message>``."""

        def attempt() -> Any:
            try:
                return call(*args, **kwargs)
            except client.ApiException as error:
                if missing_ok and error.status == 404:
                    return MISSING
                if exists_ok and error.status == 409:
                    return EXISTS
                raise

        try:
            return call_with_retries(attempt, what=what, policy=self.retry, sleep=self._sleep, log=self.job_log)
        except Exception as error:
            failure = classified(what, error)
            if failure is error:
                raise
            raise failure from error

    @staticmethod
    def _json(response: Any) -> Any:
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    @staticmethod
    def _done(response: Any) -> None:
        """Read the rest of an answer we do not need, so that its connection can serve the next request."""
        try:
            response.data  # noqa: B018 - reading is the point
        finally:
            response.release_conn()

    def _model(self, obj: Mapping[str, Any], type_name: str) -> Any:
        return self.api_client.deserialize(_Response(json.dumps(obj)), type_name)

    # ------------------------------------------------------------------ logs

    def read_log_tail(self, namespace: str, pod: str, lines: int = 30, container: str = MAIN_CONTAINER,
                      limit_bytes: int | None = None, timestamps: bool = False) -> list[str]:
        """The last ``lines`` of a container's log (at most ``limit_bytes`` of them, when given); empty when there is
        none (not started, pod gone). Read with their timestamps, which are kept with ``timestamps`` (to tell the
        lines a relay showed already: ``log_relay.new_lines_after``) and else cut off."""
        bounds: dict[str, Any] = {"limit_bytes": limit_bytes} if limit_bytes is not None else {}
        try:
            response = self._call(f"reading the log of pod {namespace}/{pod}",
                                  self.core_v1_client.read_namespaced_pod_log, pod, namespace, container=container,
                                  tail_lines=lines, timestamps=True, _preload_content=False, **bounds)
        except KubernetesJobError as error:
            if error.status in (400, 404):
                return []
            raise
        try:
            text = response.data.decode("utf-8", "replace")
        finally:
            response.release_conn()
        return text.splitlines() if timestamps else strip_timestamps(text.splitlines())

    def read_log_lines(self, namespace: str, pod: str, container: str, query: list[tuple[str, str]]) -> list[str]:
        """A container's log lines as read with ``query`` (pods/log's ``timestamps``, ``sinceTime``, ``tailLines``,
        ``limitBytes``), kept as served; empty when there is none (not started, pod gone). One bounded request: the
        hang watchdog's look at the master.

        :raises KubernetesJobError: the log could not be read.
        """
        try:
            # The generated client has no sinceTime argument: the same endpoint through the client's call_api.
            response = self._call(f"reading the log of pod {namespace}/{pod}", self.api_client.call_api,
                                  "/api/v1/namespaces/{namespace}/pods/{name}/log", "GET",
                                  path_params={"namespace": namespace, "name": pod},
                                  query_params=[("container", container), *query],
                                  header_params={"Accept": LOG_ACCEPT}, auth_settings=["BearerToken"],
                                  _preload_content=False, _return_http_data_only=True, _request_timeout=(10.0, 30.0))
        except KubernetesJobError as error:
            if error.status in (400, 404):
                return []
            raise
        try:
            return response.data.decode("utf-8", "replace").splitlines()
        finally:
            response.release_conn()

    def dump_stacks(self, namespace: str, pods: Sequence[str], container: str) -> None:
        """Ask each pod's processes that imported ``tracking`` to print their Python stacks (pods/exec of
        ``hang_watch.STACKS_COMMAND``), then give them ``STACKS_WAIT`` to reach the logs. A pod that could not be
        asked (no ``pods/exec``, no shell) is said so in the task log; its last lines are read all the same.

        One pod after the other: the client's ``stream`` swaps its API client's request function for the time of a
        call, and two calls at once would leave the websocket one in place for every later request.
        """
        asked = 0
        for pod in pods:
            try:
                self.run_in_container(namespace, pod, container, list(STACKS_COMMAND))
                asked += 1
            except Exception as error:
                self.job_log.warning("could not ask %s for its Python stacks (%s): its last lines are quoted "
                                     "without them", pod, short_error(error))
        if asked:
            self._sleep(STACKS_WAIT)  # faulthandler writes at once; the kubelet's log takes a moment

    def run_in_container(self, namespace: str, pod: str, container: str, command: list[str],
                         timeout: float = 10.0) -> str:
        """Run ``command`` in a running container (pods/exec, as the XCom sidecar's reads) and return its output.

        :raises Exception: the exec failed (refused, the container gone): the caller decides what that means.
        """
        return str(stream(self.core_v1_client.connect_get_namespaced_pod_exec, pod, namespace, container=container,
                          command=command, stdout=True, stderr=True, stdin=False, tty=False,
                          _request_timeout=timeout))

    # ------------------------------------------------------------------ create, delete

    def _create_one(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
        """Create an object; one already there (an earlier try's, or one whose answer was lost) counts as done.

        :returns: 1 if this call created it, 0 if it was there.
        """
        result = self._call(what, call, *args, exists_ok=True, _preload_content=False, **kwargs)
        if result is EXISTS:
            return 0
        self._done(result)
        return 1

    def _delete_one(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Delete an object; one already gone counts as done. :returns: whether there was something to delete."""
        result = self._call(what, call, *args, missing_ok=True, _preload_content=False, **kwargs)
        if result is MISSING:
            return False
        self._done(result)
        return True

    def _wait_until_gone(self, what: str, present: Callable[[], bool], timeout: float, pause: float = 0.2) -> None:
        """Poll ``present()`` with growing pauses until it is false.

        Home-made rather than tenacity: the deadline is read from the hook's injected clock, which tenacity's stop
        conditions cannot use, and each poll is already a retried call.

        :raises KubernetesJobError: ``<what>: still there after <timeout>s``.
        """
        deadline = self._clock() + timeout
        while present():
            if self._clock() > deadline:
                raise KubernetesJobError(f"{what}: still there after {timeout:g}s")
            self._sleep(pause)
            pause = min(pause * 2, 5.0)


__all__ = ["EXISTS", "MISSING", "KubeApiHook", "KubernetesJobError"]
