"""Stored responses, chains, conversations, background runs and resumable streams, on both stores."""

from __future__ import annotations

import json

import httpx
import pytest
from openai.types.conversations import Conversation, ConversationItemList
from openai.types.responses import ResponseItemList

from .conftest import DATABASES
from .harness import check_response, check_stream, read_sse, slow_exchange, text_exchange, wait_for

pytestmark = pytest.mark.parametrize("database_url", DATABASES, indirect=True)


def create(server, **body) -> dict:
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", **body}, timeout=30)
    assert answer.status_code == 200, answer.text
    return check_response(answer.json()).model_dump() and answer.json()


def test_three_turn_chain_sends_the_full_history(server):
    engine = server.upstream
    engine.push(text_exchange("Paris.", reasoning="Capital question."), text_exchange("About 2.1 million."),
                text_exchange("Yes, the Louvre."))  # fmt: skip
    first = create(server, input="Capital of France?", instructions="Be brief.")
    second = create(server, input="Population?", previous_response_id=first["id"])
    third = create(server, input=[{"role": "user", "content": "Museums?"}], previous_response_id=second["id"])
    assert third["previous_response_id"] == second["id"]
    assert engine.requests[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    # As with OpenAI, instructions are not carried over to the next response of a chain.
    assert engine.requests[2]["messages"] == [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris.", "reasoning_content": "Capital question."},
        {"role": "user", "content": "Population?"},
        {"role": "assistant", "content": "About 2.1 million."},
        {"role": "user", "content": "Museums?"},
    ]

    stored = httpx.get(f"{server.base_url}/responses/{third['id']}").json()
    assert check_response(stored).output_text == "Yes, the Louvre."
    assert stored == third

    items = httpx.get(f"{server.base_url}/responses/{third['id']}/input_items", params={"order": "asc"}).json()
    ResponseItemList.model_validate(items, strict=True)
    kinds = [(i["type"], i.get("role")) for i in items["data"]]
    assert kinds == [("message", "user"), ("reasoning", None), ("message", "assistant"), ("message", "user"),
                     ("message", "assistant"), ("message", "user")]  # fmt: skip
    assert items["data"][-1]["content"] == [{"type": "input_text", "text": "Museums?"}]


def test_input_items_pagination(server):
    server.upstream.push(text_exchange("ok"))
    inputs = [{"role": "user", "content": f"message {n}"} for n in range(7)]
    response = create(server, input=inputs)
    url = f"{server.base_url}/responses/{response['id']}/input_items"
    page = httpx.get(url, params={"limit": 3}).json()
    assert [i["content"][0]["text"] for i in page["data"]] == ["message 6", "message 5", "message 4"]
    assert page["has_more"] is True and page["first_id"] == page["data"][0]["id"]
    seen = [i["id"] for i in page["data"]]
    while page["has_more"]:
        page = httpx.get(url, params={"limit": 3, "after": page["last_id"]}).json()
        seen += [i["id"] for i in page["data"]]
    assert len(seen) == len(set(seen)) == 7
    ascending = httpx.get(url, params={"order": "asc", "limit": 100}).json()
    assert [i["id"] for i in ascending["data"]] == seen[::-1] and ascending["has_more"] is False
    assert httpx.get(url, params={"limit": 101}).status_code == 400
    assert httpx.get(url, params={"order": "sideways"}).status_code == 400


def test_store_false_delete_and_not_found(server):
    server.upstream.push(text_exchange("a"), text_exchange("b"))
    ephemeral = create(server, input="x", store=False)
    assert ephemeral["store"] is False
    missing = httpx.get(f"{server.base_url}/responses/{ephemeral['id']}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    chained = httpx.post(f"{server.base_url}/responses",
                         json={"model": "test-model", "input": "y", "previous_response_id": ephemeral["id"]})  # fmt: skip
    assert chained.status_code == 404 and chained.json()["error"]["code"] == "previous_response_not_found"

    kept = create(server, input="x")
    deleted = httpx.delete(f"{server.base_url}/responses/{kept['id']}")
    assert deleted.json() == {"id": kept["id"], "object": "response", "deleted": True}
    assert httpx.get(f"{server.base_url}/responses/{kept['id']}").status_code == 404
    assert httpx.delete(f"{server.base_url}/responses/{kept['id']}").status_code == 404
    assert httpx.get(f"{server.base_url}/responses/{kept['id']}/input_items").status_code == 404
    assert server.client().responses.delete  # the SDK call below must not raise on our body
    server.upstream.push(text_exchange("c"))
    server.client().responses.delete(create(server, input="z")["id"])


def test_streamed_response_is_stored_before_its_terminal_event(server):
    server.upstream.push(text_exchange("streamed"), text_exchange("next"))
    with httpx.stream("POST", f"{server.base_url}/responses",
                      json={"model": "test-model", "input": "x", "stream": True}) as answer:  # fmt: skip
        lines = answer.iter_lines()
        for line in lines:
            if line.startswith("data: ") and '"response.completed"' in line:
                response_id = json.loads(line[6:])["response"]["id"]
                # Still inside the stream: the response is already retrievable.
                assert httpx.get(f"{server.base_url}/responses/{response_id}").json()["status"] == "completed"
                break
    follow = create(server, input="y", previous_response_id=response_id)
    assert follow["output_text"] == "next"


def test_item_reference_resolves_against_the_store(server):
    server.upstream.push(text_exchange("first"), text_exchange("second"))
    first = create(server, input="remember me")
    input_id = httpx.get(f"{server.base_url}/responses/{first['id']}/input_items").json()["data"][0]["id"]
    output_id = first["output"][0]["id"]
    create(server, input=[{"type": "item_reference", "id": input_id}, {"type": "item_reference", "id": output_id},
                          {"role": "user", "content": "and now?"}])  # fmt: skip
    assert server.upstream.requests[-1]["messages"] == [
        {"role": "user", "content": "remember me"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "and now?"},
    ]


def test_conversations_api(server):
    base = server.base_url
    created = httpx.post(f"{base}/conversations", json={
        "metadata": {"topic": "demo"},
        "items": [{"type": "message", "role": "user", "content": "hello"},
                  {"role": "assistant", "content": [{"type": "output_text", "text": "hi", "annotations": []}]}],
    }).json()  # fmt: skip
    conversation = Conversation.model_validate(created, strict=True)
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "demo"}
    assert httpx.get(f"{base}/conversations/{conversation.id}").json() == created

    updated = httpx.post(f"{base}/conversations/{conversation.id}", json={"metadata": {"topic": "new"}}).json()
    assert updated["metadata"] == {"topic": "new"}
    added = httpx.post(f"{base}/conversations/{conversation.id}/items",
                       json={"items": [{"role": "user", "content": f"q{n}"} for n in range(4)]}).json()  # fmt: skip
    ConversationItemList.model_validate(added, strict=True)
    assert len(added["data"]) == 4

    server.upstream.push(text_exchange("answer one"), text_exchange("answer two"))
    one = create(server, input="first question", conversation=conversation.id)
    assert one["conversation"] == {"id": conversation.id}
    two = create(server, input="second question", conversation={"id": conversation.id})
    assert server.upstream.requests[-1]["messages"][-3:] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "answer one"},
        {"role": "user", "content": "second question"},
    ]
    assert len(server.upstream.requests[-1]["messages"]) == 9
    assert two["output_text"] == "answer two"

    url = f"{base}/conversations/{conversation.id}/items"
    page = httpx.get(url, params={"limit": 4, "order": "asc"}).json()
    ConversationItemList.model_validate(page, strict=True)
    texts = [item["content"][0]["text"] for item in page["data"]]
    assert texts == ["hello", "hi", "q0", "q1"] and page["has_more"] is True
    everything = list(page["data"])
    while page["has_more"]:
        page = httpx.get(url, params={"limit": 4, "order": "asc", "after": page["last_id"]}).json()
        everything += page["data"]
    assert len(everything) == 10 and everything[-1]["content"][0]["text"] == "answer two"
    newest = httpx.get(url, params={"limit": 2}).json()
    assert [i["content"][0]["text"] for i in newest["data"]] == ["answer two", "second question"]

    item_id = everything[2]["id"]
    assert httpx.get(f"{url}/{item_id}").json() == everything[2]
    assert httpx.delete(f"{url}/{item_id}").json()["id"] == conversation.id
    assert httpx.get(f"{url}/{item_id}").status_code == 404
    assert httpx.get(url, params={"after": "msg_nope"}).status_code == 400

    both = httpx.post(f"{base}/responses", json={"model": "test-model", "input": "x", "conversation": conversation.id,
                                                  "previous_response_id": one["id"]})  # fmt: skip
    assert both.status_code == 400
    deleted = httpx.delete(f"{base}/conversations/{conversation.id}").json()
    assert deleted == {"id": conversation.id, "object": "conversation.deleted", "deleted": True}
    assert httpx.get(f"{base}/conversations/{conversation.id}").status_code == 404
    missing = httpx.post(f"{base}/responses", json={"model": "test-model", "input": "x", "conversation": "conv_nope"})
    assert missing.status_code == 404
    too_many = httpx.post(f"{base}/conversations", json={"items": [{"role": "user", "content": "x"}] * 21})
    assert too_many.status_code == 400
    bad = httpx.post(f"{base}/conversations", json={"items": [{"type": "nonsense"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "items[0]"


def test_conversations_with_the_sdk(server):
    client = server.client()
    conversation = client.conversations.create(items=[{"role": "user", "content": "hi"}], metadata={"a": "b"})
    assert client.conversations.retrieve(conversation.id).metadata == {"a": "b"}
    client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "more"}])
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.content[0].text for item in items] == ["hi", "more"]
    assert client.conversations.items.retrieve(items[0].id, conversation_id=conversation.id).id == items[0].id
    assert client.conversations.delete(conversation.id).deleted is True


def test_background_response_polled_to_completion(server):
    server.upstream.time_scale = 1.0
    server.upstream.push(slow_exchange(20, 0.02))
    queued = create(server, input="x", background=True)
    assert queued["status"] == "queued" and queued["background"] is True
    done = wait_for(lambda: (r := httpx.get(f"{server.base_url}/responses/{queued['id']}").json())["status"]
                    in ("completed", "failed") and r)  # fmt: skip
    assert check_response(done).output_text == "x" * 20
    assert done["status"] == "completed"
    background = httpx.post(f"{server.base_url}/responses",
                            json={"model": "test-model", "input": "x", "background": True, "store": False})  # fmt: skip
    assert background.status_code == 400


def test_background_stream_cut_off_and_resumed(server):
    server.upstream.time_scale = 1.0
    server.upstream.push(slow_exchange(40, 0.03))
    seen: list[dict] = []
    with httpx.stream("POST", f"{server.base_url}/responses",
                      json={"model": "test-model", "input": "x", "stream": True, "background": True}) as answer:  # fmt: skip
        for line in answer.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
            if len(seen) == 8:
                break  # the client goes away mid-stream
    response_id = seen[0]["response"]["id"]
    assert seen[0]["response"]["status"] == "queued"
    last = seen[-1]["sequence_number"]
    with httpx.stream("GET", f"{server.base_url}/responses/{response_id}",
                      params={"stream": "true", "starting_after": last}) as answer:  # fmt: skip
        rest, done = read_sse(answer.iter_lines())
    assert done and rest[0]["sequence_number"] == last + 1
    response = check_stream(seen + rest)
    assert response["status"] == "completed" and response["output_text"] == "x" * 40
    assert server.upstream.finished == 1, "the run went on without its client"

    # Replaying a finished background response from the start gives the same events.
    with httpx.stream("GET", f"{server.base_url}/responses/{response_id}", params={"stream": "true"}) as answer:
        replay, _ = read_sse(answer.iter_lines())
    assert replay == seen + rest


def test_cancel_mid_generation(server):
    server.upstream.time_scale = 1.0
    server.upstream.push(slow_exchange(200, 0.05))
    queued = create(server, input="x", background=True)
    url = f"{server.base_url}/responses/{queued['id']}"
    wait_for(lambda: httpx.get(url).json()["status"] == "in_progress")
    cancelled = httpx.post(f"{url}/cancel").json()
    assert cancelled["status"] == "cancelled"
    check_response(cancelled)
    wait_for(lambda: server.upstream.cancelled == 1)
    assert httpx.post(f"{url}/cancel").json() == cancelled, "cancel is idempotent"
    with httpx.stream("GET", url, params={"stream": "true"}) as answer:
        events, done = read_sse(answer.iter_lines())
    assert done and events[-1]["type"] == "response.incomplete" and events[-1]["response"]["status"] == "cancelled"

    server.upstream.push(text_exchange("done"))
    finished = create(server, input="x")
    assert httpx.post(f"{server.base_url}/responses/{finished['id']}/cancel").json() == finished
    assert httpx.post(f"{server.base_url}/responses/resp_nope/cancel").status_code == 404


def test_streaming_a_foreground_response_again_is_refused(server):
    server.upstream.push(text_exchange("x"))
    response = create(server, input="x")
    answer = httpx.get(f"{server.base_url}/responses/{response['id']}", params={"stream": "true"})
    assert answer.status_code == 400


def test_input_tokens(server):
    url = f"{server.base_url}/responses/input_tokens"
    count = httpx.post(url, json={"model": "test-model", "input": "one two three"}).json()
    # The engine answers /models as llama.cpp: its template renders, then its tokenizer counts.
    assert count == {"object": "response.input_tokens", "input_tokens": 5, "estimated": False}
    server.upstream.push(text_exchange("four five"))
    first = create(server, input="one two three")
    count = httpx.post(url, json={"model": "test-model", "input": "six", "previous_response_id": first["id"]}).json()
    assert count["input_tokens"] == 10, "the history counts too"


@pytest.mark.parametrize(("kind", "tokens", "estimated"), [("vllm", 6, False), ("ollama", 15, True)])
def test_input_tokens_by_engine_kind(upstream, database_url, kind, tokens, estimated):
    from responsekit.app import create_app
    from responsekit.config import Settings, UpstreamConfig

    from .harness import serve

    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url, kind=kind)], probe=False,
                        database_url=database_url)  # fmt: skip
    with serve(create_app(settings)) as url:
        count = httpx.post(f"{url}/v1/responses/input_tokens", json={"model": "test-model", "input": "one two three"})
    assert count.json() == {"object": "response.input_tokens", "input_tokens": tokens, "estimated": estimated}


def test_the_inspector_listing_and_inspected_response(database_url):
    """`Store.listing`: one owner's responses and conversations, newest first, filtered,
    paged without loss or repetition; `Store.inspected` with the chain, inputs, request id, timeline."""
    import asyncio

    from responsekit.store import Store

    def response(n: int, created: int, model: str, status: str, previous: str | None = None) -> dict:
        return {"id": f"resp_{n}", "object": "response", "created_at": created, "status": status, "model": model,
                "background": status == "in_progress", "previous_response_id": previous,
                "output": [{"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": f"answer {n}", "annotations": []}]}]}  # fmt: skip

    def said(n: int) -> list[dict]:
        return [{"id": f"in_{n}", "type": "message", "role": "user", "content": f"question {n}"}]

    timeline = {"started_at": 1000.0, "time_to_first_token": 0.05, "duration": 0.2,
                "entries": [{"t": 0.0, "type": "response.created", "sequence_number": 0}]}  # fmt: skip

    async def main() -> None:
        store = await Store.open(database_url)
        try:
            # Within one second, rows are listed in the order they were stored (to the millisecond).
            await store.save_response("alice", response(1, 999, "m1", "completed"), said(1), request_id="req_1",
                                      timeline=timeline)  # fmt: skip
            await store.save_response("alice", response(2, 1000, "m2", "failed", "resp_1"), said(2))
            await asyncio.sleep(0.002)
            await store.create_conversation("alice", {"id": "conv_3", "created_at": 1000, "metadata": {"k": "v"}}, [])
            await asyncio.sleep(0.002)
            await store.start_response("alice", response(4, 1000, "m1", "in_progress", "resp_2"), said(4), 2000)
            await store.save_response("bob", response(5, 1001, "m1", "completed"), said(5))

            everything = await store.listing("alice")
            assert [row["id"] for row in everything.data] == ["resp_4", "conv_3", "resp_2", "resp_1"]
            assert not everything.has_more and everything.data[1]["kind"] == "conversation"
            assert everything.data[0]["background"] and everything.data[0]["body"]["output"][0]["id"] == "msg_4"
            assert everything.data[3]["timeline"] == timeline and everything.data[2]["timeline"] is None

            seen, before = [], None
            while True:
                page = await store.listing("alice", before=before, limit=1)
                seen += [row["id"] for row in page.data]
                if not page.has_more:
                    break
                before = page.data[-1]["cursor"]
            assert seen == ["resp_4", "conv_3", "resp_2", "resp_1"]

            assert [r["id"] for r in (await store.listing("alice", model="m1")).data] == ["resp_4", "resp_1"]
            assert [r["id"] for r in (await store.listing("alice", status="failed")).data] == ["resp_2"]
            assert [r["id"] for r in (await store.listing("alice", kind="conversation")).data] == ["conv_3"]
            assert [r["id"] for r in (await store.listing("bob")).data] == ["resp_5"]
            assert await store.models("alice") == ["m1", "m2"]

            inspected = await store.inspected("alice", "resp_4")
            assert inspected is not None and inspected.chain == ["resp_1", "resp_2"]
            assert inspected.inputs == said(4) and inspected.timeline is None  # still running
            finished = {**response(4, 1000, "m1", "completed", "resp_2"), "background": True}
            assert await store.finish_response(finished, [], timeline=timeline)
            inspected = await store.inspected("alice", "resp_4")
            assert inspected.timeline == timeline and inspected.response["status"] == "completed"
            first = await store.inspected("alice", "resp_1")
            assert first.request_id == "req_1" and first.chain == [] and first.timeline == timeline
            assert await store.inspected("bob", "resp_1") is None
        finally:
            await store.close()

    asyncio.run(main())


def test_migration_4_fills_in_the_model_and_order_of_earlier_responses(database_url, monkeypatch):
    """Responses stored before the inspector (schema 3) are listed and filtered by model too."""
    import asyncio

    from responsekit.store import Store, migrations

    every = migrations.MIGRATIONS

    async def main() -> None:
        monkeypatch.setattr(migrations, "MIGRATIONS", every[:3])
        store = await Store.open(database_url)
        body = {"id": "resp_old", "object": "response", "created_at": 1234, "status": "completed",
                "model": "old-model", "background": False, "output": []}  # fmt: skip
        await store.database.execute(
            "INSERT INTO responses (id, owner, created_at, status, background, body) VALUES (?, ?, ?, ?, ?, ?)",
            "resp_old", "alice", 1234, "completed", False, json.dumps(body),
        )  # fmt: skip
        await store.close()
        monkeypatch.setattr(migrations, "MIGRATIONS", every)
        store = await Store.open(database_url)
        try:
            assert await store.models("alice") == ["old-model"]
            (row,) = (await store.listing("alice", model="old-model")).data
            assert row["id"] == "resp_old" and row["cursor"] == (1234, 1234000, "resp_old")
            assert (await store.inspected("alice", "resp_old")).timeline is None
        finally:
            await store.close()

    asyncio.run(main())


def test_migration_5_keeps_the_leases_of_running_responses(database_url, monkeypatch):
    """Leases stored in whole seconds (schema 4) are carried over in milliseconds: a run whose
    lease still holds is not failed, one whose lease lapsed is."""
    import asyncio
    import time

    from responsekit.store import Store, migrations

    every = migrations.MIGRATIONS

    async def main() -> None:
        monkeypatch.setattr(migrations, "MIGRATIONS", every[:4])
        store = await Store.open(database_url)
        now = int(time.time())
        for response_id, lease_until in (("resp_live", now + 60), ("resp_dead", now - 1)):
            body = {"id": response_id, "object": "response", "created_at": now, "status": "in_progress",
                    "model": "m", "background": True, "output": []}  # fmt: skip
            await store.database.execute(
                "INSERT INTO responses (id, owner, created_at, status, background, body, lease_until) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                response_id, "alice", now, "in_progress", True, json.dumps(body), lease_until,
            )  # fmt: skip
        await store.close()
        monkeypatch.setattr(migrations, "MIGRATIONS", every)
        store = await Store.open(database_url)
        try:
            expired = await store.expired_runs(int(time.time() * 1000))
            assert [response["id"] for response in expired] == ["resp_dead"]
            await store.renew_leases(["resp_dead"], int(time.time() * 1000) + 60_000)
            assert await store.expired_runs(int(time.time() * 1000)) == []
        finally:
            await store.close()

    asyncio.run(main())
