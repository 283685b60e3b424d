"""The certificate authority of the allowlist proxy (proxy.py): to add a domain's secrets to its
https:// requests, the proxy answers the sandbox's TLS itself, with a certificate for that domain
signed here (docs/code-execution.md, "The network").

One authority per gateway, made once and kept in the runtime's folder of the data dir: its key
(mode 0600) never leaves the host; its certificate, in a bundle with the system's, is the only
part that enters sandboxes, so their clients trust what the proxy answers for an intercepted
domain. Certificates for domains are made on first use and kept in memory.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import ssl
import tempfile
import threading
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SYSTEM_CAS = Path("/etc/ssl/certs/ca-certificates.crt")
"""Debian's bundle of the system's trusted CAs (update-ca-certificates(8))."""

CA_DAYS = 3650
LEAF_DAYS = 90
RENEW_SECONDS = 30 * 86400
"""A domain's certificate is made again when it has less than this left."""


def _name(common: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ResponseKit"),
            x509.NameAttribute(NameOID.COMMON_NAME, common),
        ]
    )


def _usage(*allowed: str) -> x509.KeyUsage:
    names = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
             "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")  # fmt: skip
    return x509.KeyUsage(**{name: name in allowed for name in names})


def _write(path: Path, data: bytes, mode: int) -> None:
    """Written whole or not at all: a concurrent reader never sees half a file."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temporary, path)


class Authority:
    """A CA kept in `folder`: `ca.key` (0600), `ca.crt`, and `bundle.crt` (the system's CAs and
    this one), made on first use and read back after."""

    def __init__(self, folder: Path, common_name: str = "ResponseKit sandbox proxy CA") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        self.certificate_path = folder / "ca.crt"
        self.bundle_path = folder / "bundle.crt"
        key_path = folder / "ca.key"
        if key_path.exists() and self.certificate_path.exists():
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{key_path} is not an EC key")
            self._key = key
            self._certificate = x509.load_pem_x509_certificate(self.certificate_path.read_bytes())
        else:
            self._key = ec.generate_private_key(ec.SECP256R1())
            self._certificate = self._ca(common_name)
            pem = serialization.Encoding.PEM
            _write(
                key_path,
                self._key.private_bytes(
                    pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ),
                0o600,
            )
            _write(self.certificate_path, self._certificate.public_bytes(pem), 0o644)
        self.certificate_pem = self._certificate.public_bytes(serialization.Encoding.PEM)
        # Made again at each start: the system's CAs may have been updated since.
        system = SYSTEM_CAS.read_bytes() if SYSTEM_CAS.exists() else b""
        self.bundle = (
            system.rstrip(b"\n") + b"\n" + self.certificate_pem if system else self.certificate_pem
        )
        _write(self.bundle_path, self.bundle, 0o644)
        # One key for every domain's certificate: made once per process, never written.
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._folder = folder
        self._contexts: dict[str, tuple[float, ssl.SSLContext]] = {}
        self._lock = threading.Lock()

    def _ca(self, common_name: str) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        public = self._key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage("key_cert_sign", "crl_sign"), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )

    def _leaf(self, host: str) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        try:
            alternative: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alternative = x509.DNSName(host)
        public = self._leaf_key.public_key()
        return (
            x509.CertificateBuilder()
            .subject_name(_name(host))
            .issuer_name(self._certificate.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage("digital_signature"), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context answering as `host` (a name or an address), with a certificate
        this authority signed."""
        host = host.lower()
        with self._lock:
            found = self._contexts.get(host)
            if found is not None and found[0] > time.time():
                return found[1]
            leaf = self._leaf(host)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.set_alpn_protocols(["http/1.1"])  # what the proxy speaks inside
            pem = serialization.Encoding.PEM
            key = self._leaf_key.private_bytes(
                pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            # load_cert_chain reads files only: a private one, removed once read.
            fd, path = tempfile.mkstemp(dir=self._folder, prefix=".leaf-")
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(key + leaf.public_bytes(pem))
                context.load_cert_chain(path)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            expires = leaf.not_valid_after_utc.timestamp() - RENEW_SECONDS
            self._contexts[host] = (expires, context)
            return context
