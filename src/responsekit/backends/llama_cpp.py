"""The in-process engine: a GGUF model run by llama.cpp (llama-cpp-python, the `llama` extra).

Each request renders the model's chat template, waits for a free sequence (one per
`parallel`; requests are served first come, first served) and generates in a worker
thread, which llama.cpp's calls leave free of the GIL; its text pieces cross to the
event loop and go through the same parser and translator as every text engine.  A
client that goes away (or a stop text) sets the request's cancel flag, which the worker
checks before every token, so generation stops within one token and the sequence is
handed to the next request.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..canonical.conversation import GenerationRequest
from ..canonical.errors import context_overflow
from ..canonical.events import Error, Event
from ..config import LocalModel
from ..prompting.stop_texts import StopTexts
from ..prompting.templates import ChatTemplate, from_gguf, load_template
from .llama_sequence import Sampling, Sequence, load_model
from .model_prompting import ModelPrompting, Plan, final_chunk, text_chunk

log = logging.getLogger(__name__)

DEFAULT_SAMPLING = Sampling(temperature=0.8, top_p=0.95)
"""llama.cpp server's defaults, for requests that set none."""


def model_file(config: LocalModel) -> Path:
    """The GGUF on disk: the configured path, or the Hugging Face file, downloaded into
    the Hugging Face cache unless it is there already."""
    if config.path is not None:
        if not config.path.is_file():
            raise RuntimeError(f"model {config.name}: file not found: {config.path}")
        return config.path
    from huggingface_hub import hf_hub_download

    assert config.hf_repo is not None and config.hf_file is not None
    log.info("model %s: fetching %s from %s (Hugging Face cache)", config.name, config.hf_file, config.hf_repo)
    return Path(hf_hub_download(repo_id=config.hf_repo, filename=config.hf_file))


def _template_origin(config: LocalModel, template: ChatTemplate) -> str:
    """Where the chat template came from, for the log and `/health`."""
    if template.fallback:
        return f"built-in {template.fallback!r} (the GGUF has none; --chat-template FILE replaces it)"
    return str(config.chat_template) if config.chat_template else "the GGUF's"


@dataclass(slots=True)
class RunStats:
    """What the last generations did (for tests and logs)."""

    finished: int = 0
    cancelled: int = 0
    tokens_after_cancel: list[int] = field(default_factory=list)


class LlamaCppBackend:
    """One in-process model, served under its configured name."""

    kind = "llama.cpp (in-process)"
    counts_locally = True

    def __init__(self, config: LocalModel) -> None:
        self.config = config
        self.name = "llama.cpp"
        """Shown as `owned_by` in `/v1/models` and in `/health`."""
        self.model = config.name
        self.stats = RunStats()
        self.loaded = False
        self._sequences: list[Sequence] = []
        self._free: list[Sequence] = []
        self._waiting: deque[asyncio.Future[Sequence]] = deque()
        self._prompting: ModelPrompting | None = None
        self.template_origin = ""
        """Where its chat template came from (`/health`): the GGUF's, a file, or a built-in one."""

    async def start(self) -> None:
        """Fetch (if needed) and load the model, logging progress: the server answers once it is ready."""
        path = await asyncio.to_thread(model_file, self.config)
        started = time.monotonic()
        log.info("model %s: loading %s (%.1f MiB, %d sequence(s) of %d tokens)", self.model, path,
                 path.stat().st_size / 2**20, self.config.parallel, self.config.context)  # fmt: skip
        ticker = asyncio.create_task(self._tick(started))
        try:
            self._sequences = await asyncio.to_thread(self._load, path)
        except ImportError:
            raise RuntimeError("running a model in-process needs the `llama` extra: "
                               "pip install 'responsekit[llama]'") from None  # fmt: skip
        except (ValueError, OSError) as exc:  # llama.cpp's "Failed to load model from file"
            raise RuntimeError(f"model {self.model}: cannot load {path}: {exc}") from None
        finally:
            ticker.cancel()
        self._free = list(self._sequences)
        template = load_template(self.config.chat_template) if self.config.chat_template else from_gguf(path)
        self._prompting = ModelPrompting(self.model, template, self.config.parser, self.config.reasoning_mode)
        self.loaded = True
        self.template_origin = _template_origin(self.config, template)
        log.info("model %s: loaded in %.1fs; chat template %s; output format %s", self.model,
                 time.monotonic() - started, self.template_origin,
                 self._prompting.format or "none (text passed as is)")  # fmt: skip

    def _load(self, path: Path) -> list[Sequence]:
        return [
            load_model(path, context=self.config.context, threads=self.config.threads, gpu_layers=self.config.gpu_layers)
            for _ in range(self.config.parallel)
        ]

    async def _tick(self, started: float) -> None:
        while True:
            await asyncio.sleep(5)
            log.info("model %s: still loading (%.0fs)", self.model, time.monotonic() - started)

    async def list_models(self) -> list[str]:
        return [self.model]

    async def aclose(self) -> None:
        for waiter in self._waiting:
            waiter.cancel()
        for sequence in self._sequences:
            sequence.close()

    def reads_images(self, model: str) -> bool | None:
        """Never: no multimodal projector is loaded with the model, so it reads text only."""
        return False

    def images_source(self, model: str) -> str | None:
        return "no multimodal projector is loaded"

    def learn_text_only(self, model: str) -> None:
        """Nothing to learn: it never gets an image."""

    def fetches_image_urls(self, model: str) -> bool:
        """It never gets an image (`reads_images`)."""
        return False

    def context_window(self, model: str) -> int:
        return self.config.context

    @property
    def template(self) -> ChatTemplate:
        assert self._prompting is not None
        return self._prompting.template

    async def count_tokens(self, request: GenerationRequest) -> tuple[int, bool]:
        """Exact: the rendered prompt tokenized by the model's own tokenizer."""
        assert self._prompting is not None
        return len(self._sequences[0].tokenize(self._prompting.prompt_or_raise(request))), True

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Event]:
        if self._prompting is None:
            yield Error("server_error", f"model {self.model} is not loaded", 503)
            return
        plan = self._prompting.plan(request)
        if isinstance(plan, Error):
            yield plan
            return
        tokens = self._sequences[0].tokenize(plan.prompt)
        room = self.config.context - len(tokens)
        if room <= 0:
            yield context_overflow(len(tokens), self.config.context)
            return
        if len(self._waiting) >= self.config.max_queue and not self._free:
            yield Error("rate_limit_exceeded", f"model {self.model} is busy: {len(self._waiting)} requests "
                        "are waiting already; retry later", 429)  # fmt: skip
            return
        sequence = await self._acquire()
        async for event in self._run(sequence, plan, tokens, request, room):
            yield event

    async def _run(self, sequence: Sequence, plan: Plan, tokens: list[int], request: GenerationRequest,
                   room: int) -> AsyncIterator[Event]:  # fmt: skip
        loop = asyncio.get_running_loop()
        handoff = Handoff(loop)
        cancel = threading.Event()
        limit = min(request.max_output_tokens or self.config.max_output_tokens or room, room)
        sampling = DEFAULT_SAMPLING.with_request(request)
        worker = loop.run_in_executor(None, self._work, sequence, tokens, limit, sampling, plan, cancel, handoff.put)
        worker.add_done_callback(lambda _: self._release(sequence))
        stops = StopTexts(plan.stops)
        translator = plan.translator
        try:
            while True:
                # What arrived since the last turn goes out as one piece, then the loop
                # is given back: a fast engine never holds it for a whole generation.
                items = await handoff.take()
                end = items.pop() if not isinstance(items[-1], str) else None
                text = stops.feed("".join(items)) if items else ""
                if stops.hit is not None:
                    cancel.set()
                if text:
                    for event in translator.feed(text_chunk(text)):
                        yield event
                if end is None:
                    await asyncio.sleep(0)
                    continue
                if isinstance(end, BaseException):
                    yield Error("server_error", f"model {self.model} failed: {end!r}", 500)
                    return
                tail = stops.flush()
                if tail:
                    for event in translator.feed(text_chunk(tail)):
                        yield event
                reason = "stop" if stops.hit is not None else end.reason
                final = final_chunk(reason, end.prompt_tokens, end.completion_tokens, end.cached_tokens)
                for event in translator.feed(final):
                    yield event
                for event in translator.finish():
                    yield event
                return
        finally:
            cancel.set()

    def _work(self, sequence: Sequence, tokens: list[int], limit: int, sampling: Sampling, plan: Plan,
              cancel: threading.Event, emit: Callable[[Any], None]) -> None:  # fmt: skip
        """The worker thread: generate until the end, the limit or the cancel flag."""
        try:
            done = sequence.generate(tokens, limit, sampling, plan.grammar, cancel, emit, plan.thinking)
        except Exception as exc:  # a llama.cpp failure must end the stream, not the server
            log.exception("model %s: generation failed", self.model)
            emit(exc)
            return
        if done.cancelled:
            self.stats.cancelled += 1
            self.stats.tokens_after_cancel.append(done.tokens_after_cancel)
        else:
            self.stats.finished += 1
        emit(done)

    async def _acquire(self) -> Sequence:
        """A free sequence; requests wait for one first come, first served."""
        if self._free and not self._waiting:
            return self._free.pop()
        waiter: asyncio.Future[Sequence] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            elif waiter.done() and not waiter.cancelled():
                self._release(waiter.result())
            raise

    def _release(self, sequence: Sequence) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(sequence)
                return
        self._free.append(sequence)


class Handoff:
    """Text pieces from the worker thread to the event loop, which is woken once per batch
    (when it waits), not once per token."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Any) -> None:
        """From the worker: a text piece, then its `Outcome` (or the exception that ended it)."""
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_wake, waiter)

    async def take(self) -> list[Any]:
        """Everything put since the last take (at least one item)."""
        waiter = self._loop.create_future()
        with self._lock:
            if not self._items:
                self._waiter = waiter
        if self._waiter is waiter:
            await waiter
        with self._lock:
            items, self._items = self._items, []
        return items


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
