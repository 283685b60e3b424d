"""Built-in tools the client runs, on open models (docs/tools.md, "Client-executed built-in
tools"): the model is offered a function, its call comes back as the tool's typed item with the
events OpenAI sends for it (the `tool_use` block Anthropic's clients expect, on the Messages API),
and the output the client replays reaches the model as the call's result.

A real gateway on loopback in front of the scripted engine, which calls the function; every event,
item and message is validated strictly against the `openai` and `anthropic` SDKs' types.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from agents import (
    Agent,
    ApplyPatchTool,
    AsyncComputer,
    ComputerTool,
    LocalShellCommandRequest,
    LocalShellTool,
    OpenAIResponsesModel,
    Runner,
    ShellCallOutcome,
    ShellCommandOutput,
    ShellCommandRequest,
    ShellResult,
    ShellTool,
    set_tracing_disabled,
)
from agents.apply_diff import apply_diff
from agents.editor import ApplyPatchOperation, ApplyPatchResult
from anthropic.types.beta import (
    BetaMessage,
    BetaMessageParam,
    BetaRawMessageStreamEvent,
    BetaToolUnionParam,
)
from openai import AsyncOpenAI
from openai.types.responses import ResponseInputItemParam, ResponseItem, ToolParam
from pydantic import TypeAdapter

from .conftest import DATABASES
from .harness import (
    check_response,
    check_stream,
    read_sse,
    strip_ids,
    text_exchange,
    tool_call_exchange,
)
from .test_attachments import PNG, gateway
from .test_messages import create as create_message
from .test_messages import fold, without_signatures
from .test_messages import stream as messages_stream

BETA_EVENT = TypeAdapter(BetaRawMessageStreamEvent)

SHELL = {"type": "shell", "environment": {"type": "local"}}
LOCAL_SHELL = {"type": "local_shell"}
APPLY_PATCH = {"type": "apply_patch"}
COMPUTER = {
    "type": "computer_use_preview",
    "display_width": 1024,
    "display_height": 768,
    "environment": "browser",
}


@dataclass
class Case:
    """One tool: what the engine calls, the item it becomes, and a replayed output of it."""

    tool: dict[str, Any]
    function: str
    arguments: dict[str, Any] | str
    expected: dict[str, Any]
    """The item's fields beyond its id, call id and status."""
    output: dict[str, Any]
    """The client's output item, without its call_id (unless its type names the call otherwise)."""
    read: str
    """What the model reads of that output (a part of its tool message)."""
    replayed: dict[str, Any] = field(default_factory=dict)
    """The arguments the model sees again for the replayed call (default: `arguments`)."""


CASES = {
    "shell": Case(
        SHELL, "shell", {"commands": ["ls -la", "cat notes.txt"], "timeout_ms": 5000},
        {"type": "shell_call", "action": {"commands": ["ls -la", "cat notes.txt"], "timeout_ms": 5000,
                                          "max_output_length": None}, "environment": {"type": "local"}},
        {"type": "shell_call_output", "max_output_length": None, "output": [
            {"stdout": "notes.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}},
            {"stdout": "", "stderr": "cat: notes.txt: Permission denied", "outcome": {"type": "exit", "exit_code": 1}}]},
        "[stderr]\ncat: notes.txt: Permission denied\n[exit code 1]"),
    "shell without an environment": Case(
        {"type": "shell"}, "shell", {"commands": ["sleep 100"]},
        {"type": "shell_call", "action": {"commands": ["sleep 100"], "timeout_ms": None, "max_output_length": None},
         "environment": {"type": "local"}},
        {"type": "shell_call_output", "output": [{"stdout": "", "stderr": "", "outcome": {"type": "timeout"}}]},
        "Command 1:\n[timed out]"),
    "local_shell": Case(
        LOCAL_SHELL, "local_shell", {"command": ["python3", "-c", "print(6 * 7)"], "working_directory": "/tmp"},
        {"type": "local_shell_call", "action": {"type": "exec", "command": ["python3", "-c", "print(6 * 7)"],
                                                "env": {}, "timeout_ms": None, "working_directory": "/tmp",
                                                "user": None}},
        # OpenAI's type names the call by `id` (the Agents SDK sends `call_id`: test_agents_sdk_*)
        {"type": "local_shell_call_output", "id": "call_7", "output": '{"output": "42\\n", "metadata": {"exit_code": 0}}'},
        '{"output": "42\\n", "metadata": {"exit_code": 0}}'),
    "apply_patch create": Case(
        APPLY_PATCH, "apply_patch", {"type": "create_file", "path": "hello.py", "diff": "+print('hello')\n"},
        {"type": "apply_patch_call", "operation": {"type": "create_file", "path": "hello.py",
                                                   "diff": "+print('hello')\n"}},
        {"type": "apply_patch_call_output", "status": "completed", "output": "Created hello.py"},
        "Created hello.py"),
    "apply_patch update": Case(
        APPLY_PATCH, "apply_patch", {"type": "update_file", "path": "hello.py",
                                     "diff": "@@\n-print('hello')\n+print('hello, world')\n"},
        {"type": "apply_patch_call", "operation": {"type": "update_file", "path": "hello.py",
                                                   "diff": "@@\n-print('hello')\n+print('hello, world')\n"}},
        {"type": "apply_patch_call_output", "status": "failed", "output": "hello.py: context not found"},
        "Error: the patch was not applied. hello.py: context not found"),
    "apply_patch delete": Case(
        APPLY_PATCH, "apply_patch", {"type": "delete_file", "path": "old.txt"},
        {"type": "apply_patch_call", "operation": {"type": "delete_file", "path": "old.txt"}},
        {"type": "apply_patch_call_output", "status": "completed"}, "The patch was applied."),
    "computer click": Case(
        COMPUTER, "computer", {"action": "click", "x": 120, "y": 44},
        {"type": "computer_call", "action": {"type": "click", "x": 120, "y": 44, "button": "left"},
         "pending_safety_checks": []},
        {"type": "computer_call_output", "output": {"type": "computer_screenshot", "image_url": PNG},
         "acknowledged_safety_checks": [{"id": "sc_1", "code": "malicious_instructions", "message": "ok"}]},
        "The screenshot taken after the action follows.", {"action": "click", "x": 120, "y": 44, "button": "left"}),
    "computer (GA)": Case(
        {"type": "computer"}, "computer", {"action": "type", "text": "hello"},
        {"type": "computer_call", "actions": [{"type": "type", "text": "hello"}], "pending_safety_checks": []},
        {"type": "computer_call_output", "output": {"type": "computer_screenshot", "file_id": "file_123"}},
        "The screenshot taken after the action follows."),
    "computer keypress": Case(
        COMPUTER, "computer", {"action": "keypress", "keys": "ctrl+l"},
        {"type": "computer_call", "action": {"type": "keypress", "keys": ["ctrl", "l"]}, "pending_safety_checks": []},
        {"type": "computer_call_output", "output": {"type": "computer_screenshot", "image_url": PNG}},
        "The screenshot taken after the action follows.", {"action": "keypress", "keys": ["ctrl", "l"]}),
}  # fmt: skip


def respond(server: Any, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(
        f"{server.base_url}/responses", json={"model": "test-model", **body}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return answer.json()


def stream(server: Any, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{server.base_url}/responses", json={"model": "test-model", **body, "stream": True},
                      timeout=30) as answer:  # fmt: skip
        assert answer.status_code == 200
        events, done = read_sse(answer.iter_lines())
    assert done
    return events


def offered(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["function"]["name"]: tool["function"] for tool in request.get("tools") or ()}


def tool_messages(request: dict[str, Any]) -> dict[str, str]:
    return {
        message["tool_call_id"]: message["content"]
        for message in request["messages"]
        if message["role"] == "tool"
    }


def called(request: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """The tool calls of a chat request's assistant turns, by id: (name, arguments)."""
    return {call["id"]: (call["function"]["name"], json.loads(call["function"]["arguments"]))
            for message in request["messages"] if message["role"] == "assistant"
            for call in message.get("tool_calls") or ()}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_a_call_comes_back_as_the_tools_item(server, name):
    case = CASES[name]
    TypeAdapter(ToolParam).validate_python(case.tool)
    server.upstream.push(*[tool_call_exchange(case.function, case.arguments, call_id="call_7")] * 2)  # type: ignore[arg-type]
    events = stream(server, {"input": "Go on.", "tools": [case.tool]})
    response = check_stream(events)
    [item] = response["output"]
    assert {
        key: value for key, value in item.items() if key not in ("id", "call_id", "status")
    } == case.expected
    assert item["call_id"] == "call_7" and item["status"] == "completed"
    assert [e["type"] for e in events[2:]] == ["response.output_item.added", "response.output_item.done",
                                               "response.completed"]  # fmt: skip
    assert events[2]["item"] == {**item, "status": "in_progress"}
    assert response["tools"] == [case.tool]
    function = offered(server.upstream.requests[0])[case.function]
    assert function["description"] and function["parameters"]["type"] == "object"

    folded = respond(server, {"input": "Go on.", "tools": [case.tool]})
    assert strip_ids(folded["output"]) == strip_ids(response["output"])


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
@pytest.mark.parametrize("name", list(CASES))
def test_the_replayed_output_reaches_the_model(server, name):
    """In a replayed history, and after `previous_response_id` (stored in either database)."""
    case = CASES[name]
    server.upstream.push(tool_call_exchange(case.function, case.arguments, call_id="call_7"))
    first = respond(server, {"input": "Go on.", "tools": [case.tool]})
    [call] = first["output"]
    output = case.output if "id" in case.output else {**case.output, "call_id": "call_7"}
    TypeAdapter(ResponseInputItemParam).validate_python(output)
    replayed_arguments = case.replayed or case.arguments

    server.upstream.push(text_exchange("Done."), text_exchange("Done."))
    history = [{"role": "user", "content": "Go on."}, call, output]
    answer = respond(server, {"input": history, "tools": [case.tool], "store": False})
    chained = respond(
        server, {"input": [output], "tools": [case.tool], "previous_response_id": first["id"]}
    )
    assert answer["output_text"] == chained["output_text"] == "Done."
    for request in server.upstream.requests[1:]:
        assert called(request) == {"call_7": (case.function, replayed_arguments)}
        assert case.read in tool_messages(request)["call_7"]
    # Listed, newest first, each in its listed type.
    items = httpx.get(
        f"{server.base_url}/responses/{chained['id']}/input_items", timeout=30
    ).json()["data"]
    assert [item["type"] for item in items] == [output["type"], call["type"], "message"]
    for item in items:
        TypeAdapter(ResponseItem).validate_python(item, strict=True)


def test_the_same_replay_without_the_tool_declared(server):
    """A thread whose tools changed: the call keeps its usual function name."""
    call = {
        "type": "shell_call",
        "call_id": "c1",
        "action": {"commands": ["pwd"]},
        "status": "completed",
    }
    output = {"type": "shell_call_output", "call_id": "c1", "output": [
        {"stdout": "/home/me\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}  # fmt: skip
    for item in (call, output):
        TypeAdapter(ResponseInputItemParam).validate_python(item)
    server.upstream.push(text_exchange("You are in /home/me."))
    respond(
        server,
        {"input": [{"role": "user", "content": "Where am I?"}, call, output], "store": False},
    )
    [request] = server.upstream.requests
    assert called(request) == {"c1": ("shell", {"commands": ["pwd"]})}
    assert tool_messages(request)["c1"] == "Command 1:\n[stdout]\n/home/me\n[exit code 0]"
    assert "tools" not in request or not request["tools"]


def test_a_screenshot_reaches_a_text_only_model_as_a_note(upstream, database_url):
    """The screenshot of a computer call output goes through the attachments stage: a model that
    reads text only gets the note in its place, never an error."""
    from responsekit.orchestration.attachments import TEXT_ONLY

    upstream.responder = lambda body: text_exchange("I clicked.")
    call = {"type": "computer_call", "id": "cu_1", "call_id": "c1", "pending_safety_checks": [], "status": "completed",
            "action": {"type": "screenshot"}}  # fmt: skip
    output = {"type": "computer_call_output", "call_id": "c1",
              "output": {"type": "computer_screenshot", "image_url": PNG}}  # fmt: skip
    with gateway(upstream, database_url, vision=False) as server:
        respond(
            server,
            {"input": [{"role": "user", "content": "Look."}, call, output], "tools": [COMPUTER]},
        )
    with gateway(upstream, database_url, vision=True) as server:
        respond(
            server,
            {"input": [{"role": "user", "content": "Look."}, call, output], "tools": [COMPUTER]},
        )
    text_only, vision = upstream.requests
    texts = json.dumps(text_only["messages"])
    assert TEXT_ONLY.replace('"', '\\"') in texts and "image_url" not in texts
    [shown] = [part for message in vision["messages"] if isinstance(message["content"], list)
               for part in message["content"] if part.get("type") == "image_url"]  # fmt: skip
    assert shown["image_url"]["url"] == PNG


@pytest.mark.parametrize(("tool", "function", "arguments", "expected"), [
    (LOCAL_SHELL, "local_shell", {"command": "ls -la | wc -l"}, {"command": ["bash", "-lc", "ls -la | wc -l"]}),
    (LOCAL_SHELL, "local_shell", "grep -r TODO .", {"command": ["bash", "-lc", "grep -r TODO ."]}),
    (SHELL, "shell", {"commands": "git status"}, {"commands": ["git status"]}),
    (SHELL, "shell", {"command": ["git", "log", "-n", "1"]}, {"commands": ["git log -n 1"]}),
    (APPLY_PATCH, "apply_patch", {"type": "create", "path": "a.txt", "diff": "one\ntwo"},
     {"type": "create_file", "path": "a.txt", "diff": "+one\n+two\n"}),
    (APPLY_PATCH, "apply_patch", {"operation": {"type": "delete_file", "path": "a.txt"}},
     {"type": "delete_file", "path": "a.txt"}),
    (APPLY_PATCH, "apply_patch", {"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+uno\n*** End Patch"},
     {"type": "update_file", "path": "a.txt", "diff": "@@\n-one\n+uno\n"}),
    (COMPUTER, "computer", {"action": {"type": "scroll", "x": 5, "y": 6, "scroll_y": 300}},
     {"type": "scroll", "x": 5, "y": 6, "scroll_x": 0, "scroll_y": 300}),
    (COMPUTER, "computer", {"action": "drag", "path": [[1, 2], {"x": 3, "y": 4}]},
     {"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]}),
])  # fmt: skip
def test_a_small_models_near_miss_is_coerced(server, tool, function, arguments, expected):
    server.upstream.push(tool_call_exchange(function, arguments) if isinstance(arguments, dict) else
                         raw_call_exchange(function, arguments))  # fmt: skip
    [item] = respond(server, {"input": "Go on.", "tools": [tool]})["output"]
    got = item.get("action") or item.get("operation")
    assert {key: value for key, value in got.items() if key in expected} == expected


@pytest.mark.parametrize(("tool", "function", "arguments"), [
    (APPLY_PATCH, "apply_patch", {"type": "rename_file", "path": "a.txt"}),
    (APPLY_PATCH, "apply_patch", {"type": "update_file", "path": "a.txt"}),
    (COMPUTER, "computer", {"action": "click"}),
    (SHELL, "shell", {"commands": []}),
])  # fmt: skip
def test_a_call_that_makes_no_item_fails_the_response(server, tool, function, arguments):
    """As a function call whose arguments are not JSON: the client gets no call it cannot act on."""
    server.upstream.push(tool_call_exchange(function, arguments))
    events = stream(server, {"input": "Go on.", "tools": [tool]})
    response = check_stream(events)
    assert response["status"] == "failed" and response["output"] == []
    assert f"The model called the `{tool['type']}` tool" in response["error"]["message"]


def test_a_local_shells_skills_are_told_the_model(server):
    skill = {
        "name": "release-notes",
        "description": "Writes release notes.",
        "path": "/home/me/skills/release-notes",
    }
    tool = {"type": "shell", "environment": {"type": "local", "skills": [skill]}}
    TypeAdapter(ToolParam).validate_python(tool)
    server.upstream.push(text_exchange("Ok."))
    respond(server, {"input": "Notes, please.", "tools": [tool]})
    description = offered(server.upstream.requests[0])["shell"]["description"]
    assert "- release-notes: Writes release notes. (/home/me/skills/release-notes)" in description


def test_tool_choice_forces_the_tool(server):
    server.upstream.push(*[tool_call_exchange("shell", {"commands": ["ls"]})] * 3)
    for choice in (
        {"type": "shell"},
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "shell"}]},
    ):
        respond(server, {"input": "Go.", "tools": [SHELL, APPLY_PATCH], "tool_choice": choice})
    forced, allowed = server.upstream.requests
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
    assert set(offered(allowed)) == {"shell"} and allowed["tool_choice"] == "required"
    computer = respond(
        server,
        {"input": "Go.", "tools": [COMPUTER], "tool_choice": {"type": "computer_use_preview"}},
    )
    assert server.upstream.requests[-1]["tool_choice"] == {
        "type": "function",
        "function": {"name": "computer"},
    }
    assert computer["tool_choice"] == {"type": "computer_use_preview"}


def raw_call_exchange(name: str, text: str) -> dict[str, Any]:
    """A call whose arguments are raw text, not JSON (as a small model writes them)."""
    exchange = tool_call_exchange(name, {})
    for chunk in exchange["chunks"]:
        choices = chunk["data"].get("choices") if isinstance(chunk["data"], dict) else None
        for call in (choices[0]["delta"].get("tool_calls") or ()) if choices else ():
            call["function"]["arguments"] = text if "id" not in call else ""
    return exchange


# --- the Messages API: Anthropic-defined client tools --------------------------------------------

ANTHROPIC_CASES = [
    ({"type": "bash_20250124", "name": "bash"}, {"command": "ls -la"}, "total 0"),
    ({"type": "bash_20241022", "name": "bash"}, {"restart": True}, "tool ran without output"),
    ({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000},
     {"command": "str_replace", "path": "/repo/a.py", "old_str": "x = 1", "new_str": "x = 2"},
     "Successfully replaced text at exactly one location."),
    ({"type": "text_editor_20250429", "name": "str_replace_based_edit_tool"},
     {"command": "view", "path": "/repo/a.py", "view_range": [1, 5]}, "1: x = 2"),
    ({"type": "text_editor_20250124", "name": "str_replace_editor"},
     {"command": "undo_edit", "path": "/repo/a.py"}, "Last edit undone."),
    ({"type": "text_editor_20241022", "name": "str_replace_editor"},
     {"command": "insert", "path": "/repo/a.py", "insert_line": 0, "new_str": "import os\n"}, "Inserted."),
    ({"type": "computer_20250124", "name": "computer", "display_width_px": 1280, "display_height_px": 800,
      "display_number": 1}, {"action": "left_click", "coordinate": [640, 400]}, None),
    ({"type": "computer_20241022", "name": "computer", "display_width_px": 1024, "display_height_px": 768},
     {"action": "screenshot"}, None),
    ({"type": "computer_20251124", "name": "computer", "display_width_px": 1280, "display_height_px": 800,
      "enable_zoom": True}, {"action": "zoom", "region": [0, 0, 640, 400]}, None),
    ({"type": "memory_20250818", "name": "memory"}, {"command": "view", "path": "/memories"},
     "Directory: /memories\n- notes.md"),
]  # fmt: skip
"""Tool, the input the model calls it with, and the text of its replayed result (None: a screenshot)."""


def messages_body(
    tool: dict[str, Any], messages: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"model": "test-model", "max_tokens": 1000, "tools": [tool],
            "messages": messages or [{"role": "user", "content": "Go on."}]}  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "arguments", "result"), ANTHROPIC_CASES, ids=[c[0]["type"] for c in ANTHROPIC_CASES]
)
def test_an_anthropic_tool_call_is_its_tool_use_block(server, tool, arguments, result):
    TypeAdapter(BetaToolUnionParam).validate_python(tool)
    server.upstream.push(*[tool_call_exchange(tool["name"], arguments, call_id="toolu_7")] * 2)
    events = messages_stream(server.url, messages_body(tool), adapter=BETA_EVENT)
    answer = create_message(server.url, messages_body(tool))
    assert answer.status_code == 200, answer.text
    message = BetaMessage.model_validate(answer.json(), strict=True)
    assert without_signatures(answer.json()) == without_signatures(fold(events))
    [block] = [block for block in message.content if block.type == "tool_use"]
    assert (block.id, block.name, block.input) == ("toolu_7", tool["name"], arguments)
    assert message.stop_reason == "tool_use"
    [function] = [t["function"] for t in server.upstream.requests[0]["tools"]]
    assert function["name"] == tool["name"] and function["description"]
    properties = function["parameters"]["properties"]
    assert set(arguments) <= set(properties), "the model is offered every argument it used"
    commands = properties.get("command", {}).get("enum", [])
    assert ("undo_edit" in commands) == (
        tool["type"] in ("text_editor_20250124", "text_editor_20241022")
    )
    if tool["type"].startswith("computer_"):
        assert (
            f"{tool['display_width_px']}x{tool['display_height_px']} pixels"
            in function["description"]
        )
        assert ("zoom" in properties["action"]["enum"]) == (tool["type"] == "computer_20251124")


@pytest.mark.parametrize(
    ("tool", "arguments", "result"), ANTHROPIC_CASES, ids=[c[0]["type"] for c in ANTHROPIC_CASES]
)
def test_an_anthropic_tool_result_reaches_the_model(server, tool, arguments, result):
    content: Any = (
        result
        if result is not None
        else [
            {
                "type": "image",
                "source": {
                    "type": "base64",
                    "media_type": "image/png",
                    "data": PNG.split(",", 1)[1],
                },
            }
        ]
    )
    messages = [{"role": "user", "content": "Go on."},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_7", "name": tool["name"],
                                                   "input": arguments}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_7", "content": content}]}]  # fmt: skip
    for message in messages:
        TypeAdapter(BetaMessageParam).validate_python(message)
    server.upstream.push(text_exchange("Done."))
    answer = create_message(server.url, messages_body(tool, messages))
    assert answer.status_code == 200, answer.text
    BetaMessage.model_validate(answer.json(), strict=True)
    [request] = server.upstream.requests
    assert called(request) == {"toolu_7": (tool["name"], arguments)}
    if result is not None:
        assert tool_messages(request)["toolu_7"] == result
    else:  # the image follows the tool message, for the model to see
        [image] = [part for message in request["messages"] if isinstance(message["content"], list)
                   for part in message["content"] if part.get("type") == "image_url"]  # fmt: skip
        assert image["image_url"]["url"] == PNG


def test_a_computer_tool_without_its_display_is_a_400(server):
    answer = create_message(
        server.url, messages_body({"type": "computer_20250124", "name": "computer"})
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "type": "invalid_request_error",
        "message": answer.json()["error"]["message"],
    }
    assert "display_width_px" in answer.json()["error"]["message"]


# --- the Agents SDK runs the tools itself ----------------------------------------------------------


def scripted_agent_engine(*calls: tuple[str, dict[str, Any]]) -> Any:
    """An engine that makes `calls` one per turn, then answers with the last tool result."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        results = [message for message in body["messages"] if message["role"] == "tool"]
        if len(results) < len(calls):
            name, arguments = calls[len(results)]
            return tool_call_exchange(name, arguments, call_id=f"call_{len(results)}")
        return text_exchange(f"Result: {results[-1]['content']}")

    return respond


def run_agent(server: Any, tools: list[Any], streamed: bool = False) -> Any:
    set_tracing_disabled(True)

    async def main() -> Any:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        model = OpenAIResponsesModel(model="test-model", openai_client=client)
        agent = Agent(name="worker", instructions="Use the tools.", tools=tools, model=model)
        if not streamed:
            return await Runner.run(agent, "Do the task.")
        run = Runner.run_streamed(agent, "Do the task.")
        async for _ in run.stream_events():
            pass
        return run

    return asyncio.run(main())


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_shell_tool(server, tmp_path, streamed):
    commands = ["echo hello > greeting.txt", "cat greeting.txt", "ls missing-file"]
    server.upstream.responder = scripted_agent_engine(("shell", {"commands": commands}))

    def execute(request: ShellCommandRequest) -> ShellResult:
        outputs = []
        for command in request.data.action.commands:
            done = subprocess.run(
                command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=30
            )
            outputs.append(ShellCommandOutput(stdout=done.stdout, stderr=done.stderr, command=command,
                                              outcome=ShellCallOutcome(type="exit", exit_code=done.returncode)))  # fmt: skip
        return ShellResult(output=outputs)

    result = run_agent(server, [ShellTool(executor=execute)], streamed)
    assert (tmp_path / "greeting.txt").read_text() == "hello\n"
    assert (
        "[stdout]\nhello" in result.final_output
        and "No such file or directory" in result.final_output
    )
    assert "[exit code 2]" in result.final_output
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]


def test_agents_sdk_apply_patch_tool(server, tmp_path):
    server.upstream.responder = scripted_agent_engine(
        ("apply_patch", {"type": "create_file", "path": "notes.md", "diff": "+# Notes\n+buy milk\n"}),
        ("apply_patch", {"type": "update_file", "path": "notes.md", "diff": "@@\n # Notes\n-buy milk\n+buy oat milk\n"}),
        ("apply_patch", {"type": "delete_file", "path": "old.txt"}),
    )  # fmt: skip
    (tmp_path / "old.txt").write_text("stale\n")

    class Editor:
        """Applies the operations inside tmp_path, with the SDK's own V4A diff reader."""

        def create_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
            (tmp_path / operation.path).write_text(
                apply_diff("", operation.diff or "", mode="create")
            )
            return ApplyPatchResult(output=f"Created {operation.path}")

        def update_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
            target = tmp_path / operation.path
            target.write_text(apply_diff(target.read_text(), operation.diff or ""))
            return ApplyPatchResult(output=f"Updated {operation.path}")

        def delete_file(self, operation: ApplyPatchOperation) -> ApplyPatchResult:
            (tmp_path / operation.path).unlink()
            return ApplyPatchResult(output=f"Deleted {operation.path}")

    result = run_agent(server, [ApplyPatchTool(editor=Editor())])
    assert (tmp_path / "notes.md").read_text().splitlines() == ["# Notes", "buy oat milk"]
    assert not (tmp_path / "old.txt").exists()
    assert result.final_output == "Result: Deleted old.txt"
    requests = server.upstream.requests
    assert tool_messages(requests[-1]) == {"call_0": "Created notes.md", "call_1": "Updated notes.md",
                                           "call_2": "Deleted old.txt"}  # fmt: skip


def test_agents_sdk_local_shell_tool(server, tmp_path):
    server.upstream.responder = scripted_agent_engine(
        ("local_shell", {"command": ["python3", "-c", "import os; print(6 * 7, os.getcwd())"],
                         "working_directory": str(tmp_path)}))  # fmt: skip

    def execute(request: LocalShellCommandRequest) -> str:
        action = request.data.action
        done = subprocess.run(
            action.command, cwd=action.working_directory, capture_output=True, text=True, timeout=30
        )
        return done.stdout

    result = run_agent(server, [LocalShellTool(executor=execute)])
    assert result.final_output == f"Result: 42 {tmp_path}\n"


def test_the_websocket_mode_gives_the_item_and_reads_the_output(server):
    """The WebSocket mode of /v1/responses shares the path: the shell_call, then its output on the
    same socket, continued from the socket's cache (`store: false`)."""
    server.upstream.push(tool_call_exchange("shell", {"commands": ["uname -s"]}, call_id="call_ws"),
                         text_exchange("It is Linux."))  # fmt: skip
    with server.client().responses.connect() as connection:
        connection.send({"type": "response.create", "model": "test-model", "input": "Which OS?", "tools": [SHELL],
                         "store": False})  # fmt: skip
        first = check_stream(until_terminal(connection))
        [call] = first["output"]
        assert call["type"] == "shell_call" and call["action"]["commands"] == ["uname -s"]
        output = {"type": "shell_call_output", "call_id": "call_ws", "output": [
            {"stdout": "Linux\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}  # fmt: skip
        connection.send({"type": "response.create", "model": "test-model", "input": [output], "tools": [SHELL],
                         "store": False, "previous_response_id": first["id"]})  # fmt: skip
        second = check_stream(until_terminal(connection))
    assert second["output_text"] == "It is Linux."
    request = server.upstream.requests[-1]
    assert called(request) == {"call_ws": ("shell", {"commands": ["uname -s"]})}
    assert tool_messages(request)["call_ws"] == "Command 1:\n[stdout]\nLinux\n[exit code 0]"


def until_terminal(connection: Any) -> list[dict[str, Any]]:
    events = []
    while not events or events[-1]["type"] not in (
        "response.completed",
        "response.failed",
        "error",
    ):
        events.append(json.loads(connection.recv_bytes()))
    return events


def test_agents_sdk_computer_tool(upstream, database_url):
    """The Agents SDK's ComputerTool (the GA `computer` tool for a model not named computer-use-
    preview): the click runs on the client's computer, and its screenshot reaches the model."""
    upstream.responder = scripted_agent_engine(("computer", {"action": "click", "x": 10, "y": 20}))
    done: list[tuple[str, Any]] = []

    class Screen(AsyncComputer):
        environment = "browser"
        dimensions = (800, 600)

        async def screenshot(self) -> str:
            return PNG.split(",", 1)[1]

        async def click(self, x: int, y: int, button: str) -> None:
            done.append(("click", (x, y, button)))

        async def double_click(self, x: int, y: int) -> None: ...
        async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None: ...
        async def type(self, text: str) -> None: ...
        async def wait(self) -> None: ...
        async def move(self, x: int, y: int) -> None: ...
        async def keypress(self, keys: list[str]) -> None: ...
        async def drag(self, path: list[tuple[int, int]]) -> None: ...

    with gateway(upstream, database_url, vision=True) as server:
        result = run_agent(server, [ComputerTool(computer=Screen())])
    assert done == [("click", (10, 20, "left"))]
    assert result.final_output == "Result: The screenshot taken after the action follows."
    [image] = [part for message in upstream.requests[-1]["messages"] if isinstance(message["content"], list)
               for part in message["content"] if part.get("type") == "image_url"]  # fmt: skip
    assert image["image_url"]["url"] == PNG
