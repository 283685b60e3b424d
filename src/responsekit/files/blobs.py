"""Where the bytes of uploaded files live: a directory, or PostgreSQL large objects.

The metadata row keeps the blob's reference (a file name, or a large object's oid), so a
store can change where new uploads go without losing the old ones. Large objects are what
PostgreSQL replicas share without a shared filesystem.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

from ..store.database import Database

PIECE = 1 << 20


class Blobs(Protocol):
    async def write(self, name: str, pieces: AsyncIterator[bytes]) -> str:
        """Store the bytes; returns the reference to keep."""
        ...

    def read(self, reference: str) -> AsyncIterator[bytes]: ...

    async def delete(self, reference: str) -> None: ...


class DirectoryBlobs:
    """One file per upload in a directory (the data dir's `files/` by default)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def write(self, name: str, pieces: AsyncIterator[bytes]) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.root / f"{name}.partial"
        try:
            with partial.open("wb") as out:
                async for piece in pieces:
                    await asyncio.to_thread(out.write, piece)
            # A crash mid-upload leaves a `.partial`, never a truncated file under the real name.
            os.replace(partial, self.root / name)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return name

    async def read(self, reference: str) -> AsyncIterator[bytes]:
        with (self.root / reference).open("rb") as source:
            while piece := await asyncio.to_thread(source.read, PIECE):
                yield piece

    async def delete(self, reference: str) -> None:
        (self.root / reference).unlink(missing_ok=True)


class LargeObjectBlobs:
    """PostgreSQL large objects, written piece by piece in one transaction."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def write(self, name: str, pieces: AsyncIterator[bytes]) -> str:
        async with self.database.transaction() as db:
            row = await db.fetchrow("SELECT lo_create(0)")
            assert row is not None
            oid = int(row[0])
            offset = 0
            async for piece in pieces:
                await db.execute("SELECT lo_put(?::oid, ?::bigint, ?::bytea)", oid, offset, piece)
                offset += len(piece)
        return str(oid)

    async def read(self, reference: str) -> AsyncIterator[bytes]:
        offset = 0
        while True:
            row = await self.database.fetchrow(
                "SELECT lo_get(?::oid, ?::bigint, ?::integer)", int(reference), offset, PIECE
            )
            piece = bytes(row[0]) if row and row[0] is not None else b""
            if not piece:
                return
            yield piece
            offset += len(piece)

    async def delete(self, reference: str) -> None:
        await self.database.execute("SELECT lo_unlink(?::oid)", int(reference))
