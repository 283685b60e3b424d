"""Which URLs the server may fetch on a request's behalf (MCP servers, files by URL).

A request must not make the server reach its own network: loopback, link-local
(cloud metadata) and private addresses are refused unless the configuration allows
them, by host or by network.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from ..canonical.errors import APIError


class UrlPolicy:
    def __init__(self, allowed: list[str] = ()) -> None:  # type: ignore[assignment]
        """`allowed`: host names, addresses or networks (CIDR) that may be private."""
        self._hosts = {entry.lower() for entry in allowed if not _is_network(entry)}
        self._networks = [ipaddress.ip_network(entry, strict=False) for entry in allowed if _is_network(entry)]

    async def check(self, url: str, param: str) -> None:
        """Refuse (400) a URL that is malformed or leads to a non-public address not allowed."""
        not_http = APIError(400, f"`{url}` is not an http(s) URL.", param=param, code="invalid_url")
        try:
            parts = urlsplit(url)
            port = parts.port  # a port that is not a number in range raises here
        except ValueError:
            raise not_http from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise not_http
        host = parts.hostname.lower()
        if host in self._hosts:
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
        except OSError:
            raise APIError(400, f"Cannot resolve the host of `{url}`.", param=param, code="invalid_url") from None
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            public = address.is_global and not address.is_multicast
            if public or any(address in network for network in self._networks):
                continue
            raise APIError(
                400,
                f"`{url}` leads to a non-public address ({address}); the server's configuration does not allow it.",
                param=param,
                code="invalid_url",
            )


def _is_network(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    return True
