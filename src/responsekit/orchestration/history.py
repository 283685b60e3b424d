"""Stored items -> the canonical conversation.

Items (`items.py`) are the store's vocabulary: a response's history, a conversation, what a
compaction summarizes. The orchestrator translates them itself, leniently: an odd
or malformed item is skipped with a logged warning, because a replayed history with one
strange item must not kill a client's thread.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..canonical.conversation import (
    FilePart,
    FunctionTool,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolCall,
)
from ..canonical.errors import APIError
from ..canonical.ids import new_id
from ..canonical.server_tools import CODE_FUNCTIONS, TOOL_SEARCHES, call_of
from ..canonical.server_tools import NAMESPACE as WEB
from ..canonical.toolset import CUSTOM_INPUT, TOOL_SEARCH, ToolSet
from ..store import MODEL_READ
from ..tools.file_search import format_results
from . import client_tools

log = logging.getLogger(__name__)


class _Skip(Exception):
    """An input item that cannot be used; it is skipped with a warning."""


def translate_items(items: list[Any], toolset: ToolSet) -> list[Message]:
    """Input items -> canonical messages; each odd item is skipped with a warning."""
    builder = _HistoryBuilder(toolset)
    for item in items:
        try:
            builder.add(item)
        except _Skip as reason:
            where = item.get("id", "without id") if isinstance(item, dict) else "that is not an object"
            log.warning("skipping input item %s for the model: %s", where, reason)
    return builder.finish()


class _HistoryBuilder:
    def __init__(self, toolset: ToolSet) -> None:
        self.toolset = toolset
        self.messages: list[Message] = []
        self.pending_reasoning: list[str] = []
        self.tool_images: list[Part] = []

    def add(self, item: Any) -> None:
        if not isinstance(item, dict):
            raise _Skip(f"not an object: {str(item)[:80]!r}")
        kind = item.get("type", "message" if "role" in item else None)
        handler = getattr(self, f"_{kind}", None) if isinstance(kind, str) else None
        if handler is None:
            raise _Skip(f"item type {kind!r} is not used by chat models")
        if kind not in ("function_call_output", "custom_tool_call_output", *client_tools.OUTPUTS):
            self._flush_tool_images()
        handler(item)

    def finish(self) -> list[Message]:
        self._flush_tool_images()
        return _answer_every_call(self.messages)

    # --- item types -------------------------------------------------------------------

    def _message(self, item: dict[str, Any]) -> None:
        role = item.get("role")
        if role not in ("system", "developer", "user", "assistant"):
            raise _Skip(f"message role {role!r}")
        parts = _content_parts(item.get("content"), role)
        if role == "assistant":
            turn = self._assistant_turn(allow_append=False)
            turn.content.extend(parts)
        else:
            self.messages.append(Message(role, parts))

    def _reasoning(self, item: dict[str, Any]) -> None:
        text = _reasoning_text(item)
        if text:
            self.pending_reasoning.append(text)

    def _function_call(self, item: dict[str, Any]) -> None:
        name, arguments = item.get("name"), item.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            raise _Skip("function_call without a name")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id = item.get("call_id") or item.get("id") or new_id("call")
        model_name = self.toolset.model_name(name, item.get("namespace"))
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(str(call_id), model_name, arguments))

    def _custom_tool_call(self, item: dict[str, Any]) -> None:
        name, text = item.get("name"), item.get("input", "")
        if not isinstance(name, str) or not name:
            raise _Skip("custom_tool_call without a name")
        arguments = json.dumps({CUSTOM_INPUT: text if isinstance(text, str) else str(text)}, ensure_ascii=False)
        call_id = item.get("call_id") or item.get("id") or new_id("call")
        model_name = self.toolset.model_name(name, item.get("namespace"))
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(str(call_id), model_name, arguments))

    def _function_call_output(self, item: dict[str, Any]) -> None:
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _Skip("tool output without a call_id")
        if not any(call.id == call_id for m in self.messages for call in m.tool_calls):
            raise _Skip(f"tool output for unknown call {call_id!r}")
        parts = _content_parts(item.get("output"), "tool")
        images = [part for part in parts if isinstance(part, ImagePart)]
        if images:
            self.tool_images += [TextPart(f"Images returned by tool call {call_id}:"), *images]
        # Text stays one part (what the engine always got); documents follow, read as text later.
        text = "".join(part.text for part in parts if isinstance(part, TextPart))
        files: list[Part] = [part for part in parts if isinstance(part, FilePart)]
        self.messages.append(Message("tool", [TextPart(text), *files], tool_call_id=call_id))

    _custom_tool_call_output = _function_call_output

    def _shell_call(self, item: dict[str, Any]) -> None:
        """A call of a built-in tool the client runs (`client_tools.py`): the function call the
        model made, under the name the tool has now (or its usual one, when no longer offered)."""
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _Skip(f"{item['type']} without a call_id")
        kind = client_tools.CALLS[item["type"]]
        kinds = ("computer_use_preview", "computer") if kind == "computer_use_preview" else (kind,)
        name = next((name for name, origin in self.toolset.origins.items()
                     if origin.kind == "builtin" and origin.name in kinds), client_tools.FUNCTIONS[kind])  # fmt: skip
        arguments = client_tools.call_arguments(item)
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(call_id, name, arguments))

    _local_shell_call = _apply_patch_call = _computer_call = _shell_call

    def _shell_call_output(self, item: dict[str, Any]) -> None:
        """What the client's run of a built-in tool gave: the tool result the model reads; a
        computer call's screenshot follows as an image, as tool outputs' images do (made what the
        model reads by the attachments stage). A `local_shell_call_output` names its call by
        `id` in OpenAI's types, by `call_id` as the Agents SDK sends it."""
        call_id = item.get("call_id")
        if item.get("type") == "local_shell_call_output" and not call_id:
            call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise _Skip(f"{item['type']} without a call_id")
        if not any(call.id == call_id for m in self.messages for call in m.tool_calls):
            raise _Skip(f"tool output for unknown call {call_id!r}")
        text = client_tools.output_text(item)
        if item.get("type") == "computer_call_output":
            shot = client_tools.screenshot(item)
            text = "The screenshot taken after the action follows." if shot else "No screenshot came back."
            if shot:
                self.tool_images += [TextPart(f"Screenshot returned by tool call {call_id}:"),
                                     ImagePart(shot[0], "auto", file_id=shot[1])]  # fmt: skip
        self.messages.append(Message("tool", [TextPart(text)], tool_call_id=call_id))

    _local_shell_call_output = _apply_patch_call_output = _computer_call_output = _shell_call_output

    def _mcp_call(self, item: dict[str, Any]) -> None:
        """An MCP call the server ran: the model sees its call and what came back."""
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise _Skip("mcp_call without a name")
        call_id = str(item.get("id") or new_id("call"))
        model_name = self.toolset.model_name(name, item.get("server_label"))
        arguments = item.get("arguments") or "{}"
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(call_id, model_name, str(arguments)))
        error = item.get("error")
        if isinstance(error, dict):
            error = error.get("message") or json.dumps(error.get("content", error), ensure_ascii=False)
        result = f"Error: {error}" if error else str(item.get("output") or "")
        self.messages.append(Message("tool", [TextPart(result)], tool_call_id=call_id))

    def _code_interpreter_call(self, item: dict[str, Any]) -> None:
        """Code the server ran: the model sees the `python` call and what it read of the run
        (when the store kept it), else the logs the item keeps (`include`d outputs)."""
        call_id = str(item.get("id") or new_id("call"))
        name = next((name for name, origin in self.toolset.origins.items()
                     if origin.kind == "code_execution" and origin.name == "python"), CODE_FUNCTIONS["python"])  # fmt: skip
        code = item.get("code") if isinstance(item.get("code"), str) else ""
        self._assistant_turn(allow_append=True).tool_calls.append(
            ToolCall(call_id, name, json.dumps({"code": code}, ensure_ascii=False)))  # fmt: skip
        outputs = [o for o in item.get("outputs") or () if isinstance(o, dict)]
        logs = "\n".join(str(o.get("logs") or "") for o in outputs if o.get("type") == "logs").strip()
        images = sum(o.get("type") == "image" for o in outputs)
        if read := _model_read(item):
            text = read
        elif logs or images:
            text = logs + (f"\n[{images} image(s) displayed to the user]" if images else "")
        elif item.get("status") == "failed":
            text = "This code failed; its output was not kept."
        else:
            text = "The code ran; its output was not kept."
        self.messages.append(Message("tool", [TextPart(text.strip())], tool_call_id=call_id))

    def _file_search_call(self, item: dict[str, Any]) -> None:
        """A search the server ran: the model sees its queries and the results: as it read them
        when the store kept that, else as far as the item keeps them."""
        call_id = str(item.get("id") or new_id("call"))
        arguments = json.dumps({"queries": item.get("queries") or []}, ensure_ascii=False)
        turn = self._assistant_turn(allow_append=True)
        turn.tool_calls.append(ToolCall(call_id, self.toolset.model_name("file_search"), arguments))
        results = item.get("results")
        text = _model_read(item) or (format_results(results) if results else "The results of this search were not kept.")
        self.messages.append(Message("tool", [TextPart(text)], tool_call_id=call_id))

    def _web_search_call(self, item: dict[str, Any]) -> None:
        """A web search that ran (here, or on OpenAI's servers for a thread begun there): the model
        sees the call and what it found. A call this server stored comes with what the model read
        then (the results' titles, URLs and text, the page's text); one a client replays, with what
        the item keeps (its sources, when included)."""
        call_id = str(item.get("id") or new_id("call"))
        action = item.get("action") if isinstance(item.get("action"), dict) else {}
        function, arguments = call_of(action)
        name = self.toolset.model_name(function, WEB)
        if name not in self.toolset.origins and function not in self.toolset.origins:
            name = function  # web search is not offered now: the call keeps its plain name
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(call_id, name, arguments))
        sources = [s.get("url") for s in action.get("sources") or () if isinstance(s, dict) and s.get("url")]
        if read := _model_read(item):
            text = read
        elif item.get("status") == "failed":
            text = "This web search failed."
        elif sources:
            text = "Sources found:\n" + "\n".join(f"- {url}" for url in sources)
        elif action.get("type") in ("open_page", "find_in_page"):
            text = f"The page {action.get('url') or ''} was read; its text was not kept."
        else:
            text = "The results of this search were not kept."
        self.messages.append(Message("tool", [TextPart(text)], tool_call_id=call_id))

    def _tool_search_call(self, item: dict[str, Any]) -> None:
        """A tool search, as the model called it: a client's (`TOOL_SEARCH`) or the server's BM25
        (`execution: "server"`, `tools/tool_search.py`)."""
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _Skip("tool_search_call without a call_id")
        arguments = item.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
        name = TOOL_SEARCHES["bm25"] if item.get("execution") == "server" else self.toolset.model_name(TOOL_SEARCH)
        self._assistant_turn(allow_append=True).tool_calls.append(ToolCall(call_id, name, text))

    def _tool_search_output(self, item: dict[str, Any]) -> None:
        """What a client's tool search found: the model reads the tools, which are offered from
        then on (declared from the item when the request does not declare them)."""
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise _Skip("tool_search_output without a call_id")
        tools = item.get("tools") if isinstance(item.get("tools"), list) else []
        found: list[FunctionTool] = []
        for position, tool in enumerate(tools):
            try:
                found += self.toolset.found(tool)
            except APIError as error:
                log.warning("leaving out tool %d of tool search output %s: %s", position, call_id, error.message)
        if self.toolset.declare is None:  # a transcript (a summarizer's): the tools as the item names them
            found = _named(tools)
        lines = [f"- {tool.name}" + (f": {tool.description}" if tool.description else "") for tool in found]
        text = "Tools found, callable from now on:\n" + "\n".join(lines) if lines else "No tools were found."
        self.messages.append(Message("tool", [TextPart(text)], tool_call_id=call_id,
                                     tools_found=[tool.name for tool in found]))  # fmt: skip

    def _mcp_list_tools(self, item: dict[str, Any]) -> None:
        """Listings are for the client and the server (which reuses them), not the model."""

    def _mcp_approval_request(self, item: dict[str, Any]) -> None:
        """A call still waiting for approval has not happened (an approved one arrives as an mcp_call)."""

    def _mcp_approval_response(self, item: dict[str, Any]) -> None:
        """Approvals are acted on by the orchestrator before generation."""

    # --- helpers ----------------------------------------------------------------------

    def _assistant_turn(self, *, allow_append: bool) -> Message:
        """The assistant message this item belongs to, carrying any reasoning before it.

        Tool calls join the assistant message just before them; an assistant message
        after reasoning or tool results starts a new turn.
        """
        last = self.messages[-1] if self.messages else None
        if (
            allow_append
            and not self.pending_reasoning
            and last is not None
            and last.role == "assistant"
        ):
            return last
        turn = Message("assistant")
        if self.pending_reasoning:
            turn.reasoning = "\n\n".join(self.pending_reasoning)
            self.pending_reasoning.clear()
        self.messages.append(turn)
        return turn

    def _flush_tool_images(self) -> None:
        """Chat tool messages hold text only, so images from tool outputs follow as a user turn."""
        if self.tool_images:
            self.messages.append(Message("user", self.tool_images))
            self.tool_images = []


def _answer_every_call(messages: list[Message]) -> list[Message]:
    """Give every tool call a result, as chat engines require; a missing one is stated as such."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    out: list[Message] = []
    unanswered: list[ToolCall] = []
    for message in messages:
        if message.role != "tool":
            out.extend(_no_output(call) for call in unanswered)
            unanswered = []
        out.append(message)
        unanswered += [call for call in message.tool_calls if call.id not in answered]
    out.extend(_no_output(call) for call in unanswered)
    return out


def _named(tools: list[Any]) -> list[FunctionTool]:
    """The functions tool declarations name (a namespace's members), by their names and descriptions."""
    named = []
    for tool in tools:
        members = (tool.get("tools") if tool.get("type") == "namespace" else [tool]) if isinstance(tool, dict) else None
        for member in members if isinstance(members, list) else ():
            if isinstance(member, dict) and isinstance(member.get("name"), str):
                description = member.get("description")
                named.append(FunctionTool(member["name"], description if isinstance(description, str) else None))
    return named


def _model_read(item: dict[str, Any]) -> str | None:
    """What the model read as a server-run call's result, as the store kept it (`MODEL_READ`)."""
    read = item.get(MODEL_READ)
    return read if isinstance(read, str) and read else None


def _no_output(call: ToolCall) -> Message:
    log.warning("tool call %s has no output in the history; telling the model so", call.id)
    return Message("tool", [TextPart("No output was recorded for this tool call.")], tool_call_id=call.id)


def _reasoning_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    texts: list[str] = []
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if not any(texts):
        summary = item.get("summary")
        if isinstance(summary, list):
            texts = [p.get("text", "") for p in summary if isinstance(p, dict) and isinstance(p.get("text"), str)]
        elif isinstance(summary, str):
            texts = [summary]
    return "\n".join(text for text in texts if text)


def _content_parts(content: Any, role: str) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [TextPart(content)]
    if not isinstance(content, list):
        raise _Skip(f"{role} content is neither a string nor a list")
    parts: list[Part] = []
    for part in content:
        if isinstance(part, str):
            parts.append(TextPart(part))
            continue
        if not isinstance(part, dict):
            log.warning("skipping a content part that is not an object")
            continue
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text"):
            parts.append(TextPart(str(part.get("text", ""))))
        elif kind == "refusal":
            parts.append(TextPart(str(part.get("refusal", ""))))
        elif kind == "input_image":
            url = part.get("image_url")
            if isinstance(url, dict):
                url = url.get("url")
            detail = str(part.get("detail") or "auto")
            if isinstance(url, str) and url:
                parts.append(ImagePart(url, detail))
            elif isinstance(part.get("file_id"), str) and part["file_id"]:
                parts.append(ImagePart("", detail, file_id=part["file_id"]))
            else:
                log.warning("skipping an input_image with neither an image_url nor a file_id")
        elif kind == "input_file":
            parts.append(_file_part(part))
        else:
            log.warning("skipping a content part of type %r", kind)
    return parts


def _file_part(part: dict[str, Any]) -> FilePart:
    """An `input_file` as it came; the attachments stage reads its text (`attachments.py`)."""

    def text(key: str) -> str | None:
        value = part.get(key)
        return value if isinstance(value, str) and value else None

    return FilePart(text("filename"), text("file_data"), text("file_id"), text("file_url"))
