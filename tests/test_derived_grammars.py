"""Grammars and parser selection from a derived template syntax:
what a model writes under the grammar derived from a template is read back by the parser
derived from the same template."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from responsekit.backends.model_prompting import ModelPrompting
from responsekit.prompting import grammars
from responsekit.prompting.derive import derive
from responsekit.prompting.derived_parser import derived_parser
from responsekit.prompting.templates import ChatTemplate

from .parsing.parsing_support import TEMPLATES_DIR, run
from .test_grammars import SCHEMAS, TOOLS, generate

TEMPLATES = sorted(TEMPLATES_DIR.glob("*.jinja"))
CHAT_TOOLS = [
    {"type": "function", "function": {"name": t.name, "parameters": t.parameters}} for t in TOOLS
]


def load(name: str) -> ChatTemplate:
    return ChatTemplate(
        (TEMPLATES_DIR / f"{name}.jinja").read_text(), bos_token="<s>", eos_token="</s>"
    )


def with_grammar() -> list[str]:
    return [
        path.stem
        for path in TEMPLATES
        if grammars.derived_syntax(derive(load(path.stem))) is not None
    ]


WITH_GRAMMAR = with_grammar()
FORCED = [name for name in WITH_GRAMMAR if name != "Apriel-1.6-15b-Thinker-fixed"]
"""Apriel 1.6's reasoning is opened by its prompt alone, so its output always starts with
reasoning, which a random model never ends."""


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Any:
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, verbose=False, seed=0)


def test_most_templates_get_a_call_grammar() -> None:
    """Every template whose call shape was derived, but for arguments written as JSON text
    or DSML's typed key headers, gets a grammar; the templates no parser read before the
    derived one among them."""
    assert len(WITH_GRAMMAR) >= 40
    for name in ("GigaChat3.1-10B-A1.8B", "unsloth-Apriel-1.5", "upstage-Solar-Open-100B", "tencent-Hy3",
                 "openbmb-MiniCPM5-1B"):  # fmt: skip
        assert name in WITH_GRAMMAR


@pytest.mark.parametrize("name", FORCED)
def test_a_forced_call_under_the_derived_grammar_is_read_back(model: Any, name: str) -> None:
    """Sampled by a tiny random model under the forced-call grammar, the output is one
    call of a declared tool whose arguments follow its schema, read by the derived parser."""
    syntax = derive(load(name))
    grammar = grammars.forced_calls(grammars.derived_syntax(syntax), TOOLS, parallel=False,
                                    thinking_open=False, may_think=False)  # fmt: skip
    assert grammar is not None
    text = generate(model, grammar, "Call a tool.", 0)
    folded = run(derived_parser(syntax)(CHAT_TOOLS), [text])
    assert len(folded.calls) == 1, (text, folded)
    (call,) = folded.calls
    assert call.ended and call.name in SCHEMAS, text
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


@pytest.mark.parametrize(
    "name", ["GigaChat3.1-10B-A1.8B", "openbmb-MiniCPM5-1B", "upstage-Solar-Open-100B"]
)
def test_the_lazy_grammar_starts_at_the_derived_trigger(name: str) -> None:
    syntax = derive(load(name))
    assert syntax.calls is not None
    grammar = grammars.lazy_calls(
        grammars.derived_syntax(syntax), TOOLS, parallel=True, thinking_open=False
    )
    assert grammar is not None and grammar.lazy
    assert grammar.trigger_word == syntax.calls.trigger
    assert grammar.trigger_pattern is not None
    match = re.fullmatch(grammar.trigger_pattern, f"Let me look. {syntax.calls.trigger}x")
    assert match is not None and match.start(1) == len("Let me look. ")


def test_the_real_model_writes_a_parseable_call_under_a_derived_grammar(gemma_gguf: Path) -> None:
    """Gemma 3 270M, prompted through MiniCPM 5's template (a format no hand-written parser
    knows) and held to the derived grammar, writes a call the derived parser reads."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from llama_cpp import LlamaGrammar

    template = load("openbmb-MiniCPM5-1B")
    syntax = derive(template)
    grammar = grammars.forced_calls(grammars.derived_syntax(syntax), TOOLS[:1], parallel=False,
                                    thinking_open=False, may_think=False)  # fmt: skip
    assert grammar is not None
    prompt = template.render(
        [{"role": "user", "content": "What is the weather in Paris?"}], CHAT_TOOLS[:1]
    )
    llm = llama_cpp.Llama(model_path=str(gemma_gguf), n_ctx=2048, verbose=False, seed=0)
    answer = llm.create_completion(prompt, max_tokens=120, temperature=0.0,
                                   grammar=LlamaGrammar.from_string(grammar.gbnf, verbose=False))  # fmt: skip
    text = str(answer["choices"][0]["text"])
    folded = run(derived_parser(syntax)(CHAT_TOOLS), [text])
    assert [call.name for call in folded.calls] == ["get_weather"], text
    jsonschema.validate(json.loads(folded.calls[0].arguments), SCHEMAS["get_weather"])


def test_a_hand_written_format_wins_where_its_markers_match(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, "responsekit.backends.model_prompting"):
        prompting = ModelPrompting("qwen", load("Qwen-Qwen3-0.6B"))
    assert prompting.format == "hermes_json"
    assert "output parsed as hermes_json: its markers occur in the chat template" in caplog.text


@pytest.mark.parametrize("name", ["GigaChat3-10B-A1.8B", "openbmb-MiniCPM5-1B", "tencent-Hy3"])
def test_auto_uses_the_derived_parser_for_a_template_no_format_knows(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "responsekit.backends.model_prompting"):
        prompting = ModelPrompting(name, load(name))
    assert prompting.format == "template" and prompting.derived is not None
    assert prompting.parser is not None and prompting.parser.syntax == prompting.derived
    assert "output parsed as template: derived from the chat template" in caplog.text


def test_parser_template_forces_the_derived_parser() -> None:
    prompting = ModelPrompting("qwen", load("Qwen-Qwen3-0.6B"), "template")
    assert prompting.format == "template"
    assert prompting.derived is not None and prompting.derived.calls is not None
    assert prompting.derived.calls.trigger == "<tool_call>"


def test_unknown_reasoning_markers_become_reasoning() -> None:
    """Solar Open's `<|think|>…<|end|>`, which no hand-written format knows."""
    syntax = derive(load("upstage-Solar-Open-100B"))
    assert syntax.reasoning == ("<|think|>", "<|end|>")
    text = "<|think|>Checking the tools.<|end|><|begin|>assistant<|content|>It is sunny.<|end|>"
    folded = run(derived_parser(syntax)(), list(text))
    assert (folded.reasoning, folded.content) == ("Checking the tools.", "It is sunny.")


def test_reasoning_opened_by_the_generation_prompt() -> None:
    """Qwen3.5 opens `<think>` in the prompt: the output starts inside reasoning."""
    template = load("Qwen3.5-4B")
    syntax = derive(template)
    cls = derived_parser(syntax)
    prompt = template.render([{"role": "user", "content": "Hi"}], CHAT_TOOLS)
    assert cls.thinking_open_in(prompt)
    folded = run(cls(CHAT_TOOLS, thinking_open=True), ["Hmm, a greeting.\n</think>\n\nHello!"])
    assert (folded.reasoning, folded.content) == ("Hmm, a greeting.", "Hello!")
