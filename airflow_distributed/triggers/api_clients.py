"""One async API client per connection and event loop, shared by every trigger of a triggerer process.

A triggerer holds hundreds of deferred jobs. A client per trigger costs an aiohttp session, a connector and an
SSL context each (with no CA in the kubeconfig, the context holds the system's CA bundle: about 0.85 MB), and the
kubeconfig parsed again; one client per connection costs that once. The connections themselves are one per open
watch (a watch holds its connection for as long as it lasts), and the triggers of a namespace share one watch per
kind (``shared_watch``).

A client is keyed by the event loop and the connection's identity (connection id and whatever else configures
the hook), and counted: the first trigger to need it opens it through the cncf ``AsyncKubernetesHook.get_conn``,
the last to let go closes it. A client is never used on another loop than its own, so a new loop (a test, ``airflow
dags test``, a triggerer restarted in the same interpreter) opens its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import Configuration


@dataclass
class _Shared:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    client: Any = None
    users: int = 0


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Shared]] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def shared_client(key: str, open_client: Callable[[], contextlib.AbstractAsyncContextManager[Any]]
                        ) -> AsyncIterator[Any]:
    """The client of ``key`` on the running loop, opened with ``open_client()`` if no trigger holds it yet.

    :param key: the connection's identity: two triggers with the same key talk to the same cluster the same way.
    :param open_client: an async context manager giving an ``ApiClient`` (the cncf hook's ``get_conn()``).
    """
    clients = _CLIENTS.setdefault(asyncio.get_running_loop(), {})
    shared = clients.get(key)
    if shared is None:
        shared = clients[key] = _Shared()
    shared.users += 1
    try:
        async with shared.lock:
            if shared.client is None:
                shared.client = await shared.stack.enter_async_context(open_client())
        yield shared.client
    finally:
        shared.users -= 1
        if shared.users == 0 and clients.get(key) is shared:
            # Out of the table first: a trigger arriving while this one closes opens a client of its own.
            del clients[key]
            await shared.stack.aclose()


def client_configuration() -> Any:
    """A configuration for a shared client: no limit on its connections (aiohttp's default of 100 would keep the
    101st watch of a shared client waiting for a free one); the hook loads the kubeconfig into it."""
    configuration = Configuration()
    configuration.connection_pool_maxsize = None  # type: ignore[assignment]  # documented: None is no limit
    return configuration


def open_clients() -> int:
    """Clients open on the running loop (for tests and benchmarks)."""
    return sum(1 for shared in _CLIENTS.get(asyncio.get_running_loop(), {}).values() if shared.client is not None)


__all__ = ["client_configuration", "open_clients", "shared_client"]
