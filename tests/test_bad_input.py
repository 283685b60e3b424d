"""Bad input never gets a 5xx: size and nesting limits, and generated requests of every shape."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings
from hypothesis import strategies as st

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import serve, text_exchange


@pytest.fixture
def limited(upstream, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        max_body_bytes=4096, max_json_depth=20, max_input_items=5)  # fmt: skip
    with serve(create_app(settings)) as url:
        yield f"{url}/v1"


def test_limits(limited, upstream):
    url = f"{limited}/responses"
    big = {"model": "test-model", "input": "x" * 5000}
    assert httpx.post(url, json=big).status_code == 413
    chunked = httpx.post(url, content=iter([json.dumps(big).encode()[i : i + 500] for i in range(0, 5100, 500)]))
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"
    deep = '{"model": "test-model", "input": "x", "metadata": ' + "[" * 30 + "]" * 30 + "}"
    assert httpx.post(url, content=deep).json()["error"]["code"] == "invalid_json"
    very_deep = "[" * 100_000 + "]" * 100_000
    assert httpx.post(url, content=very_deep).status_code in (400, 413)
    items = [{"role": "user", "content": "x"}] * 6
    answer = httpx.post(url, json={"model": "test-model", "input": items})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "input"
    upstream.push(text_exchange("still fine"))
    assert httpx.post(url, json={"model": "test-model", "input": "x"}).json()["output_text"] == "still fine"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
ITEM_TYPES = ["message", "function_call", "function_call_output", "reasoning", "custom_tool_call", "item_reference",
              "compaction", "mcp_call", "file_search_call", "web_search_call", "nonsense", None]  # fmt: skip
ITEM = st.fixed_dictionaries(
    {},
    optional={"type": st.sampled_from(ITEM_TYPES), "role": st.sampled_from(["user", "assistant", "system", "developer",
              "tool", 3]), "content": JSON, "id": JSON, "call_id": JSON, "name": JSON, "arguments": JSON,
              "output": JSON, "summary": JSON, "encrypted_content": JSON, "input": JSON},
)  # fmt: skip
BODY = st.fixed_dictionaries(
    {"model": st.sampled_from(["test-model", "unknown", "", 7])},
    optional={"input": st.one_of(st.text(max_size=30), st.lists(st.one_of(ITEM, JSON), max_size=6), JSON),
              "tools": st.lists(st.one_of(JSON, st.fixed_dictionaries({"type": st.sampled_from(
                  ["function", "custom", "namespace", "mcp", "web_search", "file_search"])}, optional={
                  "name": JSON, "parameters": JSON, "tools": JSON, "server_url": JSON, "server_label": JSON})),
                  max_size=3),
              "tool_choice": JSON, "temperature": JSON, "max_output_tokens": JSON, "text": JSON, "reasoning": JSON,
              "include": JSON, "previous_response_id": JSON, "conversation": JSON, "store": JSON,
              "truncation": JSON, "context_management": JSON, "metadata": JSON, "background": st.just(False)},
)  # fmt: skip


def test_generated_requests_never_get_a_5xx(server):
    server.upstream.responder = lambda body: text_exchange("ok")
    client = httpx.Client(base_url=server.base_url, timeout=30)

    @hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(BODY, st.booleans())
    def check(body: dict, stream: bool) -> None:
        answer = client.post("/responses", json={**body, "stream": stream})
        assert answer.status_code < 500, answer.text
        if answer.status_code >= 400:
            assert set(answer.json()["error"]) == {"message", "type", "param", "code"}

    check()
    for raw in (b"\xff\xfe{\x00", b'{"model": "test-model", "input": "x", "temperature": NaN}',
                b'{"model": "test-model", "input": "x", "metadata": {"a": Infinity}}'):  # fmt: skip
        assert client.post("/responses", content=raw).status_code == 400
    assert client.get("/models").status_code == 200, "the server is still up"


def test_limits_hold_on_every_endpoint_that_reads_a_body(limited, upstream):
    huge = "x" * 5000
    deep = "[" * 30 + "]" * 30
    for path, body in [("/chat/completions", {"model": "test-model", "messages": [{"role": "user", "content": huge}]}),
                       ("/conversations", {"metadata": {"a": huge}}),
                       ("/responses/compact", {"model": "test-model", "input": huge}),
                       ("/responses/input_tokens", {"model": "test-model", "input": huge})]:  # fmt: skip
        answer = httpx.post(f"{limited}{path}", json=body)
        assert answer.status_code == 413 and answer.json()["error"]["code"] == "request_too_large", path
        nested = httpx.post(f"{limited}{path}", content=f'{{"model": "test-model", "metadata": {deep}}}')
        assert nested.status_code == 400 and nested.json()["error"]["code"] == "invalid_json", path
    # Invalid UTF-8 inside a string, and an escaped lone surrogate (valid JSON, odd text).
    raw = b'{"model": "test-model", "input": "caf\xe9 \xff"}'
    assert httpx.post(f"{limited}/responses", content=raw).json()["error"]["code"] == "invalid_json"
    upstream.push(text_exchange("fine"), text_exchange("fine"))
    answer = httpx.post(f"{limited}/responses", content=b'{"model": "test-model", "input": "half \\ud800 pair"}')
    assert answer.status_code == 200 and answer.json()["output_text"] == "fine"
    assert upstream.requests[-1]["messages"][-1]["content"] == "half \ud800 pair", "passed on escaped"
    echoed = b'{"model": "test-model", "input": "x", "instructions": "lone \\ud800"}'  # echoed in the Response
    upstream.push(text_exchange("fine"))
    answer = httpx.post(f"{limited}/responses", content=echoed)
    assert answer.status_code == 200 and answer.json()["instructions"] == "lone \ud800"
    chat = b'{"model": "test-model", "messages": [{"role": "user", "content": "\\udfff"}]}'
    assert httpx.post(f"{limited}/chat/completions", content=chat).status_code == 200
    count = httpx.post(f"{limited}/responses/input_tokens", content=b'{"model": "test-model", "input": "\\ud800"}')
    assert count.status_code == 200 and count.json()["input_tokens"] > 0


def test_malformed_mcp_tools_are_400s(server):
    for tool in ({"type": "mcp"}, {"type": "mcp", "server_label": 3, "server_url": "https://example.com/mcp"},
                 {"type": "mcp", "server_label": "x", "server_url": "https://example.com/mcp", "headers": ["a"]},
                 {"type": "mcp", "server_label": "x", "server_url": "https://example.com/mcp", "authorization": {}},
                 {"type": "mcp", "server_label": "x"}, {"type": "mcp", "server_label": "x", "server_url": 5}):  # fmt: skip
        answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", "input": "x", "tools": [tool]})
        assert answer.status_code == 400, (tool, answer.text)
    assert server.upstream.requests == []
