"""The SSE wire: ASCII-only JSON whatever the text, and frames batched without being held back."""

from __future__ import annotations

import json

import httpx

from responsekit.api.streaming import COALESCE_LIMIT
from responsekit.canonical.sse import json_bytes

from .harness import check_stream, read_sse, slow_exchange, text_exchange


def test_json_is_ascii_and_round_trips_what_orjson_refuses():
    values = ["line\u2028break\u2029", "caf\u00e9 \U0001F680", "lone \ud800 surrogate", 2**70, {1: "int key"},
              {"plain": [1, 2.5, None, True]}]  # fmt: skip
    for value in values:
        data = json_bytes(value)
        assert data.isascii()
        expected = {"1": "int key"} if value == {1: "int key"} else value
        assert json.loads(data) == expected
    assert json_bytes("\u2028") == b'"\\u2028"'


def test_stream_text_with_line_separators_and_surrogates_is_escaped_on_the_wire(server):
    text = "a\u2028b \u00fc \ud83d"
    for _ in range(2):
        script = text_exchange(text, pieces=2)
        for chunk in script["chunks"]:  # escaped, as an engine sends a lone surrogate
            chunk["data"] = chunk["data"] if isinstance(chunk["data"], str) else json.dumps(chunk["data"])
        server.upstream.push(script)
    body = {"model": "test-model", "input": "x", "stream": True}
    raw = httpx.post(f"{server.base_url}/responses", json=body).content
    assert raw.isascii() and b"\\u2028" in raw and b"\\ud83d" in raw
    events, done = read_sse(raw.decode().split("\n"))
    assert done and check_stream(events)["output_text"] == text
    chat = httpx.post(f"{server.base_url}/chat/completions",
                      json={"model": "test-model", "messages": [{"role": "user", "content": "x"}], "stream": True})  # fmt: skip
    assert chat.content.isascii() and b"\\u2028" in chat.content


def test_a_stream_larger_than_a_batch_arrives_whole_and_in_order(server):
    text = "".join(f"<{n}>" for n in range(COALESCE_LIMIT // 2))
    server.upstream.push(text_exchange(text, pieces=7))
    with httpx.stream("POST", f"{server.base_url}/responses",
                      json={"model": "test-model", "input": "x", "stream": True}, timeout=60) as answer:  # fmt: skip
        events, done = read_sse(answer.iter_lines())
    assert done and check_stream(events)["output_text"] == text


def test_events_are_sent_as_they_are_made_not_held_for_a_batch(server):
    server.upstream.time_scale = 1.0
    server.upstream.push(slow_exchange(40, 0.1))
    with httpx.stream("POST", f"{server.base_url}/responses",
                      json={"model": "test-model", "input": "x", "stream": True}, timeout=30) as answer:  # fmt: skip
        lines = answer.iter_lines()
        seen = []
        for line in lines:
            seen.append(line)
            if "response.output_text.delta" in line:
                break
        # The engine is still streaming (four seconds of deltas): the first delta was not held back.
        assert server.upstream.finished == 0
        events, done = read_sse([*seen, *lines])
    assert done and check_stream(events)["output_text"] == "x" * 40
