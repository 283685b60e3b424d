"""Durable state: stored responses, their items and events, conversations.

One SQL implementation over two databases: SQLite (embedded default) and PostgreSQL
(several replicas). Every write that must be whole is one transaction, so a crash at
any point leaves no half-stored response.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..canonical.jsontext import json_utf8
from ..operations import tracing
from .database import Connection, Database, Listener
from .migrations import migrate

RUNNING = ("queued", "in_progress")
_CHAIN = """WITH RECURSIVE chain (id, previous_response_id, depth) AS (
               SELECT id, previous_response_id, 0 FROM responses WHERE id = ? AND owner = ?
               UNION ALL
               SELECT r.id, r.previous_response_id, chain.depth + 1
               FROM responses r JOIN chain ON r.id = chain.previous_response_id
               WHERE r.owner = ?
           ) """
"""A stored response and those it continues, `depth` steps back (parameters: id, owner, owner)."""
EVENTS_CHANNEL = "responsekit_events"
"""Notified with a background response's id when its stored events grow."""
CANCEL_CHANNEL = "responsekit_cancel"
"""Notified with a background response's id when a client asks to cancel it."""
MODEL_READ = "_model_read"
"""The key under which `history` and `conversation_items` give a server-run call's item what the
model read as its result, when the item keeps none (a `web_search_call` has its action only): kept
in the item's row beside its body, so that the item a client lists stays the spec's, and a stored
chain brings the model what the call found."""

Reads = Mapping[str, str]
"""Item id -> what the model read as that server-run call's result (`MODEL_READ`)."""


@dataclass(slots=True)
class Page:
    data: list[dict[str, Any]]
    has_more: bool

    def body(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": self.data,
            "first_id": self.data[0]["id"] if self.data else None,
            "last_id": self.data[-1]["id"] if self.data else None,
            "has_more": self.has_more,
        }


def paginate(items: list[dict[str, Any]], after: str | None, limit: int, order: Literal["asc", "desc"]) -> Page:
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        start = next((i + 1 for i, item in enumerate(ordered) if item.get("id") == after), len(ordered))
    return Page(ordered[start : start + limit], start + limit < len(ordered))


@dataclass(slots=True)
class Inspected:
    """A stored response as the inspector shows it (`Store.inspected`)."""

    response: dict[str, Any]
    inputs: list[dict[str, Any]]
    chain: list[str]
    """The ids of the responses it continues (`previous_response_id`, followed), oldest first."""
    request_id: str | None
    timeline: dict[str, Any] | None
    """`Timeline.record()`: None for a response stored before timelines were, a background run
    still running, or a foreground response in flight (`Flights`: not stored yet)."""


class DuplicateItem(ValueError):
    """An item whose id its conversation holds already (a conversation holds each item once)."""

    def __init__(self, item_id: str) -> None:
        super().__init__(item_id)
        self.item_id = item_id


class Store:
    def __init__(self, database: Database) -> None:
        self.database = database
        postgres = database.dialect == "postgres"
        self._for_update = " FOR UPDATE" if postgres else ""
        # A response's end locks its row against other ends only: not against the key-share
        # locks of event inserts, which a stalled replica may hold (`orchestration/runs.py`).
        self._for_ending = " FOR NO KEY UPDATE" if postgres else ""
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self.notified_across_processes = database.shared_notifications
        """Whether `watch` hears of events written by other processes (else only of this one's)."""

    @classmethod
    async def open(cls, url: str) -> Store:
        """`postgresql://…` or `sqlite:///path/to/file.db`; migrates the schema."""
        if url.startswith(("postgres://", "postgresql://")):
            from .postgres import PostgresDatabase

            database: Database = await PostgresDatabase.open(url)
        elif url.startswith("sqlite:///"):
            from .sqlite import SQLiteDatabase

            database = await SQLiteDatabase.open(Path(url.removeprefix("sqlite:///")))
        else:
            raise ValueError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://…")
        await migrate(database)
        store = cls(database)
        await database.listen(EVENTS_CHANNEL, store._events_added)
        return store

    async def close(self) -> None:
        await self.database.close()

    # --- attachments ------------------------------------------------------------------

    async def attachment_text(self, kind: str, digest: str) -> str | None:
        """What an attachment reads as (`orchestration/attachments.py`), if it was kept."""
        row = await self.database.fetchrow("SELECT text FROM attachment_texts WHERE kind = ? AND hash = ?", kind, digest)
        return None if row is None else str(row[0])

    async def keep_attachment_text(self, kind: str, digest: str, text: str) -> None:
        """Keep what an attachment reads as; the first text kept for it stays (a replica that read
        it at the same time read the same)."""
        await self.database.execute(
            "INSERT INTO attachment_texts (kind, hash, text, created_ms) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (kind, hash) DO NOTHING",
            kind, digest, text, _now_ms(),
        )  # fmt: skip

    # --- responses --------------------------------------------------------------------

    async def save_response(
        self, owner: str, response: dict[str, Any], inputs: list[dict[str, Any]], conversation_id: str | None = None,
        request_id: str | None = None, timeline: dict[str, Any] | None = None, reads: Reads | None = None,
    ) -> None:
        """A finished response, its input and output items (and the conversation's new items): all or nothing.

        `request_id` is the `x-request-id` of the request that created it (`request_id()`),
        `timeline` when its events went out (`Timeline.record()`), for the inspector; `reads`
        what the model read of its server-run calls (`MODEL_READ`).
        """
        with tracing.span("store save_response", {"db.operation.name": "save_response"}):
            async with self.database.transaction() as db:
                await self._insert_response(
                    db, owner, response, inputs, lease_until_ms=None, request_id=request_id, timeline=timeline
                )
                await self._insert_outputs(db, response, offset=len(inputs), reads=reads)
                if conversation_id:
                    await self._append_conversation(db, conversation_id, inputs + response["output"], reads)

    async def start_response(
        self, owner: str, response: dict[str, Any], inputs: list[dict[str, Any]], lease_until_ms: int,
        request_id: str | None = None,
    ) -> None:
        """A background response before it runs: queued, with its inputs and its runner's lease
        (until when, in milliseconds since the epoch)."""
        async with self.database.transaction() as db:
            await self._insert_response(
                db, owner, response, inputs, lease_until_ms=lease_until_ms, request_id=request_id, timeline=None
            )

    async def update_response(self, response: dict[str, Any]) -> None:
        await self.database.execute(
            "UPDATE responses SET status = ?, body = ? WHERE id = ?",
            response["status"], _dumps(response), response["id"],
        )  # fmt: skip

    async def finish_response(
        self, response: dict[str, Any], events: list[tuple[int, str]], conversation_id: str | None = None,
        timeline: dict[str, Any] | None = None, reads: Reads | None = None,
    ) -> bool:
        """A background response's end: status, outputs (and what the model read of its server-run
        calls, `MODEL_READ`), last events and conversation items together.

        Returns False (and writes nothing) when the response is no longer running, e.g.
        when another replica already marked it failed.
        """
        with tracing.span("store finish_response", {"db.operation.name": "finish_response"}):
            async with self.database.transaction() as db:
                row = await db.fetchrow(f"SELECT status FROM responses WHERE id = ?{self._for_ending}", response["id"])
                if row is None or row[0] not in RUNNING:
                    return False
                inputs = [
                    json.loads(body)
                    for (body,) in await db.fetch(
                        "SELECT body FROM response_items WHERE response_id = ? AND NOT output ORDER BY position",
                        response["id"],
                    )
                ]
                await db.execute(
                    "UPDATE responses SET status = ?, body = ?, lease_until_ms = NULL, timeline = ? WHERE id = ?",
                    response["status"], _dumps(response), _dumps(timeline) if timeline else None, response["id"],
                )  # fmt: skip
                await self._insert_outputs(db, response, offset=len(inputs), reads=reads)
                await self._insert_events(db, response["id"], events)
                await db.notify(EVENTS_CHANNEL, response["id"])
                if conversation_id:
                    await self._append_conversation(db, conversation_id, inputs + response["output"], reads)
        return True

    async def _insert_response(
        self, db: Connection, owner: str, response: dict[str, Any], inputs: list[dict[str, Any]], lease_until_ms: int | None,
        request_id: str | None, timeline: dict[str, Any] | None,
    ) -> None:
        conversation = response.get("conversation") or {}
        await db.execute(
            "INSERT INTO responses (id, owner, created_at, status, background, previous_response_id, "
            "conversation_id, body, lease_until_ms, request_id, model, timeline, stored_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            response["id"], owner, response["created_at"], response["status"], bool(response.get("background")),
            response.get("previous_response_id"), conversation.get("id"), _dumps(response), lease_until_ms, request_id,
            response.get("model"), _dumps(timeline) if timeline else None, _now_ms(),
        )  # fmt: skip
        await _insert_items(db, response["id"], inputs, offset=0, output=False)

    async def _insert_outputs(self, db: Connection, response: dict[str, Any], offset: int, reads: Reads | None) -> None:
        await _insert_items(db, response["id"], response["output"], offset=offset, output=True, reads=reads)

    async def get_response(self, owner: str, response_id: str) -> dict[str, Any] | None:
        row = await self.database.fetchrow(
            "SELECT body FROM responses WHERE id = ? AND owner = ?", response_id, owner
        )
        return json.loads(row[0]) if row else None

    async def request_id(self, owner: str, response_id: str) -> str | None:
        """The `x-request-id` of the request that created this response (None: unknown response, or
        stored before ids were kept). Not in the Response object, whose keys are OpenAI's."""
        row = await self.database.fetchrow(
            "SELECT request_id FROM responses WHERE id = ? AND owner = ?", response_id, owner
        )
        return row[0] if row else None

    async def delete_response(self, owner: str, response_id: str) -> bool:
        async with self.database.transaction() as db:
            row = await db.fetchrow("SELECT id FROM responses WHERE id = ? AND owner = ?", response_id, owner)
            if row is None:
                return False
            await db.execute("DELETE FROM responses WHERE id = ?", response_id)
        return True

    async def history(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The items a continuation of this response builds on: every input and output of its chain,
        each server-run call with what the model read of it (`MODEL_READ`)."""
        rows = await self._chain(owner, response_id)
        return None if rows is None else [_with_read(body, read) for _, _, body, read in rows]

    async def input_items(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        """The items used to generate this response: its chain's items and its own inputs."""
        rows = await self._chain(owner, response_id)
        if rows is None:
            return None
        return [json.loads(body) for rid, output, body, _ in rows if not (rid == response_id and output)]

    async def _chain(self, owner: str, response_id: str) -> list[tuple[str, bool, str, str | None]] | None:
        rows = await self.database.fetch(
            _CHAIN + """SELECT chain.id, chain.depth, items.output, items.body, items.model_read
               FROM chain LEFT JOIN response_items items ON items.response_id = chain.id
               ORDER BY chain.depth DESC, items.position ASC""",
            response_id, owner, owner,
        )  # fmt: skip
        if not rows:
            return None
        return [(row[0], bool(row[2]), row[3], row[4]) for row in rows if row[3] is not None]

    async def find_items(self, owner: str, item_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Stored items by id (for `item_reference`), from responses and conversations of this owner."""
        found: dict[str, dict[str, Any]] = {}
        for item_id in dict.fromkeys(item_ids):
            row = await self.database.fetchrow(
                "SELECT items.body FROM response_items items JOIN responses r ON r.id = items.response_id "
                "WHERE items.item_id = ? AND r.owner = ?",
                item_id, owner,
            ) or await self.database.fetchrow(
                "SELECT items.body FROM conversation_items items JOIN conversations c ON c.id = items.conversation_id "
                "WHERE items.item_id = ? AND c.owner = ?",
                item_id, owner,
            )  # fmt: skip
            if row is not None:
                found[item_id] = json.loads(row[0])
        return found

    # --- events of background responses --------------------------------------------------

    async def append_events(self, response_id: str, events: list[tuple[int, str]]) -> None:
        async with self.database.transaction() as db:
            await self._insert_events(db, response_id, events)
            await db.notify(EVENTS_CHANNEL, response_id)

    @contextmanager
    def watch(self, response_id: str) -> Iterator[asyncio.Event]:
        """An event set when this response's stored events may have grown: clear it, read
        them, then wait on it, and nothing written after the read goes unnoticed."""
        changed = asyncio.Event()
        watchers = self._watchers.setdefault(response_id, set())
        watchers.add(changed)
        try:
            yield changed
        finally:
            watchers.discard(changed)
            if not watchers:
                del self._watchers[response_id]

    def _events_added(self, response_id: str | None) -> None:
        """None: notifications may have been missed (the listener reconnected), so every watcher looks."""
        if response_id is None:
            watchers = [w for group in self._watchers.values() for w in group]
        else:
            watchers = list(self._watchers.get(response_id, ()))
        for changed in watchers:
            changed.set()

    async def _insert_events(self, db: Connection, response_id: str, events: list[tuple[int, str]]) -> None:
        if events:
            await db.executemany(
                "INSERT INTO response_events (response_id, sequence_number, body) VALUES (?, ?, ?)",
                [(response_id, sequence, body) for sequence, body in events],
            )

    async def events_after(self, response_id: str, after: int) -> list[tuple[int, str]]:
        rows = await self.database.fetch(
            "SELECT sequence_number, body FROM response_events WHERE response_id = ? AND sequence_number > ? "
            "ORDER BY sequence_number",
            response_id, after,
        )  # fmt: skip
        return [(int(row[0]), row[1]) for row in rows]

    # --- running background responses ----------------------------------------------------

    async def request_cancel(self, owner: str, response_id: str) -> None:
        """Mark the response to be cancelled, and tell the replica running it (`on_cancel`)."""
        async with self.database.transaction() as db:
            await db.execute(
                "UPDATE responses SET cancel_requested = TRUE WHERE id = ? AND owner = ?", response_id, owner
            )
            await db.notify(CANCEL_CHANNEL, response_id)

    async def on_cancel(self, listener: Listener) -> None:
        """Call `listener` with the id of each response a client asks to cancel (None: some
        requests may have been missed; `runs_to_stop` finds them)."""
        await self.database.listen(CANCEL_CHANNEL, listener)

    async def runs_to_stop(self, response_ids: list[str]) -> set[str]:
        """Those of these running responses that a client cancelled on another replica, or that
        another replica ended (it marked them failed when this process stalled past their lease)."""
        if not response_ids:
            return set()
        marks = ", ".join("?" for _ in response_ids)
        rows = await self.database.fetch(
            f"SELECT id FROM responses WHERE (cancel_requested OR status NOT IN (?, ?)) AND id IN ({marks})",
            *RUNNING, *response_ids,
        )
        return {row[0] for row in rows}

    async def renew_leases(self, response_ids: list[str], until_ms: int) -> None:
        if response_ids:
            marks = ", ".join("?" for _ in response_ids)
            await self.database.execute(
                f"UPDATE responses SET lease_until_ms = ? WHERE id IN ({marks})", until_ms, *response_ids
            )

    async def running(self, response_id: str) -> bool:
        """Whether a background response is still queued or in progress (False: finished, or gone)."""
        row = await self.database.fetchrow("SELECT status FROM responses WHERE id = ?", response_id)
        return row is not None and row[0] in RUNNING

    async def expired_runs(self, now_ms: int) -> list[dict[str, Any]]:
        """Background responses whose runner stopped renewing its lease (it crashed or was killed)."""
        rows = await self.database.fetch(
            "SELECT body FROM responses WHERE status IN (?, ?) AND lease_until_ms < ?", *RUNNING, now_ms
        )
        return [json.loads(row[0]) for row in rows]

    # --- the inspector (`api/ui/`) ---------------------------------------------------------

    async def listing(
        self, owner: str, *, kind: str | None = None, model: str | None = None, status: str | None = None,
        before: tuple[int, int, str] | None = None, limit: int = 50,
    ) -> Page:
        """This owner's responses and conversations, newest first, for the inspector's list.

        Newest by `created_at` (seconds), then by when they were stored, then id. `model` and
        `status` filter responses (a conversation has neither), `kind` (`response`,
        `conversation`) keeps one of the two; `before` is the previous page's last row's `cursor`.
        """
        parts, args = [], []
        for part, columns, table in (
            ("response", "id, created_at, stored_ms, status, model, background, body, timeline", "responses"),
            ("conversation", "id, created_at, stored_ms, NULL, NULL, FALSE, metadata, NULL", "conversations"),
        ):
            if kind not in (None, part) or (part == "conversation" and (model or status)):
                continue
            where = ["owner = ?"]
            args.append(owner)
            if part == "response" and model:
                where.append("model = ?")
                args.append(model)
            if part == "response" and status:
                where.append("status = ?")
                args.append(status)
            if before is not None:
                created, stored, last = before
                where.append("(created_at < ? OR (created_at = ? AND (stored_ms < ? OR (stored_ms = ? AND id < ?))))")
                args += [created, created, stored, stored, last]
            parts.append(f"SELECT '{part}' AS kind, {columns} FROM {table} WHERE {' AND '.join(where)}")
        if not parts:
            return Page([], False)
        rows = await self.database.fetch(
            f"SELECT * FROM ({' UNION ALL '.join(parts)}) listed ORDER BY created_at DESC, stored_ms DESC, id DESC "
            "LIMIT ?",
            *args, limit + 1,
        )  # fmt: skip
        listed = [
            {"kind": row[0], "id": row[1], "created_at": int(row[2]), "cursor": (int(row[2]), int(row[3]), row[1]),
             "status": row[4], "model": row[5], "background": bool(row[6]), "body": json.loads(row[7]),
             "timeline": json.loads(row[8]) if row[8] else None}
            for row in rows[:limit]
        ]  # fmt: skip
        return Page(listed, len(rows) > limit)

    async def models(self, owner: str) -> list[str]:
        """The models this owner's responses were made by, for the inspector's filter."""
        rows = await self.database.fetch(
            "SELECT DISTINCT model FROM responses WHERE owner = ? AND model IS NOT NULL ORDER BY model", owner
        )
        return [row[0] for row in rows]

    async def inspected(self, owner: str, response_id: str) -> Inspected | None:
        """A response with what the inspector shows beside it: its own input items, the chain of
        responses it continues (oldest first), the request id and the timeline of its events."""
        row = await self.database.fetchrow(
            "SELECT body, request_id, timeline FROM responses WHERE id = ? AND owner = ?", response_id, owner
        )
        if row is None:
            return None
        inputs = await self.database.fetch(
            "SELECT body FROM response_items WHERE response_id = ? AND NOT output ORDER BY position", response_id
        )
        return Inspected(
            json.loads(row[0]), [json.loads(item[0]) for item in inputs], (await self.chain(owner, response_id))[:-1],
            row[1], json.loads(row[2]) if row[2] else None,
        )

    async def chain(self, owner: str, response_id: str) -> list[str]:
        """The ids of this stored response and of those it continues, oldest first (empty: not stored)."""
        rows = await self.database.fetch(
            _CHAIN + "SELECT id FROM chain ORDER BY depth DESC",
            response_id, owner, owner,
        )  # fmt: skip
        return [row[0] for row in rows]

    async def item_sources(self, owner: str, conversation_id: str) -> dict[str, tuple[str, bool]]:
        """Which stored response of this conversation wrote each of its items: item id -> (response
        id, whether the item is an output). Items added through the Conversations API have none."""
        rows = await self.database.fetch(
            "SELECT items.item_id, items.response_id, items.output FROM conversation_items held "
            "JOIN response_items items ON items.item_id = held.item_id "
            "JOIN responses r ON r.id = items.response_id "
            "WHERE held.conversation_id = ? AND r.conversation_id = ? AND r.owner = ? ORDER BY r.stored_ms DESC",
            conversation_id, conversation_id, owner,
        )  # fmt: skip
        return {row[0]: (row[1], bool(row[2])) for row in rows}  # the first writer last, so it wins

    # --- conversations -------------------------------------------------------------------

    async def create_conversation(
        self, owner: str, conversation: dict[str, Any], items: list[dict[str, Any]]
    ) -> None:
        async with self.database.transaction() as db:
            await db.execute(
                "INSERT INTO conversations (id, owner, created_at, metadata, stored_ms) VALUES (?, ?, ?, ?, ?)",
                conversation["id"], owner, conversation["created_at"], _dumps(conversation["metadata"]), _now_ms(),
            )  # fmt: skip
            await self._append_conversation(db, conversation["id"], items)

    async def get_conversation(self, owner: str, conversation_id: str) -> dict[str, Any] | None:
        row = await self.database.fetchrow(
            "SELECT id, created_at, metadata FROM conversations WHERE id = ? AND owner = ?", conversation_id, owner
        )
        if row is None:
            return None
        return {"id": row[0], "object": "conversation", "created_at": int(row[1]), "metadata": json.loads(row[2])}

    async def update_conversation(self, owner: str, conversation_id: str, metadata: dict[str, str]) -> None:
        await self.database.execute(
            "UPDATE conversations SET metadata = ? WHERE id = ? AND owner = ?", _dumps(metadata), conversation_id, owner
        )

    async def delete_conversation(self, owner: str, conversation_id: str) -> bool:
        async with self.database.transaction() as db:
            row = await db.fetchrow("SELECT id FROM conversations WHERE id = ? AND owner = ?", conversation_id, owner)
            if row is None:
                return False
            await db.execute("DELETE FROM conversations WHERE id = ?", conversation_id)
        return True

    async def add_conversation_items(
        self, conversation_id: str, items: list[dict[str, Any]], reads: Reads | None = None
    ) -> None:
        """`items` at the conversation's end (`reads`: what the model read of the server-run calls
        among them, `MODEL_READ`)."""
        async with self.database.transaction() as db:
            await self._append_conversation(db, conversation_id, items, reads)

    async def _append_conversation(
        self, db: Connection, conversation_id: str, items: list[dict[str, Any]], reads: Reads | None = None
    ) -> None:
        # Lock the conversation so concurrent appends get distinct positions.
        await db.fetchrow(f"SELECT id FROM conversations WHERE id = ?{self._for_update}", conversation_id)
        row = await db.fetchrow(
            "SELECT COALESCE(MAX(position), 0) FROM conversation_items WHERE conversation_id = ?", conversation_id
        )
        start = int(row[0]) if row else 0
        await self._check_new(db, conversation_id, [item["id"] for item in items])
        if items:
            reads = reads or {}
            await db.executemany(
                "INSERT INTO conversation_items (conversation_id, position, item_id, body, model_read) VALUES (?, ?, ?, ?, ?)",
                [(conversation_id, start + i + 1, item["id"], _dumps(item), reads.get(item["id"]))
                 for i, item in enumerate(items)],
            )  # fmt: skip

    async def _check_new(self, db: Connection, conversation_id: str, ids: list[str]) -> None:
        """DuplicateItem for an id the conversation holds or the list repeats, checked under the
        conversation's lock rather than left to the unique index (whose violation would be a 500)."""
        seen: set[str] = set()
        for item_id in ids:
            if item_id in seen:
                raise DuplicateItem(item_id)
            seen.add(item_id)
        for start in range(0, len(ids), 500):  # within any database's limit of parameters
            chunk = ids[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            row = await db.fetchrow(f"SELECT item_id FROM conversation_items WHERE conversation_id = ? "
                                    f"AND item_id IN ({marks})", conversation_id, *chunk)  # fmt: skip
            if row is not None:
                raise DuplicateItem(row[0])

    async def conversation_items(self, conversation_id: str, *, model_reads: bool = False) -> list[dict[str, Any]]:
        """The conversation's items; with `model_reads`, as the model reads them: each server-run call
        with what the model read of it (`MODEL_READ`)."""
        rows = await self.database.fetch(
            "SELECT body, model_read FROM conversation_items WHERE conversation_id = ? ORDER BY position", conversation_id
        )
        return [_with_read(body, read if model_reads else None) for body, read in rows]

    async def conversation_page(
        self, conversation_id: str, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> Page | None:
        """A page of items, or None when `after` is not an item of the conversation."""
        position: int | None = None
        if after is not None:
            row = await self.database.fetchrow(
                "SELECT position FROM conversation_items WHERE conversation_id = ? AND item_id = ?",
                conversation_id, after,
            )  # fmt: skip
            if row is None:
                return None
            position = int(row[0])
        if order == "asc":
            rows = await self.database.fetch(
                "SELECT body FROM conversation_items WHERE conversation_id = ? AND position > ? "
                "ORDER BY position ASC LIMIT ?",
                conversation_id, position or 0, limit + 1,
            )  # fmt: skip
        else:
            rows = await self.database.fetch(
                "SELECT body FROM conversation_items WHERE conversation_id = ? AND position < ? "
                "ORDER BY position DESC LIMIT ?",
                conversation_id, position if position is not None else 2**62, limit + 1,
            )  # fmt: skip
        items = [json.loads(row[0]) for row in rows]
        return Page(items[:limit], len(items) > limit)

    async def get_conversation_item(self, conversation_id: str, item_id: str) -> dict[str, Any] | None:
        row = await self.database.fetchrow(
            "SELECT body FROM conversation_items WHERE conversation_id = ? AND item_id = ?", conversation_id, item_id
        )
        return json.loads(row[0]) if row else None

    async def delete_conversation_item(self, conversation_id: str, item_id: str) -> bool:
        async with self.database.transaction() as db:
            row = await db.fetchrow(
                "SELECT position FROM conversation_items WHERE conversation_id = ? AND item_id = ?",
                conversation_id, item_id,
            )  # fmt: skip
            if row is None:
                return False
            await db.execute(
                "DELETE FROM conversation_items WHERE conversation_id = ? AND item_id = ?", conversation_id, item_id
            )
        return True


async def _insert_items(
    db: Connection, response_id: str, items: list[dict[str, Any]], offset: int, output: bool, reads: Reads | None = None
) -> None:
    if items:
        reads = reads or {}
        await db.executemany(
            "INSERT INTO response_items (response_id, position, output, item_id, body, model_read) VALUES (?, ?, ?, ?, ?, ?)",
            [(response_id, offset + i, output, item["id"], _dumps(item), reads.get(item["id"]))
             for i, item in enumerate(items)],
        )  # fmt: skip


def _with_read(body: str, read: str | None) -> dict[str, Any]:
    """A stored item, with what the model read of it under `MODEL_READ` when that was kept."""
    item: dict[str, Any] = json.loads(body)
    if read is not None:
        item[MODEL_READ] = read
    return item


def _now_ms() -> int:
    return int(time.time() * 1000)


def _dumps(value: Any) -> str:
    """JSON text to store (a stored response's body and items are written on the hot path).
    Read back with the standard library: orjson reads integers beyond 64 bits as floats."""
    return json_utf8(value).decode()
