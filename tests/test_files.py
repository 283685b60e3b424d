"""The Files API through the real `openai` client, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg
import httpx
import openai
import pytest
from openai.types import FileDeleted, FileObject

from responsekit.app import create_app
from responsekit.config import Settings

from .conftest import DATABASES, Server
from .harness import serve

pytestmark = pytest.mark.parametrize("database_url", DATABASES, indirect=True)


def test_upload_list_retrieve_content_delete(server, database_url, tmp_path):
    client = server.client()
    payload = bytes(range(256)) * 9000  # Binary, and larger than one storage piece (1 MiB) twice over.
    big = client.files.create(file=("blob.bin", payload), purpose="user_data")
    FileObject.model_validate(big.model_dump(), strict=True)
    assert big.id.startswith("file-") and big.bytes == len(payload) and big.filename == "blob.bin"
    assert big.object == "file" and big.purpose == "user_data" and big.status == "processed"
    assert isinstance(big.created_at, int) and big.expires_at is None
    notes = [client.files.create(file=(f"note{n}.md", f"# Note {n}\n".encode()), purpose="assistants")
             for n in range(3)]  # fmt: skip

    assert client.files.content(big.id).read() == payload
    assert client.files.content(notes[1].id).read() == b"# Note 1\n"
    assert client.files.retrieve(notes[0].id) == notes[0]

    # Newest first by default; the SDK pages with `after` until has_more is false.
    assert [f.id for f in client.files.list(limit=2)] == [notes[2].id, notes[1].id, notes[0].id, big.id]
    assert [f.id for f in client.files.list(order="asc")] == [big.id, *(note.id for note in notes)]
    assert [f.id for f in client.files.list(purpose="assistants", limit=1)] == [n.id for n in reversed(notes)]
    raw = httpx.get(f"{server.base_url}/files", params={"limit": 2, "after": notes[1].id}).json()
    assert [f["id"] for f in raw["data"]] == [notes[0].id, big.id] and raw["has_more"] is False
    assert raw["first_id"] == notes[0].id and raw["last_id"] == big.id

    # Where the bytes live: the data directory on SQLite, large objects on PostgreSQL.
    if database_url.startswith("sqlite"):
        assert (tmp_path / "files" / big.id).read_bytes() == payload
    else:
        assert _large_objects(database_url) == 4

    deleted = client.files.delete(big.id)
    FileDeleted.model_validate(deleted.model_dump(), strict=True)
    assert deleted.id == big.id and deleted.deleted is True
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(big.id)
    with pytest.raises(openai.NotFoundError):
        client.files.content(big.id)
    with pytest.raises(openai.NotFoundError):
        client.files.delete(big.id)
    if database_url.startswith("sqlite"):
        assert not (tmp_path / "files" / big.id).exists()
    else:
        assert _large_objects(database_url) == 3


def test_file_expiry_is_recorded(server):
    answer = httpx.post(f"{server.base_url}/files", data={"purpose": "assistants", "expires_after[anchor]": "created_at",
                        "expires_after[seconds]": "3600"}, files={"file": ("a.txt", b"x")})  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = FileObject.model_validate(answer.json(), strict=True)
    assert body.expires_at == body.created_at + 3600


def test_bad_uploads_are_4xx(upstream, database_url, tmp_path):
    settings = Settings(probe=False, default_model_fallback=False, data_dir=tmp_path, database_url=database_url, max_file_bytes=1000)
    with serve(create_app(settings)) as url:
        base = f"{url}/v1"
        client = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as bad:
            client.files.create(file=("a.txt", b"x"), purpose="nonsense")  # type: ignore[arg-type]
        assert bad.value.body["param"] == "purpose" and bad.value.body["code"] == "invalid_value"

        cases = [
            ({"data": {"purpose": "assistants"}}, "file"),
            ({"files": {"file": ("a.txt", b"x")}}, "purpose"),
            ({"json": {"purpose": "assistants"}}, "file"),
            ({"data": {"purpose": "assistants", "expires_after[anchor]": "created_at", "expires_after[seconds]": "5"},
              "files": {"file": ("a.txt", b"x")}}, "expires_after.seconds"),
        ]  # fmt: skip
        for request, param in cases:
            answer = httpx.post(f"{base}/files", **request)
            assert answer.status_code == 400, answer.text
            assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
            assert answer.json()["error"]["param"] == param

        # Over the size limit: by the declared length, and by the file part itself.
        with pytest.raises(openai.APIStatusError) as large:
            client.files.create(file=("big.txt", b"y" * 200_000), purpose="assistants")
        assert large.value.status_code == 413 and large.value.body["code"] == "file_too_large"
        answer = httpx.post(f"{base}/files", data={"purpose": "assistants"}, files={"file": ("b.txt", b"z" * 5000)})
        assert answer.status_code == 413
        assert httpx.get(f"{base}/files").json()["data"] == []

        assert httpx.get(f"{base}/files", params={"after": "file-nope"}).status_code == 400
        assert httpx.get(f"{base}/files", params={"limit": 0}).status_code == 400
        assert httpx.get(f"{base}/files", params={"order": "up"}).status_code == 400


def test_each_key_sees_only_its_files(upstream, database_url, tmp_path):
    settings = Settings(probe=False, default_model_fallback=False, data_dir=tmp_path, database_url=database_url, api_keys=["key-a", "key-b"])
    with serve(create_app(settings)) as url:
        owner = openai.OpenAI(base_url=f"{url}/v1", api_key="key-a", max_retries=0)
        other = openai.OpenAI(base_url=f"{url}/v1", api_key="key-b", max_retries=0)
        mine = owner.files.create(file=("secret.txt", b"mine"), purpose="assistants")
        assert [f.id for f in owner.files.list()] == [mine.id]
        assert list(other.files.list()) == []
        for call in (other.files.retrieve, other.files.content, other.files.delete):
            with pytest.raises(openai.NotFoundError):
                call(mine.id)
        assert owner.files.content(mine.id).read() == b"mine"
        assert httpx.get(f"{url}/v1/files/{mine.id}").status_code == 401


def _large_objects(database_url: str) -> int:
    async def count() -> int:
        connection = await asyncpg.connect(database_url)
        try:
            return int(await connection.fetchval("SELECT COUNT(*) FROM pg_largeobject_metadata"))
        finally:
            await connection.close()

    return asyncio.run(count())


def test_files_dir_setting_keeps_uploads_there(upstream, database_url, tmp_path):
    shared = tmp_path / "shared-files"
    settings = Settings(probe=False, default_model_fallback=False, data_dir=tmp_path / "data", database_url=database_url, files_dir=shared)
    with serve(create_app(settings)) as url:
        client = Server(url, upstream).client()
        file = client.files.create(file=("x.txt", b"kept on a shared disk"), purpose="assistants")
        assert (shared / file.id).read_bytes() == b"kept on a shared disk"
        assert client.files.content(file.id).read() == b"kept on a shared disk"
    assert os.listdir(shared) == [file.id]
    assert not Path(tmp_path / "data" / "files").exists()
