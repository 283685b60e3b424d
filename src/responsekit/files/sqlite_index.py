"""The embedded index: sqlite-vec (vectors) and FTS5 (full text) in a SQLite file of its own.

Python's own sqlite3 on many Linux builds cannot load extensions, so on Linux this file is
opened with `pysqlite3` (pysqlite3-binary bundles a SQLite that can); elsewhere with sqlite3. It is a separate file (`<state>.vectors.db` beside the
state database) because two SQLite libraries in one process must not open the same file:
POSIX locks are per process, and one library closing its descriptor drops the other's
locks. All calls run on one dedicated thread, which owns the connection.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sqlite_vec

try:
    import pysqlite3.dbapi2 as sqlite3
except ImportError:  # No pysqlite3-binary wheel off Linux; there Python's sqlite3 can usually load extensions.
    import sqlite3  # type: ignore[no-redef]

from ..store.dedicated_thread import DedicatedThread
from .index import Candidate, mismatch, removal_filter, words

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS chunks (
        id INTEGER PRIMARY KEY,
        vector_store_id TEXT NOT NULL,
        file_id TEXT NOT NULL,
        token TEXT NOT NULL,
        position INTEGER NOT NULL,
        text TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS chunks_by_file ON chunks (vector_store_id, file_id)",
    ("CREATE VIRTUAL TABLE IF NOT EXISTS chunks_text USING fts5("
    "text, content='chunks', content_rowid='id', tokenize='porter unicode61')"),
    ("CREATE TRIGGER IF NOT EXISTS chunks_text_add AFTER INSERT ON chunks BEGIN "
    "INSERT INTO chunks_text (rowid, text) VALUES (new.id, new.text); END"),
    ("CREATE TRIGGER IF NOT EXISTS chunks_text_remove AFTER DELETE ON chunks BEGIN "
    "INSERT INTO chunks_text (chunks_text, rowid, text) VALUES ('delete', old.id, old.text); END"),
]


class SQLiteIndex:
    kind = "sqlite-vec"

    def __init__(self, thread: DedicatedThread, connection: sqlite3.Connection) -> None:
        self._thread = thread
        self._run = thread.run
        self._connection = connection
        self._model: str | None = None

    @classmethod
    async def open(cls, path: Path) -> SQLiteIndex:
        thread = DedicatedThread("vector-index")
        connection = await thread.run(_connect, path)
        index = cls(thread, connection)
        index._model = await index._run(index._get_meta, "model")
        return index

    async def close(self) -> None:
        await self._run(self._connection.close)
        self._thread.stop()

    def _get_meta(self, key: str) -> str | None:
        row = self._connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _check(self, model: str, dimensions: int | None) -> bool:
        """Whether vectors exist; creates their table on the first add (its dimension is the model's)."""
        if self._model is not None and self._model != model:
            raise mismatch(self._model, model)
        if self._model is None and dimensions is not None:
            with self._connection:
                self._connection.execute(
                    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0(id INTEGER PRIMARY KEY, "
                    f"vector_store_id TEXT PARTITION KEY, file_id TEXT, embedding float[{dimensions}] "
                    "distance_metric=cosine, chunk_size=128)"
                )
                self._connection.execute("INSERT INTO meta (key, value) VALUES ('model', ?)", (model,))
            self._model = model
        return self._model is not None

    async def add(
        self, model: str, vector_store_id: str, file_id: str, token: str, texts: list[str], vectors: np.ndarray
    ) -> None:
        await self._run(self._add, model, vector_store_id, file_id, token, texts, vectors)

    def _add(self, model: str, store: str, file_id: str, token: str, texts: list[str], vectors: np.ndarray) -> None:
        self._check(model, vectors.shape[1])
        with self._connection:
            for position, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
                cursor = self._connection.execute(
                    "INSERT INTO chunks (vector_store_id, file_id, token, position, text) VALUES (?, ?, ?, ?, ?)",
                    (store, file_id, token, position, text),
                )
                self._connection.execute(
                    "INSERT INTO chunks_vec (id, vector_store_id, file_id, embedding) VALUES (?, ?, ?, ?)",
                    (cursor.lastrowid, store, file_id, np.ascontiguousarray(vector, dtype=np.float32).tobytes()),
                )

    async def remove(
        self, vector_store_id: str, file_id: str | None = None, *, token: str | None = None, but: str | None = None
    ) -> None:
        await self._run(self._remove, removal_filter(vector_store_id, file_id, token, but))

    def _remove(self, which: tuple[str, list[str]]) -> None:
        where, args = which
        with self._connection:
            ids = [row[0] for row in self._connection.execute(f"SELECT id FROM chunks WHERE {where}", args)]
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                marks = ", ".join("?" for _ in part)
                self._connection.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
                if self._model is not None:
                    self._connection.execute(f"DELETE FROM chunks_vec WHERE id IN ({marks})", part)

    async def nearest(
        self, model: str, vector_store_ids: list[str], file_ids: list[str] | None, vector: np.ndarray, k: int
    ) -> list[Candidate]:
        return await self._run(self._nearest, model, vector_store_ids, file_ids, vector, k)

    def _nearest(
        self, model: str, stores: list[str], file_ids: list[str] | None, vector: np.ndarray, k: int
    ) -> list[Candidate]:
        if not self._check(model, None):
            return []
        where, args = _restrict("v", stores, file_ids)
        rows = self._connection.execute(
            "SELECT v.id, c.vector_store_id, c.file_id, c.token FROM ("
            f"  SELECT id, distance FROM chunks_vec v WHERE embedding MATCH ? AND k = ? AND {where}"
            ") v JOIN chunks c ON c.id = v.id ORDER BY v.distance LIMIT ?",
            [np.ascontiguousarray(vector, dtype=np.float32).tobytes(), k, *args, k],
        )
        return [Candidate(*row) for row in rows]

    async def matching(
        self, vector_store_ids: list[str], file_ids: list[str] | None, query: str, k: int
    ) -> list[Candidate]:
        return await self._run(self._matching, vector_store_ids, file_ids, query, k)

    def _matching(self, stores: list[str], file_ids: list[str] | None, query: str, k: int) -> list[Candidate]:
        terms = words(query)
        if not terms:
            return []
        where, args = _restrict("c", stores, file_ids)
        # Full text first: left to the planner, it may walk the store's chunks and test MATCH on each.
        rows = self._connection.execute(
            "WITH matched AS MATERIALIZED (SELECT rowid AS id, rank FROM chunks_text WHERE chunks_text MATCH ?) "
            "SELECT c.id, c.vector_store_id, c.file_id, c.token FROM matched JOIN chunks c ON c.id = matched.id "
            f"WHERE {where} ORDER BY matched.rank LIMIT ?",
            [" OR ".join(f'"{term}"' for term in terms), *args, k],
        )
        return [Candidate(*row) for row in rows]

    async def texts(self, chunk_ids: list[int]) -> dict[int, str]:
        return await self._run(self._texts, chunk_ids)

    def _texts(self, chunk_ids: list[int]) -> dict[int, str]:
        if not chunk_ids:
            return {}
        marks = ", ".join("?" for _ in chunk_ids)
        return dict(self._connection.execute(f"SELECT id, text FROM chunks WHERE id IN ({marks})", chunk_ids).fetchall())


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, isolation_level=None)
    connection.enable_load_extension(True)
    sqlite_vec.load(connection)
    connection.enable_load_extension(False)
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=10000"):
        connection.execute(f"PRAGMA {pragma}")
    for statement in SCHEMA:
        connection.execute(statement)
    # Explicit transactions (`with connection`) need the legacy default isolation back.
    connection.isolation_level = ""
    return connection


def _restrict(alias: str, stores: list[str], file_ids: list[str] | None) -> tuple[str, list[str]]:
    where = f"{alias}.vector_store_id IN ({', '.join('?' for _ in stores)})"
    if file_ids is None:
        return where, list(stores)
    return where + f" AND {alias}.file_id IN ({', '.join('?' for _ in file_ids)})", [*stores, *file_ids]
