"""What the raw-completion and in-process backends share: from a canonical request to a
prompt, a parser, stop texts and a grammar, and from raw text pieces to canonical events.

Both render the model's chat template themselves, so the rendered prompt decides whether
the output starts inside reasoning (`Parser.thinking_open_in`), and both hand the text
they get to the chat backend's `ChunkTranslator` (as `content` deltas), so parsing,
call numbering, finish reasons and reasoning modes behave exactly as for chat upstreams.
A template without tool syntax gets llama.cpp's generic protocol (`generic_tools`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..canonical.conversation import GenerationRequest, NamedToolChoice
from ..canonical.errors import APIError
from ..canonical.events import Error
from ..config import ReasoningMode
from ..parsing import Parser, detect_format, get_parser
from ..prompting import grammars
from ..prompting.derive import TemplateSyntax, derive, reads_sample_call
from ..prompting.derived_parser import NAME as DERIVED
from ..prompting.derived_parser import derived_parser
from ..prompting.effort import budget
from ..prompting.templates import ChatTemplate, TemplateError
from . import generic_tools
from .chat_upstream import ChunkTranslator, OutputParsing
from .thinking_budget import ThinkingBudget

log = logging.getLogger(__name__)

REASONING_ONLY = "think_tags"
"""The hand-written format that reads reasoning and no calls: where the template writes
calls, the derived parser reads both."""


@dataclass(slots=True)
class Plan:
    """One request, ready for an engine that takes text."""

    prompt: str
    stops: list[str]
    grammar: grammars.Grammar | None
    translator: ChunkTranslator
    thinking: ThinkingBudget | None = None
    """Where the model reasons and a budget applies: where its reasoning is ended."""


class ModelPrompting:
    """A model's chat template and output format, and how requests become prompts."""

    def __init__(self, name: str, template: ChatTemplate, parser: str | None = None,
                 reasoning_mode: ReasoningMode = "separate") -> None:  # fmt: skip
        self.name = name
        self.template = template
        self.generic_tools = generic_tools.applies(template, parser)
        """Whether tool calls go through the generic JSON protocol (a template without tool syntax)."""
        self.derived: TemplateSyntax | None = None
        """The syntax derived from the template, when its parser is the derived one."""
        self.format, self.parser, why = self._choose(parser)
        self.why = why
        """Why this parser was chosen (`responsekit template inspect` prints it too)."""
        self.call_syntax = grammars.derived_syntax(self.derived) if self.derived is not None else \
            grammars.SYNTAXES.get(self.format or "")
        """How calls are written, for a grammar: the format's, or the derived one's."""
        if self.parser is not None:
            log.info("model %s: output parsed as %s: %s", name, self.format, why)
        self.reasoning_mode: ReasoningMode = reasoning_mode
        self._warned: set[str] = set()
        if self.generic_tools:
            log.info("model %s: its chat template has no tool syntax; tools are described in the system message "
                     "and calls written as JSON under a grammar (llama.cpp's generic format)", name)  # fmt: skip
        if self.parser is None and not self.generic_tools:
            log.warning("model %s: no output format recognised in its chat template (%s); its text is passed as is",
                        name, why)  # fmt: skip

    def _choose(self, configured: str | None) -> tuple[str | None, type[Parser] | None, str]:
        """The output format, its parser and why (docs/parsing.md, Templates no format knows: the derived parser, Selection): a configured format;
        else a hand-written format whose markers the template holds (it carries known
        quirks), if it reads the call the template itself renders; else the parser derived
        from the template when the analysis found reasoning or calls; else the format the
        model's name suggests."""
        if configured == DERIVED:
            return self._derived("`parser = \"template\"` asks for the parser derived from the chat template")
        if configured and configured != "auto":
            return configured, get_parser(configured), "configured"
        if self.generic_tools:
            # The template writes no call syntax: a format the model's name suggests (`pythonic`
            # for gemma-3) is no more than a guess, and would read calls into tool-less answers.
            return None, None, "the template reads no tools: calls go through the generic JSON protocol"
        found = detect_format(template=self.template.source)
        syntax = derive(self.template)  # once per model, at load
        if found and found != REASONING_ONLY:
            if reads_sample_call(get_parser(found), syntax) or syntax.calls is None:
                return found, get_parser(found), "its markers occur in the chat template"
            return self._derived(f"derived from the chat template: `{found}`'s markers occur in it, but `{found}` "
                                 "does not read the call the template renders", syntax)  # fmt: skip
        if syntax.calls is not None or (found is None and syntax.reasoning is not None):
            return self._derived("derived from the chat template, which no hand-written format matches"
                                 if found is None else "derived from the chat template, whose calls `think_tags` "
                                 "would pass as text", syntax)  # fmt: skip
        if found:
            return found, get_parser(found), "its markers occur in the chat template"
        found = detect_format(model=self.name)
        if found:
            return found, get_parser(found), "the model's name suggests it"
        return None, None, "the template analysis found neither reasoning nor calls"

    def _derived(self, why: str, syntax: TemplateSyntax | None = None) -> tuple[str, type[Parser], str]:
        syntax = self.derived = syntax or derive(self.template)
        problems = "; ".join(syntax.problems)
        return DERIVED, derived_parser(syntax), f"{why}{f' ({problems})' if problems else ''}"

    def prompt_or_raise(self, request: GenerationRequest) -> str:
        """The rendered prompt, or a 400 (for callers that answer a request themselves)."""
        plan = self.plan(request)
        if isinstance(plan, Error):
            raise APIError(plan.status, plan.message, code="invalid_request_error")
        return plan.prompt

    def plan(self, request: GenerationRequest) -> Plan | Error:
        """The prompt and its companions, or a 400 when the template refuses the conversation."""
        try:
            if self.generic_tools:
                prompt = self.template.render_request(request, generic_tools.messages(request, self.template))
            else:
                prompt = self.template.render_request(request)
        except TemplateError as exc:
            return Error("invalid_request_error", str(exc), 400)
        # A lone surrogate (escaped in a request's JSON) has no UTF-8 form: it becomes "?",
        # as no tokenizer could take it.
        prompt = prompt.encode("utf-8", "replace").decode("utf-8")
        stops = list(dict.fromkeys([*self.template.stops, *(request.stop or ())]))
        if self.generic_tools and generic_tools.wanted(request):
            parsing = OutputParsing(get_parser(generic_tools.FORMAT), False, self.reasoning_mode)
            return Plan(prompt, stops, self._generic_grammar(request), ChunkTranslator(request, parsing))
        thinking_open = self.parser.thinking_open_in(prompt) if self.parser else False
        translator = ChunkTranslator(request, OutputParsing(self.parser, thinking_open, self.reasoning_mode))
        return Plan(prompt, stops, self._grammar(request, thinking_open), translator, self._budget(request, thinking_open))

    def _budget(self, request: GenerationRequest, thinking_open: bool) -> ThinkingBudget | None:
        """The request's thinking budget, closed by the template's end-of-reasoning marker (and what
        follows it before the answer: gpt-oss's `<|start|>assistant`)."""
        tokens = budget(request.reasoning_effort, request.reasoning_budget, request.max_output_tokens)
        tags = self._reasoning_tags()
        if tokens is None or tags is None or not self._writes_reasoning():
            return None
        after = getattr(self.call_syntax, "after_reasoning", "")
        return ThinkingBudget(tags[0], tags[1] + after, tokens, inside=thinking_open)

    def _generic_grammar(self, request: GenerationRequest) -> grammars.Grammar | None:
        """The whole output one JSON object: the calls, or with `auto` the calls or the answer
        (of the `text.format` schema, when one is asked for)."""
        if not grammars.available():
            self._warn_once("converter", "constrained decoding needs the `llama` extra (llama-cpp-python); "
                            "requests are generated unconstrained")  # fmt: skip
            return None
        choice = request.tool_choice
        tools = [tool for tool in request.tools if not isinstance(choice, NamedToolChoice) or tool.name == choice.name]
        answer = None
        if choice == "auto":
            answer = _schema(request.response_format) or {"type": "object" if request.response_format else "string"}
        if not tools:
            return None
        try:
            return grammars.generic_json(tools, parallel=request.parallel_tool_calls is not False, answer=answer)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            log.warning("model %s: no grammar for this request's schemas (%s); generating unconstrained", self.name, exc)
            return None

    def _grammar(self, request: GenerationRequest, thinking_open: bool) -> grammars.Grammar | None:
        choice = request.tool_choice
        tools = request.tools if request.tools and choice != "none" else []
        wants = "json" if request.response_format else "calls" if tools and choice != "auto" else "lazy" if tools else None
        if wants is None:
            return None
        if not grammars.available():
            self._warn_once("converter", "constrained decoding needs the `llama` extra (llama-cpp-python); "
                            "requests are generated unconstrained")  # fmt: skip
            return None
        may_think = request.reasoning_effort != "none" and self._writes_reasoning()
        if isinstance(choice, NamedToolChoice):
            tools = [tool for tool in tools if tool.name == choice.name]
        try:
            if wants == "json":
                return grammars.json_output(
                    _schema(request.response_format), reasoning=self._reasoning_tags(),
                    thinking_open=thinking_open, may_think=may_think,
                )  # fmt: skip
            parallel = request.parallel_tool_calls is not False
            if wants == "calls":
                grammar = grammars.forced_calls(self.call_syntax, tools, parallel=parallel,
                                                thinking_open=thinking_open, may_think=may_think)  # fmt: skip
            else:
                grammar = grammars.lazy_calls(self.call_syntax, tools, parallel=parallel, thinking_open=thinking_open)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            log.warning("model %s: no grammar for this request's schemas (%s); generating unconstrained", self.name, exc)
            return None
        if grammar is None:
            self._warn_once(wants, f"no {'lazy ' if wants == 'lazy' else ''}call grammar for the format "
                            f"{self.format}; tool calls are generated unconstrained")  # fmt: skip
        return grammar

    def _reasoning_tags(self) -> tuple[str, str] | None:
        if self.derived is not None:
            reasoning = self.derived.reasoning
            return reasoning if reasoning is not None and reasoning[0] else None
        syntax = grammars.SYNTAXES.get(self.format or "")
        return syntax.reasoning if syntax else ("<think>", "</think>")

    def _writes_reasoning(self) -> bool:
        if self.derived is not None:  # its markers may be built by the template (Hunyuan's `<think{}>`)
            return self._reasoning_tags() is not None
        tags = self._reasoning_tags()
        return tags is not None and tags[0] in self.template.source

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("model %s: %s", self.name, message)


def _schema(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema of a `response_format` (None for json_object: any object)."""
    if not response_format or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema") or {}
    schema = spec.get("schema")
    return schema if isinstance(schema, dict) else None


def text_chunk(text: str) -> dict[str, Any]:
    """A raw text piece in the chat-chunk shape `ChunkTranslator` reads."""
    return {"choices": [{"index": 0, "delta": {"content": text}}]}


def final_chunk(finish_reason: str, prompt_tokens: int | None, completion_tokens: int | None,
                cached_tokens: int = 0) -> dict[str, Any]:  # fmt: skip
    chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}]}
    if prompt_tokens is not None and completion_tokens is not None:
        chunk["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        }
    return chunk
