"""The search index of chunks: one interface, an embedded and a PostgreSQL implementation.

Each backend answers two rankings, nearest vectors and full-text matches; `search.py` fuses
them. Chunks carry their ingestion `token`; the catalog decides which tokens are live.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ..store.database import Database

WORDS = re.compile(r"\w+")


@dataclass(slots=True, frozen=True)
class Candidate:
    chunk_id: int
    vector_store_id: str
    file_id: str
    token: str


class IndexMismatch(Exception):
    """The index holds vectors of another embedding model than the one configured now."""


class SearchIndex(Protocol):
    kind: str
    """How vectors are ranked: `sqlite-vec`, `pgvector` (HNSW) or `exact` (in this process)."""

    async def add(
        self, model: str, vector_store_id: str, file_id: str, token: str, texts: list[str], vectors: np.ndarray
    ) -> None: ...

    async def remove(
        self, vector_store_id: str, file_id: str | None = None, *, token: str | None = None, but: str | None = None
    ) -> None:
        """A store's chunks, or one file's: all, those of one ingestion `token`, or all `but` the live one's."""
        ...

    async def nearest(
        self, model: str, vector_store_ids: list[str], file_ids: list[str] | None, vector: np.ndarray, k: int
    ) -> list[Candidate]: ...

    async def matching(
        self, vector_store_ids: list[str], file_ids: list[str] | None, query: str, k: int
    ) -> list[Candidate]: ...

    async def texts(self, chunk_ids: list[int]) -> dict[int, str]: ...

    async def close(self) -> None: ...


def words(query: str) -> list[str]:
    """The query's words, for an any-word full-text match (quoted, so no word is query syntax)."""
    return list(dict.fromkeys(word.lower() for word in WORDS.findall(query)))


def removal_filter(store: str, file_id: str | None, token: str | None, but: str | None) -> tuple[str, list[str]]:
    """The WHERE clause (and its arguments) of `SearchIndex.remove`."""
    where, args = "vector_store_id = ?", [store]
    for clause, value in (("file_id = ?", file_id), ("token = ?", token), ("token != ?", but)):
        if value is not None:
            where, args = f"{where} AND {clause}", [*args, value]
    return where, args


def mismatch(stored: str, configured: str) -> IndexMismatch:
    return IndexMismatch(
        f"the search index holds vectors of {stored!r} but the configured embedding model is {configured!r}: "
        "configure the same model, or start with a new database"
    )


async def open_index(database: Database, database_url: str) -> SearchIndex:
    if database.dialect == "postgres":
        from .postgres_index import PostgresIndex

        return await PostgresIndex.open(database)
    from .sqlite_index import SQLiteIndex

    path = Path(database_url.removeprefix("sqlite:///"))
    return await SQLiteIndex.open(path.with_name(f"{path.stem}.vectors{path.suffix or '.db'}"))
