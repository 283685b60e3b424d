"""The Messages API's MCP connector (`mcp_servers` and `mcp_toolset`) on an open model.

A real MCP server on loopback (the calculator of test_mcp.py), a scripted engine and the real
gateway: the server lists the MCP server's tools, offers the enabled ones to the engine, runs
its calls in the pipeline's loop and answers with `mcp_tool_use` / `mcp_tool_result` blocks,
each event and message validated against the `anthropic` SDK's beta types and folded by the
SDK's own stream accumulator.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from anthropic.types.beta import (
    BetaMCPToolResultBlock,
    BetaMCPToolUseBlock,
    BetaMessage,
    BetaRawMessageStreamEvent,
)
from pydantic import TypeAdapter

from responsekit.api.messages.connector import MAX_MCP_CALLS
from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .harness import serve, text_exchange, tool_call_exchange, tool_loop
from .test_mcp import BROKEN, break_calls, mcp_app
from .test_messages import HEADERS, TOOLS, anthropic_error, client, stream

BETA_EVENT = TypeAdapter(BetaRawMessageStreamEvent)
BETA = "mcp-client-2025-11-20"
TOOLSET = {"type": "mcp_toolset", "mcp_server_name": "calc"}


@dataclass
class McpServer:
    """The calculator MCP server on loopback, and the `Authorization` header of each request it got."""

    url: str
    authorizations: list[str] = field(default_factory=list)


def recording(app: Any, seen: list[str]) -> Any:
    """`app`, noting the `Authorization` header of every HTTP request."""

    async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(dict(scope["headers"]).get(b"authorization", b"").decode())
        await app(scope, receive, send)

    return recorded


def run_mcp(transport: str) -> Iterator[McpServer]:
    seen: list[str] = []
    with serve(recording(mcp_app(transport), seen)) as url:
        yield McpServer(f"{url}/sse" if transport == "sse" else f"{url}/mcp", seen)


@pytest.fixture(params=["streamable-http", "sse"])
def any_mcp(request) -> Iterator[McpServer]:
    yield from run_mcp(request.param)


@pytest.fixture
def mcp() -> Iterator[McpServer]:
    yield from run_mcp("streamable-http")


@pytest.fixture
def url(upstream, database_url, tmp_path) -> Iterator[str]:
    """The gateway, allowed to reach MCP servers on loopback."""
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path, database_url=database_url, allowed_hosts=["127.0.0.1"])  # fmt: skip
    with serve(create_app(settings)) as base:
        yield base


def request(server_url: str, *, tools: list[Any] | None = None, content: str = "What is 2+3?", **server: Any) -> dict[str, Any]:
    return {"model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": content}],
            "mcp_servers": [{"type": "url", "url": server_url, "name": "calc", **server}],
            "tools": [TOOLSET] if tools is None else tools}  # fmt: skip


def post(base: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}/v1/messages", json=body, headers={**HEADERS, "anthropic-beta": BETA}, timeout=60)


def offered(upstream, turn: int = 0) -> list[str]:
    return [tool["function"]["name"] for tool in upstream.requests[turn].get("tools") or ()]


def starts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event["content_block"] for event in events if event["type"] == "content_block_start"]


# --- a listing and a call ---------------------------------------------------------------------


def test_a_call_streamed_and_folded_by_the_sdk(url, upstream, any_mcp):
    upstream.responder = tool_loop({"add": {"a": 2, "b": 3}})
    body = request(any_mcp.url)
    events = stream(url, body, adapter=BETA_EVENT)
    assert [block["type"] for block in starts(events)] == ["thinking", "mcp_tool_use", "mcp_tool_result", "thinking", "text"]
    _, use, result, _, text = starts(events)
    assert use["id"].startswith("mcptoolu_") and (use["name"], use["server_name"], use["input"]) == ("add", "calc", {})
    arguments = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"
                        and e["delta"]["type"] == "input_json_delta")  # fmt: skip
    assert json.loads(arguments) == {"a": 2, "b": 3}
    assert result == {"type": "mcp_tool_result", "tool_use_id": use["id"], "is_error": False,
                      "content": [{"type": "text", "text": "5"}]}  # fmt: skip
    text_deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"]
    assert text == {"type": "text", "text": ""} and "".join(text_deltas) == "The tool said: 5"
    assert events[-2]["delta"]["stop_reason"] == "end_turn" and "server_tool_use" not in events[-2]["usage"]
    assert offered(upstream) == ["add", "divide"], "every tool of the server, its schema as listed"
    assert upstream.requests[0]["tools"][0]["function"]["parameters"]["required"] == ["a", "b"]
    call, answer = upstream.requests[1]["messages"][-2:]
    assert call["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert answer == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "5"}

    # The SDK's own stream accumulation folds the same stream into its BetaMessage.
    sdk = client(url, timeout=60)
    with sdk.beta.messages.stream(**body, betas=[BETA]) as streamed:
        message = streamed.get_final_message()
    use_block, result_block = message.content[1], message.content[2]
    assert isinstance(use_block, BetaMCPToolUseBlock) and use_block.input == {"a": 2, "b": 3}
    assert use_block.server_name == "calc" and use_block.name == "add"
    assert isinstance(result_block, BetaMCPToolResultBlock) and result_block.tool_use_id == use_block.id
    assert not result_block.is_error and [part.text for part in result_block.content] == ["5"]  # type: ignore[union-attr]
    assert message.content[-1].text == "The tool said: 5" and message.stop_reason == "end_turn"  # type: ignore[union-attr]


def test_a_call_not_streamed_is_the_sdks_beta_message(url, upstream, mcp):
    upstream.responder = tool_loop({"add": {"a": 20, "b": 22}})
    answer = post(url, request(mcp.url))
    assert answer.status_code == 200, answer.text
    message = BetaMessage.model_validate(answer.json(), strict=True)
    assert [block.type for block in message.content] == ["thinking", "mcp_tool_use", "mcp_tool_result", "thinking", "text"]
    use, result = message.content[1], message.content[2]
    assert isinstance(use, BetaMCPToolUseBlock) and use.input == {"a": 20, "b": 22} and use.server_name == "calc"
    assert isinstance(result, BetaMCPToolResultBlock) and result.tool_use_id == use.id and not result.is_error
    assert answer.json()["content"][2]["content"] == [{"type": "text", "text": "42"}]
    assert message.content[-1].text == "The tool said: 42"  # type: ignore[union-attr]
    assert message.usage.output_tokens > 0 and message.usage.server_tool_use is None

    # The SDK's beta client sends the same request (its `betas` as the header) and reads the answer.
    typed = client(url, timeout=60).beta.messages.create(**request(mcp.url), betas=[BETA])
    assert [block.type for block in typed.content][1:3] == ["mcp_tool_use", "mcp_tool_result"]

    # count_tokens takes the same body (the tools are not listed for a count).
    counted = httpx.post(f"{url}/v1/messages/count_tokens", headers=HEADERS,
                         json={key: value for key, value in request(mcp.url).items() if key != "max_tokens"})  # fmt: skip
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0


# --- which tools are offered ------------------------------------------------------------------


@pytest.mark.parametrize(("tools", "server", "expected"), [
    ([TOOLSET], {}, ["add", "divide"]),
    ([TOOLSET | {"default_config": {"enabled": False}, "configs": {"divide": {"enabled": True}}}], {}, ["divide"]),
    ([TOOLSET | {"configs": {"divide": {"enabled": False}}}], {}, ["add"]),
    ([TOOLSET | {"default_config": {"enabled": False, "defer_loading": True},
                 "configs": {"add": {"enabled": True, "defer_loading": False}, "divide": {"defer_loading": True}}}],
     {}, ["add"]),
    ([], {}, ["add", "divide"]),  # the deprecated form (mcp-client-2025-04-04): no toolset, every tool
    ([], {"tool_configuration": {"enabled": True, "allowed_tools": ["divide"]}}, ["divide"]),
    ([], {"tool_configuration": {"enabled": False}}, []),
    ([TOOLSET | {"default_config": {"enabled": False}}], {}, []),
], ids=["all", "allowlist", "denylist", "deferred", "old-form", "old-allowed-tools", "old-disabled", "none-enabled"])  # fmt: skip
def test_the_engine_is_offered_exactly_the_enabled_tools(url, upstream, mcp, tools, server, expected):
    upstream.push(text_exchange("Fine."))
    answer = post(url, request(mcp.url, tools=[*TOOLS, *tools], **server))
    assert answer.status_code == 200, answer.text
    BetaMessage.model_validate(answer.json(), strict=True)
    assert offered(upstream) == ["get_weather", *expected], "the client's tool, then the enabled MCP tools"
    if not expected:
        assert mcp.authorizations == [], "a server none of whose tools is enabled is not even listed"


def test_two_servers_sharing_a_tool_name(url, upstream, mcp):
    """Each server is named by its own toolset; a tool name both have reaches the model prefixed by
    its server's name, and the block names the tool and the server as the client knows them."""
    upstream.responder = tool_loop({"other__add": {"a": 1, "b": 2}})
    body = request(mcp.url)
    body["mcp_servers"].append({"type": "url", "url": mcp.url, "name": "other"})
    body["tools"] = [TOOLSET | {"configs": {"divide": {"enabled": False}}},
                     {"type": "mcp_toolset", "mcp_server_name": "other", "default_config": {"enabled": False},
                      "configs": {"add": {"enabled": True}}}]  # fmt: skip
    answer = post(url, body)
    assert answer.status_code == 200, answer.text
    assert offered(upstream) == ["calc__add", "other__add"]
    use = BetaMessage.model_validate(answer.json(), strict=True).content[1]
    assert isinstance(use, BetaMCPToolUseBlock) and (use.name, use.server_name) == ("add", "other")


def test_the_authorization_token_reaches_the_server_as_a_bearer_token(url, upstream, mcp):
    upstream.responder = tool_loop({"add": {"a": 1, "b": 1}})
    answer = post(url, request(mcp.url, authorization_token="s3cret-token"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"][2]["content"] == [{"type": "text", "text": "2"}]
    assert mcp.authorizations and set(mcp.authorizations) == {"Bearer s3cret-token"}, "the listing and the call"
    assert "s3cret-token" not in answer.text and "s3cret-token" not in json.dumps(upstream.requests)


# --- failures ---------------------------------------------------------------------------------


def test_a_failing_call_is_an_error_result_and_the_model_goes_on(url, upstream, mcp):
    upstream.responder = tool_loop({"divide": {"a": 1, "b": 0}})
    body = request(mcp.url, content="1/0?")
    events = stream(url, body, adapter=BETA_EVENT)
    result = starts(events)[2]
    assert result["type"] == "mcp_tool_result" and result["is_error"] is True
    assert result["content"] == [{"type": "text", "text": "Error executing tool divide"}], "what the MCP server said"
    assert upstream.requests[1]["messages"][-1]["content"].startswith("Error: ")
    assert events[-2]["delta"]["stop_reason"] == "end_turn"

    answer = post(url, body)
    assert answer.status_code == 200, answer.text
    message = BetaMessage.model_validate(answer.json(), strict=True)
    assert isinstance(message.content[2], BetaMCPToolResultBlock) and message.content[2].is_error
    assert message.content[-1].text.startswith("The tool said: Error: ")  # type: ignore[union-attr]


@pytest.mark.parametrize("streamed", [True, False])
def test_an_unexpected_error_running_a_call_is_an_error_result(url, upstream, mcp, monkeypatch, streamed):
    break_calls(monkeypatch)
    upstream.responder = tool_loop({"add": {"a": 2, "b": 3}})
    body = request(mcp.url)
    if streamed:
        with client(url, timeout=60).beta.messages.stream(**body, betas=[BETA]) as events:
            message = events.get_final_message()
    else:
        answer = post(url, body)
        assert answer.status_code == 200, answer.text
        message = BetaMessage.model_validate(answer.json(), strict=True)
    result = message.content[2]
    assert isinstance(result, BetaMCPToolResultBlock) and result.is_error
    assert [part.text for part in result.content] == [BROKEN.removeprefix("Error: ")]  # type: ignore[union-attr]
    assert upstream.requests[1]["messages"][-1]["content"] == BROKEN
    assert message.content[-1].text == f"The tool said: {BROKEN}" and message.stop_reason == "end_turn"  # type: ignore[union-attr]


def test_an_unreachable_server_leaves_its_tools_out(url, upstream, unused_port, caplog):
    caplog.set_level(logging.WARNING, logger="responsekit.tools.mcp")
    upstream.push(text_exchange("I have no tools."))
    answer = post(url, request(f"http://127.0.0.1:{unused_port}/mcp", tools=[*TOOLS, TOOLSET]))
    assert answer.status_code == 200, answer.text
    message = BetaMessage.model_validate(answer.json(), strict=True)
    assert [block.type for block in message.content] == ["text"]
    assert offered(upstream) == ["get_weather"]
    assert "could not be listed" in caplog.text


def test_calls_are_bounded(url, upstream, mcp):
    """A model that calls as long as it may is offered no tools after MAX_MCP_CALLS calls (the
    engine gets `tool_choice: none`, which a chat engine is sent as no tools)."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("tools"):
            return text_exchange("Enough.")
        return tool_call_exchange("add", {"a": 1, "b": 1}, call_id=f"call_{len(body['messages'])}")

    upstream.responder = respond
    answer = post(url, request(mcp.url))
    assert answer.status_code == 200, answer.text
    kinds = [block["type"] for block in answer.json()["content"]]
    assert kinds.count("mcp_tool_use") == kinds.count("mcp_tool_result") == MAX_MCP_CALLS
    assert len(upstream.requests) == MAX_MCP_CALLS + 1 and all(body.get("tools") for body in upstream.requests[:-1])
    assert kinds[-1] == "text"


# --- a replayed turn --------------------------------------------------------------------------


def test_replayed_blocks_reach_the_engine(url, upstream, mcp):
    upstream.responder = tool_loop({"add": {"a": 2, "b": 3}})
    body = request(mcp.url)
    first = post(url, body).json()
    upstream.responder = lambda _: text_exchange("You are welcome.")
    listing = {"type": "mcp_tool_listing", "mcp_server_name": "calc", "tools": []}  # newer SDKs' block: ignored
    turns = [*body["messages"], {"role": "assistant", "content": [listing, *first["content"]]},
             {"role": "user", "content": "Thanks"}]  # fmt: skip
    answer = post(url, {**body, "messages": turns})
    assert answer.status_code == 200, answer.text
    BetaMessage.model_validate(answer.json(), strict=True)
    use = first["content"][1]
    user, call, result, said, thanks = upstream.requests[-1]["messages"]
    assert user["content"] == "What is 2+3?" and thanks["content"] == "Thanks"
    assert call["tool_calls"] == [{"id": use["id"], "type": "function",
                                   "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]  # fmt: skip
    assert call["reasoning_content"] == "I should call add.", "the thinking before the call, its signature opened"
    assert result == {"role": "tool", "tool_call_id": use["id"], "content": "5"}
    assert said["content"] == "The tool said: 5"

    # A failed call replayed: the model reads the error as it did (`Error: ` first); text content too.
    failed = [{"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "divide", "server_name": "calc", "input": {"a": 1, "b": 0}},
              {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": True,
               "content": [{"type": "text", "text": "division by zero"}]},
              {"type": "mcp_tool_use", "id": "mcptoolu_2", "name": "add", "server_name": "calc", "input": {"a": 1, "b": 1}},
              {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_2", "content": "2"}]  # fmt: skip
    turns = [*body["messages"], {"role": "assistant", "content": failed}, {"role": "user", "content": "And?"}]
    assert post(url, {**body, "messages": turns}).status_code == 200
    messages = upstream.requests[-1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "user"]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "divide", "arguments": '{"a": 1, "b": 0}'}
    assert messages[2] == {"role": "tool", "tool_call_id": "mcptoolu_1", "content": "Error: division by zero"}
    assert messages[4] == {"role": "tool", "tool_call_id": "mcptoolu_2", "content": "2"}


# --- malformed requests -----------------------------------------------------------------------


SERVER = {"type": "url", "url": "http://127.0.0.1:9/mcp", "name": "calc"}


@pytest.mark.parametrize(("servers", "tools"), [
    ([SERVER], [{"type": "mcp_toolset", "mcp_server_name": "other"}]),
    (None, [TOOLSET]),
    ([{"type": "url", "name": "calc"}], [TOOLSET]),
    ([{"type": "url", "url": "http://127.0.0.1:9/mcp"}], []),
    ([SERVER | {"type": "stdio"}], [TOOLSET]),
    ([SERVER, SERVER], [TOOLSET]),
    ([SERVER, SERVER | {"name": "calc2"}], [TOOLSET]),
    ([SERVER], [TOOLSET, TOOLSET]),
    ("calc", []),
    (["calc"], []),
    ([SERVER | {"authorization_token": 42}], [TOOLSET]),
    ([SERVER], [TOOLSET | {"default_config": {"enabled": "no"}}]),
    ([SERVER], [TOOLSET | {"configs": [{"add": {"enabled": True}}]}]),
    ([SERVER], [TOOLSET | {"configs": {"add": {"defer_loading": 1}}}]),
    ([SERVER | {"tool_configuration": {"allowed_tools": "add"}}], []),
    ([SERVER | {"tool_configuration": {"enabled": "yes"}}], []),
], ids=["unknown-server", "no-servers", "no-url", "no-name", "not-url", "duplicate-name", "unreferenced-server",
        "two-toolsets", "servers-not-a-list", "server-not-an-object", "token-not-a-string", "enabled-not-a-boolean",
        "configs-not-an-object", "defer-loading-not-a-boolean", "allowed-tools-not-a-list",
        "old-enabled-not-a-boolean"])  # fmt: skip
def test_malformed_connector_requests_are_400s(url, upstream, servers, tools):
    body = {"model": "test-model", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}], "tools": tools}
    if servers is not None:
        body["mcp_servers"] = servers
    anthropic_error(post(url, body), 400, "invalid_request_error")
    assert upstream.requests == []


def test_a_private_server_is_refused_without_allowed_hosts(server, mcp):
    """The URL policy applies to MCP servers (loopback here is not allowed by the settings)."""
    message = anthropic_error(post(server.url, request(mcp.url)), 400, "invalid_request_error")
    assert mcp.url in message
    assert server.upstream.requests == [] and mcp.authorizations == []
