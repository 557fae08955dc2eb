"""The master's new log lines and progress, relayed into a deferred task's log by its trigger.

A trigger's log records go to the task's log in Airflow 3 (the triggerer writes the records made in a trigger's
asyncio task to ``<task log>.trigger.<triggerer id>.log``, which the task's log view shows besides the worker's; in
``dag.test()`` they reach the same output). So every ``interval`` seconds the trigger reads what the master printed
since the last read and logs it as the synchronous wait does (``[pod] line``), its live records left out and the
newest one's progress logged as ``progress of <job>: ...`` when it changed.

Each line is shown once: the reads are ``timestamps=true`` from ``sinceTime`` (whole seconds), and a ``LogCursor``
drops what was shown already; the cursor rides in the trigger's event (``log_cursor``) so that the resumed task
prints only what came after it, and in the next trigger's arguments when the task defers again.

Bounded: a relay is one read of at most ``RELAY_BYTES`` (``limitBytes``), handled in pieces of ``CHUNK_BYTES`` as
they arrive (the client's flow control holds the rest in the socket); a relay that reads all of it is behind, and
goes on to the master's last ``SKIP_TAIL_LINES`` lines with a note of the gap rather than fall ever further behind;
at most ``CONCURRENT_READS`` relays of an event loop read at once. A master printing 100 MB thus costs the triggerer
a few pieces of memory, not its log. The lines are handled ``SLICE_LINES`` at a time, the loop given back between
slices; a line longer than a piece is cut to it. A relay that fails is logged at debug level and tried again at the
next interval: it decides nothing about the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_distributed.hooks.kube_api import LOG_ACCEPT
from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.outputs import sanitise_document
from airflow_distributed.replica.live_report import PREFIX, latest_record
from airflow_distributed.status import progress_text

#: The pieces a read of the master's log is handled in (and the ``limitBytes`` of the read of its last lines).
CHUNK_BYTES = 64 * 1024
#: ``limitBytes`` of a relay's read: at most this much of the master's log is relayed at one interval; past it, the
#: relay skips to its last lines.
RELAY_BYTES = 1024 * 1024
#: The master's last lines shown after a skip.
SKIP_TAIL_LINES = 100
#: Lines handled between two yields to the event loop.
SLICE_LINES = 200
#: Relays of one event loop (a triggerer's) reading at the same time: what bounds their memory together.
CONCURRENT_READS = 4
#: Client-side time limit of one read.
READ_TIMEOUT = 30.0
#: The last relay, when the job has ended, is given this long before the event fires without it.
FINAL_RELAY_TIMEOUT = 20.0

log = logging.getLogger(__name__)

_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _reads() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    semaphore = _semaphores.get(loop)
    if semaphore is None:
        semaphore = _semaphores[loop] = asyncio.Semaphore(CONCURRENT_READS)
    return semaphore


@dataclass(frozen=True)
class MasterLog:
    """The log to relay: a pod (its uid tells a pod created again under the same name apart) and container."""

    pod: str
    uid: str
    container: str


#: Reads a pod's log: ``(master, query)`` -> its bytes as they come, in pieces of at most ``CHUNK_BYTES``.
ReadLog = Callable[[MasterLog, Sequence[tuple[str, str]]], AsyncIterator[bytes]]


class LogRelay:
    """Relays one job's master log into the trigger's log (see the module's docstring).

    :param job: the job's name, for the progress lines.
    :param interval: seconds between two relays.
    :param locate: the master's log once it can be read (its container started), else ``None``.
    :param read: one bounded read (``api_read``).
    :param emit: logs one line of the task log (the trigger's logger).
    :param cursor: ``as_dict()`` of where an earlier relay of the same try stopped (``log_cursor``).
    """

    def __init__(self, *, job: str, interval: float, locate: Callable[[], Awaitable[MasterLog | None]],
                 read: ReadLog, emit: Callable[..., Any], cursor: dict[str, Any] | None = None) -> None:
        self.job, self.interval = job, interval
        self._locate, self._read, self._emit = locate, read, emit
        state = cursor or {}
        self.uid: str | None = state.get("uid")
        self.cursor = LogCursor.from_dict(state)
        self._progress: Any = state.get("progress")
        self.lines_shown = 0
        self.bytes_read = 0

    def state(self) -> dict[str, Any] | None:
        """Where the relay is, JSON-safe, for the event and the next trigger (``None``: nothing shown yet)."""
        where = self.cursor.as_dict()
        if where is None:
            return None
        return {**where, "uid": self.uid, **({"progress": self._progress} if self._progress else {})}

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[LogRelay]:
        """Relays at every interval while the block runs; once it is done, relays what is left (time-boxed)."""
        task = asyncio.create_task(self._every_interval())  # the trigger's context: its records reach its log
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.relay_quietly(), FINAL_RELAY_TIMEOUT)

    async def _every_interval(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.relay_quietly()

    async def relay_quietly(self) -> None:
        try:
            await self.relay()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the next interval tries again; the job's verdict is not the relay's
            log.debug("relaying the master's log of %s: %s", self.job, error)

    async def relay(self) -> None:
        """Show what the master printed since the last relay: at most ``RELAY_BYTES`` of it, else its last lines."""
        master = await self._locate()
        if master is None:
            return
        if master.uid != self.uid:  # another pod (or the first): its log from its start
            self.uid, self.cursor = master.uid, LogCursor()
        async with _reads():
            if await self._read_once(master, [("limitBytes", str(RELAY_BYTES))]) < RELAY_BYTES:
                return
            # Behind by more than a relay shows: on to the master's last lines, the gap said, not ever further behind.
            self._emit("[%s] ... (more than %d KiB printed since the last relay: skipped to the last %d lines)",
                       master.pod, RELAY_BYTES // 1024, SKIP_TAIL_LINES)
            await self._read_once(master, [("tailLines", str(SKIP_TAIL_LINES)), ("limitBytes", str(CHUNK_BYTES))])

    async def _read_once(self, master: MasterLog, bounds: list[tuple[str, str]]) -> int:
        """One read from the cursor on, its lines shown as they come; returns the bytes it read."""
        query = [("container", master.container), ("timestamps", "true"), *bounds]
        since = self.cursor.since_time()
        if since is not None:
            query.append(("sinceTime", since))
        self.cursor.reconnecting()  # a read from a whole second brings that second's lines again
        records: list[str] = []
        read, rest = 0, b""
        async for piece in self._read(master, query):
            read += len(piece)
            lines = (rest + piece).split(b"\n")
            # The last piece is empty after a final newline, or a line still coming; one longer than a chunk is cut.
            rest = lines.pop()[:CHUNK_BYTES]
            for start in range(0, len(lines), SLICE_LINES):
                self._show(master, lines[start:start + SLICE_LINES], records)
                await asyncio.sleep(0)
        self.bytes_read += read
        self._show_progress(records)
        return read

    def _show(self, master: MasterLog, lines: list[bytes], records: list[str]) -> None:
        for raw in lines:
            text = self.cursor.accept(raw.decode("utf-8", "replace"))
            if text is None:
                continue
            self.lines_shown += 1
            if text.startswith(PREFIX):
                records[:] = [text]  # the newest only
            else:
                self._emit("[%s] %s", master.pod, text)

    def _show_progress(self, records: list[str]) -> None:
        record = latest_record(records[-1:])
        if record is None:
            return
        progress = sanitise_document(record).get("progress")
        if progress and progress != self._progress:
            self._progress = progress
            self._emit("progress of %s: %s", self.job, progress_text(progress))


async def api_read(api: Any, namespace: str, master: MasterLog, query: Sequence[tuple[str, str]],
                   answer: Callable[[Awaitable[Any]], Awaitable[Any]]) -> AsyncIterator[bytes]:
    """One read of ``pods/log`` through a ``kubernetes_asyncio`` client, its body in pieces of at most
    ``CHUNK_BYTES`` as they come (``answer`` raises a refusal as the client's ApiException)."""
    # The generated client has no sinceTime argument: the same endpoint through the client's call_api.
    response = await answer(api.call_api(
        "/api/v1/namespaces/{namespace}/pods/{name}/log", "GET",
        path_params={"namespace": namespace, "name": master.pod}, query_params=list(query),
        header_params={"Accept": LOG_ACCEPT}, auth_settings=["BearerToken"], _preload_content=False,
        _return_http_data_only=True, _request_timeout=READ_TIMEOUT))
    try:
        async for piece in response.content.iter_chunked(CHUNK_BYTES):
            yield piece
    finally:
        response.close()


def new_lines_after(state: dict[str, Any] | None, uid: str | None, lines: Sequence[str]) -> list[str]:
    """Of a pod's timestamped last lines, those a relay that stopped at ``state`` has not shown (all of them for
    another pod); live records left out. For the resumed task's final tail."""
    cursor = LogCursor.from_dict(state) if state and state.get("uid") == uid else LogCursor()
    shown = (cursor.accept(line) for line in lines)
    return [text for text in shown if text is not None and not text.startswith(PREFIX)]




__all__ = [
    "CHUNK_BYTES",
    "RELAY_BYTES",
    "LogRelay",
    "MasterLog",
    "api_read",
    "new_lines_after",
]
