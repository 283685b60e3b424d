"""Gemini CLI itself (npm `@google/gemini-cli`) on ResponseKit's Gemini API.

`gemini -p` runs headless (`--skip-trust`: a scratch folder is not a trusted one, and headless
Gemini CLI stops there) in a scratch HOME set up by `responsekit connect gemini --write`, so
the base URL, key and model come from the `~/.gemini/.env` and `settings.json` it wrote. The
engine is the scripted one (it reasons, calls one of Gemini CLI's own tools, and answers from
the result) or the real Gemma 3 270M in-process. What Gemini CLI sends was recorded in
tests/data/gemini_cli_requests.json.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from responsekit.app import create_app
from responsekit.backends.default_model import DEFAULT_MODEL_NAME
from responsekit.config import Settings

from .conftest import EngineServer
from .harness import DATA, serve, text_exchange, tool_call_exchange

GEMINI = Path(__file__).parent / "js" / "node_modules" / ".bin" / "gemini"
CAPTURED = json.loads((DATA / "gemini_cli_requests.json").read_text())
REASONING = "The user wants what the tool gives, so I call it first."


def offered_by_gemini_cli(exchange: str) -> list[str]:
    """The function names Gemini CLI declared in a recorded exchange's first request."""
    tools = CAPTURED["exchanges"][exchange]["requests"][0]["body"]["tools"]
    tools = CAPTURED["shared"][tools["$shared"]] if "$shared" in tools else tools
    return [declaration["name"] for tool in tools for declaration in tool["functionDeclarations"]]


def setup_home(tmp_path: Path, url: str) -> tuple[Path, Path]:
    """A scratch HOME whose ~/.gemini `connect gemini --write` filled (over a setting of the user's),
    and a working directory."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True)
    work.mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps({"ui": {"hideTips": True}}))
    subprocess.run(
        [sys.executable, "-m", "responsekit", "connect", "gemini", "--url", url, "--api-key", "test",
         "--gemini-dir", str(home / ".gemini"), "--write"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return home, work


def run_gemini(home: Path, work: Path, prompt: str, *args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One headless run, its `--output-format stream-json` events; nothing of the user's Gemini
    setup (variables, home) takes part."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith(("GEMINI_", "GOOGLE_"))}
    done = subprocess.run(
        [str(GEMINI), "--skip-trust", "--output-format", "stream-json", *args, "-p", prompt],
        cwd=work, env={**clean, "HOME": str(home), **(env or {})}, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events[0]["type"] == "init" and events[-1]["type"] == "result", done.stdout[-3000:]
    assert events[-1]["status"] == "success", events[-1]
    return events


def answer(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "message" and e["role"] == "assistant")


# --- the scripted engine --------------------------------------------------------------------


def tool_then_answer(name: str, arguments: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Call Gemini CLI's tool `name` (reasoning first), then answer quoting its result."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        results = [m for m in body["messages"] if m["role"] == "tool"]
        if results:
            return text_exchange(f"The tool said: {str(results[-1]['content'])[:300]}")
        if any(tool["function"]["name"] == name for tool in body.get("tools") or ()):
            return tool_call_exchange(name, arguments, reasoning=REASONING, call_id="call_gemini")
        return text_exchange("No such tool was offered.")

    return respond


def test_gemini_cli_answers_set_up_by_connect_gemini(server, tmp_path):
    server.upstream.responder = lambda body: text_exchange("Hello from the scripted engine.", reasoning="A greeting.")
    home, work = setup_home(tmp_path, server.url)
    events = run_gemini(home, work, "Say hello")

    assert events[0]["model"] == "test-model", "the model came from the .env connect gemini wrote"
    assert answer(events) == "Hello from the scripted engine."
    assert list(events[-1]["stats"]["models"]) == ["test-model"]  # the modelVersion ResponseKit answered
    assert events[-1]["stats"]["input_tokens"] > 0
    (body,) = server.upstream.requests
    assert body["model"] == "test-model"
    assert body["messages"][0]["role"] == "system" and "You are Gemini CLI" in body["messages"][0]["content"]
    user = body["messages"][-1]
    assert user["role"] == "user" and "Say hello" in str(user["content"]) and "<session_context>" in str(user["content"])
    offered = [tool["function"]["name"] for tool in body["tools"]]
    assert offered == offered_by_gemini_cli("plain"), "the function declarations reach the engine as Gemini CLI sent them"
    settings = json.loads((home / ".gemini" / "settings.json").read_text())
    assert settings["ui"] == {"hideTips": True}, "the user's own settings were kept"


def test_gemini_cli_shows_the_engine_refusal(server, tmp_path):
    """A prompt the engine's context cannot hold: the stream has started (its headers go out at once,
    so Gemini CLI does not give up on a long prefill), and the refusal ends it as Google's bare error
    object, which Gemini CLI reports, rather than a stream that ends without a finish reason."""
    message = "the request exceeds the available context size, try increasing it"
    server.upstream.responder = lambda body: {
        "status": 400, "error_body": json.dumps({"error": {"message": message, "type": "exceed_context_size_error"}})}
    home, work = setup_home(tmp_path, server.url)
    clean = {name: value for name, value in os.environ.items() if not name.startswith(("GEMINI_", "GOOGLE_"))}
    done = subprocess.run([str(GEMINI), "--skip-trust", "-p", "Say hello"], cwd=work, env={**clean, "HOME": str(home)},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240, check=False)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode != 0 and message in output, output[-3000:]
    assert "without a finish reason" not in output
    assert len(server.upstream.requests) == 1, "a 400 is not retried"


SNAPSHOT = "<state_snapshot>SNAPSHOT-42: notes.txt was read for the token.</state_snapshot>"
COMPRESSOR = "distilling chat history into a structured XML <state_snapshot>"
"""Gemini CLI's compression prompt (its `getCompressionPrompt`)."""


def reading_engine(body: dict[str, Any]) -> dict[str, Any]:
    """read_file on a first prompt, then an answer; a snapshot when Gemini CLI asks to compress."""
    if COMPRESSOR in str(body["messages"][0]["content"]):
        return text_exchange(SNAPSHOT)
    if body["messages"][-1]["role"] == "tool" or "again" in str(body["messages"][-1]["content"]):
        return text_exchange("The file holds the token.")
    return tool_call_exchange("read_file", {"file_path": "notes.txt"}, call_id="call_read")


@pytest.mark.parametrize("windowed", [True, False], ids=["window-known", "window-unknown"])
def test_gemini_cli_compresses_at_the_point_connect_gemini_set(request, tmp_path, windowed):
    """A session that read a file of about 40,000 tokens, resumed: with the engine's window (32,768)
    known, `connect gemini` told Gemini CLI to compress past 24,576 tokens, and it does before the
    next prompt, going on from its snapshot; without, it waits for half the million tokens it
    assumes. (It compresses only before a prompt of the user's, so only a resumed run can.)"""
    served = request.getfixturevalue("windowed_server" if windowed else "server")
    served.upstream.responder = reading_engine
    home, work = setup_home(tmp_path, served.url)
    (work / "notes.txt").write_text("The token is responsekit-7. The token is responsekit-7.\n" * 3000)
    run_gemini(home, work, "Read notes.txt with your tool and tell me the token.")
    events = run_gemini(home, work, "Tell me again.", "--resume", "latest")
    assert answer(events) == "The file holds the token."
    requests = served.upstream.requests
    compressed = [body for body in requests if COMPRESSOR in str(body["messages"][0]["content"])]
    assert bool(compressed) == windowed
    assert (SNAPSHOT in json.dumps(requests[-1])) == windowed, "the last prompt went on from the snapshot"


@pytest.mark.parametrize(("tool", "args"), [("read_file", ()), ("run_shell_command", ("--yolo",))],
                         ids=["read_file", "run_shell_command-yolo"])  # fmt: skip
def test_gemini_cli_runs_its_own_tool_and_sends_the_result_back(server, tmp_path, tool, args):
    """read_file is offered in headless mode as is; run_shell_command only with --yolo (the
    recorded exchanges `plain` and `shell_tool`)."""
    token = f"responsekit-{secrets.token_hex(6)}"
    arguments = {"file_path": "notes.txt"} if tool == "read_file" else {"command": f"echo {token}",
                                                                         "description": "Print the token"}  # fmt: skip
    assert tool in offered_by_gemini_cli("plain" if tool == "read_file" else "shell_tool")
    server.upstream.responder = tool_then_answer(tool, arguments)
    home, work = setup_home(tmp_path, server.url)
    (work / "notes.txt").write_text(f"The token is {token}.\n")
    events = run_gemini(home, work, "Use your tool to find the token and tell me what it is.", *args)

    (used,) = [e for e in events if e["type"] == "tool_use"]
    assert used["tool_name"] == tool and used["parameters"] == arguments
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert result["tool_id"] == used["tool_id"] and result["status"] == "success", result
    assert token in answer(events) and answer(events).startswith("The tool said:")

    first, second = server.upstream.requests
    assert tool in [t["function"]["name"] for t in first["tools"]]
    assert second["model"] == "test-model"
    position = next(i for i, m in enumerate(second["messages"]) if m["role"] == "tool")
    called, returned = second["messages"][position - 1], second["messages"][position]
    assert [call["function"]["name"] for call in called["tool_calls"]] == [tool]
    assert json.loads(called["tool_calls"][0]["function"]["arguments"]) == arguments
    assert returned["tool_call_id"] == called["tool_calls"][0]["id"]
    assert token in str(returned["content"]), "the functionResponse reached the engine"
    # Gemini CLI drops thought parts from its history but sends the call's thoughtSignature
    # back: the reasoning sealed in it reached the engine again.
    assert called["reasoning_content"] == REASONING


def test_gemini_cli_web_search_asks_the_chosen_model(server, tmp_path):
    """google_web_search asks Gemini CLI's helper model (gemini-3-flash-preview, whatever -m
    says: the recorded exchange `web_search`); connect gemini's customOverrides send it to the
    chosen model, which ResponseKit serves (without a search engine configured, `googleSearch`
    is left out and the model answers from what it knows)."""
    token = f"responsekit-{secrets.token_hex(6)}"
    helper = CAPTURED["exchanges"]["web_search"]["requests"][1]
    assert helper["path"] == "/v1beta/models/gemini-3-flash-preview:generateContent"
    assert helper["body"]["tools"] == [{"googleSearch": {}}]

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        if not body.get("tools"):  # the helper request: its googleSearch tool was left out
            return text_exchange(f"The search found {token}.")
        return tool_then_answer("google_web_search", {"query": "responsekit gateway"})(body)

    server.upstream.responder = respond
    home, work = setup_home(tmp_path, server.url)
    events = run_gemini(home, work, "Search the web for the ResponseKit gateway.")
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert result["status"] == "success" and token in answer(events)
    assert [body["model"] for body in server.upstream.requests] == ["test-model"] * 3
    search = server.upstream.requests[1]
    assert not search.get("tools") and "responsekit gateway" in str(search["messages"])


# --- the real default model -----------------------------------------------------------------

SYSTEM_MD = "You are a helpful assistant on the command line. Answer briefly.\n"
"""Gemini CLI's own system prompt and tools make ~9k tokens, more than the embedded model's 8192:
`GEMINI_SYSTEM_MD` replaces the prompt, `tools.core` keeps one tool (docs/clients.md)."""

HOOK = """\
import json, pathlib, sys
json.load(sys.stdin)
turns, force = pathlib.Path(sys.argv[1]), sys.argv[2] == "force"
first = not turns.exists()
turns.write_text((turns.read_text() if turns.exists() else "") + ("forced\\n" if force and first else "free\\n"))
config = {"mode": "ANY", "allowedFunctionNames": ["read_file"]} if force and first else {"mode": "NONE"}
print(json.dumps({"hookSpecificOutput": {"hookEventName": "BeforeToolSelection", "toolConfig": config}}))
"""
"""A BeforeToolSelection hook, Gemini CLI's way to choose a model request's tool config: with
`force`, the first request must call read_file (`toolConfig` mode ANY, one allowed function) and
the later ones call nothing; else none calls anything. It sees no function responses (only
text reaches a hook), so it counts its turns in a file."""


@pytest.fixture(scope="module")
def default_model(gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    """A server with nothing configured: the embedded default model (Gemma 3 270M in-process,
    its context and answer bounds), its file already assembled."""
    directory = tmp_path_factory.mktemp("default-model")
    (directory / "models").mkdir()
    (directory / "models" / gemma_gguf.name).symlink_to(gemma_gguf)
    settings = Settings(probe=False, data_dir=directory, database_url=f"sqlite:///{directory / 'state.db'}")
    app = create_app(settings)
    with serve(app) as url:
        yield EngineServer(url, app)


def small_model_home(tmp_path: Path, url: str, plan: str) -> tuple[Path, Path, Path]:
    """connect gemini's setup, plus one tool, a short greedy answer (`maxOutputTokens` and
    `temperature` set through Gemini CLI's model config: it asks for 1 by default), the hook, and
    the short system prompt in `$HOME/system.md`."""
    home, work = setup_home(tmp_path, url)
    hook, turns = tmp_path / "tool_choice_hook.py", tmp_path / "turns.txt"
    hook.write_text(HOOK)
    (home / "system.md").write_text(SYSTEM_MD)
    settings_path = home / ".gemini" / "settings.json"
    settings = json.loads(settings_path.read_text())
    settings["tools"] = {"core": ["read_file"]}
    settings["modelConfigs"]["customOverrides"].append(
        {"match": {"model": DEFAULT_MODEL_NAME},
         "modelConfig": {"generateContentConfig": {"maxOutputTokens": 24, "temperature": 0}}})  # fmt: skip
    settings["hooks"] = {"BeforeToolSelection": [{"matcher": "*", "hooks": [
        {"type": "command", "command": f"{sys.executable} {hook} {turns} {plan}", "name": "tool-choice"}]}]}  # fmt: skip
    settings_path.write_text(json.dumps(settings))
    return home, work, turns


def test_gemini_cli_on_the_default_model_answers(default_model, tmp_path):
    home, work, turns = small_model_home(tmp_path, default_model.url, "none")
    events = run_gemini(home, work, "Say hello in one short sentence.", env={"GEMINI_SYSTEM_MD": "~/system.md"})
    assert events[0]["model"] == DEFAULT_MODEL_NAME
    assert answer(events).strip() and not [e for e in events if e["type"] in ("tool_use", "error")]
    assert turns.read_text() == "free\n"
    stats = events[-1]["stats"]
    assert stats["input_tokens"] > 50 and 0 < stats["output_tokens"] <= 24


def test_gemini_cli_on_the_default_model_calls_a_tool(default_model, tmp_path):
    """A base model picks no tool by itself: the hook makes the first request name read_file,
    which ResponseKit holds the model to by grammar, arguments following the tool's schema;
    Gemini CLI runs it and sends its result, and the model answers."""
    home, work, turns = small_model_home(tmp_path, default_model.url, "force")
    (work / "notes.txt").write_text("The harbour opens at nine.\n")
    finished = default_model.engine().stats.finished  # type: ignore[attr-defined]

    events = run_gemini(home, work, "Read the file notes.txt and tell me when the harbour opens.",
                        env={"GEMINI_SYSTEM_MD": "~/system.md"})  # fmt: skip
    used = [e for e in events if e["type"] == "tool_use"]
    assert used and all(e["tool_name"] == "read_file" and isinstance(e["parameters"]["file_path"], str) for e in used)
    results = [e for e in events if e["type"] == "tool_result"]
    assert sorted(e["tool_id"] for e in results) == sorted(e["tool_id"] for e in used)  # each ran, found or not
    assert turns.read_text() == "forced\nfree\n", "one forced request, then one after the results"
    assert answer(events).strip()
    assert default_model.engine().stats.finished - finished == 2  # type: ignore[attr-defined]
