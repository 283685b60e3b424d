"""Store notifications: a transaction's notifications reach listeners once it
commits, never when it rolls back; on PostgreSQL they cross processes on a connection of
their own, which is opened again when it drops."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from responsekit.store import Store
from responsekit.store.postgres import LISTENER_NAME

from .conftest import DATABASES


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_notifications_follow_commits(database_url):
    async def main() -> None:
        store = await Store.open(database_url)
        heard: asyncio.Queue[str | None] = asyncio.Queue()
        await store.database.listen("test_channel", heard.put_nowait)
        try:
            with pytest.raises(RuntimeError):
                async with store.database.transaction() as db:
                    await db.notify("test_channel", "rolled back")
                    raise RuntimeError
            async with store.database.transaction() as db:
                await db.notify("test_channel", "committed")
            await store.database.notify("test_channel", "on its own")
            assert [await asyncio.wait_for(heard.get(), 5) for _ in range(2)] == ["committed", "on its own"]
            assert heard.empty()
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("database_url", [d for d in DATABASES if d == "postgres"], indirect=True)
def test_a_dropped_listening_connection_is_opened_again(database_url):
    async def main() -> None:
        listener, notifier = await Store.open(database_url), await Store.open(database_url)
        heard: asyncio.Queue[str | None] = asyncio.Queue()
        await listener.database.listen("test_channel", heard.put_nowait)
        admin = await asyncpg.connect(database_url)
        try:
            await notifier.database.notify("test_channel", "before")
            assert await asyncio.wait_for(heard.get(), 5) == "before"
            killed = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = $1 AND datname = current_database()", LISTENER_NAME,
            )  # fmt: skip
            assert killed == 2  # one listening connection per store
            # Once it listens again, the listeners are told they may have missed notifications.
            assert await asyncio.wait_for(heard.get(), 10) is None
            await notifier.database.notify("test_channel", "after")
            assert await asyncio.wait_for(heard.get(), 5) == "after"
        finally:
            await admin.close()
            await listener.close()
            await notifier.close()

    asyncio.run(main())
