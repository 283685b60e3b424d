"""The network of a container with `network_policy: allowlist`: an HTTP proxy on the host, reached
from inside the sandbox only through a Unix socket bound into it (the sandbox has no network of its
own, docs/code-execution.md).

- `CONNECT host:port` (what clients send for https://) to an allowed host with no secrets opens a
  tunnel: the TLS inside it is the client's, end to end.
- `CONNECT` to a host that has secrets (`DomainSecret`) is answered here: the client's TLS ends at
  the proxy, with a certificate for the host from the gateway's authority (authority.py, which
  sandboxes trust), its request gets the secrets as headers, and goes on over a TLS connection of
  the proxy's own to the real host, whose certificate is verified (the system's CAs); one that
  fails is a 502, never an unverified connection.
- A plain-HTTP request in absolute form (`GET http://host/path`) to an allowed host is forwarded
  with that domain's secrets set as headers.

Either way a secret is added here, on the host, and never enters the sandbox. OpenAI's reference
says of `network_policy.domain_secrets` only that each `name` and `value` is "injected for the
domain" (https://developers.openai.com/api/reference/terraform/resources/containers); here that
is a header `name: value` on each request to the domain.

A domain allows itself and its subdomains: `example.com` (or `*.example.com`, the same) allows
`example.com` and `api.example.com`, not `badexample.com`. A name is resolved here, once, and the
connection goes to that address, which must be a public one: an allowed name that resolves to a
loopback or private address (the gateway's own port, the machine's other services) is refused
unless the runtime was made for private networks.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import selectors
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from .authority import Authority
from .runtime import Network

MAX_HEAD = 64 * 1024
IDLE_SECONDS = 300.0
MAX_CONNECTIONS = 64
STATUS_TEXT = {400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 502: "Bad Gateway"}
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization",
              "proxy-authenticate", "te", "trailer", "upgrade"}  # fmt: skip


def _normal(domain: str) -> str:
    return domain.strip().lower().removeprefix("*.").rstrip(".")


def _covers(domain: str, host: str) -> bool:
    return host == domain or host.endswith("." + domain)


@dataclass(frozen=True, slots=True)
class Policy:
    """What a container's proxy lets through and adds."""

    network: Network
    private_networks: bool = False

    def allows(self, host: str) -> bool:
        host = _normal(host)
        return any(_covers(_normal(d), host) for d in self.network.allowed_domains or ())

    def headers(self, host: str) -> dict[str, str]:
        host = _normal(host)
        return {s.name: s.value for s in self.network.secrets if _covers(_normal(s.domain), host)}

    def address(self, host: str, port: int) -> tuple[str, int]:
        """The address to connect to: resolved once, refused when not public."""
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        for family, _, _, _, sockaddr in infos:
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ip = ipaddress.ip_address(sockaddr[0])
            if ip.is_global or (self.private_networks and not ip.is_unspecified):
                return str(ip), port
        raise PermissionError(f"{host} resolves to no public address")


def _request(method: str, target: str, version: str, headers: list[tuple[str, str]],
             added: dict[str, str]) -> bytes:  # fmt: skip
    """A request's head as forwarded: hop-by-hop headers dropped, the secrets set (replacing any
    the client sent by those names), and the connection closed after one response."""
    lower = {name.lower() for name in added}
    kept = [(n, v) for n, v in headers if n.lower() not in HOP_BY_HOP and n.lower() not in lower]
    lines = [f"{method} {target} {version}", *(f"{n}: {v}" for n, v in kept)]
    lines += [f"{n}: {v}" for n, v in added.items()] + ["Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _response(status: int, reason: str) -> bytes:
    body = (reason + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {STATUS_TEXT[status]}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _head(text: str) -> tuple[str, str, str, list[tuple[str, str]]] | None:
    """Method, target, version and headers of a request's head, or None when it is not one."""
    first, *lines = text.split("\r\n")
    try:
        method, target, version = first.split()
    except ValueError:
        return None
    headers = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            return None
        headers.append((name.strip(), value.strip()))
    return method, target, version, headers


class _Tls:
    """One side's TLS over a blocking socket, through memory BIOs (ssl.SSLObject), so that one
    thread drives both sides of an intercepted connection: an SSLSocket shared by a reading and
    a writing thread is not safe (https://docs.openssl.org/3.0/man7/openssl-threads/)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, *, server_side: bool,
                 server_hostname: str | None = None) -> None:  # fmt: skip
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )

    def _flush(self) -> None:
        if data := self._out.read():
            self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(1 << 16)
        if data:
            self._in.write(data)
        else:
            self._in.write_eof()
        return bool(data)

    def handshake(self) -> None:
        """Raises ssl.SSLError (a certificate that fails verification among them) or OSError."""
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._flush()
                if not self._fill():
                    raise ConnectionError("closed during the TLS handshake") from None
            else:
                self._flush()
                return

    def take(self) -> tuple[bytes, bool]:
        """What has arrived, decrypted, without waiting; and whether the peer has ended."""
        chunks = []
        while True:
            try:
                chunk = self._tls.read(1 << 16)
            except ssl.SSLWantReadError:
                self._flush()
                return b"".join(chunks), False
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b"".join(chunks), True
            if not chunk:
                return b"".join(chunks), True
            chunks.append(chunk)

    def receive(self) -> tuple[bytes, bool]:
        """What has arrived, waiting for the socket once if nothing has."""
        data, ended = self.take()
        if data or ended:
            return data, ended
        self._fill()
        return self.take()

    def send(self, data: bytes) -> None:
        self._tls.write(data)
        self._flush()

    def end(self) -> None:
        """close_notify, then no more writes."""
        with contextlib.suppress(ssl.SSLError, OSError):
            self._tls.unwrap()
        with contextlib.suppress(OSError):
            self._flush()
            self.sock.shutdown(socket.SHUT_WR)


def _relay(client: _Tls, upstream: _Tls, pending: bytes) -> None:
    """Plaintext both ways, from one thread, until the upstream has answered and closed."""
    upstream.send(pending)
    # epoll, not select(2): the gateway's descriptors may pass FD_SETSIZE.
    with selectors.DefaultSelector() as waiting:
        waiting.register(client.sock, selectors.EVENT_READ, (client, upstream))
        waiting.register(upstream.sock, selectors.EVENT_READ, (upstream, client))
        while upstream.sock in waiting.get_map():
            ready = waiting.select(IDLE_SECONDS)
            if not ready:
                return
            for key, _ in ready:
                source, target = key.data
                data, ended = source.receive()
                if data:
                    target.send(data)
                if ended:
                    target.end()
                    waiting.unregister(source.sock)


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until both sides are done."""

    def copy(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join()


class _Handler(socketserver.StreamRequestHandler):
    server: _Server
    # Unbuffered: the head is read byte by byte, so nothing past it (a body, TLS's first bytes)
    # sits in a buffer when the connection is spliced.
    rbufsize = 0

    def handle(self) -> None:
        # Code can open connections to the socket without end: each holds one of the gateway's
        # threads, so a container gets only so many at once.
        if not self.server.slots.acquire(blocking=False):
            return self._reply(429, f"more than {MAX_CONNECTIONS} connections at once")
        try:
            self._handle()
        finally:
            self.server.slots.release()

    def _handle(self) -> None:
        self.connection.settimeout(IDLE_SECONDS)
        head = self.rfile.readline(MAX_HEAD).decode("latin-1")
        try:
            method, target, version = head.split()
        except ValueError:
            return self._reply(400, "not an HTTP request")
        headers: list[tuple[str, str]] = []
        size = len(head)
        while (line := self.rfile.readline(MAX_HEAD).decode("latin-1")) not in ("\r\n", "\n", ""):
            size += len(line)
            if size > MAX_HEAD or ":" not in line:
                return self._reply(400, "bad request headers")
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        if method.upper() == "CONNECT":
            host, _, port_text = target.rpartition(":")
            path = None
        else:
            if not target.lower().startswith("http://"):
                return self._reply(400, "only http:// URLs and CONNECT go through this proxy")
            rest = target[len("http://") :]
            authority, slash, path_rest = rest.partition("/")
            path = slash + path_rest if slash else "/"
            host, colon, port_text = authority.rpartition(":")
            if not colon or not port_text.isdigit():
                host, port_text = authority, "80"
        host = host.strip("[]")
        if not port_text.isdigit() or not host:
            return self._reply(400, "no host and port")
        policy = self.server.policy
        if not policy.allows(host):
            return self._reply(403, f"{host} is not in the container's allowed domains")
        try:
            upstream = socket.create_connection(policy.address(host, int(port_text)), timeout=10)
        except PermissionError as error:
            return self._reply(403, str(error))
        except OSError as error:
            return self._reply(502, f"{host}:{port_text} could not be reached: {error}")
        with upstream:
            upstream.settimeout(IDLE_SECONDS)
            added = policy.headers(host)
            if path is not None:
                upstream.sendall(_request(method, path, version, headers, added))
                return _splice(self.connection, upstream)
            if not added:
                self.connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                return _splice(self.connection, upstream)
            try:
                answer = self.server.authority.server_context(host)
            except ValueError:
                return self._reply(400, f"{host} cannot be named in a certificate")
            self.connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with contextlib.suppress(OSError):  # ssl.SSLError among them
                self._intercept(host, answer, upstream, added)

    def _intercept(
        self, host: str, answer: ssl.SSLContext, upstream: socket.socket, added: dict[str, str]
    ) -> None:
        """The client's TLS answered here with `answer` (a certificate for `host`); its request,
        with the secrets, sent on over TLS to the real host, verified. Raises OSError when either
        side fails or goes away."""
        client = _Tls(self.connection, answer, server_side=True)
        client.handshake()
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            data, ended = client.receive()
            buffer += data
            if ended or len(buffer) > MAX_HEAD:
                client.send(_response(400, "no complete request head"))
                return client.end()
        head, _, pending = buffer.partition(b"\r\n\r\n")
        request = _head(head.decode("latin-1"))
        if request is None:
            client.send(_response(400, "not an HTTP request"))
            return client.end()
        method, target, version, headers = request
        server = _Tls(upstream, self.server.upstream, server_side=False, server_hostname=host)
        try:
            server.handshake()
        except OSError as error:  # a certificate that fails verification among them
            client.send(_response(502, f"{host}: TLS to the upstream failed: {error}"))
            return client.end()
        _relay(client, server, _request(method, target, version, headers, added) + pending)

    def _reply(self, status: int, reason: str) -> None:
        with contextlib.suppress(OSError):
            self.connection.sendall(_response(status, reason))


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    policy: Policy
    slots: threading.BoundedSemaphore
    authority: Authority
    upstream: ssl.SSLContext


def upstream_context(extra_cafile: Path | None = None) -> ssl.SSLContext:
    """How the proxy's own TLS connections verify a host: the system's CAs (and, for tests, one
    more CA file), hostnames checked (ssl.create_default_context)."""
    context = ssl.create_default_context()
    if extra_cafile is not None:
        context.load_verify_locations(cafile=extra_cafile)
    context.set_alpn_protocols(["http/1.1"])
    return context


class Proxy:
    """One container's proxy, serving on `path` from a thread of its own. `authority` signs the
    certificates of the hosts it answers TLS for; `upstream` verifies the real hosts."""

    def __init__(
        self, path: Path, policy: Policy, authority: Authority, upstream: ssl.SSLContext
    ) -> None:
        path.unlink(missing_ok=True)
        self.path = path
        # Bound through the folder's descriptor: a socket's path is limited to 108 bytes (unix(7)),
        # which a data folder deep in the tree passes.
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._server = _Server(f"/proc/self/fd/{folder}/{path.name}", _Handler)
        finally:
            os.close(folder)
        self._server.policy = policy
        self._server.authority, self._server.upstream = authority, upstream
        self._server.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        # Any uid connects (the sandbox's); what reaches the socket is the bind into the sandbox.
        os.chmod(path, 0o666)
        threading.Thread(
            target=self._server.serve_forever, name="sandbox-proxy", daemon=True
        ).start()

    @property
    def policy(self) -> Policy:
        return self._server.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._server.policy = policy

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.path.unlink(missing_ok=True)
