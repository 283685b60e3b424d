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

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.responses import Response as HTTPResponse

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

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
def engine() -> Iterator[WindowedEngine]:
    """About three times what Claude Code's first request holds (its system prompt and tools)."""
    engine = WindowedEngine(36_000)
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
