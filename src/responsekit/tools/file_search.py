"""The `file_search` tool: the model searches the request's vector stores; results come back numbered.

Results are numbered across the whole response (`[1]`, `[2]`…) and the model is asked to
cite what it uses that way; the renderer turns those markers into `file_citation`
annotations.
"""

from __future__ import annotations

import json
from typing import Any

from ..canonical.conversation import FunctionTool
from ..canonical.errors import APIError
from ..canonical.toolset import ToolOrigin
from ..files.service import VectorStores
from ..operations import tracing
from . import ServerTools, ToolOutcome

FUNCTION = FunctionTool(
    "file_search",
    "Search the user's files for passages relevant to the queries. Use it before answering questions about "
    "their documents; write several short queries for different wordings.",
    {
        "type": "object",
        "properties": {"queries": {"type": "array", "items": {"type": "string"}, "description": "Search queries."}},
        "required": ["queries"],
    },
)
CITE = "Cite each result you use right after the sentence that uses it, as [n] with its number."


async def add_file_search(
    tools: ServerTools, spec: dict[str, Any], position: int, owner: str, stores: VectorStores
) -> None:
    """Offer the search over `spec`'s vector stores (each must exist for this owner)."""
    store_ids = spec.get("vector_store_ids")
    param = f"tools[{position}].vector_store_ids"
    if not isinstance(store_ids, list) or not store_ids or not all(isinstance(i, str) for i in store_ids):
        raise APIError(400, "file_search needs `vector_store_ids`, a list of ids.", param=param, code="invalid_value")
    for store_id in store_ids:
        if await stores.catalog.get_store(owner, store_id) is None:
            raise APIError(404, f"No vector store found with id '{store_id}'.", param=param, code="not_found")
    max_results = spec.get("max_num_results", 10)

    async def run(arguments: str) -> ToolOutcome:
        queries = _queries(arguments)
        if not queries:
            return ToolOutcome("", error="Give at least one query: {\"queries\": [\"...\"]}.")
        try:
            with tracing.span("execute_tool file_search", {"gen_ai.operation.name": "execute_tool",
                                                           "gen_ai.tool.name": "file_search"}):  # fmt: skip
                hits = await stores.search(owner, store_ids, queries, max_results, spec.get("filters"),
                                           spec.get("ranking_options"))  # fmt: skip
        except APIError as error:
            return ToolOutcome("", error=error.message)
        first = tools.citations + 1
        tools.citations += len(hits)
        results = [{"file_id": hit.file_id, "filename": hit.filename, "score": hit.score, "text": hit.text,
                    "attributes": hit.attributes} for hit in hits]  # fmt: skip
        citations = {first + n: {"file_id": hit.file_id, "filename": hit.filename} for n, hit in enumerate(hits)}
        output = format_results(results, first) + (f"\n\n{CITE}" if hits else "")
        return ToolOutcome(output, data={"results": results, "citations": citations})

    tools.add(ToolOrigin("file_search", "file_search"), FUNCTION, run)


def _queries(arguments: str) -> list[str]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return [arguments.strip()] if arguments.strip() else []
    if not isinstance(value, dict):
        return []
    queries = value.get("queries", value.get("query", []))
    queries = [queries] if isinstance(queries, str) else queries
    return [q for q in queries if isinstance(q, str) and q.strip()] if isinstance(queries, list) else []


def format_results(results: list[dict[str, Any]], first_number: int = 1) -> str:
    """Search results as the model reads them, numbered so that it can cite them as `[n]`."""
    blocks = [
        f"[{first_number + position}] {result.get('filename', '')} (score {float(result.get('score') or 0):.3f})\n"
        f"{result.get('text', '')}"
        for position, result in enumerate(results)
    ]
    return "\n\n".join(blocks) if blocks else "No results."
