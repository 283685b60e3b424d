"""Background ingestion: a vector store file is `in_progress` until it is extracted, chunked and embedded.

Work starts in the process that accepted the file. Each file holds a lease it renews while
it works; a file whose lease lapses (its process died) is claimed by the maintenance loop of
any replica, under a new token, and ingested again. Chunks go to the index before the
catalog says `completed`, and count only under the token the catalog holds, so a worker that
lost its file (removed, cancelled, re-added, taken over) removes its own chunks and nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from .blobs import Blobs
from .catalog import Catalog, Ingestion
from .chunking import chunk
from .embeddings import Embedder, EmbeddingError
from .extract import ExtractionError, extract_text
from .index import IndexMismatch, SearchIndex

log = logging.getLogger(__name__)

LEASE_SECONDS = 60
EMBED_GROUP = 64
"""Texts embedded between two lease renewals (a few seconds of CPU for the bundled model)."""
WORKERS = 2


def new_token() -> str:
    return secrets.token_hex(8)


class Ingestor:
    def __init__(self, catalog: Catalog, blobs: Blobs, index: SearchIndex, embedder: Embedder) -> None:
        self.catalog = catalog
        self.blobs = blobs
        self.index = index
        self.embedder = embedder
        self._slots = asyncio.Semaphore(WORKERS)
        self._tasks: set[asyncio.Task[None]] = set()
        self._working: set[tuple[str, str]] = set()

    def lease_until(self) -> int:
        return int(time.time()) + LEASE_SECONDS

    def schedule(self, vector_store_id: str, file_id: str, token: str) -> None:
        task = asyncio.create_task(self._run(vector_store_id, file_id, token))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def resume_lapsed(self) -> None:
        """Claim files whose worker died (its lease lapsed) and ingest them here."""
        now = int(time.time())
        for store_id, file_id in await self.catalog.lapsed(now):
            if (store_id, file_id) in self._working:
                continue
            token = new_token()
            if await self.catalog.claim(store_id, file_id, token, now, self.lease_until()) is not None:
                log.info("resuming the ingestion of %s into %s", file_id, store_id)
                self.schedule(store_id, file_id, token)

    async def stop(self) -> None:
        """Stop working; unfinished files keep their lease, which lapses, and a replica (or restart) resumes them."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def idle(self) -> None:
        """Wait until the work scheduled in this process is done (the benchmark measures ingestion so)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def queue(self) -> dict[str, int]:
        """Files scheduled in this process, for the metrics: waiting for a worker, or being ingested."""
        working = len(self._working)
        return {"waiting": max(0, len(self._tasks) - working), "working": working}

    async def _run(self, store_id: str, file_id: str, token: str) -> None:
        async with self._slots:
            job = await self.catalog.ingestion(store_id, file_id, token)
            if job is None:  # Removed or cancelled before its turn came.
                return
            self._working.add((store_id, file_id))
            try:
                await self._ingest(job)
            finally:
                self._working.discard((store_id, file_id))

    async def _ingest(self, job: Ingestion) -> None:
        try:
            data = b"".join([piece async for piece in self.blobs.read(job.blob)])
            text = await asyncio.to_thread(extract_text, job.filename, data)
            chunks = await asyncio.to_thread(chunk, text, job.max_chunk_size_tokens, job.chunk_overlap_tokens)
            for start in range(0, len(chunks), EMBED_GROUP):
                group = chunks[start : start + EMBED_GROUP]
                vectors = await self.embedder.embed(group)
                await self.index.add(self.embedder.name, job.vector_store_id, job.file_id, job.token, group, vectors)
                await self.catalog.renew(job.vector_store_id, job.file_id, job.token, self.lease_until())
        except ExtractionError as exc:
            await self._fail(job, exc.code, exc.message)
            return
        except (EmbeddingError, IndexMismatch) as exc:
            await self._fail(job, "server_error", str(exc))
            return
        except Exception:
            log.exception("ingesting %s into %s failed", job.file_id, job.vector_store_id)
            await self._fail(job, "server_error", "The file could not be processed.")
            return
        usage = sum(len(piece.encode()) for piece in chunks)
        if await self.catalog.finish(job.vector_store_id, job.file_id, job.token, "completed", usage):
            await self.index.remove(job.vector_store_id, job.file_id, but=job.token)
        else:
            await self.index.remove(job.vector_store_id, job.file_id, token=job.token)

    async def _fail(self, job: Ingestion, code: str, message: str) -> None:
        await self.catalog.finish(job.vector_store_id, job.file_id, job.token, "failed",
                                  error={"code": code, "message": message})  # fmt: skip
        await self.index.remove(job.vector_store_id, job.file_id, token=job.token)
