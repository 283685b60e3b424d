"""`responsekit files add DIR --vector-store NAME`: a directory into a vector store of a running server.

It goes through the HTTP API rather than into the database: the server owns ingestion (its
embedding model is loaded once, its workers hold the leases), the files belong to the API
key that sent them, and the embedded index has a single writer, the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import openai
from openai.types import VectorStore
from openai.types.vector_stores import VectorStoreFileBatch

from .extract import HTML_SUFFIXES, TEXT_SUFFIXES

SUPPORTED = TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf"}
BATCH = 2000
"""OpenAI's largest file batch."""


def files_in(directory: Path) -> tuple[list[Path], list[Path]]:
    """(supported, skipped) files under the directory, hidden ones left out."""
    found = sorted(path for path in directory.rglob("*") if path.is_file() and
                   not any(part.startswith(".") for part in path.relative_to(directory).parts))  # fmt: skip
    return [p for p in found if p.suffix.lower() in SUPPORTED], [p for p in found if p.suffix.lower() not in SUPPORTED]


def vector_store(client: openai.OpenAI, name: str) -> VectorStore:
    """The newest store of that name, or a new one."""
    for store in client.vector_stores.list(order="desc", limit=100):
        if store.name == name:
            return store
    return client.vector_stores.create(name=name)


def add_files(
    client: openai.OpenAI, store: VectorStore, paths: list[Path], uploaded: Callable[[Path], None],
    ingested: Callable[[int, int], None], poll: float = 0.5,
) -> list[tuple[str, str]]:
    """Upload, attach in batches, wait for ingestion; returns (file name, reason) of the files that failed."""
    names: dict[str, str] = {}
    for path in paths:
        with path.open("rb") as handle:
            names[client.files.create(file=(path.name, handle), purpose="assistants").id] = str(path)
        uploaded(path)
    batches: list[VectorStoreFileBatch] = []
    ids = list(names)
    for start in range(0, len(ids), BATCH):
        batches.append(client.vector_stores.file_batches.create(store.id, file_ids=ids[start : start + BATCH]))
    while True:
        batches = [client.vector_stores.file_batches.retrieve(b.id, vector_store_id=store.id) for b in batches]
        ingested(sum(b.file_counts.total - b.file_counts.in_progress for b in batches), len(ids))
        if all(b.status != "in_progress" for b in batches):
            break
        time.sleep(poll)
    failed = []
    for batch in batches:
        for file in client.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id, filter="failed"):
            failed.append((names[file.id], file.last_error.message if file.last_error else "failed"))
    return failed
