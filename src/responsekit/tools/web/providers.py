"""Search engines behind one small interface: a query in, titled and summarised links out.

Each provider speaks its vendor's documented HTTP API (docs/web-search.md names them):
SearXNG's JSON output (`GET /search?format=json`), Brave's Web Search API, Tavily's
`/search` and Exa's `/search`. A failure of any kind (timeout, refused, 401, 429, 5xx, an
answer that is not the expected JSON) is a `SearchError` with a message the model can read;
nothing here raises anything else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from ...tls import client_context

log = logging.getLogger(__name__)

ProviderName = Literal["searxng", "brave", "tavily", "exa"]
TIMEOUT = httpx.Timeout(15.0, connect=5.0)
DEFAULT_URLS: dict[str, str] = {
    "brave": "https://api.search.brave.com",
    "tavily": "https://api.tavily.com",
    "exa": "https://api.exa.ai",
}


@dataclass(frozen=True, slots=True)
class Hit:
    url: str
    title: str
    snippet: str


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    count: int
    domains: tuple[str, ...] = ()
    """Only results from these domains (and their subdomains)."""
    country: str | None = None
    """The user's two-letter country code, when the request gave one."""
    city: str | None = None
    region: str | None = None


class SearchError(Exception):
    """A search that failed; `outcome` names why, for metrics (`timeout`, `unreachable`,
    `unauthorized`, `rate_limited`, `server_error`, `bad_answer`)."""

    def __init__(self, message: str, outcome: str) -> None:
        super().__init__(message)
        self.message = message
        self.outcome = outcome


@dataclass(slots=True)
class Provider:
    """One search engine: `name`, the base URL the vendor's path is appended to, the key."""

    name: ProviderName
    base_url: str
    api_key: str | None = None
    client: httpx.AsyncClient = field(default_factory=lambda: httpx.AsyncClient(timeout=TIMEOUT, verify=client_context()))

    async def search(self, query: Query) -> list[Hit]:
        request = self._request(query)
        try:
            answer = await self.client.send(request)
        except httpx.TimeoutException:
            raise SearchError(f"The search engine ({self.name}) did not answer in time.", "timeout") from None
        except httpx.HTTPError as exc:
            raise SearchError(f"The search engine ({self.name}) could not be reached: {exc}", "unreachable") from None
        if answer.status_code == 403 and self.name == "searxng":
            # SearXNG answers 403 to `format=json` unless its settings.yml lists it (docs/web-search.md).
            raise SearchError("The search engine (searxng) refused the request (403): its settings.yml must "
                              "enable the JSON format (search.formats: [html, json]).", "unauthorized")  # fmt: skip
        if answer.status_code in (401, 403):
            raise SearchError(f"The search engine ({self.name}) refused the server's key ({answer.status_code}).",
                              "unauthorized")  # fmt: skip
        if answer.status_code == 429:
            raise SearchError(f"The search engine ({self.name}) is rate limiting; try again later.", "rate_limited")
        if answer.status_code >= 400:
            raise SearchError(f"The search engine ({self.name}) failed ({answer.status_code}).", "server_error")
        try:
            hits = self._parse(answer.json())
        except (ValueError, TypeError, KeyError, AttributeError):
            raise SearchError(f"The search engine ({self.name}) sent an answer that could not be read.",
                              "bad_answer") from None  # fmt: skip
        if query.domains:
            hits = [hit for hit in hits if in_domains(hit.url, query.domains)]
        return hits[: query.count]

    async def probe(self) -> str | None:
        """Why the engine cannot be reached now, or None when it answered (whatever the status:
        an answer at all means the URL is right; a key is checked by the first search)."""
        try:
            await self.client.get(self.base_url, timeout=5.0)
        except httpx.HTTPError as exc:
            return f"{self.base_url} could not be reached: {exc!r}"
        return None

    async def aclose(self) -> None:
        await self.client.aclose()

    # --- each vendor's request and answer ---------------------------------------------

    def _request(self, query: Query) -> httpx.Request:
        build = self.client.build_request
        base = self.base_url.rstrip("/")
        if self.name == "searxng":
            # https://docs.searxng.org/dev/search_api.html: GET /search, `format=json` (enabled
            # in the instance's settings.yml under `search.formats`).
            text = _with_sites(query.text, query.domains)
            return build("GET", f"{base}/search", params={"q": text, "format": "json"})
        if self.name == "brave":
            # https://api-dashboard.search.brave.com/app/documentation/web-search/get-started
            params: dict[str, Any] = {"q": _with_sites(query.text, query.domains), "count": min(query.count, 20)}
            headers = {"Accept": "application/json", "X-Subscription-Token": self.api_key or ""}
            if query.country:
                params["country"] = query.country.upper()
            for header, value in (("X-Loc-City", query.city), ("X-Loc-State-Name", query.region),
                                  ("X-Loc-Country", query.country)):  # fmt: skip
                if value:
                    headers[header] = value
            return build("GET", f"{base}/res/v1/web/search", params=params, headers=headers)
        if self.name == "tavily":
            # https://docs.tavily.com/documentation/api-reference/endpoint/search
            body: dict[str, Any] = {"query": query.text, "max_results": min(query.count, 20)}
            if query.domains:
                body["include_domains"] = list(query.domains)
            return build("POST", f"{base}/search", json=body, headers={"Authorization": f"Bearer {self.api_key or ''}"})
        # Exa: https://docs.exa.ai/reference/search
        body = {"query": query.text, "numResults": min(query.count, 25), "contents": {"text": {"maxCharacters": 1500}}}
        if query.domains:
            body["includeDomains"] = list(query.domains)
        if query.country:
            body["userLocation"] = query.country.upper()
        return build("POST", f"{base}/search", json=body, headers={"x-api-key": self.api_key or ""})

    def _parse(self, answer: Any) -> list[Hit]:
        if self.name == "brave":
            results = (answer.get("web") or {}).get("results") or []
            return [_hit(r.get("url"), r.get("title"), r.get("description")) for r in results if _has_url(r)]
        results = answer["results"]
        if not isinstance(results, list):
            raise TypeError("results is not a list")
        if self.name == "searxng":
            return [_hit(r.get("url"), r.get("title"), r.get("content")) for r in results if _has_url(r)]
        if self.name == "tavily":
            return [_hit(r.get("url"), r.get("title"), r.get("content")) for r in results if _has_url(r)]
        return [_hit(r.get("url"), r.get("title"), r.get("text") or " ".join(r.get("highlights") or ()))
                for r in results if _has_url(r)]  # fmt: skip


def make_provider(name: ProviderName, url: str | None, api_key: str | None) -> Provider:
    """The configured provider; SearXNG needs its URL, the vendors' APIs default to theirs."""
    if name == "searxng" and not url:
        raise ValueError("web_search_provider = searxng needs web_search_url, the instance's base URL")
    if name != "searxng" and not api_key:
        raise ValueError(f"web_search_provider = {name} needs web_search_api_key")
    return Provider(name, (url or DEFAULT_URLS[name]).rstrip("/"), api_key)


def in_domains(url: str, domains: tuple[str, ...] | list[str]) -> bool:
    """Whether `url`'s host is one of `domains` or under one (`allowed_domains`' rule)."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    for domain in domains:
        domain = domain.lower().strip().removeprefix("https://").removeprefix("http://").strip("/").rstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def _with_sites(text: str, domains: tuple[str, ...]) -> str:
    """The `site:` operators that engines without a domain parameter understand."""
    if not domains:
        return text
    return f"{text} ({' OR '.join(f'site:{domain}' for domain in domains)})"


def _has_url(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("url"), str) and result["url"].startswith(("http://", "https://"))


def _hit(url: Any, title: Any, snippet: Any) -> Hit:
    return Hit(str(url), str(title or url), " ".join(str(snippet or "").split()))
