"""Stateless clients: sealed reasoning, reasoning summaries, compaction, truncation, WebSocket mode."""

from __future__ import annotations

import json
import threading

import httpx
import openai
import pytest
from openai.types.responses import CompactedResponse, ResponseCompactionItem

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig
from responsekit.orchestration.sealing import Sealer, rotate_keys

from .harness import (
    check_response,
    check_stream,
    exchange,
    read_sse,
    serve,
    text_exchange,
    wait_for,
)

ENCRYPTED = {"include": ["reasoning.encrypted_content"], "store": False}


def create(url: str, **body) -> dict:
    answer = httpx.post(f"{url}/responses", json={"model": "test-model", **body}, timeout=30)
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return answer.json()


def test_reasoning_reaches_the_next_turn_through_encrypted_content_alone(server, tmp_path):
    server.upstream.push(exchange("llamacpp_parallel_tools"), text_exchange("Paris 18C, Tokyo 25C."))
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    first = create(server.base_url, input="Weather in Paris and Tokyo?", tools=tools, **ENCRYPTED)
    reasoning = first["output"][0]
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"]
    assert "two cities" not in reasoning["encrypted_content"], "the blob is not plain text"
    calls = first["output"][1:]
    # The client replays the output without the reasoning text: only the sealed blob carries it.
    replay = [{"type": "reasoning", "id": reasoning["id"], "summary": [],
               "encrypted_content": reasoning["encrypted_content"]}]  # fmt: skip
    replay += calls + [{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"} for c in calls]
    create(server.base_url, input=[{"role": "user", "content": "Weather in Paris and Tokyo?"}, *replay],
           tools=tools, **ENCRYPTED)  # fmt: skip
    assistant = server.upstream.requests[-1]["messages"][1]
    assert assistant["reasoning_content"] == "I need the weather in two cities; I'll call get_weather for each."
    assert len(assistant["tool_calls"]) == 2


@pytest.mark.parametrize("blob", ["tampered", "foreign"])
def test_a_blob_that_does_not_authenticate_is_skipped(server, tmp_path, blob, caplog):
    server.upstream.push(exchange("llamacpp_reasoning_text"), text_exchange("ok"))
    first = create(server.base_url, input="q", **ENCRYPTED)
    sealed = first["output"][0]["encrypted_content"]
    if blob == "tampered":
        sealed = sealed[:40] + ("A" if sealed[40] != "A" else "B") + sealed[41:]
    else:
        sealed = Sealer(rotate_keys(tmp_path / "other-server")).seal("reasoning", "forged thoughts")
    history = [{"role": "user", "content": "q"},
               {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": sealed},
               {"role": "assistant", "content": "a"}, {"role": "user", "content": "again"}]  # fmt: skip
    create(server.base_url, input=history, **ENCRYPTED)
    assert "reasoning_content" not in server.upstream.requests[-1]["messages"][1]
    assert any("does not authenticate" in record.getMessage() for record in caplog.records)


def test_rotated_keys_still_open_old_blobs(tmp_path):
    before = Sealer.from_settings(tmp_path, [])
    blob = before.seal("reasoning", "thought")
    rotate_keys(tmp_path)
    after = Sealer.from_settings(tmp_path, [])
    assert after.open("reasoning", blob) == "thought"
    assert after.open("compaction", blob) is None, "a blob opens only as what it was sealed as"
    assert before.open("reasoning", after.seal("reasoning", "new")) is None
    assert (tmp_path / "sealing.keys").stat().st_mode & 0o777 == 0o600


def test_stored_reasoning_is_sealed_on_retrieval_when_asked(server):
    server.upstream.push(exchange("llamacpp_reasoning_text"))
    response = create(server.base_url, input="q")
    assert "encrypted_content" not in response["output"][0]
    retrieved = server.client().responses.retrieve(response["id"], include=["reasoning.encrypted_content"])
    assert retrieved.output[0].encrypted_content


@pytest.fixture
def summarizing(upstream, database_url, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        summarizer_model="test-model")  # fmt: skip
    with serve(create_app(settings)) as url:
        yield f"{url}/v1"


def test_reasoning_summary_from_the_summarizer(summarizing, upstream):
    upstream.push(exchange("llamacpp_reasoning_text"), text_exchange("I recalled that the capital is Paris."))
    with httpx.stream("POST", f"{summarizing}/responses", json={
        "model": "test-model", "input": "Capital?", "stream": True, "reasoning": {"summary": "concise"},
    }) as answer:  # fmt: skip
        events, _ = read_sse(answer.iter_lines())
    response = check_stream(events)
    reasoning = response["output"][0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "I recalled that the capital is Paris."}]
    kinds = [e["type"] for e in events]
    first_summary = kinds.index("response.reasoning_summary_part.added")
    assert kinds.index("response.reasoning_text.delta") < first_summary < kinds.index("response.output_text.delta")
    summarizer_request = upstream.requests[1]
    assert "one or two sentences" in summarizer_request["messages"][0]["content"]
    assert summarizer_request["messages"][1]["content"].startswith("The user asks for the capital of France.")


def test_no_summary_is_invented_without_a_summarizer(server):
    server.upstream.push(exchange("llamacpp_reasoning_text"))
    response = create(server.base_url, input="q", reasoning={"summary": "auto"})
    assert response["output"][0]["summary"] == [] and response["output"][0]["content"][0]["text"]
    assert len(server.upstream.requests) == 1


def test_compact_and_continue_from_the_compaction_item(server):
    server.upstream.push(text_exchange("The user is planning a trip to Paris; flights are booked."),
                         text_exchange("Then pack light."))  # fmt: skip
    client = server.client()
    history = [{"role": "developer", "content": "You are a travel agent."},
               {"role": "user", "content": "Plan my Paris trip."},
               {"role": "assistant", "content": "Booked flights."}]  # fmt: skip
    compacted = client.responses.compact(model="test-model", input=history)
    CompactedResponse.model_validate(compacted.model_dump(), strict=True)
    assert compacted.object == "response.compaction"
    (item,) = compacted.output
    assert item.type == "compaction" and "Paris" not in item.encrypted_content
    assert "[User]\nPlan my Paris trip." in server.upstream.requests[0]["messages"][1]["content"]

    follow = [history[0], item.model_dump(exclude_none=True), {"role": "user", "content": "What should I pack?"}]
    create(server.base_url, input=[history[1], *follow])
    messages = server.upstream.requests[-1]["messages"]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"] == ("You are a travel agent.\n\nSummary of the conversation so far:\n"
                                      "The user is planning a trip to Paris; flights are booked.")  # fmt: skip
    assert messages[1:] == [{"role": "user", "content": "What should I pack?"}], "compacted turns are left out"

    missing = httpx.post(f"{server.base_url}/responses/compact", json={"input": "x"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "model"
    empty = httpx.post(f"{server.base_url}/responses/compact", json={"model": "test-model"})
    assert empty.status_code == 400


def test_context_management_compacts_past_the_threshold(server):
    server.upstream.push(text_exchange("one"), text_exchange("Summary: asked twice about colors."),
                         text_exchange("Blue."))  # fmt: skip
    first = create(server.base_url, input="Name a color, any color, please.")
    body = {"input": "And another one?", "previous_response_id": first["id"],
            "context_management": [{"type": "compaction", "compact_threshold": 5}]}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/responses", json={"model": "test-model", "stream": True, **body}) as r:
        events, _ = read_sse(r.iter_lines())
    response = check_stream(events)
    assert [item["type"] for item in response["output"]] == ["compaction", "message"]
    assert server.upstream.requests[-1]["messages"] == [
        {"role": "system", "content": "Summary of the conversation so far:\nSummary: asked twice about colors."},
        {"role": "user", "content": "And another one?"},
    ]
    # The next turn builds on the compaction, not on what it replaced.
    server.upstream.push(text_exchange("Green."))
    create(server.base_url, input="One more?", previous_response_id=response["id"])
    assert [m["content"] for m in server.upstream.requests[-1]["messages"]] == [
        "Summary of the conversation so far:\nSummary: asked twice about colors.", "Blue.", "One more?",
    ]  # fmt: skip


def test_a_compaction_trigger_answers_exactly_one_compaction_item(server, tmp_path, caplog):
    """Codex's remote compaction (v2): the history ends with a `compaction_trigger`; the stream holds
    one `compaction` item, and that item replayed reaches the model as the summary."""
    server.upstream.push(text_exchange("Booked flights."),
                         text_exchange("The user plans a Paris trip; flights and a hotel are booked.",
                                       reasoning="Summarize."))  # fmt: skip
    first = create(server.base_url, input="Plan my Paris trip.", instructions="You are a travel agent.")
    tools = [{"type": "function", "name": "book", "parameters": {"type": "object"}}]
    body = {"model": "test-model", "stream": True, "previous_response_id": first["id"], "tools": tools,
            "instructions": "You are a travel agent.",
            "input": [{"role": "user", "content": "And a hotel?"}, {"role": "assistant", "content": "Booked one."},
                      {"type": "compaction_trigger"}]}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/responses", json=body, timeout=30) as answer:
        events, done = read_sse(answer.iter_lines())
    response = check_stream(events)
    assert done and [e["type"] for e in events if e["type"] != "response.compaction.compacting"] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.output_item.done",
        "response.completed"]  # fmt: skip
    (item,) = response["output"]
    ResponseCompactionItem.model_validate(item, strict=True)
    assert item["type"] == "compaction" and item["id"].startswith("cmp_") and "Paris" not in item["encrypted_content"]
    assert response["usage"]["input_tokens"] == 10 and response["usage"]["output_tokens"] == 5
    summarizing = server.upstream.requests[-1]
    assert "tools" not in summarizing and summarizing["messages"][0]["content"].startswith("You are compacting")
    transcript = summarizing["messages"][1]["content"]
    assert transcript.startswith("[User]\nPlan my Paris trip.") and transcript.endswith("[Assistant]\nBooked one.")
    assert "travel agent" not in transcript, "the instructions, sent each turn, are not summarized"

    # Codex's next turn: the user messages it keeps, the compaction item, the new question.
    server.upstream.push(text_exchange("Pack light."))
    retained = [{"role": "user", "content": "Plan my Paris trip."}, {"role": "user", "content": "And a hotel?"}]
    create(server.base_url, instructions="You are a travel agent.", store=False,
           input=[*retained, item, {"role": "user", "content": "What should I pack?"}])  # fmt: skip
    assert server.upstream.requests[-1]["messages"] == [
        {"role": "system", "content": "You are a travel agent.\n\nSummary of the conversation so far:\n"
                                      "The user plans a Paris trip; flights and a hotel are booked."},
        {"role": "user", "content": "What should I pack?"},
    ]  # fmt: skip

    # Sealed by another server: a logged skip, as any blob that does not authenticate.
    foreign = Sealer(rotate_keys(tmp_path / "other-server")).seal("compaction", "forged summary")
    server.upstream.push(text_exchange("ok"))
    create(server.base_url, store=False, input=[{"type": "compaction", "id": "cmp_1", "encrypted_content": foreign},
                                                {"role": "user", "content": "Go on."}])  # fmt: skip
    assert server.upstream.requests[-1]["messages"] == [{"role": "user", "content": "Go on."}]
    assert any("does not authenticate" in record.getMessage() for record in caplog.records)


def test_a_compaction_trigger_without_streaming_and_out_of_place(server):
    server.upstream.push(text_exchange("A summary."))
    history = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}]
    compacted = create(server.base_url, input=[*history, {"type": "compaction_trigger"}], store=False)
    assert [item["type"] for item in compacted["output"]] == ["compaction"] and compacted["output_text"] == ""

    misplaced = httpx.post(f"{server.base_url}/responses", json={
        "model": "test-model", "input": [{"type": "compaction_trigger"}, *history]})  # fmt: skip
    assert misplaced.status_code == 400 and misplaced.json()["error"]["param"] == "input[0]"
    empty = httpx.post(f"{server.base_url}/responses", json={
        "model": "test-model", "instructions": "Be brief.", "input": [{"type": "compaction_trigger"}]})  # fmt: skip
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "input"

    server.upstream.push(text_exchange(""))  # a model that writes no summary fails the response
    failed = httpx.post(f"{server.base_url}/responses", json={
        "model": "test-model", "input": [*history, {"type": "compaction_trigger"}]})  # fmt: skip
    assert failed.status_code == 502 and "no summary" in failed.json()["error"]["message"]


def test_truncation_auto_drops_the_oldest_turns_on_overflow(server):
    server.upstream.push(exchange("llamacpp_context_overflow"), text_exchange("fits now"))
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "old question"},
               {"role": "assistant", "content": "old answer"}, {"role": "user", "content": "new question"}]  # fmt: skip
    response = create(server.base_url, input=history, truncation="auto")
    assert response["output_text"] == "fits now"
    assert [m["content"] for m in server.upstream.requests[-1]["messages"]] == ["sys", "new question"]
    server.upstream.push(exchange("llamacpp_context_overflow"))
    refused = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", "input": history})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"


def test_websocket_two_turns_on_one_socket_with_store_false(server):
    server.upstream.push(text_exchange("Hello!"), text_exchange("You said hi."))
    client = server.client()
    with client.responses.connect() as connection:
        connection.send({"type": "response.create", "model": "test-model", "input": "hi", "store": False})
        first = [event for event in _until_terminal(connection)]
        response = check_stream(first)
        assert response["output_text"] == "Hello!"
        connection.send({"type": "response.create", "model": "test-model", "input": "What did I say?",
                         "store": False, "previous_response_id": response["id"]})  # fmt: skip
        second = check_stream(list(_until_terminal(connection)))
        assert second["output_text"] == "You said hi."
    assert [m["content"] for m in server.upstream.requests[-1]["messages"]] == ["hi", "Hello!", "What did I say?"]

    with client.responses.connect() as connection:  # a new socket has no cache
        connection.send({"type": "response.create", "model": "test-model", "input": "x", "store": False,
                         "previous_response_id": response["id"]})  # fmt: skip
        error = json.loads(connection.recv_bytes())
    assert error["type"] == "error" and error["status"] == 404
    assert error["error"]["code"] == "previous_response_not_found"


def test_websocket_failed_continuation_evicts_the_cache(server):
    server.upstream.push(text_exchange("first"))
    with server.client().responses.connect() as connection:
        connection.send({"type": "response.create", "model": "test-model", "input": "x", "store": False})
        response = check_stream(list(_until_terminal(connection)))
        bogus = [{"type": "function_call_output", "call_id": "call_nope", "output": "?"}]
        for expected in ("invalid_value", "previous_response_not_found"):
            connection.send({"type": "response.create", "model": "test-model", "input": bogus, "store": False,
                             "previous_response_id": response["id"]})  # fmt: skip
            error = json.loads(connection.recv_bytes())
            assert error["type"] == "error" and error["error"]["code"] == expected
        connection.send({"type": "nonsense"})
        assert json.loads(connection.recv_bytes())["status"] == 400


def test_websocket_messages_sent_during_a_response_wait_their_turn(server):
    """One response in flight per socket: what arrives meanwhile is read (the socket is watched
    for the client leaving) and handled after it, in order; a binary frame is no JSON object."""
    gate = threading.Event()
    held = text_exchange("first answer", pieces=3)
    held["chunks"].insert(2, {"gate": gate})
    server.upstream.push(held, text_exchange("second answer"))
    with server.client().responses.connect() as connection:
        connection.send({"type": "response.create", "model": "test-model", "input": "one", "store": False})
        created = json.loads(connection.recv_bytes())
        assert created["type"] == "response.created"
        connection.send({"type": "response.create", "model": "test-model", "input": "two", "store": False})
        connection._connection.send(b"\x00binary")  # the SDK's own socket (websockets)
        gate.set()
        first, second = check_stream([created, *_until_terminal(connection)]), check_stream(_until_terminal(connection))
        error = json.loads(connection.recv_bytes())
    assert (first["output_text"], second["output_text"]) == ("first answer", "second answer")
    assert error["type"] == "error" and error["error"]["code"] == "invalid_json"


def test_websocket_client_that_leaves_stops_its_response_at_once(server):
    """A socket closed mid-response ends the engine's request now, as a closed HTTP stream
    does, not when the engine sends its next token (here: never, until the test lets it)."""
    gate = threading.Event()
    held = text_exchange("never finished", pieces=3)
    held["chunks"].insert(2, {"gate": gate})
    server.upstream.push(held)
    try:
        with server.client().responses.connect() as connection:
            connection.send({"type": "response.create", "model": "test-model", "input": "x", "store": True})
            created = json.loads(connection.recv_bytes())
            while json.loads(connection.recv_bytes())["type"] != "response.output_text.delta":
                pass
        wait_for(lambda: server.upstream.cancelled == 1)
        assert httpx.get(f"{server.base_url}/responses/{created['response']['id']}").status_code == 404
    finally:
        gate.set()


def _until_terminal(connection) -> list[dict]:
    events = []
    while True:
        event = json.loads(connection.recv_bytes())
        events.append(event)
        if event["type"] in ("response.completed", "response.failed", "response.incomplete", "error"):
            return events


def test_websocket_requires_the_api_key(upstream, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        api_keys=["k"])  # fmt: skip
    with serve(create_app(settings)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0)
        with client.responses.connect() as connection:
            error = json.loads(connection.recv_bytes())
        assert error["status"] == 401 and error["error"]["code"] == "invalid_api_key"
