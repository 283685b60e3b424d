"""Usage records: one row per generation (every protocol, stored or not, streamed or not, failed
too), written in batches (`orchestration/usage.py`), and summed into time buckets for the usage
report (`GET /v1/organization/usage/completions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .database import Database

GROUPS = ("api_key_id", "model")
"""What a report may be grouped by."""


@dataclass(slots=True)
class UsageRecord:
    created_ms: int
    key_hash: str
    api_key_id: str | None
    request_id: str | None
    route: str
    model: str
    upstream: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    status: str
    """The HTTP status the generation ended with (`200`, `429`, `502`…), or `client_left`."""
    duration_ms: int


_FIELDS = ", ".join(UsageRecord.__slots__)  # type: ignore[attr-defined]
_ROW = f"({', '.join('?' * len(UsageRecord.__slots__))})"  # type: ignore[attr-defined]
ROWS_PER_STATEMENT = 100
"""Rows one INSERT writes (13 values each): its text stays under the 15 KiB asyncpg caches a
prepared statement up to (`max_cacheable_statement_size`,
https://magicstack.github.io/asyncpg/current/api/index.html#asyncpg.connection.connect); at 200
rows each write was prepared anew, at four times the CPU per row (`bench/state.py`)."""


async def insert(database: Database, records: list[UsageRecord]) -> None:
    """Write the records in one transaction, `ROWS_PER_STATEMENT` to a statement: `executemany`
    would run a statement per row, and on SQLite take the interpreter's lock (GIL) back from the
    event loop's thread after each one (https://docs.python.org/3/library/sys.html#sys.setswitchinterval)."""
    async with database.transaction() as connection:
        for start in range(0, len(records), ROWS_PER_STATEMENT):
            chunk = records[start : start + ROWS_PER_STATEMENT]
            await connection.execute(f"INSERT INTO usage_records ({_FIELDS}) VALUES {', '.join([_ROW] * len(chunk))}",
                                     *[value for record in chunk for value in _row(record)])  # fmt: skip


def _row(record: UsageRecord) -> tuple[Any, ...]:
    """The record's values in `_FIELDS` order (not `dataclasses.astuple`, which deep-copies each)."""
    return (record.created_ms, record.key_hash, record.api_key_id, record.request_id, record.route, record.model,
            record.upstream, record.input_tokens, record.cached_tokens, record.output_tokens, record.reasoning_tokens,
            record.status, record.duration_ms)  # fmt: skip


async def buckets(
    database: Database, start: int, end: int, width: int, group_by: list[str], api_key_ids: list[str] | None = None,
    models: list[str] | None = None, key_hash: str | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """Sums per bucket (its index from `start`, `width` seconds each) and group, between `start`
    and `end` (Unix seconds, end excluded); `key_hash` keeps one key's (the inspector's viewer)."""
    groups = [column for column in GROUPS if column in group_by]
    where, args = ["created_ms >= ?", "created_ms < ?"], [start * 1000, end * 1000]
    if key_hash is not None:
        where.append("key_hash = ?")
        args.append(key_hash)
    for column, values in (("api_key_id", api_key_ids), ("model", models)):
        if values:
            where.append(f"{column} IN ({', '.join('?' * len(values))})")
            args += values
    selected = "".join(f", {column}" for column in groups)
    rows = await database.fetch(
        f"SELECT (created_ms / 1000 - ?) / ? AS bucket{selected}, SUM(input_tokens), SUM(cached_tokens), "
        f"SUM(output_tokens), COUNT(*) FROM usage_records WHERE {' AND '.join(where)} "
        f"GROUP BY bucket{selected} ORDER BY bucket{selected}",
        start, width, *args,
    )  # fmt: skip
    found: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        result: dict[str, Any] = {
            "object": "organization.usage.completions.result",
            "input_tokens": int(row[-4]), "output_tokens": int(row[-2]), "input_cached_tokens": int(row[-3]),
            "input_audio_tokens": 0, "output_audio_tokens": 0, "num_model_requests": int(row[-1]),
            "project_id": None, "user_id": None, "api_key_id": None, "model": None, "batch": None,
        }  # fmt: skip
        for position, column in enumerate(groups, start=1):
            result[column] = row[position]
        found.setdefault(int(row[0]), []).append(result)
    return found
