"""Chat templates: the model's own Jinja template turns a conversation into its prompt.

A template inside a model file is untrusted input, so it runs in Jinja's
`SandboxedEnvironment` (no access to Python internals) with the size of `*`/`**`
results bounded.  The variables and helpers follow Hugging Face's `apply_chat_template`
(`messages`, `tools`, `add_generation_prompt`, `raise_exception`, `strftime_now`,
`tojson` with its options, `bos_token`/`eos_token`), so templates written for
transformers render here unchanged.
"""

from __future__ import annotations

import json
import logging
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, ClassVar

import jinja2
from jinja2 import meta, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import SandboxedEnvironment

from ..canonical.conversation import GenerationRequest, ImagePart, Message
from .builtin_templates import BUILTIN_TEMPLATES, choose_template
from .effort import DEFAULT_LEVELS, LEVELS, accepted
from .gguf_metadata import GGUFError, read_metadata

log = logging.getLogger(__name__)

MAX_REPEAT = 1_000_000
"""The longest string or list `*` may build, and the largest result `**` may compute."""

_END_MARKERS = (
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "<|endoftext|>",
    "<|END_OF_TURN_TOKEN|>", "<|eot|>", "<｜end▁of▁sentence｜>", "<|end|>", "<|return|>", "<|call|>",
    "</assistant>", "<sep>",
)  # fmt: skip
"""End-of-turn markers; those a template writes become stop sequences (`</assistant>`:
poolside Laguna; `<sep>`: Reka Edge, found by tests/test_template_calls.py)."""
_HARMONY_ENDS = ("<|return|>", "<|call|>")
"""gpt-oss writes `<|end|>` between its channels: only these end its turn."""


class TemplateError(Exception):
    """The template refused the conversation (`raise_exception`) or failed to render.

    The message is the template's own, so it reaches the client as it was written.
    """


class _Sandbox(SandboxedEnvironment):
    """The sandbox, with `*` and `**` bounded (`'a' * 10**10` would exhaust memory)."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: jinja2.runtime.Context, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            if isinstance(right, (int, float)) and isinstance(left, (int, float)) and abs(right) > 64 and abs(left) > 1:
                raise TemplateError("the chat template computes a power too large")
            return operator.pow(left, right)
        for sequence, count in ((left, right), (right, left)):
            sized = isinstance(sequence, (str, list, tuple)) and isinstance(count, int)
            if sized and len(sequence) * count > MAX_REPEAT:
                raise TemplateError("the chat template builds a sequence too large")
        return operator.mul(left, right)


class _Generation(Extension):
    """`{% generation %}…{% endgeneration %}` (transformers marks assistant text with it for
    training masks): rendered as its body."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


class _Undefined(jinja2.Undefined):
    """A missing value concatenates as nothing (`'): ' + param.description` for a parameter
    without one), as llama.cpp's template engine does; everything else stays undefined."""

    def __add__(self, other: Any) -> Any:
        return other

    __radd__ = __add__


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Sequence[str] | None = None,
    sort_keys: bool = False,
) -> str:
    """Hugging Face's `tojson`: plain `json.dumps` (Jinja's own escapes HTML characters)."""
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=tuple(separators) if separators else None,  # type: ignore[arg-type]
        sort_keys=sort_keys,
        default=_json_default,
    )


def _json_default(value: Any) -> Any:
    """What `map`/`select` return (generators) serializes as the list it yields."""
    if isinstance(value, Iterator):
        return list(value)
    if isinstance(value, jinja2.Undefined):
        return None
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> SandboxedEnvironment:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, _Generation], undefined=_Undefined)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()


@lru_cache(maxsize=128)
def _compile(source: str) -> jinja2.Template:
    """One compiled template per source, whatever reads it (a model's template, the parsers and
    grammars derived from it): a long one takes Jinja a tenth of a second to compile."""
    return _ENV.from_string(source)


@dataclass
class ChatTemplate:
    """A model's chat template with the special tokens it refers to."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    extra_stops: tuple[str, ...] = field(default=())
    """Further end-of-generation texts the tokenizer knows (e.g. its EOT token)."""
    fallback: str | None = None
    """The built-in template's name when the model file had none (`builtin_templates.py`), else None."""
    _compiled: jinja2.Template | None = field(default=None, repr=False, compare=False)
    _text_arguments: bool | None = field(default=None, repr=False, compare=False)

    def _template(self) -> jinja2.Template:
        if self._compiled is None:
            try:
                self._compiled = _compile(self.source)
            except jinja2.TemplateSyntaxError as exc:
                raise TemplateError(f"the chat template does not parse: {exc}") from None
        return self._compiled

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = True,
        **variables: Any,
    ) -> str:
        """The prompt for `messages` (Hugging Face shape); TemplateError if the template refuses."""
        try:
            return self._template().render(
                messages=messages,
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **variables,
            )
        except TemplateError:
            raise
        except jinja2.exceptions.SecurityError as exc:
            raise TemplateError(f"the chat template tried an unsafe operation: {exc}") from None
        except Exception as exc:  # noqa: BLE001  (any template bug — a None concatenated, a missing key… — is the request's 400)
            raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None

    def render_request(self, request: GenerationRequest, messages: list[dict[str, Any]] | None = None) -> str:
        """The prompt for a canonical request (its tools unless `tool_choice` is none), with
        `messages` in place of its conversation when given (already in Hugging Face's shape)."""
        tools = chat_tools(request)
        if messages is None:
            messages = chat_messages(request.messages, text_arguments=self.text_arguments)
        return self.render(messages, tools, **template_options(request, self.efforts), **_legacy_variables(tools))

    @property
    def text_arguments(self) -> bool:
        """Whether the template wants call arguments as JSON text rather than objects.

        Most templates `tojson` or iterate an object; a few concatenate the text (and
        would print an object as a Python dict).  Decided once, by rendering a probe call
        both ways, as llama.cpp does.
        """
        if self._text_arguments is None:
            self._text_arguments = self._probe_text_arguments()
        return self._text_arguments

    def _probe_text_arguments(self) -> bool:
        def probe(arguments: Any) -> str | None:
            call = {"id": "call_probe", "type": "function", "function": {"name": "probe", "arguments": arguments}}
            messages = [
                {"role": "user", "content": "probe"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_probe", "name": "probe", "content": "probed"},
            ]
            try:
                return self.render(messages, [{"type": "function", "function": {"name": "probe", "parameters": {}}}])
            except TemplateError:
                return None

        as_object = probe({"probe_key": "probe_value"})
        if as_object is None:
            return probe('{"probe_key": "probe_value"}') is not None
        return "{'probe_key'" in as_object

    @cached_property
    def efforts(self) -> tuple[str, ...]:
        """The reasoning efforts the template accepts: the levels a guard such as Hunyuan's
        `reasoning_effort not in ['high', 'low', 'no_think']` lets through (it refuses the rest),
        else `DEFAULT_LEVELS` (gpt-oss's writes any level into its prompt)."""
        try:
            tree = _ENV.parse(self.source)
        except jinja2.TemplateSyntaxError:
            return DEFAULT_LEVELS
        allowed = {
            item.value
            for compare in tree.find_all(nodes.Compare)
            if isinstance(compare.expr, nodes.Name) and compare.expr.name == "reasoning_effort"
            for operand in compare.ops
            if operand.op == "notin" and isinstance(operand.expr, nodes.List | nodes.Tuple)
            for item in operand.expr.items
            if isinstance(item, nodes.Const)
        }
        return tuple(level for level in LEVELS if level in allowed) or DEFAULT_LEVELS

    @cached_property
    def reads_tools(self) -> bool:
        """Whether the template reads `tools` (or FireFunction's `functions`) at all: one that
        never does cannot show a model its tools (Gemma 3, base models: `backends/generic_tools.py`)."""
        try:
            read = meta.find_undeclared_variables(_ENV.parse(self.source))
        except jinja2.TemplateSyntaxError:
            return False
        return "tools" in read or "functions" in read

    @cached_property
    def takes_system(self) -> bool:
        """Whether a system message reaches the prompt (Gemma 2 refuses one, some templates
        drop it), by a probe render as llama.cpp's capability probe does."""
        needle = "<probe system text>"
        try:
            rendered = self.render([{"role": "system", "content": needle}, {"role": "user", "content": "probe"}])
        except TemplateError:
            return False
        return needle in rendered

    @cached_property
    def stops(self) -> tuple[str, ...]:
        """Texts that end the model's turn: the EOS token and the end markers the template writes."""
        harmony = "<|channel|>" in self.source
        markers = _HARMONY_ENDS if harmony else _END_MARKERS
        found = [marker for marker in markers if marker in self.source]
        candidates = [*found, *self.extra_stops]
        if self.eos_token and not harmony:
            candidates.insert(0, self.eos_token)
        return tuple(dict.fromkeys(stop for stop in candidates if stop))


def template_options(request: GenerationRequest, levels: tuple[str, ...] = DEFAULT_LEVELS) -> dict[str, Any]:
    """`enable_thinking` and `reasoning_effort` from `reasoning.effort`, when it is given
    (otherwise the template's own default applies), the effort as the nearest of `levels`."""
    effort = request.reasoning_effort
    if effort is None:
        return {}
    return {
        "enable_thinking": effort != "none",
        "reasoning_effort": accepted(effort, levels),
    }


def chat_tools(request: GenerationRequest) -> list[dict[str, Any]]:
    if request.tool_choice == "none":
        return []
    return [
        {"type": "function", "function": {
            "name": tool.name,
            **({"description": tool.description} if tool.description else {}),
            "parameters": tool.parameters or {"type": "object", "properties": {}},
        }}
        for tool in request.tools
    ]  # fmt: skip


def _legacy_variables(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Variables some templates read instead of `tools` (FireFunction v2's `functions`,
    the JSON of the tools, and `datetime`), as llama.cpp passes them."""
    return {
        "functions": json.dumps(tools, indent=2) if tools else "",
        "datetime": datetime.now().strftime("%b %d %Y %H:%M:%S GMT"),
    }


def chat_messages(messages: Sequence[Message], *, text_arguments: bool = False) -> list[dict[str, Any]]:
    """The conversation in Hugging Face's shape.

    System and developer text is merged into one leading system message (many templates
    refuse a second one); tool-call arguments are objects, as templates iterate or
    `tojson` them; earlier reasoning is `reasoning_content` (and `thinking` for gpt-oss);
    tool results carry the id and the name of their call.
    """
    for message in messages:
        for part in message.content:
            if isinstance(part, ImagePart):
                raise TemplateError("This model reads text only: images cannot be given to it.")
    out: list[dict[str, Any]] = []
    system = [m.text() for m in messages if m.role in ("system", "developer")]
    if system:
        out.append({"role": "system", "content": "\n\n".join(system)})
    names: dict[str, str] = {}
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": message.text()})
        elif message.role == "assistant":
            turn: dict[str, Any] = {"role": "assistant", "content": message.text()}
            if message.reasoning:
                turn["reasoning_content"] = turn["thinking"] = message.reasoning
            if message.tool_calls:
                turn["tool_calls"] = [
                    {"id": call.id, "type": "function",
                     "function": {"name": call.name,
                                  "arguments": call.arguments if text_arguments else _arguments(call.arguments)}}
                    for call in message.tool_calls
                ]  # fmt: skip
                names.update((call.id, call.name) for call in message.tool_calls)
            out.append(turn)
        elif message.role == "tool":
            call_id = message.tool_call_id or ""
            out.append({"role": "tool", "tool_call_id": call_id, "name": names.get(call_id, ""),
                        "content": message.text()})  # fmt: skip
    return out


def _arguments(text: str) -> Any:
    """A call's arguments as an object; text that is no JSON object stays text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


# --- where templates come from --------------------------------------------------------


def from_tokenizer_config(path: Path, *, tools: bool = True) -> ChatTemplate:
    """The template of a Hugging Face `tokenizer_config.json` (its `tool_use` variant if it
    has named ones and tools are wanted)."""
    config = json.loads(path.read_text())
    source = config.get("chat_template")
    if isinstance(source, list):
        named = {entry.get("name"): entry.get("template") for entry in source if isinstance(entry, dict)}
        source = named.get("tool_use") if tools and "tool_use" in named else named.get("default")
    if not isinstance(source, str):
        raise TemplateError(f"{path} has no chat_template")
    return ChatTemplate(source, bos_token=_token_text(config.get("bos_token")),
                        eos_token=_token_text(config.get("eos_token")))  # fmt: skip


def _token_text(token: Any) -> str:
    if isinstance(token, dict):
        return str(token.get("content") or "")
    return token if isinstance(token, str) else ""


def from_gguf(path: Path) -> ChatTemplate:
    """The template in a GGUF file's metadata, with its BOS/EOS/EOT tokens' texts; a
    built-in one chosen from its architecture and vocabulary if it has none (`builtin_templates.py`)."""
    try:
        metadata = read_metadata(path)
    except GGUFError as exc:
        raise TemplateError(str(exc)) from None
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        tokens = []

    def string(key: str) -> str:
        value = metadata.get(key)
        return value if isinstance(value, str) else ""

    def text(key: str) -> str:
        index = metadata.get(key)
        if isinstance(index, int) and 0 <= index < len(tokens):
            return str(tokens[index])
        return ""

    source, fallback = string("tokenizer.chat_template"), None
    if not source.strip():
        architecture, name = string("general.architecture"), string("general.name")
        fallback = choose_template(architecture, frozenset(tokens), tokenizer=string("tokenizer.ggml.model"),
                                   pre=string("tokenizer.ggml.pre"), name=name)  # fmt: skip
        source = BUILTIN_TEMPLATES[fallback]
        log.info("%s (%s, architecture %s) has no chat template in its metadata: using the built-in %r "
                 "template chosen from its architecture and special tokens; --chat-template FILE "
                 "(`chat_template` in the configuration) replaces it", path.name, name or "unnamed",
                 architecture or "unknown", fallback)  # fmt: skip
    return ChatTemplate(source, bos_token=text("tokenizer.ggml.bos_token_id"),
                        eos_token=text("tokenizer.ggml.eos_token_id"),
                        extra_stops=tuple(filter(None, (text("tokenizer.ggml.eot_token_id"),
                                                        text("tokenizer.ggml.eom_token_id")))),
                        fallback=fallback)  # fmt: skip


def load_template(path: Path) -> ChatTemplate:
    """A template from a file: a GGUF model, a `tokenizer_config.json`, or Jinja source."""
    if not path.is_file():
        raise TemplateError(f"chat template file not found: {path}")
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic == b"GGUF":
        return from_gguf(path)
    if path.suffix == ".json":
        return from_tokenizer_config(path)
    return ChatTemplate(path.read_text())
