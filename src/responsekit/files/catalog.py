"""The SQL of files, vector stores, their files and batches, written once for SQLite and PostgreSQL.

Rows here are the truth about status: a vector store file's chunks count in search only while
its row is `completed` with the same ingestion `token` the chunks carry, so a crash between the
index and this table, or a stale worker, can never surface half-ingested or replaced chunks.
File counts are computed from the rows, so they cannot drift.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from ..store import Page
from ..store.database import Database, Row

Order = Literal["asc", "desc"]
STATUSES = ("in_progress", "completed", "failed", "cancelled")
_FILE = "id, created_ms, filename, purpose, bytes, expires_at, blob"
_STORE = "id, created_ms, name, metadata, expires_after_days, last_active_at"
_VS_FILE = ("vector_store_id, file_id, created_ms, status, last_error, attributes, max_chunk_size_tokens, "
            "chunk_overlap_tokens, usage_bytes, batch_id, token")  # fmt: skip


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class StoredFile:
    id: str
    created_ms: int
    filename: str
    purpose: str
    bytes: int
    expires_at: int | None
    blob: str

    def body(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": self.created_ms // 1000,
                "expires_at": self.expires_at, "filename": self.filename, "purpose": self.purpose,
                "status": "processed", "status_details": None}  # fmt: skip


@dataclass(slots=True)
class Ingestion:
    """What a worker needs to ingest one vector store file."""

    vector_store_id: str
    file_id: str
    token: str
    max_chunk_size_tokens: int
    chunk_overlap_tokens: int
    filename: str
    blob: str


@dataclass(slots=True)
class Searchable:
    """A completed vector store file, as search results show it."""

    token: str
    filename: str
    attributes: dict[str, Any]


class Catalog:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._for_update = " FOR UPDATE" if database.dialect == "postgres" else ""

    # --- files ---------------------------------------------------------------------------

    async def add_file(self, owner: str, file: StoredFile) -> None:
        await self.database.execute(
            f"INSERT INTO files (owner, {_FILE}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            owner, file.id, file.created_ms, file.filename, file.purpose, file.bytes, file.expires_at, file.blob,
        )  # fmt: skip

    async def get_file(self, owner: str, file_id: str) -> StoredFile | None:
        row = await self.database.fetchrow(
            f"SELECT {_FILE} FROM files WHERE id = ? AND owner = ? AND (expires_at IS NULL OR expires_at > ?)",
            file_id, owner, int(time.time()),
        )  # fmt: skip
        return _file(row) if row else None

    async def missing_files(self, owner: str, file_ids: list[str]) -> list[str]:
        found = set()
        for file_id in dict.fromkeys(file_ids):
            if await self.get_file(owner, file_id) is not None:
                found.add(file_id)
        return [file_id for file_id in file_ids if file_id not in found]

    async def list_files(
        self, owner: str, purpose: str | None, after: str | None, limit: int, order: Order, before: str | None = None
    ) -> tuple[list[StoredFile], bool] | None:
        """A page of the owner's files, and whether more follow it (precede it, with `before`);
        None for a cursor that names none of them."""
        where, args = "owner = ? AND (expires_at IS NULL OR expires_at > ?)", [owner, int(time.time())]
        if purpose is not None:
            where, args = where + " AND purpose = ?", [*args, purpose]
        rows = await self._page("files", _FILE, where, args, after, limit, order, before)
        return None if rows is None else ([_file(row) for row in rows[:limit]], len(rows) > limit)

    async def delete_file(self, owner: str, file_id: str) -> tuple[StoredFile, list[str]] | None:
        """Deletes the row (and, by cascade, its vector store files); returns it and the stores it was in."""
        async with self.database.transaction() as db:
            row = await db.fetchrow(f"SELECT {_FILE} FROM files WHERE id = ? AND owner = ?{self._for_update}",
                                    file_id, owner)  # fmt: skip
            if row is None:
                return None
            stores = [r[0] for r in await db.fetch(
                "SELECT vector_store_id FROM vector_store_files WHERE file_id = ?", file_id)]  # fmt: skip
            await db.execute("DELETE FROM vector_store_files WHERE file_id = ?", file_id)
            await db.execute("DELETE FROM files WHERE id = ?", file_id)
        return _file(row), stores

    async def expired_files(self, now: int) -> list[tuple[str, str]]:
        rows = await self.database.fetch("SELECT owner, id FROM files WHERE expires_at <= ?", now)
        return [(row[0], row[1]) for row in rows]

    # --- vector stores -------------------------------------------------------------------

    async def add_store(self, owner: str, store: dict[str, Any]) -> None:
        await self.database.execute(
            f"INSERT INTO vector_stores (owner, {_STORE}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            owner, store["id"], store["created_ms"], store["name"], json.dumps(store["metadata"]),
            store["expires_after_days"], store["last_active_at"],
        )  # fmt: skip

    async def get_store(self, owner: str, store_id: str) -> dict[str, Any] | None:
        row = await self.database.fetchrow(f"SELECT {_STORE} FROM vector_stores WHERE id = ? AND owner = ?",
                                           store_id, owner)  # fmt: skip
        return None if row is None else await self._store_body(row)

    async def list_stores(self, owner: str, after: str | None, before: str | None, limit: int, order: Order) -> Page | None:
        rows = await self._page("vector_stores", _STORE, "owner = ?", [owner], after, limit, order, before)
        if rows is None:
            return None
        return Page([await self._store_body(row) for row in rows[:limit]], len(rows) > limit)

    async def update_store(self, owner: str, store_id: str, changes: dict[str, Any]) -> None:
        columns = {"name": "name", "metadata": "metadata", "expires_after_days": "expires_after_days"}
        sets = [(columns[key], json.dumps(value) if key == "metadata" else value) for key, value in changes.items()]
        if sets:
            assignments = ", ".join(f"{column} = ?" for column, _ in sets)
            await self.database.execute(f"UPDATE vector_stores SET {assignments} WHERE id = ? AND owner = ?",
                                        *[value for _, value in sets], store_id, owner)  # fmt: skip

    async def touch_store(self, store_ids: list[str]) -> None:
        """Searches and new files keep a store active (its expiry counts from `last_active_at`)."""
        for store_id in store_ids:
            await self.database.execute("UPDATE vector_stores SET last_active_at = ? WHERE id = ?",
                                        int(time.time()), store_id)  # fmt: skip

    async def delete_store(self, owner: str, store_id: str) -> bool:
        async with self.database.transaction() as db:
            row = await db.fetchrow("SELECT id FROM vector_stores WHERE id = ? AND owner = ?", store_id, owner)
            if row is None:
                return False
            await db.execute("DELETE FROM vector_store_files WHERE vector_store_id = ?", store_id)
            await db.execute("DELETE FROM vector_store_file_batches WHERE vector_store_id = ?", store_id)
            await db.execute("DELETE FROM vector_stores WHERE id = ?", store_id)
        return True

    async def _store_body(self, row: Row) -> dict[str, Any]:
        counts = await self._counts("vector_store_id = ?", row[0])
        usage = await self.database.fetchrow(
            "SELECT COALESCE(SUM(usage_bytes), 0) FROM vector_store_files WHERE vector_store_id = ? AND status = ?",
            row[0], "completed",
        )  # fmt: skip
        days, last_active = row[4], int(row[5])
        expires_at = last_active + days * 86400 if days is not None else None
        if expires_at is not None and expires_at <= time.time():
            status = "expired"
        else:
            status = "in_progress" if counts["in_progress"] else "completed"
        return {"id": row[0], "object": "vector_store", "created_at": int(row[1]) // 1000, "name": row[2],
                "usage_bytes": int(usage[0]) if usage else 0, "file_counts": counts, "status": status,
                "expires_after": {"anchor": "last_active_at", "days": days} if days is not None else None,
                "expires_at": expires_at, "last_active_at": last_active,
                "metadata": json.loads(row[3])}  # fmt: skip

    async def _counts(self, where: str, *args: Any) -> dict[str, int]:
        rows = await self.database.fetch(
            f"SELECT status, COUNT(*) FROM vector_store_files WHERE {where} GROUP BY status", *args
        )
        counts = {status: 0 for status in STATUSES}
        counts.update({row[0]: int(row[1]) for row in rows})
        return {**counts, "total": sum(counts.values())}

    # --- vector store files --------------------------------------------------------------

    async def attach(
        self, store_id: str, files: list[tuple[str, dict[str, Any], tuple[int, int], str]], batch_id: str | None,
        lease_until: int,
    ) -> None:
        """(file id, attributes, chunking, token) into a store, `in_progress`; a file already there starts over."""
        created = now_ms()
        async with self.database.transaction() as db:
            if batch_id is not None:
                await db.execute("INSERT INTO vector_store_file_batches (id, vector_store_id, created_ms) "
                                 "VALUES (?, ?, ?)", batch_id, store_id, created)  # fmt: skip
            for position, (file_id, attributes, (size, overlap), token) in enumerate(files):
                await db.execute("DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?",
                                 store_id, file_id)  # fmt: skip
                await db.execute(
                    f"INSERT INTO vector_store_files ({_VS_FILE}, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    store_id, file_id, created + position, "in_progress", None, json.dumps(attributes), size, overlap,
                    0, batch_id, token, lease_until,
                )  # fmt: skip

    async def get_store_file(self, store_id: str, file_id: str) -> dict[str, Any] | None:
        row = await self.database.fetchrow(
            f"SELECT {_VS_FILE} FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?", store_id, file_id
        )
        return None if row is None else _store_file(row)

    async def list_store_files(
        self, store_id: str, batch_id: str | None, status: str | None, after: str | None, before: str | None,
        limit: int, order: Order,
    ) -> Page | None:
        where, args = "vector_store_id = ?", [store_id]
        if batch_id is not None:
            where, args = where + " AND batch_id = ?", [*args, batch_id]
        if status is not None:
            where, args = where + " AND status = ?", [*args, status]
        rows = await self._page("vector_store_files", _VS_FILE, where, args, after, limit, order, before, key="file_id")
        return None if rows is None else Page([_store_file(row) for row in rows[:limit]], len(rows) > limit)

    async def set_attributes(self, store_id: str, file_id: str, attributes: dict[str, Any]) -> None:
        await self.database.execute(
            "UPDATE vector_store_files SET attributes = ? WHERE vector_store_id = ? AND file_id = ?",
            json.dumps(attributes), store_id, file_id,
        )  # fmt: skip

    async def detach(self, store_id: str, file_id: str) -> bool:
        async with self.database.transaction() as db:
            row = await db.fetchrow("SELECT file_id FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?",
                                    store_id, file_id)  # fmt: skip
            if row is None:
                return False
            await db.execute("DELETE FROM vector_store_files WHERE vector_store_id = ? AND file_id = ?",
                             store_id, file_id)  # fmt: skip
        return True

    async def searchable(self, store_ids: list[str]) -> dict[tuple[str, str], Searchable]:
        marks = ", ".join("?" for _ in store_ids)
        rows = await self.database.fetch(
            "SELECT vsf.vector_store_id, vsf.file_id, vsf.token, f.filename, vsf.attributes "
            "FROM vector_store_files vsf JOIN files f ON f.id = vsf.file_id "
            f"WHERE vsf.vector_store_id IN ({marks}) AND vsf.status = ?",
            *store_ids, "completed",
        )  # fmt: skip
        return {(row[0], row[1]): Searchable(row[2], row[3], json.loads(row[4])) for row in rows}

    # --- ingestion -----------------------------------------------------------------------

    async def claim(self, store_id: str, file_id: str, token: str, now: int, lease_until: int) -> Ingestion | None:
        """Take over an `in_progress` file whose lease lapsed (its worker died); None if another did."""
        async with self.database.transaction() as db:
            row = await db.fetchrow(
                "SELECT lease_until FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? AND status = ?"
                f"{self._for_update}", store_id, file_id, "in_progress",
            )  # fmt: skip
            if row is None or (row[0] is not None and int(row[0]) >= now):
                return None
            await db.execute(
                "UPDATE vector_store_files SET token = ?, lease_until = ? WHERE vector_store_id = ? AND file_id = ?",
                token, lease_until, store_id, file_id,
            )  # fmt: skip
        return await self.ingestion(store_id, file_id, token)

    async def ingestion(self, store_id: str, file_id: str, token: str) -> Ingestion | None:
        row = await self.database.fetchrow(
            "SELECT vsf.max_chunk_size_tokens, vsf.chunk_overlap_tokens, f.filename, f.blob "
            "FROM vector_store_files vsf JOIN files f ON f.id = vsf.file_id "
            "WHERE vsf.vector_store_id = ? AND vsf.file_id = ? AND vsf.token = ? AND vsf.status = ?",
            store_id, file_id, token, "in_progress",
        )  # fmt: skip
        return None if row is None else Ingestion(store_id, file_id, token, int(row[0]), int(row[1]), row[2], row[3])

    async def lapsed(self, now: int) -> list[tuple[str, str]]:
        rows = await self.database.fetch(
            "SELECT vector_store_id, file_id FROM vector_store_files WHERE status = ? AND lease_until < ?",
            "in_progress", now,
        )  # fmt: skip
        return [(row[0], row[1]) for row in rows]

    async def renew(self, store_id: str, file_id: str, token: str, lease_until: int) -> None:
        await self.database.execute(
            "UPDATE vector_store_files SET lease_until = ? WHERE vector_store_id = ? AND file_id = ? AND token = ?",
            lease_until, store_id, file_id, token,
        )  # fmt: skip

    async def finish(
        self, store_id: str, file_id: str, token: str, status: str, usage_bytes: int = 0,
        error: dict[str, str] | None = None,
    ) -> bool:
        """The end of one ingestion; False when the file was removed, cancelled or taken over meanwhile."""
        async with self.database.transaction() as db:
            row = await db.fetchrow(
                "SELECT status FROM vector_store_files WHERE vector_store_id = ? AND file_id = ? AND token = ?"
                f"{self._for_update}", store_id, file_id, token,
            )  # fmt: skip
            if row is None or row[0] != "in_progress":
                return False
            await db.execute(
                "UPDATE vector_store_files SET status = ?, usage_bytes = ?, last_error = ?, lease_until = NULL "
                "WHERE vector_store_id = ? AND file_id = ?",
                status, usage_bytes, json.dumps(error) if error else None, store_id, file_id,
            )  # fmt: skip
        return True

    # --- file batches --------------------------------------------------------------------

    async def get_batch(self, store_id: str, batch_id: str) -> dict[str, Any] | None:
        row = await self.database.fetchrow(
            "SELECT id, created_ms, cancelled FROM vector_store_file_batches WHERE id = ? AND vector_store_id = ?",
            batch_id, store_id,
        )  # fmt: skip
        if row is None:
            return None
        counts = await self._counts("batch_id = ?", batch_id)
        if row[2]:
            status = "cancelled"
        elif counts["in_progress"]:
            status = "in_progress"
        else:
            status = "failed" if counts["total"] and counts["failed"] == counts["total"] else "completed"
        return {"id": row[0], "object": "vector_store.files_batch", "created_at": int(row[1]) // 1000,
                "vector_store_id": store_id, "status": status, "file_counts": counts}  # fmt: skip

    async def cancel_batch(self, batch_id: str) -> None:
        """The batch's files not ingested yet become `cancelled` (their workers then find nothing to finish)."""
        async with self.database.transaction() as db:
            await db.execute("UPDATE vector_store_file_batches SET cancelled = TRUE WHERE id = ?", batch_id)
            await db.execute(
                "UPDATE vector_store_files SET status = ?, lease_until = NULL WHERE batch_id = ? AND status = ?",
                "cancelled", batch_id, "in_progress",
            )  # fmt: skip

    # --- pages ---------------------------------------------------------------------------

    async def _page(
        self, table: str, columns: str, where: str, args: list[Any], after: str | None, limit: int, order: Order,
        before: str | None = None, key: str = "id",
    ) -> list[Row] | None:
        """Up to limit+1 rows in (created_ms, key) order after/before a cursor; None for an unknown cursor.

        With `before`, the rows are the `limit` just before the cursor (the previous page), still in `order`.
        """
        for cursor, later in ((after, order == "asc"), (before, order == "desc")):
            if cursor is None:
                continue
            row = await self.database.fetchrow(f"SELECT created_ms FROM {table} WHERE {where} AND {key} = ?",
                                               *args, cursor)  # fmt: skip
            if row is None:
                return None
            where = f"{where} AND (created_ms, {key}) {'>' if later else '<'} (?, ?)"
            args = [*args, int(row[0]), cursor]
        backwards = before is not None and after is None
        direction = "ASC" if (order == "asc") != backwards else "DESC"
        rows = await self.database.fetch(
            f"SELECT {columns} FROM {table} WHERE {where} ORDER BY created_ms {direction}, {key} {direction} LIMIT ?",
            *args, limit + 1,
        )  # fmt: skip
        if backwards:
            rows = rows[:limit][::-1] + rows[limit:]
        return rows


def _file(row: Row) -> StoredFile:
    return StoredFile(row[0], int(row[1]), row[2], row[3], int(row[4]), None if row[5] is None else int(row[5]), row[6])


def _store_file(row: Row) -> dict[str, Any]:
    return {"id": row[1], "object": "vector_store.file", "vector_store_id": row[0], "created_at": int(row[2]) // 1000,
            "status": row[3], "last_error": json.loads(row[4]) if row[4] else None,
            "attributes": json.loads(row[5]), "usage_bytes": int(row[8]),
            "chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": int(row[6]),
                                                               "chunk_overlap_tokens": int(row[7])}}}  # fmt: skip
