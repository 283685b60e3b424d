"""Tool search run by the client, as Claude Code and Codex run it: deferred tools stay out of the
engine's request until a search result names them, and from then on they are offered.

Claude Code declares tools with `defer_loading` and a `ToolSearch` tool whose results hold
`tool_reference` blocks; Codex offers a `tool_search` tool with `execution: "client"`, whose calls
come back as `tool_search_call` items and whose results (`tool_search_output`) bring the tools
found. Requests and answers are validated with the `anthropic` and `openai` SDKs' types.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
from anthropic.types.beta import BetaMessage, BetaMessageParam, BetaToolParam
from openai.types.responses import ResponseInputItemParam, ResponseToolSearchCall, ToolParam
from pydantic import TypeAdapter

from .harness import check_stream, read_sse, text_exchange, tool_call_exchange
from .test_claude_code import CLAUDE, run_claude, serve_gateway
from .test_messages import create
from .test_messages import stream as messages_stream
from .test_real_clients import CODEX, codex_home, run_codex

MCP_TOOLS = 60
"""The MCP-like tools of an agent with a few MCP servers."""
SCHEMA = {"type": "object", "properties": {"repository": {"type": "string", "description": "owner/name"},
          "query": {"type": "string", "description": "What to look for, in the service's own search syntax."},
          "limit": {"type": "integer", "description": "The most results to return."}},
          "required": ["repository", "query"]}  # fmt: skip


def description(index: int) -> str:
    return f"Tool {index} of the service: lists, reads and changes its records of kind {index}, page by page."


def claude_tools() -> list[dict[str, Any]]:
    """Claude Code's tools with tool search on: its ToolSearch, Read, and MCP tools deferred."""
    search = {"name": "ToolSearch", "description": "Fetches full schema definitions for deferred tools.",
              "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
    read = {"name": "Read", "description": "Reads a file.", "input_schema": {"type": "object", "properties": {
        "file_path": {"type": "string"}}, "required": ["file_path"]}}  # fmt: skip
    mcp = [{"name": f"mcp__service__tool_{index}", "description": description(index), "input_schema": SCHEMA,
            "defer_loading": True} for index in range(MCP_TOOLS)]  # fmt: skip
    tools = [search, read, *mcp]
    for tool in tools:
        TypeAdapter(BetaToolParam).validate_python(tool)
    return tools


def offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or ()}


def claude_history(*found: str) -> list[dict[str, Any]]:
    """A user's ask, the model's ToolSearch call and its result naming `found`."""
    messages = [
        {"role": "user", "content": "List the service's records."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch",
                                           "input": {"query": "records"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "tool_reference", "tool_name": name} for name in found]}]},
    ]
    for message in messages:
        TypeAdapter(BetaMessageParam).validate_python(message)
    return messages


def claude_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "test-model", "max_tokens": 1000, "messages": messages, "tools": claude_tools()}


def test_claude_codes_deferred_tools_wait_for_a_tool_reference(server):
    server.upstream.push(text_exchange("I will search."), text_exchange("Found them."))
    first = create(server.url, claude_body([{"role": "user", "content": "hi"}]))
    assert first.status_code == 200, first.text
    BetaMessage.model_validate(first.json(), strict=True)
    assert offered(server.upstream.requests[0]) == {"ToolSearch", "Read"}, "the deferred tools withheld"

    answer = create(server.url, claude_body(claude_history("mcp__service__tool_3", "mcp__service__tool_7")))
    assert answer.status_code == 200, answer.text
    BetaMessage.model_validate(answer.json(), strict=True)
    sent = server.upstream.requests[1]
    assert offered(sent) == {"ToolSearch", "Read", "mcp__service__tool_3", "mcp__service__tool_7"}
    [result] = [message for message in sent["messages"] if message["role"] == "tool"]
    assert f"Tool mcp__service__tool_3 is now available: {description(3)}" in result["content"]
    assert "Tool mcp__service__tool_7 is now available" in result["content"]


def test_claude_codes_found_tool_streamed(server):
    server.upstream.push(tool_call_exchange("mcp__service__tool_3", {"repository": "a/b", "query": "x"}))
    body = claude_body(claude_history("mcp__service__tool_3"))
    events = messages_stream(server.url, body)
    assert offered(server.upstream.requests[0]) == {"ToolSearch", "Read", "mcp__service__tool_3"}
    [call] = [e["content_block"] for e in events if e["type"] == "content_block_start"
              and e["content_block"]["type"] == "tool_use"]  # fmt: skip
    assert call["name"] == "mcp__service__tool_3"


# --- Codex: the Responses API --------------------------------------------------------------


SEARCH_TOOL = {"type": "tool_search", "execution": "client", "description": "# Tool discovery\nSearch the MCP tools.",
               "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                              "required": ["query"]}}  # fmt: skip
SHELL = {"type": "function", "name": "shell", "description": "Runs a command.", "strict": False, "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}  # fmt: skip


def namespace(*indexes: int, deferred: bool = True) -> dict[str, Any]:
    """An MCP server's tools as Codex declares them, and as its tool search returns them."""
    return {"type": "namespace", "name": "mcp__service__", "description": "The service's MCP tools.",
            "tools": [{"type": "function", "name": f"tool_{index}", "description": description(index),
                       "parameters": SCHEMA, "defer_loading": deferred} for index in indexes]}  # fmt: skip


def codex_tools(declared: bool = True) -> list[dict[str, Any]]:
    """Codex's tools with tool search on; `declared`: the deferred tools are in `tools` too."""
    tools = [SEARCH_TOOL, SHELL, *([namespace(*range(MCP_TOOLS))] if declared else [])]
    for tool in tools:
        TypeAdapter(ToolParam).validate_python(tool)
    return tools


def codex_input(*found: int) -> list[dict[str, Any]]:
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the records."}]},
        {"type": "tool_search_call", "call_id": "call_s", "execution": "client",
         "arguments": {"query": "records", "limit": 2}, "status": "completed"},
        {"type": "tool_search_output", "call_id": "call_s", "execution": "client", "status": "completed",
         "tools": [namespace(*found)]},
    ]
    for item in items:
        TypeAdapter(ResponseInputItemParam).validate_python(item)
    return items


def respond(server, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", **body}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_codexs_deferred_tools_wait_for_a_tool_search_output(server):
    server.upstream.push(text_exchange("I will search."), text_exchange("Found them."))
    respond(server, input="hi", tools=codex_tools())
    assert offered(server.upstream.requests[0]) == {"tool_search", "shell"}, "the deferred tools withheld"
    respond(server, input=codex_input(3, 7), tools=codex_tools())
    sent = server.upstream.requests[1]
    assert offered(sent) == {"tool_search", "shell", "tool_3", "tool_7"}
    [call] = [call for message in sent["messages"] for call in message.get("tool_calls") or ()]
    assert call["function"]["name"] == "tool_search"
    assert json.loads(call["function"]["arguments"]) == {"query": "records", "limit": 2}
    [result] = [message for message in sent["messages"] if message["role"] == "tool"]
    assert result["tool_call_id"] == "call_s" and f"tool_3: {description(3)}" in result["content"]


def test_tools_a_search_brings_are_callable_undeclared(server):
    """Codex lists no deferred tool up front: those its search returns become callable."""
    server.upstream.push(tool_call_exchange("tool_7", {"repository": "a/b", "query": "x"}))
    response = respond(server, input=codex_input(7), tools=codex_tools(declared=False))
    assert offered(server.upstream.requests[0]) == {"tool_search", "shell", "tool_7"}
    [call] = response["output"][-1:]
    assert call["type"] == "function_call" and call["name"] == "tool_7" and call["namespace"] == "mcp__service__"
    assert [tool["type"] for tool in response["tools"]] == ["tool_search", "function"], "the request's tools echoed"


def test_the_models_search_is_a_tool_search_call(server):
    arguments = {"query": "records of the service", "limit": 3}
    server.upstream.push(tool_call_exchange("tool_search", arguments, call_id="call_9"))
    response = respond(server, input="List the records.", tools=codex_tools())
    [item] = response["output"]
    ResponseToolSearchCall.model_validate(item, strict=True)
    assert item["type"] == "tool_search_call" and item["execution"] == "client" and item["status"] == "completed"
    assert item["call_id"] == "call_9" and item["arguments"] == arguments

    server.upstream.push(tool_call_exchange("tool_search", arguments, call_id="call_10"))
    with httpx.stream("POST", f"{server.base_url}/responses", timeout=30, json={
            "model": "test-model", "input": "List the records.", "tools": codex_tools(), "stream": True}) as answer:  # fmt: skip
        events, _ = read_sse(answer.iter_lines())
    final = check_stream(events)
    kinds = [(e["type"], e["item"]["type"]) for e in events if e["type"].startswith("response.output_item.")]
    assert kinds == [("response.output_item.added", "tool_search_call"), ("response.output_item.done", "tool_search_call")]
    done = next(e["item"] for e in events if e["type"] == "response.output_item.done")
    ResponseToolSearchCall.model_validate(done, strict=True)
    assert done["arguments"] == arguments and final["output"] == [done]


def test_a_stored_search_replays_with_previous_response_id(server):
    server.upstream.push(tool_call_exchange("tool_search", {"query": "records", "limit": 2}, call_id="call_s"),
                         tool_call_exchange("tool_3", {"repository": "a/b", "query": "x"}))  # fmt: skip
    first = respond(server, input="List the records.", tools=codex_tools())
    output = {"type": "tool_search_output", "call_id": "call_s", "execution": "client", "status": "completed",
              "tools": [namespace(3)]}  # fmt: skip
    second = respond(server, input=[output], tools=codex_tools(), previous_response_id=first["id"])
    sent = server.upstream.requests[1]
    assert offered(sent) == {"tool_search", "shell", "tool_3"}
    assert [message["role"] for message in sent["messages"]] == ["user", "assistant", "tool"]
    assert json.loads(sent["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"query": "records", "limit": 2}
    assert "tool_3" in sent["messages"][2]["content"]
    assert second["output"][-1]["name"] == "tool_3"


# --- measured ------------------------------------------------------------------------------


def prompt_tokens(request: dict[str, Any]) -> int:
    """The engine request's prompt at about four characters a token (its messages and tools)."""
    return len(json.dumps({"messages": request["messages"], "tools": request.get("tools") or []})) // 4


def test_deferral_measured(server, capsys):
    """An agent with 60 MCP tools: the engine's prompt with every tool, and with the tools deferred
    and a search result naming two (bench/RESULTS.md, Tool search)."""
    server.upstream.push(*(text_exchange("ok") for _ in range(4)))
    eager = [{key: value for key, value in tool.items() if key != "defer_loading"} for tool in claude_tools()]
    history = claude_history("mcp__service__tool_3", "mcp__service__tool_7")
    create(server.url, {**claude_body(history), "tools": eager})
    create(server.url, claude_body(history))
    respond(server, input=codex_input(3, 7), tools=[SEARCH_TOOL, SHELL, namespace(*range(MCP_TOOLS), deferred=False)])
    respond(server, input=codex_input(3, 7), tools=codex_tools())
    claude_all, claude_deferred, codex_all, codex_deferred = map(prompt_tokens, server.upstream.requests)
    with capsys.disabled():
        print(f"\nprompt tokens, {MCP_TOOLS} MCP tools: Messages {claude_all} -> {claude_deferred} deferred; "
              f"Responses {codex_all} -> {codex_deferred} deferred")  # fmt: skip
    assert claude_deferred * 10 < claude_all and codex_deferred * 10 < codex_all


# --- a real client: Codex --------------------------------------------------------------------

RECORDS_SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("records")
for index in range({count}):
    def tool(kind: str, index: int = index) -> str:
        return f"record {{index}} of kind {{kind}}"
    server.add_tool(tool, name=f"records_{{index}}", description=f"Lists the service's records of topic {{index}}.")
server.run()
'''


def test_codex_searches_its_mcp_tools(server, tmp_path):
    """Codex configured by `connect codex` (`supports_search_tool`), with an MCP server of 20 tools: the tools wait for its
    search, the model's search reaches Codex as a `tool_search_call`, and the tool Codex's
    search found is offered and called."""
    if not CODEX.exists():
        pytest.skip("Codex is not installed in tests/js")
    script = tmp_path / "records.py"
    script.write_text(RECORDS_SERVER.format(count=20))
    home, work = codex_home(tmp_path, server.base_url), tmp_path / "work"
    work.mkdir()
    config = home / "config.toml"
    # required: Codex starts its turn once the server has listed its tools, also when a loaded machine
    # takes seconds to start it (without, the turn may begin with none yet to search).
    config.write_text(config.read_text() + f'\n[mcp_servers.records]\ncommand = "{sys.executable}"\nargs = ["{script}"]\n'
                      "required = true\nstartup_timeout_sec = 120\n")
    catalog = json.loads(Path(tomllib.loads(config.read_text())["model_catalog_json"]).read_text())
    assert all(model["supports_search_tool"] for model in catalog["models"]), "as `connect codex` writes it"

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        names = offered(body)
        if last["role"] == "tool" and "records_7" in names and "record 7" not in str(last["content"]):
            return tool_call_exchange(next(n for n in names if n.endswith("records_7")), {"kind": "open"},
                                      call_id="call_records")  # fmt: skip
        if last["role"] == "tool":
            return text_exchange("Done: " + str(last["content"])[:200])
        return tool_call_exchange("tool_search", {"query": "records topic 7", "limit": 3}, call_id="call_search")

    server.upstream.responder = respond
    events = run_codex(home, work, "Find the records of topic 7")
    first = server.upstream.requests[0]
    assert "tool_search" in offered(first) and not any("records_" in name for name in offered(first))
    search_turn = next(request for request in server.upstream.requests if request["messages"][-1].get("tool_call_id") == "call_search")
    assert "records_7" in search_turn["messages"][-1]["content"], search_turn["messages"][-1]
    assert any(name.endswith("records_7") for name in offered(search_turn))
    assert "record 7 of kind open" in json.dumps(events)


# --- a real client: Claude Code ----------------------------------------------------------------


def test_claude_code_searches_its_mcp_tools(upstream, tmp_path):
    """Claude Code with `ENABLE_TOOL_SEARCH=true` and the same MCP server: the tools wait for its
    ToolSearch, whose `tool_reference` blocks make the one found callable."""
    if not CLAUDE.exists():
        pytest.skip("Claude Code is not installed in tests/js")
    script = tmp_path / "records.py"
    script.write_text(RECORDS_SERVER.format(count=20))
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"records": {"command": sys.executable, "args": [str(script)]}}}))
    wanted = "mcp__records__records_7"

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        names, results = offered(body), [m for m in body["messages"] if m["role"] == "tool"]
        if "ToolSearch" not in names:
            return text_exchange("OK.")  # a side request (a title…)
        if not results:
            return tool_call_exchange("ToolSearch", {"query": "records topic 7", "max_results": 3}, call_id="call_search")
        if wanted in names and len(results) == 1:
            return tool_call_exchange(wanted, {"kind": "open"}, call_id="call_records")
        return text_exchange("Done: " + str(results[-1]["content"])[:200])

    upstream.responder = respond
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with contextlib.contextmanager(serve_gateway)(upstream, tmp_path) as gateway:
        env = {"ANTHROPIC_BASE_URL": gateway, "ANTHROPIC_API_KEY": "test", "ENABLE_TOOL_SEARCH": "true"}
        events = run_claude(home, work, env, "--model", "claude-sonnet-4-5", "--mcp-config", str(servers),
                            prompt="Find the records of topic 7")  # fmt: skip
    searching = [body for body in upstream.requests if "ToolSearch" in offered(body)]
    assert not any(name.startswith("mcp__records__") for name in offered(searching[0])), "the MCP tools deferred"
    found = next(body for body in searching if any(m["role"] == "tool" for m in body["messages"]))
    assert wanted in offered(found) and f"Tool {wanted} is now available" in json.dumps(found["messages"])
    assert "record 7 of kind open" in json.dumps(events), events[-1]


def test_a_summary_reads_what_a_search_found(server):
    """Codex's remote compaction of a conversation with a tool search: the summarizer reads the
    search and the tools it found."""
    server.upstream.push(text_exchange("The user asked for records; tool_3 and tool_7 were found."))
    response = respond(server, input=[*codex_input(3, 7), {"type": "compaction_trigger"}], tools=codex_tools())
    assert [item["type"] for item in response["output"]] == ["compaction"]
    transcript = json.dumps(server.upstream.requests[0]["messages"])
    assert "tool_search" in transcript and f"tool_3: {description(3)}" in transcript
