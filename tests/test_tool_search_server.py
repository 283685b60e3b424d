"""Tool search run by the server, for API users: the Messages API's `tool_search_tool_regex_*` and
`tool_search_tool_bm25_*` tools, and the Responses API's `tool_search` with `execution: "server"`. The model calls the search as a function, reads the tools it
found, and calls one in the same answer; the client sees a `server_tool_use` block, a
`tool_search_tool_result` block naming the tools found, then the `tool_use`. Answers and events
are validated with the `anthropic` SDK's beta types
(https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from anthropic.types.beta import (
    BetaMessage,
    BetaMessageParam,
    BetaRawMessageStreamEvent,
    BetaToolSearchToolBm25_20251119Param,
    BetaToolSearchToolRegex20251119Param,
)
from openai.types.responses import ResponseToolSearchCall, ResponseToolSearchOutputItem, ToolParam
from pydantic import TypeAdapter

from responsekit.canonical.conversation import FunctionTool
from responsekit.tools.tool_search import bm25

from .harness import check_stream, read_sse, text_exchange, tool_call_exchange
from .test_messages import create
from .test_messages import stream as messages_stream
from .test_tool_search import MCP_TOOLS, SCHEMA, SHELL, description, namespace, offered, respond

REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
BM25 = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
TypeAdapter(BetaToolSearchToolRegex20251119Param).validate_python(REGEX)
TypeAdapter(BetaToolSearchToolBm25_20251119Param).validate_python(BM25)
READ = {"name": "Read", "description": "Reads a file.", "input_schema": {"type": "object", "properties": {
    "file_path": {"type": "string"}}, "required": ["file_path"]}}  # fmt: skip
WEATHER = {"name": "get_weather", "description": "The current weather and forecast for a city.", "defer_loading": True,
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


def body(search: dict[str, Any], messages: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    mcp = [{"name": f"mcp__service__tool_{index}", "description": description(index), "input_schema": SCHEMA,
            "defer_loading": True} for index in range(MCP_TOOLS)]  # fmt: skip
    return {"model": "test-model", "max_tokens": 1000, "tools": [search, READ, WEATHER, *mcp],
            "messages": messages or [{"role": "user", "content": "What is the weather in Paris?"}]}  # fmt: skip


def search_then_call(search: str, query: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return (tool_call_exchange(search, {"query": query}, call_id="call_search"),
            tool_call_exchange("get_weather", {"city": "Paris"}, call_id="call_weather"))  # fmt: skip


@pytest.mark.parametrize(("search", "query"), [(REGEX, "(?i)weather"), (BM25, "weather forecast for a city")])
def test_the_server_searches_and_the_model_calls_what_it_found(server, search, query):
    server.upstream.push(*search_then_call(search["name"], query))
    answer = create(server.url, body(search))
    assert answer.status_code == 200, answer.text
    message = BetaMessage.model_validate(answer.json(), strict=True)
    first, second = server.upstream.requests
    assert offered(first) == {search["name"], "Read"}, "the deferred tools withheld"
    assert offered(second) == {search["name"], "Read", "get_weather"}, "the found tool offered, the others not"
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert "Tool get_weather is now available: The current weather" in result["content"]
    use, found, call = message.content
    assert use.type == "server_tool_use" and use.name == search["name"] and use.input == {"query": query}
    assert found.type == "tool_search_tool_result" and found.tool_use_id == use.id
    assert found.content.type == "tool_search_tool_search_result"
    assert found.content.tool_references[0].tool_name == "get_weather"
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"


def test_the_search_streamed(server):
    server.upstream.push(*search_then_call("tool_search_tool_regex", "get_weather"))
    events = messages_stream(server.url, body(REGEX), adapter=TypeAdapter(BetaRawMessageStreamEvent))
    blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in blocks] == ["server_tool_use", "tool_search_tool_result", "tool_use"]
    assert blocks[1]["content"] == {"type": "tool_search_tool_search_result",
                                    "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}  # fmt: skip
    deltas = "".join(e["delta"].get("partial_json", "") for e in events if e["type"] == "content_block_delta"
                     and e["index"] == 0)  # fmt: skip
    assert deltas == '{"query": "get_weather"}'
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize("pattern", ["(unclosed", "a" * 201])
def test_a_bad_pattern_is_the_results_error(server, pattern):
    server.upstream.push(tool_call_exchange("tool_search_tool_regex", {"query": pattern}), text_exchange("No luck."))
    answer = create(server.url, body(REGEX))
    assert answer.status_code == 200, answer.text
    message = BetaMessage.model_validate(answer.json(), strict=True)
    assert [block.type for block in message.content] == ["server_tool_use", "tool_search_tool_result", "text"]
    error = message.content[1].content
    assert error.type == "tool_search_tool_result_error" and error.error_code == "invalid_tool_input"
    second = server.upstream.requests[1]
    assert offered(second) == {"tool_search_tool_regex", "Read"}
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert result["content"].startswith("Error: ")


def test_a_replayed_search_keeps_its_tools_offered(server):
    server.upstream.push(text_exchange("It is sunny."))
    history = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "tool_search_tool_regex", "input": {"query": "weather"}},
            {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1", "content": {
                "type": "tool_search_tool_search_result",
                "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "Sunny, 24°C."}]},
    ]  # fmt: skip
    for message in history:
        TypeAdapter(BetaMessageParam).validate_python(message)
    answer = create(server.url, body(REGEX, history))
    assert answer.status_code == 200, answer.text
    [sent] = server.upstream.requests
    assert offered(sent) == {"tool_search_tool_regex", "Read", "get_weather"}
    calls = [call["function"]["name"] for m in sent["messages"] for call in m.get("tool_calls") or ()]
    assert calls == ["tool_search_tool_regex", "get_weather"]
    found = next(m for m in sent["messages"] if m["role"] == "tool")
    assert "Tool get_weather is now available" in found["content"]


def test_bm25_ranks_by_the_query_words():
    tools = [FunctionTool("send_email", "Sends an email message.", None, deferred=True),
             FunctionTool("get_weather", "The weather for a city.", None, deferred=True),
             FunctionTool("listCalendarEvents", "Lists calendar events.", None, deferred=True)]  # fmt: skip
    assert [tool.name for tool in bm25("calendar events", tools)] == ["listCalendarEvents"]
    assert bm25("send an email", tools)[0].name == "send_email"
    assert bm25("unrelated", tools) == []


# --- the Responses API: a `tool_search` tool run by the server -----------------------------------


def responses_tools() -> list[dict[str, Any]]:
    tools = [{"type": "tool_search", "execution": "server"}, SHELL, namespace(*range(MCP_TOOLS)),
             {"type": "function", "name": "get_weather", "description": WEATHER["description"], "strict": False,
              "parameters": WEATHER["input_schema"], "defer_loading": True}]  # fmt: skip
    for tool in tools:
        TypeAdapter(ToolParam).validate_python(tool)
    return tools


def test_a_server_run_tool_search_on_the_responses_api(server):
    server.upstream.push(*search_then_call("tool_search_tool_bm25", "weather forecast"))
    response = respond(server, input="What is the weather in Paris?", tools=responses_tools())
    first, second = server.upstream.requests
    assert offered(first) == {"tool_search_tool_bm25", "shell"}, "the deferred tools withheld"
    assert offered(second) == {"tool_search_tool_bm25", "shell", "get_weather"}
    call, output, weather = response["output"]
    ResponseToolSearchCall.model_validate(call, strict=True)
    ResponseToolSearchOutputItem.model_validate(output, strict=True)
    assert call["execution"] == "server" and call["arguments"] == {"query": "weather forecast"}
    assert output["execution"] == "server" and output["call_id"] == call["call_id"]
    assert [tool["name"] for tool in output["tools"]] == ["get_weather"]
    assert weather["type"] == "function_call" and weather["name"] == "get_weather"

    server.upstream.push(*search_then_call("tool_search_tool_bm25", "weather forecast"))
    with httpx.stream("POST", f"{server.base_url}/responses", timeout=30, json={
            "model": "test-model", "input": "Weather?", "tools": responses_tools(), "stream": True}) as answer:  # fmt: skip
        events, _ = read_sse(answer.iter_lines())
    final = check_stream(events)
    assert [item["type"] for item in final["output"]] == ["tool_search_call", "tool_search_output", "function_call"]

    server.upstream.push(text_exchange("Sunny."))
    result = {"type": "function_call_output", "call_id": weather["call_id"], "output": "Sunny, 24°C."}
    respond(server, input=[result], tools=responses_tools(), previous_response_id=response["id"])
    assert offered(server.upstream.requests[-1]) == {"tool_search_tool_bm25", "shell", "get_weather"}, "kept offered"
