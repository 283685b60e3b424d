"""The real clients users run — Codex CLI, the Vercel AI SDK, the OpenAI Agents SDK — end to end.

The engine behind ResponseKit is the scripted upstream: it calls a tool first and answers
once it sees the tool's output (`harness.tool_loop`).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import tomlkit
from agents import (
    Agent,
    ItemHelpers,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from .harness import text_exchange, tool_call_exchange, tool_loop

JS = Path(__file__).parent / "js"
CODEX = JS / "node_modules" / ".bin" / "codex"


def codex_home(directory: Path, base_url: str, model: str | None = None) -> Path:
    """A Codex home set up by `responsekit connect codex --write` over the user's own settings
    (`model`: the one to choose where the server serves several; else the one it serves)."""
    home = directory / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'approval_policy = "never"\nsandbox_mode = "danger-full-access"\n\n'
        "[analytics]\nenabled = false\n\n[features]\nplugins = false\n"
    )
    subprocess.run(
        [sys.executable, "-m", "responsekit", "connect", "codex", "--url", base_url, "--codex", str(CODEX),
         "--codex-home", str(home), "--api-key-env", "RESPONSEKIT_KEY", "--write", *(["--model", model] if model else [])],
        check=True, capture_output=True, text=True,
        # CODEX_HOME: the `codex debug models` it runs keeps its files in this home too, not in
        # the user's ~/.codex, which tests running at once would share.
        env={**os.environ, "RESPONSEKIT_KEY": "test", "CODEX_HOME": str(home)},
    )  # fmt: skip
    config = tomllib.loads((home / "config.toml").read_text())
    assert config["model"] == (model or "test-model") and config["analytics"] == {"enabled": False}
    assert config["model_providers"]["responsekit"]["base_url"] == base_url
    assert config["model_providers"]["responsekit"]["capabilities"] == {"remote_compaction": "v2"}
    catalog = json.loads(Path(config["model_catalog_json"]).read_text())
    slugs = [m["slug"] for m in catalog["models"]]
    assert slugs == ["test-model"] if model is None else model in slugs
    return home


def run_codex(home: Path, workdir: Path, *args: str) -> list[dict]:
    env = {**os.environ, "CODEX_HOME": str(home), "RESPONSEKIT_KEY": "test"}
    done = subprocess.run(
        [str(CODEX), "exec", *args[:-1], "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
         "--", args[-1]],  # `--`: an option of many values (`--image a,b`) does not take the prompt
        cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_codex_exec_runs_a_tool_and_resumes(server, tmp_path):
    server.upstream.responder = tool_loop({"exec_command": {"cmd": "echo responsekit-tool-ran && uname -s"}})
    home, work = codex_home(tmp_path, server.base_url), tmp_path / "work"
    work.mkdir()

    events = run_codex(home, work, "Run uname and tell me the result")
    assert not any(e["type"] == "item.completed" and e["item"]["type"] == "error" for e in events), \
        "no warning: the catalog written by `connect codex` describes the model"
    command = next(e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution")
    assert command["exit_code"] == 0 and "responsekit-tool-ran" in command["aggregated_output"]
    answer = next(e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message")
    assert "responsekit-tool-ran" in answer["text"] and "Linux" in answer["text"]
    assert events[-1]["type"] == "turn.completed" and events[-1]["usage"]["input_tokens"] > 0
    first, second = server.upstream.requests[:2]
    offered = {tool["function"]["name"]: tool["function"] for tool in first["tools"]}
    assert {"exec_command", "apply_patch", "tool_search"} <= set(offered), "custom tools and the search are offered"
    assert "spawn_agent" not in offered, "the agents' namespace waits for Codex's tool search (supports_search_tool)"
    assert offered["apply_patch"]["parameters"]["required"] == ["input"]
    assert second["messages"][-1]["role"] == "tool" and "responsekit-tool-ran" in second["messages"][-1]["content"]
    assert second["messages"][-2]["reasoning_content"] == "I should call exec_command."

    # The second turn, on the same thread, edits a file through the custom apply_patch tool.
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+Hello from ResponseKit\n*** End Patch\n"
    server.upstream.responder = tool_loop({"apply_patch": {"input": patch}})
    resumed = run_codex(home, work, "resume", "--last", "Now create hello.txt")
    assert resumed[-1]["type"] == "turn.completed"
    assert (work / "hello.txt").read_text() == "Hello from ResponseKit\n"
    assert any(e["type"] == "item.completed" and e["item"]["type"] == "agent_message" for e in resumed)
    third, fourth = server.upstream.requests[2:4]
    users = [m["content"] for m in third["messages"] if m["role"] == "user"]
    assert "Run uname and tell me the result" in users and users[-1] == "Now create hello.txt"
    assert any("responsekit-tool-ran" in str(m["content"]) for m in third["messages"] if m["role"] == "tool")
    patch_call = fourth["messages"][-2]["tool_calls"][0]["function"]
    assert patch_call["name"] == "apply_patch" and json.loads(patch_call["arguments"]) == {"input": patch}


def test_vercel_ai_sdk_generate_and_stream_with_a_tool(server):
    server.upstream.responder = tool_loop({"get_weather": {"city": "Paris"}})
    done = subprocess.run(["node", str(JS / "ai_sdk.mjs"), server.base_url], capture_output=True, text=True,
                          timeout=120, cwd=JS)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for mode in ("generate", "stream"):
        assert result[mode]["steps"] == 2 and result[mode]["finishReason"] == "stop"
        assert "sunny and 21C in Paris" in result[mode]["text"]
    assert result["generate"]["toolCalls"] == [{"name": "get_weather", "input": {"city": "Paris"}}]
    assert result["stream"]["errors"] == [] and "error" not in result["stream"]["partTypes"]
    # (The AI SDK shows reasoning only from summaries, so without a summarizer it has none to show.)
    assert {"tool-call", "tool-result", "text-delta", "finish-step"} <= set(result["stream"]["partTypes"])


@function_tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny and 21C in {city}"


@pytest.mark.parametrize("streamed", [False, True])
def test_openai_agents_sdk_runner(server, streamed):
    server.upstream.responder = tool_loop({"get_weather": {"city": "Paris"}})
    set_tracing_disabled(True)

    async def main() -> list:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        model = OpenAIResponsesModel(model="test-model", openai_client=client)
        agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model=model)
        if not streamed:
            result = await Runner.run(agent, "What is the weather in Paris?")
            return result.new_items
        run = Runner.run_streamed(agent, "What is the weather in Paris?")
        seen = [event.item async for event in run.stream_events() if event.type == "run_item_stream_event"]
        assert [item.type for item in seen] == [item.type for item in run.new_items]
        return run.new_items

    items = asyncio.run(main())
    kinds = [item.type for item in items]
    assert "tool_call_item" in kinds and "tool_call_output_item" in kinds and kinds[-1] == "message_output_item"
    assert next(i for i in items if i.type == "tool_call_output_item").output == "sunny and 21C in Paris"
    assert "sunny and 21C in Paris" in ItemHelpers.text_message_output(items[-1])


SUMMARY = "SUMMARY-7: uname was run and printed Linux; the user wants its result."


def compacting_engine() -> Callable[[dict], dict]:
    """An engine that calls exec_command with a usage past Codex's compaction limit, writes
    SUMMARY when asked to summarize (ResponseKit's request for a `compaction_trigger`, or Codex's
    own summarizing turn), and answers once a request holds the summary."""

    def respond(body: dict) -> dict:
        messages = body["messages"]
        texts = [str(m.get("content")) for m in messages]
        if texts[0].startswith("You are compacting") or "CONTEXT CHECKPOINT COMPACTION" in texts[-1]:
            return text_exchange(SUMMARY)
        if any(SUMMARY in text for text in texts):
            return text_exchange("Done after compaction: Linux.")
        exchange = tool_call_exchange("exec_command", {"cmd": "uname -s"}, call_id=f"call_{len(messages)}")
        usage = exchange["chunks"][-2]["data"]["usage"]
        usage.update(prompt_tokens=30_000, total_tokens=30_020)  # past model_auto_compact_token_limit
        return exchange

    return respond


@pytest.mark.parametrize("remote", [True, False], ids=["remote-compaction-v2", "codex-summarizing-turn"])
def test_codex_compacts_mid_turn(server, tmp_path, remote):
    """Codex past its compaction limit: with `remote_compaction = "v2"` it sends its history with a
    `compaction_trigger` and takes back one `compaction` item; without, it runs its own summarizing
    turn. Either way the turn goes on from the summary."""
    server.upstream.responder = compacting_engine()
    home, work = codex_home(tmp_path, server.base_url), tmp_path / "work"
    work.mkdir()
    config = tomlkit.parse((home / "config.toml").read_text())
    config["model_auto_compact_token_limit"] = 20_000
    capability = "v2" if remote else "unsupported"  # either way, whatever `connect codex` declares
    config["model_providers"]["responsekit"]["capabilities"] = {"remote_compaction": capability}  # type: ignore[index]
    (home / "config.toml").write_text(tomlkit.dumps(config))

    events = run_codex(home, work, "Run uname and tell me the result")
    assert events[-1]["type"] == "turn.completed", events
    answer = [e["item"]["text"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"]
    assert answer[-1] == "Done after compaction: Linux."
    requests = server.upstream.requests
    summarizing = [i for i, r in enumerate(requests) if SUMMARY not in json.dumps(r) and (
        str(r["messages"][0]["content"]).startswith("You are compacting")
        or "CONTEXT CHECKPOINT COMPACTION" in str(r["messages"][-1]["content"]))]  # fmt: skip
    assert len(summarizing) == 1, [r["messages"][-1] for r in requests]
    summarized = requests[summarizing[0]]
    after = requests[summarizing[0] + 1]
    if remote:
        transcript = summarized["messages"][1]["content"]
        assert "tools" not in summarized and "[User]\nRun uname and tell me the result" in transcript
        assert "You are Codex" not in transcript, "the instructions, which Codex sends each turn, are not summarized"
        assert '[Assistant calls exec_command]\n{"cmd": "uname -s"}' in transcript and "Output:\nLinux" in transcript
        assert f"Summary of the conversation so far:\n{SUMMARY}" in after["messages"][0]["content"], "the item, opened"
        assert after["messages"][1:] == [{"role": "user", "content": "Run uname and tell me the result"}], \
            "the request at hand, which Codex keeps before the item"
    else:
        assert "Another language model started to solve this problem" in json.dumps(after), "Codex's summary prefix"
    assert SUMMARY in json.dumps(after) and not any("uname -s" in json.dumps(m) for m in after["messages"][1:]), \
        "the compacted turns are left out"
