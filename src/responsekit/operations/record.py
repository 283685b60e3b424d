"""Record upstream exchanges as JSON files, so a failing session can be replayed in a test.

One file per exchange: the request body, the HTTP status, and the chunks with the
seconds since the request was sent (`t`). The test suite's scripted upstream replays
exactly this format. The id of the client request the exchange served (`x-request-id`) is in
the file's name and content, so the inspector finds a response's exchanges.
"""

from __future__ import annotations

import asyncio
import glob
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any

from .logs import request_id


class Recorder:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._counter = itertools.count(1)

    def start(self, upstream: str, path: str, body: dict[str, Any]) -> Recording:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        served = request_id()
        name = f"{stamp}-{next(self._counter):06d}-{_safe(upstream)}"
        file = self.directory / (f"{name}--{_safe(served)}.json" if served else f"{name}.json")
        return Recording(file, upstream, path, body, served)

    def for_request(self, served: str) -> list[dict[str, Any]]:
        """The exchanges recorded for the client request `served`, oldest first, each with its `file`
        name. Their names end with the id, made file-safe; the id in each file decides."""
        found = []
        for file in sorted(self.directory.glob(f"*--{glob.escape(_safe(served))}.json")):
            try:
                data = json.loads(file.read_text("utf-8"))
            except (OSError, ValueError):
                continue  # being written, or not a recording
            if isinstance(data, dict) and data.get("request_id") == served:
                found.append({"file": file.name, **data})
        return found


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


class Recording:
    """One exchange being recorded; `save()` writes it whatever way the exchange ended."""

    def __init__(self, file: Path, upstream: str, path: str, body: dict[str, Any], served: str | None) -> None:
        self.file = file
        self._started = time.monotonic()
        self.data: dict[str, Any] = {
            "upstream": upstream,
            "request_id": served,
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
