"""One llama.cpp context and its generation loop (runs in a worker thread).

The loop is ours rather than `Llama.generate`, because a request's sampler chain may
hold a *lazy* grammar (`llama_sampler_init_grammar_lazy_patterns`), which the high-level
API cannot take, and because the cancel flag must be read before every token.  It uses
llama-cpp-python's internals (`_ctx`, `_model`, `LlamaSampler`), hence the version pin
of the `llama` extra.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..canonical.conversation import GenerationRequest
from ..prompting.grammars import Grammar
from .thinking_budget import ThinkingBudget

PENALTY_WINDOW = 64
"""Tokens the presence and frequency penalties look back on (llama.cpp's default)."""


@dataclass(frozen=True, slots=True)
class Sampling:
    temperature: float
    top_p: float
    top_k: int = 40
    min_p: float = 0.05
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None

    def with_request(self, request: GenerationRequest) -> Sampling:
        """These defaults, overridden by what the request sets."""
        values = {
            key: value
            for key in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "seed")
            if (value := getattr(request, key)) is not None
        }
        return replace(self, **values) if values else self


@dataclass(slots=True)
class Outcome:
    """How a generation ended, and its token counts."""

    reason: str
    """`stop` (end of turn or grammar complete), `length`, or `cancelled`."""
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    tokens_after_cancel: int = 0

    @property
    def cancelled(self) -> bool:
        return self.reason == "cancelled"


def load_model(path: Path, *, context: int, threads: int | None, gpu_layers: int) -> Sequence:
    from llama_cpp import Llama

    avoid_amx_repacking()
    options: dict[str, Any] = {"n_ctx": context, "n_gpu_layers": gpu_layers, "verbose": False}
    if threads:
        options["n_threads"] = threads
    return Sequence(Llama(str(path), **options))


def _has_amx() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " amx_int8" in flags


def avoid_amx_repacking() -> None:
    """On CPUs with Intel AMX, load weights without repacking them for AMX.

    llama.cpp's AMX matrix multiplication crashes (SIGSEGV in `ggml_backend_amx_mul_mat`) on
    Q4_K_M models such as the default Gemma 3 270M on some AMX machines, this one included
    (https://github.com/ggml-org/llama.cpp/issues/20824, open; dspy removed the AMX variant from its CI for it). Turning off the
    extra buffer types (llama.cpp's `--no-repack`) avoids that kernel; `Llama()` takes no such
    argument, so the default model parameters it starts from are wrapped, once, for every
    load in the process (llama-cpp-python's own server too, see tests/llama_server.py).
    """
    from llama_cpp import llama as high_level

    native = high_level.llama_cpp
    defaults = native.llama_model_default_params
    if getattr(defaults, "no_repack", False) or not _has_amx():
        return

    def no_repack() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    no_repack.no_repack = True  # type: ignore[attr-defined]
    native.llama_model_default_params = no_repack


class Sequence:
    """A context of the model: its KV cache keeps the last prompt, reused by the next
    request that shares its beginning (a conversation's next turn)."""

    def __init__(self, llama: Any) -> None:
        from llama_cpp import llama_cpp as native

        self.llama = llama
        self._native = native
        self._vocab = llama._model.vocab
        self._add_bos = bool(llama._model.add_bos_token())
        self._bos = llama._model.token_get_text(llama._model.token_bos()) if self._add_bos else ""
        self._pieces: dict[int, bytes] = {}

    def _piece(self, token: int) -> bytes:
        """A token's bytes, special tokens written out (the parser reads `<tool_call>`…)."""
        cached = self._pieces.get(token)
        if cached is None:
            size = 64
            buffer = self._native.ctypes.create_string_buffer(size)
            length = self._native.llama_token_to_piece(self._vocab, token, buffer, size, 0, True)
            if length < 0:  # longer than the buffer: -length is the size needed
                buffer = self._native.ctypes.create_string_buffer(-length)
                length = self._native.llama_token_to_piece(self._vocab, token, buffer, -length, 0, True)
            cached = self._pieces[token] = buffer.raw[:length]
        return cached

    def tokenize(self, prompt: str) -> list[int]:
        """The prompt's tokens, special tokens included; BOS added once, as the model wants."""
        add_bos = self._add_bos and not (self._bos and prompt.startswith(self._bos))
        return self.llama.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)

    def close(self) -> None:
        self.llama.close()

    def generate(self, tokens: list[int], limit: int, sampling: Sampling, grammar: Grammar | None,
                 cancel: threading.Event, emit: Callable[[str], None],
                 thinking: ThinkingBudget | None = None) -> Outcome:  # fmt: skip
        """Generate up to `limit` tokens after `tokens`, emitting text as it decodes; at the
        `thinking` budget, its closer is written in the model's place."""
        llama = self.llama
        cached = self._reuse(tokens)
        outcome = Outcome("length", len(tokens), 0, cached)
        batch = llama.n_batch
        for start in range(cached, len(tokens), batch):
            if cancel.is_set():
                outcome.reason = "cancelled"
                return outcome
            llama.eval(tokens[start : start + batch])
        sampler = self._sampler(sampling, grammar)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        piece = self._piece
        try:
            while outcome.completion_tokens < limit:
                if cancel.is_set():
                    outcome.reason = "cancelled"
                    break
                if thinking is not None and thinking.due():
                    forced = self.llama.tokenize(thinking.closer.encode("utf-8"), add_bos=False, special=True)
                    for token in forced:  # the grammar, if any, follows what was written
                        self._native.llama_sampler_accept(sampler.sampler, token)
                    emit(decoder.decode(b"".join(piece(token) for token in forced)))
                    llama.eval(forced)
                    outcome.completion_tokens += len(forced)
                    thinking.over = True
                    continue
                token = sampler.sample(llama._ctx, -1)
                if self._native.llama_vocab_is_eog(self._vocab, token):
                    outcome.reason = "stop"
                    break
                outcome.completion_tokens += 1
                text = decoder.decode(piece(token))
                if text:
                    emit(text)
                if thinking is not None:
                    thinking.feed(text)
                llama.eval([token])
                if cancel.is_set():
                    outcome.tokens_after_cancel += 1
            tail = decoder.decode(b"", final=True)
            if tail and not outcome.cancelled:
                emit(tail)
        finally:
            sampler.close()
        return outcome

    def _reuse(self, tokens: list[int]) -> int:
        """Keep the cached prefix this prompt shares (at least its last token is evaluated anew)."""
        llama = self.llama
        shared = 0
        for cached, token in zip(llama.input_ids[: llama.n_tokens], tokens[:-1]):
            if cached != token:
                break
            shared += 1
        if shared and llama._ctx.kv_cache_seq_rm(-1, shared, -1):
            llama.n_tokens = shared
            return shared
        llama.reset()
        return 0

    def _sampler(self, sampling: Sampling, grammar: Grammar | None) -> Any:
        """The sampler chain: penalties, grammar, then greedy or top-k/top-p/min-p/temperature."""
        from llama_cpp._internals import LlamaSampler

        llama = self.llama
        sampler = LlamaSampler()
        if sampling.presence_penalty or sampling.frequency_penalty:
            sampler.add_penalties(llama.n_vocab(), PENALTY_WINDOW, 1.0, sampling.frequency_penalty,
                                  sampling.presence_penalty)  # fmt: skip
        if grammar is not None:
            self._native.llama_sampler_chain_add(sampler.sampler, self._grammar(grammar))
        seed = sampling.seed if sampling.seed is not None else self._native.LLAMA_DEFAULT_SEED
        if sampling.temperature <= 0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(sampling.top_k)
            sampler.add_top_p(sampling.top_p, 1)
            sampler.add_min_p(sampling.min_p, 1)
            sampler.add_temp(sampling.temperature)
            sampler.add_dist(seed & 0xFFFFFFFF)
        return sampler

    def _grammar(self, grammar: Grammar) -> Any:
        """The grammar's sampler; llama.cpp answers NULL (and logs why) for a grammar it cannot parse."""
        native = self._native
        rules, root = grammar.gbnf.encode("utf-8"), b"root"
        if grammar.lazy and grammar.trigger_pattern:
            patterns = (native.ctypes.c_char_p * 1)(grammar.trigger_pattern.encode("utf-8"))
            no_tokens = (native.llama_token * 0)()
            made = native.llama_sampler_init_grammar_lazy_patterns(self._vocab, rules, root, patterns, 1, no_tokens, 0)
        else:
            made = native.llama_sampler_init_grammar(self._vocab, rules, root)
        if not made:
            raise GrammarError("llama.cpp could not parse the grammar built for this request")
        return made


class GrammarError(Exception):
    """A grammar llama.cpp refused (a bug in its construction, or a schema it cannot express)."""
