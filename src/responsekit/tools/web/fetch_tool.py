"""Anthropic's `web_fetch_*` server tool as a model sees it: one function that reads a page.

The page is read by the same fetch path as the Responses `web_open_page` function
(`fetch.py`: the URL policy at every hop, time and size limits, text out of HTML and PDF).
Each outcome's `data` holds what the Messages renderer puts in a `web_fetch_tool_result`
block: the page (`fetch`) or why it failed (`outcome`, mapped to Anthropic's error codes in
`api/messages/render.py`). Limits are Anthropic's documented ones
(https://docs.claude.com/en/docs/agents-and-tools/tool-use/web-fetch-tool): `max_uses` per
request, `allowed_domains` / `blocked_domains`, `max_content_tokens`, a URL of at most 250
characters, and only URLs already in the conversation: the user's messages, tool results, and the
results of this request's searches and fetches (`url_not_in_prior_context` otherwise), so that
text a page plants cannot have the model send data to an address of its own making.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...canonical.conversation import FunctionTool
from ...canonical.server_tools import FETCH, NAMESPACE, arguments_of
from ...canonical.toolset import ToolOrigin
from .. import ServerTools, ToolOutcome
from . import FetchError, WebSearch
from .providers import in_domains
from .tool import _cut

MAX_URL_CHARS = 250
DEFAULT_PAGE_CHARS = 30_000
"""Characters of a page the model reads when the tool sets no `max_content_tokens`."""
CHARS_PER_TOKEN = 4
_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+", re.IGNORECASE)

DEFINITION = FunctionTool(
    FETCH,
    "Fetch a web page or PDF by its full http(s) URL and read its text. Use URLs the user gave or that "
    "earlier results named.",
    {"type": "object", "properties": {"url": {"type": "string", "description": "The page's full http(s) URL."}},
     "required": ["url"]},
)


@dataclass(slots=True)
class _Fetches:
    """One request's `web_fetch` tool: what it may fetch, and how often."""

    web: WebSearch
    tools: ServerTools
    context: frozenset[str]
    """The URLs of the conversation's user messages and tool results, as `_key` has them."""
    allowed: tuple[str, ...]
    blocked: tuple[str, ...]
    max_uses: int | None
    page_chars: int
    citations: bool | None
    uses: int = 0

    async def fetch(self, arguments: str) -> ToolOutcome:
        value = arguments_of(arguments)
        url = value.get("url").strip() if isinstance(value.get("url"), str) else ""
        action = {"type": "open_page", "url": url}
        self.uses += 1
        if self.max_uses is not None and self.uses > self.max_uses:
            return _failed(action, "budget", f"This request has used its {self.max_uses} page fetches: answer "
                           "with what you read.")  # fmt: skip
        if not url:
            return _failed(action, "invalid", 'Give the page\'s URL: {"url": "https://..."}.')
        if len(url) > MAX_URL_CHARS:
            return _failed(action, "too_long", f"The URL is longer than {MAX_URL_CHARS} characters.")
        if not self._may_fetch(url):
            return _failed(action, "not_allowed", f"{url} is outside the domains this tool may fetch from.")
        if _key(url) not in self.context and _key(url) not in {_key(seen) for seen in self.tools.urls}:
            return _failed(action, "not_in_context", f"{url} is not in the conversation: only URLs the user "
                           "gave or that search and fetch results named may be fetched.")  # fmt: skip
        try:
            page = await self.web.fetch(url)
        except FetchError as error:
            return _failed(action, error.outcome, f"The page could not be read: {error.message}")
        if not self._may_fetch(page.url):
            return _failed(action, "not_allowed", f"{url} led to {page.url}, outside the domains this tool may "
                           "fetch from.")  # fmt: skip
        self.tools.urls.update(_URL.findall(page.text))
        self.tools.urls.update((url, page.url))
        text = _cut(page.text, self.page_chars) or "(The page has no readable text.)"
        fetched = {"url": page.url, "title": page.title, "text": text,
                   "retrieved_at": datetime.now(UTC).isoformat(), "citations": self.citations}  # fmt: skip
        return ToolOutcome(f"{page.title}\nURL: {page.url}\n\n{text}", data={"action": action, "fetch": fetched})

    def _may_fetch(self, url: str) -> bool:
        if self.allowed and not in_domains(url, self.allowed):
            return False
        return not (self.blocked and in_domains(url, self.blocked))


def _key(url: str) -> str:
    """A URL as compared with those of the conversation: without its fragment, a final slash,
    or punctuation the text put after it."""
    return url.split("#", 1)[0].rstrip(".,;:!?").rstrip("/").lower()


def context_urls(texts: list[str]) -> frozenset[str]:
    """The URLs in `texts` (the conversation's user messages and tool results), for `add_web_fetch`."""
    return frozenset(_key(url) for text in texts for url in _URL.findall(text))


def _failed(action: dict[str, Any], outcome: str, message: str) -> ToolOutcome:
    return ToolOutcome("", error=message, data={"action": action, "outcome": outcome})


def add_web_fetch(tools: ServerTools, spec: dict[str, Any], web: WebSearch, context: frozenset[str]) -> None:
    """Offer the `web_fetch` function for one request's `web_fetch_*` tool (`spec`, checked by
    `check_fetch_spec`); `context`: the conversation's URLs (`context_urls`)."""
    tokens = spec.get("max_content_tokens")
    citations = spec.get("citations")
    session = _Fetches(web, tools, context, tuple(spec.get("allowed_domains") or ()), tuple(spec.get("blocked_domains") or ()),
                       spec.get("max_uses"), tokens * CHARS_PER_TOKEN if tokens else DEFAULT_PAGE_CHARS,
                       citations.get("enabled") is True if isinstance(citations, dict) else None)  # fmt: skip
    tools.add(ToolOrigin("web_fetch", FETCH, NAMESPACE), DEFINITION, session.fetch)
