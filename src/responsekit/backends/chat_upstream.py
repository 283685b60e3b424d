"""Backend for any OpenAI-compatible `/chat/completions` engine.

Renders the canonical request in the engine's dialect (llama.cpp, vLLM, SGLang, Ollama,
LM Studio, OpenAI differ in how they take reasoning and system text) and translates
its streamed chunks into canonical events.  For engines that do not parse their model's
output (raw `<think>` or `<tool_call>` in `content`), a configured parser turns the
content into reasoning, text and tool calls (`UpstreamConfig.parser`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing, suppress
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from ..canonical.conversation import (
    GenerationRequest,
    ImagePart,
    Message,
    NamedToolChoice,
    TextPart,
)
from ..canonical.errors import context_overflow
from ..canonical.events import (
    Error,
    Event,
    Finish,
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ..canonical.ids import new_id
from ..canonical.jsontext import json_utf8
from ..config import EngineKind, ReasoningMode, UpstreamConfig
from ..operations.record import Recorder, Recording
from ..parsing import Parser, ReasoningFilter, detect_format, get_parser
from ..prompting.effort import DEFAULT_LEVELS, accepted, budget
from ..tls import client_context
from . import windows
from .engine_http import Answer, engine_http

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OutputParsing:
    """What becomes of one model's output: the parser of its content, if any, whether
    the chat template leaves the reasoning block open, and the reasoning mode."""

    parser: type[Parser] | None = None
    thinking_open: bool = False
    reasoning_mode: ReasoningMode = "separate"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one kind of engine wants its request."""

    merge_system: bool
    reasoning_effort_param: str
    reasoning_history_field: str
    max_tokens_field: str = "max_tokens"
    developer_role: bool = False
    prompt_cache_key: bool = False
    efforts: tuple[str, ...] = DEFAULT_LEVELS
    """The reasoning efforts its models accept unless configured (`prompting/effort.py`)."""
    thinking_budget_param: str = "none"
    """The request field of a per-request thinking budget, for engines that take one."""
    fetches_image_urls: bool = True
    """The engine fetches an image by http(s) URL itself. Ollama's OpenAI-compatible endpoint takes
    base64 images only (https://docs.ollama.com/api/openai-compatibility, "Image URL" unchecked);
    LM Studio documents images as files or base64 only, no URL fetching
    (https://lmstudio.ai/docs/python/llm-prediction/image-input); an engine of unknown kind may
    not fetch: those get images inline. OpenAI, vLLM, SGLang and llama.cpp's server (`handle_media` in
    tools/server/server-common.cpp: up to 10 MB within 10 s) fetch them."""


DIALECTS: dict[str, Dialect] = {
    "openai": Dialect(
        merge_system=False,
        reasoning_effort_param="reasoning_effort",
        reasoning_history_field="none",
        max_tokens_field="max_completion_tokens",
        developer_role=True,
        prompt_cache_key=True,
        efforts=("none", "minimal", "low", "medium", "high", "xhigh"),  # https://platform.openai.com/docs/api-reference/chat/create
    ),
    # https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md (`reasoning_budget_tokens`:
    # the tokens the reasoning may take before the server closes it; 0 ends it at once)
    "llamacpp": Dialect(True, "both", "reasoning_content", thinking_budget_param="reasoning_budget_tokens"),
    # https://docs.vllm.ai/en/latest/features/reasoning_outputs.html (`thinking_token_budget`: the
    # reasoning is ended once it has taken this many tokens)
    "vllm": Dialect(True, "both", "reasoning_content", thinking_budget_param="thinking_token_budget"),
    "sglang": Dialect(True, "both", "reasoning_content"),
    # Ollama's `reasoning_effort: "none"` is what turns thinking off on /v1/chat/completions
    # (https://docs.ollama.com/api/openai-compatibility, `reasoning_effort`)
    "ollama": Dialect(True, "reasoning_effort", "reasoning", efforts=("none", *DEFAULT_LEVELS), fetches_image_urls=False),
    "lmstudio": Dialect(True, "reasoning_effort", "reasoning_content", fetches_image_urls=False),
    "generic": Dialect(True, "reasoning_effort", "reasoning_content", fetches_image_urls=False),
}

_OWNED_BY_KIND = {"llamacpp": "llamacpp", "vllm": "vllm", "sglang": "sglang", "ollama": "ollama"}

_CONTEXT_MARKERS = (
    "context length",
    "context_length",
    "context window",
    "maximum context",
    "exceed_context_size",
    "exceeds the available context",
    "too many tokens",
    "prompt is too long",
    "input is too long",
    "maximum input length",
)

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "eos": "stop",
    "length": "length",
    "max_tokens": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def kind_from_url(base_url: str) -> EngineKind:
    host = urlsplit(base_url).hostname or ""
    return "openai" if host == "api.openai.com" else "generic"


UNAVAILABLE = (502, 503)
"""Statuses of an engine (or the proxy in front of it) that did not take the request: another
member of its pool may."""


def upstream_error(status: int, text: str) -> Error:
    """The canonical error for an engine's HTTP error answer (or an error chunk)."""
    message = text.strip()
    code_hint = ""
    details: dict[str, Any] = {}
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            details = error
            message = str(error.get("message") or error.get("detail") or message)
            code_hint = str(error.get("code") or error.get("type") or "")
        elif isinstance(error, str):
            message = error
    message = message or f"upstream answered HTTP {status}"
    lowered = f"{message} {code_hint}".lower()
    if status == 429 or "rate_limit" in lowered:
        return Error("rate_limit_exceeded", message, 429)
    if any(marker in lowered for marker in _CONTEXT_MARKERS):
        return refused_overflow(message, details)
    if status == 404 and "model" in lowered:
        return Error("model_not_found", message, 404)
    if 400 <= status < 500:
        return Error("invalid_request_error", message, 400 if status == 422 else status)
    return Error("server_error", message, 502, unanswered=status in UNAVAILABLE)


def refused_overflow(message: str, details: dict[str, Any]) -> Error:
    """An engine's refusal of a prompt too long for its window, with the counts it told, in OpenAI's
    words when it told both (else its own)."""
    prompt, window = windows.told_overflow(message, details)
    if prompt is not None and window is not None:
        return context_overflow(prompt, window)
    return Error("context_length_exceeded", message, 400, window=window)


class ChatUpstream:
    """One configured engine: its connections and its dialect."""

    counts_locally = False

    def __init__(self, config: UpstreamConfig, recorder: Recorder | None = None) -> None:
        self.config = config
        self.name = config.name
        self.kind: EngineKind = config.kind if config.kind != "auto" else kind_from_url(config.base_url)
        self._recorder = recorder
        self._undetected: set[str] = set()  # models `parser = "auto"` found no format for (logged once)
        self._output_parsing: dict[str, OutputParsing] = {}
        self._text_only: set[str] = set()
        """Models the engine refused an image for (`learn_text_only`)."""
        self._no_budget: set[str] = set()
        """Models the engine refused a thinking budget for (`_refused_budget`)."""
        self._told: dict[str, bool] = {}
        """Whether each model reads images, as the engine told (`_ask_modalities`)."""
        self._asked: set[str] = set()
        self._listing: list[Any] = []
        """The engine's last `/models` data."""
        self._windows: dict[str, int] = {}
        """Each model's context window, as the engine told at a refresh (`learn_windows`)."""
        self._dialect: tuple[EngineKind, Dialect] | None = None
        headers = dict(config.headers)
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._engine = engine_http(config.base_url, headers, config.timeout, config.connect_timeout)
        """Generations: the hot path."""
        self._client = httpx.AsyncClient(
            base_url=config.base_url,
            headers=headers,
            timeout=httpx.Timeout(config.timeout, connect=config.connect_timeout),
            verify=client_context(),
        )
        """Everything else (models, token counts, templates)."""

    @property
    def dialect(self) -> Dialect:
        """The engine kind's dialect with the configuration's overrides: worked out once per kind
        (a probe may find the kind after the start), not on every request."""
        if self._dialect is None or self._dialect[0] != self.kind:
            self._dialect = (self.kind, self._configured_dialect())
        return self._dialect[1]

    def _configured_dialect(self) -> Dialect:
        base = DIALECTS.get(self.kind, DIALECTS["generic"])
        options = {
            key: value
            for key in ("merge_system", "reasoning_effort_param", "reasoning_history_field", "fetches_image_urls",
                        "thinking_budget_param")
            if (value := getattr(self.config, key)) is not None
        }
        return replace(base, **options) if options else base

    def output_parsing(self, model: str) -> OutputParsing:
        """The configured parsing of `model`'s output; `auto` detects the format from the
        model name, and no parser applies when it names none. Worked out once per model: the
        configuration does not change while the server runs."""
        found = self._output_parsing.get(model)
        if found is None:
            found = self._output_parsing[model] = self._find_output_parsing(model)
        return found

    def _find_output_parsing(self, model: str) -> OutputParsing:
        options = self.config.parsing(model)
        name = options.parser
        if name == "template":  # derived from a chat template, which a chat upstream keeps to itself
            if model not in self._undetected:
                self._undetected.add(model)
                log.warning("upstream %s: `parser = \"template\"` needs the model's chat template, which a chat "
                            "upstream does not give; the format is detected from the model name", self.name)  # fmt: skip
            name = "auto"
        if name == "auto":
            name = detect_format(model=model)
            if name is None and model not in self._undetected:
                self._undetected.add(model)
                log.warning("upstream %s: no parser format known for model %r; its content is passed as is",
                            self.name, model)
        return OutputParsing(
            parser=get_parser(name) if name else None,
            thinking_open=bool(options.thinking_open),
            reasoning_mode=options.reasoning_mode or "separate",
        )

    async def list_models(self) -> list[str]:
        """The engine's model ids; also recognises the engine's kind when set to `auto`."""
        response = await self._client.get("/models", timeout=5.0)
        response.raise_for_status()
        data = response.json().get("data") or []
        if self.config.kind == "auto" and self.kind == "generic":
            owners = {str(model.get("owned_by", "")).lower() for model in data}
            for owner, kind in _OWNED_BY_KIND.items():
                if owner in owners:
                    self.kind = kind  # type: ignore[assignment]
                    break
        names = [str(model["id"]) for model in data if "id" in model]
        self._listing = data
        await self._ask_modalities(names)
        return names

    async def learn_windows(self, names: list[str]) -> None:
        """Ask the engine the context windows of the models it serves that are not configured;
        the router does at each refresh, after `list_models` (a model keeps what it was told
        last when the engine tells nothing now)."""
        asked = [name for name in names if self.config.window(name) is None]
        if asked:
            root = self.config.base_url.removesuffix("/v1")
            self._windows.update(await windows.discover(self._client, self.kind, root, asked, self._listing))

    def context_window(self, model: str) -> int | None:
        configured = self.config.window(model)
        return configured if configured is not None else self._windows.get(model)

    async def fitted(self, request: GenerationRequest) -> GenerationRequest | Error:
        """`request` with an output maximum the model's window has room for after the prompt:
        counted (by the engine where it can) only when the maximum may not fit, so that an engine
        that refuses prompt and maximum beyond its window (vLLM) answers instead; a prompt counted
        exactly past the window is refused here, with its count, as the engine would refuse it."""
        window = self.context_window(request.model)
        if window is None or not windows.may_overflow(window, request):
            return request
        prompt, exact = await self.count_tokens(request)
        if exact and prompt > window:
            return context_overflow(prompt, window)
        room = windows.room_left(window, prompt, request.max_output_tokens)
        if room is None:
            return request
        log.info("upstream %s: max output tokens %s is more than the %d tokens model %s has left after the "
                 "prompt: clamped", self.name, request.max_output_tokens, room, request.model)  # fmt: skip
        return replace(request, max_output_tokens=room)

    async def _ask_modalities(self, names: list[str]) -> None:
        """Ask engines that tell whether a model reads images, once per model: llama.cpp's
        server (`/props` `modalities`: one model per server), Ollama (`/api/show` `capabilities`),
        LM Studio (`/api/v0/models/{model}` `type`). An engine that does not answer tells nothing."""
        new = [name for name in names if name not in self._asked and self.config.reads_images(name) is None]
        if not new or self.kind not in ("llamacpp", "ollama", "lmstudio"):
            return
        self._asked.update(new)
        root = self.config.base_url.removesuffix("/v1")

        async def ask(name: str) -> bool | None:
            try:
                if self.kind == "llamacpp":
                    answer = await self._client.get(f"{root}/props", timeout=5.0)
                    modalities = answer.json().get("modalities") if answer.status_code == 200 else None
                    vision = modalities.get("vision") if isinstance(modalities, dict) else None
                    return vision if isinstance(vision, bool) else None
                if self.kind == "ollama":
                    answer = await self._client.post(f"{root}/api/show", json={"model": name}, timeout=5.0)
                    capabilities = answer.json().get("capabilities") if answer.status_code == 200 else None
                    return "vision" in capabilities if isinstance(capabilities, list) else None
                answer = await self._client.get(f"{root}/api/v0/models/{name}", timeout=5.0)
                kind = answer.json().get("type") if answer.status_code == 200 else None
                return kind == "vlm" if kind in ("vlm", "llm") else None
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                log.debug("upstream %s did not tell whether %s reads images: %r", self.name, name, exc)
                return None

        if self.kind == "llamacpp":
            told = [await ask(new[0])] * len(new)
        else:
            told = await asyncio.gather(*(ask(name) for name in new))
        self._told.update({name: value for name, value in zip(new, told) if value is not None})

    def reads_images(self, model: str) -> bool | None:
        configured = self.config.reads_images(model)
        if configured is not None:
            return configured
        if model in self._text_only:
            return False
        return self._told.get(model)

    def images_source(self, model: str) -> str | None:
        """Where `reads_images` comes from (`/health`): configured, told by the engine, learned."""
        if self.config.reads_images(model) is not None:
            return "configured"
        if model in self._text_only:
            return "learned from a refusal"
        return "told by the engine" if model in self._told else None

    def learn_text_only(self, model: str) -> None:
        self._text_only.add(model)

    def fetches_image_urls(self, model: str) -> bool:
        return self.dialect.fetches_image_urls

    async def aclose(self) -> None:
        await self._engine.aclose()
        await self._client.aclose()

    def render(self, request: GenerationRequest) -> dict[str, Any]:
        """The `/chat/completions` body for this engine."""
        dialect = self.dialect
        body: dict[str, Any] = {
            "model": request.model,
            "messages": render_messages(request.messages, dialect),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools and request.tool_choice != "none":
            body["tools"] = [
                {"type": "function", "function": _drop_none(
                    name=tool.name,
                    description=tool.description,
                    parameters=tool.parameters or {"type": "object", "properties": {}},
                    strict=tool.strict,
                )}
                for tool in request.tools
            ]
            choice = request.tool_choice
            body["tool_choice"] = (
                {"type": "function", "function": {"name": choice.name}}
                if isinstance(choice, NamedToolChoice)
                else choice
            )
            if request.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = request.parallel_tool_calls
        if request.response_format is not None:
            body["response_format"] = request.response_format
        if request.max_output_tokens is not None:
            body[dialect.max_tokens_field] = request.max_output_tokens
        for key in ("temperature", "top_p", "stop", "seed", "presence_penalty", "frequency_penalty", "user"):
            value = getattr(request, key)
            if value is not None:
                body[key] = value
        if dialect.prompt_cache_key and request.prompt_cache_key:
            body["prompt_cache_key"] = request.prompt_cache_key
        asked = request.reasoning_effort
        if asked is not None:
            effort = accepted(asked, self.config.efforts(request.model) or dialect.efforts)
            if dialect.reasoning_effort_param in ("reasoning_effort", "both"):
                body["reasoning_effort"] = effort
            if dialect.reasoning_effort_param in ("chat_template_kwargs", "both"):
                body["chat_template_kwargs"] = {
                    "reasoning_effort": effort,
                    "enable_thinking": asked != "none",
                }
        tokens = budget(asked, request.reasoning_budget, request.max_output_tokens)
        if dialect.thinking_budget_param != "none" and tokens is not None and request.model not in self._no_budget:
            body[dialect.thinking_budget_param] = tokens
        return body

    async def count_tokens(self, request: GenerationRequest) -> tuple[int, bool]:
        """Prompt tokens of a request, and whether the count is exact.

        Exact from engines that tokenize with the model's own chat template (vLLM and
        SGLang `/tokenize` with messages; llama.cpp `/apply-template` then `/tokenize`),
        otherwise estimated at four characters a token.
        """
        body = self.render(request)
        root = self.config.base_url.removesuffix("/v1")
        template_input = {key: body[key] for key in ("messages", "tools") if key in body}
        try:
            if self.kind in ("vllm", "sglang"):
                answer = await self._client.post(
                    f"{root}/tokenize", content=json_utf8({"model": body["model"], "add_generation_prompt": True,
                                                           **template_input}), headers=JSON_HEADERS,
                )
                if answer.status_code == 200 and isinstance(answer.json().get("count"), int):
                    return answer.json()["count"], True
            elif self.kind == "llamacpp":
                rendered = await self._client.post(f"{root}/apply-template", content=json_utf8(template_input),
                                                   headers=JSON_HEADERS)  # fmt: skip
                if rendered.status_code == 200:
                    tokens = await self._client.post(
                        f"{root}/tokenize",
                        content=json_utf8({"content": rendered.json()["prompt"], "add_special": False,
                                           "parse_special": True}),
                        headers=JSON_HEADERS,
                    )
                    if tokens.status_code == 200:
                        return len(tokens.json()["tokens"]), True
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("upstream %s could not count tokens (%r); estimating", self.name, exc)
        characters = len(json.dumps(template_input, ensure_ascii=False))
        return max(1, characters // 4), False

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        """The engine's answer as canonical events. One generator from the engine's bytes to the
        caller: every token crosses each layer between the engine and the renderer."""
        fitted = await self.fitted(request)
        if isinstance(fitted, Error):
            yield fitted
            return
        body = self.render(fitted)
        refused = False
        recording = self._recorder.start(self.name, "/chat/completions", body) if self._recorder else None
        translator = ChunkTranslator(request, self.output_parsing(request.model))
        try:
            async with self._engine.post("/chat/completions", json_utf8(body)) as answer:
                if recording:
                    recording.status(answer.status)
                if (error := await error_answer(answer, recording)) is not None:
                    # A refused thinking budget is the engine's only event: the request goes again, without it.
                    refused = self._refused_budget(body, error)
                    if not refused:
                        yield error
                elif "text/event-stream" not in answer.content_type:
                    # An engine that ignored `stream: true` and answered with one completion.
                    text = (await answer.read()).decode("utf-8", "replace")
                    if recording:
                        recording.chunk(text)
                    for event in translator.feed_completion(text):
                        yield event
                else:
                    payloads = SSEPayloads(answer, recording)
                    async for batch in payloads:
                        for data in batch:
                            for event in translator.feed_data(data):
                                yield event
                                if isinstance(event, Error):
                                    return
                    try:
                        for event in translator.finish():
                            yield event
                    finally:
                        await payloads.drain()
        except httpx.TimeoutException as exc:
            yield timeout_error(self.name, self.config.timeout, exc)
        except httpx.HTTPError as exc:
            yield transport_error(self.name, exc)
        finally:
            if recording is not None:
                await recording.save()
        if refused:  # the model has no budget now (`_no_budget`): the next refusal is not this one
            async with aclosing(self.generate(request)) as again:
                async for event in again:
                    yield event

    def _refused_budget(self, body: dict[str, Any], event: Error) -> bool:
        """Whether the engine refused the thinking budget (vLLM started without a reasoning parser
        answers 400: https://docs.vllm.ai/en/latest/features/reasoning_outputs.html); then the model
        gets none from now on."""
        field = self.dialect.thinking_budget_param
        if field not in body or event.status != 400:
            return False
        told = event.message.lower()
        if not any(word in told for word in (field, "reasoning_config", "reasoning parser", "reasoning-parser")):
            return False
        log.warning("upstream %s refused a thinking budget for %s; sending none: %s", self.name, body["model"],
                    event.message)  # fmt: skip
        self._no_budget.add(body["model"])
        return True


def transport_error(name: str, exc: httpx.HTTPError) -> Error:
    """A failed exchange with an engine: `refused` when no connection was made, else `dropped`.
    Either may have happened before the answer began: a pool tries another member when the
    client saw nothing yet (`pool.py`)."""
    fault = "refused" if isinstance(exc, httpx.ConnectError) else "dropped"
    return Error("server_error", f"upstream {name} failed: {exc!r}", 502, fault, unanswered=True)


def timeout_error(name: str, timeout: float, exc: httpx.TimeoutException) -> Error:
    """An engine that did not answer in time; one that could not even be connected to is
    `unanswered`."""
    if isinstance(exc, httpx.ConnectTimeout):
        return Error("timeout", f"upstream {name} could not be connected to: {exc}", 504, unanswered=True)
    return Error("timeout", f"upstream {name} did not answer within {timeout:g}s", 504)


async def error_answer(answer: Answer, recording: Recording | None) -> Error | None:
    """An engine's HTTP error answer as the canonical error (None for any other answer)."""
    if answer.status < 400:
        return None
    text = (await answer.read()).decode("utf-8", "replace")
    if recording:
        recording.error_body(text)
    return upstream_error(answer.status, text)


class SSEPayloads:
    """The `data:` payloads of an engine's SSE answer up to `[DONE]`, a list for each piece of
    the body that completes lines (what one read brought: handled together, they cross the
    layers above at once), recorded as they come; `drain()` then reads the rest of the body.
    """

    def __init__(self, answer: Answer, recording: Recording | None) -> None:
        self._lines = sse_data(answer.pieces())
        self._recording = recording

    async def __aiter__(self) -> AsyncIterator[list[str]]:
        async for batch in self._lines:
            done = "[DONE]" in batch
            if done:
                batch = batch[: batch.index("[DONE]")]
            if self._recording:
                for data in batch:
                    self._recording.chunk(data)
                if done:
                    self._recording.chunk("[DONE]")
            if batch:
                yield batch
            if done:
                return

    async def drain(self) -> None:
        """Read what follows `[DONE]` — normally only the end of the body — so that the
        connection goes back to the pool instead of being closed (a new connection per
        request costs a connect and the engine's accept). An engine that keeps the body open
        longer than a moment loses the connection instead."""
        with suppress(TimeoutError, httpx.HTTPError):
            async with asyncio.timeout(_DRAIN_SECONDS):
                async for _ in self._lines:
                    pass


async def sse_data(pieces: AsyncIterator[bytes]) -> AsyncIterator[list[str]]:
    """The `data:` payloads of an SSE body, a list for each piece that completes lines.

    Lines end at LF (or CRLF) only: engines write raw UTF-8, and a U+2028 inside a JSON
    string is not a line break (httpx's `aiter_lines` would split there).
    """
    pending = b""
    async for piece in pieces:
        if b"\n" not in piece:
            pending += piece
            continue
        *lines, rest = (pending + piece).split(b"\n") if pending else piece.split(b"\n")
        pending = rest
        batch = [line[5:].strip().decode("utf-8", "replace") for line in lines if line.startswith(b"data:")]
        if batch:
            yield batch
    if pending.startswith(b"data:"):
        yield [pending[5:].strip().decode("utf-8", "replace")]


_DRAIN_SECONDS = 1.0

JSON_HEADERS = {"Content-Type": "application/json"}


def render_messages(messages: Iterable[Message], dialect: Dialect) -> list[dict[str, Any]]:
    messages = list(messages)
    out: list[dict[str, Any]] = []
    tool_images: list[dict[str, Any]] = []
    """Images of the tool results just rendered: a chat `tool` message's content parts are text
    only (https://platform.openai.com/docs/api-reference/chat/create, tool message), so they
    follow the tool results in a user message: the next one, else one of their own (two user
    messages in a row break templates that want the roles to alternate)."""
    if dialect.merge_system:
        texts = [m.text() for m in messages if m.role in ("system", "developer")]
        if texts:
            out.append({"role": "system", "content": "\n\n".join(texts)})
    for message in messages:
        role = message.role
        images_first: list[dict[str, Any]] = []
        if role != "tool" and tool_images:
            if role == "user":
                images_first = tool_images
            else:
                out.append({"role": "user", "content": tool_images})
            tool_images = []
        if role in ("system", "developer"):
            if not dialect.merge_system:
                keep = role == "system" or dialect.developer_role
                out.append({"role": role if keep else "system", "content": message.text()})
        elif role == "user":
            content = _render_content(message)
            if images_first:
                own = ([{"type": "text", "text": content}] if content else []) if isinstance(content, str) else content
                content = images_first + own
            out.append({"role": "user", "content": content})
        elif role == "assistant":
            rendered: dict[str, Any] = {"role": "assistant", "content": message.text() or None}
            if message.tool_calls:
                rendered["tool_calls"] = [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                    for call in message.tool_calls
                ]
            elif rendered["content"] is None:
                rendered["content"] = ""
            if message.reasoning and dialect.reasoning_history_field != "none":
                rendered[dialect.reasoning_history_field] = message.reasoning
            out.append(rendered)
        else:
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text()})
            images = [part for part in message.content if isinstance(part, ImagePart)]
            if images:
                tool_images.append({"type": "text", "text": f"[the image(s) of tool result {message.tool_call_id}]"})
                tool_images += [_image_part(part) for part in images]
    if tool_images:
        out.append({"role": "user", "content": tool_images})
    return out


def _image_part(part: ImagePart) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": part.url, "detail": part.detail}}


def _render_content(message: Message) -> str | list[dict[str, Any]]:
    if all(isinstance(part, TextPart) for part in message.content):
        return message.text()
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, ImagePart):
            parts.append(_image_part(part))
        elif isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
    return parts


class ChunkTranslator:
    """Turns one stream of `chat.completion.chunk` payloads into canonical events.

    With a parser, `content` goes through it instead of becoming text.  Calls the parser
    finds and the engine's own `tool_calls` take their indices from one counter, in the
    order they start, so an engine that mixes both never gets two calls with one index.
    The reasoning mode applies to the whole stream, the engine's `reasoning_content`
    included.
    """

    def __init__(self, request: GenerationRequest, parsing: OutputParsing = OutputParsing()) -> None:
        self._request = request
        self._calls: dict[Any, _Call] = {}
        self._next_index = 0
        self._finish: FinishReason | None = None
        self._usage: Usage | None = None
        self._output_chars = 0
        self._parser: Parser | None = None
        if parsing.parser is not None:
            tools = [
                {"type": "function", "function": {"name": tool.name, "parameters": tool.parameters or {}}}
                for tool in request.tools
            ]
            self._parser = parsing.parser(tools, thinking_open=parsing.thinking_open)
        self._parsed: dict[int, int] = {}  # the parser's call index -> the stream's
        self._reasoning = ReasoningFilter(parsing.reasoning_mode) if parsing.reasoning_mode != "separate" else None

    def feed_data(self, data: str) -> list[Event]:
        try:
            chunk = orjson.loads(data)  # a chunk's parse is a twentieth of a streamed request's CPU
        except orjson.JSONDecodeError:
            try:  # what orjson refuses and engines may write: NaN, a lone surrogate
                chunk = json.loads(data)
            except ValueError:
                chunk = None
        if not isinstance(chunk, dict):
            return [Error("server_error", f"upstream sent malformed data: {data[:200]!r}", 502, "malformed")]
        return self.feed(chunk)

    def feed_completion(self, text: str) -> list[Event]:
        """A whole non-streamed `chat.completion` body, as if it had been one chunk."""
        events = self.feed_data(text)
        if events and isinstance(events[-1], Error):
            return events
        return events + self.finish()

    def feed(self, chunk: dict[str, Any]) -> list[Event]:
        try:
            return self._filtered(self._feed(chunk))
        except _Misshapen as exc:
            return [Error("server_error", f"upstream sent a malformed chunk ({exc}): {str(chunk)[:200]}", 502, "malformed")]

    def _feed(self, chunk: dict[str, Any]) -> list[Event]:
        error = chunk.get("error")
        if error:
            status = error.get("code") if isinstance(error, dict) else None
            return [upstream_error(status if isinstance(status, int) else 500, json.dumps(chunk))]
        events: list[Event] = []
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage, chunk.get("timings"))
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise _Misshapen("choices is not a list")
        for choice in choices:
            if not isinstance(choice, dict):
                raise _Misshapen("a choice is not an object")
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                raise _Misshapen("a delta is not an object")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._output_chars += len(reasoning)
                events.append(ReasoningDelta(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._output_chars += len(content)
                if self._parser is None:
                    events.append(TextDelta(content))
                else:
                    events.extend(self._numbered(self._parser.feed(content)))
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._output_chars += len(refusal)
                events.append(RefusalDelta(refusal))
            calls = delta.get("tool_calls") or []
            if not isinstance(calls, list):
                raise _Misshapen("tool_calls is not a list")
            for position, call in enumerate(calls):
                events.extend(self._tool_call(position, call))
            reason = choice.get("finish_reason")
            if reason:
                self._finish = _FINISH_REASONS.get(reason, "stop") if isinstance(reason, str) else "stop"
        return events

    def _tool_call(self, position: int, call: Any) -> list[Event]:
        function = (call.get("function") or {}) if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise _Misshapen("a tool call or its function is not an object")
        key = call.get("index")
        if key is None:
            key = call.get("id") or f"position-{position}-{self._next_index}"
        if not isinstance(key, (int, str)):
            raise _Misshapen("a tool call's index is neither a number nor a string")
        state = self._calls.get(key)
        if state is None:
            state = self._calls[key] = _Call(str(call.get("id") or new_id("call")))
        events: list[Event] = []
        name = function.get("name")
        if state.index is None and isinstance(name, str) and name:
            state.index = self._next_index
            self._next_index += 1
            events.append(ToolCallStart(state.index, state.id, name))
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some engines send parsed arguments
            arguments = json.dumps(arguments, ensure_ascii=False)
        if isinstance(arguments, str) and arguments:
            self._output_chars += len(arguments)
            if state.index is None:
                state.pending.append(arguments)
            else:
                if state.pending:
                    events.append(ToolCallDelta(state.index, "".join(state.pending)))
                    state.pending.clear()
                events.append(ToolCallDelta(state.index, arguments))
        return events

    def _numbered(self, parsed: list[Event]) -> list[Event]:
        """The parser's events with its calls renumbered in the stream's sequence."""
        events: list[Event] = []
        for event in parsed:
            if isinstance(event, ToolCallStart):
                index = self._parsed[event.index] = self._next_index
                self._next_index += 1
                events.append(ToolCallStart(index, event.id, event.name))
            elif isinstance(event, ToolCallDelta):
                events.append(ToolCallDelta(self._parsed[event.index], event.arguments))
            elif isinstance(event, ToolCallEnd):
                events.append(ToolCallEnd(self._parsed[event.index]))
            else:
                events.append(event)
        return events

    def _filtered(self, events: list[Event]) -> list[Event]:
        return events if self._reasoning is None else self._reasoning(events)

    def finish(self) -> list[Event]:
        events = self._numbered(self._parser.finish()) if self._parser is not None else []
        for state in self._calls.values():
            if state.index is not None:
                events.append(ToolCallEnd(state.index))
        if self._finish is None:
            return self._filtered(events + [Error("server_error", "upstream ended the stream before finishing", 502, "dropped")])
        usage = self._usage
        if usage is None:
            log.debug("upstream reported no usage; estimating")
            prompt_chars = sum(len(m.text()) + len(m.reasoning or "") for m in self._request.messages)
            usage = Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, self._output_chars // 4))
        reason = self._finish
        if reason == "stop" and (self._calls or self._parsed):
            reason = "tool_calls"
        return self._filtered(events + [usage, Finish(reason)])


@dataclass(slots=True)
class _Call:
    id: str
    index: int | None = None
    pending: list[str] = field(default_factory=list)
    """Argument fragments that arrived before the call's name."""


class _Misshapen(Exception):
    """A chunk that is JSON but not in the shape of a chat chunk."""


def _usage(usage: dict[str, Any], timings: Any) -> Usage:
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    if not isinstance(prompt_details, dict) or not isinstance(completion_details, dict):
        raise _Misshapen("usage details are not objects")
    cached = prompt_details.get("cached_tokens")
    if cached is None and isinstance(timings, dict):
        cached = timings.get("cache_n")
    try:
        return Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int(cached or 0),
            reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
        )
    except (TypeError, ValueError):
        raise _Misshapen("a token count is not a number") from None


def _drop_none(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}
