"""The replicas' last lines, kept where Airflow's log permission guards them: one closing block in the task log when
a job ends, and how the job view reads it (or, while a job runs, the lines the task relays) back from that log (pure).

A replica's output holds what logs hold (paths, hostnames, data samples, now and then a token a script printed).
Airflow authorizes reading a task's XComs and its logs apart, so no XCom carries a replica's line: the task log
does, and the job view reads it through Airflow's log reader for a viewer the auth manager lets read that task's logs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from airflow_distributed.replica.live_report import is_record
from airflow_distributed.strict_json import safe_text

#: Bounds of the closing block (and of what the job view shows), whatever the job printed.
LOG_LINES = 30
LOG_REPLICAS = 64
LINE_CHARS = 500

#: The block's first line starts so, with the job's name; what follows says what the block holds.
HEADING = "last lines of each replica of {job}"
_REPLICA, _LINE, _SILENT = "  ", "    ", " (no output)"


def kept_lines(lines: Iterable[str]) -> list[str]:
    """A replica's last ``LOG_LINES`` lines as the block keeps them: the master's live records (for the running
    job's view, not its last words) left out, each line cut to ``LINE_CHARS`` and made safe to store."""
    return [safe_text(line[:LINE_CHARS]) for line in lines if not is_record(line)][-LOG_LINES:]


def last_lines_block(job: str, logs: Mapping[str, Sequence[str]]) -> str | None:
    """The task log's closing block: each replica's name, then its last lines indented; ``None`` when no replica's
    lines were gathered."""
    if not logs:
        return None
    parts = [f"{HEADING.format(job=job)} (at most {LOG_LINES} each):"]
    for name, lines in list(logs.items())[:LOG_REPLICAS]:
        kept = kept_lines(lines)
        parts.append(f"{_REPLICA}{name}:{'' if kept else _SILENT}")
        # A line is one line here even if it held a carriage return: the block is read back line by line.
        parts.extend(_LINE + line.replace("\r", "") for line in kept)
    return "\n".join(parts)


def read_block(job: str, text: str) -> dict[str, list[str]] | None:
    """The replicas' lines of one closing block of ``job`` (``last_lines_block``'s text), or ``None`` when ``text``
    is not one."""
    heading, *rest = text.split("\n")
    if not heading.startswith(HEADING.format(job=job) + " ("):
        return None
    logs: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in rest:
        if line.startswith(_LINE) and current is not None:
            current.append(line[len(_LINE):])
        elif line.startswith(_REPLICA) and line.endswith((":", ":" + _SILENT)):
            current = logs.setdefault(line[len(_REPLICA):].removesuffix(_SILENT).removesuffix(":"), [])
    return logs


def lines_from_task_log(job: str, replicas: Sequence[str], messages: Iterable[str]) -> dict[str, list[str]] | None:
    """Each replica's last lines from a task log's messages, in order: the last closing block of ``job`` when the
    log has one, else (a job still running) the lines the task relayed as ``[<replica>] <line>``, the last
    ``LOG_LINES`` of each of ``replicas``; ``None`` when the log has neither."""
    block: dict[str, list[str]] | None = None
    relayed: dict[str, deque[str]] = {name: deque(maxlen=LOG_LINES) for name in replicas}
    prefixes = {f"[{name}] ": name for name in replicas}
    for message in messages:
        if message.startswith("["):
            name = prefixes.get(message[:message.find("] ") + 2]) if "] " in message else None
            if name is not None:
                relayed[name].append(message[len(name) + 3:])
                continue
        found = read_block(job, message) if message.startswith(HEADING[:10]) else None
        if found is not None:
            block = found
    if block is not None:
        return block
    if not any(relayed.values()):
        return None
    return {name: kept_lines(lines) for name, lines in relayed.items()}


__all__ = ["HEADING", "LINE_CHARS", "LOG_LINES", "LOG_REPLICAS", "kept_lines", "last_lines_block",
           "lines_from_task_log", "read_block"]
