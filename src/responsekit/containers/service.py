"""Containers as the gateway keeps them: records in its store, a runtime that only executes.

A container belongs to the key that made it (its owner hash): another key's container is not
found, never forbidden, so that an id cannot be probed. It expires `expires_after.minutes` after
its last use (`last_active_at`); an expired container keeps its record, `status: "expired"`, as
OpenAI's list keeps them, and its workspace is removed, on first sight (a request that names it)
or by the sweep (`MAINTENANCE_SECONDS`). Using it afterwards is OpenAI's 400 "Container is
expired." (docs/code-execution.md, "The Containers API").

Every method raises `APIError`: 404 for a container this owner does not have, 400 for a bad
value, an expired container, a path outside the workspace, or no sandbox on this machine. The
server-run tools turn it into a failed call the model reads; the API sends it as it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..canonical.errors import APIError
from ..canonical.ids import new_id, storable
from ..config import Settings
from ..files.service import VectorStores
from ..operations.periodic import every
from ..store import Page
from ..store.database import Database, Row
from .bubblewrap import bubblewrap_runtime
from .opensandbox import remote_runtime
from .runtime import (
    WORKSPACE,
    BadPath,
    CodeRun,
    Completed,
    DomainSecret,
    Limits,
    Network,
    Runtime,
    SandboxUnavailable,
    WorkspaceFull,
)

log = logging.getLogger(__name__)

Order = Literal["asc", "desc"]
Source = Literal["user", "assistant"]
T = TypeVar("T")

MEMORY_LIMITS = {"1g": 1 << 30, "4g": 4 << 30, "16g": 16 << 30, "64g": 64 << 30}
"""`memory_limit` as the `openai` SDK's `container_create_params` lists it, in bytes."""
DEFAULT_MINUTES = 20
MAX_MINUTES = 20
"""OpenAI expires a container after 20 minutes without use and refuses a longer `expires_after`
(`integer_above_max_value`; https://github.com/unslothai/unsloth/pull/5466 measured it)."""
EXPIRED_KEPT_SECONDS = 7 * 86400
"""How long an expired container's record stays listed before the sweep deletes it."""
MAINTENANCE_SECONDS = 30.0
MAX_NAME = 256
_DOMAIN = re.compile(
    r"^(\*\.)?[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*$"
)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
"""A domain secret is sent as a header (containers/proxy.py): its name a token and its value
without control characters (RFC 9110, sections 5.1 and 5.5), so it cannot split a request."""
_CONTAINER = (
    "id, name, created_ms, last_active_at, expires_minutes, memory_limit, network_policy, status"
)
_FILE = "id, container_id, path, bytes, source, created_ms"


@dataclass(slots=True)
class Container:
    """A container's record."""

    id: str
    name: str
    created_ms: int
    last_active_at: int
    minutes: int
    memory_limit: str
    network_policy: dict[str, Any]
    """As created, domain secrets included: they reach only the runtime's proxy, never a body."""
    status: str

    @property
    def expires_at(self) -> int:
        return self.last_active_at + self.minutes * 60

    def expired(self, now: float) -> bool:
        return self.status == "expired" or now >= self.expires_at

    def body(self, now: float) -> dict[str, Any]:
        """The Container object, as the `openai` SDK's `ContainerRetrieveResponse` reads it."""
        policy: dict[str, Any] = {"type": self.network_policy["type"]}
        if policy["type"] == "allowlist":
            policy["allowed_domains"] = list(self.network_policy["allowed_domains"])
        return {"id": self.id, "object": "container", "created_at": self.created_ms // 1000, "name": self.name,
                "status": "expired" if self.expired(now) else "running",
                "expires_after": {"anchor": "last_active_at", "minutes": self.minutes},
                "last_active_at": self.last_active_at, "memory_limit": self.memory_limit,
                "network_policy": policy}  # fmt: skip

    def network(self) -> Network:
        if self.network_policy["type"] != "allowlist":
            return Network()
        secrets = tuple(DomainSecret(s["domain"], s["name"], s["value"])
                        for s in self.network_policy.get("domain_secrets", ()))  # fmt: skip
        return Network(tuple(self.network_policy["allowed_domains"]), secrets)


@dataclass(slots=True)
class ContainerFile:
    """A file's record: uploaded (`user`) or written by code that ran there (`assistant`)."""

    id: str
    container_id: str
    path: str
    bytes: int
    source: str
    created_ms: int

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def body(self) -> dict[str, Any]:
        """As the `openai` SDK's `containers.FileRetrieveResponse` reads it."""
        return {"id": self.id, "object": "container.file", "created_at": self.created_ms // 1000,
                "bytes": self.bytes, "container_id": self.container_id, "path": self.path,
                "source": self.source}  # fmt: skip


Written = list[ContainerFile]
"""The files a run wrote, recorded as the assistant's (a module name: `Containers.list` is a method)."""


class Containers:
    """The containers of every key (`app.state.containers`), and the runtime that executes them.

    `runtime` is None when no sandbox can run here (`unavailable` says why): records are still
    read, listed and deleted, but nothing is created or run, never without a sandbox.
    """

    def __init__(
        self, database: Database, runtime: Runtime | None, files: VectorStores, limits: Limits = Limits(),
        unavailable: str = "",
    ) -> None:  # fmt: skip
        self.database = database
        self.runtime = runtime
        self.files = files
        self.limits = limits
        self.unavailable = unavailable
        self._started: set[str] = set()
        """Containers this process's runtime made ready; the sweep removes those no longer running."""
        self._maintenance: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, settings: Settings, database: Database, files: VectorStores) -> Containers:
        """Containers on the configured sandbox; with none usable here, a service that refuses to
        create or run any, saying why (logged once)."""
        limits = Limits(**settings.sandbox_limits.model_dump())
        if settings.sandbox == "off":
            return cls(database, None, files, limits, "the server's setting sandbox is off")
        try:
            if settings.sandbox_url:  # docs/code-execution.md, A remote sandbox
                return cls(database, remote_runtime(settings), files, limits)
            # the probe starts a sandbox once (tens of milliseconds): off the event loop
            runtime = await asyncio.to_thread(bubblewrap_runtime, settings.data_dir / "containers")
        except SandboxUnavailable as exc:
            log.warning("containers and code execution off: %s (docs/code-execution.md)", exc)
            return cls(database, None, files, limits, str(exc))
        return cls(database, runtime, files, limits)

    async def start(self) -> None:
        self._maintenance = asyncio.create_task(every(MAINTENANCE_SECONDS, self.sweep, "expiring containers", at_once=True))

    async def close(self) -> None:
        if self._maintenance is not None:
            self._maintenance.cancel()
            with suppress(asyncio.CancelledError):
                await self._maintenance
        if self.runtime is not None:
            await self.runtime.close()

    # --- containers ----------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        *,
        name: str,
        file_ids: Sequence[str] = (),
        memory_limit: str | None = "1g",
        expires_after: Any = None,
        network_policy: Any = None,
    ) -> dict[str, Any]:
        """A new container, running, with these Files API files (the owner's) copied to
        `/mnt/data/<filename>`; every argument is checked as OpenAI checks it (400s)."""
        runtime = self._runtime()
        if not isinstance(name, str) or not storable(name) or len(name) > MAX_NAME:
            raise APIError(400, f"name must be a string of at most {MAX_NAME} characters.", param="name",
                           code="invalid_value")  # fmt: skip
        memory = memory_limit or "1g"
        if memory not in MEMORY_LIMITS:
            raise APIError(400, f"memory_limit must be one of {', '.join(MEMORY_LIMITS)}.", param="memory_limit",
                           code="invalid_value")  # fmt: skip
        minutes = _minutes(expires_after)
        policy = _network_policy(network_policy)
        if not isinstance(file_ids, (list, tuple)) or not all(isinstance(f, str) for f in file_ids):
            raise APIError(
                400, "file_ids must be a list of file ids.", param="file_ids", code="invalid_type"
            )
        for file_id in dict.fromkeys(file_ids):  # each checked before anything is made
            if await self.files.catalog.get_file(owner, file_id) is None:
                raise APIError(
                    404, f"No file found with id '{file_id}'.", param="file_ids", code="not_found"
                )
        now = time.time()
        container = Container(
            new_id("cntr"), name, int(now * 1000), int(now), minutes, memory, policy, "running"
        )
        await self.database.execute(
            f"INSERT INTO containers (owner, {_CONTAINER}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            owner, container.id, container.name, container.created_ms, container.last_active_at, container.minutes,
            container.memory_limit, json.dumps(container.network_policy), container.status,
        )  # fmt: skip
        try:
            await self._ready(runtime, container)
            for file_id in dict.fromkeys(file_ids):
                await self._put(
                    runtime,
                    container,
                    *await self._uploaded(owner, file_id, param="file_ids"),
                    "user",
                )
        except BaseException:
            await self.delete(owner, container.id)  # all or nothing: no container missing a file
            raise
        return container.body(now)

    async def get(self, owner: str, container_id: str) -> dict[str, Any] | None:
        """The Container object (`status: "expired"` once it expired), or None: not this owner's, or deleted."""
        container = await self._record(owner, container_id)
        return None if container is None else container.body(time.time())

    async def list(
        self,
        owner: str,
        after: str | None = None,
        limit: int = 20,
        order: Order = "desc",
        name: str | None = None,
    ) -> Page | None:
        """A page of the owner's containers; None when `after` names none of them."""
        where, args = "owner = ?", [owner]
        if name is not None:
            where, args = where + " AND name = ?", [*args, name]
        rows = await _page(
            self.database, "containers", _CONTAINER, where, args, after, limit, order
        )
        if rows is None:
            return None
        now = time.time()
        containers = [_container(row) for row in rows[:limit]]
        for container in containers:
            if container.status == "running" and container.expired(now):
                await self._expire(container.id)
        return Page([container.body(now) for container in containers], len(rows) > limit)

    async def delete(self, owner: str, container_id: str) -> bool:
        """Removes the record, its files' records and its workspace; False if the owner has no such container."""
        async with self.database.transaction() as db:
            row = await db.fetchrow(
                "SELECT id FROM containers WHERE id = ? AND owner = ?", container_id, owner
            )
            if row is None:
                return False
            await db.execute("DELETE FROM container_files WHERE container_id = ?", container_id)
            await db.execute("DELETE FROM containers WHERE id = ?", container_id)
        await self._remove(container_id)
        return True

    async def touch(self, container_id: str) -> None:
        """A use: the expiry counts from now."""
        await self.database.execute("UPDATE containers SET last_active_at = ? WHERE id = ? AND status = ?",
                                    int(time.time()), container_id, "running")  # fmt: skip

    async def auto(self, owner: str, spec: Any, *, name: str = "auto") -> str:
        """The container a tool's `container` (or `environment`) names: an id (this owner's and
        live), `{"type": "container_reference", "container_id"}`, or a new one for
        `{"type": "auto" | "container_auto", "file_ids", "memory_limit", "network_policy"}`."""
        if isinstance(spec, dict) and spec.get("type") == "container_reference":
            spec = spec.get("container_id")
        if isinstance(spec, str):
            await self.ensure(owner, spec)
            return spec
        if not isinstance(spec, dict) or spec.get("type") not in ("auto", "container_auto"):
            raise APIError(400, "container must be a container id or {\"type\": \"auto\"}.", param="container",
                           code="invalid_value")  # fmt: skip
        created = await self.create(owner, name=name, file_ids=spec.get("file_ids") or (),
                                    memory_limit=spec.get("memory_limit"),
                                    network_policy=spec.get("network_policy"))  # fmt: skip
        return str(created["id"])

    async def ensure(self, owner: str, container_id: str) -> Runtime:
        """The runtime, with this live container of the owner's ready in it (after a restart of the
        gateway too); the use counts as activity."""
        return (await self._live(owner, container_id))[0]

    # --- running -------------------------------------------------------------------------

    async def run(
        self,
        owner: str,
        container_id: str,
        command: str,
        *,
        timeout: float | None = None,
        max_output: int | None = None,
    ) -> tuple[Completed, Written]:
        """A shell command in the workspace; returns its end and the files it wrote (recorded, `assistant`)."""
        runtime, container = await self._live(owner, container_id)
        done = await self._sandboxed(
            runtime.run(container.id, command, timeout=timeout, max_output=max_output)
        )
        await self.touch(container.id)
        return done, await self._record_written(runtime, container)

    async def run_code(
        self, owner: str, container_id: str, code: str, *, timeout: float | None = None
    ) -> tuple[CodeRun, Written]:
        """Python in the container's kernel; returns what it gave and the files it wrote (recorded, `assistant`)."""
        runtime, container = await self._live(owner, container_id)
        ran = await self._sandboxed(runtime.run_code(container.id, code, timeout=timeout))
        await self.touch(container.id)
        return ran, await self._record_written(runtime, container)

    # --- files ---------------------------------------------------------------------------

    async def add_file(
        self,
        owner: str,
        container_id: str,
        *,
        data: bytes,
        filename: str | None = None,
        path: str | None = None,
        source: Source = "user",
    ) -> ContainerFile:
        """Writes a file: `filename` (a plain name) at `/mnt/data/<filename>`, or `path` inside the workspace."""
        if (filename is None) == (path is None):
            raise ValueError("add_file takes a filename or a path")
        where = (
            _path(path, param="path")
            if path is not None
            else _filename(filename or "", param="file")
        )
        runtime, container = await self._live(owner, container_id)
        return await self._put(runtime, container, where, data, source)

    async def add_file_id(self, owner: str, container_id: str, file_id: str) -> ContainerFile:
        """Copies a Files API file of the owner's to `/mnt/data/<its filename>`."""
        runtime, container = await self._live(owner, container_id)
        path, data = await self._uploaded(owner, file_id, param="file_id")
        return await self._put(runtime, container, path, data, "user")

    async def read_path(self, owner: str, container_id: str, path: str) -> bytes | None:
        """The bytes of the file at `path` in the workspace (the code tools' text editor); None
        when there is no file there."""
        where = _path(path, param="path")
        runtime, container = await self._live(owner, container_id)
        return await self._sandboxed(runtime.get_file(container.id, where))

    async def workspace(self, owner: str, container_id: str) -> list[str]:
        """The paths of the workspace's files, as code sees them."""
        runtime, container = await self._live(owner, container_id)
        return sorted(entry.path for entry in await self._sandboxed(runtime.list_files(container.id)))

    async def list_files(
        self,
        owner: str,
        container_id: str,
        after: str | None = None,
        limit: int = 20,
        order: Order = "desc",
    ) -> Page | None:
        """A page of the container's files; None when `after` names none of them."""
        await self._live(owner, container_id)
        rows = await _page(
            self.database,
            "container_files",
            _FILE,
            "container_id = ?",
            [container_id],
            after,
            limit,
            order,
        )
        if rows is None:
            return None
        return Page([_file(row).body() for row in rows[:limit]], len(rows) > limit)

    async def get_file(self, owner: str, container_id: str, file_id: str) -> ContainerFile | None:
        await self._live(owner, container_id)
        row = await self.database.fetchrow(f"SELECT {_FILE} FROM container_files WHERE id = ? AND container_id = ?",
                                           file_id, container_id)  # fmt: skip
        return None if row is None else _file(row)

    async def file_content(
        self, owner: str, container_id: str, file_id: str
    ) -> tuple[ContainerFile, bytes] | None:
        """A file's record and bytes; None when there is no such file (its record goes if code deleted it)."""
        file = await self.get_file(owner, container_id, file_id)
        if file is None:
            return None
        runtime = self._runtime()
        data = await self._sandboxed(runtime.get_file(container_id, file.path))
        if data is None:
            await self.database.execute("DELETE FROM container_files WHERE id = ?", file.id)
            return None
        return file, data

    async def find_file(self, owner: str, file_id: str) -> ContainerFile | None:
        """A file of one of the owner's containers by its id alone: Anthropic's Files API names a
        code execution output by its `file_id` only (docs/code-execution.md)."""
        columns = ", ".join(f"f.{column.strip()}" for column in _FILE.split(","))
        row = await self.database.fetchrow(
            f"SELECT {columns} FROM container_files f JOIN containers c ON c.id = f.container_id "
            "WHERE f.id = ? AND c.owner = ?", file_id, owner,
        )  # fmt: skip
        return None if row is None else _file(row)

    async def delete_file(self, owner: str, container_id: str, file_id: str) -> bool:
        file = await self.get_file(owner, container_id, file_id)
        if file is None:
            return False
        await self._sandboxed(self._runtime().delete_file(container_id, file.path))
        await self.database.execute("DELETE FROM container_files WHERE id = ?", file.id)
        return True

    # --- inside ----------------------------------------------------------------------------

    def _runtime(self) -> Runtime:
        if self.runtime is None:
            raise sandbox_unavailable(self.unavailable)
        return self.runtime

    async def _record(self, owner: str, container_id: str) -> Container | None:
        """The owner's container, marked expired (its workspace removed) if its time ran out."""
        row = await self.database.fetchrow(f"SELECT {_CONTAINER} FROM containers WHERE id = ? AND owner = ?",
                                           container_id, owner)  # fmt: skip
        if row is None:
            return None
        container = _container(row)
        if container.status == "running" and container.expired(time.time()):
            await self._expire(container.id)
            container.status = "expired"
        return container

    async def _live(self, owner: str, container_id: str) -> tuple[Runtime, Container]:
        container = await self._record(owner, container_id)
        if container is None:
            raise not_found(container_id)
        if container.status != "running":
            raise expired(container_id)
        runtime = self._runtime()
        await self._ready(runtime, container)
        await self.touch(container.id)
        return runtime, container

    async def _ready(self, runtime: Runtime, container: Container) -> None:
        if container.id in self._started:
            return
        limits = Limits(MEMORY_LIMITS[container.memory_limit], self.limits.processes, self.limits.disk_bytes,
                        self.limits.cpu_seconds, self.limits.wall_seconds, self.limits.output_bytes)  # fmt: skip
        await self._sandboxed(runtime.start(container.id, limits, container.network()))
        self._started.add(container.id)

    async def _uploaded(self, owner: str, file_id: str, *, param: str) -> tuple[str, bytes]:
        """A Files API file of the owner's: where it goes in the workspace, and its bytes."""
        stored = await self.files.catalog.get_file(owner, file_id)
        if stored is None:
            raise APIError(
                404, f"No file found with id '{file_id}'.", param=param, code="not_found"
            )
        path = _filename(stored.filename, param=param)
        self._check_size(stored.bytes)
        return path, b"".join([piece async for piece in self.files.blobs.read(stored.blob)])

    def _check_size(self, size: int) -> None:
        if size > self.limits.disk_bytes:
            raise APIError(400, f"The file is larger than a container holds ({self.limits.disk_bytes} bytes).",
                           param="file", code="file_too_large")  # fmt: skip

    async def _put(
        self, runtime: Runtime, container: Container, path: str, data: bytes, source: str
    ) -> ContainerFile:
        self._check_size(len(data))
        await self._sandboxed(runtime.put_file(container.id, path, data))
        file = ContainerFile(
            new_id("cfile"), container.id, path, len(data), source, time.time_ns() // 1_000_000
        )
        # A file written again is a new file at that path (one statement: two writers race safely).
        await self.database.execute(
            f"INSERT INTO container_files ({_FILE}) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (container_id, path) DO UPDATE SET id = excluded.id, bytes = excluded.bytes, "
            "source = excluded.source, created_ms = excluded.created_ms",
            file.id, file.container_id, file.path, file.bytes, file.source, file.created_ms,
        )  # fmt: skip
        return file

    async def _record_written(self, runtime: Runtime, container: Container) -> Written:
        """The workspace's files as the records say after a run: new ones recorded as `assistant`
        (returned, for citations), sizes brought up to date, vanished ones dropped."""
        entries = await self._sandboxed(runtime.list_files(container.id))
        rows = await self.database.fetch("SELECT id, path, bytes FROM container_files WHERE container_id = ?",
                                         container.id)  # fmt: skip
        known = {row[1]: (row[0], int(row[2])) for row in rows}
        now_ms = time.time_ns() // 1_000_000
        written = []
        for entry in entries:
            if entry.path not in known:
                written.append(ContainerFile(new_id("cfile"), container.id, entry.path, entry.bytes, "assistant",
                                             now_ms + len(written)))  # fmt: skip
            elif known[entry.path][1] != entry.bytes:
                await self.database.execute("UPDATE container_files SET bytes = ? WHERE id = ?", entry.bytes,
                                            known[entry.path][0])  # fmt: skip
        present = {entry.path for entry in entries}
        for path, (file_id, _) in known.items():
            if path not in present:
                await self.database.execute("DELETE FROM container_files WHERE id = ?", file_id)
        for file in written:
            await self.database.execute(
                f"INSERT INTO container_files ({_FILE}) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (container_id, path) "
                "DO NOTHING", file.id, file.container_id, file.path, file.bytes, file.source, file.created_ms,
            )  # fmt: skip
        return written

    async def _expire(self, container_id: str) -> None:
        """Marks a container expired (once, whichever replica sees it first) and removes its workspace."""
        await self.database.execute("UPDATE containers SET status = ? WHERE id = ? AND status = ?",
                                    "expired", container_id, "running")  # fmt: skip
        await self.database.execute(
            "DELETE FROM container_files WHERE container_id = ?", container_id
        )
        await self._remove(container_id)

    async def _remove(self, container_id: str) -> None:
        self._started.discard(container_id)
        if self.runtime is not None:
            try:
                await self.runtime.remove(container_id)
            except SandboxUnavailable:
                log.warning("could not remove container %s: no sandbox", container_id)

    async def sweep(self, now: float | None = None) -> None:
        """Expires the containers whose time ran out, removes this process's workspaces of containers
        deleted or expired elsewhere, and deletes the records expired for `EXPIRED_KEPT_SECONDS`."""
        now = time.time() if now is None else now
        rows = await self.database.fetch(
            "SELECT id, last_active_at, expires_minutes FROM containers WHERE status = ?", "running"
        )
        running = set()
        for container_id, last_active, minutes in rows:
            if now >= int(last_active) + int(minutes) * 60:
                await self._expire(container_id)
            else:
                running.add(container_id)
        for container_id in self._started - running:
            await self._remove(container_id)
        async with self.database.transaction() as db:
            old = [row[0] for row in await db.fetch(
                "SELECT id FROM containers WHERE status = ? AND last_active_at < ?", "expired",
                int(now) - EXPIRED_KEPT_SECONDS)]  # fmt: skip
            for container_id in old:
                await db.execute("DELETE FROM container_files WHERE container_id = ?", container_id)
                await db.execute("DELETE FROM containers WHERE id = ?", container_id)

    async def _sandboxed(self, call: Awaitable[T]) -> T:
        """A runtime call whose refusals are 400s: a path out of the workspace, no sandbox."""
        try:
            return await call
        except WorkspaceFull as exc:
            raise APIError(
                400, f"The container is full: {exc}.", param="file", code="file_too_large"
            ) from None
        except BadPath as exc:
            raise APIError(
                400, f"Invalid file path: {exc}.", param="path", code="invalid_path"
            ) from None
        except SandboxUnavailable as exc:
            raise sandbox_unavailable(str(exc)) from None


def not_found(container_id: str) -> APIError:
    return APIError(
        404,
        f"Container with id '{container_id}' not found.",
        param="container_id",
        code="not_found",
    )


def expired(container_id: str) -> APIError:
    """OpenAI's words for a request that uses an expired container (a 400)."""
    return APIError(400, "Container is expired.", param="container_id", code="container_expired")


def sandbox_unavailable(reason: str) -> APIError:
    """No sandbox here: code is refused, never run without one (docs/code-execution.md, "The sandbox")."""
    why = f" ({reason})" if reason else ""
    return APIError(400, f"Containers are unavailable on this server: no sandbox can run here{why}. Install "
                         "bubblewrap (Debian: apt-get install bubblewrap) and restart the server.",
                    code="sandbox_unavailable")  # fmt: skip


def _minutes(expires_after: Any) -> int:
    if expires_after is None:
        return DEFAULT_MINUTES
    if not isinstance(expires_after, dict) or expires_after.get("anchor") != "last_active_at":
        raise APIError(400, "expires_after.anchor must be 'last_active_at'.", param="expires_after.anchor",
                       code="invalid_value")  # fmt: skip
    minutes = expires_after.get("minutes")
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= MAX_MINUTES:
        raise APIError(400, f"expires_after.minutes must be an integer from 1 to {MAX_MINUTES}.",
                       param="expires_after.minutes", code="invalid_value")  # fmt: skip
    return minutes


def _network_policy(policy: Any) -> dict[str, Any]:
    """`disabled` (the default) or `allowlist` with `allowed_domains` and optional `domain_secrets`,
    each secret for an allowed domain."""
    if policy is None:
        return {"type": "disabled"}
    kind = policy.get("type") if isinstance(policy, dict) else None
    if kind == "disabled":
        return {"type": "disabled"}
    if kind != "allowlist":
        raise APIError(400, "network_policy.type must be 'disabled' or 'allowlist'.", param="network_policy.type",
                       code="invalid_value")  # fmt: skip
    domains = policy.get("allowed_domains")
    if not isinstance(domains, list) or not domains or not all(isinstance(d, str) and _DOMAIN.match(d)
                                                               for d in domains):  # fmt: skip
        raise APIError(400, "network_policy.allowed_domains must be a non-empty list of domain names.",
                       param="network_policy.allowed_domains", code="invalid_value")  # fmt: skip
    domains = [domain.lower() for domain in domains]
    secrets = policy.get("domain_secrets") or []
    if not isinstance(secrets, list):
        raise APIError(400, "network_policy.domain_secrets must be a list.", param="network_policy.domain_secrets",
                       code="invalid_type")  # fmt: skip
    kept = []
    for secret in secrets:
        fields = [
            secret.get(key) if isinstance(secret, dict) else None
            for key in ("domain", "name", "value")
        ]
        if not all(isinstance(field, str) and field and storable(field) for field in fields):
            raise APIError(400, "Each domain secret needs a non-empty domain, name and value.",
                           param="network_policy.domain_secrets", code="invalid_value")  # fmt: skip
        if not _HEADER_NAME.fullmatch(fields[1]) or not _HEADER_VALUE.fullmatch(fields[2]):
            raise APIError(400, "A domain secret's name must be an HTTP header name, and its value a header value.",
                           param="network_policy.domain_secrets", code="invalid_value")  # fmt: skip
        if fields[0].lower() not in domains:
            raise APIError(400, f"The domain secret for {fields[0]!r} names a domain not in allowed_domains.",
                           param="network_policy.domain_secrets", code="invalid_value")  # fmt: skip
        kept.append({"domain": fields[0].lower(), "name": fields[1], "value": fields[2]})
    return {"type": "allowlist", "allowed_domains": domains, "domain_secrets": kept}


def _filename(name: str, *, param: str) -> str:
    """`/mnt/data/<name>` for a plain file name; a name with a folder, `..` or a NUL is a 400."""
    if (
        not name
        or "/" in name
        or "\\" in name
        or name in (".", "..")
        or not storable(name)
        or len(name) > 255
    ):
        raise APIError(400, f"Invalid file name {name!r}: a plain name is needed, without folders.",
                       param=param, code="invalid_path")  # fmt: skip
    return f"{WORKSPACE}/{name}"


def _path(path: str, *, param: str) -> str:
    """A path inside the workspace (`/mnt/data/a/b` or `a/b`) written out in full; any other is a 400."""
    bad = APIError(400, f"Invalid file path {path!r}: it must stay inside {WORKSPACE}.", param=param,
                   code="invalid_path")  # fmt: skip
    if not isinstance(path, str) or not storable(path):
        raise bad
    rest = path
    if path.startswith("/"):
        if not path.startswith(WORKSPACE + "/"):
            raise bad
        rest = path[len(WORKSPACE) :]
    names = [name for name in rest.split("/") if name not in ("", ".")]
    if not names or ".." in names or "\\" in rest or any(len(name) > 255 for name in names):
        raise bad
    return WORKSPACE + "/" + "/".join(names)


async def _page(
    database: Database,
    table: str,
    columns: str,
    where: str,
    args: list[Any],
    after: str | None,
    limit: int,
    order: Order,
) -> list[Row] | None:
    """Up to limit+1 rows in (created_ms, id) order after a cursor; None for an unknown cursor."""
    if after is not None:
        row = await database.fetchrow(
            f"SELECT created_ms FROM {table} WHERE {where} AND id = ?", *args, after
        )
        if row is None:
            return None
        where = f"{where} AND (created_ms, id) {'>' if order == 'asc' else '<'} (?, ?)"
        args = [*args, int(row[0]), after]
    direction = "ASC" if order == "asc" else "DESC"
    return await database.fetch(
        f"SELECT {columns} FROM {table} WHERE {where} ORDER BY created_ms {direction}, id {direction} LIMIT ?",
        *args, limit + 1,
    )  # fmt: skip


def _container(row: Row) -> Container:
    return Container(
        row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5], json.loads(row[6]), row[7]
    )


def _file(row: Row) -> ContainerFile:
    return ContainerFile(row[0], row[1], row[2], int(row[3]), row[4], int(row[5]))
