"""Responses' `code_interpreter` and hosted `shell` tools on open models (docs/code-execution.md,
"Code interpreter and shell"): the model is offered `python` (or `shell`), the server runs its
code in the key's container (real bubblewrap), and the client gets `code_interpreter_call` items
(`shell_call` and `shell_call_output`) with OpenAI's events; files the code writes come back as
`container_file_citation` annotations, readable through the Containers API.

A real gateway on loopback in front of the scripted engine, which writes the code; every event and
item is validated strictly against the `openai` SDK's types (`harness.check_stream`).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, CodeInterpreterTool, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.items import ToolCallItem
from openai import AsyncOpenAI
from openai.types.responses import ResponseCodeInterpreterToolCall

from responsekit.app import create_app
from responsekit.config import SandboxLimits, Settings, UpstreamConfig

from .conftest import DATABASES
from .harness import (
    ScriptedUpstream,
    check_response,
    check_stream,
    read_sse,
    serve,
    text_exchange,
    tool_call_exchange,
)
from .test_code_execution import sandbox  # noqa: F401  (the fixture: skips without bubblewrap)

KEYS = ("key-one", "key-two")
AUTO = {"type": "code_interpreter", "container": {"type": "auto"}}
CHART = (
    "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
    "plt.plot([1, 4, 9])\nplt.show()\n"
    "open('/mnt/data/squares.csv', 'w').write('n,sq\\n1,1\\n2,4\\n3,9\\n')\nprint('rows', 3)"
)


class Gateway:
    def __init__(self, url: str, upstream: ScriptedUpstream) -> None:
        self.base_url = f"{url}/v1"
        self.upstream = upstream

    def client(self, key: str = KEYS[0]) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0)

    def post(self, key: str = KEYS[0], **body: Any) -> httpx.Response:
        return httpx.post(f"{self.base_url}/responses", json={"model": "test-model", **body},
                          headers={"Authorization": f"Bearer {key}"}, timeout=120)  # fmt: skip

    def create(self, key: str = KEYS[0], **body: Any) -> dict[str, Any]:
        answer = self.post(key, **body)
        assert answer.status_code == 200, answer.text
        response = answer.json()
        check_response(response)
        return response

    def stream(self, key: str = KEYS[0], **body: Any) -> list[dict[str, Any]]:
        with httpx.stream("POST", f"{self.base_url}/responses", json={"model": "test-model", "stream": True, **body},
                          headers={"Authorization": f"Bearer {key}"}, timeout=120) as answer:  # fmt: skip
            assert answer.status_code == 200, answer.read()
            events, done = read_sse(answer.iter_lines())
        assert done
        check_stream(events)
        return events


@contextmanager
def gateway(database_url: str, root: Path, **options: Any) -> Iterator[Gateway]:
    upstream = ScriptedUpstream()
    with serve(upstream.app) as engine:
        settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=f"{engine}/v1")], probe=False,
                            data_dir=root, database_url=database_url, api_keys=list(KEYS), **options)  # fmt: skip
        with serve(create_app(settings)) as url:
            yield Gateway(url, upstream)


@pytest.fixture
def server(sandbox: Path, database_url: str) -> Iterator[Gateway]:  # noqa: F811
    with gateway(database_url, sandbox) as running:
        yield running


def python_call(code: str, call_id: str = "call_1") -> dict[str, Any]:
    return tool_call_exchange("python", {"code": code}, call_id=call_id)


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def of_item(events: list[dict[str, Any]], item_id: str) -> list[str]:
    """The types of an item's events, each run of deltas as one."""
    kinds: list[str] = []
    for event in events:
        mine = event.get("item_id") == item_id or (event.get("item") or {}).get("id") == item_id
        if mine and not (kinds and kinds[-1] == event["type"] and event["type"].endswith(".delta")):
            kinds.append(event["type"])
    return kinds


# --- code_interpreter -------------------------------------------------------------------------


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_streamed_call_its_events_outputs_and_the_file_it_wrote(server):
    server.upstream.push(python_call(CHART),
                         text_exchange("Three rows: [download](sandbox:/mnt/data/squares.csv)."))  # fmt: skip
    events = server.stream(input="Square 1 to 3 and plot it.", tools=[AUTO], include=["code_interpreter_call.outputs"])
    response = events[-1]["response"]
    assert response["status"] == "completed"
    call, message = response["output"]
    assert call["type"] == "code_interpreter_call" and call["id"].startswith("ci_")
    assert call["code"] == CHART and call["status"] == "completed"
    assert call["container_id"].startswith("cntr_")
    logs, image = call["outputs"]
    assert logs == {"type": "logs", "logs": "rows 3\n"}
    assert image["type"] == "image" and image["url"].startswith("data:image/png;base64,")
    assert base64.b64decode(image["url"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert of_item(events, call["id"]) == [
        "response.output_item.added", "response.code_interpreter_call.in_progress",
        "response.code_interpreter_call_code.delta", "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting", "response.code_interpreter_call.completed",
        "response.output_item.done"]  # fmt: skip
    added = next(e for e in events if e["type"] == "response.output_item.added" and e["item"]["id"] == call["id"])
    assert added["item"]["container_id"] == call["container_id"] and added["item"]["outputs"] is None
    # the model read the logs, and was told of the image and the file
    (read,) = tool_messages(server.upstream.requests[1])
    assert read.startswith("rows 3") and "image" in read and "/mnt/data/squares.csv" in read
    # the file as a citation over its link, readable through the Containers API
    text = message["content"][0]["text"]
    (citation,) = message["content"][0]["annotations"]
    assert citation["type"] == "container_file_citation" and citation["filename"] == "squares.csv"
    assert citation["container_id"] == call["container_id"]
    assert text[citation["start_index"] : citation["end_index"]] == "sandbox:/mnt/data/squares.csv"
    assert any(e["type"] == "response.output_text.annotation.added" for e in events)
    content = server.client().containers.files.content.retrieve(citation["file_id"], container_id=call["container_id"])
    assert content.read() == b"n,sq\n1,1\n2,4\n3,9\n"
    listed = server.client().containers.files.retrieve(citation["file_id"], container_id=call["container_id"])
    assert listed.source == "assistant" and listed.path == "/mnt/data/squares.csv"
    # another key sees no such container
    with pytest.raises(openai.NotFoundError):
        server.client(KEYS[1]).containers.retrieve(call["container_id"])


def test_variables_persist_across_calls_and_responses(server):
    """Two calls in one response share the kernel; a later response names the container by id,
    and one continuing the conversation with an auto container gets the same one back."""
    server.upstream.push(python_call("x = 41", "call_1"), python_call("x += 1\nprint(x)", "call_2"),
                         text_exchange("x is 42."))  # fmt: skip
    first = server.create(input="Count.", tools=[AUTO])
    calls = [item for item in first["output"] if item["type"] == "code_interpreter_call"]
    assert [c["code"] for c in calls] == ["x = 41", "x += 1\nprint(x)"]
    assert all(c["outputs"] is None for c in calls), "outputs only when included"
    container = calls[0]["container_id"]
    assert calls[1]["container_id"] == container
    assert tool_messages(server.upstream.requests[2])[-1].strip() == "42"
    stored = httpx.get(f"{server.base_url}/responses/{first['id']}", headers={"Authorization": f"Bearer {KEYS[0]}"})
    assert check_response(stored.json()).output[0].type == "code_interpreter_call"
    assert stored.json()["output"] == first["output"], "stored as answered, what the model read kept apart"

    server.upstream.push(python_call("print(x * 2)"), text_exchange("84."))
    second = server.create(input="Double it.", tools=[{"type": "code_interpreter", "container": container}])
    assert second["output"][0]["container_id"] == container
    assert tool_messages(server.upstream.requests[-1])[-1].strip() == "84"

    server.upstream.push(python_call("print(x - 2)"), text_exchange("40."))
    third = server.create(input="Less two.", tools=[AUTO], previous_response_id=first["id"])
    assert third["output"][0]["container_id"] == container, "auto reuses the conversation's live container"
    assert tool_messages(server.upstream.requests[-1])[-1].strip() == "40"


def test_a_call_of_code_interpreter_by_that_name_runs_the_code(server):
    """Llama 3.x writes raw Python after `<|python_tag|>`, parsed as a `code_interpreter` call."""
    server.upstream.push(tool_call_exchange("code_interpreter", {"code": "print(3 * 3)"}), text_exchange("9."))
    response = server.create(input="Square 3.", tools=[AUTO])
    call = response["output"][0]
    assert call["type"] == "code_interpreter_call" and call["code"] == "print(3 * 3)" and call["status"] == "completed"
    assert tool_messages(server.upstream.requests[-1]) == ["9"]


def test_the_files_given_to_an_auto_container_are_read_by_the_code(server):
    client = server.client()
    uploaded = client.files.create(file=("prices.csv", b"item,price\ntea,3\ncake,5\n"), purpose="user_data")
    code = "import csv\nrows = list(csv.DictReader(open('/mnt/data/prices.csv')))\nprint(sum(int(r['price']) for r in rows))"
    server.upstream.push(python_call(code), text_exchange("8 in all."))
    tool = {"type": "code_interpreter", "container": {"type": "auto", "file_ids": [uploaded.id], "memory_limit": "4g"}}
    response = client.responses.create(model="test-model", input="Sum the prices.", tools=[tool])  # type: ignore[list-item]
    call = response.output[0]
    assert call.type == "code_interpreter_call" and call.status == "completed"
    assert tool_messages(server.upstream.requests[-1])[-1].strip() == "8"
    made = client.containers.retrieve(call.container_id)
    assert made.memory_limit == "4g" and made.status == "running"
    assert [f.path for f in client.containers.files.list(call.container_id)] == ["/mnt/data/prices.csv"]


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_replayed_call_reaches_the_model(server):
    """Given as input (its included logs), and from the stored history (what the model read)."""
    replayed = {"type": "code_interpreter_call", "id": "ci_old", "code": "print(2 ** 10)", "status": "completed",
                "container_id": "cntr_gone", "outputs": [{"type": "logs", "logs": "1024\n"}]}  # fmt: skip
    server.upstream.push(text_exchange("It was 1024."))
    server.create(input=[{"role": "user", "content": "Compute 2**10."}, replayed,
                         {"role": "assistant", "content": "1024."}, {"role": "user", "content": "What was it?"}],
                  tools=[AUTO])  # fmt: skip
    messages = server.upstream.requests[-1]["messages"]
    (call,) = [c for m in messages for c in m.get("tool_calls") or ()]
    assert call["function"]["name"] == "python"
    assert json.loads(call["function"]["arguments"]) == {"code": "print(2 ** 10)"}
    assert tool_messages(server.upstream.requests[-1]) == ["1024"]

    server.upstream.push(python_call("print('stored ' + str(6 * 7))"), text_exchange("42."))
    first = server.create(input="Compute.", tools=[AUTO])
    server.upstream.push(text_exchange("It was 42."))
    server.create(input="And?", previous_response_id=first["id"])  # no tools now: the call is still read
    messages = server.upstream.requests[-1]["messages"]
    (call,) = [c for m in messages for c in m.get("tool_calls") or ()]
    assert json.loads(call["function"]["arguments"]) == {"code": "print('stored ' + str(6 * 7))"}
    assert tool_messages(server.upstream.requests[-1]) == ["stored 42"]


def test_an_endless_loop_is_a_failed_call_the_model_reads(sandbox, database_url):  # noqa: F811
    with gateway(database_url, sandbox, sandbox_limits=SandboxLimits(wall_seconds=2)) as server:
        server.upstream.push(python_call("while True:\n    pass"), text_exchange("It ran too long."))
        events = server.stream(input="Loop.", tools=[AUTO], include=["code_interpreter_call.outputs"])
        call, message = events[-1]["response"]["output"]
        assert call["status"] == "failed" and message["content"][0]["text"] == "It ran too long."
        assert "time limit" in tool_messages(server.upstream.requests[-1])[0]
        assert "response.code_interpreter_call.completed" in of_item(events, call["id"])


def test_a_bad_container_is_the_requests_error(server):
    """Another key's container is a 404 (never a 403, which would say it exists), as is an
    unknown one; a missing or malformed `container` is a 400. Nothing reaches the engine."""
    server.upstream.push(python_call("print(1)"), text_exchange("ok"))
    mine = server.create(input="Go.", tools=[AUTO])["output"][0]["container_id"]
    before = len(server.upstream.requests)
    for key, container in ((KEYS[1], mine), (KEYS[0], "cntr_nothing")):
        answer = server.post(key, input="Go.", tools=[{"type": "code_interpreter", "container": container}])
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["param"] == "tools[0].container"
    for tool in ({"type": "code_interpreter"}, {"type": "code_interpreter", "container": {"type": "bigger"}},
                 {"type": "shell", "environment": {"type": "container_reference"}}):  # fmt: skip
        answer = server.post(input="Go.", tools=[tool])
        assert answer.status_code == 400, answer.text
    with pytest.raises(openai.NotFoundError):
        server.client(KEYS[1]).responses.create(model="test-model", input="Go.",
                                                tools=[{"type": "code_interpreter", "container": mine}])  # fmt: skip
    assert len(server.upstream.requests) == before


def test_without_a_sandbox_the_tool_is_refused_clearly(database_url, tmp_path):
    with gateway(database_url, tmp_path, sandbox="off") as server:
        answer = server.post(input="Go.", tools=[AUTO])
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["code"] == "sandbox_unavailable" and "bubblewrap" in error["message"]
        assert server.upstream.requests == []


def test_the_tool_choice_forces_the_code(server):
    server.upstream.push(python_call("print(1)"), text_exchange("1"))
    server.create(input="Go.", tools=[AUTO], tool_choice={"type": "code_interpreter"}, store=False)
    first = server.upstream.requests[0]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "python"}}
    (offered,) = first["tools"]
    assert offered["function"]["name"] == "python" and "/mnt/data" in offered["function"]["description"]

    server.upstream.push(python_call("print(2)"), text_exchange("2"))
    weather = {"type": "function", "name": "weather", "parameters": {"type": "object", "properties": {}}}
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "code_interpreter"}]}
    server.create(input="Go.", tools=[weather, AUTO], tool_choice=choice)
    allowed = server.upstream.requests[-2]
    assert allowed["tool_choice"] == "required" and [t["function"]["name"] for t in allowed["tools"]] == ["python"]


def test_a_background_response_runs_the_code(server):
    server.upstream.push(python_call("print(sum(range(5)))"), text_exchange("10."))
    started = server.create(input="Sum.", tools=[AUTO], background=True, store=True)
    client = server.client()
    for _ in range(600):
        done = client.responses.retrieve(started["id"])
        if done.status not in ("queued", "in_progress"):
            break
        asyncio.run(asyncio.sleep(0.05))
    assert done.status == "completed" and done.output[0].type == "code_interpreter_call"
    assert tool_messages(server.upstream.requests[-1]) == ["10"]


# --- the hosted shell -------------------------------------------------------------------------


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_the_hosted_shell_streams_its_call_and_output_items(server):
    client = server.client()
    container = client.containers.create(name="shell")
    client.containers.files.create(container.id, file=("notes.txt", b"alpha\nbeta\n"))
    arguments = {"commands": ["wc -l notes.txt", "cat missing.txt"], "max_output_length": 200}
    server.upstream.push(tool_call_exchange("shell", arguments), text_exchange("Two lines."))
    tool = {"type": "shell", "environment": {"type": "container_reference", "container_id": container.id}}
    events = server.stream(input="Count the lines.", tools=[tool])
    call, output, message = events[-1]["response"]["output"]
    assert call["type"] == "shell_call" and call["status"] == "completed" and call["call_id"] == "call_1"
    assert call["action"] == {"commands": arguments["commands"], "timeout_ms": None, "max_output_length": 200}
    assert call["environment"] == {"type": "container_reference", "container_id": container.id}
    assert output["type"] == "shell_call_output" and output["call_id"] == "call_1"
    assert output["status"] == "completed" and output["max_output_length"] == 200
    first, second = output["output"]
    assert first == {"stdout": "2 notes.txt\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
    assert second["outcome"] == {"type": "exit", "exit_code": 1} and "missing.txt" in second["stderr"]
    assert message["content"][0]["text"] == "Two lines."
    # each command added, streamed and done; then each command's output
    for position, command in enumerate(arguments["commands"]):
        mine = [e for e in events if e.get("command_index") == position and e["type"].startswith("response.shell_call_command")]
        assert mine[0]["type"] == "response.shell_call_command.added" and mine[-1]["command"] == command
        assert "".join(e.get("delta", "") for e in mine) == command
    assert of_item(events, output["id"]) == [
        "response.output_item.added", "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done", "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done", "response.output_item.done"]  # fmt: skip
    read = tool_messages(server.upstream.requests[-1])[0]
    assert "2 notes.txt" in read and "[exit code 1]" in read

    # the call and its output, stored, reach the model of the next turn
    server.upstream.push(text_exchange("Still two."))
    server.create(input="And now?", previous_response_id=events[-1]["response"]["id"], tools=[tool])
    messages = server.upstream.requests[-1]["messages"]
    (replayed,) = [c for m in messages for c in m.get("tool_calls") or ()]
    assert replayed["function"]["name"] == "shell"
    assert json.loads(replayed["function"]["arguments"])["commands"] == arguments["commands"]
    assert "2 notes.txt" in tool_messages(server.upstream.requests[-1])[0]


def test_a_shell_command_past_its_time_is_a_timeout_outcome(server):
    server.upstream.push(tool_call_exchange("shell", {"commands": ["sleep 10"], "timeout_ms": 500}),
                         text_exchange("It timed out."))  # fmt: skip
    tool = {"type": "shell", "environment": {"type": "container_auto"}}
    response = server.client().responses.create(model="test-model", input="Wait.", tools=[tool])  # type: ignore[list-item]
    call, output, _ = response.output
    assert call.type == "shell_call" and call.environment is not None
    assert call.environment.type == "container_reference"
    assert output.type == "shell_call_output" and output.output[0].outcome.type == "timeout"
    assert "[timed out]" in tool_messages(server.upstream.requests[-1])[0]


# --- clients and models -----------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True])
def test_the_agents_sdks_code_interpreter_tool(server, streamed):
    """The Agents SDK's `CodeInterpreterTool` end to end: the code runs, the run's items hold the
    typed call, and the final answer reads the result; the second turn of the agent (the whole
    history as input) continues in the same container."""
    set_tracing_disabled(True)

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text_exchange(f"The code printed {str(last['content']).strip()}.")
        turn = sum(m["role"] == "user" for m in body["messages"])
        return python_call("total = 6 * 7\nprint(total)" if turn == 1 else "print(total + 1)", f"call_{turn}")

    server.upstream.responder = respond

    async def main() -> list[Any]:
        client = AsyncOpenAI(base_url=server.base_url, api_key=KEYS[0], max_retries=0)
        model = OpenAIResponsesModel(model="test-model", openai_client=client)
        tool = CodeInterpreterTool(tool_config={"type": "code_interpreter", "container": {"type": "auto"}})
        agent = Agent(name="analyst", instructions="Use Python.", tools=[tool], model=model)
        results = []
        history: Any = "Compute 6 times 7."
        for _ in range(2):
            if streamed:
                run = Runner.run_streamed(agent, history)
                async for _ in run.stream_events():
                    pass
                result: Any = run
            else:
                result = await Runner.run(agent, history)
            results.append(result)
            history = result.to_input_list() + [{"role": "user", "content": "And one more?"}]
        return results

    first, second = asyncio.run(main())
    assert first.final_output == "The code printed 42."
    assert second.final_output == "The code printed 43.", "the same kernel, found from the replayed call"
    calls = [item.raw_item for item in first.new_items if isinstance(item, ToolCallItem)]
    assert len(calls) == 1 and isinstance(calls[0], ResponseCodeInterpreterToolCall)
    assert calls[0].code == "total = 6 * 7\nprint(total)" and calls[0].status == "completed"
    later = [item.raw_item for item in second.new_items if isinstance(item, ToolCallItem)]
    assert later[0].container_id == calls[0].container_id


def test_the_in_process_default_model_with_code_interpreter_offered(sandbox, gemma_gguf):  # noqa: F811
    """The embedded Gemma 3 270M, a base model, may or may not call `python`: offered it, the
    request completes without error and every event validates, streamed and not."""
    from responsekit.backends.default_model import DEFAULT_MODEL_NAME
    from responsekit.config import LocalModel

    model = LocalModel(name=DEFAULT_MODEL_NAME, path=gemma_gguf, context=2048, max_output_tokens=48)
    settings = Settings(probe=False, data_dir=sandbox, database_url=f"sqlite:///{sandbox / 'state.db'}",
                        models=[model])  # fmt: skip
    body = {"model": DEFAULT_MODEL_NAME, "input": "Use python to compute 12 * 12.", "tools": [AUTO],
            "include": ["code_interpreter_call.outputs"], "max_tool_calls": 2}  # fmt: skip
    with serve(create_app(settings)) as url:
        answer = httpx.post(f"{url}/v1/responses", json=body, timeout=300)
        assert answer.status_code == 200, answer.text
        response = check_response(answer.json())
        assert response.status in ("completed", "incomplete") and response.error is None
        with httpx.stream("POST", f"{url}/v1/responses", json={**body, "stream": True}, timeout=300) as streamed:
            events, done = read_sse(streamed.iter_lines())
        assert done
        final = check_stream(events)
        assert final["status"] in ("completed", "incomplete") and final["error"] is None
        for item in final["output"]:
            if item["type"] == "code_interpreter_call":
                assert item["container_id"].startswith("cntr_") and item["status"] in ("completed", "failed")


# --- attacks through the tools ----------------------------------------------------------------

PROBE = """import os, socket
seen = dict()
for path in ({db!r}, '/etc/shadow', '/root', {data!r}):
    try:
        seen[path] = 'READ ' + str(len(os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read()))
    except Exception as exc:
        seen[path] = type(exc).__name__
for port in ({port}, 5432):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(('127.0.0.1', port))
        seen[port] = 'CONNECTED'
    except Exception as exc:
        seen[port] = type(exc).__name__
print(seen)
print(open('/proc/1/environ', 'rb').read().replace(b'\\0', b' ').decode())
print(sorted(os.environ.items()))
"""


def test_attacks_through_the_code_tools_are_results_the_model_reads(sandbox, database_url):  # noqa: F811
    """Reading the gateway's database, data folder or the host's files, reaching its port or a
    loopback service, its keys in the environment; a fork bomb, a memory bomb and 100 MB of output:
    each a result the model reads, bounded, and the gateway and the container go on."""
    limits = SandboxLimits(wall_seconds=5, processes=64, output_bytes=4096)
    with gateway(database_url, sandbox, sandbox_limits=limits) as server:
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        probe = PROBE.format(db=str(sandbox / "state.db"), data=str(sandbox), port=port)
        server.upstream.push(
            python_call(probe, "call_1"),
            python_call("x = bytearray(3 << 30)\nprint(len(x))", "call_2"),
            python_call("print('still', 1 + 1)", "call_3"),
            text_exchange("Done."),
        )  # fmt: skip
        events = server.stream(input="Probe.", tools=[AUTO], include=["code_interpreter_call.outputs"])
        assert events[-1]["response"]["status"] == "completed"
        read, memory, after = tool_messages(server.upstream.requests[-1])
        assert "READ" not in read and "CONNECTED" not in read, read
        assert KEYS[0] not in read and KEYS[1] not in read and "RESPONSEKIT" not in read
        assert "MemoryError" in memory or "memory" in memory.lower(), memory
        assert after.strip().endswith("still 2"), after

        container = events[-1]["response"]["output"][0]["container_id"]
        shell = {"type": "shell", "environment": {"type": "container_reference", "container_id": container}}
        server.upstream.push(
            tool_call_exchange("shell", {"commands": ["head -c 100000000 /dev/zero | tr '\\0' a",
                                                      "f() { f | f & }; f; sleep 2", "echo alive"]}),
            text_exchange("Done."),
        )  # fmt: skip
        response = server.create(input="Flood.", tools=[shell])
        flood, bomb, alive = response["output"][1]["output"]
        assert len(flood["stdout"]) < 4096 + 200 and "output cut" in flood["stdout"]
        assert bomb["outcome"]["type"] in ("exit", "timeout")
        assert alive == {"stdout": "alive\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
        assert len(tool_messages(server.upstream.requests[-1])[0]) < 3 * 4096 + 1000
        # the gateway goes on
        assert httpx.get(f"{server.base_url.removesuffix('/v1')}/health", timeout=10).status_code == 200
