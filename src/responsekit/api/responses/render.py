"""Canonical events -> the Responses API event sequence, and the Response object they fold into.

One renderer serves both modes: a stream sends every event it returns; a non-streaming
request keeps only the final Response. The event order is the one of OpenAI's API:
item added -> part added -> deltas -> done events, ids stable throughout, one terminal
event (`response.completed`, `.incomplete` or `.failed`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jiter

from ...canonical.errors import error_type_for_status
from ...canonical.events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    ReasoningSummaryDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    Usage,
)
from ...canonical.ids import new_id
from ...canonical.server_tools import CITATION, BadInput, action_of, python_code, shell_action
from ...canonical.toolset import CUSTOM_INPUT, ToolSet
from ...orchestration import client_tools

log = logging.getLogger(__name__)

_CITATION_LONGEST = 6
"""A marker is at most `[9999]`: a part's last characters may still start one."""

# The `response.error.code` values of the API; context_length_exceeded is sent by OpenAI
# (Codex acts on it) although the SDK's enum does not list it.
_RESPONSE_ERROR_CODES = {"server_error", "rate_limit_exceeded", "context_length_exceeded", "invalid_prompt"}


@dataclass(slots=True)
class _Message:
    id: str
    output_index: int
    parts: list[dict[str, Any]] = field(default_factory=list)
    kind: str | None = None
    """`output_text` or `refusal`: the part being streamed, if any."""
    buffer: list[str] = field(default_factory=list)
    length: int = 0
    """Characters of the current part so far."""
    annotations: list[dict[str, Any]] = field(default_factory=list)
    unscanned: str = ""
    """The end of the part that may still begin a citation marker."""


@dataclass(slots=True)
class _Reasoning:
    id: str
    output_index: int
    buffer: list[str] = field(default_factory=list)
    summary: list[str] | None = None
    """The summary being streamed, once a summarizer started one."""


@dataclass(slots=True)
class _Call:
    item: dict[str, Any]
    output_index: int
    kind: str
    """`function`, `custom`, `builtin`, `file_search`, `web_search`, `mcp`, `mcp_approval` or
    `code_execution`."""
    buffer: list[str] = field(default_factory=list)
    streamed_input: str = ""
    """For custom tools: the part of the `input` string already sent as deltas."""
    function: str = ""
    """The tool's own name (a web call's says which action it is; a code call's, `python` or `shell`)."""
    commands: list[str] = field(default_factory=list)
    """A hosted shell call's command lines as far as streamed."""


class ResponseRenderer:
    def __init__(
        self,
        response: dict[str, Any],
        toolset: ToolSet,
        first_sequence: int = 0,
        seal: Callable[[str], str] | None = None,
        search_results: bool = False,
        web_sources: bool = False,
        code_outputs: bool = False,
    ) -> None:
        """`seal`, when given, seals each reasoning text into its item's `encrypted_content`;
        `search_results` puts file_search results in their items, `web_sources` a web search's
        sources in its action, `code_outputs` a code interpreter call's logs and images in its
        `outputs` (`include`)."""
        self.response = response
        self._toolset = toolset
        self._seal = seal
        self._search_results = search_results
        self._web_sources = web_sources
        self._code_outputs = code_outputs
        self._written: list[dict[str, Any]] = []
        """Files the code calls of this response wrote: the answer cites them (`_file_citations`)."""
        self._waiting: dict[int, _Call] = {}
        """Server-run calls whose arguments are complete, waiting for their result."""
        self._citations: dict[int, dict[str, Any]] = {}
        """Search results the answer may cite as `[n]`, by n."""
        self.reads: dict[str, str] = {}
        """Item id -> what the model read of that file or web search, which its item does not keep
        (stored beside it, for the model of a later turn)."""
        self._sequence = first_sequence
        self._ready: list[dict[str, Any]] = []
        self._items: list[dict[str, Any] | None] = []
        self._message: _Message | None = None
        self._reasoning: _Reasoning | None = None
        self._calls: dict[int, _Call] = {}
        self._usage: Usage | None = None
        self._broken: Error | None = None
        """Set when the model ended a function call whose arguments are not JSON: the response fails
        (with the call, `incomplete`, in its output)."""
        self.finished = False
        self.error: Error | None = None

    # --- public -----------------------------------------------------------------------

    def start(self) -> list[dict[str, Any]]:
        """`response.created` (queued for a background response), `response.in_progress`, ready items."""
        created = self._event("response.created", response=self._snapshot())
        self.response["status"] = "in_progress"
        out = [created, self._event("response.in_progress", response=self._snapshot())]
        for item in self._ready:
            self._ready_item(out, item)
        return out

    def _ready_item(self, out: list[dict[str, Any]], item: dict[str, Any]) -> None:
        """An item already complete, with the lifecycle events of its type."""
        index = self._reserve()
        where = {"item_id": item["id"], "output_index": index}
        kind = item["type"]
        if kind == "mcp_list_tools":
            out.append(self._event("response.output_item.added", output_index=index, item={**item, "tools": []}))
            out.append(self._event("response.mcp_list_tools.in_progress", **where))
            ending = "failed" if item.get("error") else "completed"
            out.append(self._event(f"response.mcp_list_tools.{ending}", **where))
        elif kind == "mcp_call":
            added = {**item, "status": "in_progress", "output": None, "error": None}
            out.append(self._event("response.output_item.added", output_index=index, item=added))
            out.append(self._event("response.mcp_call.in_progress", **where))
            out.append(self._event("response.mcp_call_arguments.delta", **where, delta=item["arguments"]))
            out.append(self._event("response.mcp_call_arguments.done", **where, arguments=item["arguments"]))
            out.append(self._event(f"response.mcp_call.{'failed' if item.get('error') else 'completed'}", **where))
        else:
            out.append(self._event("response.output_item.added", output_index=index, item=item))
        self._done(out, index, item)

    def resume(self, done: dict[int, dict[str, Any]]) -> None:
        """Take over a stream another runner began: the items it announced done (by output
        index) stay in the output of whatever ends the response."""
        self._items = [done.get(index) for index in range(max(done, default=-1) + 1)]

    def add_ready_item(self, item: dict[str, Any]) -> None:
        """An item complete before generation starts (a compaction item): it opens the output."""
        self._ready.append(item)

    def feed(self, event: Event) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if isinstance(event, TextDelta):
            self._content(out, "output_text", event.text)
        elif isinstance(event, ReasoningDelta):
            self._reasoning_delta(out, event.text)
        elif isinstance(event, ToolCallDelta):
            self._call_delta(out, event)
        elif isinstance(event, ToolCallStart):
            self._call_start(out, event)
        elif isinstance(event, ToolCallEnd):
            self._call_end(out, event.index, "completed")
            if self._broken is not None:
                self._fail(out, self._broken)
        elif isinstance(event, RefusalDelta):
            self._content(out, "refusal", event.text)
        elif isinstance(event, ReasoningSummaryDelta):
            self._summary_delta(out, event.text)
        elif isinstance(event, Usage):
            self._usage = event if self._usage is None else _added(self._usage, event)
        elif isinstance(event, ToolResult):
            self._tool_result(out, event)
        elif isinstance(event, Finish):
            self._finish(out, event)
        elif isinstance(event, Error):
            self._fail(out, event)
        return out

    # --- messages and reasoning -------------------------------------------------------

    def _content(self, out: list[dict[str, Any]], kind: str, delta: str) -> None:
        message = self._message
        if message is None:
            self._close_reasoning(out, "completed")
            message = self._message = _Message(new_id("msg"), self._reserve())
            out.append(self._event(
                "response.output_item.added",
                output_index=message.output_index,
                item={"id": message.id, "type": "message", "status": "in_progress", "role": "assistant", "content": []},
            ))
        if message.kind != kind:
            self._close_part(out, message)
            message.kind = kind
            part = (
                {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                if kind == "output_text"
                else {"type": "refusal", "refusal": ""}
            )
            out.append(self._event(
                "response.content_part.added",
                item_id=message.id, output_index=message.output_index,
                content_index=len(message.parts), part=part,
            ))
        message.buffer.append(delta)
        if kind == "output_text":
            out.append(self._event(
                "response.output_text.delta",
                item_id=message.id, output_index=message.output_index,
                content_index=len(message.parts), delta=delta, logprobs=[],
            ))
            if self._citations:
                self._cite(out, message, delta)
            message.length += len(delta)
        else:
            out.append(self._event(
                "response.refusal.delta",
                item_id=message.id, output_index=message.output_index,
                content_index=len(message.parts), delta=delta,
            ))

    def _cite(self, out: list[dict[str, Any]], message: _Message, delta: str) -> None:
        """`[n]` naming a search result becomes a file_citation annotation at that place, or a
        url_citation spanning the marker for a web result."""
        text = message.unscanned + delta
        offset = message.length + len(delta) - len(text)
        end = 0
        for match in CITATION.finditer(text):
            end = match.end()
            source = self._citations.get(int(match.group(1)))
            if source is None:
                continue
            if "url" in source:
                annotation = {"type": "url_citation", "url": source["url"], "title": source["title"],
                              "start_index": offset + match.start(), "end_index": offset + match.end()}  # fmt: skip
            else:
                annotation = {"type": "file_citation", "file_id": source["file_id"], "filename": source["filename"],
                              "index": offset + match.start()}  # fmt: skip
            out.append(self._event(
                "response.output_text.annotation.added",
                item_id=message.id, output_index=message.output_index, content_index=len(message.parts),
                annotation_index=len(message.annotations), annotation=annotation,
            ))
            message.annotations.append(annotation)
        message.unscanned = text[max(end, len(text) - _CITATION_LONGEST):]

    def _close_part(self, out: list[dict[str, Any]], message: _Message) -> None:
        if message.kind is None:
            return
        text = "".join(message.buffer)
        where = {"item_id": message.id, "output_index": message.output_index, "content_index": len(message.parts)}
        if message.kind == "output_text":
            if self._written:
                self._file_citations(out, message, text)
            part = {"type": "output_text", "text": text, "annotations": message.annotations, "logprobs": []}
            out.append(self._event("response.output_text.done", **where, text=text, logprobs=[]))
        else:
            part = {"type": "refusal", "refusal": text}
            out.append(self._event("response.refusal.done", **where, refusal=text))
        out.append(self._event("response.content_part.done", **where, part=part))
        message.parts.append(part)
        message.kind = None
        message.buffer, message.length, message.annotations, message.unscanned = [], 0, [], ""

    def _close_message(self, out: list[dict[str, Any]], status: str) -> None:
        message = self._message
        if message is None:
            return
        self._close_part(out, message)
        item = {"id": message.id, "type": "message", "status": status, "role": "assistant", "content": message.parts}
        self._done(out, message.output_index, item)
        self._message = None

    def _reasoning_delta(self, out: list[dict[str, Any]], delta: str) -> None:
        reasoning = self._reasoning
        if reasoning is None:
            self._close_message(out, "completed")
            reasoning = self._reasoning = _Reasoning(new_id("rs"), self._reserve())
            out.append(self._event(
                "response.output_item.added",
                output_index=reasoning.output_index,
                item={"id": reasoning.id, "type": "reasoning", "status": "in_progress", "summary": [], "content": []},
            ))
            out.append(self._event(
                "response.content_part.added",
                item_id=reasoning.id, output_index=reasoning.output_index, content_index=0,
                part={"type": "reasoning_text", "text": ""},
            ))
        reasoning.buffer.append(delta)
        out.append(self._event(
            "response.reasoning_text.delta",
            item_id=reasoning.id, output_index=reasoning.output_index, content_index=0, delta=delta,
        ))

    def _summary_delta(self, out: list[dict[str, Any]], delta: str) -> None:
        reasoning = self._reasoning
        if reasoning is None or not delta:
            return
        where = {"item_id": reasoning.id, "output_index": reasoning.output_index, "summary_index": 0}
        if reasoning.summary is None:
            reasoning.summary = []
            out.append(self._event(
                "response.reasoning_summary_part.added", **where, part={"type": "summary_text", "text": ""}
            ))
        reasoning.summary.append(delta)
        out.append(self._event("response.reasoning_summary_text.delta", **where, delta=delta))

    def _close_reasoning(self, out: list[dict[str, Any]], status: str) -> None:
        reasoning = self._reasoning
        if reasoning is None:
            return
        text = "".join(reasoning.buffer)
        where = {"item_id": reasoning.id, "output_index": reasoning.output_index}
        part = {"type": "reasoning_text", "text": text}
        out.append(self._event("response.reasoning_text.done", **where, content_index=0, text=text))
        out.append(self._event("response.content_part.done", **where, content_index=0, part=part))
        summary: list[dict[str, Any]] = []
        if reasoning.summary is not None:
            summary_text = "".join(reasoning.summary)
            summary = [{"type": "summary_text", "text": summary_text}]
            out.append(self._event("response.reasoning_summary_text.done", **where, summary_index=0, text=summary_text))
            out.append(self._event("response.reasoning_summary_part.done", **where, summary_index=0, part=summary[0]))
        item = {"id": reasoning.id, "type": "reasoning", "status": status, "summary": summary, "content": [part]}
        if self._seal is not None:
            item["encrypted_content"] = self._seal(text)
        self._done(out, reasoning.output_index, item)
        self._reasoning = None

    # --- tool calls -------------------------------------------------------------------

    def _call_start(self, out: list[dict[str, Any]], event: ToolCallStart) -> None:
        self._close_reasoning(out, "completed")
        self._close_message(out, "completed")
        origin = self._toolset.origin(event.name)
        kind = "mcp_approval" if origin.needs_approval else origin.kind
        if kind == "builtin":  # announced whole once its arguments are (`_builtin_end`)
            self._calls[event.index] = _Call({"call_id": event.id}, -1, kind, function=origin.name)
            return
        item: dict[str, Any]
        if kind == "function":
            item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress",
                    "call_id": event.id, "name": origin.name, "arguments": ""}  # fmt: skip
            if origin.namespace:
                item["namespace"] = origin.namespace
        elif kind == "custom":
            item = {"id": new_id("ctc"), "type": "custom_tool_call", "status": "in_progress",
                    "call_id": event.id, "name": origin.name, "input": ""}  # fmt: skip
            if origin.namespace:
                item["namespace"] = origin.namespace
        elif kind in ("tool_search", "tool_search_tool"):  # no events of their own stream the arguments (openai-python's types)
            item = {"id": new_id("tsc"), "type": "tool_search_call", "status": "in_progress", "call_id": event.id,
                    "execution": "client" if kind == "tool_search" else "server", "arguments": {}}  # fmt: skip
        elif kind == "file_search":
            item = {"id": new_id("fs"), "type": "file_search_call", "status": "in_progress", "queries": [],
                    "results": None}  # fmt: skip
        elif kind == "web_search":
            # The action as far as known before the arguments: find_in_page's keys are required.
            item = {"id": new_id("ws"), "type": "web_search_call", "status": "in_progress",
                    "action": {key: value for key, value in action_of(origin.name, "").items()
                               if key not in ("query", "queries")}}  # fmt: skip
        elif kind == "mcp":
            item = {"id": new_id("mcp"), "type": "mcp_call", "status": "in_progress", "server_label": origin.namespace,
                    "name": origin.name, "arguments": "", "output": None, "error": None}  # fmt: skip
        elif kind == "code_execution" and origin.name == "shell":
            item = {"id": new_id("sh"), "type": "shell_call", "status": "in_progress", "call_id": event.id,
                    "action": {"commands": [], "timeout_ms": None, "max_output_length": None},
                    "environment": {"type": "container_reference", "container_id": origin.container}}  # fmt: skip
        elif kind == "code_execution":
            item = {"id": new_id("ci"), "type": "code_interpreter_call", "status": "in_progress", "code": "",
                    "container_id": origin.container, "outputs": None}  # fmt: skip
        else:
            item = {"id": new_id("mcpr"), "type": "mcp_approval_request", "server_label": origin.namespace,
                    "name": origin.name, "arguments": ""}  # fmt: skip
        call = self._calls[event.index] = _Call(item, self._reserve(), kind, function=origin.name)
        out.append(self._event("response.output_item.added", output_index=call.output_index, item=dict(item)))
        where = {"item_id": item["id"], "output_index": call.output_index}
        if kind == "file_search":
            out.append(self._event("response.file_search_call.in_progress", **where))
        elif kind == "web_search":
            out.append(self._event("response.web_search_call.in_progress", **where))
        elif kind == "mcp":
            out.append(self._event("response.mcp_call.in_progress", **where))
        elif item["type"] == "code_interpreter_call":
            out.append(self._event("response.code_interpreter_call.in_progress", **where))

    def _call_delta(self, out: list[dict[str, Any]], event: ToolCallDelta) -> None:
        call = self._calls.get(event.index)
        if call is None or not event.arguments:
            return
        call.buffer.append(event.arguments)
        if call.kind in ("function", "mcp"):
            kind = "response.function_call_arguments.delta" if call.kind == "function" else "response.mcp_call_arguments.delta"
            out.append(self._event(kind, item_id=call.item["id"], output_index=call.output_index, delta=event.arguments))
            return
        if call.kind == "code_execution":
            self._code_delta(out, call, _partial_arguments("".join(call.buffer)))
            return
        if call.kind != "custom":
            return
        text = _custom_input("".join(call.buffer), partial=True)
        if text is not None and len(text) > len(call.streamed_input) and text.startswith(call.streamed_input):
            self._custom_delta(out, call, text[len(call.streamed_input):])

    def _code_delta(self, out: list[dict[str, Any]], call: _Call, value: Any) -> None:
        """The code, or the shell's command lines, as far as the model wrote them: the code's
        deltas (held back while it may be a Markdown fence, which the code run leaves out), each
        command added, then its deltas."""
        value = value if isinstance(value, dict) else {}
        if call.function == "python":
            code = value.get("code")
            if isinstance(code, str) and not code.startswith("`") and len(code) > len(call.streamed_input):
                self._streamed_code(out, call, code[len(call.streamed_input):])
            return
        commands = value.get("commands")
        if not isinstance(commands, list):
            return
        for position, command in enumerate(commands):
            if not isinstance(command, str):
                return
            if position == len(call.commands):
                call.commands.append("")
                out.append(self._event("response.shell_call_command.added", output_index=call.output_index,
                                       command_index=position, command=""))  # fmt: skip
            elif position < len(call.commands) - 1:
                continue
            sent = call.commands[position]
            if len(command) > len(sent) and command.startswith(sent):
                call.commands[position] = command
                out.append(self._event("response.shell_call_command.delta", output_index=call.output_index,
                                       command_index=position, delta=command[len(sent):]))  # fmt: skip

    def _streamed_code(self, out: list[dict[str, Any]], call: _Call, delta: str) -> None:
        call.streamed_input += delta
        out.append(self._event("response.code_interpreter_call_code.delta", item_id=call.item["id"],
                               output_index=call.output_index, delta=delta))  # fmt: skip

    def _code_end(self, out: list[dict[str, Any]], index: int, call: _Call, arguments: str, status: str) -> None:
        """The code (or commands) complete: the call runs next, its item waiting for the result
        (a shell call's item is done now, its output an item of its own)."""
        item, where = call.item, {"item_id": call.item["id"], "output_index": call.output_index}
        if call.function == "shell":
            try:
                commands, timeout_ms, max_length = shell_action(arguments)
            except BadInput:
                commands, timeout_ms, max_length = [], None, None
            for position, command in enumerate(commands):
                if position >= len(call.commands):
                    call.commands.append("")
                    out.append(self._event("response.shell_call_command.added", output_index=call.output_index,
                                           command_index=position, command=""))  # fmt: skip
                sent = call.commands[position]
                if command != sent and command.startswith(sent):
                    out.append(self._event("response.shell_call_command.delta", output_index=call.output_index,
                                           command_index=position, delta=command[len(sent):]))  # fmt: skip
                out.append(self._event("response.shell_call_command.done", output_index=call.output_index,
                                       command_index=position, command=command))  # fmt: skip
            item["action"] = {"commands": commands, "timeout_ms": timeout_ms, "max_output_length": max_length}
            item["status"] = status if status == "completed" else "incomplete"
            self._done(out, call.output_index, item)
            if status == "completed":
                self._waiting[index] = call
            return
        try:
            code = python_code(arguments)
        except BadInput:
            code = arguments
        if code.startswith(call.streamed_input) and len(code) > len(call.streamed_input):
            self._streamed_code(out, call, code[len(call.streamed_input):])
        item["code"] = code
        out.append(self._event("response.code_interpreter_call_code.done", **where, code=code))
        if status != "completed":
            item["status"] = "incomplete"
            self._done(out, call.output_index, item)
            return
        item["status"] = "interpreting"
        out.append(self._event("response.code_interpreter_call.interpreting", **where))
        self._waiting[index] = call

    def _code_result(self, out: list[dict[str, Any]], call: _Call, result: ToolResult) -> None:
        """A code call's result: the code interpreter call completed (its logs and images in
        `outputs` when included), or the shell's `shell_call_output` item."""
        data = result.data or {}
        self._written += [{**file, "container_id": (data.get("container") or {}).get("id")}
                          for file in data.get("files") or ()]  # fmt: skip
        if call.function == "shell":
            self._shell_output(out, call, result, data)
            return
        item, where = call.item, {"item_id": call.item["id"], "output_index": call.output_index}
        self.reads[item["id"]] = result.read
        item["status"] = "failed" if result.error else "completed"
        if self._code_outputs:
            logs = data.get("logs") if isinstance(data.get("logs"), str) else result.read
            outputs: list[dict[str, Any]] = [{"type": "logs", "logs": logs}] if logs else []
            outputs += [{"type": "image", "url": f"data:image/png;base64,{image}"} for image in data.get("images") or ()]
            item["outputs"] = outputs
        # The API has no `.failed` event for code interpreter calls: `.completed` ends the call,
        # its item's status says how (as a web search's).
        out.append(self._event("response.code_interpreter_call.completed", **where))
        self._done(out, call.output_index, item)

    def _shell_output(self, out: list[dict[str, Any]], call: _Call, result: ToolResult, data: dict[str, Any]) -> None:
        """The `shell_call_output` item of a hosted shell call: each command's stdout, stderr and
        outcome, streamed as `response.shell_call_output_content.*` events, one command each."""
        outputs = [{"stdout": str(output.get("stdout") or ""), "stderr": str(output.get("stderr") or ""),
                    "outcome": {"type": "timeout"} if output.get("timed_out") else
                    {"type": "exit", "exit_code": int(output.get("exit_code") or 0)}}
                   for output in data.get("outputs") or () if isinstance(output, dict)]  # fmt: skip
        if result.error and not outputs:  # the commands never ran: what the model read, as stderr
            outputs = [{"stdout": "", "stderr": result.read, "outcome": {"type": "exit", "exit_code": 1}}]
        item = {"id": new_id("sho"), "type": "shell_call_output", "status": "in_progress",
                "call_id": call.item["call_id"], "output": [],
                "max_output_length": call.item["action"].get("max_output_length")}  # fmt: skip
        index = self._reserve()
        out.append(self._event("response.output_item.added", output_index=index, item=dict(item)))
        where = {"item_id": item["id"], "output_index": index}
        for position, output in enumerate(outputs):
            if output["stdout"] or output["stderr"]:
                out.append(self._event("response.shell_call_output_content.delta", **where, command_index=position,
                                       delta={"stdout": output["stdout"], "stderr": output["stderr"]}))  # fmt: skip
            out.append(self._event("response.shell_call_output_content.done", **where, command_index=position,
                                   output=[output]))  # fmt: skip
        item["output"], item["status"] = outputs, "completed" if data.get("outputs") else "incomplete"
        self._done(out, index, item)

    def _file_citations(self, out: list[dict[str, Any]], message: _Message, text: str) -> None:
        """The files this response's code wrote, as `container_file_citation` annotations: where
        the answer names one (`sandbox:/mnt/data/…`, the path, else its name), else at the
        answer's end, so a client finds every file the code made."""
        where = {"item_id": message.id, "output_index": message.output_index, "content_index": len(message.parts)}
        for file in self._written:
            spans = [(m.start(), m.end()) for m in re.finditer(r"(?:sandbox:)?" + re.escape(file["path"]), text)]
            if not spans and (found := text.find(file["filename"])) >= 0:
                spans = [(found, found + len(file["filename"]))]
            for start, end in spans or [(len(text), len(text))]:
                annotation = {"type": "container_file_citation", "container_id": file["container_id"],
                              "file_id": file["file_id"], "filename": file["filename"], "start_index": start,
                              "end_index": end}  # fmt: skip
                out.append(self._event("response.output_text.annotation.added", **where,
                                       annotation_index=len(message.annotations), annotation=annotation))  # fmt: skip
                message.annotations.append(annotation)
        self._written = []

    def _custom_delta(self, out: list[dict[str, Any]], call: _Call, delta: str) -> None:
        call.streamed_input += delta
        out.append(self._event(
            "response.custom_tool_call_input.delta",
            item_id=call.item["id"], output_index=call.output_index, delta=delta,
        ))

    def _call_end(self, out: list[dict[str, Any]], index: int, status: str) -> None:
        call = self._calls.pop(index, None)
        if call is None:
            return
        item = call.item
        arguments = "".join(call.buffer)
        if call.kind == "builtin":
            self._builtin_end(out, call, arguments, status)
            return
        if call.kind == "code_execution":
            self._code_end(out, index, call, arguments, status)
            return
        where = {"item_id": item["id"], "output_index": call.output_index}
        if call.kind == "custom":
            text = _custom_input(arguments, partial=False)
            if text is None:
                text = arguments  # the model wrote the input itself rather than JSON
            if text.startswith(call.streamed_input) and len(text) > len(call.streamed_input):
                self._custom_delta(out, call, text[len(call.streamed_input):])
            item["input"] = text
            out.append(self._event("response.custom_tool_call_input.done", **where, input=text))
        elif call.kind in ("tool_search", "tool_search_tool"):
            item["arguments"] = _search_arguments(arguments)
            if call.kind == "tool_search_tool" and status == "completed":
                self._waiting[index] = call
                return
        elif call.kind == "file_search":
            item["queries"] = _queries(arguments)
            if status == "completed":
                out.append(self._event("response.file_search_call.searching", **where))
                self._waiting[index] = call
                return
        elif call.kind == "web_search":
            item["action"] = action_of(call.function, arguments) if arguments else item["action"]
            if status == "completed":
                out.append(self._event("response.web_search_call.searching", **where))
                self._waiting[index] = call
                return
        else:
            if not arguments.strip():
                # A call without arguments: OpenAI sends "{}", and deltas must join to it.
                arguments = "{}"
                if call.kind in ("function", "mcp"):
                    kind = "response.function_call_arguments.delta" if call.kind == "function" else "response.mcp_call_arguments.delta"
                    out.append(self._event(kind, **where, delta=arguments))
            item["arguments"] = arguments
            if call.kind == "function":
                out.append(self._event("response.function_call_arguments.done", **where, arguments=arguments,
                                       name=item["name"]))  # fmt: skip
            elif call.kind == "mcp":
                out.append(self._event("response.mcp_call_arguments.done", **where, arguments=arguments))
                if status == "completed":
                    self._waiting[index] = call
                    return
        if call.kind != "mcp_approval":
            item["status"] = status if call.kind in ("function", "custom", "tool_search", "tool_search_tool") else "incomplete"
        broken = call.kind == "function" and status == "completed" and not _is_json(item["arguments"])
        if broken:
            log.warning("the model called %s with arguments that are not JSON: %.200r", item["name"], item["arguments"])
            item["status"] = "incomplete"
            self._broken = Error("server_error", f"The model called `{item['name']}` with arguments that are not "
                                 "valid JSON.", 502)  # fmt: skip
        # Announced done, so part of the failed response's output, `incomplete` as any
        # call a failure cut short: `output_item.done` says the item is final, and no client
        # makes a call from a response that failed.
        self._done(out, call.output_index, item)

    def _builtin_end(self, out: list[dict[str, Any]], call: _Call, arguments: str, status: str) -> None:
        """A client-run built-in tool's call as its typed item (`client_tools.item`), added then
        done: such calls have no events of their own between
        (https://learn.microsoft.com/en-us/dotnet/api/azure.ai.agentserver.responses.responseeventstream.outputitemfunctionshellcall).
        Arguments that make no such item fail the response, as a function's that are not JSON do."""
        try:
            item = client_tools.item(call.function, call.item["call_id"], arguments)
        except client_tools.MalformedCall as reason:
            if status == "completed":
                log.warning("the model called %s with arguments that make no call of it (%s): %.200r",
                            call.function, reason, arguments)  # fmt: skip
                self._broken = Error("server_error", f"The model called the `{call.function}` tool with arguments "
                                     f"that make no call of it: {reason}.", 502)  # fmt: skip
            return
        index = self._reserve()
        out.append(self._event("response.output_item.added", output_index=index,
                               item={**item, "status": "in_progress"}))  # fmt: skip
        # An apply_patch_call is `in_progress` or `completed` only (openai-python's types).
        item["status"] = status if status == "completed" or item["type"] != "apply_patch_call" else "in_progress"
        self._done(out, index, item)

    def _tool_result(self, out: list[dict[str, Any]], result: ToolResult) -> None:
        """A server-run call's outcome completes its item (and may bring citable results)."""
        call = self._waiting.pop(result.index, None)
        if call is None:
            return
        item, data = call.item, result.data or {}
        where = {"item_id": item["id"], "output_index": call.output_index}
        if call.kind in ("file_search", "web_search"):
            self.reads[item["id"]] = result.read
        if call.kind == "code_execution":
            self._code_result(out, call, result)
            return
        if call.kind == "tool_search_tool":
            item["status"] = "incomplete" if result.error else "completed"
            self._done(out, call.output_index, item)
            self._search_output(out, item, list(data.get("tools_found") or ()))
            return
        if call.kind == "file_search":
            self._citations.update(data.get("citations", {}))
            item["status"] = "failed" if result.error else "completed"
            if self._search_results:
                item["results"] = data.get("results", [])
            out.append(self._event("response.file_search_call.completed", **where))
        elif call.kind == "web_search":
            self._citations.update(data.get("citations", {}))
            action = dict(data.get("action") or item["action"])
            if not self._web_sources:
                action.pop("sources", None)
            elif action["type"] == "search":
                action.setdefault("sources", [])
            item["status"], item["action"] = ("failed" if result.error else "completed"), action
            # The API has no `.failed` event for web searches: `.completed` ends the call, its
            # item's status says how (as file_search's).
            out.append(self._event("response.web_search_call.completed", **where))
        else:
            if result.error:
                error = data.get("error") or {"type": "mcp_protocol_error", "code": -32603, "message": result.error}
                item["status"], item["error"] = "failed", error
                out.append(self._event("response.mcp_call.failed", **where))
            else:
                item["status"], item["output"] = "completed", result.output
                out.append(self._event("response.mcp_call.completed", **where))
        self._done(out, call.output_index, item)

    def _search_output(self, out: list[dict[str, Any]], call: dict[str, Any], found: list[str]) -> None:
        """The `tool_search_output` item of a search the server ran: the tools it found as the
        request declared them (a namespace member's whole namespace), as OpenAI's hosted tool
        search answers (https://developers.openai.com/api/docs/guides/tools-tool-search)."""
        tools: list[dict[str, Any]] = []
        for name in found:
            origin = self._toolset.origin(name)
            wanted = origin.namespace or origin.name
            tool = next((tool for tool in self._toolset.echo if tool.get("name") == wanted
                         and tool.get("type") in ("function", "custom", "namespace")), None)  # fmt: skip
            if tool is not None and tool not in tools:
                tools.append(tool)
        item = {"id": new_id("tso"), "type": "tool_search_output", "status": "completed", "call_id": call["call_id"],
                "execution": "server", "tools": tools}  # fmt: skip
        output_index = self._reserve()
        out.append(self._event("response.output_item.added", output_index=output_index,
                               item={**item, "status": "in_progress"}))  # fmt: skip
        self._done(out, output_index, item)

    # --- the end ----------------------------------------------------------------------

    def _close_all(self, out: list[dict[str, Any]], status: str) -> None:
        self._close_reasoning(out, status)
        self._close_message(out, status)
        for index in sorted(self._calls):
            self._call_end(out, index, status)
        for index in sorted(self._waiting):
            self._tool_result(out, ToolResult(index, "", error="The response ended before the tool answered."))

    def _finish(self, out: list[dict[str, Any]], event: Finish) -> None:
        if self.finished:
            return
        incomplete = {"length": "max_output_tokens", "content_filter": "content_filter"}.get(event.reason)
        self._close_all(out, "incomplete" if incomplete else "completed")
        if self._broken is not None:
            self._fail(out, self._broken)
            return
        self.finished = True
        response = self.response
        response["output"] = [item for item in self._items if item is not None]
        response["output_text"] = _output_text(response["output"])
        response["usage"] = usage_object(self._usage)
        if incomplete:
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": incomplete}
            out.append(self._event("response.incomplete", response=response))
        else:
            response["status"] = "completed"
            response["completed_at"] = int(time.time())
            out.append(self._event("response.completed", response=response))

    def _fail(self, out: list[dict[str, Any]], error: Error) -> None:
        if self.finished:
            return
        self._close_all(out, "incomplete")
        self.finished = True
        self.error = error
        code = error.code if error.code in _RESPONSE_ERROR_CODES else (
            "invalid_prompt" if 400 <= error.status < 500 else "server_error"
        )
        kind = error_type_for_status(error.status)
        out.append(self._event(
            "error",
            code=code, message=error.message, param=None,
            error={"type": kind, "code": code, "message": error.message, "param": None},
        ))
        response = self.response
        response["status"] = "failed"
        response["error"] = {"code": code, "message": error.message}
        response["output"] = [item for item in self._items if item is not None]
        response["output_text"] = _output_text(response["output"])
        response["usage"] = usage_object(self._usage) if self._usage else None
        out.append(self._event("response.failed", response=response))

    def cancel(self) -> list[dict[str, Any]]:
        """End a cancelled background response: open items incomplete, status `cancelled`.

        The API has no cancellation event; `response.incomplete` ends the stream, with the
        Response's status saying why.
        """
        if self.finished:
            return []
        out: list[dict[str, Any]] = []
        self._close_all(out, "incomplete")
        self.finished = True
        response = self.response
        response["status"] = "cancelled"
        response["output"] = [item for item in self._items if item is not None]
        response["output_text"] = _output_text(response["output"])
        response["usage"] = usage_object(self._usage) if self._usage else None
        out.append(self._event("response.incomplete", response=response))
        return out

    # --- helpers ----------------------------------------------------------------------

    def _event(self, type: str, **fields: Any) -> dict[str, Any]:
        event = {"type": type, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _reserve(self) -> int:
        self._items.append(None)
        return len(self._items) - 1

    def _done(self, out: list[dict[str, Any]], output_index: int, item: dict[str, Any]) -> None:
        self._items[output_index] = item
        out.append(self._event("response.output_item.done", output_index=output_index, item=item))

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": [item for item in self._items if item is not None]}


def resumed(response: dict[str, Any], stored: list[dict[str, Any]]) -> ResponseRenderer:
    """A renderer taking up `response` after its `stored` events: how the runs of a process
    that died are ended (`Runs`), with the items their stream announced done."""
    renderer = ResponseRenderer(response, ToolSet(), stored[-1]["sequence_number"] + 1 if stored else 0)
    renderer.resume({e["output_index"]: e["item"] for e in stored if e["type"] == "response.output_item.done"})
    return renderer


def _partial_arguments(arguments: str) -> Any:
    """Arguments as far as the model wrote them (a trailing string kept as it is so far)."""
    try:
        return jiter.from_json(arguments.encode(), partial_mode="trailing-strings")
    except ValueError:
        return None


def _custom_input(arguments: str, *, partial: bool) -> str | None:
    """The `input` string of a custom tool's JSON arguments (so far, when `partial`)."""
    try:
        value = jiter.from_json(arguments.encode(), partial_mode="trailing-strings" if partial else "off")
    except ValueError:
        return None
    text = value.get(CUSTOM_INPUT) if isinstance(value, dict) else None
    return text if isinstance(text, str) else None


def _is_json(text: str) -> bool:
    try:
        jiter.from_json(text.encode())
    except ValueError:
        return False
    return True


def _queries(arguments: str) -> list[str]:
    """The queries of a file_search call's arguments (`{"queries": [...]}`, or one `query`)."""
    try:
        value = jiter.from_json(arguments.encode()) if arguments.strip() else {}
    except ValueError:
        return [arguments] if arguments.strip() else []
    if not isinstance(value, dict):
        return []
    queries = value.get("queries", value.get("query", []))
    queries = [queries] if isinstance(queries, str) else queries
    return [str(query) for query in queries if query] if isinstance(queries, list) else []


def _search_arguments(arguments: str) -> dict[str, Any]:
    """A tool search call's arguments as the object a `tool_search_call` holds (`{query, limit}`);
    text that is no JSON object is taken as the query."""
    try:
        value = jiter.from_json(arguments.encode()) if arguments.strip() else {}
    except ValueError:
        return {"query": arguments}
    return value if isinstance(value, dict) else {"query": str(value)}


def _added(first: Usage, second: Usage) -> Usage:
    """Usage of a response that took several generations (server-run tools in between)."""
    return Usage(
        first.input_tokens + second.input_tokens,
        first.output_tokens + second.output_tokens,
        first.cached_tokens + second.cached_tokens,
        first.reasoning_tokens + second.reasoning_tokens,
    )


def _output_text(output: list[dict[str, Any]]) -> str:
    return "".join(
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def usage_object(usage: Usage | None) -> dict[str, Any]:
    """A Response's `usage`: all five keys strict clients require, with their details."""
    usage = usage or Usage(0, 0)
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }
