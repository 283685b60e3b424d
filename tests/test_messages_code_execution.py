"""The Messages API's code execution server tool (`code_execution_*`) on an open model.

The real gateway on loopback, the real bubblewrap sandbox, a scripted engine that calls the code
functions, and the real `anthropic` SDK (`client.beta.messages.create` and `.stream` with the
`code-execution-2025-08-25` beta): each call the server runs is a `server_tool_use` block and its
result block, every block and event validated strictly against the SDK's beta types (and no field
the types do not know); the answer names its container, which a later request reuses with its
files; another key's container is refused; a replayed history reaches the engine as calls and
their results.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types.beta import BetaFileMetadata, BetaMessage, BetaRawMessageStreamEvent
from pydantic import BaseModel, TypeAdapter

from responsekit.app import create_app
from responsekit.config import SandboxLimits, Settings, UpstreamConfig

from .conftest import DATABASES
from .harness import ScriptedUpstream, serve, text_exchange, tool_call_exchange
from .test_containers import sandbox_or_skip
from .test_messages import anthropic_error, check_events, fold

KEYS = ("key-one", "key-two")
BETA = "code-execution-2025-08-25"
TOOL = {"type": "code_execution_20250825", "name": "code_execution"}
BETA_EVENT = TypeAdapter(BetaRawMessageStreamEvent)
WALL_SECONDS = 4.0
"""Each call's wall-clock limit here, so that a command past it ends the test quickly."""


class _JsonEvents:
    """The SDK's event types, validated as the JSON on the wire (a time is a string there)."""

    def validate_python(self, event: dict[str, Any], strict: bool = False) -> Any:
        return BETA_EVENT.validate_json(json.dumps(event), strict=strict)


class Gateway:
    def __init__(self, url: str, upstream: ScriptedUpstream, settings: Settings) -> None:
        self.url = url
        self.upstream = upstream
        self.settings = settings

    def anthropic(self, key: str = KEYS[0]) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=key, max_retries=0, timeout=60)

    def openai(self, key: str = KEYS[0]) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=60)

    def post(self, body: dict[str, Any], key: str = KEYS[0]) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/messages", json=body, timeout=60,
                          headers={"x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": BETA})  # fmt: skip

    def stream(self, body: dict[str, Any], key: str = KEYS[0]) -> list[dict[str, Any]]:
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": BETA}
        with httpx.stream("POST", f"{self.url}/v1/messages", json={**body, "stream": True}, headers=headers,
                          timeout=60) as answer:  # fmt: skip
            assert answer.status_code == 200, answer.read()
            events = [
                json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")
            ]
        check_events(events, _JsonEvents())  # type: ignore[arg-type]
        return events


def _gateway(upstream: ScriptedUpstream, database_url: str, tmp_path: Path) -> Iterator[Gateway]:
    sandbox_or_skip(tmp_path / "probe")
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path, database_url=database_url, api_keys=list(KEYS),
                        sandbox_limits=SandboxLimits(wall_seconds=WALL_SECONDS))  # fmt: skip
    with serve(create_app(settings)) as url:
        yield Gateway(url, upstream, settings)


@pytest.fixture
def gateway(upstream: ScriptedUpstream, database_url: str, tmp_path: Path) -> Iterator[Gateway]:
    yield from _gateway(upstream, database_url, tmp_path)


def script(*calls: tuple[str, dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """An engine that makes `calls` in order, one a generation (counting the tool results since
    the user's last message), then answers with what the last result said."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        last_user = max(
            position for position, message in enumerate(messages) if message["role"] == "user"
        )
        done = sum(1 for message in messages[last_user:] if message["role"] == "tool")
        if done < len(calls):
            name, arguments = calls[done]
            return tool_call_exchange(name, arguments, call_id=f"call_{done}")
        return text_exchange(f"Done: {str(messages[-1]['content'])[:200]}")

    return respond


def request(content: Any = "Run it.", **extra: Any) -> dict[str, Any]:
    return {"model": "test-model", "max_tokens": 500, "messages": [{"role": "user", "content": content}],
            "tools": [TOOL], **extra}  # fmt: skip


def message(answer: httpx.Response) -> dict[str, Any]:
    """The answer, strictly the SDK's `BetaMessage`, with no field its types do not know."""
    assert answer.status_code == 200, answer.text
    body = answer.json()
    known(BetaMessage.model_validate_json(answer.text, strict=True), body)
    return body


def known(model: BaseModel, body: Any) -> None:
    """Every field of `body` is one of `model`'s (the SDK's types let unknown fields through)."""
    assert set(body) <= set(type(model).model_fields), (
        type(model).__name__,
        set(body) - set(type(model).model_fields),
    )
    for key, value in body.items():
        field = getattr(model, key)
        if isinstance(field, BaseModel):
            known(field, value)
        elif isinstance(field, list):
            for item, raw in zip(field, value, strict=True):
                if isinstance(item, BaseModel):
                    known(item, raw)


def blocks(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [block for block in body["content"] if block["type"] == kind]


def offered(upstream: ScriptedUpstream, turn: int = 0) -> list[str]:
    return [tool["function"]["name"] for tool in upstream.requests[turn].get("tools") or ()]


def tool_results(upstream: ScriptedUpstream, turn: int) -> list[str]:
    return [m["content"] for m in upstream.requests[turn]["messages"] if m["role"] == "tool"]


# --- bash -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version", ["code_execution_20250825", "code_execution_20260120", "code_execution_20260521"]
)
def test_bash_runs_a_command(gateway, version):
    gateway.upstream.responder = script(
        ("bash_code_execution", {"command": "echo hello; echo oops >&2; exit 3"})
    )
    before = datetime.now(UTC)
    body = message(gateway.post(request(tools=[{"type": version, "name": "code_execution"}])))
    assert offered(gateway.upstream) == ["bash_code_execution", "text_editor_code_execution"]
    use, result, text = body["content"]
    assert use["type"] == "server_tool_use" and use["id"].startswith("srvtoolu_")
    assert (use["name"], use["input"]) == (
        "bash_code_execution",
        {"command": "echo hello; echo oops >&2; exit 3"},
    )
    assert result == {"type": "bash_code_execution_tool_result", "tool_use_id": use["id"],
                      "content": {"type": "bash_code_execution_result", "stdout": "hello\n", "stderr": "oops\n",
                                  "return_code": 3, "content": []}}  # fmt: skip
    assert text["type"] == "text" and "[stdout]\nhello" in text["text"]
    assert body["stop_reason"] == "end_turn"
    container = body["container"]
    assert set(container) == {"id", "expires_at"} and container["id"].startswith("cntr_")
    expires = datetime.fromisoformat(container["expires_at"])
    assert 19 * 60 < (expires - before).total_seconds() <= 21 * 60, "20 minutes from the last use"
    # The model read the command's output in the next generation.
    assert tool_results(gateway.upstream, 1) == ["[stdout]\nhello\n[stderr]\noops\n[exit code 3]"]


def test_bash_through_the_sdk_streamed_and_not(gateway):
    gateway.upstream.responder = script(
        ("bash_code_execution", {"command": "printf 'a b c' | wc -w"})
    )
    client = gateway.anthropic()
    created = client.beta.messages.create(**request(), betas=[BETA])
    use, result = created.content[0], created.content[1]
    assert use.type == "server_tool_use" and use.name == "bash_code_execution"
    assert result.type == "bash_code_execution_tool_result" and result.tool_use_id == use.id
    assert (
        result.content.type == "bash_code_execution_result" and result.content.stdout.strip() == "3"
    )
    assert created.container is not None and created.container.expires_at > datetime.now(UTC)

    events = gateway.stream(request())
    starts = [event["content_block"] for event in events if event["type"] == "content_block_start"]
    assert [block["type"] for block in starts] == [
        "server_tool_use",
        "bash_code_execution_tool_result",
        "text",
    ]
    assert starts[0]["input"] == {}, "the input comes as input_json_delta"
    partial = "".join(event["delta"]["partial_json"] for event in events if event["type"] == "content_block_delta"
                      and event["delta"]["type"] == "input_json_delta")  # fmt: skip
    assert json.loads(partial) == {"command": "printf 'a b c' | wc -w"}
    assert (
        starts[1]["tool_use_id"] == starts[0]["id"]
        and starts[1]["content"]["stdout"].strip() == "3"
    )
    delta = next(event for event in events if event["type"] == "message_delta")
    assert delta["delta"]["container"]["id"].startswith("cntr_")

    # The SDK's own accumulation folds the stream into the same message.
    with client.beta.messages.stream(**request(), betas=[BETA]) as stream:
        final = stream.get_final_message()
    assert [block.type for block in final.content] == [
        "server_tool_use",
        "bash_code_execution_tool_result",
        "text",
    ]
    assert final.content[0].input == {"command": "printf 'a b c' | wc -w"}  # type: ignore[union-attr]
    assert final.container is not None and final.container.id.startswith("cntr_")
    assert final.container.id != created.container.id, (
        "each request without `container` gets a new one"
    )


# --- the text editor, and files written ------------------------------------------------------


def test_text_editor_create_view_edit_and_an_output_file(gateway):
    editor = "text_editor_code_execution"
    gateway.upstream.responder = script(
        (
            editor,
            {"command": "create", "path": "/mnt/data/notes.txt", "file_text": "alpha\nbeta\ngamma"},
        ),
        (editor, {"command": "view", "path": "/mnt/data/notes.txt"}),
        (
            editor,
            {
                "command": "str_replace",
                "path": "/mnt/data/notes.txt",
                "old_str": "beta",
                "new_str": "BETA",
            },
        ),
        (
            editor,
            {
                "command": "insert",
                "path": "/mnt/data/notes.txt",
                "insert_line": 1,
                "new_str": "inserted",
            },
        ),
        (editor, {"command": "view", "path": "/mnt/data/notes.txt", "view_range": [2, 3]}),
        (editor, {"command": "create", "path": "/mnt/data/notes.txt", "file_text": "one"}),
        (
            "bash_code_execution",
            {"command": "cat notes.txt; printf 'x,y\\n1,2\\n' > /mnt/data/out.csv"},
        ),
    )
    body = message(gateway.post(request()))
    results = [block["content"] for block in blocks(body, "text_editor_code_execution_tool_result")]
    assert results[0] == {
        "type": "text_editor_code_execution_create_result",
        "is_file_update": False,
    }
    assert results[1] == {"type": "text_editor_code_execution_view_result", "content": "alpha\nbeta\ngamma",
                          "file_type": "text", "num_lines": 3, "start_line": 1, "total_lines": 3}  # fmt: skip
    assert results[2] == {"type": "text_editor_code_execution_str_replace_result", "old_start": 2, "old_lines": 1,
                          "new_start": 2, "new_lines": 1, "lines": ["BETA"]}  # fmt: skip
    assert results[3] == {"type": "text_editor_code_execution_str_replace_result", "old_start": 2, "old_lines": 0,
                          "new_start": 2, "new_lines": 1, "lines": ["inserted"]}  # fmt: skip
    assert results[4] == {"type": "text_editor_code_execution_view_result", "content": "inserted\nBETA",
                          "file_type": "text", "num_lines": 2, "start_line": 2, "total_lines": 4}  # fmt: skip
    assert results[5] == {
        "type": "text_editor_code_execution_create_result",
        "is_file_update": True,
    }
    (bash,) = blocks(body, "bash_code_execution_tool_result")
    assert bash["content"]["stdout"] == "one"
    (output,) = bash["content"]["content"]
    assert output["type"] == "bash_code_execution_output" and output["file_id"].startswith("cfile_")
    # The file is the container's, readable through the Containers API.
    container = body["container"]["id"]
    content = gateway.openai().containers.files.content.retrieve(
        output["file_id"], container_id=container
    )
    assert content.read() == b"x,y\n1,2\n"
    # What the model read: the numbered view, the edit's outcome.
    read = tool_results(gateway.upstream, 7)
    assert read[0] == "Created /mnt/data/notes.txt."
    assert read[1] == "     1\talpha\n     2\tbeta\n     3\tgamma"
    assert read[2] == "Replaced the text at line 2 of /mnt/data/notes.txt."
    assert read[4] == "     2\tinserted\n     3\tBETA"
    assert results_of(fold(gateway.stream(request()))) == results_of(body), (
        "streamed, the same blocks"
    )


def test_error_codes(gateway):
    editor = "text_editor_code_execution"
    gateway.upstream.responder = script(
        (editor, {"command": "view", "path": "/mnt/data/missing.txt"}),
        ("bash_code_execution", {"command": "sleep 30"}),
        ("bash_code_execution", {}),
        (editor, {"command": "view", "path": "/etc/passwd"}),
    )
    body = message(gateway.post(request()))
    missing, outside = (
        block["content"] for block in blocks(body, "text_editor_code_execution_tool_result")
    )
    assert missing["type"] == "text_editor_code_execution_tool_result_error"
    assert missing["error_code"] == "file_not_found" and "missing.txt" in missing["error_message"]
    assert outside["type"] == "text_editor_code_execution_tool_result_error"
    assert outside["error_code"] == "invalid_tool_input", outside
    timed_out, bad = (block["content"] for block in blocks(body, "bash_code_execution_tool_result"))
    assert timed_out == {
        "type": "bash_code_execution_tool_result_error",
        "error_code": "execution_time_exceeded",
    }
    assert bad == {
        "type": "bash_code_execution_tool_result_error",
        "error_code": "invalid_tool_input",
    }
    read = tool_results(gateway.upstream, 4)
    assert read[0].startswith("Error: ") and read[1].startswith("Error: The command was stopped")
    # Streamed, the same blocks.
    assert results_of(fold(gateway.stream(request()))) == results_of(body)


def results_of(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each block's type, and a result block's content (its output files' ids left out)."""
    kept = []
    for block in body["content"]:
        content = block.get("content")
        if isinstance(content, dict) and "content" in content:
            content = {**content, "content": len(content["content"])}
        kept.append((block["type"], content if block["type"].endswith("_tool_result") else None))
    return kept


# --- the container ---------------------------------------------------------------------------


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_container_reused_keeps_its_files_and_is_the_keys(gateway):
    gateway.upstream.responder = script(
        ("bash_code_execution", {"command": "echo kept > /mnt/data/state.txt"})
    )
    first = message(gateway.post(request()))
    container = first["container"]["id"]
    gateway.upstream.responder = script(
        ("bash_code_execution", {"command": "cat /mnt/data/state.txt"})
    )
    again = message(gateway.post(request(container=container)))
    assert again["container"]["id"] == container
    assert blocks(again, "bash_code_execution_tool_result")[0]["content"]["stdout"] == "kept\n"
    # The SDK's object form (`BetaContainerParams`) names it too.
    sdk = gateway.anthropic().beta.messages.create(
        **request(), container={"id": container}, betas=[BETA]
    )
    assert sdk.container is not None and sdk.container.id == container
    # Another key's container is not found, as one that never was; nothing ran.
    asked = len(gateway.upstream.requests)
    anthropic_error(gateway.post(request(container=container), key=KEYS[1]), 404, "not_found_error")
    anthropic_error(gateway.post(request(container="cntr_nope")), 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError):
        gateway.anthropic(KEYS[1]).beta.messages.create(
            **request(), container=container, betas=[BETA]
        )
    assert len(gateway.upstream.requests) == asked


def test_an_expired_container_is_refused(gateway, tmp_path):
    gateway.upstream.responder = script()
    container = message(gateway.post(request()))["container"]["id"]
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute(
            "UPDATE containers SET last_active_at = last_active_at - 3600 WHERE id = ?",
            (container,),
        )
    error = anthropic_error(
        gateway.post(request(container=container)), 400, "invalid_request_error"
    )
    assert "expired" in error.lower()


def test_count_tokens_takes_the_tool(gateway):
    gateway.upstream.responder = script()
    counted = gateway.anthropic().beta.messages.count_tokens(
        model="test-model", messages=[{"role": "user", "content": "hi"}], tools=[TOOL], betas=[BETA])  # type: ignore[list-item]  # fmt: skip
    assert counted.input_tokens > 0
    assert gateway.upstream.requests == [], "no container is made for a count"


def test_without_a_sandbox_the_tool_is_refused(upstream, tmp_path):
    settings = Settings(upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)], probe=False,  # type: ignore[attr-defined]
                        data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'state.db'}", sandbox="off")  # fmt: skip
    with serve(create_app(settings)) as url:
        answer = Gateway(url, upstream, settings).post(request())
    assert "bubblewrap" in anthropic_error(answer, 400, "invalid_request_error")
    assert upstream.requests == [], "code is refused, never run without a sandbox"


def test_bad_container_and_tool_parameters_are_400s(gateway):
    gateway.upstream.responder = script()
    anthropic_error(gateway.post(request(container=7)), 400, "invalid_request_error")
    skills = {"skills": [{"type": "anthropic", "skill_id": "pptx", "version": "latest"}]}
    assert "skills" in anthropic_error(
        gateway.post(request(container=skills)), 400, "invalid_request_error"
    )
    twice = request(tools=[TOOL, {"type": "code_execution_20250522", "name": "code_execution"}])
    anthropic_error(gateway.post(twice), 400, "invalid_request_error")
    assert gateway.upstream.requests == []


# --- container_upload --------------------------------------------------------------------------


def test_container_upload_puts_a_file_in_the_container(gateway):
    uploaded = gateway.openai().files.create(
        file=("sales.csv", b"region,total\nnorth,7\n"), purpose="user_data"
    )
    gateway.upstream.responder = script(
        ("bash_code_execution", {"command": "cat /mnt/data/sales.csv"})
    )
    content = [
        {"type": "container_upload", "file_id": uploaded.id},
        {"type": "text", "text": "Sum the totals."},
    ]
    body = message(gateway.post(request(content)))
    assert (
        blocks(body, "bash_code_execution_tool_result")[0]["content"]["stdout"]
        == "region,total\nnorth,7\n"
    )
    user = gateway.upstream.requests[0]["messages"][-1]["content"]
    assert "/mnt/data/sales.csv" in json.dumps(user) and "Sum the totals." in json.dumps(user)
    # The same history again in the container: the file is kept as the code left it, not uploaded anew.
    container = body["container"]["id"]
    gateway.upstream.responder = script(
        ("bash_code_execution", {"command": "echo changed > /mnt/data/sales.csv"})
    )
    message(gateway.post(request(content, container=container)))
    gateway.upstream.responder = script(
        ("bash_code_execution", {"command": "cat /mnt/data/sales.csv"})
    )
    again = message(gateway.post(request(content, container=container)))
    assert blocks(again, "bash_code_execution_tool_result")[0]["content"]["stdout"] == "changed\n"
    # Another key's file is not found.
    other = request(
        [{"type": "container_upload", "file_id": uploaded.id}, {"type": "text", "text": "x"}]
    )
    anthropic_error(gateway.post(other, key=KEYS[1]), 404, "not_found_error")


# --- a replayed history -------------------------------------------------------------------------


EDITS = [
    ("bash_code_execution", {"command": "echo 42"}),
    ("text_editor_code_execution", {"command": "create", "path": "/mnt/data/a.py", "file_text": "x = 1\ny = 2"}),
    ("text_editor_code_execution", {"command": "str_replace", "path": "/mnt/data/a.py", "old_str": "y", "new_str": "z"}),
    ("text_editor_code_execution", {"command": "insert", "path": "/mnt/data/a.py", "insert_line": 0, "new_str": "# a"}),
    ("text_editor_code_execution", {"command": "view", "path": "/mnt/data/a.py"}),
    ("text_editor_code_execution", {"command": "view", "path": "/mnt/data/none.py"}),
]  # fmt: skip


def test_a_replayed_history_reaches_the_engine(gateway):
    gateway.upstream.responder = script(*EDITS)
    first = gateway.anthropic().beta.messages.create(**request("Compute."), betas=[BETA])
    history = [
        {"role": "user", "content": "Compute."},
        first.to_param(),
        {"role": "user", "content": "And now?"},
    ]
    gateway.upstream.responder = script()
    follow = gateway.anthropic().beta.messages.create(
        **{**request(), "messages": history}, betas=[BETA]
    )
    assert [block.type for block in follow.content] == ["text"]
    sent = gateway.upstream.requests[-1]["messages"]
    calls = [call for m in sent if m["role"] == "assistant" for call in m.get("tool_calls") or ()]
    assert [
        (call["function"]["name"], json.loads(call["function"]["arguments"])) for call in calls
    ] == EDITS
    answers = [m for m in sent if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == [call["id"] for call in calls]
    # As the model read them when they ran (a failure in Anthropic's words: its message is kept).
    assert [m["content"] for m in answers] == tool_results(gateway.upstream, len(EDITS))
    assert answers[0]["content"] == "[stdout]\n42\n[exit code 0]"
    assert answers[4]["content"] == "     1\t# a\n     2\tx = 1\n     3\tz = 2"
    assert answers[5]["content"].startswith("Error: ")


# --- the Python-only version -------------------------------------------------------------------------


def test_the_python_only_version(gateway):
    gateway.upstream.responder = script(
        ("python", {"code": "x = 6 * 7\nprint(x)"}), ("python", {"code": "x + 1"})
    )
    body = message(
        gateway.post(request(tools=[{"type": "code_execution_20250522", "name": "code_execution"}]))
    )
    assert offered(gateway.upstream) == ["python"]
    uses = blocks(body, "server_tool_use")
    assert [(use["name"], use["input"]) for use in uses] == [("code_execution", {"code": "x = 6 * 7\nprint(x)"}),
                                                             ("code_execution", {"code": "x + 1"})]  # fmt: skip
    results = [block["content"] for block in blocks(body, "code_execution_tool_result")]
    assert results[0] == {
        "type": "code_execution_result",
        "stdout": "42\n",
        "stderr": "",
        "return_code": 0,
        "content": [],
    }
    assert results[1]["stdout"].strip() == "43", "the kernel keeps its variables"


# --- contained: what code and a model's arguments cannot reach ------------------------------------


def test_paths_out_of_the_workspace_and_a_flood_of_output_are_contained(gateway):
    editor = "text_editor_code_execution"
    gateway.upstream.responder = script(
        (editor, {"command": "view", "path": "/mnt/data/../../etc/passwd"}),
        ("bash_code_execution", {"command": "ln -s /etc/passwd /mnt/data/link"}),
        (editor, {"command": "view", "path": "/mnt/data/link"}),
        (editor, {"command": "create", "path": "/mnt/data/link", "file_text": "overwritten"}),
        ("bash_code_execution", {"command": "head -c 200000000 /dev/zero | tr '\\0' x"}),
    )
    answer = gateway.post(request())
    body = message(answer)
    editor_results = [
        block["content"] for block in blocks(body, "text_editor_code_execution_tool_result")
    ]
    assert [result["type"] for result in editor_results] == [
        "text_editor_code_execution_tool_result_error"
    ] * 3
    assert [result["error_code"] for result in editor_results] == ["invalid_tool_input"] * 3
    flood = blocks(body, "bash_code_execution_tool_result")[1]["content"]
    assert flood["type"] == "bash_code_execution_result" and flood["return_code"] == 0
    assert len(answer.content) < 1_000_000, (
        "the output is cut to a bound, never megabytes into the answer"
    )
    assert len(gateway.upstream.requests[-1]["messages"][-1]["content"]) < 200_000
    assert "root:" not in answer.text


def test_a_tool_choice_naming_the_tool_requires_a_call(gateway):
    gateway.upstream.responder = script(("bash_code_execution", {"command": "true"}))
    body = message(gateway.post(request(tool_choice={"type": "tool", "name": "code_execution"})))
    assert gateway.upstream.requests[0]["tool_choice"] == "required"
    assert blocks(body, "bash_code_execution_tool_result")[0]["content"]["return_code"] == 0


# --- Anthropic's Files API ------------------------------------------------------------------------


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_anthropics_files_api_uploads_and_downloads_outputs(gateway):
    client = gateway.anthropic()
    raw = client.beta.files.with_raw_response.upload(
        file=("sales.csv", b"region,total\nnorth,7\n", "text/csv")
    )
    metadata = raw.parse()
    known(
        BetaFileMetadata.model_validate_json(raw.http_response.text, strict=True),
        raw.http_response.json(),
    )
    assert (metadata.filename, metadata.size_bytes, metadata.mime_type) == (
        "sales.csv",
        21,
        "text/csv",
    )
    gateway.upstream.responder = script(
        (
            "bash_code_execution",
            {"command": "cut -d, -f2 /mnt/data/sales.csv > /mnt/data/totals.txt"},
        )
    )
    content = [
        {"type": "container_upload", "file_id": metadata.id},
        {"type": "text", "text": "Totals?"},
    ]
    answer = client.beta.messages.create(**request(content), betas=[BETA, "files-api-2025-04-14"])
    result = answer.content[1]
    assert result.type == "bash_code_execution_tool_result"
    (output,) = result.content.content  # type: ignore[union-attr]
    # A file code execution wrote downloads by its id, as Anthropic's outputs do.
    written = client.beta.files.retrieve_metadata(output.file_id)
    assert (written.filename, written.size_bytes, written.mime_type) == (
        "totals.txt",
        8,
        "text/plain",
    )
    assert client.beta.files.download(output.file_id).read() == b"total\n7\n"
    with pytest.raises(anthropic.NotFoundError):
        gateway.anthropic(KEYS[1]).beta.files.download(output.file_id)
    with pytest.raises(anthropic.NotFoundError):
        gateway.anthropic(KEYS[1]).beta.files.retrieve_metadata(metadata.id)
    assert client.beta.files.delete(metadata.id).type == "file_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata(metadata.id)
    # An OpenAI client still gets OpenAI's Files API: a purpose is required, and the file is OpenAI's object.
    no_purpose = httpx.post(f"{gateway.url}/v1/files", files={"file": ("x.txt", b"x")},
                            headers={"Authorization": f"Bearer {KEYS[0]}"}, timeout=30)  # fmt: skip
    assert no_purpose.status_code == 400 and "purpose" in no_purpose.json()["error"]["message"]
    assert gateway.openai().files.create(file=("x.txt", b"x"), purpose="user_data").object == "file"


def test_anthropics_files_list_pages_newest_first(gateway):
    """`client.beta.files.list()` pages by the `anthropic` SDK's `page` cursor (`next_page`), and
    the documented `after_id` / `before_id` / `has_more` form answers too; `ids[]` picks files."""
    client = gateway.anthropic()
    uploaded = [client.beta.files.upload(file=(f"f{n}.txt", b"x" * (n + 1), "text/plain")).id for n in range(5)]
    newest_first = uploaded[::-1]
    gateway.anthropic(KEYS[1]).beta.files.upload(file=("theirs.txt", b"y", "text/plain"))
    first = client.beta.files.list(limit=2)
    assert [file.id for file in first.data] == newest_first[:2] and first.next_page
    assert [file.id for file in first] == newest_first  # every page, by the SDK's own paging
    assert [file.id for file in client.beta.files.list()] == newest_first  # 20 a page by default
    raw = client.beta.files.with_raw_response.list(limit=2)
    body = raw.http_response.json()
    assert set(body) == {"data", "first_id", "last_id", "has_more", "next_page"}
    for item in body["data"]:
        known(BetaFileMetadata.model_validate_json(json.dumps(item), strict=True), item)
    assert (body["first_id"], body["last_id"], body["has_more"]) == (*newest_first[:2], True)

    def listed(**query: Any) -> dict[str, Any]:
        answer = httpx.get(f"{gateway.url}/v1/files", params=query, timeout=30,
                           headers={"x-api-key": KEYS[0], "anthropic-version": "2023-06-01"})  # fmt: skip
        assert answer.status_code == 200, answer.text
        return answer.json()

    after = listed(after_id=newest_first[1], limit=2)
    assert [f["id"] for f in after["data"]] == newest_first[2:4] and after["has_more"]
    last = listed(after_id=newest_first[3], limit=2)
    assert [f["id"] for f in last["data"]] == newest_first[4:] and not last["has_more"] and last["next_page"] is None
    before = listed(before_id=newest_first[3], limit=2)
    assert [f["id"] for f in before["data"]] == newest_first[1:3] and before["has_more"]
    assert before["next_page"] is None  # going backwards, the next page is before `first_id`
    picked = client.beta.files.list(ids=[uploaded[0], "file_unknown", uploaded[2]])
    assert [file.id for file in picked.data] == [uploaded[0], uploaded[2]] and picked.next_page is None
    with pytest.raises(anthropic.BadRequestError):
        client.beta.files.list(limit=1001)
    with pytest.raises(anthropic.BadRequestError):
        client.beta.files.list(page="page_file_unknown")
    # Another key's listing holds its own file only.
    assert [file.filename for file in gateway.anthropic(KEYS[1]).beta.files.list()] == ["theirs.txt"]
