"""A long session end to end: a real client whose large tool outputs grow its context past what
the engine's window holds compacts in time, and the engine never has to refuse a prompt.

The scripted engine reports its window as vLLM does (`max_model_len` on `/v1/models`), counts a
prompt as four characters of its messages and tools a token (on `/tokenize` and in every answer's
`usage`, so the client sees its context grow) and refuses, with vLLM's words, a prompt and output
maximum past the window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response as HTTPResponse

from responsekit.app import create_app
from responsekit.config import LocalModel, Settings, UpstreamConfig

from .conftest import _engine_settings
from .harness import ScriptedUpstream, serve, text_exchange, tool_call_exchange

CLAUDE = Path(__file__).parent / "js" / "node_modules" / ".bin" / "claude"
CLAUDE_COMPACTS = "Your task is to create a detailed summary"
"""Claude Code's compaction prompt (its bundle, 2.1), the last user message of a compaction request."""
COMMANDS = 8
WORDS = 2000
"""Each command prints `WORDS` words of five characters: about 2,500 tokens at four characters a token."""


def prompt_tokens(body: dict[str, Any]) -> int:
    """A prompt's tokens as this engine counts them: four characters of its messages and tools a token."""
    return len(json.dumps({key: body[key] for key in ("messages", "tools") if key in body}, ensure_ascii=False)) // 4


class WindowedEngine(ScriptedUpstream):
    """A vLLM-like engine of a `window`-token context that tells each prompt's size in `usage`."""

    def __init__(self, window: int) -> None:
        super().__init__(("test-model",), owned_by="vllm")
        self.window = window
        self.refused: list[int] = []
        """The prompt sizes it refused."""
        self.prompts: list[int] = []
        """The size of each prompt it answered."""

    async def _models(self, request: Request) -> JSONResponse:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": self.owned_by, "max_model_len": self.window}
                for name in self.models]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    async def _tokenize(self, request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse({"count": prompt_tokens(body), "max_model_len": self.window, "tokens": []})

    async def _chat(self, request: Request) -> HTTPResponse:
        body = await request.json()
        prompt, wanted = prompt_tokens(body), body.get("max_tokens") or 0
        if prompt + wanted > self.window:
            self.requests.append(body)
            self.refused.append(prompt)
            message = (f"This model's maximum context length is {self.window} tokens. However, you requested "
                       f"{wanted} output tokens and your prompt contains at least {prompt} input tokens, for a total "
                       f"of at least {prompt + wanted} tokens. Please reduce the length of the input prompt or the "
                       f"number of requested output tokens. (parameter=input_tokens, value={prompt})")  # fmt: skip
            error = {"error": {"message": message, "type": "BadRequestError", "param": "input_tokens", "code": 400}}
            return JSONResponse(error, status_code=400)
        self.prompts.append(prompt)
        return await super()._chat(request)


def with_usage(exchange: dict[str, Any], prompt: int) -> dict[str, Any]:
    """A scripted answer whose `usage` tells the prompt's real size."""
    for chunk in exchange["chunks"]:
        data = chunk["data"]
        if isinstance(data, dict) and "usage" in data:
            completion = data["usage"]["completion_tokens"]
            data["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return exchange


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> Iterator[WindowedEngine]:
    """A window of about three times a client's first request (its system prompt and tools): by
    default Claude Code's, some 12,000 tokens."""
    engine = WindowedEngine(getattr(request, "param", 36_000))
    with serve(engine.app) as url:
        engine.url = f"{url}/v1"  # type: ignore[attr-defined]
        yield engine


@pytest.fixture
def gateway(engine: WindowedEngine, tmp_path: Path) -> Iterator[str]:
    settings = Settings(upstreams=[UpstreamConfig(name="engine", base_url=engine.url)],  # type: ignore[attr-defined]
                        probe=False, data_dir=tmp_path / "data")  # fmt: skip
    with serve(create_app(settings)) as url:
        yield url


def claude_long_task(state: dict[str, int]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Claude Code's engine: `COMMANDS` Bash commands of large outputs, then an answer; a summary
    when Claude Code asks to compact. `state` counts the commands and compactions."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        prompt = prompt_tokens(body)
        last = json.dumps(body["messages"][-1]["content"])
        if CLAUDE_COMPACTS in last:
            state["compactions"] += 1
            state["compacted_at"] = prompt
            summary = (f"<analysis>The user asked for {COMMANDS} commands.</analysis>\n<summary>1. Primary Request: run "
                       f"{COMMANDS} commands printing words, then answer. {state['commands']} ran so far.</summary>")  # fmt: skip
            return with_usage(text_exchange(summary, pieces=40), prompt)
        if not any(tool["function"]["name"] == "Bash" for tool in body.get("tools") or ()):
            return with_usage(text_exchange("OK."), prompt)
        if state["commands"] < COMMANDS:
            state["commands"] += 1
            number = state["commands"]
            command = f"python3 -c \"print('w{number:03d} ' * {WORDS})\""
            return with_usage(tool_call_exchange("Bash", {"command": command, "description": f"Print words {number}"},
                                                 reasoning="Next command.", call_id=f"call_{number}"), prompt)  # fmt: skip
        return with_usage(text_exchange(f"All {COMMANDS} commands ran: long-session-done."), prompt)

    return respond


def test_claude_code_compacts_a_long_task_before_the_engine_refuses(gateway, engine, tmp_path):
    state = {"commands": 0, "compactions": 0, "compacted_at": 0}
    engine.responder = claude_long_task(state)
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    (home / ".claude").mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "responsekit", "connect", "claude", "--url", gateway, "--api-key", "test",
         "--claude-home", str(home / ".claude"), "--write"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    clean = {name: value for name, value in os.environ.items() if not name.startswith(("ANTHROPIC_", "CLAUDE_"))}
    done = subprocess.run(
        [str(CLAUDE), "-p", f"Run {COMMANDS} commands that print words, one after another, then tell me you are done.",
         "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions", "--max-turns", "30"],
        cwd=work, env={**clean, "HOME": str(home), "IS_SANDBOX": "1"},  # tests run as root
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=420, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = events[-1]
    assert result["type"] == "result" and result["is_error"] is False, result
    assert result["result"] == f"All {COMMANDS} commands ran: long-session-done."
    assert engine.refused == [], "Claude Code compacted before the engine had to refuse"
    assert state["commands"] == COMMANDS and state["compactions"] == 1, state
    assert state["compacted_at"] > 2 * engine.prompts[0], "compacted once the context grew to about twice the first request"
    assert engine.prompts[-1] < state["compacted_at"], "the task went on from the summary"
    assert [e for e in events if e.get("subtype") == "compact_boundary"], "Claude Code tells of its compaction"
    assert not [e for e in events if e.get("subtype") == "api_retry"], "no request failed and was retried"
    ran = [block for event in events if event["type"] == "user" for block in event["message"]["content"]
           if block.get("type") == "tool_result"]  # fmt: skip
    assert len(ran) == COMMANDS and not any(block.get("is_error") for block in ran)
    assert "error" not in done.stderr.lower(), done.stderr


CODEX = Path(__file__).parent / "js" / "node_modules" / ".bin" / "codex"
CODEX_SUMMARY = "SUMMARY-LONG: commands printing words ran; the user wants all of them run, then an answer."


def codex_long_task(state: dict[str, int]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Codex's engine: `COMMANDS` exec_command calls of large outputs, then an answer; a summary when
    asked to summarize (ResponseKit's request for a `compaction_trigger`, or Codex's own summarizing
    turn). `state` counts the commands and compactions."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        prompt = prompt_tokens(body)
        texts = [str(m.get("content")) for m in body["messages"]]
        if texts[0].startswith("You are compacting") or "CONTEXT CHECKPOINT COMPACTION" in texts[-1]:
            state["compactions"] += 1
            return with_usage(text_exchange(f"{CODEX_SUMMARY} {state['commands']} ran so far.", pieces=40), prompt)
        if state["commands"] < COMMANDS:
            state["commands"] += 1
            number = state["commands"]
            command = f"python3 -c \"print('w{number:03d} ' * {WORDS})\""
            exchange = tool_call_exchange("exec_command", {"cmd": command}, reasoning="Next command.",
                                          call_id=f"call_{number}")  # fmt: skip
            return with_usage(exchange, prompt)
        return with_usage(text_exchange(f"All {COMMANDS} commands ran: long-session-done."), prompt)

    return respond


@pytest.mark.parametrize("engine", [28_000], indirect=True)  # Codex's first request: some 9,000 tokens
@pytest.mark.parametrize("remote", [True, False], ids=["remote-compaction-v2", "codex-summarizing-turn"])
def test_codex_compacts_a_long_task_before_the_engine_refuses(gateway, engine, tmp_path, remote):
    state = {"commands": 0, "compactions": 0}
    engine.responder = codex_long_task(state)
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(
        'approval_policy = "never"\nsandbox_mode = "danger-full-access"\n\n'
        "[analytics]\nenabled = false\n\n[features]\nplugins = false\n"
    )
    env = {**os.environ, "CODEX_HOME": str(home), "RESPONSEKIT_KEY": "test"}
    subprocess.run(
        [sys.executable, "-m", "responsekit", "connect", "codex", "--url", f"{gateway}/v1", "--codex", str(CODEX),
         "--codex-home", str(home), "--api-key-env", "RESPONSEKIT_KEY", "--write"],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    if not remote:  # Codex's own summarizing turn, whatever `connect codex` declares
        config = (home / "config.toml").read_text()
        assert 'remote_compaction = "v2"' in config
        (home / "config.toml").write_text(config.replace('remote_compaction = "v2"', 'remote_compaction = "unsupported"'))
    done = subprocess.run(
        [str(CODEX), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--",
         f"Run {COMMANDS} commands that print words, one after another, then tell me you are done."],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=420, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "turn.completed", events[-3:]
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    assert [item["text"] for item in items if item["type"] == "agent_message"][-1] == (
        f"All {COMMANDS} commands ran: long-session-done.")
    assert not [item for item in items if item["type"] == "error"], "no error or warning shown"
    ran = [item for item in items if item["type"] == "command_execution"]
    assert len(ran) == COMMANDS and all(item["exit_code"] == 0 for item in ran)
    assert engine.refused == [], "Codex compacted before the engine had to refuse"
    assert state["commands"] == COMMANDS and state["compactions"] >= 1, state
    assert max(engine.prompts) > 2 * engine.prompts[0], "the context grew past twice the first request"
    after = next(json.dumps(body) for body in engine.requests if CODEX_SUMMARY in json.dumps(body))
    assert CODEX_SUMMARY in after and "w001 w001" not in after, "the task went on from the summary, the outputs left out"


def test_an_in_process_model_at_a_small_context_answers_a_chain_past_it(tiny_gguf, tmp_path):
    """A Responses conversation chained by `previous_response_id` grows past the in-process model's
    512-token context: with `truncation: "auto"` every turn still gets an answer (its oldest turns
    dropped); without it, the same turn is refused with the count, as OpenAI refuses."""
    settings = _engine_settings(tmp_path, models=[LocalModel(path=tiny_gguf, name="tiny", context=512)])
    paragraph = " ".join(["context"] * 100)
    with serve(create_app(settings)) as url:
        previous: str | None = None
        used: list[int] = []
        for turn in range(8):
            body = {"model": "tiny", "input": f"Turn {turn}: {paragraph}", "max_output_tokens": 16,
                    "truncation": "auto", "previous_response_id": previous}  # fmt: skip
            answer = httpx.post(f"{url}/v1/responses", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
            response = answer.json()
            assert response["error"] is None and response["status"] in ("completed", "incomplete"), response
            if response["status"] == "incomplete":
                assert response["incomplete_details"] == {"reason": "max_output_tokens"}
            used.append(response["usage"]["input_tokens"])
            previous = response["id"]
        assert used[0] * len(used) > 3 * 512, "the chain grew to three times the context"
        assert all(used[0] < count <= 512 - 16 for count in used[1:]), \
            "each turn holds the latest turns that fit, with room for its answer"
        refused = httpx.post(f"{url}/v1/responses", timeout=120, json={
            "model": "tiny", "input": f"Turn 8: {paragraph}", "max_output_tokens": 16, "previous_response_id": previous})  # fmt: skip
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded", refused.text
