"""The PostgreSQL the state tests run on: a running server, or one of their own.

`choose()` decides once per session, at collection:

1. `RESPONSEKIT_TEST_DATABASE_URL` (`make test` sets 127.0.0.1:5432) if its server answers;
2. else, where PostgreSQL's server binaries are installed, a private throwaway cluster
   (`private_cluster`: pytest-postgresql's executor runs initdb and pg_ctl on a free port in a
   temporary directory, and removes it after the session);
3. else none: the PostgreSQL half is skipped with one line saying how to enable it, and
   `RESPONSEKIT_REQUIRE_POSTGRES=1` (set by CI) makes that an error instead.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from .harness import free_port

URL_VARIABLE = "RESPONSEKIT_TEST_DATABASE_URL"
REQUIRE_VARIABLE = "RESPONSEKIT_REQUIRE_POSTGRES"


@dataclass(frozen=True)
class Postgres:
    """Where the PostgreSQL half runs: `url` (a server that answered), `pg_ctl` (a private
    cluster from these binaries), or neither, with `missing` saying why."""

    url: str | None = None
    pg_ctl: str | None = None
    missing: str = ""

    @property
    def available(self) -> bool:
        return bool(self.url or self.pg_ctl)

    @property
    def summary(self) -> str:
        """The one line the test run ends with."""
        if self.url:
            return f"PostgreSQL: the server at {self.url}."
        if self.pg_ctl:
            return f"PostgreSQL: a private cluster started from {self.pg_ctl} ({self.missing})."
        return (
            f"PostgreSQL was not tested ({self.missing}): install PostgreSQL (the tests start their own "
            f"server from its binaries) or set {URL_VARIABLE} to a running server."
        )


def choose() -> Postgres:
    url = os.environ.get(URL_VARIABLE)
    if url and answers(url):
        return Postgres(url=url)
    why = f"{url} does not answer" if url else f"{URL_VARIABLE} is not set"
    pg_ctl = find_pg_ctl()
    if pg_ctl is None:
        return Postgres(missing=f"{why}, and no pg_ctl is installed")
    if os.geteuid() == 0 and not _can_run_as_postgres():
        return Postgres(missing=f"{why}; initdb refuses to run as root and there is no `postgres` account")
    return Postgres(pg_ctl=pg_ctl, missing=why)


def answers(url: str) -> bool:
    """Whether a PostgreSQL server answers at `url`. A server that answers with an error
    (authentication, a missing database) counts: the tests then fail and show the error."""

    async def connect() -> None:
        connection = await asyncpg.connect(url, timeout=3)
        await connection.close()

    try:
        asyncio.run(connect())
    except (OSError, TimeoutError):
        return False
    except asyncpg.PostgresError:
        return True
    return True


def find_pg_ctl() -> str | None:
    """pg_ctl from PATH, from `pg_config --bindir`, or where Debian/Ubuntu (off PATH) and
    the PGDG RPMs put the server binaries, newest version first."""
    if found := shutil.which("pg_ctl"):
        return found
    try:
        bindir = subprocess.run(["pg_config", "--bindir"], check=False, capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        bindir = ""
    candidates = [f"{bindir}/pg_ctl"] if bindir else []
    for pattern in ("/usr/lib/postgresql/*/bin/pg_ctl", "/usr/pgsql-*/bin/pg_ctl"):
        candidates += sorted(glob.glob(pattern), key=_version, reverse=True)
    return next((path for path in candidates if os.access(path, os.X_OK)), None)


def _version(path: str) -> int:
    digits = "".join(c for c in Path(path).parent.parent.name if c.isdigit())
    return int(digits or 0)


def _can_run_as_postgres() -> bool:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return shutil.which("runuser") is not None


@contextmanager
def private_cluster(pg_ctl: str) -> Iterator[str]:
    """A fresh cluster (trust authentication, superuser `postgres`) on a free loopback port;
    yields the URL of its `postgres` database and removes everything on exit."""
    from pytest_postgresql.executors import PostgreSQLExecutor

    directory = Path(tempfile.mkdtemp(prefix="responsekit-postgres-"))
    executable = pg_ctl
    if os.geteuid() == 0:
        # initdb and pg_ctl refuse to run as root, and pytest-postgresql has no option to
        # switch users: run them as the `postgres` account through a wrapper, in a
        # directory that account owns.
        shutil.chown(directory, "postgres", "postgres")
        wrapper = directory / "pg_ctl"
        wrapper.write_text(f'#!/bin/sh\ncd "{directory}" && exec runuser -u postgres -- "{pg_ctl}" "$@"\n')
        wrapper.chmod(0o755)
        executable = str(wrapper)
    for attempt in range(3):
        # A free port may be taken by another process before the server binds it (tests run
        # beside other work): then the start fails, and another port is tried.
        port = free_port()
        executor = PostgreSQLExecutor(
            executable=executable,
            host="127.0.0.1",
            port=port,
            datadir=str(directory / f"data-{attempt}"),
            unixsocketdir=str(directory),
            logfile=str(directory / f"postgresql-{attempt}.log"),
            startparams="-w",
            dbname="postgres",
            user="postgres",
        )
        try:
            executor.start()
            break
        except Exception as error:
            log = directory / f"postgresql-{attempt}.log"
            detail = log.read_text() if log.exists() else ""
            if attempt < 2 and ("could not bind" in detail or _taken(port)):
                continue
            shutil.rmtree(directory, ignore_errors=True)
            raise RuntimeError(f"the private PostgreSQL cluster did not start ({error})\n{detail}") from error
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        _wait_until_accepting(url)
        yield url
    finally:
        executor.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_until_accepting(url: str, seconds: float = 60.0) -> None:
    """A started cluster may listen and still refuse with "the database system is starting up"
    (on a loaded machine, for seconds): wait until a connection is taken."""

    async def connected() -> None:
        deadline = asyncio.get_running_loop().time() + seconds
        while True:
            try:
                connection = await asyncpg.connect(url, timeout=10)
            except asyncpg.exceptions.CannotConnectNowError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.1)
            else:
                await connection.close()
                return

    asyncio.run(connected())


def _taken(port: int) -> bool:
    """Whether something else listens on `port` (the cluster's own start failed)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True
