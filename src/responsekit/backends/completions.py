"""Backend for raw `/completions` engines (llama.cpp server, vLLM, SGLang, TGI, llama-cpp-python).

ResponseKit renders the model's chat template itself, streams the prompt's completion
and parses the text with the format's parser, so reasoning and tool calls come out the
same whatever engine generates.  Grammars go in the engine's own parameter: llama.cpp
and llama-cpp-python take GBNF as `grammar` (llama.cpp also lazily, with triggers), vLLM
as `structured_outputs.grammar` (or the older `guided_grammar`), SGLang as `ebnf`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..canonical.conversation import GenerationRequest
from ..canonical.events import Error, Event
from ..canonical.jsontext import json_utf8
from ..config import UpstreamConfig
from ..operations.record import Recorder, Recording
from ..prompting.grammars import Grammar
from ..prompting.templates import ChatTemplate, TemplateError, load_template
from .chat_upstream import (
    JSON_HEADERS,
    ChatUpstream,
    SSEPayloads,
    error_answer,
    timeout_error,
    transport_error,
)
from .model_prompting import ModelPrompting, Plan, text_chunk

log = logging.getLogger(__name__)

GRAMMAR_PARAMS = {"llamacpp": "grammar", "vllm": "structured_outputs", "sglang": "ebnf"}
"""How each kind of engine takes a GBNF grammar; others get llama-cpp-python's `grammar`."""
LAZY_TRIGGER_PATTERN_FULL = 3
"""llama.cpp's `COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL`: the pattern matches the whole output so far."""


class CompletionsUpstream(ChatUpstream):
    """A configured raw-completions engine; shares the chat backend's HTTP client,
    model listing and engine-kind recognition."""

    def __init__(self, config: UpstreamConfig, recorder: Recorder | None = None) -> None:
        super().__init__(config, recorder)
        self._prompting: dict[str, ModelPrompting] = {}
        self._template: ChatTemplate | None = load_template(config.chat_template) if config.chat_template else None
        self._tokenize_route: str | None = None

    def reads_images(self, model: str) -> bool | None:
        """Never: this server renders the chat template itself, as text (`prompting/templates.py`)."""
        return False

    def images_source(self, model: str) -> str | None:
        return "the chat template is rendered here, as text"

    async def _ask_modalities(self, names: list[str]) -> None:
        """Nothing to ask: the engine never gets an image from here."""

    async def prompting(self, model: str) -> ModelPrompting:
        """The model's template and format: the configured file, else the engine's own (llama.cpp `/props`)."""
        found = self._prompting.get(model)
        if found is None:
            template = self._template or await self._engine_template(model)
            options = self.config.parsing(model)
            found = self._prompting[model] = ModelPrompting(
                model, template, options.parser, options.reasoning_mode or "separate"
            )
        return found

    async def _engine_template(self, model: str) -> ChatTemplate:
        """The engine's template; an engine that cannot be reached raises httpx's error."""
        root = self.config.base_url.removesuffix("/v1")
        answer = await self._client.get(f"{root}/props", params={"model": model})
        try:
            props = answer.json() if answer.status_code == 200 else {}
        except ValueError:
            props = {}
        source = props.get("chat_template") if isinstance(props, dict) else None
        if not isinstance(source, str) or not source:
            raise TemplateError(
                f"upstream {self.name} does not tell its chat template; set `chat_template` for it "
                "(a Jinja file, a tokenizer_config.json or the model's GGUF)"
            )
        return ChatTemplate(source, bos_token=str(props.get("bos_token") or ""), eos_token=str(props.get("eos_token") or ""))

    def completion_body(self, request: GenerationRequest, plan: Plan) -> dict[str, Any]:
        """The `/completions` body: the prompt, sampling, stops and the grammar in the engine's parameter."""
        body: dict[str, Any] = {
            "model": request.model,
            "prompt": plan.prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if plan.stops:
            body["stop"] = plan.stops
        if request.max_output_tokens is not None:
            body["max_tokens"] = request.max_output_tokens
        for key in ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "user"):
            value = getattr(request, key)
            if value is not None:
                body[key] = value
        if plan.grammar is not None:
            body.update(self._grammar_fields(plan.grammar))
        if self.kind in ("vllm", "sglang"):
            body["skip_special_tokens"] = False  # markers such as <tool_call> are special tokens
        return {**self.config.extra_body, **body}

    def _grammar_fields(self, grammar: Grammar) -> dict[str, Any]:
        param = self.config.grammar_param or GRAMMAR_PARAMS.get(self.kind, "grammar")
        if grammar.lazy:
            if self.kind != "llamacpp" or param != "grammar":
                return {}  # only llama.cpp's server takes lazy grammars: free calls elsewhere
            return {"grammar": grammar.gbnf, "grammar_lazy": True,
                    "grammar_triggers": [{"type": LAZY_TRIGGER_PATTERN_FULL, "value": grammar.trigger_pattern}]}  # fmt: skip
        if param == "none":
            return {}
        if param == "structured_outputs":
            return {"structured_outputs": {"grammar": grammar.gbnf}}
        return {param: grammar.gbnf}

    async def count_tokens(self, request: GenerationRequest) -> tuple[int, bool]:
        """Exact: the rendered prompt tokenized by the engine; else estimated."""
        try:
            prompting = await self.prompting(request.model)
        except (TemplateError, httpx.HTTPError):  # no template known: count as a chat engine would
            return await super().count_tokens(request)
        prompt = prompting.prompt_or_raise(request)
        count = await self._tokenized(prompt, request.model)
        if count is None:
            return max(1, len(prompt) // 4), False
        return count, True

    async def _tokenized(self, prompt: str, model: str) -> int | None:
        """The prompt's token count by the engine: `/tokenize` (llama.cpp, vLLM, SGLang) or
        `/extras/tokenize` (llama-cpp-python); None when neither answers."""
        if self._tokenize_route == "":  # asked before: the engine has none
            return None
        root = self.config.base_url.removesuffix("/v1")
        routes = [self._tokenize_route] if self._tokenize_route else ["/tokenize", "/extras/tokenize"]
        body = {"content": prompt, "prompt": prompt, "input": prompt, "model": model,
                "add_special": False, "add_special_tokens": False, "parse_special": True}  # fmt: skip
        missing = 0
        for route in routes:
            try:
                answer = await self._client.post(f"{root}{route}", content=json_utf8(body), headers=JSON_HEADERS)
            except httpx.HTTPError:
                continue
            missing += answer.status_code in (404, 405)
            try:
                data = answer.json() if answer.status_code == 200 else None
            except ValueError:
                data = None
            if isinstance(data, dict):
                count, tokens = data.get("count"), data.get("tokens")
                if isinstance(count, int) or isinstance(tokens, list):
                    self._tokenize_route = route
                    return count if isinstance(count, int) else len(tokens)  # type: ignore[arg-type]
        if missing == len(routes):  # the engine has no such route: stop asking
            log.warning("upstream %s has no tokenize route; token counts are estimated", self.name)
            self._tokenize_route = ""
        return None

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        try:
            plan = (await self.prompting(request.model)).plan(request)
        except TemplateError as exc:
            yield Error("server_error", str(exc), 502)
            return
        except httpx.HTTPError as exc:  # not even its template came: another pool member may answer
            yield transport_error(self.name, exc)
            return
        if isinstance(plan, Error):
            yield plan
            return
        fitted = await self.fitted(request)
        if isinstance(fitted, Error):
            yield fitted
            return
        body = self.completion_body(fitted, plan)
        recording = self._recorder.start(self.name, "/completions", body) if self._recorder else None
        try:
            async for event in self._stream(body, plan, recording):
                yield event
        finally:
            if recording is not None:
                await recording.save()

    async def _stream(self, body: dict[str, Any], plan: Plan, recording: Recording | None) -> AsyncIterator[Event]:
        translator = plan.translator
        try:
            async with self._engine.post("/completions", json_utf8(body)) as answer:
                if recording:
                    recording.status(answer.status)
                if (error := await error_answer(answer, recording)) is not None:
                    yield error
                    return
                usage = False
                pieces = 0
                payloads = SSEPayloads(answer, recording)
                async for batch in payloads:
                    for data in batch:
                        chunk = _as_chat_chunk(data)
                        usage = usage or "usage" in chunk
                        pieces += sum(1 for choice in chunk["choices"] if choice["delta"]["content"]) if "choices" in chunk else 0
                        for event in translator.feed(chunk):
                            yield event
                            if isinstance(event, Error):
                                return
                await payloads.drain()
                if not usage:
                    for event in translator.feed(await self._counted_usage(plan, body["model"], pieces)):
                        yield event
                for event in translator.finish():
                    yield event
        except httpx.TimeoutException as exc:
            yield timeout_error(self.name, self.config.timeout, exc)
        except httpx.HTTPError as exc:
            yield transport_error(self.name, exc)


    async def _counted_usage(self, plan: Plan, model: str, pieces: int) -> dict[str, Any]:
        """Usage for an engine that reports none (llama-cpp-python): the prompt counted by its
        tokenizer, the output as the number of text chunks (one per token as engines stream)."""
        prompt = await self._tokenized(plan.prompt, model)
        if prompt is None:
            return {}
        return {"usage": {"prompt_tokens": prompt, "completion_tokens": pieces}}

def _as_chat_chunk(data: str) -> dict[str, Any]:
    """A `text_completion` chunk in the chat-chunk shape the translator reads (its `text`
    as content); malformed data becomes an error chunk."""
    try:
        chunk = json.loads(data)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        return {"error": {"message": f"upstream sent malformed data: {data[:200]!r}", "code": 502}}
    if chunk.get("error"):
        return chunk
    out: dict[str, Any] = {key: chunk[key] for key in ("usage", "timings") if key in chunk}
    choices = []
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        text = choice.get("text")
        converted = text_chunk(text if isinstance(text, str) else "")["choices"][0]
        converted["index"] = choice.get("index", 0)
        converted["finish_reason"] = choice.get("finish_reason")
        choices.append(converted)
    out["choices"] = choices
    return out
