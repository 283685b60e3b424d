"""Remote MCP servers as the `mcp` tool: listing, calls streaming and not, failures, approvals."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from mcp.server.mcpserver import MCPServer

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig
from responsekit.tools import ToolOutcome, run_guarded
from responsekit.tools.mcp import McpServer

from .harness import check_response, check_stream, read_sse, serve, text_exchange, tool_loop


def mcp_app(transport: str):
    server = MCPServer("calculator")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def divide(a: float, b: float) -> float:
        """Divide a by b."""
        return a / b

    return server.sse_app() if transport == "sse" else server.streamable_http_app()


@pytest.fixture(params=["streamable-http", "sse"])
def mcp_url(request):
    with serve(mcp_app(request.param)) as url:
        yield f"{url}/sse" if request.param == "sse" else f"{url}/mcp"


@pytest.fixture
def base_url(upstream, database_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url,
                        allowed_hosts=["127.0.0.1"])  # fmt: skip
    with serve(create_app(settings)) as url:
        yield f"{url}/v1"


def mcp_tool(url: str, **options) -> dict:
    return {"type": "mcp", "server_label": "calc", "server_url": url, "require_approval": "never", **options}


def test_listing_and_a_call_streamed(base_url, upstream, mcp_url):
    upstream.responder = tool_loop({"add": {"a": 2, "b": 3}})
    body = {"model": "test-model", "input": "What is 2+3?", "tools": [mcp_tool(mcp_url)], "stream": True}
    with httpx.stream("POST", f"{base_url}/responses", json=body, timeout=60) as answer:
        events, done = read_sse(answer.iter_lines())
    response = check_stream(events)
    assert done and response["status"] == "completed"
    listing, _reasoning, call, _reasoning_two, message = response["output"]
    assert listing["type"] == "mcp_list_tools" and [t["name"] for t in listing["tools"]] == ["add", "divide"]
    assert listing["tools"][0]["input_schema"]["required"] == ["a", "b"]
    assert (call["type"], call["name"], call["server_label"], call["output"]) == ("mcp_call", "add", "calc", "5")
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3} and call["status"] == "completed"
    assert message["content"][0]["text"] == "The tool said: 5"
    kinds = [e["type"] for e in events]
    for kind in ("response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed", "response.mcp_call.in_progress",
                 "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done", "response.mcp_call.completed"):
        assert kind in kinds, kind
    assert kinds.index("response.mcp_call.completed") < kinds.index("response.output_text.delta")
    second = upstream.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "add" and second[-1] == {
        "role": "tool", "tool_call_id": second[-2]["tool_calls"][0]["id"], "content": "5"}  # fmt: skip
    assert [t["function"]["name"] for t in upstream.requests[0]["tools"]] == ["add", "divide"]
    assert response["usage"]["total_tokens"] == 70 + 15, "usage adds up over both generations"


def test_a_failing_tool_and_the_model_goes_on(base_url, upstream, mcp_url):
    upstream.responder = tool_loop({"divide": {"a": 1, "b": 0}})
    answer = httpx.post(f"{base_url}/responses", json={"model": "test-model", "input": "1/0?",
                                                        "tools": [mcp_tool(mcp_url)]}, timeout=60)  # fmt: skip
    response = check_response(answer.json())
    call = next(item for item in response.output if item.type == "mcp_call")
    assert call.status == "failed" and call.error and call.output is None
    assert upstream.requests[1]["messages"][-1]["content"].startswith("Error: ")
    assert response.output_text.startswith("The tool said: Error: ")


BROKEN = "Error: The tool add failed on the server (RuntimeError: the session broke)."
"""What the model reads of a call whose running raised what it never should."""


def break_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Running any MCP call raises from now on, inside the server (which runs in this process)."""

    async def call(self: McpServer, tool: str, arguments: str) -> None:
        raise RuntimeError("the session broke")

    monkeypatch.setattr(McpServer, "call", call)


@pytest.mark.parametrize("streamed", [True, False])
def test_an_unexpected_error_running_a_call_fails_the_call_not_the_response(base_url, upstream, mcp_url, monkeypatch,
                                                                             streamed):  # fmt: skip
    break_calls(monkeypatch)
    upstream.responder = tool_loop({"add": {"a": 2, "b": 3}})
    body = {"model": "test-model", "input": "2+3?", "tools": [mcp_tool(mcp_url)], "stream": streamed}
    with httpx.stream("POST", f"{base_url}/responses", json=body, timeout=60) as answer:
        assert answer.status_code == 200, answer.read()
        if streamed:
            events, _ = read_sse(answer.iter_lines())
            response = check_stream(events)
            assert "response.mcp_call.failed" in [e["type"] for e in events]
        else:
            response = json.loads(answer.read())
            check_response(response)
    call = next(item for item in response["output"] if item["type"] == "mcp_call")
    assert call["status"] == "failed" and call["output"] is None
    assert call["error"]["message"] == BROKEN.removeprefix("Error: ")
    assert upstream.requests[1]["messages"][-1]["content"] == BROKEN
    assert response["status"] == "completed" and response["output_text"] == f"The tool said: {BROKEN}"


def test_an_approved_call_that_raises_fails_alone(base_url, upstream, mcp_url, monkeypatch):
    upstream.responder = tool_loop({"add": {"a": 20, "b": 22}})
    tools = [mcp_tool(mcp_url, require_approval="always")]
    first = httpx.post(f"{base_url}/responses", json={"model": "test-model", "input": "20+22?", "tools": tools}).json()
    break_calls(monkeypatch)  # the listing above ran; the approved call will not
    answer = httpx.post(f"{base_url}/responses", timeout=60, json={
        "model": "test-model", "tools": tools, "previous_response_id": first["id"],
        "input": [{"type": "mcp_approval_response", "approval_request_id": first["output"][-1]["id"], "approve": True}],
    })  # fmt: skip
    assert answer.status_code == 200, answer.text
    second = answer.json()
    check_response(second)
    call = second["output"][0]
    assert call["type"] == "mcp_call" and call["status"] == "failed"
    assert call["error"]["message"] == BROKEN.removeprefix("Error: ")
    assert upstream.requests[-1]["messages"][-1]["content"] == BROKEN
    assert second["output_text"] == f"The tool said: {BROKEN}"


def test_a_cancelled_call_is_not_a_failed_one():
    """A client that leaves cancels the call under way: the cancellation goes on up, it is not the
    call's failure."""

    async def cancelled(arguments: str) -> ToolOutcome:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(run_guarded("add", cancelled, "{}"))


def test_approval_round_trip_and_cached_listing(base_url, upstream, mcp_url):
    upstream.responder = tool_loop({"add": {"a": 20, "b": 22}})
    tools = [mcp_tool(mcp_url, require_approval={"always": {"tool_names": ["add"]}})]
    first = httpx.post(f"{base_url}/responses", json={"model": "test-model", "input": "20+22?", "tools": tools}).json()
    check_response(first)
    request = first["output"][-1]
    assert request["type"] == "mcp_approval_request" and request["name"] == "add"
    assert json.loads(request["arguments"]) == {"a": 20, "b": 22}
    assert len(upstream.requests) == 1, "nothing runs before the user approves"

    with httpx.stream("POST", f"{base_url}/responses", json={
        "model": "test-model", "tools": tools, "previous_response_id": first["id"], "stream": True,
        "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": True}],
    }) as answer:  # fmt: skip
        events, _ = read_sse(answer.iter_lines())
    second = check_stream(events)
    assert [item["type"] for item in second["output"]] == ["mcp_call", "reasoning", "message"], \
        "the chain's listing is reused, the approved call runs first"
    assert second["output"][0]["output"] == "42" and second["output"][0]["approval_request_id"] == request["id"]
    assert second["output_text"] == "The tool said: 42"
    assert upstream.requests[-1]["messages"][-1]["content"] == "42"


def test_declined_call_is_reported_to_the_model(base_url, upstream, mcp_url):
    upstream.responder = tool_loop({"add": {"a": 1, "b": 1}})
    tools = [mcp_tool(mcp_url, require_approval="always")]
    first = httpx.post(f"{base_url}/responses", json={"model": "test-model", "input": "1+1?", "tools": tools}).json()
    request = first["output"][-1]
    upstream.responder = lambda body: text_exchange("Understood, I will not add.")
    second = httpx.post(f"{base_url}/responses", json={
        "model": "test-model", "tools": tools, "previous_response_id": first["id"],
        "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": False,
                   "reason": "not now"}],
    }).json()  # fmt: skip
    check_response(second)
    assert [item["type"] for item in second["output"]] == ["message"]
    assert upstream.requests[-1]["messages"][-1]["content"] == "Error: The user declined this call: not now."


def test_private_server_urls_are_refused_by_default(upstream, database_url, mcp_url):
    settings = Settings(upstreams=[UpstreamConfig(base_url=upstream.url)], probe=False, database_url=database_url)
    with serve(create_app(settings)) as url:
        for server_url in (mcp_url, "http://169.254.169.254/latest/meta-data", "ftp://example.com/x"):
            answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "x",
                                                              "tools": [mcp_tool(server_url)]})  # fmt: skip
            assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_url"
        function = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
        answer = httpx.post(f"{url}/v1/responses", json={"model": "test-model", "input": "x",
                                                          "tools": [function, mcp_tool(mcp_url)]})  # fmt: skip
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "tools[1].server_url"
    assert upstream.requests == []


def test_an_unreachable_server_fails_its_listing_not_the_response(base_url, upstream, unused_port):
    upstream.push(text_exchange("I have no tools."))
    tools = [mcp_tool(f"http://127.0.0.1:{unused_port}/mcp")]
    with httpx.stream("POST", f"{base_url}/responses", json={"model": "test-model", "input": "x", "tools": tools,
                                                              "stream": True}) as answer:  # fmt: skip
        events, _ = read_sse(answer.iter_lines())
    response = check_stream(events)
    assert response["output"][0]["type"] == "mcp_list_tools" and response["output"][0]["error"]
    assert "response.mcp_list_tools.failed" in [e["type"] for e in events]
    assert response["output_text"] == "I have no tools."
