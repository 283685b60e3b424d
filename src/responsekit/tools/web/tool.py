"""The hosted `web_search` tool as a model sees it: search, open a page, find text in it.

Results are numbered across the response like file_search's (`ServerTools.citations`), and
the model is asked to cite them as `[n]`; the renderer turns those into `url_citation`
annotations. Each call's `action` is the one of OpenAI's `web_search_call` item
(`search`, `open_page`, `find_in_page`). With `external_web_access: false` only the
search is offered: no page is fetched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ...canonical.conversation import FunctionTool
from ...canonical.server_tools import FIND, NAMESPACE, OPEN, SEARCH, action_of, arguments_of
from ...canonical.toolset import ToolOrigin
from .. import ServerTools, ToolOutcome
from ..file_search import CITE
from . import FetchError, Page, Query, SearchError, WebSearch
from .providers import in_domains

_URL = {"type": "string", "description": "The page's full http(s) URL, usually one from the search results."}
DEFINITIONS = {
    SEARCH: FunctionTool(SEARCH, "Search the web. Returns numbered results: title, URL and a summary of each. "
                         "Use it for anything recent or that you are unsure of.",
                         {"type": "object", "properties": {"query": {"type": "string", "description": "What to search for."}},
                          "required": ["query"]}),
    OPEN: FunctionTool(OPEN, "Open a web page and read its text (HTML, PDF or plain text).",
                       {"type": "object", "properties": {"url": _URL}, "required": ["url"]}),
    FIND: FunctionTool(FIND, "Find every place a text occurs in a web page, with the lines around it.",
                       {"type": "object", "properties": {"url": _URL, "pattern": {"type": "string",
                        "description": "The text to look for (case does not matter)."}}, "required": ["url", "pattern"]}),
}

CONTEXT_SIZES = {"low": (0.5, 300, 3_000), "medium": (1.0, 700, 10_000), "high": (2.0, 1_500, 30_000)}
"""`search_context_size` -> (share of `web_search_max_results`, characters of each result's
summary, characters of an opened page) the model reads."""
MAX_MATCHES = 10
MAX_CALLS = 24
"""Web calls one response may make: past it each call is an error telling the model to answer, so a
model that keeps searching cannot spend the operator's search quota (`max_tool_calls` stops the
loop itself, when the request sets it)."""
CITED_CHARS = 150
"""The source text a citation carries where the client shows it (Anthropic's `cited_text`)."""


@dataclass(slots=True)
class _Session:
    """One request's web tool: what it may do, and what it has read so far."""

    web: WebSearch
    tools: ServerTools
    domains: tuple[str, ...]
    blocked: tuple[str, ...]
    """Domains whose results are left out (Anthropic's `blocked_domains`)."""
    location: dict[str, Any]
    count: int
    snippet_chars: int
    page_chars: int
    calls: int = 0
    numbers: dict[str, int] = field(default_factory=dict)
    """URL -> the number the model cites it by."""
    pages: dict[str, Page] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    """URL -> its title in the search results (for pages that name none themselves: text, most PDFs)."""

    def number(self, url: str) -> int:
        if url not in self.numbers:
            self.tools.citations += 1
            self.numbers[url] = self.tools.citations
        return self.numbers[url]

    def source(self, page: Page) -> dict[str, str]:
        """What a citation of `page` names."""
        title = page.title if page.title != page.url else self.titles.get(page.url, page.url)
        return {"url": page.url, "title": title, "text": _cut(" ".join(page.text.split()), CITED_CHARS)}

    def spent(self, action: dict[str, Any]) -> ToolOutcome | None:
        """The error of a call past `MAX_CALLS`, or None (the call counts)."""
        self.calls += 1
        if self.calls <= MAX_CALLS:
            return None
        return ToolOutcome("", error=f"This response has used its {MAX_CALLS} web calls: answer with what you found.",
                           data={"action": action, "outcome": "budget"})  # fmt: skip

    async def search(self, arguments: str) -> ToolOutcome:
        value = arguments_of(arguments)
        query = value.get("query") or next(iter(value.get("queries") or ()), None)
        action = action_of(SEARCH, arguments)
        if (spent := self.spent(action)) is not None:
            return spent
        if not isinstance(query, str) or not query.strip():
            return ToolOutcome("", error='Give a query: {"query": "..."}.', data={"action": action})
        try:
            hits = await self.web.search(Query(query, self.count, self.domains, self.location.get("country"),
                                               self.location.get("city"), self.location.get("region")))  # fmt: skip
        except SearchError as error:
            return ToolOutcome("", error=f"The web search failed: {error.message}",
                               data={"action": action, "outcome": error.outcome})  # fmt: skip
        hits = [hit for hit in hits if not (self.blocked and in_domains(hit.url, self.blocked))]
        self.tools.urls.update(hit.url for hit in hits)
        action["sources"] = [{"type": "url", "url": hit.url} for hit in hits]
        results = [{"url": hit.url, "title": hit.title, "text": hit.snippet} for hit in hits]
        citations, blocks = {}, []
        for hit in hits:
            n = self.number(hit.url)
            citations[n] = {"url": hit.url, "title": hit.title, "text": _cut(hit.snippet, CITED_CHARS)}
            self.titles.setdefault(hit.url, hit.title)
            blocks.append(f"[{n}] {hit.title}\nURL: {hit.url}\n{_cut(hit.snippet, self.snippet_chars)}")
        if not blocks:
            return ToolOutcome(f"No results for {query!r}.", data={"action": action, "citations": {}, "results": []})
        data = {"action": action, "citations": citations, "results": results}
        return ToolOutcome("\n\n".join(blocks) + f"\n\n{CITE}", data=data)

    async def open(self, arguments: str) -> ToolOutcome:
        action = action_of(OPEN, arguments)
        page = await self._page(action)
        if isinstance(page, ToolOutcome):
            return page
        n = self.number(page.url)
        text = _cut(page.text, self.page_chars) or "(The page has no readable text.)"
        output = f"[{n}] {page.title}\nURL: {page.url}\n\n{text}\n\n{CITE}"
        return ToolOutcome(output, data={"action": action, "citations": {n: self.source(page)}})

    async def find(self, arguments: str) -> ToolOutcome:
        action = action_of(FIND, arguments)
        pattern = action.get("pattern") or ""
        if not pattern.strip():
            return ToolOutcome("", error='Give the text to find: {"url": "...", "pattern": "..."}.',
                               data={"action": action})  # fmt: skip
        page = await self._page(action)
        if isinstance(page, ToolOutcome):
            return page
        n = self.number(page.url)
        found = [match.start() for match in re.finditer(re.escape(pattern), page.text, re.IGNORECASE)]
        if not found:
            return ToolOutcome(f"[{n}] {page.url}: {pattern!r} does not occur in the page.",
                               data={"action": action, "citations": {n: self.source(page)}})  # fmt: skip
        excerpts = [" ".join(page.text[max(0, at - 200): at + len(pattern) + 200].split()) for at in found[:MAX_MATCHES]]
        more = f"\n({len(found) - MAX_MATCHES} more matches not shown.)" if len(found) > MAX_MATCHES else ""
        output = (f"[{n}] {page.title}\nURL: {page.url}\n{len(found)} match(es) of {pattern!r}:\n\n"
                  + "\n\n".join(f"... {excerpt} ..." for excerpt in excerpts) + more + f"\n\n{CITE}")  # fmt: skip
        return ToolOutcome(output, data={"action": action, "citations": {n: self.source(page)}})

    async def _page(self, action: dict[str, Any]) -> Page | ToolOutcome:
        """The page `action` names, read once per response; or the outcome saying why not."""
        if (spent := self.spent(action)) is not None:
            return spent
        url = action.get("url") or ""
        if not url.strip():
            return ToolOutcome("", error='Give the page\'s URL: {"url": "https://..."}.', data={"action": action})
        url = url.strip()
        if self.domains and not in_domains(url, self.domains):
            return ToolOutcome("", error=f"{url} is outside the domains this search may use: "
                               f"{', '.join(self.domains)}.", data={"action": action})  # fmt: skip
        if url in self.pages:
            return self.pages[url]
        try:
            page = self.pages[url] = await self.web.fetch(url)
        except FetchError as error:
            return ToolOutcome("", error=f"The page could not be read: {error.message}", data={"action": action})
        return page


def add_web_search(tools: ServerTools, spec: dict[str, Any], web: WebSearch) -> None:
    """Offer the web functions for one request's `web_search` tool (`spec`, as the client sent it)."""
    share, snippet_chars, page_chars = CONTEXT_SIZES.get(str(spec.get("search_context_size") or "medium"),
                                                         CONTEXT_SIZES["medium"])  # fmt: skip
    filters = spec.get("filters") or {}
    domains = tuple(str(d) for d in (filters.get("allowed_domains") or ()) if d)
    blocked = tuple(str(d) for d in (filters.get("blocked_domains") or ()) if d)
    location = spec.get("user_location") if isinstance(spec.get("user_location"), dict) else {}
    session = _Session(web, tools, domains, blocked, location, max(1, min(20, round(web.max_results * share))),
                       snippet_chars, page_chars)  # fmt: skip
    tools.add(ToolOrigin("web_search", SEARCH, NAMESPACE), DEFINITIONS[SEARCH], session.search)
    if spec.get("external_web_access", True) is not False:
        tools.add(ToolOrigin("web_search", OPEN, NAMESPACE), DEFINITIONS[OPEN], session.open)
        tools.add(ToolOrigin("web_search", FIND, NAMESPACE), DEFINITIONS[FIND], session.find)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + " …"
