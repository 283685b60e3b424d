"""The network of a container with `network_policy: allowlist`: an HTTP proxy on the host, reached
from inside the sandbox only through a Unix socket bound into it (the sandbox has no network of its
own, docs/code-execution.md).

- `CONNECT host:port` (what clients send for https://) opens a tunnel to an allowed host; the TLS
  inside it is the client's, end to end, so nothing can be added to those requests.
- A plain-HTTP request in absolute form (`GET http://host/path`) to an allowed host is forwarded
  with that domain's secrets set as headers (`DomainSecret`): the secret is added here, on the host,
  and never enters the sandbox. Secrets apply to http:// only.

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
import socket
import socketserver
import threading
from dataclasses import dataclass
from pathlib import Path

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
            if path is None:
                self.connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                added = policy.headers(host)
                lower = {name.lower() for name in added}
                kept = [
                    (name, value)
                    for name, value in headers
                    if name.lower() not in HOP_BY_HOP and name.lower() not in lower
                ]
                lines = [f"{method} {path} {version}", *(f"{n}: {v}" for n, v in kept)]
                lines += [f"{n}: {v}" for n, v in added.items()] + ["Connection: close", "", ""]
                upstream.sendall("\r\n".join(lines).encode("latin-1"))
            _splice(self.connection, upstream)

    def _reply(self, status: int, reason: str) -> None:
        body = (reason + "\n").encode()
        head = (
            f"HTTP/1.1 {status} {STATUS_TEXT[status]}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(OSError):
            self.connection.sendall(head.encode() + body)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    policy: Policy
    slots: threading.BoundedSemaphore


class Proxy:
    """One container's proxy, serving on `path` from a thread of its own."""

    def __init__(self, path: Path, policy: Policy) -> None:
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
