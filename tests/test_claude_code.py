"""Claude Code itself (npm `@anthropic-ai/claude-code`) on ResponseKit's Messages API.

`claude -p` runs headless against the test server; the scripted engine behind it reasons and asks
for a Bash command, Claude Code runs it and sends the result, and the engine's answer quotes the
command's output. The engine's second request must carry the first turn's reasoning: Claude Code
replays it as a thinking block whose signature is all that holds it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig

from .conftest import WINDOW
from .harness import ScriptedUpstream, serve, text_exchange, tool_call_exchange

CLAUDE = Path(__file__).parent / "js" / "node_modules" / ".bin" / "claude"
REASONING = "The user wants the command's output, so I will run it with Bash first."


def bash_loop(command: str) -> Any:
    """An engine for Claude Code: Bash first, then an answer quoting the tool's output.

    Claude Code may send side requests (a title, a haiku-model check…); whatever offers no Bash
    tool gets a short text.
    """

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if results:
            return text_exchange(f"The command printed: {str(results[-1]['content'])[:200]}")
        if any(tool["function"]["name"] == "Bash" for tool in body.get("tools") or ()):
            return tool_call_exchange("Bash", {"command": command, "description": "Print the token"},
                                      reasoning=REASONING, call_id="call_bash")  # fmt: skip
        return text_exchange("OK.")

    return respond


def serve_gateway(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[str]:
    """ResponseKit over the scripted engine, which Claude Code's `claude-…` names reach by an alias."""
    settings = Settings(
        upstreams=[UpstreamConfig(name="scripted", base_url=upstream.url)],  # type: ignore[attr-defined]
        aliases={"claude-sonnet-4-5": "test-model"},
        probe=False,
        data_dir=tmp_path / "data",
    )
    with serve(create_app(settings)) as url:
        yield url


@pytest.fixture
def gateway(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[str]:
    yield from serve_gateway(upstream, tmp_path)


@pytest.fixture
def windowed_gateway(upstream: ScriptedUpstream, tmp_path: Path) -> Iterator[str]:
    """`gateway`, the engine telling a window of `WINDOW` tokens as llama.cpp's server does."""
    upstream.props = {"default_generation_settings": {"n_ctx": WINDOW}}
    yield from serve_gateway(upstream, tmp_path)


def run_claude(home: Path, workdir: Path, env: dict[str, str], *args: str,
               prompt: str = "Run the command that prints the token and tell me what it printed.") -> list[dict[str, Any]]:
    """One headless turn (`args` after the defaults, so a later `--max-turns` wins); HOME is a
    scratch directory, so no user settings or login take part."""
    clean = {name: value for name, value in os.environ.items()
             if not name.startswith(("ANTHROPIC_", "CLAUDE_"))}  # fmt: skip
    done = subprocess.run(
        [str(CLAUDE), "-p", prompt, "--output-format", "stream-json", "--verbose", "--permission-mode",
         "bypassPermissions", "--max-turns", "4", *args],
        cwd=workdir, env={**clean, "HOME": str(home), "IS_SANDBOX": "1", **env},  # tests run as root
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def check_tool_loop(events: list[dict[str, Any]], upstream: ScriptedUpstream, token: str) -> None:
    result = events[-1]
    assert result["type"] == "result" and result["is_error"] is False, result
    assert f"The command printed: {token}" in result["result"]
    ran = [block for event in events if event["type"] == "user"
           for block in event["message"]["content"] if block.get("type") == "tool_result"]  # fmt: skip
    assert len(ran) == 1 and token in str(ran[0]["content"]) and not ran[0].get("is_error")

    loop = [body for body in upstream.requests if any(m["role"] == "tool" for m in body["messages"])]
    assert len(loop) == 1, "one answer after the tool's result"
    body = loop[0]
    assert body["model"] == "test-model"
    tool = next(i for i, m in enumerate(body["messages"]) if m["role"] == "tool")
    assistant = body["messages"][tool - 1]
    assert assistant["role"] == "assistant"
    assert [call["function"]["name"] for call in assistant["tool_calls"]] == ["Bash"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"])["command"] == f"echo {token}"
    # The thinking block Claude Code replayed reached the engine again, from its signature.
    assert assistant["reasoning_content"] == REASONING
    assert token in str(body["messages"][tool]["content"])


def test_claude_code_runs_a_tool_set_up_by_connect_claude(windowed_gateway, upstream, tmp_path):
    token = f"responsekit-{secrets.token_hex(6)}"
    upstream.responder = bash_loop(f"echo {token}")
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    home.mkdir()
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps({"env": {"MY_SETTING": "kept"}}))
    subprocess.run(
        [sys.executable, "-m", "responsekit", "connect", "claude", "--url", windowed_gateway, "--api-key", "test",
         "--claude-home", str(home / ".claude"), "--write"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip

    # The model, base URL, key and window come from the settings.json that `connect claude` wrote.
    debug = tmp_path / "debug.txt"
    events = run_claude(home, work, {}, "--debug-file", str(debug))
    assert events[0]["type"] == "system" and events[0]["model"] == "test-model"
    check_tool_loop(events, upstream, token)
    # Claude Code took the window: answers of a quarter of it, compaction measured against the
    # auto-compact window less that (its debug log), no warning that it assumes a million tokens.
    assert {body["max_tokens"] for body in upstream.requests if body.get("tools")} == {WINDOW // 4}
    log = debug.read_text()
    assert f"effectiveWindow={100_000 - WINDOW // 4}" in log
    assert "doesn't recognize the model" not in log and "assumes a context window" not in log


def test_claude_code_with_a_v1_base_url_and_a_claude_name(gateway, upstream, tmp_path):
    """Users often give the base URL with `/v1` (Claude Code then posts to /v1/v1/messages), and
    Claude Code's own model names reach a served model through an alias."""
    token = f"responsekit-{secrets.token_hex(6)}"
    upstream.responder = bash_loop(f"echo {token}")
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    home.mkdir()
    env = {"ANTHROPIC_BASE_URL": f"{gateway}/v1", "ANTHROPIC_API_KEY": "test",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}  # fmt: skip
    events = run_claude(home, work, env, "--model", "claude-sonnet-4-5")
    check_tool_loop(events, upstream, token)
