"""Tools the server runs itself inside a response: file_search, web search and remote MCP servers.

The model sees them as functions; when it calls one, the orchestrator runs it and feeds
the result back until the model answers. Each request's server tools are prepared once
(MCP servers are listed, or their listing is taken from the conversation's history).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..canonical.conversation import FunctionTool
from ..canonical.toolset import ToolOrigin

log = logging.getLogger(__name__)

REASON_CHARS = 300
"""Characters of an unexpected exception the model reads (its whole traceback is in the log)."""


@dataclass(slots=True)
class ToolOutcome:
    output: str
    """What the model reads."""
    error: str | None = None
    data: dict[str, Any] | None = None
    """What the client's item shows beyond the output (search results, citations)."""


Runner = Callable[[str], Awaitable[ToolOutcome]]


async def run_guarded(name: str, runner: Runner, arguments: str) -> ToolOutcome:
    """`runner`'s outcome for `arguments`. Whatever it raises (a parser's error, a missing module,
    a bug) is logged and becomes the call's failure, which the model reads: one tool failing must
    not fail the response around it. Cancellation is not a failure and goes through."""
    try:
        return await runner(arguments)
    except Exception as exc:
        log.exception("the server-run tool %s failed", name)
        reason = f"{type(exc).__name__}: {exc}"[:REASON_CHARS]
        return ToolOutcome("", error=f"The tool {name} failed on the server ({reason}).")


@dataclass(slots=True)
class ServerTools:
    """The server-run tools of one request."""

    functions: list[tuple[ToolOrigin, FunctionTool]] = field(default_factory=list)
    """Each tool as the model sees it (its function's name is the tool's own)."""
    ready_items: list[dict[str, Any]] = field(default_factory=list)
    """Items produced before generation (MCP listings, approved calls run now)."""
    runners: dict[tuple[str, str | None, str], Runner] = field(default_factory=dict)
    citations: int = 0
    """Search results numbered so far in this response (the next one is `citations + 1`)."""
    urls: set[str] = field(default_factory=set)
    """URLs the web tools' results named in this response (Anthropic's `web_fetch` may open them)."""

    def add(self, origin: ToolOrigin, function: FunctionTool, runner: Runner) -> None:
        self.functions.append((origin, function))
        self.runners[(origin.kind, origin.namespace, origin.name)] = runner

    async def run(self, origin: ToolOrigin, arguments: str) -> ToolOutcome:
        runner = self.runners.get((origin.kind, origin.namespace, origin.name))
        if runner is None:
            return ToolOutcome("", error=f"The tool {origin.name} is not available.")
        return await run_guarded(origin.name, runner, arguments)
