"""A prompt longer than the model's context window, on every protocol: the text each client acts on.

Claude Code compacts on the Messages API's `prompt is too long: N tokens > M maximum` (it parses
both numbers), Codex and OpenAI's clients on the code `context_length_exceeded`, Google's on
INVALID_ARGUMENT with the counts. The engine refuses as vLLM does, or the gateway, knowing the
window, counts the prompt past it and refuses before the engine is asked (and, where the
protocol counts its prompt before the stream starts, before any stream).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors

from responsekit.app import create_app
from responsekit.backends.windows import told_overflow
from responsekit.config import LocalModel, Settings

from .conftest import Server, _engine_settings
from .harness import ScriptedUpstream, check_stream, read_sse, serve

VLLM_REFUSAL = {"status": 400, "error_body": json.dumps({"error": {
    "message": "This model's maximum context length is 8192 tokens. However, you requested 0 output tokens and your "
               "prompt contains at least 8193 input tokens, for a total of at least 8193 tokens. Please reduce the "
               "length of the input prompt or the number of requested output tokens. (parameter=input_tokens, "
               "value=8193)",
    "type": "BadRequestError", "param": "input_tokens", "code": 400}})}  # fmt: skip
"""vLLM's answer to a prompt past its `max_model_len` (its current wording)."""
OPENAI_WORDS = ("This model's maximum context length is 8192 tokens. However, your messages resulted in 8193 tokens. "
                "Please reduce the length of the messages.")  # fmt: skip
LONG = " ".join(["word"] * 200)
"""A prompt of about 200 tokens as the scripted engine counts them (a token a word)."""


def messages(url: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/messages", timeout=30, headers={"anthropic-version": "2023-06-01"}, json={
        "model": "test-model", "max_tokens": 100, "messages": [{"role": "user", "content": LONG}], **extra})  # fmt: skip


def gemini(url: str, method: str = "generateContent", **params: str) -> httpx.Response:
    return httpx.post(f"{url}/v1beta/models/test-model:{method}", params=params, timeout=30,
                      json={"contents": [{"role": "user", "parts": [{"text": LONG}]}]})  # fmt: skip


def responses(url: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{url}/responses", json={"model": "test-model", "input": LONG, **extra}, timeout=30)


def chat(url: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", timeout=30, json={
        "model": "test-model", "messages": [{"role": "user", "content": LONG}], **extra})  # fmt: skip


@pytest.mark.parametrize(("message", "told"), [
    (json.loads(VLLM_REFUSAL["error_body"])["error"]["message"], (8193, 8192)),
    (("This model's maximum context length is 4096 tokens. However, your request has 4176 input tokens. Please "
     "reduce the length of the input messages."), (4176, 4096)),
    (("This model's maximum context length is 4096 tokens. However, you requested 4176 tokens in the messages, "
     "Please reduce the length of the messages."), (4176, 4096)),
    ("The input (5000 tokens) is longer than the model's context length (4096 tokens).", (5000, 4096)),
    ("request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it", (9000, 8192)),
    (OPENAI_WORDS, (8193, 8192)),
    ("prompt is too long: 210432 tokens > 200000 maximum", (210432, 200000)),
    # The prompt and the output maximum together past the window: the prompt alone is not too long.
    (("This model's maximum context length is 262144 tokens. However, you requested 32000 output tokens and your "
     "prompt contains at least 230145 input tokens, for a total of at least 262145 tokens."), (None, 262144)),
    (("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (8000 in the "
     "messages, 1000 in the completion)."), (None, 8192)),
    ("the request exceeds the available context size, try increasing it", (None, None)),
])  # fmt: skip
def test_what_an_engines_refusal_tells(message, told):
    assert told_overflow(message, {}) == told


def test_an_engine_refusing_as_vllm_does_reads_as_each_protocol_words_it(server):
    upstream = server.upstream
    upstream.push(*[VLLM_REFUSAL] * 10)

    answer = messages(server.url)
    assert answer.status_code == 400 and answer.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "prompt is too long: 8193 tokens > 8192 maximum"}}  # fmt: skip
    with pytest.raises(anthropic.BadRequestError, match=r"prompt is too long: 8193 tokens > 8192 maximum"):
        anthropic.Anthropic(base_url=server.url, api_key="test", max_retries=0).messages.create(
            model="test-model", max_tokens=100, messages=[{"role": "user", "content": LONG}])
    with httpx.stream("POST", f"{server.url}/v1/messages", timeout=30, json={
            "model": "test-model", "max_tokens": 100, "stream": True,
            "messages": [{"role": "user", "content": LONG}]}) as streamed:  # fmt: skip
        events, _ = read_sse(streamed.iter_lines())
    assert events[-1] == {"type": "error", "error": {"type": "invalid_request_error",
                                                     "message": "prompt is too long: 8193 tokens > 8192 maximum"}}

    answer = responses(server.base_url)
    assert answer.status_code == 400 and answer.json()["error"] == {
        "message": OPENAI_WORDS, "type": "invalid_request_error", "param": None, "code": "context_length_exceeded"}
    with httpx.stream("POST", f"{server.base_url}/responses", timeout=30,
                      json={"model": "test-model", "input": LONG, "stream": True}) as streamed:  # fmt: skip
        events, _ = read_sse(streamed.iter_lines())
    failed = check_stream(events)
    assert failed["status"] == "failed" and failed["error"] == {"code": "context_length_exceeded", "message": OPENAI_WORDS}
    assert events[-2]["type"] == "error" and events[-2]["error"]["code"] == "context_length_exceeded"

    answer = chat(server.base_url)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as refused:
        openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0).chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": LONG}])
    assert refused.value.code == "context_length_exceeded" and refused.value.message.endswith(OPENAI_WORDS)

    google = ("The input token count (8193) exceeds the maximum number of tokens allowed (8192).")
    answer = gemini(server.url)
    assert answer.status_code == 400 and answer.json() == {
        "error": {"code": 400, "message": google, "status": "INVALID_ARGUMENT"}}
    with httpx.stream("POST", f"{server.url}/v1beta/models/test-model:streamGenerateContent", params={"alt": "sse"},
                      json={"contents": [{"role": "user", "parts": [{"text": LONG}]}]}, timeout=30) as streamed:  # fmt: skip
        assert json.loads(streamed.read().decode().strip().splitlines()[-1])["error"]["message"] == google
    client = genai.Client(api_key="test", http_options={"base_url": server.url})  # kept: closed once collected
    with pytest.raises(genai_errors.ClientError, match=r"exceeds the maximum number of tokens allowed \(8192\)"):
        client.models.generate_content(model="test-model", contents=LONG)
    assert len(upstream.requests) == 10


@pytest.fixture
def small_window(upstream: ScriptedUpstream, settings: Settings) -> Iterator[Server]:
    """`server`, its engine (llama.cpp's server, which counts exactly) telling a 64-token window."""
    upstream.props = {"default_generation_settings": {"n_ctx": 64}}
    with serve(create_app(settings)) as url:
        yield Server(url, upstream)


def test_a_prompt_counted_past_a_known_window_is_refused_before_the_engine(small_window):
    server, upstream = small_window, small_window.upstream
    prompt = 202  # 200 words, the user's marker and the assistant's, as the scripted engine's template counts them
    claude = f"prompt is too long: {prompt} tokens > 64 maximum"
    for stream in (False, True):  # the Messages API counts its prompt before its stream starts
        answer = messages(server.url, stream=stream)
        assert answer.status_code == 400 and answer.headers["content-type"] == "application/json"
        assert answer.json()["error"] == {"type": "invalid_request_error", "message": claude}
    google = f"The input token count ({prompt}) exceeds the maximum number of tokens allowed (64)."
    for method, params in (("generateContent", {}), ("streamGenerateContent", {"alt": "sse"})):
        answer = gemini(server.url, method, **params)
        assert answer.status_code == 400 and answer.json()["error"]["message"] == google

    # OpenAI's protocols: the backend fitting the output maximum counts, and refuses in the engine's place.
    words = (f"This model's maximum context length is 64 tokens. However, your messages resulted in {prompt} tokens. "
             "Please reduce the length of the messages.")  # fmt: skip
    answer = responses(server.base_url, max_output_tokens=100)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
    assert answer.json()["error"]["message"] == words
    answer = chat(server.base_url, max_tokens=100)
    assert answer.status_code == 400 and answer.json()["error"]["message"] == words
    assert upstream.requests == [], "the engine was never asked to generate"


def test_an_in_process_model_refuses_a_prompt_past_its_context_with_its_count(tiny_gguf, tmp_path):
    settings = _engine_settings(tmp_path, models=[LocalModel(path=tiny_gguf, name="tiny", context=256)])
    with serve(create_app(settings)) as url:
        refused = messages(url, model="tiny", stream=True)
        assert refused.status_code == 400, "counted before the stream starts"
        told = re.fullmatch(r"prompt is too long: (\d+) tokens > 256 maximum", refused.json()["error"]["message"])
        assert told is not None and int(prompt := told.group(1)) > 200
        answer = responses(f"{url}/v1", model="tiny")
        assert answer.status_code == 400 and answer.json()["error"]["message"] == (
            f"This model's maximum context length is 256 tokens. However, your messages resulted in {prompt} tokens. "
            "Please reduce the length of the messages.")  # fmt: skip
