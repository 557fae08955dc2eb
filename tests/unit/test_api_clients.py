"""``shared_client``: one client per key and event loop, opened by the first user and closed by the last."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from airflow_distributed.triggers.api_clients import open_clients, shared_client


class Opener:
    """Counts the clients it opens and closes; fails the first ``failures`` opens."""

    def __init__(self, failures: int = 0) -> None:
        self.opened, self.closed, self.failures = 0, 0, failures

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[str]:
        await asyncio.sleep(0.01)  # others arrive while this one opens
        if self.failures:
            self.failures -= 1
            raise ConnectionRefusedError("no API server")
        self.opened += 1
        try:
            yield f"client-{self.opened}"
        finally:
            self.closed += 1


async def use(key: str, opener: Opener, hold: asyncio.Event) -> str:
    async with shared_client(key, opener) as client:
        await hold.wait()
        return client


def test_users_of_one_key_share_one_client_closed_with_the_last():
    async def main() -> tuple[list[str], int, int, int]:
        opener, other, hold = Opener(), Opener(), asyncio.Event()
        users = [asyncio.create_task(use("a", opener, hold)) for _ in range(5)]
        users.append(asyncio.create_task(use("b", other, hold)))
        await asyncio.sleep(0.1)
        while_held = open_clients()
        hold.set()
        clients = await asyncio.gather(*users)
        return clients, while_held, opener.opened * 10 + opener.closed, open_clients()

    clients, while_held, counts, after = asyncio.run(main())
    assert clients == ["client-1"] * 5 + ["client-1"] and while_held == 2
    assert counts == 11 and after == 0  # opened once, closed once


def test_a_failed_open_is_told_to_its_user_and_the_next_user_opens_again():
    async def main() -> tuple[str, int]:
        opener, hold = Opener(failures=1), asyncio.Event()
        hold.set()
        with pytest.raises(ConnectionRefusedError):
            await use("a", opener, hold)
        return await use("a", opener, hold), open_clients()

    assert asyncio.run(main()) == ("client-1", 0)


def test_each_event_loop_opens_its_own_client():
    opener = Opener()

    async def main() -> str:
        hold = asyncio.Event()
        hold.set()
        return await use("a", opener, hold)

    assert [asyncio.run(main()), asyncio.run(main())] == ["client-1", "client-2"]
    assert opener.closed == 2


def test_a_user_cancelled_while_the_client_opens_leaves_nothing_open():
    async def main() -> tuple[str, int]:
        opener, hold = Opener(), asyncio.Event()
        first = asyncio.create_task(use("a", opener, hold))
        second = asyncio.create_task(use("a", opener, hold))
        await asyncio.sleep(0)
        first.cancel()
        hold.set()
        client = await second
        with contextlib.suppress(asyncio.CancelledError):
            await first
        return client, opener.opened - opener.closed

    assert asyncio.run(main()) == ("client-1", 0)
