"""Each served model's context window, read from its engine's own API when the router refreshes the
model lists (never per request), what a window leaves a request's output, and what an engine's
refusal of a prompt too long for it tells.

Every engine tells its window somewhere else: vLLM and SGLang on each `/v1/models` entry, llama.cpp's
server in `/props`, Ollama in `/api/ps` (loaded) or `/api/show`, LM Studio in its REST API. An engine
whose kind is not known is asked in turn, cheaply; an answer of another shape, or none, leaves the
window unknown (logged at debug), never failing a refresh.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpx

from ..canonical.conversation import GenerationRequest, TextPart

log = logging.getLogger(__name__)

Windows = dict[str, int]
Probe = Callable[[httpx.AsyncClient, str, list[str]], Awaitable[Windows]]

TIMEOUT = 5.0
"""Seconds each discovery request may take."""
TEMPLATE_ALLOWANCE = 1024
"""Tokens a chat template may add around the messages and tools (markers, a tool preamble)."""
MESSAGE_ALLOWANCE = 16
"""Tokens a chat template may add around each message or tool (its role and separators)."""
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def from_listing(data: Iterable[Any]) -> Windows:
    """`max_model_len` on each `/v1/models` entry: vLLM's and SGLang's `ModelCard`
    (https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html)."""
    return {str(entry["id"]): window for entry in data
            if isinstance(entry, dict) and "id" in entry and (window := _positive(entry.get("max_model_len")))}  # fmt: skip


async def llamacpp(client: httpx.AsyncClient, root: str, names: list[str]) -> Windows:
    """llama.cpp's server: `/props` `default_generation_settings.n_ctx`, a slot's context; in router
    mode per model, without loading one that is not (`autoload=false`)
    (https://github.com/ggml-org/llama.cpp/tree/master/tools/server#get-props-get-server-global-properties)."""

    async def ask(name: str) -> int | None:
        answer = await client.get(f"{root}/props", params={"model": name, "autoload": "false"}, timeout=TIMEOUT)
        settings = answer.json().get("default_generation_settings") if answer.status_code == 200 else None
        return _positive(settings.get("n_ctx")) if isinstance(settings, dict) else None

    first = await ask(names[0])  # an engine that is not llama.cpp's server is asked once
    if first is None:
        return {}
    rest = await asyncio.gather(*(ask(name) for name in names[1:]))
    return {name: window for name, window in zip(names, [first, *rest]) if window is not None}


async def ollama(client: httpx.AsyncClient, root: str, names: list[str]) -> Windows:
    """Ollama: a loaded model's `context_length` in `/api/ps`; else `/api/show`'s
    `<architecture>.context_length`, or its `num_ctx` parameter when that is smaller
    (https://github.com/ollama/ollama/blob/main/docs/api.md#list-running-models,
    https://github.com/ollama/ollama/blob/main/docs/api.md#show-model-information)."""
    answer = await client.get(f"{root}/api/ps", timeout=TIMEOUT)
    running = answer.json().get("models") if answer.status_code == 200 else None
    if not isinstance(running, list):
        return {}
    found: Windows = {}
    for model in running:
        if isinstance(model, dict) and (window := _positive(model.get("context_length"))):
            found.update({str(model[key]): window for key in ("name", "model") if key in model})
    unloaded = [name for name in names if name not in found]
    shown = await asyncio.gather(*(_ollama_show(client, root, name) for name in unloaded))
    found.update({name: window for name, window in zip(unloaded, shown) if window is not None})
    return found


async def _ollama_show(client: httpx.AsyncClient, root: str, name: str) -> int | None:
    answer = await client.post(f"{root}/api/show", json={"model": name}, timeout=TIMEOUT)
    shown = answer.json() if answer.status_code == 200 else None
    if not isinstance(shown, dict):
        return None
    info = shown.get("model_info")
    trained = None
    if isinstance(info, dict):
        trained = _positive(info.get(f"{info.get('general.architecture')}.context_length"))
    parameters = shown.get("parameters")
    found = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
    configured = _positive(int(found.group(1))) if found else None
    return min(filter(None, (trained, configured)), default=None)


async def lmstudio(client: httpx.AsyncClient, root: str, names: list[str]) -> Windows:
    """LM Studio: a loaded instance's `context_length` in `/api/v1/models`, else the model's
    `max_context_length` (https://lmstudio.ai/docs/developer/rest/list); before LM Studio 0.4,
    `/api/v0/models` (https://lmstudio.ai/docs/developer/rest/endpoints)."""
    answer = await client.get(f"{root}/api/v1/models", timeout=TIMEOUT)
    models = answer.json().get("models") if answer.status_code == 200 else None
    if isinstance(models, list):
        return _lmstudio_v1(models)
    answer = await client.get(f"{root}/api/v0/models", timeout=TIMEOUT)
    data = answer.json().get("data") if answer.status_code == 200 else None
    return _lmstudio_v0(data) if isinstance(data, list) else {}


def _lmstudio_v1(models: list[Any]) -> Windows:
    """A model's window: its loaded instances' smallest (a request may reach any), else its maximum."""
    found: Windows = {}
    for model in models:
        if not isinstance(model, dict):
            continue
        loaded: Windows = {}
        for instance in model.get("loaded_instances") or ():
            config = instance.get("config") if isinstance(instance, dict) else None
            if isinstance(config, dict) and (window := _positive(config.get("context_length"))):
                loaded[str(instance.get("id"))] = window
        found.update(loaded)
        window = min(loaded.values(), default=None) or _positive(model.get("max_context_length"))
        if window is not None and "key" in model:
            found[str(model["key"])] = window
    return found


def _lmstudio_v0(data: list[Any]) -> Windows:
    """`loaded_context_length`, which LM Studio adds for a loaded model, else `max_context_length`."""
    return {str(entry["id"]): window for entry in data if isinstance(entry, dict) and "id" in entry
            and (window := _positive(entry.get("loaded_context_length")) or _positive(entry.get("max_context_length")))}  # fmt: skip


PROBES: dict[str, Probe] = {"llamacpp": llamacpp, "ollama": ollama, "lmstudio": lmstudio}
"""How each kind of engine is asked beyond its listing; one of unknown kind (`generic`) is asked
in this order until one answers."""


async def discover(client: httpx.AsyncClient, kind: str, root: str, names: list[str], listing: list[Any]) -> Windows:
    """The windows of `names` that their engine tells: its `/models` listing (`listing`), then
    what its kind answers (`root`: the engine's address without `/v1`)."""
    found = {name: window for name, window in from_listing(listing).items() if name in names}
    missing = [name for name in names if name not in found]
    probes = [PROBES[kind]] if kind in PROBES else list(PROBES.values()) if kind == "generic" else []
    for probe in probes if missing else ():
        try:
            told = await probe(client, root, missing)
        except (httpx.HTTPError, ValueError, TypeError, AttributeError, KeyError) as exc:
            log.debug("%s did not tell its models' context windows (%s): %r", root, probe.__name__, exc)
            continue
        if told:
            found.update({name: window for name, window in told.items() if name in missing})
            break
    for name in names:
        if name not in found:
            log.debug("%s did not tell the context window of %s", root, name)
    return found


def most_prompt_tokens(request: GenerationRequest) -> int | None:
    """More tokens than the request's prompt can take, with no tokenizer at hand: a text token is at
    least one byte of UTF-8, and the template adds its allowances; None when a part is not text (an
    image may take thousands of tokens)."""
    size = TEMPLATE_ALLOWANCE
    for message in request.messages:
        if not all(isinstance(part, TextPart) for part in message.content):
            return None
        size += MESSAGE_ALLOWANCE + sum(len(part.text.encode()) for part in message.content if isinstance(part, TextPart))
        size += len((message.reasoning or "").encode())
        size += sum(MESSAGE_ALLOWANCE + len(call.name.encode()) + len(call.arguments.encode()) for call in message.tool_calls)
    for tool in request.tools:  # ASCII JSON: as long as the UTF-8 of what it holds, or longer
        size += MESSAGE_ALLOWANCE + len(json.dumps([tool.name, tool.description, tool.parameters]))
    return size


def may_overflow(window: int | None, request: GenerationRequest) -> bool:
    """Whether the output maximum a request asks for might not fit in `window` after its prompt:
    only then is the prompt worth an engine's exact count."""
    wanted = request.max_output_tokens
    if window is None or wanted is None:
        return False
    most = most_prompt_tokens(request)
    return most is None or wanted + most > window


def prompt_may_overflow(window: int, request: GenerationRequest) -> bool:
    """Whether a request's prompt alone might be longer than `window`: only then is it worth an
    engine's exact count before generating."""
    most = most_prompt_tokens(request)
    return most is None or most > window


def room_left(window: int, prompt_tokens: int, wanted: int | None) -> int | None:
    """The output maximum to send instead of `wanted`: what the window leaves after the prompt, when
    that is less (None: `wanted` fits, or the prompt alone fills the window and the engine says so)."""
    room = window - prompt_tokens
    return room if wanted is not None and 0 < room < wanted else None


# What engines tell when a prompt does not fit: the window, and the prompt's tokens. vLLM, by version
# (https://github.com/vllm-project/vllm/blob/main/vllm/entrypoints/openai/serving_engine.py): "This
# model's maximum context length is 8192 tokens. However, you requested 0 output tokens and your
# prompt contains at least 8193 input tokens, …", "…your request has 9000 input tokens…", "…you
# requested 9000 tokens (8000 in the messages, 1000 in the completion)…", "You passed 12289 input
# tokens … the model's context length is only 16384 tokens"; SGLang
# (https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/managers/tokenizer_manager.py):
# "The input (5000 tokens) is longer than the model's context length (4096 tokens)"; OpenAI: "…your
# messages resulted in 130021 tokens"; llama.cpp: `n_prompt_tokens` and `n_ctx` beside "request (9000
# tokens) exceeds the available context size (8192 tokens)…" and its other wordings
# (https://github.com/ggml-org/llama.cpp/blob/master/tools/server/server-task.cpp); Anthropic's "prompt
# is too long: 210432 tokens > 200000 maximum".
_TOLD_WINDOW = re.compile(
    r"maximum context length is (\d+)|context length is only (\d+)|context length \((\d+) tokens\)"
    r"|context size \((\d+) tokens\)|tokens > (\d+) maximum", re.IGNORECASE)  # fmt: skip
_TOLD_PROMPT = re.compile(
    r"prompt contains at least (\d+) input tokens|request has (\d+) input tokens|(\d+)(?: tokens)? in the messages"
    r"|you passed (\d+) input tokens|resulted in (\d+) tokens|(?:input|request) \((\d+) tokens\)"
    r"|prompt is too long: (\d+) tokens", re.IGNORECASE)  # fmt: skip


def told_overflow(message: str, error: dict[str, Any]) -> tuple[int | None, int | None]:
    """The prompt's tokens and the window an engine's refusal of a long prompt tells (`error`: its
    error object), each None when not told. The prompt's count is kept only when it is past the
    window: a count within it belongs to a refusal of prompt and output maximum together (vLLM's
    lower bound), where the prompt alone is not too long."""
    window = _positive(error.get("n_ctx")) or _first_number(_TOLD_WINDOW.search(message))
    prompt = _positive(error.get("n_prompt_tokens")) or _first_number(_TOLD_PROMPT.search(message))
    if prompt is not None and (window is None or prompt <= window):
        prompt = None
    return prompt, window


def _first_number(match: re.Match[str] | None) -> int | None:
    return int(next(group for group in match.groups() if group is not None)) if match else None
