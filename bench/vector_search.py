"""Vector stores: ingestion rate and hybrid search latency at 10k and 100k chunks, on SQLite and PostgreSQL.

- ingestion: files through the whole pipeline (blob, extraction, `auto` chunking, the bundled
  all-MiniLM-L6-v2 on CPU, the index, the catalog), in chunks per second;
- index fill: chunks written to the index and the catalog without embedding them again
  (vectors of 1,000 embedded texts, each copy jittered), in chunks per second: what the index
  itself costs, and how the 10k and 100k stores are built in minutes rather than hours;
- search: `VectorStores.search` end to end (query embedding, vector and full-text rankings,
  fusion, texts), median and 95th percentile over 40 queries of 3 to 6 words.

Run: `.venv/bin/python bench/vector_search.py [--postgres postgresql://…]`
(default: $RESPONSEKIT_TEST_DATABASE_URL when set). Needs the `embeddings` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import describe
from state import fresh_postgres

from responsekit.config import Settings
from responsekit.files.chunking import AUTO, chunk, encoding
from responsekit.files.ingest import new_token
from responsekit.files.service import VectorStores
from responsekit.store import Store

OWNER = "bench"
SIZES = (10_000, 100_000)


def vocabulary() -> list[str]:
    """Real English words: the cl100k tokens that are a space and 4+ lowercase letters."""
    words = []
    for rank in range(60_000):
        try:
            token = encoding().decode_single_token_bytes(rank).decode()
        except (KeyError, UnicodeDecodeError):
            continue
        if token.startswith(" ") and token[1:].isalpha() and token[1:].islower() and len(token) > 4:
            words.append(token[1:])
    return words


def text(rng: random.Random, words: list[str], count: int) -> str:
    sentences = []
    while count > 0:
        length = rng.randint(8, 16)
        sentences.append(" ".join(rng.choice(words) for _ in range(length)).capitalize() + ".")
        count -= length
    return " ".join(sentences)


async def pieces(data: bytes):
    yield data


async def ingestion(service: VectorStores, store_id: str, rng: random.Random, words: list[str]) -> tuple[int, float]:
    """24 files of ~2,400 words through the whole pipeline; returns (chunks, seconds)."""
    files, chunks = [], 0
    for n in range(24):
        body = text(rng, words, 2400)
        chunks += len(chunk(body, *AUTO))
        data = body.encode()
        files.append((await service.add_file(OWNER, f"doc{n}.txt", "assistants", len(data), pieces(data), None)).id)
    started = time.perf_counter()
    await service.attach(OWNER, store_id, [(file_id, {}, AUTO) for file_id in files])
    await service.ingestor.idle()
    seconds = time.perf_counter() - started
    store = await service.catalog.get_store(OWNER, store_id)
    assert store is not None and store["file_counts"]["completed"] == 24, store
    return chunks, seconds


async def fill(
    service: VectorStores, store_id: str, pool: list[str], vectors: np.ndarray, start: int, stop: int,
    rng: np.random.Generator,
) -> float:
    """Chunks start..stop into the store, 100 per file; returns seconds."""
    started = time.perf_counter()
    for first in range(start, stop, 100):
        data = b"bench"
        file = await service.add_file(OWNER, f"fill{first}.txt", "assistants", len(data), pieces(data), None)
        token = new_token()
        await service.catalog.attach(store_id, [(file.id, {}, AUTO, token)], None, service.ingestor.lease_until())
        picks = rng.integers(0, len(pool), size=100)
        jittered = vectors[picks] + rng.normal(0, 0.05, size=(100, vectors.shape[1])).astype(np.float32)
        jittered /= np.linalg.norm(jittered, axis=1, keepdims=True)
        texts = [f"{pool[i]} (copy {first + j})" for j, i in enumerate(picks)]
        await service.index.add(service.embedder.name, store_id, file.id, token, texts, jittered)
        await service.catalog.finish(store_id, file.id, token, "completed", sum(len(t) for t in texts))
    return time.perf_counter() - started


async def latency(service: VectorStores, store_id: str, queries: list[str]) -> tuple[float, float]:
    await service.search(OWNER, [store_id], queries[0], 10)  # warm: loads caches
    times = []
    for query in queries:
        started = time.perf_counter()
        hits = await service.search(OWNER, [store_id], query, 10)
        times.append((time.perf_counter() - started) * 1000)
        assert hits, query
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


async def run(name: str, url: str, data_dir: Path) -> list[str]:
    settings = Settings(probe=False, data_dir=data_dir, database_url=url)
    store = await Store.open(url)
    service = await VectorStores.open(settings, store.database)
    rows = []
    try:
        rng = random.Random(7)
        words = vocabulary()
        await service.embedder.embed(["warm up"])  # Load the model before timing ingestion.
        ingest_store = await _new_store(service, "ingestion")
        chunks, seconds = await ingestion(service, ingest_store, rng, words)
        pool = [text(rng, words, 60) for _ in range(1000)]
        vectors = await service.embedder.embed(pool)
        big = await _new_store(service, "search")
        queries = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 6))) for _ in range(40)]
        generator = np.random.default_rng(7)
        filled = 0
        for size in SIZES:
            fill_seconds = await fill(service, big, pool, vectors, filled, size, generator)
            fill_rate = (size - filled) / fill_seconds
            filled = size
            median, p95 = await latency(service, big, queries)
            rows.append(f"| {name} ({service.index.kind}) | {chunks / seconds:.1f} | {size:,} | {fill_rate:,.0f} | "
                        f"{median:.1f} | {p95:.1f} |")  # fmt: skip
            print(rows[-1], flush=True)
    finally:
        await service.close()
        await store.close()
    return rows


async def _new_store(service: VectorStores, name: str) -> str:
    store_id = f"vs_bench_{name}_{new_token()}"
    await service.catalog.add_store(OWNER, {"id": store_id, "created_ms": int(time.time() * 1000), "name": name,
                                            "metadata": {}, "expires_after_days": None,
                                            "last_active_at": int(time.time())})  # fmt: skip
    return store_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default=os.environ.get("RESPONSEKIT_TEST_DATABASE_URL"))
    args = parser.parse_args()
    print(describe())
    print("| store (vector ranking) | ingestion, chunks/s | chunks in store | index fill, chunks/s | search median ms | search p95 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run("SQLite", f"sqlite:///{directory}/bench.db", Path(directory)))
    if args.postgres:
        with fresh_postgres(args.postgres) as url, tempfile.TemporaryDirectory() as directory:
            asyncio.run(run("PostgreSQL", url, Path(directory)))


if __name__ == "__main__":
    main()
