"""Following replicas' container logs into the task log, one thread per followed replica.

A follow is one long ``GET .../log?follow=true&timestamps=true``. When it breaks (connection reset, read
timeout, API restart) it reconnects with ``sinceTime`` and ``LogCursor`` drops the lines already emitted, so
the task log gets every line once.

``LogFollowers`` follows the pods of a ``backend="kubernetes"`` job, which the task's own watch sees start;
``MasterFollower`` follows the master of a job whose pods a controller makes (a Kubeflow job's, a TrainJob's),
which the task does not watch: it finds the master's pod in the pods the wait lists anyway, or in a paced LIST of
its own.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kubernetes.watch.watch import iter_resp_lines

from airflow_distributed.hooks.api_retry import api_status, is_transient, short_error
from airflow_distributed.hooks.kube_api import LOG_ACCEPT
from airflow_distributed.jobstate.job_watch import JobTracker
from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.jobstate.pod_state import ContainerState, container_state, container_status, log_available
from airflow_distributed.logs import TaskLog
from airflow_distributed.manifests.kubernetes import MAIN_CONTAINER
from airflow_distributed.replica.live_report import is_record

if TYPE_CHECKING:
    from airflow_distributed.hooks.kube_api import KubeApiHook

TAIL_LINES = 40
#: Client-side read timeout of a follow: a quiet log is reconnected after this long (cheap), never hung on.
FOLLOW_READ_TIMEOUT = 300.0
#: Seconds a stopped follower's thread is given to end before its last read (its read is unblocked at once).
STOP_JOIN = 2.0
#: Client-side time limit of a look for the master's pod, and of a read of its state.
LOCATE_TIMEOUT = (10.0, 30.0)


def task_log_lines(log: TaskLog) -> Callable[[str, str], None]:
    """``emit`` for a follower: each line into the task log as ``[pod] line``, the master's live records (for the
    job view, ``live_report``) left out."""

    def emit(pod: str, line: str) -> None:
        if not is_record(line):
            log.info("[%s] %s", pod, line)

    return emit


class PodLogFollower:
    """Copies one container's log to ``emit(replica, line)`` until the container ends or ``stop()``.

    :param finished: true once the container has ended (a follow that ends before is reconnected).
    :param read_timeout: seconds without a byte after which the follow is reconnected.
    """

    def __init__(
        self,
        hook: KubeApiHook,
        namespace: str,
        pod: str,
        emit: Callable[[str, str], None],
        *,
        finished: Callable[[], bool],
        container: str = MAIN_CONTAINER,
        log: TaskLog | None = None,
        read_timeout: float = FOLLOW_READ_TIMEOUT,
        cursor: LogCursor | None = None,
    ) -> None:
        self.hook = hook
        self.read_timeout = read_timeout
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        #: where the follow is; given, it goes on where an earlier follower of the same container stopped
        self.cursor = cursor if cursor is not None else LogCursor()
        self._emit = emit
        self._finished = finished
        self._stop = threading.Event()
        self._log = log or logging.getLogger(__name__)
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"log-{pod}", daemon=True)

    def start(self) -> PodLogFollower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks the thread's read at once
            except Exception:
                pass

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        """Follow until the container ends, reconnecting after a break. Not ``call_with_retries``: it has no try
        limit (a success resets the count), retries 400 (not started yet) too, and waits on the stop event."""
        failures = 0
        while not self._stop.is_set():
            try:
                self._follow_once()
                failures = 0
                if self._finished() or self._stop.is_set():
                    return
                # Ended while the watch has not yet seen the container end: look again in a moment.
                self._stop.wait(0.5)
            except Exception as error:
                if self._stop.is_set():
                    return
                status = api_status(error)
                if status == 404:
                    return  # the pod is gone
                if status == 400 or is_transient(error):
                    # 400: not started yet (or restarted); transient: reconnect after a backoff.
                    delay = self.hook.retry.delay(min(failures, 3), error) if is_transient(error) else 1.0
                    failures += 1
                    self._stop.wait(1.0 if delay is None else delay)
                    continue
                self._log.warning("stopped following the log of %s/%s: %s", self.namespace, self.pod,
                                  short_error(error))
                return
            finally:
                self.cursor.reconnecting()

    def catch_up(self) -> None:
        """One read, without following, of what the container wrote since the cursor: the lines a follower stopped
        while its replica still ran had not read yet (a follow opened a moment before the job ended). Best effort:
        only once the follow's thread has ended (one cursor, one reader), and a read that fails decides nothing."""
        if self.alive:
            return
        try:
            self._follow_once(follow=False)
        except Exception as error:
            self._log.debug("could not read the last lines of %s/%s: %s", self.namespace, self.pod,
                            short_error(error))
        finally:
            self.cursor.reconnecting()

    def _follow_once(self, follow: bool = True) -> None:
        query = [("container", self.container), *([("follow", "true")] if follow else []), ("timestamps", "true")]
        since = self.cursor.since_time()
        if since is not None:
            query.append(("sinceTime", since))
        # The generated client has no sinceTime argument: the same endpoint through the client's call_api.
        response = self.hook.api_client.call_api(
            "/api/v1/namespaces/{namespace}/pods/{name}/log",
            "GET",
            path_params={"namespace": self.namespace, "name": self.pod},
            query_params=query,
            header_params={"Accept": LOG_ACCEPT},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=(10.0, self.read_timeout),
        )
        self._response = response
        try:
            for raw in iter_resp_lines(response):
                if follow and self._stop.is_set():
                    return
                text = self.cursor.accept(raw)
                if text is not None:
                    self.tail.append(text)
                    self._emit(self.pod, text)
        finally:
            self._response = None
            response.close()
            response.release_conn()


class LogFollowers:
    """The followers of one job: started as each followed replica's container starts, stopped at the end."""

    def __init__(
        self,
        hook: KubeApiHook,
        namespace: str,
        names: Sequence[str],
        emit: Callable[[str, str], None] | None,
        tracker: JobTracker,
        log: TaskLog | None = None,
        cursors: dict[str, tuple[str, LogCursor]] | None = None,
    ) -> None:
        """:param cursors: replica -> (its pod's uid, the log cursor), kept by the caller across the waits of one
            try (an elastic job waits again after recreating a pod): a pod followed before goes on where it was,
            so no line is emitted twice; a recreated pod (another uid) is followed from its start."""
        self.hook, self.namespace, self.tracker, self.log = hook, namespace, tracker, log
        self.names = list(names) if emit is not None else []
        self.emit = emit
        self.followers: dict[str, PodLogFollower] = {}
        self.cursors = cursors if cursors is not None else {}

    def start_ready(self) -> None:
        for name in self.names:
            pod = self.tracker.pod(name)
            if name not in self.followers and log_available(pod):
                self.followers[name] = self._follower(name, pod).start()

    def _follower(self, name: str, pod: Mapping[str, Any] | None) -> PodLogFollower:
        uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
        kept = self.cursors.get(name)
        cursor = kept[1] if kept is not None and kept[0] == uid else LogCursor()
        self.cursors[name] = (uid, cursor)
        return PodLogFollower(self.hook, self.namespace, name, self.emit,  # type: ignore[arg-type]
                              finished=functools.partial(self._finished, name), log=self.log, cursor=cursor)

    def _finished(self, name: str) -> bool:
        pod = self.tracker.pod(name)
        return pod is None or container_state(pod, MAIN_CONTAINER)[0] == ContainerState.TERMINATED

    def finish(self, drain_seconds: float = 5.0) -> None:
        """Let followers of ended containers read to the end (briefly); stop the others, then read once what those
        wrote that their follow had not read yet (a worker still running when the master ended has printed lines
        its follower, opened a moment before, may not have had), and the log of a replica never seen started."""
        running = []
        for name, follower in self.followers.items():
            if self._finished(name):
                follower.join(drain_seconds)
            else:
                running.append(follower)
            follower.stop()
        for follower in running:
            follower.join(STOP_JOIN)
            follower.catch_up()
        # A pod the watch last saw pending may have run all the same: a real kubelet reports a container's start a
        # moment late, and a short replica can end before the report. Its log is read once (one that never started
        # answers 400, which decides nothing).
        for name in self.names:
            pod = self.tracker.pod(name)
            if name not in self.followers and pod is not None:
                self.followers[name] = follower = self._follower(name, pod)
                follower.catch_up()

    def tails(self) -> Mapping[str, list[str]]:
        return {name: list(follower.tail) for name, follower in self.followers.items()}


#: Picks the master among a job's pods: ``(its pod, the container whose log is the master's)``, or ``None``.
PickMaster = Callable[[Sequence[Mapping[str, Any]]], "tuple[Mapping[str, Any], str] | None"]


class MasterFollower:
    """Follows the master of a job whose pods a controller makes (a Kubeflow job's, a TrainJob's) into
    ``emit(pod, line)``, for a wait that watches the job object, not its pods.

    The wait hands it the pods its LISTs read (``on_pods``: those it makes anyway while replicas start, and the
    hang watchdog's); once the master's container has started it is followed from a thread (``PodLogFollower``:
    reconnects with ``sinceTime``, each line once) until it ends or the pod goes. While there is nothing to follow
    and the wait lists nothing, ``due`` asks for a LIST of its own every ``interval`` seconds (``look``), never
    while the job is suspended: a master pod replaced by its controller (another uid) is followed from its start, a
    container restarted in its pod goes on where its cursor was. A look or read that fails is tried again: it
    decides nothing about the job.

    :param pick: finds the master among pods (``PickMaster``).
    :param interval: seconds between two looks of its own (the wait's ``pending_pods_interval``).
    """

    def __init__(
        self,
        hook: KubeApiHook,
        namespace: str,
        pick: PickMaster,
        emit: Callable[[str, str], None],
        *,
        interval: float,
        clock: Callable[[], float],
        log: TaskLog | None = None,
        read_timeout: float = FOLLOW_READ_TIMEOUT,
        cursors: dict[str, LogCursor] | None = None,
    ) -> None:
        """:param cursors: each master pod's cursor by uid, kept by the caller (its first line and first progress
            record are startup phases, ``jobstate.startup``)."""
        self.hook, self.namespace, self.interval, self.read_timeout = hook, namespace, interval, read_timeout
        self._pick, self._emit, self._clock = pick, emit, clock
        self._log = log or logging.getLogger(__name__)
        #: each master pod's cursor, by uid
        self.cursors: dict[str, LogCursor] = cursors if cursors is not None else {}
        #: (uid, restart count) of the containers followed (a look finding one again leaves it)
        self._followed: set[tuple[str, int]] = set()
        self.current: PodLogFollower | None = None
        self._next_look = clock() + interval

    @property
    def following(self) -> bool:
        return self.current is not None and self.current.alive

    def due(self) -> bool:
        """Whether a look of its own is due (the caller knows the job is not suspended and lists nothing else)."""
        return not self.following and self._clock() >= self._next_look

    def seconds_to_look(self) -> float:
        return math.inf if self.following else max(0.0, self._next_look - self._clock())

    def look(self, list_pods: Callable[[], Sequence[Mapping[str, Any]]]) -> None:
        """A look of its own: ``list_pods()`` (one bounded LIST); a failure is logged at debug level, and the next
        look is ``interval`` later."""
        self._next_look = self._clock() + self.interval
        try:
            pods = list_pods()
        except Exception as error:
            self._log.debug("could not look for the master's pod in %s: %s", self.namespace, short_error(error))
            return
        self.on_pods(pods)

    def on_pods(self, pods: Sequence[Mapping[str, Any]], *, ended_only: bool = False) -> None:
        """Pods as a LIST read them: follow the master's container if it has started and is not followed yet.

        :param ended_only: follow only a container that has ended (the job is over: a running one would hold the
            end of the wait)."""
        self._next_look = self._clock() + self.interval
        try:
            found = self._pick(pods)
        except Exception as error:  # pods of an unexpected shape: nothing to follow, and the wait goes on
            self._log.debug("could not find the master among the pods of %s: %s", self.namespace, error)
            return
        if found is None or self.following:
            return
        pod, container = found
        ended = container_state(pod, container)[0] == ContainerState.TERMINATED
        if not log_available(pod, container) or (ended_only and not ended):
            return
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        key = (uid, int((container_status(pod, container) or {}).get("restartCount") or 0))
        if key in self._followed:
            return
        self._followed.add(key)
        self.current = PodLogFollower(self.hook, self.namespace, meta["name"], self._emit, log=self._log,
                                      finished=functools.partial(self._ended, meta["name"], container),
                                      container=container, read_timeout=self.read_timeout,
                                      cursor=self.cursors.setdefault(uid, LogCursor())).start()

    def finish(self, list_pods: Callable[[], Sequence[Mapping[str, Any]]], drain_seconds: float = 5.0) -> None:
        """The wait is over: a master that ended is read to its end (one never followed is looked for once, so
        that a short job's lines are shown too), for at most ``drain_seconds``; a master still running is left."""
        if not self._followed:
            try:
                self.on_pods(list_pods(), ended_only=True)
            except Exception as error:
                self._log.debug("could not look for the master's pod in %s: %s", self.namespace, short_error(error))
        current = self.current
        if current is None:
            return
        if self._ended_quietly(current.pod, current.container):
            current.join(drain_seconds)
        current.stop()

    def stop(self) -> None:
        """Stop following at once (the wait failed: no read is made to drain)."""
        if self.current is not None:
            self.current.stop()

    def _ended(self, pod: str, container: str) -> bool:
        """Whether the container has ended: one read of its pod (a 404, the pod gone, ends the follow)."""
        read = self.hook.core_v1_client.read_namespaced_pod(pod, self.namespace, _preload_content=False,
                                                            _request_timeout=LOCATE_TIMEOUT)
        return container_state(self.hook._json(read), container)[0] == ContainerState.TERMINATED

    def _ended_quietly(self, pod: str, container: str) -> bool:
        try:
            return self._ended(pod, container)
        except Exception:
            return False
