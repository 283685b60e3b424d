"""Call grammars, format by format: what a model writes under a forced-call grammar is
read back by that format's parser as calls whose arguments follow the tools' schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from responsekit.canonical.conversation import (
    FunctionTool,
    GenerationRequest,
    Message,
    TextPart,
    ToolCall,
)
from responsekit.parsing import get_parser
from responsekit.prompting import grammars
from responsekit.prompting.templates import chat_messages, chat_tools, load_template

from .harness import DATA
from .parsing.parsing_support import run
from .test_llama_cpp import WEATHER_SCHEMA

WEATHER = {  # the in-process engine tests' schema, with an optional bounded string and a boolean
    **WEATHER_SCHEMA,
    "properties": {**WEATHER_SCHEMA["properties"], "note": {"type": "string", "maxLength": 6},
                   "sure": {"type": "boolean"}},
}
TIME = {"type": "object", "properties": {"zone": {"const": "UTC"}}, "required": ["zone"]}
TOOLS = [FunctionTool("get_weather", "Weather of a city", WEATHER), FunctionTool("get_time", None, TIME)]
SCHEMAS = {tool.name: tool.parameters for tool in TOOLS}
XML_FORMATS = sorted(f for f, syntax in grammars.SYNTAXES.items() if isinstance(syntax, grammars.XmlCallSyntax))


@pytest.fixture(scope="module")
def model(tiny_gguf: Path) -> Any:
    llama_cpp = pytest.importorskip("llama_cpp")  # the `llama` extra, which make test installs
    return llama_cpp.Llama(model_path=str(tiny_gguf), n_ctx=1024, verbose=False, seed=0)


def generate(model: Any, grammar: grammars.Grammar, prompt: str, seed: int) -> str:
    from llama_cpp import LlamaGrammar

    answer = model.create_completion(prompt, max_tokens=400, temperature=1.0, seed=seed,
                                     grammar=LlamaGrammar.from_string(grammar.gbnf, verbose=False))  # fmt: skip
    assert answer["choices"][0]["finish_reason"] == "stop", answer["choices"][0]["text"]
    return str(answer["choices"][0]["text"])


@pytest.mark.parametrize("fmt", sorted(grammars.SYNTAXES))
def test_a_forced_call_is_read_back_as_a_valid_call(model: Any, fmt: str) -> None:
    tools = [{"type": "function", "function": {"name": t.name, "parameters": t.parameters}} for t in TOOLS]
    for seed in range(3):  # sampled, not greedy: a few different calls per format
        grammar = grammars.forced_calls(fmt, TOOLS, parallel=False, thinking_open=False, may_think=False)
        assert grammar is not None
        text = generate(model, grammar, f"Call a tool ({seed}).", seed)
        folded = run(get_parser(fmt)(tools), [text])
        assert len(folded.calls) == 1, (text, folded)
        (call,) = folded.calls
        assert call.ended and call.name in SCHEMAS, text
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


@pytest.mark.parametrize("fmt", XML_FORMATS)
def test_xml_values_are_bare_text_typed_by_the_schema(fmt: str) -> None:
    grammar = grammars.forced_calls(fmt, TOOLS[:1], parallel=True, thinking_open=False, may_think=False)
    assert grammar is not None
    rules = dict(line.split(" ::= ", 1) for line in grammar.gbnf.splitlines() if " ::= " in line)
    assert rules["args0-3"] == '"celsius" | "fahrenheit"'  # an enum of strings: the words, unquoted
    assert rules["args0-4"] == "[^<]{0,6}"  # a bounded string: raw text of that length
    assert rules["args0-0-1"] == "[A-Za-z ]" and '\\"' not in rules["args0-0"]  # a pattern, without JSON quotes
    assert rules["args0-1"] == '([1-9] | "1" [0-4]) space'  # not a string: JSON (a bounded integer)


def test_dsml_marks_which_values_are_raw_text() -> None:
    grammar = grammars.forced_calls("deepseek_v3_2_dsml", TOOLS[:1], parallel=False, thinking_open=False,
                                    may_think=False)  # fmt: skip
    assert grammar is not None
    assert '"<｜DSML｜parameter name=\\"city\\" string=\\"true\\">" args0-0' in grammar.gbnf
    assert '"<｜DSML｜parameter name=\\"days\\" string=\\"false\\">" args0-1' in grammar.gbnf


@pytest.mark.parametrize(("fmt", "block"), [("deepseek_v3_2_dsml", "function_calls"), ("deepseek_v4_dsml", "tool_calls")])
def test_each_dsml_version_writes_the_block_its_template_writes(fmt: str, block: str) -> None:
    grammar = grammars.forced_calls(fmt, TOOLS[:1], parallel=False, thinking_open=False, may_think=False)
    assert grammar is not None and grammars.SYNTAXES[fmt].trigger == f"<｜DSML｜{block}>"
    assert grammars.literal(f'<｜DSML｜{block}>\n<｜DSML｜invoke name="get_weather">\n') in grammar.gbnf
    assert grammars.literal(f"</｜DSML｜invoke>\n</｜DSML｜{block}>") in grammar.gbnf


def test_harmony_writes_a_call_as_the_gpt_oss_template_does() -> None:
    """After the prompt's `<|start|>assistant`, the template writes reasoning as an analysis
    message and the call as the next message, its recipient in the role header: the
    forced grammar's pieces, put together, are that text, and the parser reads it."""
    syntax = grammars.SYNTAXES["gpt_oss_harmony"]
    assert isinstance(syntax, grammars.CallSyntax) and syntax.reasoning is not None
    arguments = {"city": "Paris", "days": 3}
    question = Message("user", [TextPart("Weather in Paris?")])
    call = Message("assistant", reasoning="Look it up.",
                   tool_calls=[ToolCall("c1", "get_weather", json.dumps(arguments))])  # fmt: skip
    template = load_template(DATA / "formats" / "templates" / "openai-gpt-oss-120b.jinja")
    tools = chat_tools(GenerationRequest("gpt-oss", [question], tools=TOOLS[:1]))
    prompt = template.render(chat_messages([question]), tools, add_generation_prompt=True)
    whole = template.render(chat_messages([question, call]), tools, add_generation_prompt=False)
    assert prompt.endswith("<|start|>assistant") and whole.startswith(prompt)
    opening, closing = syntax.reasoning
    assert whole[len(prompt) :] == (f"{opening}Look it up.{closing}{syntax.after_reasoning}"
                                    f"{syntax.before}get_weather{syntax.between}{json.dumps(arguments)}{syntax.after}")  # fmt: skip

    grammar = grammars.forced_calls("gpt_oss_harmony", TOOLS[:1], parallel=True, thinking_open=False,
                                    may_think=True)  # fmt: skip
    assert grammar is not None
    rules = dict(line.split(" ::= ", 1) for line in grammar.gbnf.splitlines() if " ::= " in line)
    assert rules["root"] == ('("<|channel|>analysis<|message|>" [ \\t\\n]* reasoning "<|end|><|start|>assistant" '
                             '[ \\t\\n]*)? (call ("<|start|>assistant" call)*)')  # fmt: skip
    assert rules["call0"].startswith('" to=functions.get_weather" "<|channel|>commentary json<|message|>" args0 ')
    assert rules["call0"].endswith(' "<|call|>"')
    schema_tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    folded = run(get_parser("gpt_oss_harmony")(schema_tools), [whole[len(prompt) :]])
    assert (folded.reasoning, [(c.name, json.loads(c.arguments)) for c in folded.calls]) == (
        "Look it up.", [("get_weather", arguments)])  # fmt: skip


def test_a_harmony_call_by_the_real_gemma_is_read_back(gemma_gguf: Path) -> None:
    """A real model (Gemma 3 270M, which knows nothing of Harmony) held to the forced
    grammar writes a call gpt-oss's parser reads, with arguments of the schema."""
    llama_cpp = pytest.importorskip("llama_cpp")
    model = llama_cpp.Llama(model_path=str(gemma_gguf), n_ctx=1024, verbose=False, seed=0)
    grammar = grammars.forced_calls("gpt_oss_harmony", TOOLS, parallel=False, thinking_open=False, may_think=False)
    assert grammar is not None
    prompt = "<start_of_turn>user\nWhat is the weather in Paris for 3 days?<end_of_turn>\n<start_of_turn>model\n"
    answer = model.create_completion(prompt, max_tokens=120, temperature=0.0,
                                     grammar=llama_cpp.LlamaGrammar.from_string(grammar.gbnf, verbose=False))  # fmt: skip
    text = answer["choices"][0]["text"]
    assert answer["choices"][0]["finish_reason"] == "stop", text
    tools = [{"type": "function", "function": {"name": t.name, "parameters": t.parameters}} for t in TOOLS]
    (call,) = run(get_parser("gpt_oss_harmony")(tools), [text]).calls
    assert call.ended and call.name in SCHEMAS, text
    jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_a_format_without_a_call_syntax_has_no_grammar() -> None:
    assert grammars.forced_calls("pythonic", TOOLS, parallel=False, thinking_open=False, may_think=False) is None


@pytest.mark.parametrize("fmt", sorted(f for f, syntax in grammars.SYNTAXES.items() if syntax.trigger))
def test_a_lazy_grammar_starts_at_the_formats_marker_after_reasoning(fmt: str) -> None:
    llama_grammar = pytest.importorskip("llama_cpp").LlamaGrammar
    syntax = grammars.SYNTAXES[fmt]
    grammar = grammars.lazy_calls(fmt, TOOLS, parallel=True, thinking_open=True)
    assert grammar is not None and grammar.lazy and grammar.trigger_word == syntax.trigger
    llama_grammar.from_string(grammar.gbnf, verbose=False)  # llama.cpp accepts it
    # A marker inside the reasoning (which the prompt opened) does not start the grammar.
    reasoning = f"thinking {syntax.trigger} still thinking{syntax.reasoning[1]}" if syntax.reasoning else ""
    text = f"{reasoning}Some text. {syntax.trigger}"
    found = re.fullmatch(grammar.trigger_pattern or "", text)
    assert found is not None and found.start(1) == text.rindex(syntax.trigger)
