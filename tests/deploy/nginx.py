"""A real nginx (Debian's package, installed by `bin/bootstrap test`) run for a test: the repo's
deploy/nginx/buzz.conf with only its ports, upstream servers and certificate paths replaced,
inside a minimal nginx.conf of the test's own, as a foreground process with its own prefix
(never the system service).

    tls = self_signed_certificate(tmp_path, "relay.example.com")
    proxy = start_nginx(tmp_path, upstreams=[relay.port], tls=tls)
    proxy.https_port, proxy.http_port
    proxy.stop()
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from websockets.sync.client import ClientConnection, connect

from buzzrelay.embedded import free_port
from tests.faults.clients import Client
from tests.relay_server import ROOT, RelayProcess

CONFIG = ROOT / "deploy" / "nginx" / "buzz.conf"
PUBLIC_HOST = "relay.example.com"
# The lines of buzz.conf a test replaces (each must be there exactly once).
UPSTREAM_LINE = "    server 127.0.0.1:8000 max_fails=1 fail_timeout=2s;\n"
HTTP_LISTEN = "listen 80;"
HTTPS_LISTEN = "listen 443 ssl http2;"
CERTIFICATE = f"/etc/letsencrypt/live/{PUBLIC_HOST}/fullchain.pem"
CERTIFICATE_KEY = f"/etc/letsencrypt/live/{PUBLIC_HOST}/privkey.pem"


def nginx_binary() -> str:
    found = shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(path, os.X_OK)),
        None,
    )
    if found is None:
        raise RuntimeError("nginx not found: run bin/bootstrap test (it installs Debian's nginx)")
    return found


@dataclass(frozen=True)
class Tls:
    certificate: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts only this certificate."""
        return ssl.create_default_context(cafile=str(self.certificate))


def self_signed_certificate(directory: Path, host: str = PUBLIC_HOST) -> Tls:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    tls = Tls(directory / "fullchain.pem", directory / "privkey.pem")
    tls.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    tls.key.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))
    return tls


def render_config(*, upstreams: list[int], http_port: int, https_port: int, tls: Tls) -> str:
    """buzz.conf with the test's ports and paths, and nothing else changed."""
    text = CONFIG.read_text()
    replacements = {
        UPSTREAM_LINE: "".join(UPSTREAM_LINE.replace("8000", str(port)) for port in upstreams),
        HTTP_LISTEN: f"listen 127.0.0.1:{http_port};",
        HTTPS_LISTEN: f"listen 127.0.0.1:{https_port} ssl http2;",
        CERTIFICATE: str(tls.certificate),
        CERTIFICATE_KEY: str(tls.key),
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, f"deploy/nginx/buzz.conf no longer has {old!r} once"
        text = text.replace(old, new)
    return text


@dataclass
class NginxProcess:
    process: subprocess.Popen[bytes]
    prefix: Path
    http_port: int
    https_port: int

    def log(self) -> str:
        parts = []
        for name in ("error.log", "stderr.log"):
            path = self.prefix / name
            if path.exists():
                parts.append(path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # nginx's fast shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def start_nginx(directory: Path, *, upstreams: list[int], tls: Tls) -> NginxProcess:
    prefix = directory / "nginx"
    prefix.mkdir()
    http_port, https_port = free_port(), free_port()
    (prefix / "buzz.conf").write_text(
        render_config(upstreams=upstreams, http_port=http_port, https_port=https_port, tls=tls)
    )
    temp_paths = "\n".join(
        f"    {kind}_temp_path {prefix / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # Run by root (CI), the workers would become `nobody` and lose the test's private files.
    user = "user root;\n" if os.geteuid() == 0 else ""
    (prefix / "nginx.conf").write_text(
        f"{user}worker_processes 1;\n"
        f"pid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'} info;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        f"    access_log {prefix / 'access.log'};\n"
        f"{temp_paths}\n"
        f"    include {prefix / 'buzz.conf'};\n"
        "}\n"
    )
    with (prefix / "stderr.log").open("ab") as stderr:
        process = subprocess.Popen(
            [nginx_binary(), "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
             "-g", "daemon off;"],
            stdout=stderr, stderr=subprocess.STDOUT,
        )
    proxy = NginxProcess(process, prefix, http_port, https_port)
    deadline = time.monotonic() + 10
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited {process.returncode}:\n{proxy.log()}")
        try:
            socket.create_connection(("127.0.0.1", https_port), timeout=0.5).close()
            return proxy
        except OSError:
            if time.monotonic() > deadline:
                proxy.stop()
                raise RuntimeError(f"nginx did not listen:\n{proxy.log()}") from None
            time.sleep(0.05)


@contextmanager
def in_front_of(relay: RelayProcess, directory: Path) -> Iterator[tuple[NginxProcess, Tls]]:
    """nginx with a certificate made here in front of `relay`, which this takes charge of: both
    stop at the end, and the relay also when nginx fails to start."""
    try:
        tls = self_signed_certificate(directory)
        proxy = start_nginx(directory, upstreams=[relay.port], tls=tls)
    except BaseException:
        relay.stop()
        raise
    try:
        yield proxy, tls
    finally:
        proxy.stop()
        relay.stop()


class SniTransport(httpx.HTTPTransport):
    """Connects to the proxy on loopback (from `local_address`, when given), naming the public
    host in TLS (SNI and the certificate check) as a client resolving it would."""

    def __init__(self, tls: Tls, local_address: str | None = None) -> None:
        super().__init__(verify=tls.client_context(), local_address=local_address)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.extensions["sni_hostname"] = PUBLIC_HOST
        return super().handle_request(request)


@dataclass(frozen=True)
class PublicEndpoint:
    """How clients reach the relay through the proxy: https:// and wss:// on the public host
    (with the proxy's test port), connected to loopback."""

    tls: Tls
    port: int

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def netloc(self) -> str:
        return f"{PUBLIC_HOST}:{self.port}"

    def http(self, local_address: str | None = None, timeout: float = 15) -> httpx.Client:
        return httpx.Client(transport=SniTransport(self.tls, local_address), timeout=timeout,
                            headers={"Host": self.netloc}, base_url=self.base_url)

    def signed_client(self, local_address: str | None = None, secret: str | None = None
                      ) -> Client:
        """A NIP-98 client signing https://relay.example.com:<port>/... (tests/faults/clients)."""
        client = Client(self.base_url, secret, host=PUBLIC_HOST)
        client.http.close()
        client.http = self.http(local_address)
        return client

    def websocket(self, local_address: str | None = None) -> ClientConnection:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(10)
        if local_address is not None:
            sock.bind((local_address, 0))
        sock.connect(("127.0.0.1", self.port))
        return connect(f"wss://{self.netloc}/", sock=sock, ssl=self.websocket_context(),
                       server_hostname=PUBLIC_HOST, open_timeout=10)

    def websocket_context(self) -> ssl.SSLContext:
        """`Tls.client_context` capped at TLS 1.2, for websockets' threaded (sync) client.

        That client reads its socket on a thread of its own from the moment the connection
        exists, while the caller's thread writes the upgrade request. With TLS 1.3 the server's
        session tickets arrive just after the TLS handshake, so one OpenSSL connection is read
        and written from two threads at once, which OpenSSL does not allow (the same race:
        miguelgrinberg/python-socketio#1568, python-engineio#461): now and then the request
        never reached nginx, which logged "client timed out ... while waiting for request" 60 s
        later, and the client's handshake timed out. Measured with 12 clients reconnecting
        through nginx during a rolling restart: 6 and 12 handshakes hung in 1,739 and 1,074
        with TLS 1.3, none in 5,635 over four runs with TLS 1.2, which has no message after
        its handshake. The relay is not involved (nginx ends TLS); HTTP clients keep TLS 1.3."""
        context = self.tls.client_context()
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        return context
