"""The Containers API through the real `openai` SDK, on SQLite and PostgreSQL, with the real
bubblewrap sandbox: records and ownership in the store, files in the container's workspace."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest
from openai.types import ContainerCreateResponse, ContainerListResponse, ContainerRetrieveResponse
from openai.types.containers import FileCreateResponse, FileListResponse, FileRetrieveResponse
from pydantic import BaseModel

from responsekit.app import create_app
from responsekit.canonical.errors import APIError
from responsekit.config import Settings
from responsekit.containers.bubblewrap import bubblewrap_runtime
from responsekit.containers.runtime import SandboxUnavailable
from responsekit.containers.service import Containers
from responsekit.files.service import VectorStores
from responsekit.store import Store

from .conftest import DATABASES
from .harness import serve

pytestmark = pytest.mark.parametrize("database_url", DATABASES, indirect=True)

KEYS = ("key-one", "key-two")


def sandbox_or_skip(root: Path) -> None:
    try:
        bubblewrap_runtime(root)
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox on this machine: {exc}")


class Gateway:
    def __init__(self, url: str, settings: Settings) -> None:
        self.base_url = f"{url}/v1"
        self.settings = settings

    def client(self, key: str = KEYS[0]) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0)

    def raw(self, method: str, path: str, key: str = KEYS[0], **options: Any) -> httpx.Response:
        return httpx.request(method, f"{self.base_url}{path}", headers={"Authorization": f"Bearer {key}"},
                             timeout=60, **options)  # fmt: skip


@pytest.fixture
def gateway(database_url: str, tmp_path: Path) -> Iterator[Gateway]:
    sandbox_or_skip(tmp_path / "probe")
    settings = Settings(probe=False, default_model_fallback=False, data_dir=tmp_path, database_url=database_url,
                        api_keys=list(KEYS))  # fmt: skip
    with serve(create_app(settings)) as url:
        yield Gateway(url, settings)


def strict(model: type[BaseModel], body: dict[str, Any]) -> BaseModel:
    """The SDK's type, strictly, and every field the body has is one the type knows."""
    parsed = model.model_validate(body, strict=True)
    assert set(body) <= set(model.model_fields), set(body) - set(model.model_fields)
    return parsed


def owner(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_create_list_retrieve_delete(gateway, database_url):
    client = gateway.client()
    csv = client.files.create(file=("data.csv", b"a,b\n1,2\n"), purpose="user_data")
    blob = client.files.create(file=("blob.bin", bytes(range(256)) * 40), purpose="assistants")
    created = client.containers.create(name="analysis", file_ids=[csv.id, blob.id], memory_limit="4g",
                                       expires_after={"anchor": "last_active_at", "minutes": 5})  # fmt: skip
    strict(ContainerCreateResponse, created.model_dump(exclude_unset=True))
    assert (
        created.id.startswith("cntr_")
        and created.object == "container"
        and created.status == "running"
    )
    assert created.name == "analysis" and created.memory_limit == "4g"
    assert created.expires_after is not None and created.expires_after.anchor == "last_active_at"
    assert created.expires_after.minutes == 5
    assert (
        isinstance(created.last_active_at, int) and abs(created.last_active_at - time.time()) < 60
    )
    assert created.network_policy is not None and created.network_policy.type == "disabled"

    files = list(client.containers.files.list(created.id))
    for file in files:
        strict(FileListResponse, file.model_dump(exclude_unset=True))
    assert sorted((f.path, f.bytes, f.source) for f in files) == [
        ("/mnt/data/blob.bin", 256 * 40, "user"), ("/mnt/data/data.csv", 8, "user")]  # fmt: skip
    by_path = {f.path: f for f in files}
    assert client.containers.files.content.retrieve(by_path["/mnt/data/blob.bin"].id,
                                                    container_id=created.id).read() == bytes(range(256)) * 40  # fmt: skip

    retrieved = client.containers.retrieve(created.id)
    strict(ContainerRetrieveResponse, retrieved.model_dump(exclude_unset=True))
    assert (
        retrieved.id == created.id
        and retrieved.memory_limit == "4g"
        and retrieved.status == "running"
    )

    # Defaults: 1g, 20 minutes, no network.
    more = [client.containers.create(name=f"c{n}") for n in range(3)]
    assert more[0].memory_limit == "1g" and more[0].expires_after.minutes == 20  # type: ignore[union-attr]
    everything = [created, *more]
    listed = list(client.containers.list(limit=2))  # the SDK follows `after` while has_more
    for item in listed:
        strict(ContainerListResponse, item.model_dump(exclude_unset=True))
    assert [c.id for c in listed] == [c.id for c in reversed(everything)]
    assert [c.id for c in client.containers.list(order="asc")] == [c.id for c in everything]
    assert [c.id for c in client.containers.list(name="c1")] == [more[1].id]
    page = gateway.raw("GET", "/containers", params={"limit": 2, "after": more[1].id}).json()
    assert [c["id"] for c in page["data"]] == [more[0].id, created.id] and page["has_more"] is False
    assert (
        page["object"] == "list"
        and page["first_id"] == more[0].id
        and page["last_id"] == created.id
    )
    first = gateway.raw("GET", "/containers", params={"limit": 1}).json()
    assert first["has_more"] is True and first["first_id"] == first["last_id"] == more[2].id
    assert gateway.raw("GET", "/containers", params={"after": "cntr_nope"}).status_code == 400

    answer = gateway.raw("DELETE", f"/containers/{created.id}")
    assert answer.status_code == 200
    assert answer.json() == {"id": created.id, "object": "container.deleted", "deleted": True}
    assert client.containers.delete(more[0].id) is None  # what the SDK makes of it
    for gone in (created.id, more[0].id):
        with pytest.raises(openai.NotFoundError):
            client.containers.retrieve(gone)
        with pytest.raises(openai.NotFoundError):
            client.containers.delete(gone)
        with pytest.raises(openai.NotFoundError):
            client.containers.files.list(gone)
        assert not (gateway.settings.data_dir / "containers" / gone).exists(), (
            "its workspace went with it"
        )
    assert [c.id for c in client.containers.list()] == [more[2].id, more[1].id]


def test_files_by_upload_and_by_file_id(gateway):
    client = gateway.client()
    container = client.containers.create(name="files")
    payload = bytes(range(256)) * 4096  # binary, 1 MiB
    uploaded = client.containers.files.create(container.id, file=("payload.bin", payload))
    strict(FileCreateResponse, uploaded.model_dump(exclude_unset=True))
    assert uploaded.id.startswith("cfile_") and uploaded.object == "container.file"
    assert uploaded.container_id == container.id and uploaded.path == "/mnt/data/payload.bin"
    assert uploaded.bytes == len(payload) and uploaded.source == "user"

    stored = client.files.create(file=("notes.md", b"# Notes\n"), purpose="user_data")
    copied = client.containers.files.create(container.id, file_id=stored.id)
    strict(FileCreateResponse, copied.model_dump(exclude_unset=True))
    assert copied.path == "/mnt/data/notes.md" and copied.bytes == 8 and copied.source == "user"

    retrieved = client.containers.files.retrieve(uploaded.id, container_id=container.id)
    strict(FileRetrieveResponse, retrieved.model_dump(exclude_unset=True))
    assert retrieved == client.containers.files.retrieve(uploaded.id, container_id=container.id)
    assert retrieved.model_dump() == uploaded.model_dump()
    assert (
        client.containers.files.content.retrieve(uploaded.id, container_id=container.id).read()
        == payload
    )
    assert (
        client.containers.files.content.retrieve(copied.id, container_id=container.id).read()
        == b"# Notes\n"
    )
    assert [f.id for f in client.containers.files.list(container.id, limit=1)] == [
        copied.id,
        uploaded.id,
    ]
    assert [f.id for f in client.containers.files.list(container.id, order="asc")] == [
        uploaded.id,
        copied.id,
    ]

    # Written again at the same path: a new file there, the old record gone.
    again = client.containers.files.create(container.id, file=("payload.bin", b"short"))
    assert again.id != uploaded.id and again.bytes == 5
    with pytest.raises(openai.NotFoundError):
        client.containers.files.retrieve(uploaded.id, container_id=container.id)

    assert client.containers.files.delete(again.id, container_id=container.id) is None
    for call in (client.containers.files.retrieve, client.containers.files.content.retrieve,
                 client.containers.files.delete):  # fmt: skip
        with pytest.raises(openai.NotFoundError):
            call(again.id, container_id=container.id)
    assert [f.id for f in client.containers.files.list(container.id)] == [copied.id]

    with pytest.raises(openai.NotFoundError):
        client.containers.files.create(container.id, file_id="file-nope")
    # Writers racing at one path: each succeeds, one record is left, holding one writer's bytes.
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: gateway.raw("POST", f"/containers/{container.id}/files",
                                                      files={"file": ("race.txt", b"%d" % n)}), range(8)))  # fmt: skip
    assert [a.status_code for a in answers] == [200] * 8
    [race] = [
        f for f in client.containers.files.list(container.id) if f.path == "/mnt/data/race.txt"
    ]
    assert race.id in {a.json()["id"] for a in answers}
    content = client.containers.files.content.retrieve(race.id, container_id=container.id).read()
    assert content in {b"%d" % n for n in range(8)}
    client.containers.files.delete(race.id, container_id=container.id)

    missing = gateway.raw("POST", f"/containers/{container.id}/files", json={})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "file_id"


def test_another_keys_container_is_404_on_every_route(gateway):
    mine, theirs = gateway.client(KEYS[0]), gateway.client(KEYS[1])
    container = mine.containers.create(name="private")
    file = mine.containers.files.create(container.id, file=("secret.txt", b"secret"))
    their_file = theirs.files.create(file=("x.txt", b"x"), purpose="user_data")
    my_file = mine.files.create(file=("y.txt", b"y"), purpose="user_data")
    calls = [
        lambda: theirs.containers.retrieve(container.id),
        lambda: theirs.containers.delete(container.id),
        lambda: theirs.containers.files.list(container.id),
        lambda: theirs.containers.files.create(container.id, file=("a.txt", b"a")),
        lambda: theirs.containers.files.create(container.id, file_id=their_file.id),
        lambda: theirs.containers.files.retrieve(file.id, container_id=container.id),
        lambda: theirs.containers.files.content.retrieve(file.id, container_id=container.id),
        lambda: theirs.containers.files.delete(file.id, container_id=container.id),
        # nor may a key copy another key's Files API file into its own container
        lambda: theirs.containers.create(name="theft", file_ids=[my_file.id]),
        lambda: mine.containers.files.create(container.id, file_id=their_file.id),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.status_code == 404
    assert [c.id for c in theirs.containers.list()] == []
    assert mine.containers.retrieve(container.id).status == "running"
    assert (
        mine.containers.files.content.retrieve(file.id, container_id=container.id).read()
        == b"secret"
    )
    assert [f.id for f in mine.containers.files.list(container.id)] == [file.id]


def test_bad_values_and_traversal_are_400(gateway):
    client = gateway.client()
    container = client.containers.create(name="target")
    for name in ("../../etc/passwd", "/etc/passwd", "a/b.txt", "..", "a\\b"):
        answer = gateway.raw(
            "POST", f"/containers/{container.id}/files", files={"file": (name, b"x")}
        )
        assert answer.status_code == 400, (name, answer.text)
        assert answer.json()["error"]["code"] == "invalid_path"
    with pytest.raises(openai.BadRequestError):
        client.containers.files.create(container.id, file=("../escape.txt", b"x"))
    assert list(client.containers.files.list(container.id)) == []

    bad: list[dict[str, Any]] = [
        {},  # no name
        {"name": 7},
        {"name": "x", "memory_limit": "2g"},
        {"name": "x", "expires_after": {"anchor": "created_at", "minutes": 5}},
        {"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": 0}},
        {"name": "x", "expires_after": {"anchor": "last_active_at", "minutes": 21}},
        {"name": "x", "network_policy": {"type": "open"}},
        {"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": []}},
        {"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": ["http://a.com/"]}},
        {"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": ["a.com"],
                                         "domain_secrets": [{"domain": "b.com", "name": "K", "value": "v"}]}},
        {"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": ["a.com"],
                                         "domain_secrets": [{"domain": "a.com", "name": "K: x", "value": "v"}]}},
        {"name": "x", "network_policy": {"type": "allowlist", "allowed_domains": ["a.com"],
                                         "domain_secrets": [{"domain": "a.com", "name": "K", "value": "v\r\nX: y"}]}},
        {"name": "x", "skills": [{"type": "skill_reference", "skill_id": "s"}]},
        {"name": "x", "file_ids": "file-1"},
    ]  # fmt: skip
    for body in bad:
        answer = gateway.raw("POST", "/containers", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["type"] == "invalid_request_error"
    assert (
        gateway.raw(
            "POST", "/containers", json={"name": "x", "file_ids": ["file-nope"]}
        ).status_code
        == 404
    )
    assert [c.id for c in client.containers.list()] == [container.id], "nothing half-made"

    allowed = client.containers.create(name="net", network_policy={
        "type": "allowlist", "allowed_domains": ["pypi.org"],
        "domain_secrets": [{"domain": "pypi.org", "name": "TOKEN", "value": "s3cret"}]})  # fmt: skip
    body = gateway.raw("GET", f"/containers/{allowed.id}").json()
    assert body["network_policy"] == {"type": "allowlist", "allowed_domains": ["pypi.org"]}
    assert "s3cret" not in str(gateway.raw("GET", "/containers").json()), "a secret is never echoed"


def test_an_expired_container_says_so_and_refuses_use(gateway, database_url):
    client = gateway.client()
    container = client.containers.create(
        name="short", expires_after={"anchor": "last_active_at", "minutes": 1}
    )
    file = client.containers.files.create(container.id, file=("kept.txt", b"x"))
    client.containers.files.content.retrieve(
        file.id, container_id=container.id
    )  # a use: it is live
    _set_last_active(database_url, container.id, int(time.time()) - 61)

    retrieved = client.containers.retrieve(container.id)
    strict(ContainerRetrieveResponse, retrieved.model_dump(exclude_unset=True))
    assert retrieved.status == "expired", "OpenAI keeps an expired container listed, status expired"
    assert [c.status for c in client.containers.list()] == ["expired"]
    assert not (gateway.settings.data_dir / "containers" / container.id).exists(), (
        "its workspace is removed"
    )
    uses = [
        lambda: client.containers.files.list(container.id),
        lambda: client.containers.files.create(container.id, file=("more.txt", b"y")),
        lambda: client.containers.files.retrieve(file.id, container_id=container.id),
        lambda: client.containers.files.content.retrieve(file.id, container_id=container.id),
    ]
    for use in uses:
        with pytest.raises(openai.BadRequestError) as caught:
            use()
        assert caught.value.status_code == 400 and "Container is expired." in str(caught.value)
    assert client.containers.delete(container.id) is None
    with pytest.raises(openai.NotFoundError):
        client.containers.retrieve(container.id)


def test_files_a_command_writes_come_back_as_the_assistants(gateway, database_url):
    """A command run in a container by the service (as the code tools run it) writes files the
    API then lists as `source: "assistant"`; one it deletes leaves the list. The records are the
    store's, shared by every process: this one is the test's, not the server's."""
    client = gateway.client()
    container = client.containers.create(name="work")
    client.containers.files.create(container.id, file=("input.csv", b"a,b\n1,2\n"))
    commands = [
        "tac input.csv > out.csv && mkdir -p sub && echo hi > sub/note.txt",
        "rm sub/note.txt && ln -s /etc/passwd leak",
    ]

    async def run() -> list[Any]:
        store = await Store.open(database_url)
        files = await VectorStores.open(gateway.settings, store.database)
        runtime = bubblewrap_runtime(gateway.settings.data_dir / "containers")
        containers = Containers(store.database, runtime, files)
        try:
            written = []
            for command in commands:
                done, new = await containers.run(owner(KEYS[0]), container.id, command)
                assert done.exit_code == 0, done.stderr
                written.append(new)
            with pytest.raises(APIError) as caught:
                await containers.run(owner(KEYS[1]), container.id, "echo not yours > x")
            assert caught.value.status == 404
            return written
        finally:
            await containers.close()
            await files.close()
            await store.close()

    after_first, after_second = asyncio.run(run())
    assert sorted((f.path, f.source) for f in after_first) == [
        ("/mnt/data/out.csv", "assistant"), ("/mnt/data/sub/note.txt", "assistant")]  # fmt: skip
    assert after_second == []
    listed = {f.path: f for f in client.containers.files.list(container.id)}
    sources = {path: f.source for path, f in listed.items()}
    # sub/note.txt was deleted; the symlink `leak` (to /etc/passwd) is no file of the workspace
    assert sources == {"/mnt/data/input.csv": "user", "/mnt/data/out.csv": "assistant"}
    out = listed["/mnt/data/out.csv"]
    found = client.containers.files.retrieve(out.id, container_id=container.id)
    strict(FileRetrieveResponse, found.model_dump(exclude_unset=True))
    content = client.containers.files.content.retrieve(out.id, container_id=container.id)
    assert content.read() == b"1,2\na,b\n"
    # nor is it written through: an upload at its name is refused
    through = gateway.raw(
        "POST", f"/containers/{container.id}/files", files={"file": ("leak", b"x")}
    )
    assert through.status_code == 400 and through.json()["error"]["code"] == "invalid_path"


def test_files_code_writes_come_back_as_the_assistants(gateway, database_url):
    """Python run in the container's kernel by the service, as the code interpreter runs it: its
    variables persist between calls, and the file it writes is listed as the assistant's."""
    client = gateway.client()
    container = client.containers.create(name="kernel")
    client.containers.files.create(container.id, file=("input.csv", b"a,b\n1,2\n"))
    runtime = bubblewrap_runtime(gateway.settings.data_dir / "containers")

    async def run() -> list[Any]:
        store = await Store.open(database_url)
        files = await VectorStores.open(gateway.settings, store.database)
        containers = Containers(store.database, runtime, files)
        try:
            first, written = await containers.run_code(
                owner(KEYS[0]), container.id,
                "rows = open('/mnt/data/input.csv').read().splitlines()\n"
                "open('/mnt/data/out.csv', 'w').write('\\n'.join(reversed(rows)))\nprint(len(rows))",
            )  # fmt: skip
            assert not first.error and first.logs.strip() == "2", first.logs
            second, none = await containers.run_code(owner(KEYS[0]), container.id, "print(rows[0])")
            assert second.logs.strip() == "a,b" and none == [], "the kernel kept `rows`"
            with pytest.raises(APIError) as caught:
                await containers.run_code(owner(KEYS[1]), container.id, "print(1)")
            assert caught.value.status == 404
            return written
        finally:
            await containers.close()
            await files.close()
            await store.close()

    try:
        written = asyncio.run(run())
        assert [(f.path, f.source) for f in written] == [("/mnt/data/out.csv", "assistant")]
        listed = {f.path: f for f in client.containers.files.list(container.id)}
        assert {p: f.source for p, f in listed.items()} == {
            "/mnt/data/input.csv": "user", "/mnt/data/out.csv": "assistant"}  # fmt: skip
        out = listed["/mnt/data/out.csv"]
        assert out.id == written[0].id
        content = client.containers.files.content.retrieve(out.id, container_id=container.id)
        assert content.read() == b"1,2\na,b"
    finally:
        asyncio.run(runtime.remove(container.id))  # this process's kernel


def test_the_sweep_expires_containers_and_removes_their_workspaces(database_url, tmp_path):
    sandbox_or_skip(tmp_path / "probe")
    settings = Settings(
        probe=False, default_model_fallback=False, data_dir=tmp_path, database_url=database_url
    )

    async def run() -> None:
        store = await Store.open(database_url)
        files = await VectorStores.open(settings, store.database)
        containers = await Containers.open(settings, store.database, files)
        try:
            stale = await containers.create(
                "", name="stale", expires_after={"anchor": "last_active_at", "minutes": 1}
            )
            fresh = await containers.create("", name="fresh")
            await containers.add_file("", stale["id"], data=b"x", filename="x.txt")
            assert (tmp_path / "containers" / stale["id"]).exists()
            await containers.sweep(now=time.time() + 61)
            assert (await containers.get("", stale["id"]) or {})["status"] == "expired"
            assert (await containers.get("", fresh["id"]) or {})["status"] == "running"
            assert not (tmp_path / "containers" / stale["id"]).exists()
            with pytest.raises(APIError) as caught:
                await containers.auto("", stale["id"])
            assert caught.value.status == 400 and caught.value.message == "Container is expired."
            with pytest.raises(APIError) as caught:
                await containers.run("", stale["id"], "echo late > late.txt")
            assert caught.value.status == 400 and caught.value.code == "container_expired"
            with pytest.raises(APIError) as caught:
                await containers.auto(owner(KEYS[1]), fresh["id"])  # another key's: not found
            assert caught.value.status == 404
            assert (
                await containers.auto(
                    "", {"type": "container_reference", "container_id": fresh["id"]}
                )
                == fresh["id"]
            )
            made = await containers.auto("", {"type": "auto", "memory_limit": "4g"})
            assert (await containers.get("", made) or {})["memory_limit"] == "4g"
            await containers.sweep(now=time.time() + 8 * 86400)  # expired records go after a week
            assert await containers.get("", stale["id"]) is None
        finally:
            await containers.close()
            await files.close()
            await store.close()

    asyncio.run(run())


def test_the_limits_come_from_the_settings(database_url, tmp_path):
    sandbox_or_skip(tmp_path / "probe")
    settings = Settings(probe=False, default_model_fallback=False, data_dir=tmp_path, database_url=database_url,
                        sandbox_limits={"wall_seconds": 1, "output_bytes": 2048, "disk_bytes": 4096})  # fmt: skip

    async def run() -> None:
        store = await Store.open(database_url)
        files = await VectorStores.open(settings, store.database)
        containers = await Containers.open(settings, store.database, files)
        try:
            made = await containers.create("", name="bounded")
            started = time.monotonic()
            slow, _ = await containers.run("", made["id"], "sleep 20")
            assert slow.timed_out and time.monotonic() - started < 10
            loud, _ = await containers.run("", made["id"], "head -c 100000 /dev/zero | tr '\\0' x")
            assert loud.stdout.startswith("x" * 2048) and "[output cut" in loud.stdout
            assert len(loud.stdout) < 2048 + 200
            with pytest.raises(APIError) as caught:
                await containers.add_file("", made["id"], data=bytes(5000), filename="big.bin")
            assert caught.value.status == 400 and caught.value.code == "file_too_large"
            await containers.delete("", made["id"])
        finally:
            await containers.close()
            await files.close()
            await store.close()

    asyncio.run(run())


def test_without_a_sandbox_containers_are_refused_clearly(database_url, tmp_path):
    settings = Settings(probe=False, default_model_fallback=False, data_dir=tmp_path, database_url=database_url,
                        sandbox="off")  # fmt: skip
    with serve(create_app(settings)) as url:
        answer = httpx.post(f"{url}/v1/containers", json={"name": "x"})
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["code"] == "sandbox_unavailable" and "bubblewrap" in error["message"]
        assert httpx.get(f"{url}/v1/containers").json()["data"] == []


def test_the_containers_api_on_a_remote_sandbox(database_url, tmp_path):
    """With `sandbox_url`, the same API runs its containers on an OpenSandbox service (the
    stand-in of tests/opensandbox_fixture.py, through OpenSandbox's own SDKs); the records stay here."""
    pytest.importorskip("opensandbox")
    sandbox_or_skip(tmp_path / "probe")  # the stand-in runs its commands under bubblewrap
    from responsekit.containers.opensandbox import CONTAINER_KEY

    from .opensandbox_fixture import opensandbox_server

    with opensandbox_server("remote-key") as service:
        settings = Settings(probe=False, default_model_fallback=False, data_dir=tmp_path,
                            database_url=database_url, sandbox_url=service.url,
                            sandbox_api_key="remote-key")  # fmt: skip
        with serve(create_app(settings)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            container = client.containers.create(name="remote", memory_limit="4g")
            file = client.containers.files.create(container.id, file=("hello.txt", b"hello"))
            assert file.path == "/mnt/data/hello.txt" and file.source == "user"
            read = client.containers.files.content.retrieve(file.id, container_id=container.id)
            assert read.read() == b"hello"
            [sandbox] = [s for s in service.sandboxes.values()
                         if s.request["metadata"][CONTAINER_KEY] == container.id]  # fmt: skip
            assert sandbox.request["resourceLimits"]["memory"] == "4096Mi"
            assert not (tmp_path / "containers").exists(), "nothing ran on this machine"
            client.containers.delete(container.id)
            assert sandbox.state == "Terminated"


def _set_last_active(database_url: str, container_id: str, when: int) -> None:
    """The clock moved on: the container was last used at `when`."""
    if database_url.startswith("sqlite"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as db:
            db.execute(
                "UPDATE containers SET last_active_at = ? WHERE id = ?", (when, container_id)
            )
        return

    async def update() -> None:
        connection = await asyncpg.connect(database_url)
        try:
            await connection.execute(
                "UPDATE containers SET last_active_at = $1 WHERE id = $2", when, container_id
            )
        finally:
            await connection.close()

    asyncio.run(update())
