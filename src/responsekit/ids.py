"""Object ids in OpenAI's shapes (`resp_…`, `msg_…`, `fc_…`, `call_…`)."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """A fresh id such as `resp_68a0…`: a prefix and 48 random hex digits, as OpenAI's."""
    return f"{prefix}_{secrets.token_hex(24)}"
