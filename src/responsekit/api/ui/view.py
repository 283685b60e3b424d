"""What the inspector's templates show, computed from stored objects: previews, times, durations."""

from __future__ import annotations

import json
import time
from typing import Any

from ...store import RUNNING

STATUSES = ("queued", "in_progress", "completed", "incomplete", "failed", "cancelled")


def live(response: dict[str, Any]) -> bool:
    """Whether a stored response is still running (a background run, queued or in progress)."""
    return response.get("status") in RUNNING


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text") or part.get("refusal") or "") for part in content if isinstance(part, dict))
    return ""


def preview(listed: dict[str, Any], length: int = 120) -> str:
    """One line for the list: a response's output text (else its error, else its output items'
    kinds), a conversation's metadata."""
    body = listed["body"]
    if listed["kind"] == "conversation":
        return ", ".join(f"{key}={value}" for key, value in body.items()) if isinstance(body, dict) else ""
    texts = [text_of(item.get("content")) for item in body.get("output") or () if item.get("type") == "message"]
    text = " ".join(" ".join(texts).split())
    if not text and isinstance(body.get("error"), dict):
        text = str(body["error"].get("message") or "")
    if not text:
        kinds = [str(item.get("type")) for item in body.get("output") or ()]
        text = ", ".join(kinds)
    return text if len(text) <= length else text[: length - 1] + "…"


PALETTE = ("#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#06b6d4", "#84cc16", "#ec4899")


def usage_chart(found: dict[int, list[dict[str, Any]]], start: int, width: int, count: int) -> dict[str, Any]:
    """Stacked bars of tokens (input and output) per bucket, one color per model (and key), as
    SVG rectangles: x, y and height in a 600 × 200 box."""
    series = sorted({_series(result) for results in found.values() for result in results})
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    totals = [sum(r["input_tokens"] + r["output_tokens"] for r in found.get(i, ())) for i in range(count)]
    top = max(totals, default=0) or 1
    slot = 600 / count
    bars = []
    for index in range(count):
        base = 200.0
        for result in sorted(found.get(index, ()), key=_series):
            height = (result["input_tokens"] + result["output_tokens"]) / top * 190
            base -= height
            bars.append({"x": round(index * slot + 1, 1), "y": round(base, 1), "w": round(slot - 2, 1),
                         "h": round(height, 1), "color": colors[_series(result)],
                         "title": f"{when(start + index * width)}: {_series(result)}, "
                                  f"{result['input_tokens']} in, {result['output_tokens']} out, "
                                  f"{result['num_model_requests']} requests"})  # fmt: skip
    return {"bars": bars, "legend": [(name, colors[name]) for name in series], "top": top,
            "first": when(start), "last": when(start + count * width)}  # fmt: skip


def usage_totals(found: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The sums per model (and key) over the whole chart."""
    sums: dict[str, dict[str, Any]] = {}
    for results in found.values():
        for result in results:
            row = sums.setdefault(_series(result), {"name": _series(result), "requests": 0, "input": 0, "cached": 0,
                                                    "output": 0})  # fmt: skip
            row["requests"] += result["num_model_requests"]
            row["input"] += result["input_tokens"]
            row["cached"] += result["input_cached_tokens"]
            row["output"] += result["output_tokens"]
    return sorted(sums.values(), key=lambda row: row["name"])


def _series(result: dict[str, Any]) -> str:
    key = result.get("api_key_id")
    return f"{result['model']} · {key}" if key else str(result["model"])


def when(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) + " UTC"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def pretty(value: Any) -> str:
    """JSON indented for reading; a string holding JSON (tool arguments) is read first."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def collapsed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored events as timeline entries without times (a run whose timeline was not kept):
    consecutive deltas on one item as one entry with their count."""
    entries: list[dict[str, Any]] = []
    for event in events:
        kind = event.get("type", "")
        last = entries[-1] if entries else None
        if kind.endswith(".delta") and last and last["type"] == kind and last.get("output_index") == event.get("output_index"):
            last["count"] += 1
            continue
        entry: dict[str, Any] = {"type": kind, "sequence_number": event.get("sequence_number"),
                                 "output_index": event.get("output_index")}  # fmt: skip
        if kind.endswith(".delta"):
            entry["count"] = 1
        if isinstance(event.get("item"), dict):
            entry["item"] = {key: event["item"].get(key) for key in ("type", "id", "status")}
        if isinstance(event.get("response"), dict):
            entry["status"] = event["response"].get("status")
        entries.append(entry)
    return entries
