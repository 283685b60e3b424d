"""The OpenSandbox runtime, through the real `opensandbox` SDKs, against a stand-in service on
loopback that speaks OpenSandbox's HTTP API (tests/opensandbox_fixture.py)."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from responsekit.config import Settings
from responsekit.containers.opensandbox import CONTAINER_KEY, OpenSandbox, remote_runtime
from responsekit.containers.runtime import (
    BadPath,
    Limits,
    Network,
    SandboxUnavailable,
    WorkspaceFull,
)

from .harness import free_port
from .opensandbox_fixture import OpenSandboxFixture, opensandbox_server

pytest.importorskip("opensandbox")
pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="the stand-in service runs commands under bubblewrap"
)

KEY = "os-test-key"


@pytest.fixture(scope="module")
def service() -> Iterator[OpenSandboxFixture]:
    with opensandbox_server(KEY) as fixture:
        yield fixture


def scenario(url: str, body: Callable[[OpenSandbox], Awaitable[Any]], key: str = KEY) -> Any:
    """Run `body` with a fresh runtime on its own event loop (the SDK's clients belong to one)."""

    async def run() -> Any:
        runtime = OpenSandbox(url, key, ready_seconds=10)
        try:
            return await body(runtime)
        finally:
            await runtime.close()

    return asyncio.run(run())


def test_files_commands_and_removal(service: OpenSandboxFixture) -> None:
    limits = Limits(memory_bytes=512 << 20, wall_seconds=5, output_bytes=1000)

    async def body(runtime: OpenSandbox) -> None:
        await runtime.start("cntr_files", limits, Network())
        await runtime.start("cntr_files", limits, Network())  # idempotent: the same sandbox
        made = [
            s
            for s in service.sandboxes.values()
            if s.request["metadata"][CONTAINER_KEY] == "cntr_files"
        ]
        assert len(made) == 1
        request = made[0].request
        assert request["resourceLimits"] == {"cpu": "1", "memory": "512Mi"}
        assert request["networkPolicy"] == {"defaultAction": "deny", "egress": []}
        assert request["image"] == {"uri": "opensandbox/code-interpreter:v1.1.0"}

        await runtime.put_file("cntr_files", "notes/a.txt", b"alpha\n")
        await runtime.put_file("cntr_files", "/mnt/data/b.bin", bytes(range(256)))
        assert await runtime.get_file("cntr_files", "/mnt/data/notes/a.txt") == b"alpha\n"
        assert await runtime.get_file("cntr_files", "b.bin") == bytes(range(256))
        assert await runtime.get_file("cntr_files", "missing.txt") is None
        listed = sorted((e.path, e.bytes) for e in await runtime.list_files("cntr_files"))
        assert listed == [("/mnt/data/b.bin", 256), ("/mnt/data/notes/a.txt", 6)]

        done = await runtime.run(
            "cntr_files", "pwd; cat notes/a.txt; echo oops >&2; echo made > c.txt; exit 3"
        )
        assert (done.stdout, done.stderr, done.exit_code, done.timed_out) == (
            "/mnt/data\nalpha\n", "oops\n", 3, False)  # fmt: skip
        assert await runtime.get_file("cntr_files", "c.txt") == b"made\n"
        assert (await runtime.run("cntr_files", "true")).exit_code == 0

        assert await runtime.delete_file("cntr_files", "c.txt") is True
        assert await runtime.delete_file("cntr_files", "c.txt") is False
        assert await runtime.get_file("cntr_files", "c.txt") is None

        await runtime.run("cntr_files", "ln -s /etc/hostname link")
        with pytest.raises(BadPath):
            await runtime.get_file("cntr_files", "link")

        await runtime.remove("cntr_files")
        await runtime.remove("cntr_files")  # a missing one is no error
        assert made[0].state == "Terminated"
        with pytest.raises(SandboxUnavailable):
            await runtime.run("cntr_files", "true")

    scenario(service.url, body)


def test_limits_and_output(service: OpenSandboxFixture) -> None:
    limits = Limits(wall_seconds=2, output_bytes=100, disk_bytes=1000)

    async def body(runtime: OpenSandbox) -> None:
        await runtime.start(
            "cntr_limits", limits, Network(allowed_domains=("pypi.org", "*.python.org"))
        )
        started = time.monotonic()
        slow = await runtime.run("cntr_limits", "echo before; sleep 30")
        assert time.monotonic() - started < 10
        assert (slow.stdout, slow.exit_code, slow.timed_out) == ("before\n", None, True)

        quick = await runtime.run("cntr_limits", "sleep 30", timeout=0.5)
        assert quick.timed_out

        loud = await runtime.run(
            "cntr_limits", "head -c 100000 /dev/zero | tr '\\0' x; echo done >&2"
        )
        assert loud.stdout.startswith("x" * 100)
        assert "[output cut: 100000 bytes in all, the first 100 shown]" in loud.stdout
        assert (loud.stderr, loud.exit_code) == ("done\n", 0)
        assert (await runtime.run("cntr_limits", "seq 1000", max_output=10)).stdout.startswith(
            "1\n2\n3\n4\n5\n"
        )

        await runtime.put_file("cntr_limits", "big", bytes(600))
        await runtime.put_file("cntr_limits", "big", bytes(1000))  # replaced, not added
        with pytest.raises(WorkspaceFull):
            await runtime.put_file("cntr_limits", "more", bytes(1))
        await runtime.remove("cntr_limits")

    scenario(service.url, body)
    made = [
        s
        for s in service.sandboxes.values()
        if s.request["metadata"][CONTAINER_KEY] == "cntr_limits"
    ]
    assert made[0].request["networkPolicy"] == {
        "defaultAction": "deny",
        "egress": [
            {"action": "allow", "target": "pypi.org"},
            {"action": "allow", "target": "*.python.org"},
        ],
    }
    assert made[0].request["metadata"]["responsekit.dev/wall-seconds"] == "2"


def test_code_keeps_state_and_stops_at_the_limit(service: OpenSandboxFixture) -> None:
    async def body(runtime: OpenSandbox) -> None:
        await runtime.start("cntr_code", Limits(wall_seconds=3), Network())
        first = await runtime.run_code(
            "cntr_code", "x = 40\nprint('set')\nwith open('out.txt', 'w') as f:\n    f.write('hi')"
        )
        assert (first.logs, first.error, first.timed_out) == ("set\n", False, False)
        assert await runtime.get_file("cntr_code", "out.txt") == b"hi"
        second = await runtime.run_code("cntr_code", "import os\nprint(os.getcwd())\nx + 2")
        assert second.logs == "/mnt/data\n42\n"

        failed = await runtime.run_code("cntr_code", "1 / 0")
        assert failed.error and "ZeroDivisionError: division by zero" in failed.logs

        stuck = await runtime.run_code("cntr_code", "print('going')\nwhile True: pass", timeout=1)
        assert (stuck.timed_out, stuck.error) == (True, True)
        assert "going" in stuck.logs
        # Interrupted, not killed: the kernel and its variables are still there.
        assert (await runtime.run_code("cntr_code", "x")).logs == "40\n"

    scenario(service.url, body)

    async def again(runtime: OpenSandbox) -> None:
        # Another process (a replica, or the gateway restarted) finds the sandbox by its metadata.
        assert (await runtime.run_code("cntr_code", "x * 2")).logs == "80\n"
        await runtime.remove("cntr_code")

    scenario(service.url, again)


def test_a_sandbox_another_replica_removed_is_found_gone(service: OpenSandboxFixture) -> None:
    async def body(runtime: OpenSandbox) -> None:
        await runtime.start("cntr_gone", Limits(), Network())
        assert (await runtime.run("cntr_gone", "echo here")).stdout == "here\n"
        other = OpenSandbox(service.url, KEY)
        try:
            await other.remove("cntr_gone")
        finally:
            await other.close()
        with pytest.raises(SandboxUnavailable, match="running a command failed"):
            await runtime.run("cntr_gone", "echo here")
        # The stale sandbox was let go: the next call looks the container up again.
        with pytest.raises(SandboxUnavailable, match="has no sandbox"):
            await runtime.run("cntr_gone", "echo here")

    scenario(service.url, body)


def test_bad_paths_are_refused_before_anything_is_sent(service: OpenSandboxFixture) -> None:
    async def body(runtime: OpenSandbox) -> None:
        for path in (
            "../etc/passwd",
            "/etc/passwd",
            "a/../../b",
            "/mnt/database",
            "",
            "/mnt/data",
            "a\0b",
        ):
            with pytest.raises(BadPath):
                await runtime.put_file("cntr_never", path, b"x")
            with pytest.raises(BadPath):
                await runtime.get_file("cntr_never", path)
            with pytest.raises(BadPath):
                await runtime.delete_file("cntr_never", path)

    requests = service.requests
    scenario(service.url, body)
    assert service.requests == requests


def test_the_api_key_is_checked(service: OpenSandboxFixture) -> None:
    refused = service.unauthorized

    async def body(runtime: OpenSandbox) -> None:
        with pytest.raises(SandboxUnavailable, match="INVALID_API_KEY"):
            await runtime.start("cntr_key", Limits(), Network())

    scenario(service.url, body, key="wrong")
    assert service.unauthorized > refused
    assert not [
        s for s in service.sandboxes.values() if s.request["metadata"][CONTAINER_KEY] == "cntr_key"
    ]


def test_secrets_are_refused(service: OpenSandboxFixture) -> None:
    from responsekit.containers.runtime import DomainSecret

    async def body(runtime: OpenSandbox) -> None:
        network = Network(
            allowed_domains=("api.example.com",),
            secrets=(DomainSecret("api.example.com", "X-Key", "s"),),
        )
        with pytest.raises(SandboxUnavailable, match="domain secrets"):
            await runtime.start("cntr_secret", Limits(), network)

    scenario(service.url, body)


def test_a_service_that_is_down_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def body(runtime: OpenSandbox) -> None:
        with pytest.raises(SandboxUnavailable, match=f"OpenSandbox at {url}"):
            await runtime.start("cntr_down", Limits(), Network())

    started = time.monotonic()
    scenario(url, body)
    assert time.monotonic() - started < 20


def test_the_factory_reads_the_settings(service: OpenSandboxFixture) -> None:
    with pytest.raises(SandboxUnavailable, match="sandbox_url"):
        remote_runtime(Settings())
    runtime = remote_runtime(
        Settings(sandbox_url=service.url, sandbox_api_key=KEY, sandbox_image="mine:1")
    )
    assert (runtime.name, runtime.image, runtime.config.get_api_key()) == (
        "opensandbox",
        "mine:1",
        KEY,
    )


def test_without_the_extra_the_runtime_says_which_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opensandbox", None)  # as if not installed: import fails
    with pytest.raises(SandboxUnavailable, match=r"responsekit\[remote-sandbox\]"):
        OpenSandbox("http://127.0.0.1:1", KEY)
