"""Deferred tools, kept out of the prompt until the client's tool search finds them.

Claude Code and Codex search their tools on the client: tools declared with `defer_loading`
stay out of the model's context until a search result names them (a `tool_reference` block in
a `tool_result`, a `tool_search_output` item), and from then on they are callable
(https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool,
https://developers.openai.com/api/docs/guides/tools-tool-search). Frontends mark the deferred
tools (`FunctionTool.deferred`) and each search result's finds (`Message.tools_found`); this
rule, the same for every protocol, is applied once on the pipeline (`Pipeline.attach`).
"""

from __future__ import annotations

from ..canonical.conversation import GenerationRequest, NamedToolChoice


def withhold_deferred(generation: GenerationRequest) -> None:
    """Leave out of `generation.tools` each deferred tool that no search result in the
    conversation has found (nor the tool choice names)."""
    if not any(tool.deferred for tool in generation.tools):  # nothing to withhold: no need to look
        if not generation.tools:
            generation.parallel_tool_calls = None
        return
    found = {name for message in generation.messages for name in message.tools_found}
    if isinstance(generation.tool_choice, NamedToolChoice):
        found.add(generation.tool_choice.name)
    generation.tools = [tool for tool in generation.tools if not tool.deferred or tool.name in found]
    if not generation.tools:
        generation.parallel_tool_calls = None
