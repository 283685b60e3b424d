"""The allowlist proxy's https:// (containers/proxy.py, containers/authority.py), on the real
bubblewrap and real HTTPS servers on loopback: a domain with secrets gets them on its HTTPS
requests while the sandbox never sees them, every other domain stays an end-to-end tunnel, and an
upstream whose certificate fails verification is a 502."""

from __future__ import annotations

import asyncio
import http.server
import os
import ssl
import stat
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from responsekit.containers.authority import Authority
from responsekit.containers.bubblewrap import AUTHORITY_FOLDER, Bubblewrap, bubblewrap_runtime
from responsekit.containers.runtime import DomainSecret, Limits, Network, SandboxUnavailable

SECRET = "sk-live-5f3a9c"


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers with the path and records each request's headers (never echoing them)."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        _Echo.seen.append(dict(self.headers))
        body = b"x" * (3 << 20) if self.path == "/big" else f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        _Echo.seen.append(dict(self.headers))
        body = f"got {self.rfile.read(int(self.headers['Content-Length'])).decode()}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(context: ssl.SSLContext) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """The test servers' own CA, which the proxy is told to trust and the sandbox is not."""
    return Authority(tmp_path_factory.mktemp("test-ca"), "ResponseKit test upstream CA")


@pytest.fixture(scope="module")
def trusted_port(test_ca: Authority) -> Iterator[int]:
    """An HTTPS server on loopback, as `localhost` (the secret's domain)."""
    yield from _serve(test_ca.server_context("localhost"))


@pytest.fixture(scope="module")
def tunnel_port(test_ca: Authority) -> Iterator[int]:
    """An HTTPS server on loopback, as `127.0.0.1` (allowed, no secrets)."""
    yield from _serve(test_ca.server_context("127.0.0.1"))


@pytest.fixture(scope="module")
def untrusted_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """An HTTPS server as `localhost` whose CA nobody trusts."""
    rogue = Authority(tmp_path_factory.mktemp("rogue-ca"), "Rogue CA")
    yield from _serve(rogue.server_context("localhost"))


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory, test_ca: Authority) -> Bubblewrap:
    try:
        return bubblewrap_runtime(
            tmp_path_factory.mktemp("containers"),
            private_networks=True,  # the test servers are on loopback
            upstream_cafile=test_ca.certificate_path,
        )
    except SandboxUnavailable as error:
        pytest.skip(f"no sandbox on this machine: {error}")


@pytest.fixture
def container(runtime: Bubblewrap) -> Iterator[str]:
    name = f"cntr_tls{os.getpid()}"
    network = Network(
        allowed_domains=("localhost", "127.0.0.1"),
        secrets=(DomainSecret("localhost", "Authorization", f"Bearer {SECRET}"),),
    )
    asyncio.run(runtime.start(name, Limits(), network))
    _Echo.seen.clear()
    yield name
    asyncio.run(runtime.remove(name))


# NO_PROXY names localhost and 127.0.0.1 inside (docs/code-execution.md); the test's servers are
# there, on the host, so each client is told to use the proxy for them anyway.
CURL = "curl -sS --noproxy '' -w ' %{http_code}\\n'"


def test_a_secret_reaches_an_https_upstream_and_never_the_sandbox(
    runtime: Bubblewrap, container: str, trusted_port: int
) -> None:
    url = f"https://localhost:{trusted_port}"

    async def go() -> None:
        # curl trusts the proxy's certificate for localhost through CURL_CA_BUNDLE, and a header
        # the code sends by the secret's name is replaced.
        done = await runtime.run(
            container, f"{CURL} -v -H 'Authorization: Bearer guess' {url}/curl 2>&1"
        )
        assert done.exit_code == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] == "hello /curl 200", done.stdout
        assert "issuer: O=ResponseKit; CN=ResponseKit sandbox proxy CA" in done.stdout
        assert "> Authorization: Bearer guess" in done.stdout  # what curl sent, as seen inside
        # A request's body goes on after its head.
        posted = await runtime.run(container, f"{CURL} -d 'a=1&b=2' {url}/form")
        assert posted.stdout == "got a=1&b=2 200\n", posted
        # A response streams back whole.
        big = await runtime.run(
            container, f"curl -sS --noproxy '' -o /dev/null -w '%{{size_download}}' {url}/big"
        )
        assert big.stdout == str(3 << 20), big
        # Python's ssl through SSL_CERT_FILE, in the kernel.
        ran = await runtime.run_code(
            container,
            "import os, urllib.request\n"
            "del os.environ['no_proxy'], os.environ['NO_PROXY']\n"
            f"print(urllib.request.urlopen('{url}/python').read().decode())",
        )
        assert ran.logs == "hello /python\n", ran.logs
        # What the sandbox holds: its environment, pid 1's, and its files outside /usr.
        looked = await runtime.run(
            container,
            "env; cat /proc/1/environ /proc/self/environ;"
            " grep -rsa sk-live /etc /opt /run /tmp /mnt/data /proc/1/environ; echo searched",
        )
        assert looked.stdout.endswith("searched\n")
        assert "SSL_CERT_FILE=/opt/responsekit/ca-certificates.crt" in looked.stdout
        for seen in (done.stdout, done.stderr, ran.logs, looked.stdout, looked.stderr):
            assert SECRET not in seen

    asyncio.run(go())
    assert [h["Authorization"] for h in _Echo.seen] == [f"Bearer {SECRET}"] * 4


def test_a_domain_without_secrets_stays_an_end_to_end_tunnel(
    runtime: Bubblewrap, container: str, test_ca: Authority, tunnel_port: int
) -> None:
    async def go() -> None:
        await runtime.put_file(container, "upstream-ca.crt", test_ca.certificate_pem)
        done = await runtime.run(
            container,
            f"{CURL} -v --cacert upstream-ca.crt https://127.0.0.1:{tunnel_port}/direct 2>&1",
        )
        assert done.exit_code == 0, done.stdout
        # The certificate the code verified is the server's own, from the server's CA.
        assert "issuer: O=ResponseKit; CN=ResponseKit test upstream CA" in done.stdout
        assert done.stdout.splitlines()[-1] == "hello /direct 200"

    asyncio.run(go())
    assert "Authorization" not in _Echo.seen[-1]


def test_an_upstream_that_fails_verification_is_a_502(
    runtime: Bubblewrap, container: str, untrusted_port: int
) -> None:
    async def go() -> None:
        done = await runtime.run(container, f"{CURL} https://localhost:{untrusted_port}/x")
        assert done.exit_code == 0, done.stderr
        assert done.stdout.startswith("localhost: TLS to the upstream failed:")
        assert "certificate verify failed" in done.stdout
        assert done.stdout.endswith(" 502\n")

    asyncio.run(go())
    assert _Echo.seen == []


def test_the_authority_is_made_once_and_its_key_stays_private(
    runtime: Bubblewrap, container: str
) -> None:
    folder = runtime.root / AUTHORITY_FOLDER
    assert stat.S_IMODE((folder / "ca.key").stat().st_mode) == 0o600
    again = Authority(folder)
    assert again.certificate_pem == (folder / "ca.crt").read_bytes()
    assert again.bundle.endswith(again.certificate_pem)
    assert b"PRIVATE KEY" not in again.bundle
    assert sorted(p.name for p in folder.iterdir()) == ["bundle.crt", "ca.crt", "ca.key"]
