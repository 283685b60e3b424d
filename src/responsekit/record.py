"""Record upstream exchanges as JSON files, so a failing session can be replayed in a test.

One file per exchange: the request body, the HTTP status, and the chunks with the
seconds since the request was sent (`t`). The test suite's scripted upstream replays
exactly this format.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any


class Recorder:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._counter = itertools.count(1)

    def start(self, upstream: str, path: str, body: dict[str, Any]) -> Recording:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", upstream)
        file = self.directory / f"{stamp}-{next(self._counter):06d}-{safe}.json"
        return Recording(file, upstream, path, body)


class Recording:
    """One exchange being recorded; `save()` writes it whatever way the exchange ended."""

    def __init__(self, file: Path, upstream: str, path: str, body: dict[str, Any]) -> None:
        self.file = file
        self._started = time.monotonic()
        self.data: dict[str, Any] = {
            "upstream": upstream,
            "request": {"path": path, "body": body},
            "status": None,
            "chunks": [],
            "error_body": None,
        }

    def status(self, code: int) -> None:
        self.data["status"] = code

    def chunk(self, data: str) -> None:
        """A `data:` payload: stored as JSON when it is JSON, else as the raw string."""
        try:
            value: Any = json.loads(data)
        except ValueError:
            value = data
        self.data["chunks"].append({"t": round(time.monotonic() - self._started, 4), "data": value})

    def error_body(self, text: str) -> None:
        self.data["error_body"] = text

    async def save(self) -> None:
        text = json.dumps(self.data, ensure_ascii=False, indent=1)
        await asyncio.to_thread(self.file.write_text, text, "utf-8")
