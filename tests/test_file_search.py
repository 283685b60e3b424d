"""The file_search tool in /v1/responses: the model searches, the server answers, the reply cites."""

from __future__ import annotations

import json

import httpx
import pytest

from responsekit.files.service import VectorStores

from .conftest import DATABASES
from .harness import check_response, check_stream, read_sse, text_exchange, tool_loop, wait_for

pytestmark = pytest.mark.parametrize("database_url", DATABASES, indirect=True)

NOTES = {
    "volcanoes.md": "Mount Etna in Sicily is one of the most active volcanoes in the world; it erupts every few years.",
    "baking.md": "Sourdough bread rises slowly because wild yeast ferments the dough over many hours.",
    "tides.md": "Tides are caused mainly by the gravitational pull of the Moon on the oceans.",
}


@pytest.fixture
def store(server):
    client = server.client()
    ids = {name: client.files.create(file=(name, text.encode()), purpose="assistants").id for name, text in NOTES.items()}
    store = client.vector_stores.create(name="notes", file_ids=list(ids.values()))
    wait_for(lambda: client.vector_stores.retrieve(store.id).status == "completed", timeout=120)
    return store.id, ids


def cited_answer(body: dict) -> dict:
    """An engine that searches first, then answers citing the first result."""
    if body["messages"][-1]["role"] == "tool":
        first_file = body["messages"][-1]["content"].split("\n", 1)[0].split(" ")[1]
        return text_exchange(f"Etna erupts every few years [1]. (Source: {first_file}.)")
    return tool_loop({"file_search": {"queries": ["Which volcano is very active?"]}})(body)


def test_search_then_answer_with_a_citation(server, store):
    store_id, ids = store
    server.upstream.responder = cited_answer
    body = {"model": "test-model", "input": "Tell me about active volcanoes.", "stream": True,
            "include": ["file_search_call.results"],
            "tools": [{"type": "file_search", "vector_store_ids": [store_id], "max_num_results": 2}]}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/responses", json=body, timeout=120) as answer:
        events, _ = read_sse(answer.iter_lines())
    response = check_stream(events)
    search = next(item for item in response["output"] if item["type"] == "file_search_call")
    assert search["status"] == "completed" and search["queries"] == ["Which volcano is very active?"]
    assert search["results"][0]["filename"] == "volcanoes.md" and len(search["results"]) == 2
    kinds = [e["type"] for e in events]
    for kind in ("response.file_search_call.in_progress", "response.file_search_call.searching",
                 "response.file_search_call.completed", "response.output_text.annotation.added"):
        assert kind in kinds, kind
    assert kinds.index("response.file_search_call.completed") < kinds.index("response.output_text.delta")
    message = response["output"][-1]
    (citation,) = message["content"][0]["annotations"]
    assert citation == {"type": "file_citation", "file_id": ids["volcanoes.md"], "filename": "volcanoes.md",
                        "index": message["content"][0]["text"].index("[1]")}  # fmt: skip
    tool_message = server.upstream.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["content"].startswith("[1] volcanoes.md")
    assert "Mount Etna" in tool_message["content"]


def test_results_only_when_included_and_the_chain_remembers_the_search(server, store):
    store_id, _ = store
    server.upstream.responder = cited_answer
    tools = [{"type": "file_search", "vector_store_ids": [store_id]}]
    first = httpx.post(f"{server.base_url}/responses", timeout=120,
                       json={"model": "test-model", "input": "Volcanoes?", "tools": tools}).json()  # fmt: skip
    check_response(first)
    search = first["output"][1]
    assert search["type"] == "file_search_call" and search["results"] is None
    read_then = server.upstream.requests[-1]["messages"][-1]["content"]
    server.upstream.responder = lambda body: text_exchange("Anything else?")
    httpx.post(f"{server.base_url}/responses", json={"model": "test-model", "input": "Thanks", "tools": tools,
                                                     "previous_response_id": first["id"]}, timeout=60)  # fmt: skip
    history = server.upstream.requests[-1]["messages"]
    call = next(m for m in history if m.get("tool_calls"))
    assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == {"queries": ["Which volcano is very active?"]}
    assert read_then.startswith("[1] volcanoes.md") and "Mount Etna" in read_then
    assert next(m for m in history if m["role"] == "tool")["content"] == read_then, "the passages the model read"


def test_max_tool_calls_bounds_the_loop(server, store):
    store_id, _ = store
    # An engine that searches whenever it may.
    server.upstream.responder = lambda body: (
        tool_loop({"file_search": {"queries": ["tides"]}})({**body, "messages": body["messages"][:1]})
        if body.get("tools") else text_exchange("Done searching.")
    )  # fmt: skip
    response = httpx.post(f"{server.base_url}/responses", timeout=120, json={
        "model": "test-model", "input": "Search a lot.", "max_tool_calls": 2,
        "tools": [{"type": "file_search", "vector_store_ids": [store_id]}],
    }).json()  # fmt: skip
    check_response(response)
    assert [item["type"] for item in response["output"]].count("file_search_call") == 2
    assert response["output_text"] == "Done searching."
    assert "tools" not in server.upstream.requests[-1], "once the budget is spent the model answers without tools"


@pytest.mark.parametrize("streamed", [True, False])
def test_an_unexpected_error_in_the_search_is_a_failed_call_the_model_reads(server, monkeypatch, caplog, streamed):
    async def broken(self: VectorStores, *args: object, **options: object) -> None:
        raise RuntimeError("the index is corrupt")

    monkeypatch.setattr(VectorStores, "search", broken)
    store_id = server.client().vector_stores.create(name="notes").id
    server.upstream.responder = tool_loop({"file_search": {"queries": ["etna"]}})
    body = {"model": "test-model", "input": "Volcanoes?", "stream": streamed,
            "tools": [{"type": "file_search", "vector_store_ids": [store_id]}]}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/responses", json=body, timeout=60) as answer:
        assert answer.status_code == 200, answer.read()
        response = check_stream(read_sse(answer.iter_lines())[0]) if streamed else json.loads(answer.read())
    if not streamed:
        check_response(response)
    search = next(item for item in response["output"] if item["type"] == "file_search_call")
    assert search["status"] == "failed" and response["status"] == "completed"
    failure = "Error: The tool file_search failed on the server (RuntimeError: the index is corrupt)."
    assert server.upstream.requests[1]["messages"][-1]["content"] == failure
    assert response["output_text"] == f"The tool said: {failure}"
    assert any(r.exc_info and r.getMessage() == "the server-run tool file_search failed" for r in caplog.records)


def test_unknown_vector_store(server):
    answer = httpx.post(f"{server.base_url}/responses", json={
        "model": "test-model", "input": "x", "tools": [{"type": "file_search", "vector_store_ids": ["vs_nope"]}]})
    assert answer.status_code == 404 and answer.json()["error"]["param"] == "tools[0].vector_store_ids"
