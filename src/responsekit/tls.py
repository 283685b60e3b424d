"""One TLS context for every outbound HTTP client.

httpx builds an `ssl.SSLContext` for each client it makes, loading the whole CA bundle: 37 ms
of CPU each time, measured here, spent again for every client an engine, a probe, a fetched
attachment or an MCP call makes, even when it only speaks plain HTTP. A context is made to be
shared (https://docs.python.org/3/library/ssl.html#ssl.SSLContext), so this one is made once,
as httpx makes its own (`httpx.create_ssl_context`: the CA bundle, or `SSL_CERT_FILE` /
`SSL_CERT_DIR` where set), and every client is handed it as `verify=`.
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache
def client_context() -> ssl.SSLContext:
    """The verifying client context all our outbound clients share."""
    return httpx.create_ssl_context()
