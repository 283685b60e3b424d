"""Tool search run by the server over the request's deferred tools: the Messages API's
`tool_search_tool_regex_*` and `tool_search_tool_bm25_*` tools, and the Responses API's
`tool_search` with `execution: "server"` (BM25; https://developers.openai.com/api/docs/guides/tools-tool-search).

The model is offered the search as a function taking a `query` (a Python regular expression,
or natural language for BM25); the server searches the deferred tools' names, descriptions and
argument names and descriptions, and answers with at most `MAX_FOUND` of them, which are offered
from then on (`Message.tools_found`, `orchestration/tool_search.py`), as Anthropic's tool search
tool does (https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections import Counter
from collections.abc import Sequence

from ..canonical.conversation import FunctionTool, found_tools
from ..canonical.server_tools import TOOL_SEARCHES, ToolSearchMode
from ..canonical.toolset import ToolOrigin
from . import ServerTools, ToolOutcome

MAX_FOUND = 5
"""Tools one search answers with (Anthropic's answers with 3 to 5)."""
MAX_PATTERN = 200
"""The longest regular expression a search takes (Anthropic's limit)."""
MAX_DOCUMENT = 2000
"""Characters of a tool's text a regular expression runs over, so that a slow pattern stays bounded."""
TIMEOUT = 1.0
"""Seconds a regular expression may run over all the tools; then the search fails
(`execution_time_exceeded`)."""
K1, B = 1.2, 0.75
"""Okapi BM25's usual parameters."""
STOP_WORDS = frozenset({"a", "an", "and", "are", "as", "at", "be", "by", "can", "for", "from", "how", "i", "in",
                        "is", "it", "me", "my", "of", "on", "or", "that", "the", "this", "to", "what", "which",
                        "with"})  # fmt: skip
"""Words a natural-language query holds that say nothing of the tool it looks for."""

DESCRIPTIONS: dict[ToolSearchMode, str] = {
    "regex": "Search the tools not yet loaded with a Python regular expression (re.search, case-sensitive; "
             "use (?i) to ignore case) over their names, descriptions and arguments. The tools found become "
             "callable.",
    "bm25": "Search the tools not yet loaded with a natural-language query over their names, descriptions and "
            "arguments. The tools found become callable.",
}  # fmt: skip
QUERIES: dict[ToolSearchMode, str] = {"regex": "A Python regular expression, at most 200 characters.",
                            "bm25": "What the tool should do, in a few words."}  # fmt: skip


class SearchFailed(Exception):
    """A search that could not run; `code` is Anthropic's `error_code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def add_tool_search(server_tools: ServerTools, mode: ToolSearchMode, tools: Sequence[FunctionTool]) -> None:
    """Offer the `mode` search over the deferred ones of `tools`."""
    deferred = [tool for tool in tools if tool.deferred]
    name = TOOL_SEARCHES[mode]
    parameters = {"type": "object", "properties": {"query": {"type": "string", "description": QUERIES[mode]}},
                  "required": ["query"]}  # fmt: skip

    async def run(arguments: str) -> ToolOutcome:
        try:
            query = _query(arguments)
            found = await _regex(query, deferred) if mode == "regex" else bm25(query, deferred)
        except SearchFailed as failed:
            return ToolOutcome("", error=str(failed), data={"error_code": failed.code})
        names = [tool.name for tool in found]
        return ToolOutcome(found_tools(found), data={"tools_found": names})

    server_tools.add(ToolOrigin("tool_search_tool", name), FunctionTool(name, DESCRIPTIONS[mode], parameters), run)


def _query(arguments: str) -> str:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        value = {"query": arguments}
    query = value.get("query") if isinstance(value, dict) else None
    if not isinstance(query, str) or not query.strip():
        raise SearchFailed("invalid_tool_input", "The search needs a non-empty `query`.")
    return query


def document(tool: FunctionTool) -> str:
    """A tool's searchable text: its name, description, and its arguments' names and descriptions."""
    texts = [tool.name, tool.description or ""]
    properties = (tool.parameters or {}).get("properties")
    for argument, schema in (properties if isinstance(properties, dict) else {}).items():
        described = schema.get("description") if isinstance(schema, dict) else None
        texts += [str(argument), described if isinstance(described, str) else ""]
    return "\n".join(text for text in texts if text)


async def _regex(query: str, tools: Sequence[FunctionTool]) -> list[FunctionTool]:
    """The tools whose text the pattern matches, in the request's order. The pattern runs in a
    thread, bounded in length and in the text it reads, and given up on after `TIMEOUT`."""
    if len(query) > MAX_PATTERN:
        raise SearchFailed("invalid_tool_input", f"The pattern is longer than {MAX_PATTERN} characters.")
    try:
        pattern = re.compile(query)
    except re.error as exc:
        raise SearchFailed("invalid_tool_input", f"Invalid regular expression: {exc}.") from None
    documents = [document(tool)[:MAX_DOCUMENT] for tool in tools]

    def search() -> list[FunctionTool]:
        return [tool for tool, text in zip(tools, documents, strict=True) if pattern.search(text)][:MAX_FOUND]

    try:
        return await asyncio.wait_for(asyncio.to_thread(search), TIMEOUT)
    except TimeoutError:
        raise SearchFailed("execution_time_exceeded", "The regular expression took too long.") from None


def tokens(text: str) -> list[str]:
    """Lowercase words, split at underscores, punctuation and camelCase, without stop words."""
    words = (word.lower() for word in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", text))
    return [word for word in words if word not in STOP_WORDS]


def bm25(query: str, tools: Sequence[FunctionTool]) -> list[FunctionTool]:
    """The best `MAX_FOUND` tools for `query` by Okapi BM25 over their text; ties keep the
    request's order, and a tool sharing no word with the query is not found."""
    terms = set(tokens(query))
    bags = [Counter(tokens(document(tool))) for tool in tools]
    if not terms or not bags:
        return []
    average = sum(sum(bag.values()) for bag in bags) / len(bags) or 1.0
    frequency = {term: sum(1 for bag in bags if term in bag) for term in terms}

    def score(bag: Counter[str]) -> float:
        length = sum(bag.values())
        total = 0.0
        for term in terms:
            count = bag.get(term, 0)
            if count:
                idf = math.log(1 + (len(bags) - frequency[term] + 0.5) / (frequency[term] + 0.5))
                total += idf * count * (K1 + 1) / (count + K1 * (1 - B + B * length / average))
        return total

    scored: list[tuple[float, int, FunctionTool]] = [(score(bag), position, tool)
                                            for position, (bag, tool) in enumerate(zip(bags, tools, strict=True))]  # fmt: skip
    ranked = sorted((entry for entry in scored if entry[0] > 0), key=lambda entry: (-entry[0], entry[1]))
    return [tool for _, _, tool in ranked[:MAX_FOUND]]
