"""Attachments never break a thread, end to end with the real clients (docs/attachments.md).

Codex CLI with an attached image (`codex exec --image`), Claude Code reading a PNG and a PDF
with its Read tool, and the Vercel AI SDK with an image part, each against the real server on
loopback. The engine behind them is the scripted one, serving a text-only model that refuses
images the way vLLM does (`refuses_images`): ResponseKit learns it from that refusal, or is told
it by the configuration; with a `vision_model`, a second scripted engine reads the images and
answers a description. Each thread goes on for three more turns, which replay the image every
time.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig
from responsekit.orchestration.attachments import TEXT_ONLY

from . import test_claude_code as claude_code
from .harness import ScriptedUpstream, image_parts, serve, text_exchange, tool_call_exchange
from .test_attachments import sent_texts
from .test_claude_code import CLAUDE
from .test_real_clients import JS, codex_home, run_codex
from .test_vector_stores import pdf_with_text


def png(red: int, green: int, blue: int, size: int = 4) -> bytes:
    """A real PNG (RFC 2083): a `size`-pixel square of one colour, 8-bit RGB, zlib-deflated rows."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes((red, green, blue)) * size for _ in range(size))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


ATTACHED = "An image was attached here"
"""How every text in an image's place begins (a note, or a description by the vision model)."""
CODEX_OMITTED = "image content omitted because you do not support image input"
"""What Codex writes in an image's place for a model that its catalog says reads text only."""
DESCRIPTIONS = {"red": "A red square.", "blue": "A blue square."}
IMAGES = {"red": png(220, 20, 20), "blue": png(20, 20, 220)}


MODES = ["learned", "configured", "vision-model"]
"""How ResponseKit knows the text engine's model reads text only: from the engine's first refusal
(it says nothing, as vLLM), or from the configuration (`vision = false`); and, with a
`vision_model` (learned as in the first), the images are described by the vision engine."""


@dataclass
class Engines:
    """ResponseKit's URL, the text-only engine and (with a vision model) the engine that reads images."""

    url: str
    text: ScriptedUpstream
    vision: ScriptedUpstream | None
    mode: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def describer(body: dict[str, Any]) -> dict[str, Any]:
    """The vision engine: it names the colour of the PNG it was shown."""
    url = image_parts(body)[0]["image_url"]["url"]
    data = base64.b64decode(url.split(",", 1)[1])
    colour = next(name for name, image in IMAGES.items() if image == data)
    return text_exchange(DESCRIPTIONS[colour])


@contextmanager
def engines(tmp_path: Path, responder: Any, mode: str) -> Iterator[Engines]:
    """ResponseKit in front of a text-only engine that refuses images as vLLM does (`MODES`), and
    in mode `vision-model` a second engine serving `vision-model`, which describes them."""
    text = ScriptedUpstream()
    text.refuses_images = True
    text.responder = responder
    vision = ScriptedUpstream(models=("vision-model",)) if mode == "vision-model" else None
    with serve(text.app) as text_url, (serve(vision.app) if vision else _nothing()) as vision_url:
        configured = False if mode == "configured" else None
        upstreams = [UpstreamConfig(name="text", base_url=f"{text_url}/v1", vision=configured)]
        options: dict[str, Any] = {}
        if vision is not None:
            vision.responder = describer
            upstreams.append(UpstreamConfig(name="vision", base_url=f"{vision_url}/v1", vision=True))
            options["vision_model"] = "vision-model"
        settings = Settings(upstreams=upstreams, probe=False, data_dir=tmp_path / "data",
                            aliases={"claude-sonnet-4-5": "test-model"}, **options)  # fmt: skip
        with serve(create_app(settings)) as url:
            yield Engines(url, text, vision, mode)


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def check_text_engine(engines: Engines, images: int, *, described: list[str] | None = None) -> list[dict[str, Any]]:
    """What the text-only engine answered: no request it answered held an image; each held a text
    in each image's place (a description when a vision model wrote one). Configured text-only,
    it never got an image; else it refused one request, the first holding images (it says
    nothing of what its model reads, so that refusal teaches ResponseKit). Returns the answered
    requests."""
    refused = [body for body in engines.text.requests if image_parts(body)]
    if engines.mode == "configured":
        assert refused == [], "a model configured text-only never gets an image"
    else:
        assert len(refused) == 1, "the first images were refused, and after that no image reaches the engine"
    answered = [body for body in engines.text.requests if not image_parts(body)]
    with_images = [body for body in answered if ATTACHED in sent_texts(body)]
    assert with_images, "the images reached the model as text"
    for body in with_images:
        texts = sent_texts(body)
        if described is None:
            assert texts.count(TEXT_ONLY) == images
        else:
            assert TEXT_ONLY not in texts
            assert all(f"another model described the image: {text}]" in texts for text in described)
    return answered


def check_vision_engine(engines: Engines, images: int) -> None:
    """The vision engine was asked once per image across all turns."""
    assert engines.vision is not None
    assert len(engines.vision.requests) == images
    assert all(len(image_parts(body)) == 1 for body in engines.vision.requests)


# --- Codex CLI: `codex exec --image` ---------------------------------------------------------


def answer_of(events: list[dict[str, Any]]) -> str:
    assert events[-1]["type"] == "turn.completed", events[-3:]
    assert not any(e["type"] in ("error", "turn.failed") for e in events), events
    return next(e["item"]["text"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message")


def turn_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A text engine's answer that counts the user turns it was given."""
    users = sum(1 for message in body["messages"] if message["role"] == "user")
    return text_exchange(f"Answer to user message {users}.")


@pytest.mark.parametrize("mode", MODES)
def test_codex_exec_with_an_attached_image_keeps_its_thread(tmp_path: Path, mode: str):
    with engines(tmp_path, turn_answer, mode) as served:
        home, work = codex_home(tmp_path, served.base_url, "test-model"), tmp_path / "work"
        work.mkdir()
        for name, data in IMAGES.items():
            (work / f"{name}.png").write_bytes(data)
        first = run_codex(home, work, "--image", "red.png,blue.png", "What do these screenshots show?")
        assert answer_of(first).startswith("Answer to user message")
        for turn in range(3):
            resumed = run_codex(home, work, "resume", "--last", f"Follow-up {turn}")
            assert answer_of(resumed).startswith("Answer to user message")
        if mode == "configured":
            # Its catalog (`connect codex`, from /v1/models) says the model reads text only: Codex
            # leaves the images out itself, and none reaches the server.
            answered = served.text.requests
            assert not any(image_parts(body) for body in answered)
            assert all(sent_texts(body).count(CODEX_OMITTED) == 2 for body in answered)
        else:
            described = list(DESCRIPTIONS.values()) if mode == "vision-model" else None
            answered = check_text_engine(served, 2, described=described)
            followed = [body for body in answered if "Follow-up" in sent_texts(body)]
            assert len(followed) >= 3 and all(ATTACHED in sent_texts(body) for body in followed), "replayed as text"
        last = sent_texts(answered[-1])
        assert "What do these screenshots show?" in last and "Follow-up 2" in last, "the whole thread was replayed"
        if mode == "vision-model":
            check_vision_engine(served, 2)


# --- Claude Code: its Read tool on a PNG and a PDF --------------------------------------------


def read_loop(files: list[Path]) -> Any:
    """An engine for Claude Code: on the first prompt it reads each of `files` with Read, one
    after the other, then answers; later prompts get an answer without tools. Requests that
    offer no Read tool (a title, a quota check…) get a short text."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        if not any(tool["function"]["name"] == "Read" for tool in body.get("tools") or ()):
            return text_exchange("OK.")
        results = [m for m in messages if m["role"] == "tool"]
        if messages[-1]["role"] == "tool" and len(results) < len(files) or not results:
            path = files[len(results)]
            return tool_call_exchange("Read", {"file_path": str(path)}, reasoning=f"I should read {path.name}.",
                                      call_id=f"toolu_read_{len(results)}")  # fmt: skip
        return turn_answer(body)

    return respond


def run_claude(home: Path, workdir: Path, prompt: str, *args: str) -> list[dict[str, Any]]:
    events = claude_code.run_claude(home, workdir, {}, "--max-turns", "6", *args, prompt=prompt)
    result = events[-1]
    assert result["type"] == "result" and result["is_error"] is False, result
    assert result["result"].startswith("Answer to user message"), result["result"]
    return events


def tool_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [block for event in events if event["type"] == "user" and isinstance(event["message"]["content"], list)
            for block in event["message"]["content"] if block.get("type") == "tool_result"]  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_claude_code_reads_a_png_and_a_pdf_and_keeps_its_thread(tmp_path: Path, mode: str):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "chart.png").write_bytes(IMAGES["red"])
    (work / "report.pdf").write_bytes(pdf_with_text("Revenue grew eleven percent"))
    with engines(tmp_path, read_loop([work / "chart.png", work / "report.pdf"]), mode) as served:
        subprocess.run(
            [sys.executable, "-m", "responsekit", "connect", "claude", "--url", served.url, "--api-key", "test",
             "--model", "test-model", "--claude-home", str(home / ".claude"), "--write"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        events = run_claude(home, work, "Look at chart.png and report.pdf and tell me what they show.")
        for turn in range(3):
            run_claude(home, work, f"Follow-up {turn}", "--continue")
    image, document = tool_results(events)
    assert [block["type"] for block in image["content"]] == ["image"]
    assert base64.b64decode(image["content"][0]["source"]["data"]) == IMAGES["red"]
    pdf = next(block for block in document["content"] if block["type"] == "document")
    assert pdf["source"]["media_type"] == "application/pdf"
    described = [DESCRIPTIONS["red"]] if mode == "vision-model" else None
    answered = check_text_engine(served, 1, described=described)
    last = sent_texts(answered[-1])
    assert "Look at chart.png" in last and "Follow-up 2" in last, "the whole thread was replayed"
    assert "Revenue grew eleven percent" in last, "the PDF reached the model as its text"
    followed = [body for body in answered if "Follow-up" in sent_texts(body)]
    assert len(followed) >= 3
    assert all("Revenue grew eleven percent" in sent_texts(body) and ATTACHED in sent_texts(body) for body in followed)
    if mode == "vision-model":
        check_vision_engine(served, 1)


# --- the Vercel AI SDK: an image part ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_vercel_ai_sdk_with_an_image_part_keeps_its_thread(tmp_path: Path, mode: str):
    (tmp_path / "chart.png").write_bytes(IMAGES["blue"])
    with engines(tmp_path, turn_answer, mode) as served:
        done = subprocess.run(["node", str(JS / "ai_sdk_image.mjs"), served.base_url, str(tmp_path / "chart.png")],
                              capture_output=True, text=True, timeout=180, cwd=JS)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for api in ("responses", "chat"):
        assert [answer["text"] for answer in result[api]] == [f"Answer to user message {n}." for n in range(1, 5)]
        assert all(answer["finishReason"] == "stop" for answer in result[api])
    described = [DESCRIPTIONS["blue"]] if mode == "vision-model" else None
    answered = check_text_engine(served, 1, described=described)
    assert len(answered) == 8 and all(ATTACHED in sent_texts(body) for body in answered)
    for api in ("responses", "chat"):
        last = sent_texts([body for body in answered if f"({api})" in sent_texts(body)][-1])
        assert f"What does this chart show? ({api})" in last and f"Follow-up 3 ({api})" in last
    if mode == "vision-model":
        check_vision_engine(served, 1)


def test_claude_code_with_a_pasted_image_keeps_its_thread(tmp_path: Path):
    """An image pasted into Claude Code: a Messages `image` block in the user's own message
    (given here as Claude Code's stream-json input, as its SDK sends it)."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    image = base64.b64encode(IMAGES["blue"]).decode()
    message = {"type": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": "What is in this screenshot?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}}]}}  # fmt: skip
    with engines(tmp_path, turn_answer, "learned") as served:
        subprocess.run(
            [sys.executable, "-m", "responsekit", "connect", "claude", "--url", served.url, "--api-key", "test",
             "--model", "test-model", "--claude-home", str(home / ".claude"), "--write"],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        clean = {name: value for name, value in os.environ.items() if not name.startswith(("ANTHROPIC_", "CLAUDE_"))}
        done = subprocess.run(
            [str(CLAUDE), "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
             "--permission-mode", "bypassPermissions", "--max-turns", "2"],
            input=json.dumps(message) + "\n", cwd=work, env={**clean, "HOME": str(home), "IS_SANDBOX": "1"},
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
        result = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")][-1]
        assert result["type"] == "result" and result["is_error"] is False, result
        for turn in range(3):
            run_claude(home, work, f"Follow-up {turn}", "--continue")
    answered = check_text_engine(served, 1)
    followed = [body for body in answered if "Follow-up" in sent_texts(body)]
    assert len(followed) >= 3 and all(ATTACHED in sent_texts(body) for body in followed)
    assert "What is in this screenshot?" in sent_texts(answered[-1])


def view_image_loop(path: str) -> Any:
    """An engine for Codex: on the first prompt it looks at `path` with Codex's `view_image`
    tool, then answers; later prompts get an answer without tools."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        offered = [tool["function"]["name"] for tool in body.get("tools") or ()]
        if not any(m["role"] == "tool" for m in messages) and "view_image" in offered:
            return tool_call_exchange("view_image", {"path": path}, reasoning="I should look at it.", call_id="call_view")
        return turn_answer(body)

    return respond


@pytest.mark.parametrize("mode", ["learned", "vision-model"])
def test_codex_view_image_keeps_its_thread(tmp_path: Path, mode: str):
    """Codex's `view_image` tool returns the image in its output (a `function_call_output` with
    an `input_image`), replayed on every later turn."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "red.png").write_bytes(IMAGES["red"])
    with engines(tmp_path, view_image_loop(str(work / "red.png")), mode) as served:
        home = codex_home(tmp_path, served.base_url, "test-model")
        first = run_codex(home, work, "Look at red.png")
        assert answer_of(first).startswith("Answer to user message")
        offered = [tool["function"]["name"] for tool in served.text.requests[0].get("tools") or ()]
        assert "view_image" in offered, offered
        for turn in range(3):
            assert answer_of(run_codex(home, work, "resume", "--last", f"Follow-up {turn}")).startswith("Answer to")
    described = [DESCRIPTIONS["red"]] if mode == "vision-model" else None
    answered = check_text_engine(served, 1, described=described)
    followed = [body for body in answered if "Follow-up" in sent_texts(body)]
    assert len(followed) >= 3 and all(ATTACHED in sent_texts(body) for body in followed)
    messages = answered[-1]["messages"]
    tool = next(position for position, m in enumerate(messages) if m["role"] == "tool")
    images = messages[tool + 1]  # the Responses history gives a tool output's images as a user turn after it
    assert images["role"] == "user" and images["content"].startswith("Images returned by tool call call_view:")
    assert ATTACHED in images["content"], "the text is where the tool's image was"
    if mode == "vision-model":
        check_vision_engine(served, 1)
