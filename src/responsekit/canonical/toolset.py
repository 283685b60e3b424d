"""The names a model knows tools by, and what each stands for: vocabulary that frontends,
the pipeline and the server-run tools share (docs/architecture.md, The map, by folder).

A frontend maps its client's tools to functions (`api/responses/tools.py`); the
pipeline adds the tools the server runs (`tools.ServerTools`) and, when the model calls
one, finds out from its name whether to run it or hand it to the client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .conversation import FunctionTool
from .errors import APIError

CUSTOM_INPUT = "input"
"""The one argument of a custom tool as the model sees it."""
TOOL_SEARCH = "tool_search"
"""The function a client's tool search is offered as (Codex's `tool_search` tool)."""
CODE_INTERPRETER = "code_interpreter"
"""What a model trained with a built-in code tool calls it (Llama 3.x's raw Python)."""


@dataclass(frozen=True, slots=True)
class ToolOrigin:
    """What a model-facing function name stands for on the client's side.

    `function`, `custom`, `tool_search` and `builtin` calls go back to the client (`builtin`: a
    built-in tool the client runs, `name` its tool type, such as `shell` or `apply_patch`, whose
    calls become that tool's items); `file_search`, `web_search`,
    `web_fetch` (Anthropic's server tool), `tool_search_tool` (Anthropic's server-run tool search,
    `name` the search's), `code_execution` (`name` the code function, `python`, `shell`, `bash`
    or `text_editor`, run in the container `container`) and `mcp` calls the server runs itself
    (`namespace` is then the MCP server's label, or `web` for the web functions), unless they need
    the user's approval first.
    """

    kind: Literal["function", "custom", "tool_search", "builtin", "file_search", "web_search", "web_fetch",
                  "tool_search_tool", "mcp", "code_execution"]
    name: str
    namespace: str | None = None
    needs_approval: bool = False
    container: str | None = None
    """The container a `code_execution` function runs in (`cntr_…`), known before any call."""

    @property
    def server_side(self) -> bool:
        return self.kind in ("file_search", "web_search", "web_fetch", "tool_search_tool", "mcp",
                             "code_execution") and not self.needs_approval  # fmt: skip


@dataclass(slots=True)
class ToolSet:
    """The functions a model is offered, and what each of their names stands for."""

    functions: list[FunctionTool] = field(default_factory=list)
    origins: dict[str, ToolOrigin] = field(default_factory=dict)
    """Model-facing name -> client tool."""
    echo: list[dict[str, Any]] = field(default_factory=list)
    """The tools as the client declared them, for its answer to echo (the Response's `tools`)."""
    allowed: frozenset[str] | None = None
    """Model-facing names the request's tool choice limits the offer to (`allowed_tools`)."""
    declare: Callable[[Any], list[tuple[ToolOrigin, FunctionTool]]] | None = None
    """The frontend's reading of a tool as its client declares it, for the tools a client's tool
    search finds (`found`); its mistakes are `APIError`s."""

    def add(self, entries: Sequence[tuple[ToolOrigin, FunctionTool]]) -> None:
        """Name `entries` for the model: a namespaced tool is `namespace__name` where its name is
        taken twice. A name given twice is the request's error (400)."""
        names = [origin.name for origin in self.origins.values()] + [function.name for _, function in entries]
        for origin, function in entries:
            name = function.name
            model_name = name if not origin.namespace or names.count(name) == 1 else f"{origin.namespace}__{name}"
            if model_name in self.origins:
                raise APIError(400, f"Duplicate tool name `{model_name}`.", param="tools", code="invalid_value")
            self.origins[model_name] = origin
            self.functions.append(replace(function, name=model_name))

    def found(self, declaration: Any) -> list[FunctionTool]:
        """The functions of a tool a client's tool search found, declared here when the request
        does not declare them (Codex sends them only in its `tool_search_output`)."""
        entries = self.declare(declaration) if self.declare is not None else []
        self.add([(origin, function) for origin, function in entries
                  if self.model_name(origin.name, origin.namespace) not in self.origins])  # fmt: skip
        names = {self.model_name(origin.name, origin.namespace) for origin, _ in entries}
        return [function for function in self.functions if function.name in names]

    def offered(self) -> list[FunctionTool]:
        """The functions the model is offered."""
        if self.allowed is None:
            return list(self.functions)
        return [function for function in self.functions if function.name in self.allowed]

    def model_name(self, name: str, namespace: str | None = None) -> str:
        """The name the model knows a tool by (also for tools no longer offered)."""
        for model_name, origin in self.origins.items():
            if origin.name == name and origin.namespace == namespace:
                return model_name
        return f"{namespace}__{name}" if namespace else name

    def origin(self, model_name: str) -> ToolOrigin:
        found = self.origins.get(model_name)
        if found is None and model_name == CODE_INTERPRETER:
            # Llama 3.x writes raw Python after `<|python_tag|>`, a call of its built-in
            # `code_interpreter` (docs/parsing.md, the formats' notes): the `python` offered.
            found = next((origin for origin in self.origins.values()
                          if origin.kind == "code_execution" and origin.name == "python"), None)  # fmt: skip
        return found or ToolOrigin("function", model_name)
