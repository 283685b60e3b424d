"""Files and vector stores as one service (`app.state.vector_stores`), and hybrid search over them.

Search ranks chunks twice, by embedding similarity and by full-text relevance (BM25 on
SQLite, `ts_rank_cd` on PostgreSQL), and fuses the rankings by reciprocal rank fusion: a
chunk's score is the sum of 1/(60 + rank) over the rankings it appears in, divided by the
best possible sum, so scores lie in [0, 1] and 1 means first in every ranking.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from ..canonical.errors import APIError
from ..canonical.ids import new_id
from ..config import Settings
from ..operations.periodic import every
from ..store.database import Database
from . import filters as attribute_filters
from .blobs import Blobs, DirectoryBlobs, LargeObjectBlobs
from .catalog import Catalog, StoredFile, now_ms
from .embeddings import Embedder, EmbeddingError, embedder_from_settings
from .index import IndexMismatch, SearchIndex, open_index
from .ingest import Ingestor, new_token

RRF_K = 60
RANKERS = ("auto", "default-2024-11-15", "none")
MAINTENANCE_SECONDS = 5.0


@dataclass(slots=True, frozen=True)
class SearchHit:
    """One chunk found by `VectorStores.search`."""

    file_id: str
    filename: str
    score: float
    """In [0, 1]: the fused rank score (1 = first by meaning and by words)."""
    text: str
    attributes: dict[str, str | float | bool] = field(default_factory=dict)
    vector_store_id: str = ""

    def body(self) -> dict[str, Any]:
        """As `/v1/vector_stores/{id}/search` shows it."""
        return {"file_id": self.file_id, "filename": self.filename, "score": self.score,
                "attributes": self.attributes, "content": [{"type": "text", "text": self.text}]}  # fmt: skip


class VectorStores:
    def __init__(self, catalog: Catalog, blobs: Blobs, index: SearchIndex, embedder: Embedder) -> None:
        self.catalog = catalog
        self.blobs = blobs
        self.index = index
        self.embedder = embedder
        self.ingestor = Ingestor(catalog, blobs, index, embedder)
        self._maintenance: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, settings: Settings, database: Database) -> VectorStores:
        blobs: Blobs
        if settings.files_dir is not None:
            blobs = DirectoryBlobs(settings.files_dir)
        elif database.dialect == "postgres":
            blobs = LargeObjectBlobs(database)
        else:
            blobs = DirectoryBlobs(settings.data_dir / "files")
        index = await open_index(database, settings.database)
        return cls(Catalog(database), blobs, index, embedder_from_settings(settings))

    async def start(self) -> None:
        self._maintenance = asyncio.create_task(every(MAINTENANCE_SECONDS, self._maintain, "vector stores", at_once=True))

    async def close(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            with suppress(asyncio.CancelledError):
                await self._maintenance
        await self.ingestor.stop()
        await self.index.close()
        await self.embedder.aclose()

    async def _maintain(self) -> None:
        """Resume ingestions whose process died; delete files past their `expires_at`."""
        await self.ingestor.resume_lapsed()
        for owner, file_id in await self.catalog.expired_files(int(time.time())):
            await self.delete_file(owner, file_id)

    # --- files ---------------------------------------------------------------------------

    async def add_file(
        self, owner: str, filename: str, purpose: str, size: int, pieces: AsyncIterator[bytes], expires_after: int | None
    ) -> StoredFile:
        file_id = new_id("file").replace("_", "-", 1)
        reference = await self.blobs.write(file_id, pieces)
        created = now_ms()
        expires_at = created // 1000 + expires_after if expires_after is not None else None
        file = StoredFile(file_id, created, filename, purpose, size, expires_at, reference)
        try:
            await self.catalog.add_file(owner, file)
        except BaseException:
            await self.blobs.delete(reference)
            raise
        return file

    async def delete_file(self, owner: str, file_id: str) -> bool:
        deleted = await self.catalog.delete_file(owner, file_id)
        if deleted is None:
            return False
        file, stores = deleted
        for store_id in stores:
            await self.index.remove(store_id, file_id)
        await self.blobs.delete(file.blob)
        return True

    # --- vector stores -------------------------------------------------------------------

    async def attach(
        self, owner: str, store_id: str, files: list[tuple[str, dict[str, Any], tuple[int, int]]],
        batch: bool = False,
    ) -> str | None:
        """(file id, attributes, chunking) into a store, ingested in the background; returns the batch id."""
        files = list({file[0]: file for file in files}.values())  # A file named twice: the last settings win.
        missing = await self.catalog.missing_files(owner, [file_id for file_id, _, _ in files])
        if missing:
            raise APIError(404, f"No file found with id '{missing[0]}'.", param="file_ids", code="not_found")
        batch_id = new_id("vsfb") if batch else None
        started = [(file_id, attributes, chunking, new_token()) for file_id, attributes, chunking in files]
        await self.catalog.attach(store_id, started, batch_id, self.ingestor.lease_until())
        await self.catalog.touch_store([store_id])
        for file_id, _, _, token in started:
            await self.index.remove(store_id, file_id, but=token)  # A re-added file's old chunks go now.
            self.ingestor.schedule(store_id, file_id, token)
        return batch_id

    async def detach(self, store_id: str, file_id: str) -> bool:
        if not await self.catalog.detach(store_id, file_id):
            return False
        await self.index.remove(store_id, file_id)
        return True

    async def delete_store(self, owner: str, store_id: str) -> bool:
        if not await self.catalog.delete_store(owner, store_id):
            return False
        await self.index.remove(store_id)
        return True

    # --- search --------------------------------------------------------------------------

    async def search(
        self,
        owner: str,
        vector_store_ids: list[str],
        query: str | list[str],
        max_num_results: int = 10,
        filters: dict[str, Any] | None = None,
        ranking_options: dict[str, Any] | None = None,
    ) -> list[SearchHit]:
        """The best chunks of these stores for the query (or queries), best first.

        Raises `APIError`: 404 for a store this owner does not have, 400 for an expired store
        or a bad query, filter or ranking option.
        """
        queries = [query] if isinstance(query, str) else query if isinstance(query, list) else []
        if not queries or not all(isinstance(text, str) and text.strip() for text in queries):
            raise APIError(400, "query must be a non-empty string or a list of them.", param="query",
                           code="invalid_value")  # fmt: skip
        if not 1 <= max_num_results <= 50:
            raise APIError(400, "max_num_results must be between 1 and 50.", param="max_num_results",
                           code="invalid_value")  # fmt: skip
        threshold = _threshold(ranking_options)
        if filters is not None:
            attribute_filters.check(filters)
        store_ids = list(dict.fromkeys(vector_store_ids))
        if not store_ids:
            raise APIError(400, "vector_store_ids must name at least one vector store.", param="vector_store_ids",
                           code="invalid_value")  # fmt: skip
        for store_id in store_ids:
            store = await self.catalog.get_store(owner, store_id)
            if store is None:
                raise not_found(store_id)
            if store["status"] == "expired":
                raise APIError(400, f"Vector store {store_id} has expired.", param="vector_store_id", code="expired")
        await self.catalog.touch_store(store_ids)
        live = await self.catalog.searchable(store_ids)
        allowed = {key: file for key, file in live.items() if filters is None or
                   attribute_filters.matches(filters, file.attributes)}  # fmt: skip
        if not allowed:
            return []
        file_ids = None if len(allowed) == len(live) else sorted({file_id for _, file_id in allowed})
        depth = max(50, 4 * max_num_results)
        try:
            vectors = await self.embedder.embed(queries)
            rankings = []
            for text, vector in zip(queries, vectors, strict=True):
                rankings.append(await self.index.nearest(self.embedder.name, store_ids, file_ids, vector, depth))
                rankings.append(await self.index.matching(store_ids, file_ids, text, depth))
        except (EmbeddingError, IndexMismatch) as exc:
            raise APIError(500, f"Search is unavailable: {exc}", type="server_error", code="server_error") from exc
        scores: dict[int, float] = {}
        where: dict[int, tuple[str, str]] = {}
        for ranking in rankings:
            for rank, candidate in enumerate(ranking, start=1):
                key = (candidate.vector_store_id, candidate.file_id)
                if key in allowed and allowed[key].token == candidate.token:
                    scores[candidate.chunk_id] = scores.get(candidate.chunk_id, 0.0) + 1 / (RRF_K + rank)
                    where[candidate.chunk_id] = key
        best = len(rankings) / (RRF_K + 1)
        ranked = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
        ranked = [(chunk_id, round(score / best, 6)) for chunk_id, score in ranked if score / best >= threshold]
        ranked = ranked[:max_num_results]
        texts = await self.index.texts([chunk_id for chunk_id, _ in ranked])
        hits = []
        for chunk_id, score in ranked:
            store_id, file_id = where[chunk_id]
            file = allowed[(store_id, file_id)]
            if chunk_id in texts:
                hits.append(SearchHit(file_id, file.filename, score, texts[chunk_id], file.attributes, store_id))
        return hits


def _threshold(options: dict[str, Any] | None) -> float:
    if options is None:
        return 0.0
    if not isinstance(options, dict):
        raise APIError(400, "ranking_options must be an object.", param="ranking_options", code="invalid_type")
    ranker = options.get("ranker", "auto")
    if ranker not in RANKERS:
        raise APIError(400, f"ranker must be one of {', '.join(RANKERS)}.", param="ranking_options.ranker",
                       code="invalid_value")  # fmt: skip
    threshold = options.get("score_threshold", 0.0)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 <= threshold <= 1:
        raise APIError(400, "score_threshold must be a number between 0 and 1.",
                       param="ranking_options.score_threshold", code="invalid_value")  # fmt: skip
    return float(threshold)


def not_found(store_id: str) -> APIError:
    return APIError(404, f"No vector store found with id '{store_id}'.", param="vector_store_id", code="not_found")
