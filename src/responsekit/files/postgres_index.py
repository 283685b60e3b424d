"""The PostgreSQL index: chunks in the shared database, so every replica searches the same index.

Full text is a generated `tsvector` with a GIN index. Vectors are ranked by pgvector (an HNSW
index, cosine) when the `vector` extension can be created; otherwise they are kept as float32
bytes and ranked exactly in this process, over a per-store matrix cached in memory and
refreshed when the store's chunks change (checked with one indexed query per search).
The table is made on the first ingestion, when the embedding dimension is known; the kind
chosen then is kept in `vector_index_meta`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import asyncpg
import numpy as np

from ..store.database import Database
from .index import Candidate, mismatch, removal_filter, words

log = logging.getLogger(__name__)
LOCK = 7270002


@dataclass(slots=True)
class _Matrix:
    """One store's vectors, for exact ranking; `stamp` tells whether the table changed since loading."""

    stamp: tuple[int, int, int]
    ids: np.ndarray
    files: np.ndarray
    tokens: np.ndarray
    vectors: np.ndarray


class PostgresIndex:
    def __init__(self, database: Database, pgvector: bool, iterative: bool) -> None:
        self.database = database
        self.pgvector = pgvector
        self.iterative = iterative
        self.kind = "pgvector" if pgvector else "exact"
        self._model: str | None = None
        self._dimensions = 0
        self._matrices: dict[str, _Matrix] = {}
        self._loading: dict[str, asyncio.Lock] = {}

    @classmethod
    async def open(cls, database: Database) -> PostgresIndex:
        await database.execute("CREATE TABLE IF NOT EXISTS vector_index_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        meta = dict(await database.fetch("SELECT key, value FROM vector_index_meta"))
        if "kind" in meta:
            pgvector = meta["kind"] == "pgvector"
        else:
            pgvector = await _create_pgvector(database)
        version = await database.fetchrow("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        iterative = version is not None and tuple(int(part) for part in version[0].split(".")[:2]) >= (0, 8)
        index = cls(database, pgvector, iterative)
        if "model" in meta:
            index._model, index._dimensions = meta["model"], int(meta["dimensions"])
        log.info("vector search on PostgreSQL: %s", "pgvector (HNSW)" if pgvector else "exact ranking in process")
        return index

    async def close(self) -> None:
        self._matrices.clear()

    async def _check(self, model: str, dimensions: int | None) -> bool:
        if self._model is None and dimensions is not None:
            await self._create(model, dimensions)
        if self._model is not None and self._model != model:
            raise mismatch(self._model, model)
        return self._model is not None

    async def _create(self, model: str, dimensions: int) -> None:
        """The chunk table, made once by whichever replica ingests first."""
        async with self.database.transaction() as db:
            await db.execute(f"SELECT pg_advisory_xact_lock({LOCK})")
            meta = dict(await db.fetch("SELECT key, value FROM vector_index_meta"))
            if "model" not in meta:
                column = f"vector({dimensions})" if self.pgvector else "BYTEA"
                await db.execute(f"""CREATE TABLE vector_chunks (
                    id BIGSERIAL PRIMARY KEY,
                    vector_store_id TEXT NOT NULL,
                    file_id TEXT NOT NULL,
                    token TEXT NOT NULL,
                    position INTEGER NOT NULL,
                    text TEXT NOT NULL,
                    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
                    embedding {column} NOT NULL
                )""")
                await db.execute("CREATE INDEX vector_chunks_by_file ON vector_chunks (vector_store_id, file_id)")
                await db.execute("CREATE INDEX vector_chunks_text ON vector_chunks USING GIN (tsv)")
                if self.pgvector:
                    await db.execute("CREATE INDEX vector_chunks_hnsw ON vector_chunks USING hnsw (embedding vector_cosine_ops)")
                meta = {"model": model, "dimensions": str(dimensions), "kind": self.kind}
                await db.executemany("INSERT INTO vector_index_meta (key, value) VALUES (?, ?)", list(meta.items()))
        self._model, self._dimensions = meta["model"], int(meta["dimensions"])

    async def add(
        self, model: str, vector_store_id: str, file_id: str, token: str, texts: list[str], vectors: np.ndarray
    ) -> None:
        await self._check(model, vectors.shape[1])
        if self.pgvector:
            sql, values = "?::vector", [_literal(vector) for vector in vectors]
        else:
            sql, values = "?", [np.ascontiguousarray(vector, dtype=np.float32).tobytes() for vector in vectors]
        async with self.database.transaction() as db:
            await db.executemany(
                "INSERT INTO vector_chunks (vector_store_id, file_id, token, position, text, embedding) "
                f"VALUES (?, ?, ?, ?, ?, {sql})",
                [(vector_store_id, file_id, token, position, text, value)
                 for position, (text, value) in enumerate(zip(texts, values, strict=True))],
            )  # fmt: skip

    async def remove(
        self, vector_store_id: str, file_id: str | None = None, *, token: str | None = None, but: str | None = None
    ) -> None:
        if self._model is None and not await self._exists():
            return
        where, args = removal_filter(vector_store_id, file_id, token, but)
        await self.database.execute(f"DELETE FROM vector_chunks WHERE {where}", *args)

    async def _exists(self) -> bool:
        """Whether another replica made the table since this one started."""
        meta = dict(await self.database.fetch("SELECT key, value FROM vector_index_meta"))
        if "model" in meta:
            self._model, self._dimensions = meta["model"], int(meta["dimensions"])
        return self._model is not None

    async def nearest(
        self, model: str, vector_store_ids: list[str], file_ids: list[str] | None, vector: np.ndarray, k: int
    ) -> list[Candidate]:
        if self._model is None and not await self._exists():
            return []
        await self._check(model, None)
        if self.pgvector:
            return await self._nearest_hnsw(vector_store_ids, file_ids, vector, k)
        found: list[tuple[float, Candidate]] = []
        for store in vector_store_ids:
            matrix = await self._matrix(store)
            if not len(matrix.ids):
                continue
            scores = matrix.vectors @ np.asarray(vector, dtype=np.float32)
            if file_ids is not None:
                scores = np.where(np.isin(matrix.files, file_ids), scores, -np.inf)
            top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
            found += [(float(scores[i]), Candidate(int(matrix.ids[i]), store, str(matrix.files[i]), str(matrix.tokens[i])))
                      for i in top if scores[i] != -np.inf]  # fmt: skip
        found.sort(key=lambda pair: -pair[0])
        return [candidate for _, candidate in found[:k]]

    async def _nearest_hnsw(
        self, stores: list[str], file_ids: list[str] | None, vector: np.ndarray, k: int
    ) -> list[Candidate]:
        where, args = "vector_store_id = ANY(?)", [stores]
        if file_ids is not None:
            where, args = where + " AND file_id = ANY(?)", [*args, file_ids]
        async with self.database.transaction() as db:
            # Enough candidates for k after the store filter; iterative scans (pgvector 0.8) go on until k are found.
            await db.execute("SELECT set_config('hnsw.ef_search', ?, true)", str(max(40, min(1000, 2 * k))))
            if self.iterative:
                await db.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
            rows = await db.fetch(
                "WITH nearest AS MATERIALIZED (SELECT id, vector_store_id, file_id, token, embedding <=> ?::vector AS d "
                f"FROM vector_chunks WHERE {where} ORDER BY d LIMIT ?) SELECT id, vector_store_id, file_id, token "
                "FROM nearest ORDER BY d",
                _literal(vector), *args, k,
            )  # fmt: skip
        return [Candidate(int(row[0]), row[1], row[2], row[3]) for row in rows]

    async def _matrix(self, store: str) -> _Matrix:
        async with self._loading.setdefault(store, asyncio.Lock()):
            row = await self.database.fetchrow(
                "SELECT COUNT(*), COALESCE(MAX(id), 0), COALESCE(SUM(id), 0) FROM vector_chunks WHERE vector_store_id = ?",
                store,
            )  # fmt: skip
            assert row is not None
            stamp = (int(row[0]), int(row[1]), int(row[2]))
            cached = self._matrices.get(store)
            if cached is not None and cached.stamp == stamp:
                return cached
            if cached is not None:
                # Usually chunks were only appended: load those and keep the rest.
                matrix = _join(cached, await self._load(store, after=cached.stamp[1]))
                if matrix.stamp != stamp:  # Chunks were deleted, or committed out of id order: reload.
                    matrix = await self._load(store, after=0)
            else:
                matrix = await self._load(store, after=0)
            self._matrices[store] = matrix
            return matrix

    async def _load(self, store: str, after: int) -> _Matrix:
        rows = await self.database.fetch(
            "SELECT id, file_id, token, embedding FROM vector_chunks WHERE vector_store_id = ? AND id > ? ORDER BY id",
            store, after,
        )  # fmt: skip
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return _Matrix(
            (len(rows), int(ids.max()) if len(rows) else after, int(ids.sum())),
            ids,
            np.array([r[1] for r in rows], dtype=object),
            np.array([r[2] for r in rows], dtype=object),
            np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(len(rows), self._dimensions),
        )

    async def matching(
        self, vector_store_ids: list[str], file_ids: list[str] | None, query: str, k: int
    ) -> list[Candidate]:
        terms = [term for term in words(query) if term != "or"]
        if not terms or (self._model is None and not await self._exists()):
            return []
        where, args = "vector_store_id = ANY(?)", [vector_store_ids]
        if file_ids is not None:
            where, args = where + " AND file_id = ANY(?)", [*args, file_ids]
        rows = await self.database.fetch(
            "SELECT id, vector_store_id, file_id, token FROM vector_chunks, websearch_to_tsquery('english', ?) q "
            f"WHERE tsv @@ q AND {where} ORDER BY ts_rank_cd(tsv, q) DESC, id LIMIT ?",
            " or ".join(terms), *args, k,
        )  # fmt: skip
        return [Candidate(int(row[0]), row[1], row[2], row[3]) for row in rows]

    async def texts(self, chunk_ids: list[int]) -> dict[int, str]:
        if not chunk_ids:
            return {}
        rows = await self.database.fetch("SELECT id, text FROM vector_chunks WHERE id = ANY(?)", chunk_ids)
        return {int(row[0]): row[1] for row in rows}


async def _create_pgvector(database: Database) -> bool:
    """Whether pgvector is usable: installed on the server and creatable (or created) in this database."""
    try:
        await database.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except asyncpg.PostgresError as exc:
        # Not installed, not allowed, or another replica creating it at the same moment.
        log.info("pgvector is not available (%s)", exc)
    return await database.fetchrow("SELECT 1 FROM pg_extension WHERE extname = 'vector'") is not None


def _join(old: _Matrix, new: _Matrix) -> _Matrix:
    stamp = (old.stamp[0] + new.stamp[0], max(old.stamp[1], new.stamp[1]), old.stamp[2] + new.stamp[2])
    return _Matrix(stamp, np.concatenate([old.ids, new.ids]), np.concatenate([old.files, new.files]),
                   np.concatenate([old.tokens, new.tokens]), np.concatenate([old.vectors, new.vectors]))


def _literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{value:.7g}" for value in vector.tolist()) + "]"
