"""GBNF grammars that make a model write what the request demands, in its own format.

* A forced call (`tool_choice` required or a named function): the output is one or more
  calls in the model's format (`<tool_call>{"name": …, "arguments": …}</tool_call>` for
  Hermes, `[TOOL_CALLS]name[ARGS]{…}` for Mistral, `<function=name><parameter=key>` for
  Qwen3-Coder, `<tool_call>name<arg_key>key</arg_key><arg_value>` for GLM, ` to=functions.name
  <|channel|>commentary json<|message|>{…}<|call|>` for gpt-oss's Harmony…), arguments
  following each tool's JSON schema, optionally after a reasoning block.
* A lazy call grammar (`tool_choice` auto): the same calls, applied only from the
  format's start marker on (`trigger`), so free text stays free.
* `text.format` json_schema / json_object: the answer is JSON of the schema.
* A template without tool syntax (`backends/generic_tools.py`): llama.cpp's generic protocol, the whole
  output one JSON object holding the calls or, with `tool_choice` auto, the answer.

JSON schemas are converted by llama-cpp-python's converter (the one llama.cpp ships),
except integers with bounds, which it would leave unbounded: those get an exact digit
grammar here.  The converter comes with the `llama` extra; `available()` says whether
constraints can be built.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..canonical.conversation import FunctionTool

if TYPE_CHECKING:
    from .derive import TemplateSyntax

JSON_CHAR = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
"""A character of a JSON string: escaped, or anything but a quote, a backslash or a control character."""
MAX_DIGITS = 15
"""Unbounded integers get at most this many digits (as llama.cpp's own integer rule)."""


def available() -> bool:
    """Whether the JSON-schema converter (llama-cpp-python) is installed."""
    try:
        import llama_cpp.llama_grammar  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class CallSyntax:
    """How a format writes its calls: `block_open` calls… `block_close`, each call being
    `before` NAME `between` ARGUMENTS `after`, calls separated by `separator`."""

    before: str
    between: str
    after: str
    separator: str = ""
    block_open: str = ""
    block_close: str = ""
    trigger: str | None = None
    """The text that starts calls in free output (None: calls cannot start mid-text)."""
    reasoning: tuple[str, str] | None = ("<think>", "</think>")
    name_suffix: str = ""
    """GBNF after the name's literal (Kimi's `:0` index)."""
    after_reasoning: str = ""
    """What comes between the reasoning's end and a call (Harmony's next message header)."""


@dataclass(frozen=True, slots=True)
class XmlCallSyntax:
    """How an XML-style format writes a call: `before` NAME `name_end`, then per argument
    `key_open` KEY `key_end` VALUE `value_end`, then `after`; calls separated by `separator`.

    Values are bare text, typed by the tool schema when the output is parsed: a string is
    raw text (its `enum`, `pattern` and length kept, without quotes), anything else JSON.
    Arguments are written in the schema's order, the required ones always.
    """

    before: str
    name_end: str
    key_open: str
    key_end: str
    value_end: str
    after: str
    separator: str = ""
    trigger: str | None = None
    reasoning: tuple[str, str] | None = ("<think>", "</think>")
    raw_key_end: str | None = None
    """`key_end` before a raw-text value, where the format marks those (DSML's `string="true"`)."""
    block_open: str = ""
    block_close: str = ""


Syntax = CallSyntax | XmlCallSyntax

_ENVELOPE = CallSyntax('{"name": "', '", "arguments": ', "}", ", ")
SYNTAXES: dict[str, Syntax] = {
    "hermes_json": CallSyntax('<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>", "\n",
                              trigger="<tool_call>"),
    "mistral_args": CallSyntax("[TOOL_CALLS]", "[ARGS]", "", trigger="[TOOL_CALLS]",
                               reasoning=("[THINK]", "[/THINK]")),
    "mistral_json_array": CallSyntax(_ENVELOPE.before, _ENVELOPE.between, "}", ", ", "[TOOL_CALLS][", "]",
                                     trigger="[TOOL_CALLS]", reasoning=None),
    "llama3_json": CallSyntax('{"name": "', '", "parameters": ', "}", "; ", reasoning=None),
    "functionary_v3_1": CallSyntax("<function=", ">", "</function>", trigger="<function=", reasoning=None),
    "deepseek_v3_1": CallSyntax("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "",
                                "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", trigger="<｜tool▁calls▁begin｜>"),
    "kimi_k2": CallSyntax("<|tool_call_begin|>functions.", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "",
                          "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                          trigger="<|tool_calls_section_begin|>", name_suffix=' ":" [0-9]{1,3}'),
    "nemotron_toolcall": CallSyntax(_ENVELOPE.before, _ENVELOPE.between, "}", ", ", "<TOOLCALL>[", "]</TOOLCALL>",
                                    trigger="<TOOLCALL>"),
    "phi4_mini": CallSyntax(_ENVELOPE.before, _ENVELOPE.between, "}", ", ", "<|tool_call|>[", "]<|/tool_call|>",
                            trigger="<|tool_call|>", reasoning=None),
    "deepseek_r1": CallSyntax("<｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n", "\n```<｜tool▁call▁end｜>",
                              "\n", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", trigger="<｜tool▁calls▁begin｜>"),
    "granite_3": CallSyntax(_ENVELOPE.before, _ENVELOPE.between, "}", ", ", "<|tool_call|>[", "]",
                            trigger="<|tool_call|>"),
    "firefunction_v2": CallSyntax(_ENVELOPE.before, _ENVELOPE.between, "}", ", ", " functools[", "]",
                                  trigger=" functools[", reasoning=None),
    "xlam": CallSyntax(_ENVELOPE.before, _ENVELOPE.between, "}", ", ", "[", "]"),
    "qwen3_coder_xml": XmlCallSyntax("<tool_call>\n<function=", ">\n", "<parameter=", ">\n", "\n</parameter>\n",
                                     "</function>\n</tool_call>", "\n", trigger="<tool_call>"),
    "seed_oss": XmlCallSyntax("<seed:tool_call>\n<function=", ">\n", "<parameter=", ">", "</parameter>\n",
                              "</function>\n</seed:tool_call>", "\n", trigger="<seed:tool_call>",
                              reasoning=("<seed:think>", "</seed:think>")),
    "minimax_m2": XmlCallSyntax('<minimax:tool_call>\n<invoke name="', '">\n', '<parameter name="', '">',
                                "</parameter>\n", "</invoke>\n</minimax:tool_call>", "\n",
                                trigger="<minimax:tool_call>"),
    "deepseek_v3_2_dsml": XmlCallSyntax('<｜DSML｜function_calls>\n<｜DSML｜invoke name="', '">\n',
                                        '<｜DSML｜parameter name="', '" string="false">', "</｜DSML｜parameter>\n",
                                        "</｜DSML｜invoke>\n</｜DSML｜function_calls>", "\n",
                                        trigger="<｜DSML｜function_calls>", raw_key_end='" string="true">'),
    "deepseek_v4_dsml": XmlCallSyntax('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="', '">\n',
                                      '<｜DSML｜parameter name="', '" string="false">', "</｜DSML｜parameter>\n",
                                      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>", "\n",
                                      trigger="<｜DSML｜tool_calls>", raw_key_end='" string="true">'),
    # Harmony: the call as gpt-oss's template writes it after the prompt's
    # `<|start|>assistant`, each further call or the call after analysis its own message.
    "gpt_oss_harmony": CallSyntax(" to=functions.", "<|channel|>commentary json<|message|>", "<|call|>",
                                  "<|start|>assistant", trigger=" to=functions.",
                                  reasoning=("<|channel|>analysis<|message|>", "<|end|>"),
                                  after_reasoning="<|start|>assistant"),
    "glm_4_5": XmlCallSyntax("<tool_call>", "\n", "<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n",
                             "</tool_call>", "\n", trigger="<tool_call>"),
    "glm_4_7": XmlCallSyntax("<tool_call>", "", "<arg_key>", "</arg_key><arg_value>", "</arg_value>", "</tool_call>",
                             trigger="<tool_call>"),
}  # fmt: skip
"""The formats whose calls a grammar can write."""


@dataclass(frozen=True, slots=True)
class Grammar:
    """A GBNF grammar (root rule `root`); a lazy one applies from `trigger_pattern` on."""

    gbnf: str
    lazy: bool = False
    trigger_pattern: str | None = None
    """For a lazy grammar: a regex the whole output so far must match; its first group
    starts the constrained text (llama.cpp's lazy-grammar patterns)."""
    trigger_word: str | None = None


def literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


def forced_calls(fmt: str | Syntax | None, tools: Sequence[FunctionTool], *, parallel: bool, thinking_open: bool,
                 may_think: bool) -> Grammar | None:  # fmt: skip
    """The output is calls of `tools` only (after optional reasoning); None when the
    format has no known call syntax.  `fmt` is a format's name or its syntax
    (`derived_syntax`)."""
    syntax = SYNTAXES.get(fmt) if isinstance(fmt, str) else fmt
    if syntax is None or not tools:
        return None
    rules = _Rules()
    calls = rules.calls(syntax, tools, parallel)
    resume = syntax.after_reasoning if isinstance(syntax, CallSyntax) else ""
    rules.add("root", _with_reasoning(rules, syntax.reasoning, calls, thinking_open, may_think, resume))
    return Grammar(rules.text())


def lazy_calls(fmt: str | Syntax | None, tools: Sequence[FunctionTool], *, parallel: bool, thinking_open: bool) -> Grammar | None:
    """Calls kept well-formed once the model starts one; text before stays free.

    None when the format has no start marker to trigger on.
    """
    syntax = SYNTAXES.get(fmt) if isinstance(fmt, str) else fmt
    if syntax is None or syntax.trigger is None or not tools:
        return None
    rules = _Rules()
    rules.add("root", rules.calls(syntax, tools, parallel))
    trigger = re.escape(syntax.trigger)
    if syntax.reasoning is not None:
        opening, closing = map(re.escape, syntax.reasoning)
        # Not inside reasoning: after its end if the prompt opened it, else after a
        # reasoning block that opens the output, or with none.
        prefix = (f"[\\s\\S]*?{closing}" if thinking_open
                  else f"(?:\\s*{opening}[\\s\\S]*?{closing}|(?!\\s*{opening}))")  # fmt: skip
    else:
        prefix = ""
    return Grammar(rules.text(), lazy=True, trigger_pattern=f"{prefix}[\\s\\S]*?({trigger})[\\s\\S]*",
                   trigger_word=syntax.trigger)  # fmt: skip


def derived_syntax(derived: TemplateSyntax) -> Syntax | None:
    """The call syntax a template analysis found (`derive.py`), as the grammar writes it: the
    markers exactly as the template renders them, the first without leading whitespace
    (a lazy grammar starts at its trigger).  None for what a grammar cannot write here:
    arguments as JSON text, key headers that mark the value's type (DSML)."""
    shape = derived.calls
    if shape is None or shape.args_as_text or shape.key_name_end:
        return None
    marker = shape.rendered
    reasoning = derived.reasoning  # its opening is "" when only the prompt opens it
    section = bool(marker["section_open"])
    opening = marker["call_open"] if section else marker["call_open"].lstrip()
    # An id the parser drops: any will do (nine alphanumerics, as Mistral's are).
    if shape.id_close and not shape.id_after_name:
        opening += "call00000" + marker["id_close"]
    name_close = marker["name_close"] + ("call00000" + marker["id_close"] if shape.id_after_name else "")
    common = {"separator": marker["separator"], "block_open": marker["section_open"].lstrip(),
              "block_close": marker["section_close"], "trigger": shape.trigger or None,
              "reasoning": reasoning}  # fmt: skip
    if shape.call_index:  # Kimi's `NAME:0`
        name_close = f"{shape.call_index}0{name_close}"
    if shape.style == "key_value":
        return XmlCallSyntax(opening, name_close, marker["key_open"], marker["key_close"],
                             marker["value_close"], marker["call_close"], **common)  # fmt: skip
    if shape.style == "name_json":
        return CallSyntax(opening, name_close, marker["call_close"], **common)
    return CallSyntax(f'{opening}{{"{shape.name_key}": "', f'", "{shape.args_key}": ',
                      "}" + marker["call_close"], **common)  # fmt: skip


def json_output(schema: dict[str, Any] | None, *, reasoning: tuple[str, str] | None, thinking_open: bool,
                may_think: bool) -> Grammar:  # fmt: skip
    """The answer is JSON following `schema` (any object when None), after optional reasoning."""
    rules = _Rules()
    value = rules.schema(schema if schema is not None else {"type": "object"}, "answer")
    rules.add("root", _with_reasoning(rules, reasoning, value, thinking_open, may_think))
    return Grammar(rules.text())


def generic_json(tools: Sequence[FunctionTool], *, parallel: bool, answer: dict[str, Any] | None) -> Grammar:
    """The whole output is one JSON object (llama.cpp's generic format, which the
    `generic_json` parser reads): `{"tool_calls": [call, …]}`, or `{"tool_call": call}`
    when calls are not parallel, each call `{"name": …, "arguments": …}` with arguments of
    its tool's schema; or, when `answer` (a schema) is given, `{"response": …}` of it.

    No `"id"` member, unlike llama.cpp: the parser then numbers the calls itself, so a
    small model cannot give two calls one id.  Not lazy: every token is constrained.
    """
    rules = _Rules()
    names = []
    for index, tool in enumerate(tools):
        arguments = rules.schema(tool.parameters or {"type": "object"}, f"args{index}")
        names.append(rules.add(f"call{index}", f'{literal("{")} space {_key("name")} {literal(json.dumps(tool.name))} '
                                               f'space {literal(",")} space {_key("arguments")} {arguments} {literal("}")} space'))  # fmt: skip
    rules.add("call", " | ".join(names))
    opening, closing = literal("{"), literal("}")
    if parallel:
        calls = f'{opening} space {_key("tool_calls")} "[" space call ("," space call)* "]" space {closing}'
    else:
        calls = f'{opening} space {_key("tool_call")} call {closing}'
    if answer is not None:
        response = rules.schema(answer, "response")
        calls = f'({calls}) | {opening} space {_key("response")} {response} {closing}'
    rules.add("root", calls)
    return Grammar(rules.text())


def _key(name: str) -> str:
    """A JSON object's key and its colon, in GBNF."""
    return f'{literal(json.dumps(name))} space ":" space'


def _with_reasoning(rules: _Rules, tags: tuple[str, str] | None, body: str, thinking_open: bool,
                    may_think: bool, resume: str = "") -> str:  # fmt: skip
    """`body`, after a reasoning block when the prompt opened one or the model may write
    one; `resume` is written between the block and `body`."""
    if tags is None or not (thinking_open or may_think):
        return body
    opening, closing = tags
    if not (opening or thinking_open):  # reasoning only the prompt opens (a derived syntax)
        return body
    rules.add("reasoning", text_without(closing, rules))
    block = f'reasoning {literal(closing + resume)} [ \\t\\n]*'
    return f"{block} {body}" if thinking_open else f"({literal(opening)} [ \\t\\n]* {block})? {body}"


def text_without(stop: str, rules: _Rules, name: str = "reasoning") -> str:
    """A GBNF expression for any text that does not contain `stop` (a KMP automaton:
    state k means the text ends with the first k characters of `stop`)."""
    states = len(stop)
    chars = sorted(set(stop))

    def step(state: int, char: str) -> int:
        matched = stop[:state] + char
        while matched and not stop.startswith(matched):
            matched = matched[1:]
        return len(matched)

    for state in range(states):
        branches: list[str] = []
        targets: dict[int, list[str]] = {}
        for char in chars:
            target = step(state, char)
            if target < states:
                targets.setdefault(target, []).append(char)
        excluded = "".join(_class_char(c) for c in chars)
        branches.append(f"[^{excluded}] {name}-s0")
        for target, group in sorted(targets.items()):
            branches.append(f"[{''.join(_class_char(c) for c in group)}] {name}-s{target}")
        rules.add(f"{name}-s{state}", "(" + " | ".join(branches) + ")?")
    return f"{name}-s0"


def _class_char(char: str) -> str:
    return "\\" + char if char in "]\\^-[" else char


class _Rules:
    """Rules of one grammar: ours plus the JSON-schema converter's."""

    def __init__(self) -> None:
        from llama_cpp.llama_grammar import BuiltinRule, SchemaConverter

        class Converter(SchemaConverter):  # type: ignore[misc, valid-type]
            """llama.cpp's converter, with exact rules for bounded integers and no raw
            control characters in strings (this copy of its `char` rule lets them through,
            which is not JSON)."""

            def _add_primitive(inner, name: str, rule: Any) -> str:
                if name == "char":
                    rule = BuiltinRule(JSON_CHAR, [])
                return super()._add_primitive(name, rule)

            def visit(inner, schema: Any, name: str) -> str:
                if isinstance(schema, dict) and schema.get("type") == "integer":
                    low, high = integer_bounds(schema)
                    if low is not None or high is not None:
                        rule = " | ".join(" ".join(atoms) for atoms in integer_range(low, high))
                        return inner._add_rule(name or "root", f"({rule}) space")
                return super().visit(schema, name)

        self._converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self._own: dict[str, str] = {}

    def add(self, name: str, rule: str) -> str:
        self._own[name] = rule
        return name

    def schema(self, schema: dict[str, Any], name: str) -> str:
        resolved = self._converter.resolve_refs(schema, name)
        return self._converter.visit(resolved, name)

    def calls(self, syntax: Syntax, tools: Sequence[FunctionTool], parallel: bool) -> str:
        """A rule per tool's call, `call` for any of them, repeated when calls may be
        parallel, inside the format's block."""
        names = []
        for index, tool in enumerate(tools):
            body = (self._xml_call(syntax, tool, index) if isinstance(syntax, XmlCallSyntax)
                    else self._json_call(syntax, tool, index))  # fmt: skip
            names.append(self.add(f"call{index}", body))
        self.add("call", " | ".join(names))
        separator = f"{literal(syntax.separator)} " if syntax.separator else ""
        repeat = f"(call ({separator}call)*)" if parallel else "call"
        parts = [literal(syntax.block_open) if syntax.block_open else "", repeat,
                 literal(syntax.block_close) if syntax.block_close else ""]  # fmt: skip
        return " ".join(filter(None, parts))

    def _json_call(self, syntax: CallSyntax, tool: FunctionTool, index: int) -> str:
        arguments = self.schema(tool.parameters or {"type": "object"}, f"args{index}")
        return " ".join(filter(None, (
            literal(syntax.before + tool.name) + syntax.name_suffix,
            literal(syntax.between), arguments, literal(syntax.after) if syntax.after else "",
        )))  # fmt: skip

    def _xml_call(self, syntax: XmlCallSyntax, tool: FunctionTool, index: int) -> str:
        schema = self._converter.resolve_refs(tool.parameters or {"type": "object"}, f"args{index}")
        required = set(schema.get("required") or ())
        arguments = []
        for position, (key, value_schema) in enumerate((schema.get("properties") or {}).items()):
            value, raw = self._xml_value(value_schema if isinstance(value_schema, dict) else {},
                                         syntax.value_end, f"args{index}-{position}")  # fmt: skip
            key_end = syntax.raw_key_end if raw and syntax.raw_key_end is not None else syntax.key_end
            argument = f"{literal(syntax.key_open + key + key_end)} {value} {literal(syntax.value_end)}"
            arguments.append(argument if key in required else f"({argument})?")
        return " ".join((literal(syntax.before + tool.name + syntax.name_end), *arguments, literal(syntax.after)))

    def _xml_value(self, schema: dict[str, Any], end: str, name: str) -> tuple[str, bool]:
        """One bare value's rule, and whether it is raw text: a string as raw text (its enum,
        pattern or length kept), anything else as JSON.  A schema this does not read (anyOf,
        $ref…) leaves the text free."""
        options = schema.get("enum") if isinstance(schema.get("enum"), list) else None
        if "const" in schema:
            options = [schema["const"]]
        if options and all(isinstance(option, str) for option in options):
            return self.add(name, " | ".join(literal(option) for option in options)), True
        kind = schema.get("type", "string")
        if options is not None or not (kind == "string" or isinstance(kind, list) and "string" in kind):
            return str(self._converter.visit(schema, name)), False  # refs were resolved with the whole schema
        if "pattern" in schema:
            converter = self._converter
            converter._raw_pattern = True  # the converter's own switch: the pattern without quotes
            try:
                return str(converter._visit_pattern(schema["pattern"], name)), True
            finally:
                converter._raw_pattern = False
        if "minLength" in schema or "maxLength" in schema:
            low, high = schema.get("minLength", 0), schema.get("maxLength")
            return self.add(name, f"[^<]{{{low},{'' if high is None else high}}}"), True
        return text_without(end, self, f"{name}-text"), True

    def text(self) -> str:
        converted = self._converter.format_grammar()
        own = "\n".join(f"{name} ::= {rule}" for name, rule in self._own.items())
        return f"{own}\n{converted}\n"


# --- bounded integers -------------------------------------------------------------------


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """Inclusive integer bounds from minimum/maximum/exclusiveMinimum/exclusiveMaximum."""
    import math

    low = high = None
    for key, exclusive in (("minimum", False), ("exclusiveMinimum", True)):
        value = schema.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            bound = math.floor(value) + 1 if exclusive or value != int(value) else int(value)
            low = bound if low is None else max(low, bound)
    for key, exclusive in (("maximum", False), ("exclusiveMaximum", True)):
        value = schema.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            bound = math.ceil(value) - 1 if exclusive or value != int(value) else int(value)
            high = bound if high is None else min(high, bound)
    return low, high


def integer_range(low: int | None, high: int | None) -> list[list[str]]:
    """Alternatives (each a list of GBNF atoms) matching exactly the JSON integers in
    [low, high]; None is unbounded (up to MAX_DIGITS digits)."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"the integer range [{low}, {high}] is empty")
    out: list[list[str]] = []
    if low is None or low < 0:  # negative part: -x for x in [max(1, -high), -low]
        top = None if low is None else -low
        bottom = 1 if high is None or high >= 0 else -high
        out += [['"-"', *atoms] for atoms in _natural_range(bottom, top)]
    if high is None or high >= 0:
        out += _natural_range(max(low or 0, 0), high)
    return out


def _natural_range(low: int, high: int | None) -> list[list[str]]:
    """Alternatives for the naturals in [low, high] (None: unbounded)."""
    out: list[list[str]] = []
    limit = high if high is not None else 10**MAX_DIGITS - 1
    for digits in range(len(str(low)), len(str(limit)) + 1):
        start = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        end = min(limit, 10**digits - 1)
        if start <= end:
            out += _same_length(str(start), str(end))
    return out


def _same_length(low: str, high: str) -> list[list[str]]:
    """Alternatives for the numbers from `low` to `high`, both of the same length."""
    if low == high:
        return [[literal(low)]]
    common = 0
    while low[common] == high[common]:
        common += 1
    prefix = [literal(low[:common])] if common else []
    low, high = low[common:], high[common:]
    rest = len(low) - 1
    if low[1:] == "0" * rest and high[1:] == "9" * rest:
        return [[*prefix, f"[{low[0]}-{high[0]}]", *["[0-9]"] * rest]]
    out = [[*prefix, literal(low[0]), *atoms] for atoms in _same_length(low[1:], "9" * rest)]
    if int(high[0]) - int(low[0]) > 1:
        out.append([*prefix, f"[{int(low[0]) + 1}-{int(high[0]) - 1}]", *["[0-9]"] * rest])
    out += [[*prefix, literal(high[0]), *atoms] for atoms in _same_length("0" * rest, high[1:])]
    return out
