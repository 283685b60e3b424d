"""Images and documents never break a thread (docs/attachments.md).

A real server on loopback in front of the scripted engine: a text-only model gets a note
in each image's place on every protocol and every turn of a replayed history; an engine
that refuses images teaches it; a model that reads images gets them unchanged; a bad
attachment is a note, never an error; documents reach every model as their text.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import Message as AnthropicMessage

from responsekit.app import create_app
from responsekit.config import Settings, UpstreamConfig
from responsekit.orchestration.attachments import TEXT_ONLY

from .conftest import DATABASES, Server
from .harness import (
    ScriptedUpstream,
    check_chat_completion,
    check_response,
    image_parts,
    serve,
    text_exchange,
)
from .test_vector_stores import pdf_with_text

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n fake image bytes").decode()


@contextmanager
def gateway(upstream: ScriptedUpstream, database_url: str, vision: bool | dict[str, bool] | None, **options: Any) -> Iterator[Server]:
    """ResponseKit in front of the scripted engine, whose model reads images (`vision`) or not."""
    config = UpstreamConfig(name="scripted", base_url=upstream.url, vision=vision)  # type: ignore[attr-defined]
    settings = Settings(upstreams=[config], probe=False, database_url=database_url, **options)
    with serve(create_app(settings)) as url:
        yield Server(url, upstream)


def answering(upstream: ScriptedUpstream) -> None:
    upstream.responder = lambda body: text_exchange("ok")


def sent_texts(body: dict[str, Any]) -> str:
    """Every text the engine was sent, joined."""
    texts = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [part.get("text", "") for part in content]
    return "\n".join(texts)


def responses(server: Server, **body: Any) -> dict[str, Any]:
    answer = httpx.post(f"{server.base_url}/responses", json={"model": "test-model", **body}, timeout=30)
    assert answer.status_code == 200, answer.text
    check_response(answer.json())
    return answer.json()


# --- a text-only model: a note in each image's place, on every protocol and turn ------------


@pytest.fixture
def text_only(upstream: ScriptedUpstream, database_url: str) -> Iterator[Server]:
    answering(upstream)
    with gateway(upstream, database_url, vision=False) as server:
        yield server


def test_responses_image_to_a_text_only_model_keeps_its_thread(text_only: Server):
    content = [{"type": "input_text", "text": "What is in this screenshot?"},
               {"type": "input_image", "image_url": PNG, "detail": "auto"},
               {"type": "input_image", "image_url": "https://example.com/cat.png"}]  # fmt: skip
    first = responses(text_only, input=[{"role": "user", "content": content}])
    previous, prompts = first["id"], []
    for turn in range(3):
        previous = responses(text_only, input=f"And turn {turn}?", previous_response_id=previous)["id"]
    for body in text_only.upstream.requests:
        assert image_parts(body) == []
        assert sent_texts(body).count(TEXT_ONLY) == 2
        prompts.append(body["messages"][0])
    assert all(prompt == prompts[0] for prompt in prompts), "the replayed turn is the same on every turn"


def test_responses_stateless_history_with_an_image_keeps_its_thread(text_only: Server):
    history: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "input_text", "text": "Look"}, {"type": "input_image", "image_url": PNG}]},
        {"type": "function_call", "call_id": "c1", "name": "screenshot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_image", "image_url": PNG}]},
    ]  # fmt: skip
    tools = [{"type": "function", "name": "screenshot", "parameters": {"type": "object"}}]
    for turn in range(4):
        answer = responses(text_only, input=history, store=False, tools=tools)
        history += [*answer["output"], {"role": "user", "content": f"turn {turn}"}]
    assert len(text_only.upstream.requests) == 4
    for body in text_only.upstream.requests:  # the image of the tool output too
        assert image_parts(body) == [] and sent_texts(body).count(TEXT_ONLY) == 2
    client = text_only.client()  # the SDK's own request shapes too
    answer = client.responses.create(model="test-model", input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": PNG, "detail": "low"}]}])  # type: ignore[list-item]  # fmt: skip
    assert answer.status == "completed" and image_parts(text_only.upstream.requests[-1]) == []


def test_chat_image_to_a_text_only_model_keeps_its_thread(text_only: Server):
    messages: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG}}]}]  # fmt: skip
    for turn in range(4):
        answer = httpx.post(f"{text_only.base_url}/chat/completions", json={"model": "test-model", "messages": messages})
        assert answer.status_code == 200, answer.text
        completion = check_chat_completion(answer.json())
        messages += [{"role": "assistant", "content": completion.choices[0].message.content},
                     {"role": "user", "content": f"turn {turn}"}]  # fmt: skip
    stream = text_only.client().chat.completions.create(model="test-model", messages=messages, stream=True)  # type: ignore[arg-type]
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "ok"
    assert len(text_only.upstream.requests) == 5
    assert all(image_parts(body) == [] and TEXT_ONLY in sent_texts(body) for body in text_only.upstream.requests)


def test_messages_images_to_a_text_only_model_keep_their_thread(text_only: Server):
    data = PNG.split(",", 1)[1]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [
            {"type": "text", "text": "Read this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/chart.png"}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]},
    ]  # fmt: skip
    tools = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]
    for turn in range(4):
        body = {"model": "test-model", "max_tokens": 64, "messages": messages, "tools": tools}
        answer = httpx.post(f"{text_only.base_url}/messages", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        message = AnthropicMessage.model_validate(answer.json())
        messages += [{"role": "assistant", "content": [block.model_dump() for block in message.content]},
                     {"role": "user", "content": f"turn {turn}"}]  # fmt: skip
    assert len(text_only.upstream.requests) == 4
    for sent in text_only.upstream.requests:
        assert image_parts(sent) == [] and sent_texts(sent).count(TEXT_ONLY) == 3
    count = httpx.post(f"{text_only.base_url}/messages/count_tokens", json={"model": "test-model", "messages": messages})
    assert count.status_code == 200 and count.json()["input_tokens"] > 0


def test_an_image_to_the_in_process_text_model_is_a_note(engine_server):
    """An in-process model loads no projector: it reads text only, and says so instead of a 400."""
    content = [{"type": "input_text", "text": "hi"}, {"type": "input_image", "image_url": PNG}]
    answer = httpx.post(f"{engine_server.base_url}/responses", timeout=60,
                        json={"model": "tiny", "max_output_tokens": 16, "input": [{"role": "user", "content": content}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert check_response(answer.json()).status in ("completed", "incomplete")
    chat = httpx.post(f"{engine_server.base_url}/chat/completions", json={"model": "tiny", "max_tokens": 4, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]}]}, timeout=60)  # fmt: skip
    assert chat.status_code == 200, chat.text
    health = httpx.get(f"{engine_server.url}/health").json()
    engine = next(entry for entry in health["upstreams"] if entry["kind"] == "llama.cpp (in-process)")
    assert engine["images"] == {"tiny": {"reads_images": False, "source": "no multimodal projector is loaded"}}


# --- an engine that does not say: learned from its refusal --------------------------------


def test_an_engine_refusing_images_is_learned_from(upstream: ScriptedUpstream, database_url: str, caplog):
    answering(upstream)
    upstream.refuses_images = True
    with gateway(upstream, database_url, vision=None) as server:
        content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PNG}}]
        body = {"model": "test-model", "messages": [{"role": "user", "content": content}]}
        answer = httpx.post(f"{server.base_url}/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        refused, retried = upstream.requests
        assert image_parts(refused) and image_parts(retried) == [] and TEXT_ONLY in sent_texts(retried)
        assert "not a multimodal model" in caplog.text

        # Learned: later requests, on any protocol, send no image at all.
        first = responses(server, input=[{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}],
                          stream=False)  # fmt: skip
        assert len(upstream.requests) == 3 and image_parts(upstream.requests[-1]) == []
        responses(server, input="more", previous_response_id=first["id"])
        assert len(upstream.requests) == 4 and image_parts(upstream.requests[-1]) == []


def test_an_image_its_engine_cannot_read_is_a_note_and_teaches_nothing(upstream: ScriptedUpstream, database_url: str):
    """A model that reads images, whose engine cannot fetch or decode one of them: that request
    goes again with a note in the images' places, and the model still gets images."""
    answering(upstream)
    upstream.push({"status": 400, "error_body": '{"object": "error", "message": "Failed to load image from '
                                                'https://example.com/gone.png: 404", "code": 400}'})  # fmt: skip
    with gateway(upstream, database_url, vision=None) as server:
        content = [{"type": "image_url", "image_url": {"url": "https://example.com/gone.png"}}]
        body = {"model": "test-model", "messages": [{"role": "user", "content": content}]}
        assert httpx.post(f"{server.base_url}/chat/completions", json=body).status_code == 200
        refused, retried = upstream.requests
        assert image_parts(refused) and image_parts(retried) == []
        assert "the model's engine could not read it" in sent_texts(retried)
        assert httpx.post(f"{server.base_url}/chat/completions", json=body).status_code == 200
        assert image_parts(upstream.requests[-1]), "not learned as text-only"


def test_a_refusal_that_is_not_about_images_is_passed_on(upstream: ScriptedUpstream, database_url: str):
    upstream.push({"status": 400, "error_body": '{"error": {"message": "temperature is out of range"}}'})
    with gateway(upstream, database_url, vision=None) as server:
        content = [{"type": "image_url", "image_url": {"url": PNG}}]
        answer = httpx.post(f"{server.base_url}/chat/completions",
                            json={"model": "test-model", "messages": [{"role": "user", "content": content}]})  # fmt: skip
    assert answer.status_code == 400 and len(upstream.requests) == 1


# --- a model that reads images: unchanged ----------------------------------------------------


def test_a_model_that_reads_images_gets_them_unchanged(upstream: ScriptedUpstream, database_url: str):
    answering(upstream)
    with gateway(upstream, database_url, vision=True) as server:
        responses(server, input=[{"role": "user", "content": [{"type": "input_image", "image_url": PNG, "detail": "low"}]}])
        assert image_parts(upstream.requests[-1]) == [{"type": "image_url", "image_url": {"url": PNG, "detail": "low"}}]
        chat = {"model": "test-model", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]}]}
        assert httpx.post(f"{server.base_url}/chat/completions", json=chat).status_code == 200
        assert image_parts(upstream.requests[-1]) == [{"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}}]
        uploaded = server.client().files.create(file=("shot.png", b"\x89PNG\r\n\x1a\nreal enough"), purpose="vision")
        responses(server, input=[{"role": "user", "content": [{"type": "input_image", "file_id": uploaded.id}]}])
        expected = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nreal enough").decode()
        assert image_parts(upstream.requests[-1])[0]["image_url"]["url"] == expected


def test_images_of_tool_results_reach_a_model_that_reads_images(upstream: ScriptedUpstream, database_url: str):
    """A chat `tool` message holds text only: the images of tool results follow them in a user
    message (Codex's `view_image`, Claude Code's Read of a PNG)."""
    answering(upstream)
    data = PNG.split(",", 1)[1]
    messages = [
        {"role": "user", "content": "Look at a.png and b.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": "a.png"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "b.png is gone"},
            {"type": "text", "text": "What do you see?"}]},
    ]  # fmt: skip
    tools = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]
    with gateway(upstream, database_url, vision=True) as server:
        body = {"model": "test-model", "max_tokens": 64, "messages": messages, "tools": tools}
        answer = httpx.post(f"{server.base_url}/messages", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"], "the roles still alternate"
    assert sent[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "a.png"}
    assert sent[4]["content"] == [{"type": "text", "text": "[the image(s) of tool result toolu_1]"},
                                  {"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}},
                                  {"type": "text", "text": "What do you see?"}]  # fmt: skip
    # Without a user message after them, the images are one of their own.
    with gateway(upstream, database_url, vision=True) as server:
        body = {"model": "test-model", "max_tokens": 64, "messages": messages[:2] + [{"role": "user", "content": [
            messages[2]["content"][0]]}], "tools": tools}  # type: ignore[index]  # fmt: skip
        assert httpx.post(f"{server.base_url}/messages", json=body, timeout=30).status_code == 200
    sent = upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[3]["content"][1] == {"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}}


# --- an image by URL, for engines that do not fetch URLs: fetched here, sent inline ----------------


def image_host(engine: ScriptedUpstream) -> str:
    """Where the scripted engine serves its `files` (an image URL may point there)."""
    return engine.url.removesuffix("/v1") + "/files"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("kind", "inline"), [("ollama", True), ("lmstudio", True), ("vllm", False), ("llamacpp", False)])
def test_an_image_by_url_is_sent_inline_to_engines_that_do_not_fetch(upstream: ScriptedUpstream, database_url: str,
                                                                     kind: str, inline: bool):  # fmt: skip
    answering(upstream)
    image = base64.b64decode(PNG.split(",", 1)[1])
    upstream.files["chart.png"] = image
    url = f"{image_host(upstream)}/chart.png"
    config = UpstreamConfig(name="engine", base_url=upstream.url, kind=kind, vision=True)  # type: ignore[attr-defined,arg-type]
    settings = Settings(upstreams=[config], probe=False, database_url=database_url, allowed_hosts=["127.0.0.1"])
    with serve(create_app(settings)) as base:
        server = Server(base, upstream)
        first = responses(server, input=[{"role": "user", "content": [{"type": "input_image", "image_url": url}]}])
        previous = first["id"]
        for turn in range(2):
            previous = responses(server, input=f"turn {turn}", previous_response_id=previous)["id"]
        chat = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
        assert httpx.post(f"{server.base_url}/chat/completions", json={"model": "test-model", "messages": chat}).status_code == 200
    sent = [image_parts(body) for body in upstream.requests]
    expected = PNG if inline else url
    assert sent == [[{"type": "image_url", "image_url": {"url": expected, "detail": "auto"}}]] * 4
    assert upstream.file_hits == (1 if inline else 0), "fetched once for the whole thread, or left to the engine"


def test_an_image_url_fetched_here_is_bounded_and_checked_on_every_redirect(upstream: ScriptedUpstream,
                                                                            database_url: str):  # fmt: skip
    answering(upstream)
    upstream.files["report.pdf"] = pdf_with_text("not an image")
    upstream.files["big.png"] = b"\x89PNG\r\n\x1a\n" + b"x" * 4096
    upstream.files["empty.png"] = b""
    upstream.redirects["metadata.png"] = "http://169.254.169.254/latest/meta-data/"
    upstream.redirects["moved.png"] = f"{image_host(upstream)}/chart.png"
    upstream.files["chart.png"] = base64.b64decode(PNG.split(",", 1)[1])
    host = image_host(upstream)
    config = UpstreamConfig(name="engine", base_url=upstream.url, kind="ollama", vision=True)  # type: ignore[attr-defined]
    settings = Settings(upstreams=[config], probe=False, database_url=database_url, allowed_hosts=["127.0.0.1"],
                        max_image_bytes=1024)  # fmt: skip
    urls = {f"{host}/metadata.png": "its URL could not be fetched", f"{host}/missing.png": "its URL could not be fetched",
            f"{host}/report.pdf": "does not lead to a PNG, JPEG, GIF, WebP or BMP image",
            f"{host}/big.png": "its URL could not be fetched", f"{host}/empty.png": "it is empty",
            "http://10.1.2.3/private.png": "its URL could not be fetched"}  # fmt: skip
    with serve(create_app(settings)) as base:
        server = Server(base, upstream)
        content = [{"type": "input_image", "image_url": url} for url in [*urls, f"{host}/moved.png"]]
        responses(server, input=[{"role": "user", "content": content}])
    body = upstream.requests[-1]
    assert image_parts(body) == [{"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}}], "followed to an allowed host"
    texts = sent_texts(body)
    assert all(why in texts for why in urls.values())
    assert texts.count("cannot be shown to the model") == len(urls)


def test_an_image_url_that_does_not_answer_in_time_is_a_note(upstream: ScriptedUpstream, database_url: str,
                                                             monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    monkeypatch.setattr("responsekit.orchestration.attachments.IMAGE_FETCH_TIMEOUT", 0.3)
    answering(upstream)
    upstream.files["slow.png"] = base64.b64decode(PNG.split(",", 1)[1])
    upstream.file_delay = 3.0
    config = UpstreamConfig(name="engine", base_url=upstream.url, kind="ollama", vision=True)  # type: ignore[attr-defined]
    settings = Settings(upstreams=[config], probe=False, database_url=database_url, allowed_hosts=["127.0.0.1"])
    with serve(create_app(settings)) as base:
        content = [{"type": "input_image", "image_url": f"{image_host(upstream)}/slow.png"}]
        started = time.monotonic()
        responses(Server(base, upstream), input=[{"role": "user", "content": content}])
        assert time.monotonic() - started < 2.5
    assert image_parts(upstream.requests[-1]) == [] and "its URL could not be fetched" in sent_texts(upstream.requests[-1])


def test_the_vision_model_is_shown_an_image_by_url_inline_when_its_engine_does_not_fetch(database_url: str):
    text, vision = ScriptedUpstream(), ScriptedUpstream(models=("vision-model",))
    text.responder = lambda body: text_exchange("ok")
    vision.responder = lambda body: text_exchange("A chart going up.")
    vision.files["chart.png"] = base64.b64decode(PNG.split(",", 1)[1])
    with serve(text.app) as text_url, serve(vision.app) as vision_url:
        vision.url = f"{vision_url}/v1"  # type: ignore[attr-defined]
        upstreams = [UpstreamConfig(name="text", base_url=f"{text_url}/v1", vision=False),
                     UpstreamConfig(name="vision", base_url=f"{vision_url}/v1", kind="ollama", vision=True)]  # fmt: skip
        settings = Settings(upstreams=upstreams, probe=False, database_url=database_url, vision_model="vision-model",
                            allowed_hosts=["127.0.0.1"])  # fmt: skip
        with serve(create_app(settings)) as base:
            url = f"{image_host(vision)}/chart.png"
            first = responses(Server(base, text), input=[{"role": "user", "content": [{"type": "input_image", "image_url": url}]}])
            responses(Server(base, text), input="more", previous_response_id=first["id"])
    assert [image_parts(body) for body in vision.requests] == [[{"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}}]]
    assert all("another model described the image: A chart going up.]" in sent_texts(body) for body in text.requests)
    assert vision.file_hits == 1


# --- bad input: a note, never an error -------------------------------------------------------

BAD_IMAGES = {
    "data:image/png;base64,!!not base64!!": "not valid base64",
    "data:image/png;base64,": "it is empty",
    "data:image/png;base64," + base64.b64encode(b"x" * 4096).decode(): "larger than 1024 bytes",
    "http://127.0.0.1:9/private.png": "does not let be fetched",
    "data:image/png,notbase64": "malformed",
    "file:///etc/passwd": "neither a data URL",
    "http://[::1/x.png": "does not let be fetched",
}
ODD_URLS = ["http://a\x00b/x.png", "http://" + "a" * 300 + "/x.png", "https://127.1:99999/x"]


@pytest.mark.parametrize("vision", [True, None])
def test_bad_images_are_notes_in_new_input_and_in_replayed_history(upstream: ScriptedUpstream, database_url: str,
                                                                   vision: bool | None):  # fmt: skip
    answering(upstream)
    with gateway(upstream, database_url, vision=vision, max_image_bytes=1024) as server:
        content = [{"type": "input_text", "text": "see"}, *({"type": "input_image", "image_url": url} for url in BAD_IMAGES),
                   *({"type": "input_image", "image_url": url} for url in ODD_URLS),
                   *({"type": "input_file", "file_url": url} for url in ODD_URLS),
                   {"type": "input_image", "file_id": "file-missing"}]  # fmt: skip
        first = responses(server, input=[{"role": "user", "content": content}])
        second = responses(server, input="and?", previous_response_id=first["id"])
        history = [{"role": "user", "content": content}, *second["output"], {"role": "user", "content": "again"}]
        responses(server, input=history, store=False)
        chat = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}} for url in BAD_IMAGES]},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]  # fmt: skip
        answer = httpx.post(f"{server.base_url}/chat/completions", json={"model": "test-model", "messages": chat})
        assert answer.status_code == 200, answer.text
        messages = [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "!!"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}},
            {"type": "image", "source": {"type": "url", "url": "http://10.0.0.1/x.png"}}]}]  # fmt: skip
        answer = httpx.post(f"{server.base_url}/messages", json={"model": "test-model", "max_tokens": 8, "messages": messages})
        assert answer.status_code == 200, answer.text
    for position, body in enumerate(upstream.requests[:4]):
        assert image_parts(body) == []
        texts = sent_texts(body)
        assert all(why in texts for why in BAD_IMAGES.values())
        assert position == 3 or "file file-missing was not found" in texts
    assert image_parts(upstream.requests[4]) == [] and sent_texts(upstream.requests[4]).count("cannot be shown") == 3


# --- documents: their text, for every model ----------------------------------------------


def test_pdf_text_by_file_data_file_id_and_file_url(upstream: ScriptedUpstream, database_url: str):
    answering(upstream)
    upstream.files["report.pdf"] = pdf_with_text("Revenue grew eleven percent")
    with gateway(upstream, database_url, vision=False, allowed_hosts=["127.0.0.1"], max_document_chars=19) as server:
        client = server.client()
        data = "data:application/pdf;base64," + base64.b64encode(pdf_with_text("Tomatoes need water")).decode()
        uploaded = client.files.create(file=("minutes.pdf", pdf_with_text("The board met on Monday")), purpose="user_data")
        url = upstream.url.removesuffix("/v1") + "/files/report.pdf"  # type: ignore[attr-defined]
        content = [{"type": "input_file", "filename": "garden.pdf", "file_data": data},
                   {"type": "input_file", "file_id": uploaded.id},
                   {"type": "input_file", "file_url": url},
                   {"type": "input_file", "filename": "fake.pdf", "file_data": base64.b64encode(b"not a pdf").decode()},
                   {"type": "input_file", "file_url": url.replace("report", "missing")},
                   {"type": "input_file", "file_id": "file-nothere", "filename": "gone.pdf"},
                   {"type": "input_text", "text": "Summarize"}]  # fmt: skip
        first = responses(server, input=[{"role": "user", "content": content}])
        responses(server, input="more", previous_response_id=first["id"])
        answer = client.responses.create(model="test-model", input=[{"role": "user", "content": [
            {"type": "input_file", "file_id": uploaded.id}, {"type": "input_text", "text": "again"}]}])  # type: ignore[list-item]  # fmt: skip
        assert answer.status == "completed"
    first_prompt, second_prompt = (sent_texts(body) for body in upstream.requests[:2])
    assert first_prompt == second_prompt.removesuffix("\nok\nmore"), "a replayed document reads the same"
    assert "[file garden.pdf]\nTomatoes need water\n[end of file garden.pdf]" in first_prompt
    assert "[file minutes.pdf]\nThe board met on Mo\n[… 4 more characters of minutes.pdf are left out" in first_prompt
    assert "[file report.pdf]\nRevenue grew eleven\n[… 8 more characters" in first_prompt
    assert "[file fake.pdf: a PDF whose text cannot be read]" in first_prompt
    assert "[file missing.pdf at " in first_prompt and "it could not be fetched]" in first_prompt
    assert "[file gone.pdf: file file-nothere was not found]" in first_prompt
    assert upstream.file_hits == 3, "report.pdf once (its text is kept), missing.pdf on each turn (a failure is not)"
    assert "The board met on Mo" in sent_texts(upstream.requests[-1])


def test_file_url_to_a_private_address_is_not_fetched(upstream: ScriptedUpstream, database_url: str):
    answering(upstream)
    upstream.files["secret.pdf"] = pdf_with_text("secret")
    with gateway(upstream, database_url, vision=False) as server:
        url = upstream.url.removesuffix("/v1") + "/files/secret.pdf"  # type: ignore[attr-defined]
        responses(server, input=[{"role": "user", "content": [{"type": "input_file", "file_url": url}]}])
    assert upstream.file_hits == 0 and "it could not be fetched" in sent_texts(upstream.requests[-1])


# --- a vision model describes images for text-only models ----------------------------------


@pytest.mark.parametrize("database_url", DATABASES, indirect=True)
def test_a_vision_model_describes_images_once_and_the_description_is_kept(database_url: str):
    engine = ScriptedUpstream(models=("test-model", "vision-model"))
    engine.responder = lambda body: text_exchange("A red square with the word STOP." if body["model"] == "vision-model"
                                                  else "ok")  # fmt: skip
    with serve(engine.app) as engine_url:
        engine.url = f"{engine_url}/v1"  # type: ignore[attr-defined]
        vision = {"test-model": False, "vision-model": True}
        options = {"vision_model": "vision-model"}
        with gateway(engine, database_url, vision, **options) as server:  # type: ignore[arg-type]
            content = [{"type": "input_text", "text": "What does the sign say?"}, {"type": "input_image", "image_url": PNG}]
            first = responses(server, input=[{"role": "user", "content": content}])
            responses(server, input="Sure?", previous_response_id=first["id"])
            chat = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]}]
            assert httpx.post(f"{server.base_url}/chat/completions",
                              json={"model": "test-model", "messages": chat}).status_code == 200  # fmt: skip
        with gateway(engine, database_url, vision, **options) as server:  # type: ignore[arg-type]
            responses(server, input="And now?", previous_response_id=first["id"])  # another process: from the store
    asked = [body for body in engine.requests if body["model"] == "vision-model"]
    answered = [body for body in engine.requests if body["model"] == "test-model"]
    assert len(asked) == 1, "described once, then read from the store"
    assert image_parts(asked[0]) == [{"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}}]
    note = "another model described the image: A red square with the word STOP.]"
    assert len(answered) == 4 and all(image_parts(body) == [] and note in sent_texts(body) for body in answered)
    assert len({json.dumps(body["messages"][0]) for body in answered[:2] + answered[3:]}) == 1, "the same prompt each turn"


def test_without_an_answer_from_the_vision_model_the_note_says_an_image_was_attached(upstream, database_url):
    upstream.responder = lambda body: ({"status": 500, "error_body": "{}"} if body["model"] == "missing-vision"
                                       else text_exchange("ok"))  # fmt: skip
    upstream.models.append("missing-vision")
    vision = {"test-model": False, "missing-vision": True}
    with gateway(upstream, database_url, vision, vision_model="missing-vision") as server:  # type: ignore[arg-type]
        responses(server, input=[{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}])
    assert TEXT_ONLY in sent_texts(upstream.requests[-1])


# --- engines that tell what their models read ----------------------------------------------


def images_health(server: Server) -> dict[str, Any]:
    health = httpx.get(f"{server.url}/health").json()
    return {entry["name"]: entry["images"] for entry in health["upstreams"]}


@pytest.mark.parametrize(("owned_by", "kind", "told", "reads"), [
    ("llamacpp", "auto", {"props": {"modalities": {"vision": False, "audio": False}}}, False),
    ("llamacpp", "auto", {"props": {"modalities": {"vision": True}}}, True),
    ("ollama", "auto", {"capabilities": {"test-model": ["completion", "tools"]}}, False),
    ("ollama", "auto", {"capabilities": {"test-model": ["completion", "vision"]}}, True),
    ("someone", "lmstudio", {"model_types": {"test-model": "llm"}}, False),
    ("someone", "lmstudio", {"model_types": {"test-model": "vlm"}}, True),
])  # fmt: skip
def test_what_an_engine_tells_of_its_model(database_url: str, owned_by: str, kind: str, told: dict[str, Any],
                                           reads: bool):  # fmt: skip
    engine = ScriptedUpstream(owned_by=owned_by)
    for name, value in told.items():
        setattr(engine, name, value)
    answering(engine)
    with serve(engine.app) as engine_url:
        config = UpstreamConfig(name="engine", base_url=f"{engine_url}/v1", kind=kind)  # type: ignore[arg-type]
        settings = Settings(upstreams=[config], probe=False, database_url=database_url)
        with serve(create_app(settings)) as url:
            server = Server(url, engine)
            assert images_health(server) == {"engine": {"test-model": {"reads_images": reads,
                                                                       "source": "told by the engine"}}}  # fmt: skip
            responses(server, input=[{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}])
    assert bool(image_parts(engine.requests[-1])) is reads
    assert (TEXT_ONLY in sent_texts(engine.requests[-1])) is not reads


def test_health_says_what_each_model_reads(upstream: ScriptedUpstream, database_url: str):
    with gateway(upstream, database_url, vision={"test-model": False}) as server:
        assert images_health(server) == {"scripted": {"test-model": {"reads_images": False, "source": "configured"}}}
    with gateway(upstream, database_url, vision=None) as server:
        assert images_health(server) == {"scripted": {"test-model": {"reads_images": None, "source": None}}}
        answering(upstream)
        upstream.refuses_images = True
        chat = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]}]
        assert httpx.post(f"{server.base_url}/chat/completions", json={"model": "test-model", "messages": chat}).status_code == 200
        learned = {"reads_images": False, "source": "learned from a refusal"}
        assert images_health(server) == {"scripted": {"test-model": learned}}


def test_the_inspector_shows_what_the_model_reads(text_only: Server):
    answer = responses(text_only, input=[{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}])
    page = httpx.get(f"{text_only.url}/ui/responses/{answer['id']}")
    assert page.status_code == 200
    assert "<dt>Images</dt><dd>the model reads text only: each image is described or noted in text" in page.text
    assert "(configured)</dd>" in page.text


@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_a_streamed_request_refused_for_its_images_is_retried_without_them(upstream: ScriptedUpstream,
                                                                          database_url: str, protocol: str):  # fmt: skip
    answering(upstream)
    upstream.refuses_images = True
    with gateway(upstream, database_url, vision=None) as server:
        if protocol == "responses":
            content = [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": PNG}]
            stream = server.client().responses.create(model="test-model", stream=True,
                                                      input=[{"role": "user", "content": content}])  # type: ignore[list-item]  # fmt: skip
            events = list(stream)
            assert events[-1].type == "response.completed" and events[-1].response.output_text == "ok"
        else:
            client = anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0)
            data = PNG.split(",", 1)[1]
            with client.messages.stream(model="test-model", max_tokens=16, messages=[{"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]) as stream:  # fmt: skip
                assert stream.get_final_message().content[0].text == "ok"  # type: ignore[union-attr]
    refused, retried = upstream.requests
    assert image_parts(refused) and image_parts(retried) == [] and TEXT_ONLY in sent_texts(retried)


def test_documents_on_chat_and_messages(upstream: ScriptedUpstream, database_url: str):
    answering(upstream)
    upstream.files["plan.pdf"] = pdf_with_text("Launch on Friday")
    with gateway(upstream, database_url, vision=False, allowed_hosts=["127.0.0.1"]) as server:
        uploaded = server.client().files.create(file=("notes.pdf", pdf_with_text("Buy more coffee")), purpose="user_data")
        data = "data:application/pdf;base64," + base64.b64encode(pdf_with_text("Tomatoes need water")).decode()
        chat = [{"role": "user", "content": [
            {"type": "file", "file": {"filename": "garden.pdf", "file_data": data}},
            {"type": "file", "file": {"file_id": uploaded.id}},
            {"type": "text", "text": "Summarize"}]}]  # fmt: skip
        answer = httpx.post(f"{server.base_url}/chat/completions", json={"model": "test-model", "messages": chat})
        assert answer.status_code == 200, answer.text
        url = upstream.url.removesuffix("/v1") + "/files/plan.pdf"  # type: ignore[attr-defined]
        messages = [{"role": "user", "content": [
            {"type": "document", "title": "plan.pdf", "source": {"type": "url", "url": url}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": base64.b64encode(b"not a pdf").decode()}},
            {"type": "text", "text": "Summarize"}]}]  # fmt: skip
        answer = httpx.post(f"{server.base_url}/messages", json={"model": "test-model", "max_tokens": 8, "messages": messages})
        assert answer.status_code == 200, answer.text
        count = httpx.post(f"{server.base_url}/messages/count_tokens", json={"model": "test-model", "messages": messages})
        assert count.status_code == 200
    chat_prompt, messages_prompt = (sent_texts(body) for body in upstream.requests)
    assert "[file garden.pdf]\nTomatoes need water\n[end of file garden.pdf]" in chat_prompt
    assert "[file notes.pdf]\nBuy more coffee\n[end of file notes.pdf]" in chat_prompt
    assert "[file plan.pdf]\nLaunch on Friday\n[end of file plan.pdf]" in messages_prompt
    assert "[document document.pdf: a PDF whose text cannot be read]" in messages_prompt
    assert upstream.file_hits == 1, "fetched once: the count read the kept text"


def test_a_compaction_summary_reads_documents_and_images_as_text(upstream: ScriptedUpstream, database_url: str):
    """The summarizing model reads a transcript: documents as their text, images as notes."""
    upstream.push(text_exchange("The user sent a garden PDF and a screenshot."))
    with gateway(upstream, database_url, vision=True) as server:
        data = "data:application/pdf;base64," + base64.b64encode(pdf_with_text("Tomatoes need water")).decode()
        history = [{"role": "user", "content": [{"type": "input_file", "filename": "garden.pdf", "file_data": data},
                                                {"type": "input_image", "image_url": PNG}]},
                   {"role": "assistant", "content": "Noted."}]  # fmt: skip
        compacted = server.client().responses.compact(model="test-model", input=history)  # type: ignore[arg-type]
        assert compacted.output[0].type == "compaction"
    transcript = upstream.requests[0]["messages"][1]["content"]
    assert "[file garden.pdf]\nTomatoes need water\n[end of file garden.pdf]" in transcript and TEXT_ONLY in transcript


def test_the_default_model_answers_a_screenshot(gemma_gguf, tmp_path):
    """The case that lost threads: one `input_image` to the embedded Gemma 3 270M (text only),
    then the thread goes on."""
    from responsekit.backends.default_model import DEFAULT_MODEL_NAME
    from responsekit.config import LocalModel

    model = LocalModel(name=DEFAULT_MODEL_NAME, path=gemma_gguf, context=2048, max_output_tokens=8)
    settings = Settings(probe=False, data_dir=tmp_path, database_url=f"sqlite:///{tmp_path / 'state.db'}", models=[model])
    with serve(create_app(settings)) as url:
        content = [{"type": "input_text", "text": "What is in this screenshot?"}, {"type": "input_image", "image_url": PNG}]
        answer = httpx.post(f"{url}/v1/responses", json={"model": DEFAULT_MODEL_NAME, "input": [
            {"role": "user", "content": content}]}, timeout=120)  # fmt: skip
        assert answer.status_code == 200, answer.text
        previous = check_response(answer.json()).id
        follow = httpx.post(f"{url}/v1/responses", json={"model": DEFAULT_MODEL_NAME, "input": "And now?",
                                                          "previous_response_id": previous}, timeout=120)  # fmt: skip
        assert follow.status_code == 200, follow.text
