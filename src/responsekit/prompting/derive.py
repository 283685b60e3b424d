"""Derive a chat template's output syntax by rendering probe conversations
(docs/parsing.md, Templates no format knows: the derived parser).

The anchor is llama.cpp's autoparser (https://github.com/ggml-org/llama.cpp/pull/18675): a template says how its
model writes reasoning and tool calls every time it renders an assistant turn from the
history, so rendering turns that differ in one respect and comparing them shows the
markers.  Probes: an answer alone; reasoning and an answer; one call with two arguments;
one call without arguments; two calls.  The answer alone is the reference: the text the
call renders shares its start (the role header) and its end (the end-of-turn marker)
with it, and what lies between is the call.

A call is located by its sentinels (probe names, values and ids no template writes
itself): a JSON object equal to the probe's arguments, or holding the name and the
arguments, fixes the JSON styles; otherwise the argument keys and values are found one
by one (one marker per argument).  The markers around them follow from comparing the
pieces: what precedes the second call and not the first is the per-call opening, and so
on.  `TemplateSyntax` is the result; `DerivedParser` (derived_parser.py) reads it and
`grammars.derived_syntax` writes its grammar.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from responsekit.canonical.events import ToolCallDelta, ToolCallStart
from responsekit.parsing.base import Parser
from responsekit.prompting.templates import ChatTemplate, TemplateError

CallStyle = Literal["envelope", "name_json", "key_value"]

_USER = {"role": "user", "content": "Probe question?"}
_ANSWER = "Probe answer text."
_REFERENCE = "Zz reference."
_REASONING = "Probe reasoning text."
_NAMES = ("probe_fn_alpha", "probe_fn_beta")
_IDS = ("probe0001", "probe0002")  # 9 alphanumeric characters: Mistral templates insist
_ARGS: tuple[dict[str, Any], ...] = (
    {"probe_key_one": "probe value one", "probe_key_two": 4242},
    {"probe_key_one": "probe value two", "probe_key_two": 5353},
)
_MARKUP = "a <b> & c\nd"
_TOOLS = [
    {"type": "function", "function": {"name": name, "description": "A probe.", "parameters": {
        "type": "object", "properties": {"probe_key_one": {"type": "string"}, "probe_key_two": {"type": "integer"}},
    }}}
    for name in _NAMES
]  # fmt: skip


class DeriveError(ValueError):
    """The template's output syntax could not be derived (the reason says which part)."""


@dataclass(frozen=True, slots=True)
class CallShape:
    """How calls are written: `section_open` (call (`separator` call)*) `section_close`.

    Each call is `call_open` [ID `id_close`] then, by `style`:
    * `envelope`: one JSON object holding the name (`name_key`) and the arguments
      (`args_key`, as an object or, with `args_as_text`, as JSON text);
    * `name_json`: NAME `name_close` ARGUMENTS (a JSON object);
    * `key_value`: NAME `name_close` (`key_open` KEY `key_close` VALUE `value_close`)*,
      a value being bare text typed by the tool schema; a key's header may carry more
      after `key_name_end` (DSML's `" string="true`), which is not part of the name;
    then `call_close`.  Markers are stripped of surrounding whitespace: whitespace
    between them is not significant.  `trigger` starts calls in free text.
    """

    style: CallStyle
    section_open: str = ""
    section_close: str = ""
    call_open: str = ""
    call_close: str = ""
    separator: str = ""
    id_close: str = ""
    name_close: str = ""
    name_key: str = "name"
    args_key: str = "arguments"
    args_as_text: bool = False
    key_open: str = ""
    key_close: str = ""
    key_name_end: str = ""
    value_close: str = ""
    id_after_name: bool = False
    """The id follows the name: NAME `name_close` ID `id_close` (Mistral's `[CALL_ID]`)."""
    call_index: str = ""
    """The name is followed by this and the call's number (Kimi's `NAME:0`)."""
    value_wrap: tuple[str, str] = ("", "")
    """Around a value holding markup (`<![CDATA[` … `]]>`), dropped."""
    # The markers exactly as rendered (whitespace kept), for the grammar.
    rendered: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def trigger(self) -> str:
        """The text that starts calls (empty: a bare JSON envelope)."""
        return self.section_open or self.call_open


@dataclass(frozen=True, slots=True)
class TemplateSyntax:
    """What a template says about its model's output (see the module docstring)."""

    reasoning: tuple[str, str] | None = None
    """Reasoning's opening and closing markers; the opening is "" when only the
    generation prompt ever opens it."""
    thinking_open: bool = False
    """The generation prompt itself opens reasoning (the output starts inside it)."""
    content: tuple[str, str] = ("", "")
    """Markers around the answer (`[BEGIN FINAL RESPONSE]`), dropped from the text."""
    stops: tuple[str, ...] = ()
    """End-of-turn markers the template writes after the assistant's turn."""
    calls: CallShape | None = None
    problems: tuple[str, ...] = ()
    """What could not be derived, and why (empty when all of it was)."""
    sample_call: str = field(default="", compare=False)
    """The assistant turn the template renders for one probe call (up to its end of turn),
    "" when it renders none: `reads_sample_call` checks a hand-written format on it."""

    def describe(self) -> list[tuple[str, str]]:
        """(label, value) lines for `responsekit template inspect`."""
        lines = [
            ("reasoning", " … ".join(map(repr, self.reasoning)) if self.reasoning else "none"),
            ("prompt opens reasoning", "yes" if self.thinking_open else "no"),
            (
                "content markers",
                " … ".join(map(repr, self.content)) if any(self.content) else "none",
            ),
            ("end of turn", ", ".join(map(repr, self.stops)) or "none"),
        ]
        calls = self.calls
        if calls is None:
            lines.append(("tool calls", "none derived"))
        else:
            style = {"envelope": f"one JSON object, name in {calls.name_key!r}, arguments in {calls.args_key!r}"
                     + (" (as JSON text)" if calls.args_as_text else ""),
                     "name_json": "NAME, then the arguments as a JSON object",
                     "key_value": "NAME, then one marker pair per argument, bare values"}[calls.style]  # fmt: skip
            lines.append(("tool calls", style))
            for label, value in (
                ("section", _pair(calls.section_open, calls.section_close)),
                ("each call", _pair(calls.call_open, calls.call_close)),
                (
                    "call id ends",
                    repr(calls.id_close)
                    + (" (the id follows the name)" if calls.id_after_name else "")
                    if calls.id_close
                    else "",
                ),
                ("call number after", repr(calls.call_index) if calls.call_index else ""),
                ("name ends", repr(calls.name_close) if calls.style != "envelope" else ""),
                ("argument key", _pair(calls.key_open, calls.key_close)),
                ("key header extra", repr(calls.key_name_end) if calls.key_name_end else ""),
                ("argument value ends", repr(calls.value_close) if calls.value_close else ""),
                ("markup in a value", _pair(*calls.value_wrap)),
                ("separator", repr(calls.separator) if calls.separator else ""),
                ("trigger", repr(calls.trigger) if calls.trigger else "none (bare JSON)"),
            ):
                if value:
                    lines.append((label, value))
        lines.extend(("problem", problem) for problem in self.problems)
        return lines


def _pair(opening: str, closing: str) -> str:
    return f"{opening!r} … {closing!r}" if opening or closing else ""


def derive(template: ChatTemplate) -> TemplateSyntax:
    """The output syntax `template` renders (see the module docstring); never raises."""
    return _Analysis(template).run()


class _Analysis:
    def __init__(self, template: ChatTemplate) -> None:
        self.template = template
        self.problems: list[str] = []
        self.sample_call = ""
        self.content_open = ""

    def run(self) -> TemplateSyntax:
        reference = self._render(_message(content=_REFERENCE))
        answer = self._turn(_message(content=_ANSWER), reference)
        if answer is None or _ANSWER not in answer:
            return TemplateSyntax(problems=("the template does not render an assistant answer",))
        start = answer.index(_ANSWER)
        end_of_turn = answer[start + len(_ANSWER) :]
        # What follows an answer may run into the next turn (Command R renders its next
        # system prompt): the turn ends at its first marker.
        end = _MARKER.match(end_of_turn.strip())
        end_marker = end.group() if end else end_of_turn.strip()
        stops = tuple(
            dict.fromkeys(
                s for s in (end_marker, self.template.eos_token) if s and len(s) <= _LONGEST
            )
        )
        reasoning, thinking_open = self._reasoning(reference)
        content = (answer[:start].strip() or self.content_open, "")
        calls = None
        try:
            calls = self._calls(reference, end_of_turn)
        except DeriveError as exc:
            self.problems.append(f"tool calls: {exc}")
        if calls is not None:
            calls = _without_end_of_turn(calls, stops)
        if calls is not None and reasoning is not None and reasoning[0]:
            calls = _without_empty_reasoning(calls, reasoning)
        return TemplateSyntax(reasoning, thinking_open, content, stops, calls, tuple(self.problems),
                              self.sample_call)  # fmt: skip

    # --- rendering -----------------------------------------------------------------

    def _render(self, message: dict[str, Any], *, prompt: bool = False) -> str | None:
        if message.get("tool_calls") and self.template.text_arguments:  # as the server renders them
            message = {**message, "tool_calls": [
                {**call, "function": {**call["function"], "arguments": json.dumps(call["function"]["arguments"])}}
                for call in message["tool_calls"]]}  # fmt: skip
        messages = [_USER] if prompt else [_USER, message]
        try:
            return self.template.render(messages, _TOOLS, add_generation_prompt=prompt)
        except TemplateError:
            return None

    def _turn(self, message: dict[str, Any], reference: str | None) -> str | None:
        """The assistant turn of `message` as rendered: after what it shares with the
        reference answer's render (the history and the role header)."""
        rendered = self._render(message)
        if rendered is None or reference is None:
            return None
        return rendered[len(_snap_prefix(os.path.commonprefix([rendered, reference]))) :]

    # --- reasoning -----------------------------------------------------------------

    def _reasoning(self, reference: str | None) -> tuple[tuple[str, str] | None, bool]:
        prompt = (self._render({}, prompt=True) or "").rstrip()
        # Reasoning before an answer, or (Kimi-K2-Thinking keeps it only there) before a call.
        for key, follows in itertools.product(
            ("reasoning_content", "thinking", "reasoning"), (_ANSWER, _NAMES[0])
        ):
            fields = (
                {"content": _ANSWER}
                if follows == _ANSWER
                else {"content": "", "tool_calls": [_call(0)]}
            )
            message = _message(**fields, **{key: _REASONING})
            turn = self._turn(message, reference)
            if not (turn and _REASONING in turn and follows in turn):
                continue
            at = turn.index(_REASONING)
            closing = turn[at + len(_REASONING) : turn.index(follows)].strip()
            # `<|END_THINKING|><|START_TEXT|>`: the reasoning's end, then the answer's start.
            # (Solar: `<|end|><|begin|>assistant<|content|>`, a new message's header.)
            first = _MARKER.match(closing)
            if first and first.end() < len(closing):
                closing, rest = first.group(), closing[first.end() :].strip()
                if follows == _ANSWER:
                    self.content_open = rest
            if not closing:
                continue
            rendered = self._render(message) or ""
            before = rendered[: rendered.index(_REASONING)]
            opening = turn[:at].strip()
            if opening and opening[0] not in _OPENERS:
                # `analysis<|message|>` after a shared `<|channel|>`: the marker it started in.
                opening = _last_marker(before[: len(before) - len(turn[:at])]) + opening
            if not opening:
                # The reference answer renders an empty block too (`<think>\\n\\n</think>`):
                # the opening is the marker right before the reasoning, if it mirrors the
                # closing one (`<|START_THINKING|>` … `<|END_THINKING|>`).
                opening = _last_marker(before)
                if not _mirrors(opening, closing):
                    opening = ""
            # `<think></think>` ending the prompt (thinking off) opens nothing.
            opens = (not opening or prompt.endswith(opening)) and not prompt.endswith(closing)
            return (opening, closing), opens
        return self._reasoning_in_source(prompt)

    def _reasoning_in_source(self, prompt: str) -> tuple[tuple[str, str] | None, bool]:
        """Templates that drop reasoning from the history (DeepSeek R1, Nemotron Nano v2)
        still write its markers, in the generation prompt or to strip them: a `<think>`
        (`[THINK]`, `<seed:think>`…) tag whose closing tag the source also holds."""
        source = self.template.source
        for opening, closing in _reasoning_tags(source):
            if closing in source:
                return (opening, closing), prompt.endswith(opening)
        return None, False

    # --- calls ---------------------------------------------------------------------

    def _calls(self, reference: str | None, end_of_turn: str) -> CallShape:
        def rendered(*calls: int) -> str:
            message = _message(content="", tool_calls=[_call(i) for i in calls])
            turn = self._turn(message, reference)
            if turn is None:
                raise DeriveError("the template refuses an assistant turn with tool calls")
            if _NAMES[calls[0]] not in turn:
                raise DeriveError("the template does not write the call's name")
            suffix = _snap_suffix(_common_suffix(turn, end_of_turn))
            return turn[: len(turn) - len(suffix)] if suffix else turn

        one = self.sample_call = rendered(0)
        first = _locate(one, 0)
        call = first.call
        before, after = one[: first.start], one[first.end :]
        index = ""
        try:
            two = rendered(0, 1)
            second = _locate(two, 0)
            third = _locate(two, 1, after=second.end)
            between = two[second.end : third.start]
            index = _call_index(call.name_close, third.call.name_close)
        except DeriveError:  # one call per turn (GigaChat): each call is a section of its own
            between = after + before
        name_close = call.name_close
        if index:  # `functions.NAME:0<|tool_call_argument_begin|>` (Kimi): the index is no marker
            name_close = name_close[name_close.index(index) + len(index) + 1 :]
        call_close = _snap_prefix(os.path.commonprefix([after, between]))
        rest = between[len(call_close) :]
        call_open = _snap_suffix(_common_suffix(before, rest))
        separator = rest[: len(rest) - len(call_open)]
        wrap = self._value_wrap(call, reference) if call.style == "key_value" else ("", "")
        exact = {"section_open": before[: len(before) - len(call_open)], "section_close": after[len(call_close) :],
                 "call_open": call_open, "call_close": call_close, "separator": separator,
                 "id_close": call.id_close, "name_close": name_close, "key_open": call.key_open,
                 "key_close": call.key_close, "value_close": call.value_close}  # fmt: skip
        stripped = {key: value.strip() for key, value in exact.items()}
        if call.style != "envelope" and not (stripped["section_open"] or stripped["call_open"]):
            raise DeriveError("no marker starts a call (only a bare JSON object can go without one)")
        return replace(call, value_wrap=wrap, call_index=index, rendered=exact, **stripped)

    def _value_wrap(self, call: CallShape, reference: str | None) -> tuple[str, str]:
        """What wraps a bare value holding markup (MiniCPM's `<![CDATA[` … `]]>`)."""
        message = _message(content="", tool_calls=[{**_call(0), "function": {
            "name": _NAMES[0], "arguments": {**_ARGS[0], "probe_key_one": _MARKUP}}}])  # fmt: skip
        turn = self._turn(message, reference) or ""
        at = turn.find(_MARKUP)
        opened = turn.rfind(call.key_close, 0, at) if at != -1 else -1
        if opened == -1:
            return "", ""
        closed = turn.find(call.value_close, at)
        opening = turn[opened + len(call.key_close) : at]
        closing = turn[at + len(_MARKUP) : closed] if closed != -1 else ""
        return (opening, closing) if opening.strip() and closing.strip() else ("", "")


def reads_sample_call(parser: type[Parser], syntax: TemplateSyntax) -> bool:
    """`parser` reads the probe call the template renders as that call: a
    hand-written format picked by a marker in the template may not be the one it writes
    (Apriel 1.5 mentions `<tool_call>`, writes `<tool_calls>[…]</tool_calls>`).  True when
    the template renders no call: there is nothing to check."""
    if not syntax.sample_call:
        return True
    reader = parser(_TOOLS)
    events = [*reader.feed(syntax.sample_call), *reader.finish()]
    names = [event.name for event in events if isinstance(event, ToolCallStart)]
    arguments = "".join(event.arguments for event in events if isinstance(event, ToolCallDelta))
    try:
        return names == [_NAMES[0]] and json.loads(arguments) == _ARGS[0]
    except ValueError:
        return False


def _reasoning_tags(source: str) -> list[tuple[str, str]]:
    found = re.findall(
        r"<([\w:|]*(?:think|reason)[\w:|]*)>|\[(\w*THINK\w*)\]", source, re.IGNORECASE
    )
    return [
        (f"<{angle}>", f"</{angle}>") if angle else (f"[{square}]", f"[/{square}]")
        for angle, square in found
    ]


_LONGEST = 64
"""Longer end-of-turn texts are prose, no marker."""


def _without_end_of_turn(calls: CallShape, stops: tuple[str, ...]) -> CallShape:
    """The end-of-turn marker after the calls (`]</TOOLCALL><SPECIAL_12>`) ends the turn,
    not the section: the model may stop before it."""
    for key in ("section_close", "call_close"):
        exact = calls.rendered[key]
        for stop in stops:
            if exact.rstrip().endswith(stop) and exact.strip() != stop:
                cut = exact[: exact.rstrip().rfind(stop)]
                calls = replace(calls, **{key: cut.strip()}, rendered={**calls.rendered, key: cut})
                break
        if calls.rendered[key].strip():
            break
    return calls


def _without_empty_reasoning(calls: CallShape, reasoning: tuple[str, str]) -> CallShape:
    """Command R7B writes an empty reasoning block before its calls: that is reasoning,
    read as such, not part of the call markers."""
    empty = re.compile(r"\s*" + re.escape(reasoning[0]) + r"\s*" + re.escape(reasoning[1]) + r"\s*")
    key = "section_open" if calls.section_open else "call_open"
    rendered = empty.match(calls.rendered[key])
    if rendered is None:
        return calls
    stripped = calls.rendered[key][rendered.end() :]
    return replace(calls, **{key: stripped.strip()}, rendered={**calls.rendered, key: stripped})


def _last_marker(text: str) -> str:
    """The `<…>` or `[…]` marker `text` ends with (whitespace aside), or ""."""
    text = text.rstrip()
    if not text or text[-1] not in _ENDERS:
        return ""
    start = max(text.rfind("<"), text.rfind("["))
    return text[start:] if start != -1 else ""


def _mirrors(opening: str, closing: str) -> bool:
    """The two markers share a word (`think`, `THINKING`): a pair, not a role header."""
    words = set(re.findall(r"[a-z]{4,}", opening.lower())) - _ROLE_WORDS
    return bool(words & set(re.findall(r"[a-z]{4,}", closing.lower())))


_ROLE_WORDS = frozenset({"begin", "start", "assistant", "final", "model"})


def _message(**fields: Any) -> dict[str, Any]:
    return {"role": "assistant", **fields}


def _call(index: int) -> dict[str, Any]:
    return {"id": _IDS[index], "type": "function",
            "function": {"name": _NAMES[index], "arguments": _ARGS[index]}}  # fmt: skip


_OPENERS = "<["
_ENDERS = ">]"


def _snap_prefix(text: str) -> str:
    """`text` without a marker it ends inside of (`</invoke>\\n<` → `</invoke>\\n`): a
    common prefix of two renders may stop in the middle of two different markers."""
    at = max(text.rfind("<"), text.rfind("["))
    if at != -1 and not any(char in _ENDERS for char in text[at:]):
        return text[:at]
    return text


def _snap_suffix(text: str) -> str:
    """`text` without a marker it starts inside of (`_begin|>x` → `x`)."""
    return _snap_prefix(text[::-1].translate(_MIRROR))[::-1].translate(_MIRROR)


_MARKER = re.compile(r"<[^<>]*>|\[[^\[\]]*\]")
_MIRROR = str.maketrans("<>[]", "><][")


def _common_suffix(a: str, b: str) -> str:
    n = len(os.path.commonprefix([a[::-1], b[::-1]]))
    return a[len(a) - n :] if n else ""


@dataclass(slots=True)
class _Found:
    """Where one probe call lies in a rendered turn, and the markers inside it."""

    start: int  # where the call's id, name or envelope starts
    end: int  # after its arguments (and, key by key, after the last value's closing)
    call: CallShape
    """What the call itself shows of the shape, its markers as rendered (not stripped)."""


def _call_index(first: str, second: str) -> str:
    """What precedes a call's number after its name (`:` of Kimi's `NAME:0`, `NAME:1`), if
    the two calls' name closings differ by that number alone."""
    if first == second:
        return ""
    match = re.fullmatch(r"(.*?)0(.*)", first, re.DOTALL)
    if match is None or second != f"{match[1]}1{match[2]}" or not match[1].strip():
        return ""
    return match[1]


def _json_objects(text: str, start: int) -> list[tuple[int, int, Any]]:
    decoder = json.JSONDecoder()
    found = []
    at = text.find("{", start)
    while at != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        found.append((at, end, value))
        at = text.find("{", at + 1)
    return found


def _locate(text: str, index: int, *, after: int = 0) -> _Found:
    """Find probe call `index` in `text` from `after` on."""
    name, arguments, call_id = _NAMES[index], _ARGS[index], _IDS[index]
    name_at = text.find(name, after)
    if name_at == -1:
        raise DeriveError(f"call {index + 1}'s name is not written")
    # An envelope: a JSON object holding the name and the arguments.
    for start, end, value in _json_objects(text, after):
        if not isinstance(value, dict) or not start <= name_at < end:
            continue
        name_key = next((k for k, v in value.items() if v == name), None)
        args_key = next(
            (k for k, v in value.items() if v == arguments or _decodes_to(v, arguments)), None
        )
        if name_key and args_key:
            return _Found(start, end, CallShape("envelope", name_key=name_key, args_key=args_key,
                          args_as_text=isinstance(value[args_key], str)))  # fmt: skip
    id_at = text.rfind(call_id, after, name_at)
    start, id_close = name_at, ""
    if id_at != -1:  # `ID ID_CLOSE NAME`
        start, id_close = id_at, text[id_at + len(call_id) : name_at]
    name_end = name_at + len(name)
    for json_start, json_end, value in _json_objects(text, name_end):
        if value == arguments:
            name_close, id_after_name = text[name_end:json_start], False
            if not id_close and call_id in name_close:  # `NAME [CALL_ID] ID [ARGS]` (Mistral)
                name_close, id_close = name_close.split(call_id, 1)
                id_after_name = True
            return _Found(start, json_end, CallShape("name_json", id_close=id_close, name_close=name_close,
                          id_after_name=id_after_name))  # fmt: skip
    return _key_value(text, arguments, start, name_end, id_close)


def _key_value(
    text: str, arguments: dict[str, Any], start: int, name_end: int, id_close: str
) -> _Found:
    """Arguments written key by key: NAME_CLOSE (KEY_OPEN KEY KEY_CLOSE VALUE VALUE_CLOSE)*."""
    (key1, value1), (key2, value2) = ((key, str(value)) for key, value in arguments.items())
    spans = []
    cursor = name_end
    for key, value in ((key1, value1), (key2, value2)):
        key_at = text.find(key, cursor)
        value_at = text.find(value, key_at + len(key)) if key_at != -1 else -1
        if key_at == -1 or value_at == -1:
            raise DeriveError("the arguments are written neither as JSON nor key by key")
        spans.append((key_at, value_at))
        cursor = value_at + len(value)
    (key1_at, value1_at), (key2_at, value2_at) = spans
    head = text[name_end:key1_at]  # NAME_CLOSE KEY_OPEN
    gap = text[value1_at + len(value1) : key2_at]  # VALUE_CLOSE KEY_OPEN
    # `">` + `<param name="` and `</param>` + `<param name="` share the `>`: a marker
    # does not start inside another one.
    key_open = _snap_suffix(_common_suffix(head, gap))
    value_close = gap[: len(gap) - len(key_open)]
    if not key_open.strip() or not text.startswith(value_close, cursor):
        raise DeriveError("the arguments are written neither as JSON nor key by key")
    headers = (text[key1_at + len(key1) : value1_at], text[key2_at + len(key2) : value2_at])
    key_close = _common_suffix(*headers)
    if headers[0] != headers[1]:  # `" string="true">` / `…false">`: the marker is `">`
        key_close = key_close.lstrip(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
        )
    key_name_end = os.path.commonprefix(list(headers))
    if key_name_end == headers[0]:
        key_name_end = ""  # one header for both: nothing follows the key's name
    return _Found(start, cursor + len(value_close), CallShape("key_value", id_close=id_close,
                  name_close=head[: len(head) - len(key_open)], key_open=key_open, key_close=key_close,
                  key_name_end=key_name_end.strip(), value_close=value_close))  # fmt: skip


def _decodes_to(value: Any, arguments: dict[str, Any]) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return json.loads(value) == arguments
    except ValueError:
        return False
