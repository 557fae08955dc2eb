"""A fault-injecting proxy in front of the real API server: every answer that is not an injected fault is the real
server's.

HTTPS on 127.0.0.1 with a certificate of its own (``kubeconfig`` writes a kubeconfig that trusts it). Requests are
forwarded one per connection, answers streamed back as they come (watches and followed logs included).
``inject_faults`` answers the next matching requests with error statuses instead (as the emulator's call of the same
name); ``lose_answers`` lets the request reach the server and answers with an error instead of its answer;
``drop_watches`` cuts the watches open through it mid-stream; ``refuse_connections`` closes its port until
``accept_connections`` (connections refused, as by a server that is down). Upgrades (exec) are not forwarded.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.kube_control_plane.control_plane import ControlPlane

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade", "host",
                "proxy-connection"}
_ERROR_CODE = re.compile(rb'"type":"ERROR".*?"code":(\d+)')
_REASONS = {429: "TooManyRequests", 500: "InternalError", 502: "BadGateway", 503: "ServiceUnavailable",
            504: "Timeout"}


@dataclass
class _Fault:
    method: str | None
    path: re.Pattern
    statuses: list[int]
    retry_after: int
    #: the request reaches the server first, and its answer is lost (replaced by the fault)
    forward: bool = False


@dataclass
class FaultProxy:
    plane: ControlPlane
    faults: list[_Fault] = field(default_factory=list)
    #: (method, path, status) of every fault answered
    injected: list[tuple[str, str, int]] = field(default_factory=list)
    #: the code of every ERROR event the real server sent on a watch (410: the resourceVersion was compacted away)
    watch_errors: list[int] = field(default_factory=list)
    #: watches the server has answered through the proxy so far (a watch counts in ``open_watches`` from then)
    watches_opened: int = 0
    _watches: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _port: int = 0

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def inject_faults(self, method: str | None = None, path_regex: str = ".*", statuses: Iterable[int] = (500, 429),
                      *, retry_after: int = 0) -> None:
        """Answer the next requests matching ``method`` and ``path_regex`` (searched in the path, query aside)
        with ``statuses``, one each, in order."""
        with self._lock:
            self.faults.append(_Fault(method, re.compile(path_regex), list(statuses), retry_after))

    def lose_answers(self, method: str, path_regex: str, statuses: Iterable[int] = (500,)) -> None:
        """Forward the next matching requests to the server, and answer each with the next of ``statuses``
        instead of the server's answer: the request done, its answer lost (``inject_faults`` never reaches it)."""
        with self._lock:
            self.faults.append(_Fault(method, re.compile(path_regex), list(statuses), 0, forward=True))

    def drop_watches(self) -> int:
        """Cut every watch open through the proxy; how many there were."""
        with self._lock:
            open_ = list(self._watches)
        for sock in open_:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(open_)

    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    def kubeconfig(self, server_kubeconfig: str) -> str:
        """A copy of a kubeconfig of the real server that goes through the proxy instead."""
        config = yaml.safe_load(Path(server_kubeconfig).read_text())
        ca = base64.b64encode((self.plane.workdir / "proxy.crt").read_bytes()).decode()
        for entry in config["clusters"]:
            entry["cluster"] = {"server": self.url, "certificate-authority-data": ca}
        path = Path(server_kubeconfig).with_suffix(".via-proxy.kubeconfig")
        path.write_text(yaml.safe_dump(config))
        return str(path)

    # ------------------------------------------------------------ serving

    def refuse_connections(self) -> None:
        """Close the proxy's listening socket and cut what is open through it: every new connection is refused
        (``ECONNREFUSED``), as by an API server that is down, until ``accept_connections``."""
        assert self._server is not None
        self._port = self._server.server_address[1]
        self.stop()
        self._server = None

    def accept_connections(self) -> None:
        """Listen again, on the same port (the kubeconfigs written stay good)."""
        self.start(port=self._port)

    def start(self, port: int = 0) -> FaultProxy:
        cert, key = self.plane.workdir / "proxy.crt", self.plane.workdir / "proxy.key"
        if not cert.exists():
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                            "/CN=fault-proxy", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                            "-out", str(cert)], check=True, capture_output=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        upstream = ssl.create_default_context(cafile=str(self.plane.ca_file))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # Streams stay chunked, as the server sends them: a client reads a close-delimited answer in blocks
            # (urllib3: 64 KiB), which would hold a watch's events back. One request per connection.
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                proxy._forward(self, upstream)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.drop_watches()
            self._server.shutdown()
            self._server.server_close()

    def _take(self, method: str, path: str) -> _Fault | None:
        with self._lock:
            for fault in self.faults:
                if (fault.method is None or fault.method == method) and fault.path.search(path) and fault.statuses:
                    return fault
        return None

    def _forward(self, handler: BaseHTTPRequestHandler, upstream: ssl.SSLContext) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        path = handler.path.split("?", 1)[0]
        fault = self._take(handler.command, path)
        if fault is not None and fault.forward:
            connection = http.client.HTTPSConnection("127.0.0.1", self.plane.port, context=upstream, timeout=60)
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_HEADERS}
            connection.request(handler.command, handler.path, body=body, headers=headers)
            connection.getresponse().read()
            connection.close()
        if fault is not None:
            with self._lock:
                code = fault.statuses.pop(0)
                self.injected.append((handler.command, path, code))
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code,
                      "reason": _REASONS.get(code, "InternalError"), "message": "injected by the test's proxy"}
            if code == 429:
                status["details"] = {"retryAfterSeconds": fault.retry_after}
            data = json.dumps(status).encode()
            handler.send_response(code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.send_header("Connection", "close")
            if code in (429, 503):
                handler.send_header("Retry-After", str(fault.retry_after))
            handler.end_headers()
            handler.wfile.write(data)
            return
        if handler.headers.get("Upgrade"):
            handler.send_error(400, "the test's proxy forwards no upgrades (exec)")
            return
        connection = http.client.HTTPSConnection("127.0.0.1", self.plane.port, context=upstream, timeout=3600)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_HEADERS}
        connection.request(handler.command, handler.path, body=body, headers=headers)
        answer = connection.getresponse()
        handler.close_connection = True
        handler.send_response_only(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP_HEADERS:
                handler.send_header(name, value)
        length = answer.getheader("Content-Length")
        handler.send_header("Content-Length" if length is not None else "Transfer-Encoding", length or "chunked")
        handler.send_header("Connection", "close")
        handler.end_headers()
        watch = "watch=" in handler.path or "/watch/" in handler.path
        if watch:
            with self._lock:
                self._watches.add(handler.connection)
                self.watches_opened += 1
        try:
            while chunk := answer.read1(65536):
                if watch and b'"ERROR"' in chunk:
                    with self._lock:
                        self.watch_errors += [int(code) for code in _ERROR_CODE.findall(chunk)]
                handler.wfile.write(chunk if length is not None else b"%x\r\n%s\r\n" % (len(chunk), chunk))
                handler.wfile.flush()
            if length is None:
                handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went, or drop_watches cut it
        finally:
            if watch:
                with self._lock:
                    self._watches.discard(handler.connection)
            connection.close()
