"""Canonical events -> Anthropic's stream events, and the `Message` they fold into.

The stream is Anthropic's exactly: `message_start` (with the input usage known at start),
one block at a time — `content_block_start`, its deltas (`thinking_delta` then one
`signature_delta`, `text_delta`, `input_json_delta` with the arguments as the engine writes
them), `content_block_stop` — each new block at the next index, then `message_delta` (stop
reason, usage) and `message_stop`; a failure ends it with an `error` event. A non-streaming
answer is the fold of the same events (`message`).

A thinking block's `signature` is its reasoning sealed with the server's keys (sealing.py),
so a client that sends the block back — also with `display: "omitted"`, where the text
is left out — gives the model its reasoning again.

Stop sequences are found here rather than by the engine, so the answer can say which one
stopped it (`stop_sequence`); the engine's generation is closed once one is found.

A web search the server runs (the `web_search_*` server tool, docs/web-search.md) is a
`server_tool_use` block, its results a `web_search_tool_result` block (each result's text sealed
into its `encrypted_content`, so a replayed turn gives it to the model again), and the `[n]` the
answer cites become `web_search_result_location` citations of its text block (`citations_delta`).
A page the server fetched (the `web_fetch_*` server tool) is a `server_tool_use` block named
`web_fetch`, then a `web_fetch_tool_result` block holding the page as a text `document`.
A call the server made to an MCP server (the MCP connector, `connector.py`) is an `mcp_tool_use`
block (the tool's own name, the server's name, the arguments streamed as `input_json_delta`),
then an `mcp_tool_result` block with what the tool answered as text, `is_error` when it failed.
A tool search the server ran (the `tool_search_tool_*` tools, `tools/tool_search.py`) is a
`server_tool_use` block named as its tool, then a `tool_search_tool_result` block naming the
tools found as `tool_reference`s; the model calls those as any client tool, in the same answer.
A code call (the `code_execution_*` tool, `code_execution.py`) is a `server_tool_use` block named
`bash_code_execution`, `text_editor_code_execution` or `code_execution`, its input streamed as
`input_json_delta`, then its result block; the answer names the container they ran in
(`container`, in `message_delta` and the message).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ...canonical.events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResult,
    Usage,
)
from ...canonical.ids import new_id
from ...canonical.server_tools import CITATION
from ...canonical.toolset import ToolOrigin
from ...prompting.stop_texts import StopTexts
from .code_execution import BLOCK_NAMES, RESULT_TYPES, result_content, rfc3339

log = logging.getLogger(__name__)

SEARCH_ERRORS = {"rate_limited": "too_many_requests", "budget": "max_uses_exceeded"}
"""Why a search failed (`SearchError.outcome`) -> Anthropic's `error_code` (else `unavailable`)."""
FETCH_ERRORS = {"refused": "url_not_allowed", "not_allowed": "url_not_allowed", "too_long": "url_too_long",
                "invalid": "invalid_tool_input", "not_in_context": "url_not_in_prior_context",
                "budget": "max_uses_exceeded", "too_large": "content_too_large",
                "unsupported": "unsupported_content_type", "timeout": "url_not_accessible",
                "unreachable": "url_not_accessible", "http_error": "url_not_accessible"}  # fmt: skip
"""Why a fetch failed (`tools/web/fetch_tool.py`, `FetchError.outcome`) -> Anthropic's `error_code`
(the `anthropic` SDK's `WebFetchToolResultErrorCode`; else `unavailable`)."""

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}  # fmt: skip


def error_type(status: int) -> str:
    """Anthropic's error `type` for an HTTP status (unknown 4xx are invalid requests, 5xx `api_error`)."""
    return ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_envelope(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def error_message(error: Error) -> str:
    """The engine's message; a context overflow reads as Anthropic's, which clients act on: Claude
    Code compacts its history on "prompt is too long", by as much as the two numbers of Anthropic's
    `prompt is too long: N tokens > M maximum` tell (the prompt's tokens, the window)."""
    if error.code != "context_length_exceeded":
        return error.message
    if error.prompt_tokens is not None and error.window is not None:
        return f"prompt is too long: {error.prompt_tokens} tokens > {error.window} maximum"
    return f"prompt is too long: {error.message}"


class MessagesRenderer:
    def __init__(
        self,
        model: str,
        *,
        input_tokens: int,
        seal: Callable[[str], str],
        show_thinking: bool = True,
        stop_sequences: list[str] | None = None,
        server_tools: Mapping[str, ToolOrigin] | None = None,
        seal_result: Callable[[str], str] | None = None,
        context_management: dict[str, Any] | None = None,
        container: dict[str, Any] | None = None,
    ) -> None:
        """`server_tools`: the model-facing names of the tools the server runs, and what each
        stands for (`Turn.served`: a web function, whose kind names its server tool, `web_search`
        or `web_fetch`, or an MCP server's tool);
        `seal_result` seals a search result's text into its `encrypted_content`;
        `context_management`: the edits applied to the history, for `message_delta` and the message;
        `container`: the container code execution runs in (`id`, `expires_at`), for the same."""
        self.id = new_id("msg")
        self.model = model
        self.finished = False
        self.error: Error | None = None
        self.message: dict[str, Any] | None = None
        """The folded `Message`, once the stream finished."""
        self._input_tokens = input_tokens
        self._seal = seal
        self._show_thinking = show_thinking
        self._stops = StopTexts(stop_sequences or [])
        self._blocks: list[dict[str, Any]] = []
        self._open: str | None = None
        """The kind of the block being streamed (the last one), or None."""
        self._thinking: list[str] = []
        self._text_parts: list[str] = []
        self._open_call: int | None = None
        self._arguments: list[str] = []
        self._usage: Usage | None = None
        self._output_chars = 0
        self._server_tools = dict(server_tools or {})
        self._seal_result = seal_result or (lambda text: text)
        self._context_management = context_management
        self._container = container
        self._server_calls: dict[int, tuple[str, str]] = {}
        """Canonical index of a server-run call of the current generation -> its block's id and
        server tool (`web_search`, `web_fetch`, `tool_search_tool` or `mcp`), or code function
        (`bash`, `text_editor`, `python`)."""
        self._citations: dict[int, dict[str, Any]] = {}
        self._searches = 0
        self._fetches = 0
        self._broken: Error | None = None
        """Set when a call's arguments are not a JSON object: a `tool_use` block cannot hold them,
        so the answer fails, as a Responses answer does."""

    def start(self) -> list[dict[str, Any]]:
        message = {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": self._input_tokens, "output_tokens": 0,
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}  # fmt: skip
        return [{"type": "message_start", "message": message}, {"type": "ping"}]  # Anthropic pings right away

    def feed(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, (TextDelta, RefusalDelta)):
            return self._text_delta(event.text)
        if isinstance(event, ReasoningDelta):
            return self._reasoning(event.text)
        if isinstance(event, ToolCallDelta):
            return self._arguments_delta(event)
        if isinstance(event, ToolCallStart):
            out = self._flush_text() + self._close()
            self._open_call = event.index
            self._arguments = []
            origin = self._server_tools.get(event.name)
            if origin is not None and origin.kind == "mcp":
                block_id = new_id("mcptoolu")
                self._server_calls[event.index] = (block_id, "mcp")
                return out + self._open_block("mcp_tool_use", {"type": "mcp_tool_use", "id": block_id, "name": origin.name,
                                                               "server_name": origin.namespace or "", "input": {}})  # fmt: skip
            if origin is not None and origin.kind == "code_execution":
                block_id = new_id("srvtoolu")
                self._server_calls[event.index] = (block_id, origin.name)
                return out + self._open_block("server_tool_use", {"type": "server_tool_use", "id": block_id,
                                                                  "name": BLOCK_NAMES[origin.name], "input": {}})  # fmt: skip
            if origin is not None:
                block_id, tool = new_id("srvtoolu"), origin.kind
                self._server_calls[event.index] = (block_id, tool)
                name = origin.name if tool == "tool_search_tool" else tool  # `tool_search_tool_regex` or `_bm25`
                return out + self._open_block("server_tool_use", {"type": "server_tool_use", "id": block_id,
                                                                  "name": name, "input": {}})  # fmt: skip
            return out + self._open_block("tool_use", {"type": "tool_use", "id": event.id, "name": event.name,
                                                       "input": {}})  # fmt: skip
        if isinstance(event, ToolResult):
            return self._search_result(event)
        if isinstance(event, ToolCallEnd):
            out = self._close() if self._open_call == event.index else []
            return out + self._fail(self._broken) if self._broken is not None else out
        if isinstance(event, Usage):  # one per generation: several when the server searched between
            self._usage = event if self._usage is None else Usage(
                self._usage.input_tokens + event.input_tokens, self._usage.output_tokens + event.output_tokens,
                self._usage.cached_tokens + event.cached_tokens, self._usage.reasoning_tokens + event.reasoning_tokens)
            return []
        if isinstance(event, Finish):
            return self._finish(STOP_REASONS.get(event.reason, "end_turn"), None)
        if isinstance(event, Error):
            return self._fail(event)
        return []

    def _fail(self, error: Error) -> list[dict[str, Any]]:
        self.finished = True
        self.error = error
        return [error_envelope(error.status, error_message(error))]

    # --- blocks ------------------------------------------------------------------------------

    def _open_block(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        self._open = kind
        self._blocks.append(block)
        return [{"type": "content_block_start", "index": len(self._blocks) - 1, "content_block": dict(block)}]

    def _close(self) -> list[dict[str, Any]]:
        """End the block being streamed (a thinking block gets its signature first)."""
        if self._open is None:
            return []
        index = len(self._blocks) - 1
        block = self._blocks[index]
        out: list[dict[str, Any]] = []
        if self._open == "thinking":
            text = "".join(self._thinking)
            block["signature"] = self._seal(text)
            if self._show_thinking:
                block["thinking"] = text
            out.append({"type": "content_block_delta", "index": index,
                        "delta": {"type": "signature_delta", "signature": block["signature"]}})  # fmt: skip
        elif self._open == "text":
            block["text"] = "".join(self._text_parts)
            out += self._cite(index, block)
        elif self._open in ("tool_use", "server_tool_use", "mcp_tool_use"):
            arguments = _input(self._arguments)
            if arguments is None and self._open != "mcp_tool_use":  # an MCP call's result says why it did not run
                self._broken = Error("server_error", f"The model called `{block['name']}` with arguments that are "
                                     "not a JSON object.", 502)  # fmt: skip
            block["input"] = arguments or {}
            self._open_call = None
        self._open = None
        out.append({"type": "content_block_stop", "index": index})
        return out

    def _search_result(self, result: ToolResult) -> list[dict[str, Any]]:
        """The `web_search_tool_result` block of a search the server ran (whole, at its start),
        the `web_fetch_tool_result` block of a page it fetched, or the `mcp_tool_result` block of
        an MCP call."""
        call = self._server_calls.pop(result.index, None)
        if call is None:
            return []
        block_id, tool = call
        out = self._flush_text() + self._close()
        data = result.data or {}
        if tool == "web_fetch":
            return out + self._fetch_result(block_id, result, data)
        if tool == "tool_search_tool":
            return out + self._tool_search_result(block_id, result, data)
        if tool in RESULT_TYPES:
            return out + self._code_result(block_id, tool, result, data)
        if tool == "mcp":
            text = result.error if result.error is not None else result.output
            block = {"type": "mcp_tool_result", "tool_use_id": block_id, "is_error": result.error is not None,
                     "content": [{"type": "text", "text": text}]}  # fmt: skip
            return out + self._open_block("mcp_tool_result", block) + self._close()
        self._searches += 1
        self._citations.update(data.get("citations") or {})
        content: Any
        if result.error:
            code = SEARCH_ERRORS.get(str(data.get("outcome")), "unavailable")
            content = {"type": "web_search_tool_result_error", "error_code": code}
        else:
            content = [{"type": "web_search_result", "url": hit["url"], "title": hit["title"], "page_age": None,
                        "encrypted_content": self._seal_result(hit["text"])} for hit in data.get("results") or ()]  # fmt: skip
        out += self._open_block("web_search_tool_result", {"type": "web_search_tool_result", "tool_use_id": block_id,
                                                           "content": content})  # fmt: skip
        return out + self._close()

    def _tool_search_result(self, block_id: str, result: ToolResult, data: dict[str, Any]) -> list[dict[str, Any]]:
        """The tools a tool search found, as `tool_reference`s; a search that could not run (a bad
        pattern) is an error the block holds, as Anthropic's (the `anthropic` SDK's
        `BetaToolSearchToolResultBlock`)."""
        content: dict[str, Any]
        if result.error:
            content = {"type": "tool_search_tool_result_error", "error_code": data.get("error_code") or "unavailable",
                       "error_message": result.error}  # fmt: skip
        else:
            content = {"type": "tool_search_tool_search_result", "tool_references": [
                {"type": "tool_reference", "tool_name": name} for name in data.get("tools_found") or ()]}  # fmt: skip
        out = self._open_block("tool_search_tool_result", {"type": "tool_search_tool_result", "tool_use_id": block_id,
                                                           "content": content})  # fmt: skip
        return out + self._close()

    def _code_result(self, block_id: str, function: str, result: ToolResult, data: dict[str, Any]) -> list[dict[str, Any]]:
        """A code call's result block; the container's expiry moves with each use."""
        call = next((block for block in self._blocks if block.get("id") == block_id), {})
        content = result_content(function, result.error, data, call.get("input") or {})
        expires = (data.get("container") or {}).get("expires_at")
        if self._container is not None and isinstance(expires, int):
            self._container = {**self._container, "expires_at": rfc3339(expires)}
        block = {"type": RESULT_TYPES[function], "tool_use_id": block_id, "content": content}
        return self._open_block(block["type"], block) + self._close()

    def _fetch_result(self, block_id: str, result: ToolResult, data: dict[str, Any]) -> list[dict[str, Any]]:
        self._fetches += 1
        content: dict[str, Any]
        page = data.get("fetch")
        if result.error or not isinstance(page, dict):
            content = {"type": "web_fetch_tool_result_error",
                       "error_code": FETCH_ERRORS.get(str(data.get("outcome")), "unavailable")}  # fmt: skip
        else:
            document: dict[str, Any] = {"type": "document", "title": page["title"],
                                        "source": {"type": "text", "media_type": "text/plain", "data": page["text"]}}  # fmt: skip
            if page.get("citations") is not None:
                document["citations"] = {"enabled": page["citations"]}
            content = {"type": "web_fetch_result", "url": page["url"], "retrieved_at": page["retrieved_at"],
                       "content": document}  # fmt: skip
        out = self._open_block("web_fetch_tool_result", {"type": "web_fetch_tool_result", "tool_use_id": block_id,
                                                         "content": content})  # fmt: skip
        return out + self._close()

    def _cite(self, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        """`[n]` naming a search result, as a citation of the text block (`citations_delta`)."""
        if not self._citations:
            return []
        citations = []
        for match in CITATION.finditer(block["text"]):
            source = self._citations.get(int(match.group(1)))
            if source is not None:
                citations.append({"type": "web_search_result_location", "url": source["url"], "title": source["title"],
                                  "cited_text": source.get("text") or "",
                                  "encrypted_index": self._seal_result(match.group(1))})  # fmt: skip
        if citations:
            block["citations"] = citations
        return [{"type": "content_block_delta", "index": index, "delta": {"type": "citations_delta", "citation": c}}
                for c in citations]  # fmt: skip

    def _reasoning(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        self._output_chars += len(text)
        out: list[dict[str, Any]] = []
        if self._open != "thinking":
            out += self._flush_text() + self._close()
            self._thinking = []
            out += self._open_block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        self._thinking.append(text)
        if self._show_thinking:
            out.append(self._delta({"type": "thinking_delta", "thinking": text}))
        return out

    def _text_delta(self, piece: str) -> list[dict[str, Any]]:
        if self._stops.hit is not None:
            return []
        text = self._stops.feed(piece)
        out = self._text(text)
        if self._stops.hit is not None:
            out += self._finish("stop_sequence", self._stops.hit)
        return out

    def _flush_text(self) -> list[dict[str, Any]]:
        """Text held back as the possible start of a stop sequence, once something else comes."""
        return self._text(self._stops.flush())

    def _text(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        self._output_chars += len(text)
        out: list[dict[str, Any]] = []
        if self._open != "text":
            out += self._close()
            self._text_parts = []
            out += self._open_block("text", {"type": "text", "text": ""})
        self._text_parts.append(text)
        out.append(self._delta({"type": "text_delta", "text": text}))
        return out

    def _arguments_delta(self, event: ToolCallDelta) -> list[dict[str, Any]]:
        if not event.arguments:
            return []
        if event.index != self._open_call:
            # Engines stream calls one after another; Anthropic's blocks do not interleave.
            log.warning("dropping arguments of tool call %d that came after its block ended", event.index)
            return []
        self._output_chars += len(event.arguments)
        self._arguments.append(event.arguments)
        return [self._delta({"type": "input_json_delta", "partial_json": event.arguments})]

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": len(self._blocks) - 1, "delta": delta}

    # --- the end -----------------------------------------------------------------------------

    def _finish(self, stop_reason: str, stop_sequence: str | None) -> list[dict[str, Any]]:
        out = self._flush_text() + self._close()
        if self._broken is not None:
            return out + self._fail(self._broken)
        self.finished = True
        usage = self._final_usage()
        delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                 "usage": usage}  # fmt: skip
        self.message = {"id": self.id, "type": "message", "role": "assistant", "model": self.model,
                        "content": self._blocks, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                        "usage": usage}  # fmt: skip
        if self._context_management is not None:
            delta["context_management"] = self.message["context_management"] = self._context_management
        if self._container is not None:
            delta["delta"]["container"] = self.message["container"] = self._container
        out += [delta, {"type": "message_stop"}]
        return out

    def _final_usage(self) -> dict[str, Any]:
        """The engine's counts; Anthropic's `input_tokens` leaves out those read from the cache.
        A generation closed at a stop sequence has no engine count: its output is estimated."""
        if self._usage is None:
            return {"input_tokens": self._input_tokens, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0, "output_tokens": max(1, self._output_chars // 4)}  # fmt: skip
        cached = min(self._usage.cached_tokens, self._usage.input_tokens)
        usage: dict[str, Any] = {"input_tokens": self._usage.input_tokens - cached, "cache_creation_input_tokens": 0,
                                 "cache_read_input_tokens": cached, "output_tokens": self._usage.output_tokens}  # fmt: skip
        if self._searches or self._fetches:
            usage["server_tool_use"] = {"web_search_requests": self._searches, "web_fetch_requests": self._fetches}
        return usage


def _input(arguments: list[str]) -> dict[str, Any] | None:
    """A call's arguments as the `input` object of its block; None when they are not one."""
    text = "".join(arguments)
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
