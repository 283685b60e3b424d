"""Web search and page reading for the hosted `web_search` tools (docs/web-search.md).

`WebSearch` is the server's one search engine (`providers.py`, chosen by the operator) and its
page reader (`fetch.py`); `tool.py` offers them to a model as functions for one request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ...operations import tracing
from .. import REASON_CHARS
from ..outbound import UrlPolicy
from .fetch import FetchError, Page, PageFetcher
from .providers import Hit, Provider, ProviderName, Query, SearchError, make_provider

log = logging.getLogger(__name__)

Count = Callable[[str, str, str], None]
"""Counts one operation (`search` or `fetch`) of a provider with its outcome (metrics)."""
ERROR = "error"
"""The outcome of a search or page read that raised what it should not have."""

__all__ = ["FetchError", "Hit", "Page", "Query", "SearchError", "WebSearch", "web_search_from"]


class WebSearch:
    """The operator's search engine and the page reader, shared by every request."""

    def __init__(self, provider: Provider, fetcher: PageFetcher, max_results: int = 5,
                 count: Count | None = None) -> None:  # fmt: skip
        self.provider = provider
        self.fetcher = fetcher
        self.max_results = max_results
        self.count = count or (lambda operation, provider, outcome: None)
        self.reachable: bool | None = None
        self.problem: str | None = None

    async def start(self) -> None:
        """Look at the engine once; one that cannot be reached is logged, never fatal."""
        self.problem = await self.provider.probe()
        self.reachable = self.problem is None
        if self.problem:
            log.warning("web search: %s cannot be reached now (%s); searches will fail until it can",
                        self.provider.name, self.problem)  # fmt: skip
        else:
            log.info("web search: %s at %s", self.provider.name, self.provider.base_url)

    async def search(self, query: Query) -> list[Hit]:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search"}
        try:
            with tracing.span("execute_tool web_search", attributes):
                hits = await self.provider.search(query)
        except SearchError as error:
            self.count("search", self.provider.name, error.outcome)
            log.warning("web search (%s) failed: %s", self.provider.name, error.message)
            raise
        except Exception as exc:
            reason = self._unexpected("search", exc)
            raise SearchError(f"Searching raised an unexpected error on the server ({reason}).", ERROR) from exc
        self.count("search", self.provider.name, "ok")
        return hits

    async def fetch(self, url: str) -> Page:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_fetch"}
        try:
            with tracing.span("execute_tool web_fetch", attributes):
                page = await self.fetcher.fetch(url)
        except FetchError as error:
            self.count("fetch", self.provider.name, error.outcome)
            raise
        except Exception as exc:
            reason = self._unexpected("fetch", exc)
            raise FetchError(f"Reading {url} raised an unexpected error on the server ({reason}).", ERROR) from exc
        self.count("fetch", self.provider.name, "ok")
        return page

    def _unexpected(self, operation: str, exc: Exception) -> str:
        """An exception the provider or the page reader should not have raised (a parser's error, a
        module missing): logged whole and counted; returns the line the model reads of it. The call
        fails as any search or page read may, so the model goes on without it."""
        log.exception("web %s (%s) failed unexpectedly", operation, self.provider.name)
        self.count(operation, self.provider.name, ERROR)
        return f"{type(exc).__name__}: {exc}"[:REASON_CHARS]

    def health(self) -> dict[str, Any]:
        return {"provider": self.provider.name, "url": self.provider.base_url, "reachable": self.reachable,
                "problem": self.problem}  # fmt: skip

    async def aclose(self) -> None:
        await self.provider.aclose()
        await self.fetcher.aclose()


def web_search_from(provider: ProviderName | None, url: str | None, api_key: str | None, max_results: int,
                    urls: UrlPolicy, count: Count | None = None) -> tuple[WebSearch | None, str | None]:  # fmt: skip
    """The configured web search, or None and why not (said in the log and on `/health`)."""
    if provider is None:
        return None, "no web_search_provider is configured: web_search tools are dropped"
    try:
        engine = make_provider(provider, url, api_key)
    except ValueError as exc:
        return None, f"{exc}: web_search tools are dropped"
    return WebSearch(engine, PageFetcher(urls), max_results, count), None
