"""The loop of server-run tools: generations, with the tools the server runs in between.

The Responses orchestrator runs it for every response; Chat Completions runs it for
`web_search_options`. What the model calls is told apart by its name (`ToolSet.origin`); a
server tool the request's `allowed_tools` left out is not run, and the model reads why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace

from ..canonical.conversation import GenerationRequest, Message, TextPart, ToolCall
from ..canonical.events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallStart,
    ToolResult,
)
from ..canonical.toolset import ToolSet
from ..tools import ServerTools, ToolOutcome


async def with_server_tools(
    generation: GenerationRequest,
    toolset: ToolSet,
    server_tools: ServerTools,
    generate: Callable[[GenerationRequest], AsyncIterator[Event]],
    max_tool_calls: int | None = None,
) -> AsyncIterator[Event]:
    """Generations, with server-run tools in between.

    When the model calls a tool this server runs (file_search, web search, tool search, MCP), the
    call is run, its result goes to the renderer and, with the call, back to the model in a next
    generation, the deferred tools a tool search found offered from then on — until the model
    answers, calls a client tool, or `max_tool_calls` calls have run (then the model must answer
    without tools).
    """
    calls_run = 0
    while True:
        server_calls: dict[int, tuple[ToolCallStart, list[str]]] = {}
        client_call = failed = False
        text: list[str] = []
        reasoning: list[str] = []
        finish: Finish | None = None
        async with aclosing(generate(generation)) as events:
            async for event in events:
                if isinstance(event, ToolCallStart):
                    if toolset.origin(event.name).server_side:
                        server_calls[event.index] = (event, [])
                    else:
                        client_call = True
                elif isinstance(event, ToolCallDelta) and event.index in server_calls:
                    server_calls[event.index][1].append(event.arguments)
                elif isinstance(event, TextDelta):
                    text.append(event.text)
                elif isinstance(event, ReasoningDelta):
                    reasoning.append(event.text)
                elif isinstance(event, Error):
                    failed = True
                elif isinstance(event, Finish) and server_calls:
                    finish = event
                    continue  # the response goes on after the tools ran
                yield event
        if failed or finish is None:
            return
        calls, answers, found = [], [], []
        for index, (start, parts) in server_calls.items():
            arguments = "".join(parts) or "{}"
            if toolset.allowed is None or start.name in toolset.allowed:
                outcome = await server_tools.run(toolset.origin(start.name), arguments)
            else:  # not offered this time (`allowed_tools`), whatever the model made of its history
                outcome = ToolOutcome("", error=f"The tool {start.name} is not among the tools allowed for this request.")
            calls_run += 1
            result = ToolResult(index, outcome.output, outcome.error, outcome.data)
            yield result
            calls.append(ToolCall(start.id, start.name, arguments))
            names = list((outcome.data or {}).get("tools_found") or ())
            found += names
            answers.append(Message("tool", [TextPart(result.read)], tool_call_id=start.id, tools_found=names))
        if client_call or finish.reason == "length":
            yield Finish("tool_calls" if client_call else finish.reason)
            return
        assistant = Message("assistant", [TextPart("".join(text))] if text else [], "".join(reasoning) or None, calls)
        limit = max_tool_calls
        exhausted = limit is not None and calls_run >= limit
        generation = replace(
            generation,
            messages=[*generation.messages, assistant, *answers],
            tool_choice="none" if exhausted else "auto",
            tools=[*generation.tools, *(function for function in toolset.offered()
                                        if function.name in found and function not in generation.tools)],
        )
