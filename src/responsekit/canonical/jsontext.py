"""JSON as the server writes it: engine requests, response bodies, SSE frames, stored rows.

orjson is an order of magnitude faster than the standard library, but it refuses lone
surrogates (which a client may send escaped), integers beyond 64 bits and keys that are
not strings; what it refuses goes through the standard library, escaped to ASCII, instead
of failing the request.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_utf8(value: Any) -> bytes:
    """Compact JSON in UTF-8 (ASCII-escaped where UTF-8 cannot carry the text)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()
