"""Parser throughput: a ~100k-token output fed token by token versus all at once.

A parser that re-parsed the accumulated text at every token (llama.cpp's approach)
would be quadratic: its token-by-token time would be thousands of times its one-shot
time, and its cost per token would grow with the output.  The target is a
token-by-token/at-once ratio under 2.  The table also shows the cost per token for a
10k-token and a 100k-token output: for a linear parser the two are equal ("growth"
near 1), whatever fixed cost each `feed()` call has.

Tokens are 4-character pieces (no tokenizer is assumed installed), which also splits
most markers across pieces.  Run: `.venv/bin/python bench/parsers.py`.

The timed runs consume the events as a stream consumer does: the server renders and
drops each event as it arrives, it does not keep ~100k of them alive.  So each
`feed()`'s list is counted and dropped, the same way in both runs.  (Keeping all the
token-by-token events, as runs before 2026-11-22 did, made the garbage collector's passes
over them, ~20% of that run, count as parsing time.)  The count is the least fold there
is, on purpose: what a consumer does with an event is its own cost, not the parser's.
The results are checked in separate, untimed runs that keep the events: token by token
and at once give the same reasoning, content and calls, and the arguments are valid JSON.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path

from machine import describe

from responsekit.canonical.events import (
    Event,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from responsekit.parsing import Parser, get_parser
from responsekit.prompting.derive import derive
from responsekit.prompting.derived_parser import derived_parser
from responsekit.prompting.templates import ChatTemplate

TEMPLATES = Path(__file__).resolve().parents[1] / "tests" / "data" / "formats" / "templates"
DERIVED = {  # parsers derived from a template, on the text its model writes
    "derived:hermes": ("Qwen-Qwen3-0.6B", "hermes_json"),
    "derived:qwen3coder": ("Qwen3.5-4B", "qwen3_coder_xml"),
    "derived:solar": ("upstage-Solar-Open-100B", "solar_open"),
}
"""Derived format -> (template, the synthesized output it reads)."""

TOKEN_CHARS = 4
TARGET_TOKENS = 100_000
REPEATS = 7

_WORDS = ["the", "a", "of", "to", "and", "in", "is", "it", "that", "for", "on", "with", "as", "was", "by", "this", "be", "are", "or", "from", "at", "which", "we", "can", "if", "then", "so", "not", "but", "all", "value", "function", "call", "file", "path", "result", "error", "list", "check", "return", "number", "string", "object", "because", "therefore", "first", "second", "next", "user", "wants", "weather", "Paris", "Tokyo", "42", "3.14", "-7", "é", "ü", "—", "日本", "✓"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "mode": {"type": "integer"},
                },
            },
        },
    }
]


def _prose(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(_WORDS)
        if rng.random() < 0.08:
            word += rng.choice((".", ",", ":", "?", "\n", "\n\n"))
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def _code(rng: random.Random, chars: int) -> str:
    lines: list[str] = []
    size = 0
    while size < chars:
        indent = "    " * rng.randint(0, 3)
        line = rng.choice(
            (
                f'{indent}print("{_prose(rng, 30)}")',
                f"{indent}x = {{'a': {rng.randint(-99, 99)}, \"b\": [1, 2]}}  # </tool_call> ```",
                f"{indent}if value < limit and path != '\\\\tmp':",
                f"{indent}return f'{{name}}\\t{{value}}'",
                f'{indent}<div class="row">{_prose(rng, 20)}</div>',
            )
        )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _args(code: str, n: int) -> str:
    return json.dumps({"path": f"src/module_{n}.py", "content": code, "mode": 644})


def synthesize(fmt: str, rng: random.Random, tokens: int) -> tuple[str, bool]:
    """A ~`tokens` output in `fmt`: long reasoning, content and calls with long args."""
    total = tokens * TOKEN_CHARS
    reasoning = _prose(rng, total * 3 // 10)
    content = _prose(rng, total * 2 // 10)
    codes = [_code(rng, total // 10) for _ in range(5)]
    if fmt == "hermes_json":
        calls = "".join(
            f'<tool_call>\n{{"name": "write_file", "arguments": {_args(c, i)}}}\n</tool_call>\n'
            for i, c in enumerate(codes)
        )
        return f"<think>\n{reasoning}\n</think>\n\n{content}\n{calls}", False
    if fmt == "qwen3_coder_xml":
        calls = "".join(
            f"<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/module_{i}.py\n"
            f"</parameter>\n<parameter=content>\n{c}\n</parameter>\n<parameter=mode>\n644\n"
            "</parameter>\n</function>\n</tool_call>\n"
            for i, c in enumerate(codes)
        )
        return f"{reasoning}\n</think>\n\n{content}\n{calls}", True
    if fmt == "gpt_oss_harmony":  # one call per generation: its arguments carry all code
        return (
            f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant"
            f"<|channel|>commentary<|message|>{content}<|end|><|start|>assistant"
            "<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>"
            f"{_args(chr(10).join(codes), 0)}<|call|>"
        ), False
    if fmt == "deepseek_r1":
        calls = "\n".join(
            f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>write_file\n```json\n{_args(c, i)}\n"
            "```<｜tool▁call▁end｜>"
            for i, c in enumerate(codes)
        )
        return (
            f"{reasoning}\n</think>\n\n{content}<｜tool▁calls▁begin｜>{calls}"
            "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
        ), True
    if fmt == "solar_open":  # no hand-written format: only a derived parser reads it
        calls = "".join(
            f"<|tool_call:begin|>call_{i}<|tool_call:name|>write_file<|tool_call:args|>{_args(c, i)}"
            "<|tool_call:end|>"
            for i, c in enumerate(codes)
        )
        return (
            f"<|think|>{reasoning}<|end|><|begin|>assistant<|content|>{content}"
            f"<|tool_calls|>{calls}<|calls|>"
        ), False
    if fmt == "mistral_args":
        calls = "".join(f"[TOOL_CALLS]write_file[ARGS]{_args(c, i)}" for i, c in enumerate(codes))
        return f"[THINK]{reasoning}[/THINK]{content}{calls}</s>", False
    raise ValueError(fmt)


def _summary(events: list[Event]) -> tuple[int, int, list[tuple[str, str]]]:
    reasoning = sum(len(e.text) for e in events if isinstance(e, ReasoningDelta))
    content = sum(len(e.text) for e in events if isinstance(e, TextDelta))
    calls: list[tuple[str, list[str]]] = []
    for e in events:
        if isinstance(e, ToolCallStart):
            calls.append((e.name, []))
        elif isinstance(e, ToolCallDelta):
            calls[e.index][1].append(e.arguments)
    ended = sum(isinstance(e, ToolCallEnd) for e in events)
    assert ended == len(calls)
    return reasoning, content, [(name, "".join(parts)) for name, parts in calls]


def _timed(*runs: Callable[[], int]) -> list[float]:
    """Best time of each run over `REPEATS` rounds, each from a collected heap.  The runs
    alternate within a round, so that a load that comes and goes on the machine
    weighs on all of them alike."""
    best = [float("inf")] * len(runs)
    for _ in range(REPEATS):
        for i, run in enumerate(runs):
            gc.collect()
            start = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def parser_class(fmt: str) -> type[Parser]:
    """A registered format's parser, or the one derived from a `DERIVED` template."""
    if fmt in DERIVED:
        source = (TEMPLATES / f"{DERIVED[fmt][0]}.jinja").read_text()
        return derived_parser(derive(ChatTemplate(source)))
    return get_parser(fmt)


def output(fmt: str, size: int) -> tuple[str, bool]:
    return synthesize(DERIVED[fmt][1] if fmt in DERIVED else fmt, random.Random(fmt), size)


def _pieces(raw: str) -> list[str]:
    return [raw[i : i + TOKEN_CHARS] for i in range(0, len(raw), TOKEN_CHARS)]


def check(fmt: str) -> None:
    """Untimed: token by token gives the one-shot result, with valid JSON arguments."""
    raw, thinking_open = output(fmt, TARGET_TOKENS)
    cls = parser_class(fmt)
    parser = cls(TOOLS, thinking_open=thinking_open)
    once = parser.feed(raw) + parser.finish()
    parser = cls(TOOLS, thinking_open=thinking_open)
    streamed = [event for token in _pieces(raw) for event in parser.feed(token)]
    one, two = _summary(once), _summary(streamed + parser.finish())
    assert one == two, f"{fmt}: streamed result differs from one-shot"
    if fmt in DERIVED:
        assert len(one[2]) == 5, f"{fmt}: the calls were not all read"
    for _, arguments in one[2]:
        json.loads(arguments)


def bench(fmt: str, size: int) -> tuple[int, float, float]:
    """Token count, one-shot seconds and token-by-token seconds for a `size` output."""
    raw, thinking_open = output(fmt, size)
    tokens = _pieces(raw)
    cls = parser_class(fmt)

    def at_once() -> int:
        parser = cls(TOOLS, thinking_open=thinking_open)
        seen = len(parser.feed(raw))
        return seen + len(parser.finish())

    def by_token() -> int:
        parser = cls(TOOLS, thinking_open=thinking_open)
        feed = parser.feed
        seen = 0
        for token in tokens:
            seen += len(feed(token))
        return seen + len(parser.finish())

    once, streamed = _timed(at_once, by_token)
    return len(tokens), once, streamed


def main() -> int:
    print(
        f"machine: {describe()} ({platform.python_implementation()}); "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"tokens: {TOKEN_CHARS}-character pieces; best of {REPEATS} runs\n")
    header = (
        f"{'format':<17}{'tokens':>9}{'at once tok/s':>15}{'by token tok/s':>16}{'ratio':>7}"
        f"{'us/tok 10k':>12}{'us/tok 100k':>13}{'growth':>8}"
    )
    print(header)
    print("-" * len(header))
    worst_ratio = worst_growth = 0.0
    for fmt in ("hermes_json", "qwen3_coder_xml", "gpt_oss_harmony", "deepseek_r1", "mistral_args", *DERIVED):
        check(fmt)
        count, once, streamed = bench(fmt, TARGET_TOKENS)
        small_count, _, small_streamed = bench(fmt, TARGET_TOKENS // 10)
        per_token, small_per_token = streamed / count * 1e6, small_streamed / small_count * 1e6
        ratio, growth = streamed / once, per_token / small_per_token
        worst_ratio, worst_growth = max(worst_ratio, ratio), max(worst_growth, growth)
        print(
            f"{fmt:<17}{count:>9,}{count / once:>15,.0f}{count / streamed:>16,.0f}{ratio:>7.2f}"
            f"{small_per_token:>12.2f}{per_token:>13.2f}{growth:>8.2f}"
        )
    linear = worst_growth < 1.5
    print(
        f"\nlinear (cost per token does not grow with the output): "
        f"{'yes' if linear else 'NO'} (worst growth {worst_growth:.2f})"
    )
    print(
        f"token-by-token / at-once under 2: {'yes' if worst_ratio < 2 else 'NO'} "
        f"(worst {worst_ratio:.2f})"
    )
    return 0 if linear and worst_ratio < 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
