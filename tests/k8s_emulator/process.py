"""The emulator in a process of its own, for benchmarks.

In the test's own interpreter, client and server share one GIL: a benchmark of the client would also measure the
server's JSON decoding and schema validation, and the two would slow each other down. ``EmulatorProcess`` starts
``KubeEmulator`` in a child process (``multiprocessing``, spawn) and forwards calls of its Python API over a pipe::

    with EmulatorProcess() as emu:
        config = emu.write_kubeconfig(tmp_path / "kubeconfig")
        emu.create_namespace("bench")
        ...                       # the real clients talk HTTP to emu.url
        emu.request_count()       # counts, not the recorded list, cross the pipe cheaply

``python -m tests.k8s_emulator --kubeconfig PATH`` serves one until interrupted, for trying things by hand.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import multiprocessing
import ssl
import tempfile
import threading
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .server import KubeEmulator


class _Controls:
    """Calls answered in the child beyond ``KubeEmulator``'s own: cheap summaries of what it recorded."""

    def __init__(self, emu: KubeEmulator) -> None:
        self.emu = emu

    def request_count(self) -> int:
        return len(self.emu.requests)

    def request_summary(self) -> dict[str, int]:
        """Requests by verb and resource: ``POST pods``, ``GET services``, ``WATCH pods``, ``GET pods/log``..."""
        counts: Counter[str] = Counter()
        for request in self.emu.requests:
            counts[f"{'WATCH' if request.is_watch else request.method} {_resource(request.path)}"] += 1
        return dict(counts)

    def count(self, kind_plural: str, namespace: str | None = None, label_selector: str | None = None) -> int:
        return len(self.emu.list(kind_plural, namespace, label_selector))

    # A stand-in for dropping every watch at once, until the emulator has a control of its own for it: it
    # shuts every open connection (the watches among them), as an API server that restarts does.
    def drop_connections(self) -> int:
        """Shut every open connection of the emulator; how many there were."""
        server = self.emu._server
        if server is None:
            return 0
        with server._connections_lock:
            count = len(server._connections)
        server.close_connections()
        return count


def _resource(path: str) -> str:
    """``/api/v1/namespaces/ns/pods/name/log`` -> ``pods/log``; ``/apis/g/v/podgroups`` -> ``podgroups``."""
    segments = [s for s in path.split("/") if s]
    rest = segments[2:] if segments[:1] == ["api"] else segments[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return path
    return f"{rest[0]}/{rest[2]}" if len(rest) > 2 else rest[0]


def self_signed_certificate() -> tuple[bytes, bytes]:
    """A certificate for 127.0.0.1 and its key, both PEM: the server's and, self-signed, the cluster CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-emulator")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (certificate.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _serve_tls(emu: KubeEmulator, certificate: bytes, key: bytes) -> None:
    """Serve HTTPS from now on: the listening socket is wrapped before any client connects (test set-up only)."""
    with tempfile.TemporaryDirectory() as tmp:
        cert_file, key_file = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert_file.write_bytes(certificate)
        key_file.write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
    server = emu._server
    assert server is not None
    server.socket = context.wrap_socket(server.socket, server_side=True)


def _serve(conn: Connection, kwargs: dict[str, Any], tls: tuple[bytes, bytes] | None = None) -> None:
    emu = KubeEmulator(**kwargs).start()
    if tls is not None:
        _serve_tls(emu, *tls)
    controls = _Controls(emu)
    conn.send(("ok", emu.port))
    try:
        while True:
            try:
                name, args, call_kwargs = conn.recv()
            except EOFError:
                return
            if name == "__stop__":
                conn.send(("ok", None))
                return
            try:
                target = getattr(controls, name, None) or getattr(emu, name)
                result = target(*args, **call_kwargs) if callable(target) else target
                conn.send(("ok", result))
            except Exception as error:  # the caller re-raises it
                conn.send(("error", error))
    finally:
        emu.stop()


class EmulatorProcess:
    """``KubeEmulator`` served by a child process; any of its methods (and ``_Controls``') is called remotely.

    :param tls: serve HTTPS with a certificate of its own; ``write_kubeconfig`` then names it as the cluster's CA,
        as a real cluster's kubeconfig does (the clients then hold that CA alone instead of the system's bundle).
    :param kwargs: ``KubeEmulator``'s arguments (``kubernetes_version``, ``bookmark_interval``...).
    """

    def __init__(self, *, tls: bool = False, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._tls = self_signed_certificate() if tls else None
        self._conn: Connection | None = None
        self._process: multiprocessing.process.BaseProcess | None = None
        self._lock = threading.Lock()  # one call at a time on the pipe
        self.port = 0

    def start(self) -> EmulatorProcess:
        context = multiprocessing.get_context("spawn")  # no fork of a parent's threads and locks
        parent, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, self._kwargs, self._tls), name="kube-emulator",
                                        daemon=True)
        self._process.start()
        child.close()
        self._conn = parent
        self.port = self._receive()
        return self

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.send(("__stop__", (), {}))
                conn.recv()
            except (EOFError, OSError):
                pass
            conn.close()
        if self._process is not None:
            self._process.join(10)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._process = None

    def __enter__(self) -> EmulatorProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: str | Path, namespace: str = "default", token: str = "emulator-token") -> str:
        if self._tls is None:
            return self.call("write_kubeconfig", str(path), namespace, token)
        cluster = {"server": self.url, "certificate-authority-data": base64.b64encode(self._tls[0]).decode()}
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "emulator", "preferences": {},
            "clusters": [{"name": "emulator", "cluster": cluster}],
            "users": [{"name": "emulator", "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator",
                                                          "namespace": namespace}}],
        }
        Path(path).write_text(json.dumps(config, indent=2))
        return str(path)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``KubeEmulator.<name>(*args, **kwargs)`` in the child (or the attribute's value)."""
        if self._conn is None:
            raise RuntimeError("the emulator process is not running; call start() first")
        with self._lock:
            self._conn.send((name, args, kwargs))
            return self._receive()

    def _receive(self) -> Any:
        assert self._conn is not None
        status, value = self._conn.recv()
        if status == "error":
            raise value
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, *args, **kwargs)
