"""Sealed blobs: what stateless clients carry between turns, under authenticated encryption.

Reasoning (`encrypted_content` of reasoning items) and compaction summaries travel
through the client, which cannot read or alter them: Fernet (AES-128-CBC + HMAC-SHA256)
with server keys. Keys live in the data directory (created on first start) or come from
the configuration (so replicas share them); rotation adds a new key in front, and old
keys still open what they sealed. A blob that does not authenticate — tampered, or
sealed by another server — opens to None.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

log = logging.getLogger(__name__)

KEY_FILE = "sealing.keys"


class Sealer:
    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise ValueError("at least one sealing key is needed")
        self._fernet = MultiFernet([Fernet(key.encode()) for key in keys])

    @classmethod
    def from_settings(cls, data_dir: Path, keys: list[str]) -> Sealer:
        return cls(keys or load_keys(data_dir))

    def seal(self, kind: str, text: str) -> str:
        return self._fernet.encrypt(json.dumps({"kind": kind, "text": text}).encode()).decode()

    def open(self, kind: str, blob: str, max_age: int | None = None) -> str | None:
        """The text sealed as `kind`, or None (with a warning) when the blob does not authenticate
        or, given `max_age`, was sealed more than that many seconds ago."""
        try:
            payload = json.loads(self._fernet.decrypt(blob.encode(), ttl=max_age))
        except (InvalidToken, ValueError, TypeError):
            log.warning("ignoring a %s blob that does not authenticate (tampered, or from another server)", kind)
            return None
        if not isinstance(payload, dict) or payload.get("kind") != kind or not isinstance(payload.get("text"), str):
            log.warning("ignoring a sealed blob that is not %s", kind)
            return None
        return payload["text"]


def load_keys(data_dir: Path) -> list[str]:
    """The keys of the data directory, newest first; the file is created with one key on first use."""
    path = data_dir / KEY_FILE
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        _write(path, [Fernet.generate_key().decode()])
        log.info("created the sealing key file %s", path)
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def rotate_keys(data_dir: Path, keep: int = 5) -> list[str]:
    """Put a new key in front; keep the `keep - 1` newest old ones so recent blobs still open."""
    keys = [Fernet.generate_key().decode(), *load_keys(data_dir)][:keep]
    _write(data_dir / KEY_FILE, keys)
    return keys


def _write(path: Path, keys: list[str]) -> None:
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write("\n".join(keys) + "\n")
    temporary.replace(path)
