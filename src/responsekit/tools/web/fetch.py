"""Reading a web page for the model: the URL policy at every hop, time and size limits, text out.

The URL policy is the one MCP server URLs go through (`tools/outbound.py`): no loopback,
link-local, private or multicast address unless `allowed_hosts` allows it, each redirect's hop
checked before it is requested (`UrlPolicy.opened`). HTML becomes its
readable text (trafilatura), a PDF its pages' text (pypdf), plain text stays itself;
anything else, or more than `max_bytes`, is refused with a `FetchError` the model reads.
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass

import httpx

from ...tls import client_context
from ..outbound import FetchError as Refused
from ..outbound import TooLarge, UrlPolicy, body_within

MAX_BYTES = 5 * 2**20
MAX_REDIRECTS = 5
TIMEOUT = httpx.Timeout(20.0, connect=5.0)
TOTAL_SECONDS = 30.0
TEXT_TYPES = ("text/plain", "text/markdown", "text/csv", "application/json", "text/xml", "application/xml")
HTML_TYPES = ("text/html", "application/xhtml+xml")
USER_AGENT = "ResponseKit-WebFetch/1.0"


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    """Where the page was found (after redirects)."""
    title: str
    text: str


class FetchError(Exception):
    """A page that could not be read; `outcome` names why (`refused`, `timeout`, `too_large`,
    `unsupported`, `http_error`, `unreachable`)."""

    def __init__(self, message: str, outcome: str) -> None:
        super().__init__(message)
        self.message = message
        self.outcome = outcome


class PageFetcher:
    def __init__(self, urls: UrlPolicy, max_bytes: int = MAX_BYTES) -> None:
        self.urls = urls
        self.max_bytes = max_bytes
        self.client = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False, verify=client_context(),
                                        headers={"User-Agent": USER_AGENT, "Accept": "text/html,application/pdf,text/plain;q=0.9,*/*;q=0.1"})  # fmt: skip

    async def fetch(self, url: str) -> Page:
        try:
            async with asyncio.timeout(TOTAL_SECONDS):
                return await self._fetch(url)
        except TimeoutError:
            raise FetchError(f"{url} did not answer in time.", "timeout") from None

    async def _fetch(self, url: str) -> Page:
        try:
            async with self.urls.opened(self.client, url, MAX_REDIRECTS) as answer:
                if answer.status_code >= 400:
                    raise FetchError(f"{answer.url} answered {answer.status_code}.", "http_error")
                kind = answer.headers.get("content-type", "").split(";")[0].strip().lower()
                body = await body_within(answer, self.max_bytes)
                return _read(str(answer.url), kind, body, answer.encoding or "utf-8")
        except TooLarge:
            raise FetchError(f"{url} is larger than {self.max_bytes} bytes.", "too_large") from None
        except Refused as refusal:
            raise FetchError(str(refusal), "refused") from None
        except httpx.TimeoutException:
            raise FetchError(f"{url} did not answer in time.", "timeout") from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise FetchError(f"{url} could not be reached: {exc}", "unreachable") from None

    async def aclose(self) -> None:
        await self.client.aclose()


def _read(url: str, kind: str, body: bytes, encoding: str) -> Page:
    if kind in HTML_TYPES or (not kind and body.lstrip()[:15].lower().startswith((b"<!doctype html", b"<html"))):
        return _html(url, body)
    if kind == "application/pdf" or (not kind and body.startswith(b"%PDF-")):
        return _pdf(url, body)
    if kind in TEXT_TYPES or (kind.startswith("text/") and b"\0" not in body[:4096]):
        return Page(url, url, body.decode(encoding, errors="replace"))
    raise FetchError(f"{url} is {kind or 'of unknown type'}, not a page of text, HTML or PDF.", "unsupported")


def _html(url: str, body: bytes) -> Page:
    import trafilatura  # a second's import, paid only when a page is read

    document = trafilatura.bare_extraction(body, url=url, include_links=False, include_comments=False,
                                           with_metadata=True, favor_recall=True)  # fmt: skip
    if document is None:
        return Page(url, url, "")
    title = getattr(document, "title", None) or url
    return Page(url, str(title), str(getattr(document, "text", None) or ""))


def _pdf(url: str, body: bytes) -> Page:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(body))
        text = "\n\n".join(page.extract_text() or "" for page in reader.pages)
        title = (reader.metadata.title if reader.metadata else None) or url
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise FetchError(f"The PDF at {url} could not be read: {exc}", "unsupported") from None
    return Page(url, str(title), text)
