"""The embedded sandbox (containers/bubblewrap.py), on the real bubblewrap: what code inside can
do, what it cannot reach, and that each attack ends as a result the caller reads while the host and
the other containers go on."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from responsekit.containers.bubblewrap import Bubblewrap, bubblewrap_runtime
from responsekit.containers.runtime import (
    BadPath,
    Limits,
    Network,
    SandboxUnavailable,
    WorkspaceFull,
)

_ids = itertools.count()


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Bubblewrap:
    try:
        return bubblewrap_runtime(tmp_path_factory.mktemp("containers"))
    except SandboxUnavailable as error:
        pytest.skip(f"no sandbox on this machine: {error}")


@pytest.fixture
def container(runtime: Bubblewrap) -> Iterator[str]:
    """A started container with small limits, removed after the test."""
    name = f"cntr_test{os.getpid()}_{next(_ids)}"
    limits = Limits(memory_bytes=64 << 20, processes=64, disk_bytes=8 << 20, wall_seconds=10)
    asyncio.run(runtime.start(name, limits, Network()))
    yield name
    asyncio.run(runtime.remove(name))


def test_a_command_runs_in_the_workspace_and_its_files_are_seen_from_outside(
    runtime: Bubblewrap, container: str
) -> None:
    async def go() -> None:
        await runtime.put_file(container, "/mnt/data/in.txt", b"hello")
        done = await runtime.run(
            container, "pwd; cat in.txt; mkdir -p out && echo made > out/x.txt"
        )
        assert done.exit_code == 0, done.stderr
        assert done.stdout == "/mnt/data\nhello"
        assert done.stderr == ""
        assert await runtime.get_file(container, "out/x.txt") == b"made\n"
        listed = await runtime.list_files(container)
        assert [(e.path, e.bytes) for e in listed] == [
            ("/mnt/data/in.txt", 5),
            ("/mnt/data/out/x.txt", 5),
        ]
        assert await runtime.delete_file(container, "/mnt/data/in.txt") is True
        assert await runtime.delete_file(container, "in.txt") is False
        assert await runtime.get_file(container, "in.txt") is None
        failed = await runtime.run(container, "echo oops >&2; exit 3")
        assert (failed.stdout, failed.stderr, failed.exit_code) == ("", "oops\n", 3)

    asyncio.run(go())


def test_file_names_that_leave_the_workspace_are_refused(
    runtime: Bubblewrap, container: str
) -> None:
    async def go() -> None:
        for name in ("../x", "/etc/passwd", "/mnt/data/../../etc/passwd", "a/../../x", "/mnt/dat"):
            with pytest.raises(BadPath):
                await runtime.put_file(container, name, b"x")
            with pytest.raises(BadPath):
                await runtime.get_file(container, name)
        # Symlinks planted by code: never followed, neither to read nor to write through.
        done = await runtime.run(
            container, "ln -s /etc/passwd link; ln -s / root; ln -s /etc dir; echo ok > real"
        )
        assert done.exit_code == 0, done.stderr
        for name in ("link", "root/etc/passwd", "dir/passwd"):
            with pytest.raises(BadPath):
                await runtime.get_file(container, name)
        with pytest.raises(BadPath):
            await runtime.put_file(container, "dir/evil", b"x")
        with pytest.raises(BadPath):
            await runtime.put_file(container, "link", b"x")
        assert not Path("/etc/evil").exists()
        assert [e.path for e in await runtime.list_files(container)] == ["/mnt/data/real"]
        # Deleting a symlink removes the link only.
        assert await runtime.delete_file(container, "link") is True
        assert Path("/etc/passwd").exists()
        with pytest.raises(BadPath):
            await runtime.get_file("../escape", "x")

    asyncio.run(go())


def test_a_file_past_the_disk_limit_is_refused(runtime: Bubblewrap, container: str) -> None:
    async def go() -> None:
        await runtime.put_file(container, "a.bin", b"\0" * (6 << 20))
        with pytest.raises(WorkspaceFull):
            await runtime.put_file(container, "b.bin", b"\0" * (4 << 20))
        # Inside, a single file stops at the limit (RLIMIT_FSIZE).
        done = await runtime.run(container, "head -c 20000000 /dev/zero > big")
        assert done.exit_code != 0
        assert "File size limit exceeded" in done.stderr
        assert "over its limit" in done.stderr
        assert [e.bytes for e in await runtime.list_files(container)] == [6 << 20, 8 << 20]

    asyncio.run(go())


def test_no_sandbox_without_bubblewrap(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        bubblewrap_runtime(tmp_path, bwrap=str(tmp_path / "no-bwrap"))
