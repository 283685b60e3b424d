"""Object ids in OpenAI's shapes (`resp_…`, `msg_…`, `fc_…`, `call_…`), and the ids clients choose."""

from __future__ import annotations

import secrets

MAX_CLIENT_ID = 512
"""Characters of an id a client chooses for an object to store (an input item's `id`): PostgreSQL
indexes item ids, and one index entry holds at most about 2.7 kB."""


def new_id(prefix: str) -> str:
    """A fresh id such as `resp_68a0…`: a prefix and 48 random hex digits, as OpenAI's."""
    return f"{prefix}_{secrets.token_hex(24)}"


def storable_id(value: str) -> bool:
    """Whether an id a client chose can be stored, and found again, on both databases."""
    return len(value) <= MAX_CLIENT_ID and storable(value)


def storable(text: str) -> bool:
    """Whether both databases can hold this text: no NUL (PostgreSQL's text refuses it) and
    no lone surrogate (UTF-8 cannot encode it)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
