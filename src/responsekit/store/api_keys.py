"""API keys kept as data: the `api_keys` table, and each process's copy of it in memory.

Only a key's SHA-256 is stored; the secret is shown once, when the key is made. Checking a
key is on every request's path, so it reads the copy in memory (`KeyTable.find`), never the
database. The copy is read again whenever a key is made or revoked: on PostgreSQL every
replica hears of it by notification (`KEYS_CHANNEL`, as runs hear of cancellations), so a
revoked key is refused everywhere within the time a notification and one small read take;
on SQLite the process that changed the table is told at once, and the copy is also read
again within `POLL_SECONDS` of another process's commit to the file (such as the `api-keys`
command's, which is not told: `Database.changed_elsewhere`). A key's last use is written at most once per `TOUCH_SECONDS` per
key and process, off the request's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .database import Database, Row

log = logging.getLogger(__name__)

KEYS_CHANNEL = "responsekit_api_keys"
"""Notified with a key's id when it is made or revoked."""
POLL_SECONDS = {"sqlite": 1.0, "postgres": 30.0}
"""How often the copy in memory is read again without being told: on SQLite the only way to
hear of another process's change; on PostgreSQL a safety net under the notifications."""
TOUCH_SECONDS = 60.0
"""A key's `last_used_at` is written at most this often (per process)."""
SECRET_PREFIX = "rk-"


@dataclass(frozen=True, slots=True)
class Limits:
    """A key's limits; None: no limit of that kind."""

    rpm: int | None = None
    """Requests per minute."""
    tpm: int | None = None
    """Tokens (input and output) per minute."""
    max_concurrent: int | None = None
    """Requests in flight at once."""
    daily_tokens: int | None = None
    """Tokens per UTC day."""
    monthly_tokens: int | None = None
    """Tokens per UTC calendar month."""

    @classmethod
    def from_dict(cls, value: dict[str, Any] | None) -> Limits:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (value or {}).items() if k in names and v is not None})

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)

    def over(self, other: Limits) -> Limits:
        """These limits, with `other`'s where these set none (a key's own over the default)."""
        return Limits(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None else getattr(other, f.name)
                         for f in fields(self)})  # fmt: skip


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored key, as the admin API shows it (never its secret, which is not kept)."""

    id: str
    key_hash: str
    redacted: str
    name: str
    team: str | None
    created_at: int
    last_used_at: int | None
    expires_at: int | None
    revoked_at: int | None
    models: tuple[str, ...] | None
    """The models it may use; None: all."""
    limits: Limits = field(default_factory=Limits)
    weight: float = 1.0
    """Its share of a busy engine against other keys waiting (`backends/fairness.py`)."""

    def usable(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def allows(self, *models: str) -> bool:
        """Whether it may use a model known by any of these names (the one asked, the one served)."""
        return self.models is None or any(model in self.models for model in models)

    def body(self) -> dict[str, Any]:
        return {
            "object": "api_key", "id": self.id, "name": self.name, "team": self.team,
            "redacted_value": self.redacted, "created_at": self.created_at, "last_used_at": self.last_used_at,
            "expires_at": self.expires_at, "revoked_at": self.revoked_at,
            "models": list(self.models) if self.models is not None else None, "limits": self.limits.as_dict(),
            "weight": self.weight,
        }  # fmt: skip


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


_COLUMNS = "id, key_hash, redacted, name, team, created_at, last_used_at, expires_at, revoked_at, models, limits, weight"


def _key(row: Row) -> ApiKey:
    models = json.loads(row[9]) if row[9] is not None else None
    return ApiKey(
        row[0], row[1], row[2], row[3], row[4], int(row[5]), _int(row[6]), _int(row[7]), _int(row[8]),
        tuple(models) if models is not None else None, Limits.from_dict(json.loads(row[10])), float(row[11]),
    )  # fmt: skip


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


class KeyTable:
    """The `api_keys` table, and this process's copy of it."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._by_hash: dict[str, ApiKey] = {}
        self._any = False
        """Whether any key was ever stored (a revoked one too: revoking the last key does not open the server)."""
        self._touched: dict[str, float] = {}
        self._pending_touch: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._reloading: asyncio.Task[None] | None = None
        self._reload_again = False

    # --- the copy in memory -------------------------------------------------------------

    async def start(self) -> None:
        """Read the table, then keep the copy current (notifications, polling) until `stop`."""
        await self.database.listen(KEYS_CHANNEL, self._changed)
        await self.reload()
        self._poller = asyncio.create_task(self._poll(POLL_SECONDS.get(self.database.dialect, 5.0)))

    async def stop(self) -> None:
        tasks = [t for t in (self._poller, self._reloading) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.flush_touches()

    @property
    def any(self) -> bool:
        """Whether keys are kept as data here (then every request needs a key)."""
        return self._any

    def find(self, key_hash: str) -> ApiKey | None:
        """The stored key with this hash, usable or not (None: no such key)."""
        return self._by_hash.get(key_hash)

    def used(self, key: ApiKey, now: float) -> None:
        """Note a use of `key`: written in the background at most once per `TOUCH_SECONDS`."""
        if now - self._touched.get(key.key_hash, 0.0) < TOUCH_SECONDS:
            return
        self._touched[key.key_hash] = now
        self._pending_touch[key.id] = int(now)
        self._spawn(self.flush_touches())

    async def flush_touches(self) -> None:
        pending, self._pending_touch = self._pending_touch, {}
        for key_id, when in pending.items():
            try:
                await self.database.execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", when, key_id)
            except Exception:  # a lost last-used time, or a read the poll repeats, fails nothing
                log.warning("could not record the last use of API key %s", key_id, exc_info=True)

    async def reload(self) -> None:
        rows = await self.database.fetch(f"SELECT {_COLUMNS} FROM api_keys")
        keys = [_key(row) for row in rows]
        self._by_hash = {key.key_hash: key for key in keys}
        self._any = bool(keys)

    def _changed(self, _payload: str | None) -> None:
        """A key was made or revoked (None: notifications may have been missed): read the table again."""
        if self._reloading is not None and not self._reloading.done():
            self._reload_again = True  # the read under way may have started before the change
            return
        self._reloading = asyncio.get_running_loop().create_task(self._reload_until_current())

    async def _reload_until_current(self) -> None:
        while True:
            self._reload_again = False
            try:
                await self.reload()
            except Exception:  # a lost last-used time, or a read the poll repeats, fails nothing
                log.warning("could not read the API keys again", exc_info=True)
            if not self._reload_again:
                return

    async def _poll(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                changed = await self.database.changed_elsewhere()
            except Exception:  # read again, as if told of a change
                log.warning("could not tell whether the API keys changed", exc_info=True)
                changed = True
            if changed:
                self._changed(None)

    def _spawn(self, work: Any) -> None:
        try:
            task = asyncio.get_running_loop().create_task(work)
        except RuntimeError:  # no loop (a synchronous caller outside the server): nothing to schedule on
            work.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the table ----------------------------------------------------------------------

    async def create(
        self, name: str, *, team: str | None = None, models: list[str] | None = None, expires_at: int | None = None,
        limits: Limits | None = None, weight: float = 1.0,
    ) -> tuple[ApiKey, str]:
        """A new key and its secret (shown this once: only its hash is kept)."""
        secret = new_secret()
        key = ApiKey(
            id="key_" + secrets.token_hex(12), key_hash=secret_hash(secret), redacted=f"{secret[:7]}…{secret[-4:]}",
            name=name, team=team, created_at=int(time.time()), last_used_at=None, expires_at=expires_at,
            revoked_at=None, models=tuple(dict.fromkeys(models)) if models is not None else None,
            limits=limits or Limits(), weight=weight,
        )  # fmt: skip
        async with self.database.transaction() as db:
            await db.execute(
                f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                key.id, key.key_hash, key.redacted, key.name, key.team, key.created_at, None, key.expires_at, None,
                json.dumps(list(key.models)) if key.models is not None else None, json.dumps(key.limits.as_dict()),
                key.weight,
            )  # fmt: skip
            await db.notify(KEYS_CHANNEL, key.id)
        self._by_hash[key.key_hash] = key
        self._any = True
        return key, secret

    async def listing(
        self, after: str | None = None, limit: int | None = None, newest_first: bool = False
    ) -> list[ApiKey]:
        """Keys in the order they were made (or the reverse), from after the key `after` (a cursor:
        the last id of the page before; an unknown id starts nowhere), at most `limit` of them."""
        order = "DESC" if newest_first else "ASC"
        where, arguments = "", []
        if after is not None:
            row = await self.database.fetchrow("SELECT created_at FROM api_keys WHERE id = ?", after)
            if row is None:
                return []
            beyond = "<" if newest_first else ">"
            where = f"WHERE created_at {beyond} ? OR (created_at = ? AND id {beyond} ?)"
            arguments = [row[0], row[0], after]
        bound = f" LIMIT {int(limit)}" if limit is not None else ""
        rows = await self.database.fetch(
            f"SELECT {_COLUMNS} FROM api_keys {where} ORDER BY created_at {order}, id {order}{bound}", *arguments
        )
        return [_key(row) for row in rows]

    async def get(self, key_id: str) -> ApiKey | None:
        row = await self.database.fetchrow(f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", key_id)
        return _key(row) if row else None

    async def revoke(self, key_id: str) -> ApiKey | None:
        """Revoke the key (None: no such key); revoking it again changes nothing."""
        async with self.database.transaction() as db:
            row = await db.fetchrow(f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?", key_id)
            if row is None:
                return None
            key = _key(row)
            if key.revoked_at is None:
                key = replace(key, revoked_at=int(time.time()))
                await db.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ?", key.revoked_at, key_id)
                await db.notify(KEYS_CHANNEL, key_id)
        self._by_hash[key.key_hash] = key
        return key
