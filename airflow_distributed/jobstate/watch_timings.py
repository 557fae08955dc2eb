"""How long a wait's watch requests last and how it rides out a broken connection: ``WatchTimings`` (pure).

The operator and the sensors check their ``watch_timings`` argument with it when a DAG is parsed; every waiter
(``hooks.watch_loop``'s drivers, the triggers) reads its requests' timeouts and reconnect budget from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

#: Default ``timeoutSeconds`` of a watch request (kube-apiserver's own default is 30-60 minutes).
WATCH_TIMEOUT = 300
#: Default ``finish_grace``, read when a job ends (not when the timings are made): real workers' ends reach the API
#: server 1-3 s after the master's (the kubelet's status sync).
FINISH_GRACE = 10.0


@dataclass(frozen=True)
class WatchTimings:
    """How long watch requests last and how a wait rides out a broken connection.

    :param server_timeout: ``timeoutSeconds`` of each watch request: the API server ends the watch after it
        and it is resumed from its resourceVersion (an integer >= 1).
    :param read_timeout_margin: the client's read timeout is ``server_timeout`` plus this, so that a quiet
        watch is ended by the server; a read timeout (server silent for that long) resumes the watch too.
    :param connect_timeout: seconds to open a connection.
    :param reconnect_budget: how long the API server may stay unreachable (refused, reset, connect timeouts)
        before the wait fails.
    :param reconnect_delay: first wait before reconnecting after a dropped connection; doubled after each
        drop in a row, up to ``max_reconnect_delay``.
    :param max_reconnect_delay: the longest wait between two reconnects.
    :param jitter: fraction of each reconnect wait that is random (1.0: anywhere from 0 to the full wait), so
        that a server dropping every watch at once is not hit by all of them again at the same moment.
    :param pending_pods_interval: seconds between two LISTs of a job's pods while some of its replicas have not
        started, where the watched object does not tell why (a Kubeflow job's status never shows a failed image
        pull); no such LIST is made once every replica has started.
    :param finish_grace: seconds the replicas still running when the master succeeded may take to end on their
        own before the clean-up deletes them: workers end a moment after the master (they leave the process group
        after it), and the final table then shows how they ended (``succeeded``, or ``failed`` with their exit
        code), not ``stopped``. Those still running after it are deleted and shown ``stopped``. 0: no wait;
        ``None``: ``FINISH_GRACE`` (``grace_after_success``).
    """

    server_timeout: int = WATCH_TIMEOUT
    read_timeout_margin: float = 30.0
    connect_timeout: float = 10.0
    reconnect_budget: float = 300.0
    reconnect_delay: float = 1.0
    max_reconnect_delay: float = 30.0
    jitter: float = 1.0
    pending_pods_interval: float = 10.0
    finish_grace: float | None = None

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(f"{name}: {message}" for name, message in problems))

    def problems(self) -> list[tuple[str, str]]:
        found = []
        if not isinstance(self.server_timeout, int) or isinstance(self.server_timeout, bool) or \
                self.server_timeout < 1:
            found.append(("server_timeout", f"{self.server_timeout!r} must be an integer >= 1 (seconds)"))
        for name in ("read_timeout_margin", "connect_timeout", "reconnect_delay", "max_reconnect_delay",
                     "pending_pods_interval"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                found.append((name, f"{value!r} must be a number of seconds > 0"))
        for name in ("reconnect_budget", "finish_grace"):
            value = getattr(self, name)
            if name == "finish_grace" and value is None:
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
                found.append((name, f"{value!r} must be a number of seconds >= 0"))
        if not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter <= 1:
            found.append(("jitter", f"{self.jitter!r} must be between 0 and 1"))
        return found

    @classmethod
    def of(cls, value: WatchTimings | Mapping[str, Any] | None, **overrides: Any) -> WatchTimings:
        """``value`` as timings: ``None`` -> the defaults, a mapping -> its fields (unknown keys refused).

        :raises ValueError: a key that is not a field, or a value out of range; the message names it.
        """
        if isinstance(value, WatchTimings):
            data = asdict(value)
        elif value is None:
            data = {}
        elif isinstance(value, Mapping):
            allowed = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - allowed)
            if unknown:
                raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; "
                                 f"allowed: {', '.join(sorted(allowed))}")
            data = dict(value)
        else:
            raise ValueError(f"{value!r} must be a WatchTimings, a dict of its fields, or None")
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        """What a trigger's kwargs carry."""
        return asdict(self)

    def grace_after_success(self) -> float:
        """``finish_grace``, or ``FINISH_GRACE`` as it is now when not set."""
        return FINISH_GRACE if self.finish_grace is None else float(self.finish_grace)

    def request_timeout(self, timeout_seconds: int) -> tuple[float, float]:
        """``_request_timeout`` of a watch request ``timeoutSeconds=timeout_seconds``: (connect, read).

        Both clients read a pair as connect and per-read timeouts (urllib3; aiohttp ``sock_read``), with no
        total: a watch may last as long as the server keeps it.
        """
        return (self.connect_timeout, timeout_seconds + self.read_timeout_margin)


__all__ = ["FINISH_GRACE", "WATCH_TIMEOUT", "WatchTimings"]
