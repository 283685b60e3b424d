"""Which URLs the server may fetch on a request's behalf (MCP servers, files and images by URL).

A request must not make the server reach its own network: loopback, link-local
(cloud metadata) and private addresses are refused unless the configuration allows
them, by host or by network.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import httpx

from ..canonical.errors import APIError
from ..tls import client_context


class UrlPolicy:
    def __init__(self, allowed: list[str] = ()) -> None:  # type: ignore[assignment]
        """`allowed`: host names, addresses or networks (CIDR) that may be private."""
        self._hosts = {entry.lower() for entry in allowed if not _is_network(entry)}
        self._networks = [ipaddress.ip_network(entry, strict=False) for entry in allowed if _is_network(entry)]

    async def check(self, url: str, param: str) -> None:
        """Refuse (400) a URL that is malformed or leads to a non-public address not allowed."""
        reason = await self.refusal(url)
        if reason is not None:
            raise APIError(400, reason, param=param, code="invalid_url")

    async def refusal(self, url: str, *, unresolved_ok: bool = False) -> str | None:
        """Why `url` must not be reached on a request's behalf, or None when it may.

        `unresolved_ok`: a host that does not resolve here is let through (for URLs an engine
        fetches itself, from where names may resolve otherwise).
        """
        try:
            parts = urlsplit(url)
            port = parts.port  # a port that is not a number in range raises here
        except ValueError:
            return f"`{url}` is not an http(s) URL."
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"`{url}` is not an http(s) URL."
        host = parts.hostname.lower()
        if not host.isprintable() or any(character.isspace() for character in host):
            return f"`{url}` does not name a valid host."
        if host in self._hosts:
            return None
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
        except ValueError:  # a host no resolver takes (a NUL, a label too long)
            return f"`{url}` does not name a valid host."
        except OSError:
            return None if unresolved_ok else f"Cannot resolve the host of `{url}`."
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            public = address.is_global and not address.is_multicast
            if public or any(address in network for network in self._networks):
                continue
            return f"`{url}` leads to a non-public address ({address}); the server's configuration does not allow it."
        return None

    @asynccontextmanager
    async def opened(
        self, client: httpx.AsyncClient, url: str, max_redirects: int = 3
    ) -> AsyncIterator[httpx.Response]:
        """The streamed answer at `url`, its redirects followed by hand so that each hop is checked
        by this policy before it is requested (a public URL may redirect to a private one);
        `FetchError` when a hop is refused or the redirects do not end. httpx's errors pass."""
        for _ in range(max_redirects + 1):
            reason = await self.refusal(url)
            if reason is not None:
                raise FetchError(reason)
            async with client.stream("GET", url) as answer:
                if answer.is_redirect and answer.headers.get("location"):
                    url = str(answer.url.join(answer.headers["location"]))
                    continue
                yield answer
                return
        raise FetchError(f"`{url}` redirects more than {max_redirects} times.")

    async def fetch(self, url: str, limit: int, timeout: float = 30.0) -> bytes:
        """The body at `url`, each hop of its redirects checked by this policy; `FetchError` when it
        is refused, fails, or holds more than `limit` bytes."""
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False, verify=client_context()) as client:
            try:
                async with self.opened(client, url, MAX_REDIRECTS) as answer:
                    if answer.status_code != 200:
                        raise FetchError(f"`{answer.url}` answered HTTP {answer.status_code}.")
                    return await body_within(answer, limit)
            except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
                raise FetchError(f"`{url}` could not be fetched: {exc!r}") from None


MAX_REDIRECTS = 3


class FetchError(Exception):
    """A URL the server would not or could not fetch; the message says why."""


class TooLarge(FetchError):
    """An answer longer than the fetch allows."""


async def body_within(answer: httpx.Response, limit: int) -> bytes:
    """A streamed answer's body, read only as far as `limit` bytes: `TooLarge` beyond (a length it
    declares beyond is refused before any byte is read)."""
    declared = answer.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"`{answer.url}` holds more than {limit} bytes.")
    body = bytearray()
    async for piece in answer.aiter_bytes():
        body += piece
        if len(body) > limit:
            raise TooLarge(f"`{answer.url}` holds more than {limit} bytes.")
    return bytes(body)


def _is_network(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return True
