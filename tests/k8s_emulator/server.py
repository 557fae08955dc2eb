"""A Kubernetes API server emulator served over HTTP on 127.0.0.1.

``KubeEmulator`` runs a ``ThreadingHTTPServer`` that answers the REST API the ``kubernetes`` and
``kubernetes_asyncio`` clients speak (discovery, CRUD, patch, list, chunked watch streams, pod logs),
backed by ``cluster.Cluster``. Tests reach it through the kubeconfig ``write_kubeconfig`` writes, and
play the kubelet with ``run_pod`` / ``succeed_pod`` / ``fail_pod`` / ``pending_pod`` / ``append_log``.

Example::

    with KubeEmulator() as emu:
        config.load_kube_config(emu.write_kubeconfig(tmp_path / "kubeconfig"))
        ...
"""

from __future__ import annotations

import copy
import json
import re
import select
import socket
import struct
import threading
import time
import traceback
import uuid
from collections import deque
from collections.abc import Iterable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from . import kubelet
from .cluster import NODE_NAME, ApiError, Cluster, RequestOptions, bad_request, not_found, now_rfc3339
from .resources import ResourceType
from .schema import schema_set
from .selectors import labels_match, parse_label_selector
from .store import LogLine


class RecordedRequest(NamedTuple):
    method: str
    path: str
    query: dict
    is_watch: bool


class _FaultRule:
    def __init__(self, method: str | None, path_regex: str, statuses: Iterable[int], retry_after: int):
        self.method = method.upper() if method else None
        self.pattern = re.compile(path_regex)
        self.statuses = deque(statuses)
        self.retry_after = retry_after

    def take(self, method: str, path: str) -> int | None:
        if not self.statuses or (self.method and self.method != method) or not self.pattern.search(path):
            return None
        return self.statuses.popleft()


_FAULT_REASONS = {
    400: ("BadRequest", "injected fault"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: injected fault"),
    404: ("NotFound", "the server could not find the requested resource"),
    409: ("Conflict", "Operation cannot be fulfilled: injected fault"),
    410: ("Expired", "too old resource version: injected fault"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "Timeout: request did not complete within requested timeout - context deadline exceeded"),
}


def fault_error(code: int, retry_after: int = 0) -> ApiError:
    reason, message = _FAULT_REASONS.get(code, (None, f"injected fault {code}"))
    details: dict[str, Any] | None = None
    headers = {}
    if code in (429, 503):
        details = {"retryAfterSeconds": retry_after}
        headers["Retry-After"] = str(retry_after)
    elif code == 500:
        details = {"causes": [{"message": "injected fault"}]}
    return ApiError(code, reason, message, details, headers)


def rfc3339nano(timestamp_ns: int) -> str:
    """RFC 3339 with nanoseconds and trailing zeros trimmed, like Go's time.RFC3339Nano."""
    seconds, fraction = divmod(timestamp_ns, 10 ** 9)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if fraction:
        text += "." + f"{fraction:09d}".rstrip("0")
    return text + "Z"


def _parse_time_ns(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    whole = int(moment.replace(microsecond=0).timestamp())
    return whole * 10 ** 9 + moment.microsecond * 1000


def _to_ns(at: Any) -> int:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
        return int(at.replace(microsecond=0).timestamp()) * 10 ** 9 + at.microsecond * 1000
    return int(float(at) * 10 ** 9)


_WAITING_MESSAGES = {
    "ErrImagePull": "trying and failing to pull image",
    "ImagePullBackOff": "image can't be pulled",
}


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, handler, emulator: KubeEmulator):
        self.emulator = emulator
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def server_bind(self):
        # Headers and body go out in separate writes; without this Nagle and delayed ACKs add ~40 ms per request.
        # Accepted connections inherit the option from the listening socket (Linux).
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().server_bind()

    def process_request(self, request, client_address):
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _abort(connection: socket.socket) -> None:
    """Cut a connection with a TCP reset, with no answer or end of stream."""
    try:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()
    except OSError:
        pass


class _OpenWatch:
    """A watch being served; ``drop()`` makes its thread cut the connection at its next look (<= 0.2 s)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.started = time.monotonic()
        self.dropped = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-emulator"
    server: _HttpServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded in KubeEmulator.requests instead of printed

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # ------------------------------------------------------------ plumbing

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, code: int, body: bytes, content_type: str, headers: dict | None = None,
              warnings: Iterable[str] = ()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for warning in warnings:
            self.send_header("Warning", f'299 - {json.dumps(warning)}')
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, code: int, obj: Any, headers: dict | None = None, warnings: Iterable[str] = ()) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json", headers, warnings)

    def _send_error(self, error: ApiError) -> None:
        self._send_json(error.code, error.status(), error.headers)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def _client_gone(self) -> bool:
        if self.server.stopping.is_set():
            return True
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    # ------------------------------------------------------------ dispatch

    def _dispatch(self) -> None:
        emulator = self.server.emulator
        split = urlsplit(self.path)
        path = split.path
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        try:
            body = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        is_watch = query.get("watch") in ("true", "1", "True") or "/watch/" in path
        if emulator.refuse_connections:
            # Reset unanswered, as by a server that is down or restarting behind its load balancer.
            emulator._refuse(RecordedRequest(self.command, path, query, is_watch))
            self.close_connection = True
            _abort(self.connection)
            return
        emulator._record(RecordedRequest(self.command, path, query, is_watch))
        try:
            code = emulator._take_fault(self.command, path)
            if code is not None:
                raise fault_error(code, emulator._fault_retry_after)
            self._route(path, query, body, is_watch)
        except ApiError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # an emulator bug: answer 500 and keep the traceback for the test to see
            emulator.errors.append(traceback.format_exc())
            try:
                self._send_error(ApiError(500, "InternalError", f"Internal error occurred: {exc!r}"))
            except OSError:
                self.close_connection = True

    def _route(self, path: str, query: dict, body: bytes, is_watch: bool) -> None:
        emulator = self.server.emulator
        cluster = emulator.cluster
        segments = [unquote(s) for s in path.split("/") if s]
        if not segments:
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]
            return self._send_json(200, {"paths": paths})
        if segments[0] in ("healthz", "livez", "readyz"):
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        if segments == ["version"]:
            major, minor = cluster.schemas.version.split(".")
            return self._send_json(200, {
                "major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0", "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2024-01-01T00:00:00Z", "goVersion": "go1.22.0",
                "compiler": "gc", "platform": "linux/amd64"})
        if segments[0] == "api":
            if len(segments) == 1:
                return self._send_json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{emulator.port}"}]})
            group, version, rest = "", segments[1], segments[2:]
        elif segments[0] == "apis":
            if len(segments) == 1:
                return self._send_json(200, emulator._group_list())
            if len(segments) == 2:
                group_doc = emulator._group(segments[1])
                if group_doc is None:
                    raise _no_route()
                return self._send_json(200, group_doc)
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            raise _no_route()
        if not rest:
            resources = emulator._resource_list(group, version)
            if resources is None:
                raise _no_route()
            return self._send_json(200, resources)
        if rest[0] == "watch":
            rest = rest[1:]
        if not rest:
            raise _no_route()
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = cluster.lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise _no_route()
        rt = cluster.lookup(group, version, rest[0])
        if rt is None or (rt.namespaced is False and namespace is not None):
            raise _no_route()
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource is not None and subresource not in rt.subresources:
            raise _no_route()
        if rt.namespaced and namespace is None and (name is not None or self.command not in ("GET",)):
            raise _no_route()
        self._serve(rt, namespace, name, subresource, version, query, body, is_watch)

    def _options(self, query: dict) -> RequestOptions:
        validation = query.get("fieldValidation") or "Warn"
        if validation not in ("Ignore", "Warn", "Strict"):
            raise bad_request(f'fieldValidation: Unsupported value: "{validation}": supported values: "Ignore", '
                              '"Strict", "Warn"')
        dry_run = query.get("dryRun")
        if dry_run not in (None, "", "All"):
            raise bad_request(f'dryRun: Unsupported value: "{dry_run}": supported values: "All"')
        return RequestOptions(dry_run=dry_run == "All", field_validation=validation,
                              field_manager=query.get("fieldManager"))

    def _json_body(self, rt: ResourceType, body: bytes) -> Any:
        content_type = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        if content_type in ("application/yaml", "application/apply-patch+yaml"):
            import yaml  # only needed when a client posts YAML

            try:
                return yaml.safe_load(body)
            except yaml.YAMLError as exc:
                raise bad_request(f"the object provided is unrecognized (must be of type {rt.kind}): {exc}") from None
        if content_type not in ("application/json", "*/*", ""):
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           "accepted media types include: application/json, application/yaml, "
                           "application/vnd.kubernetes.protobuf")
        try:
            return json.loads(body or b"null")
        except ValueError as exc:
            raise bad_request(f"the object provided is unrecognized (must be of type {rt.kind}): couldn't get "
                              f"version/kind; json parse error: {exc}") from None

    def _serve(self, rt: ResourceType, namespace: str | None, name: str | None, subresource: str | None,
               version: str, query: dict, body: bytes, is_watch: bool) -> None:
        cluster = self.server.emulator.cluster
        method = self.command
        opts = self._options(query)
        if subresource in ("exec", "attach", "portforward"):
            raise bad_request("Upgrade request required")
        if subresource == "log":
            if method != "GET":
                raise _not_allowed()
            return self._serve_log(rt, namespace, name or "", query)
        if subresource == "eviction":
            if method != "POST":
                raise _not_allowed()
            cluster.delete(rt, namespace, name or "", version, opts, {})
            return self._send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                         "code": 201})
        if subresource == "binding":
            if method != "POST":
                raise _not_allowed()
            return self._bind(rt, namespace, name or "", self._json_body(rt, body))
        if name is None:
            if method == "GET" and is_watch:
                return self._serve_watch(rt, namespace, version, query)
            if method == "GET":
                return self._send_json(200, cluster.list(rt, namespace, version, query))
            if method == "POST":
                created = cluster.create(rt, namespace, self._json_body(rt, body), version, opts)
                return self._send_json(201, created, warnings=opts.warnings)
            if method == "DELETE":
                options = self._delete_options(query, body)
                result = cluster.delete_collection(rt, namespace, version, query, opts, options)
                return self._send_json(200, result, warnings=opts.warnings)
            raise _not_allowed()
        if subresource is not None and subresource != "status":
            raise _not_allowed()
        if method == "GET" and is_watch:
            query = dict(query, fieldSelector=",".join(filter(None, [query.get("fieldSelector"),
                                                                     f"metadata.name={name}"])))
            return self._serve_watch(rt, namespace, version, query)
        if method == "GET":
            return self._send_json(200, cluster.get(rt, namespace, name, version))
        if method == "PUT":
            updated = cluster.update(rt, namespace, name, self._json_body(rt, body), version, opts, subresource)
            return self._send_json(200, updated, warnings=opts.warnings)
        if method == "PATCH":
            patched, code = cluster.patch(rt, namespace, name, self.headers.get("Content-Type") or "", body, version,
                                          opts, subresource)
            return self._send_json(code, patched, warnings=opts.warnings)
        if method == "DELETE" and subresource is None:
            result = cluster.delete(rt, namespace, name, version, opts, self._delete_options(query, body))
            return self._send_json(200, result, warnings=opts.warnings)
        raise _not_allowed()

    def _delete_options(self, query: dict, body: bytes) -> dict:
        options: dict[str, Any] = {}
        if body.strip():
            try:
                parsed = json.loads(body)
            except ValueError as exc:
                raise bad_request(f"json parse error in DeleteOptions: {exc}") from None
            if isinstance(parsed, dict):
                options.update({k: v for k, v in parsed.items() if v is not None})
        for key in ("propagationPolicy", "gracePeriodSeconds"):
            if query.get(key) and key not in options:
                options[key] = query[key]
        if query.get("orphanDependents") and "orphanDependents" not in options:
            options["orphanDependents"] = query["orphanDependents"] == "true"
        return options

    def _bind(self, rt: ResourceType, namespace: str | None, name: str, binding: Any) -> None:
        target = ((binding or {}).get("target") or {}).get("name") if isinstance(binding, dict) else None
        if not target:
            raise bad_request("binding target name is required")
        self.server.emulator.schedule_pod(namespace or "", name, node=target)
        self._send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    # ------------------------------------------------------------ streaming

    def _serve_watch(self, rt: ResourceType, namespace: str | None, version: str, query: dict) -> None:
        emulator = self.server.emulator
        cluster = emulator.cluster
        request = cluster.prepare_watch(rt, namespace, version, query)
        self._start_stream("application/json")
        watch = emulator._watch_opened(self.path)

        def cut() -> bool:
            after = emulator.drop_watches_after
            return watch.dropped.is_set() or (after is not None and time.monotonic() - watch.started >= after)

        try:
            for event in cluster.watch_events(request, lambda: self._client_gone() or cut()):
                if cut():
                    break
                if event is not None:
                    self._chunk(json.dumps(event).encode() + b"\n")
        except OSError:
            self.close_connection = True
            return
        finally:
            emulator._watch_closed(watch)
        if cut():
            # Mid-stream, without the chunked body's end: what a client sees when a server or proxy goes away.
            self.close_connection = True
            _abort(self.connection)
            return
        self._end_stream()

    def _serve_log(self, rt: ResourceType, namespace: str | None, name: str, query: dict) -> None:
        emulator = self.server.emulator
        store = emulator.cluster.store
        with store.lock:
            pod = store.get(rt.key, namespace or "", name)
            if pod is None:
                raise not_found(rt, name)
            container = _log_container(pod, query.get("container"))
            _check_log_ready(pod, container, query)
            uid = pod["metadata"]["uid"]
            lines = store.log_lines(uid, container)
        follow = query.get("follow") in ("true", "1", "True")
        timestamps = query.get("timestamps") in ("true", "1", "True")
        since_ns = _since(query, namespace, name)
        tail = _int_option(query, "tailLines", name, minimum=0)
        limit_bytes = _int_option(query, "limitBytes", name, minimum=1)
        selected = [line for line in lines if since_ns is None or line.timestamp_ns >= since_ns]
        if tail is not None:
            selected = selected[len(selected) - tail:] if tail else []

        def render(batch: list[LogLine]) -> bytes:
            return b"".join(((rfc3339nano(line.timestamp_ns) + " ") if timestamps else "").encode()
                            + line.text.encode() + b"\n" for line in batch)

        initial = render(selected)
        if not follow:
            if limit_bytes is not None:
                initial = initial[:limit_bytes]
            return self._send(200, initial, "text/plain")
        self._start_stream("text/plain")
        sent = 0
        try:
            position = len(lines)
            data = initial if limit_bytes is None else initial[:limit_bytes]
            self._chunk(data)
            sent += len(data)
            while limit_bytes is None or sent < limit_bytes:
                with store.changed:
                    current = store.get(rt.key, namespace or "", name)
                    all_lines = store.log_lines(uid, container)
                    finished = (current is None or current["metadata"]["uid"] != uid
                                or _container_finished(current, container) or store.closed)
                    if len(all_lines) == position and not finished:
                        store.changed.wait(0.2)
                        all_lines = store.log_lines(uid, container)
                        current = store.get(rt.key, namespace or "", name)
                        finished = (current is None or current["metadata"]["uid"] != uid
                                    or _container_finished(current, container) or store.closed)
                new = all_lines[position:]
                position = len(all_lines)
                data = render(new)
                if limit_bytes is not None:
                    data = data[:limit_bytes - sent]
                self._chunk(data)
                sent += len(data)
                if finished or self._client_gone():
                    break
        except OSError:
            self.close_connection = True
            return
        self._end_stream()


def request_verb(request: RecordedRequest) -> str:
    """The Kubernetes verb of a recorded request (as audit logs and RBAC name it)."""
    if request.is_watch:
        return "watch"
    parts = [p for p in request.path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return request.method.lower()
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    collection = len(rest) <= 1
    method = request.method
    if method == "GET":
        return "list" if collection else "get"
    if method == "DELETE":
        return "deletecollection" if collection else "delete"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _no_route() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def _not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {})


def _log_container(pod: dict, requested: str | None) -> str:
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = [c["name"] for c in spec.get("containers") or []]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    if not requested:
        if len(containers) == 1:
            return containers[0]
        message = f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
        if inits:
            message += f" or one of the init containers: [{' '.join(inits)}]"
        raise bad_request(message)
    if requested not in containers + inits:
        raise bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def _container_status(pod: dict, container: str) -> dict | None:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if entry.get("name") == container:
            return entry
    return None


def _check_log_ready(pod: dict, container: str, query: dict) -> None:
    name = pod["metadata"]["name"]
    if not (pod.get("spec") or {}).get("nodeName"):
        raise bad_request(f"pod {name} does not have a host assigned")
    entry = _container_status(pod, container)
    state = (entry or {}).get("state") or {}
    if query.get("previous") in ("true", "1", "True"):
        raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
    if entry is None or ("running" not in state and "terminated" not in state):
        reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                          f'{_WAITING_MESSAGES.get(reason, reason)}')


def _container_finished(pod: dict, container: str) -> bool:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    entry = _container_status(pod, container)
    return bool(entry and "terminated" in (entry.get("state") or {}))


def _since(query: dict, namespace: str | None, name: str) -> int | None:
    since_time, since_seconds = query.get("sinceTime"), query.get("sinceSeconds")
    if since_time and since_seconds:
        raise ApiError(422, "Invalid", f'PodLogOptions "{name}" is invalid: []: Forbidden: at most one of `sinceTime` '
                                       "or `sinceSeconds` may be specified")
    if since_time:
        try:
            return _parse_time_ns(since_time)
        except ValueError:
            raise bad_request(f'sinceTime: Invalid value: "{since_time}": must be RFC3339') from None
    if since_seconds:
        seconds = _int_option(query, "sinceSeconds", name, minimum=1)
        return time.time_ns() - int(seconds) * 10 ** 9
    return None


def _int_option(query: dict, key: str, name: str, minimum: int) -> int | None:
    text = query.get(key)
    if text in (None, ""):
        return None
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f'{key}: Invalid value: "{text}": must be an integer') from None
    if value < minimum:
        bound = "greater than or equal to 0" if minimum == 0 else "greater than 0"
        raise ApiError(422, "Invalid",
                       f'PodLogOptions "{name}" is invalid: {key}: Invalid value: {value}: must be {bound}')
    return value


class KubeEmulator:
    """An in-process Kubernetes API server on 127.0.0.1 for tests.

    :param kubernetes_version: minor version whose strict schemas (from kubernetes-validate) validate bodies
        and which ``/version`` reports, e.g. ``"1.31"``.
    :param bookmark_interval: seconds between BOOKMARK events on watches that allow bookmarks (``None``: none);
        kube-apiserver's watch cache sends one about every minute. Settable while running.
    :param min_request_timeout: kube-apiserver's ``--min-request-timeout``: a watch without ``timeoutSeconds``
        is ended after a random 1x-2x of it. Settable while running, as are ``ignore_timeout_seconds`` (watches
        outlive their ``timeoutSeconds``, as behind a proxy that holds them), ``drop_watches_after`` (every
        watch is cut mid-stream after so many seconds) and ``refuse_connections`` (every request is reset
        unanswered, as by a server that is down; recorded in ``refused``).
    :param schedule_pods: bind new pods of the default scheduler to the node right after creation
        (a separate write, seen by watches as MODIFIED), as a running scheduler would.
    :param collect_orphans: delete objects whose ownerReferences all point at absent owners, as the
        garbage collector does.
    """

    def __init__(self, kubernetes_version: str = "1.31", *, bookmark_interval: float | None = 60.0,
                 schedule_pods: bool = True, collect_orphans: bool = True, history_limit: int = 100_000,
                 min_request_timeout: float = 1800.0):
        self.kubernetes_version = kubernetes_version
        self.cluster = Cluster(schema_set(kubernetes_version), schedule_pods=schedule_pods,
                               collect_orphans=collect_orphans, bookmark_interval=bookmark_interval,
                               history_limit=history_limit, min_request_timeout=min_request_timeout)
        self.drop_watches_after: float | None = None
        self.refuse_connections = False
        #: Requests reset unanswered while ``refuse_connections`` was on.
        self.refused: list[RecordedRequest] = []
        self._watches: list[_OpenWatch] = []
        self.errors: list[str] = []
        self._requests: list[RecordedRequest] = []
        self._requests_lock = threading.Lock()
        # Notified as each request is recorded: a test waits on what a client did instead of sleeping.
        self._request_recorded = threading.Condition(self._requests_lock)
        self._faults: list[_FaultRule] = []
        self._fault_retry_after = 0
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> KubeEmulator:
        if self._server is not None:
            return self
        self._server = _HttpServer(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kube-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.stopping.set()
        self.cluster.close()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the emulator is not running; call start() first")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: str | Path, namespace: str = "default", token: str = "emulator-token") -> str:
        """Write a kubeconfig for this emulator (any bearer token is accepted) and return its path."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "emulator", "preferences": {},
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator",
                                                          "namespace": namespace}}],
        }
        Path(path).write_text(json.dumps(config, indent=2))
        return str(path)

    # ------------------------------------------------------------ state access

    def _type(self, kind_plural: str, group: str, version: str) -> ResourceType:
        rt = self.cluster.lookup(group, version, kind_plural)
        if rt is None:
            raise KeyError(f"the emulator serves no resource {kind_plural!r} in {group or 'core'}/{version}")
        return rt

    def get(self, kind_plural: str, namespace: str | None, name: str, group: str = "",
            version: str = "v1") -> dict | None:
        rt = self._type(kind_plural, group, version)
        with self.cluster.store.lock:
            obj = self.cluster.store.get(rt.key, (namespace or "") if rt.namespaced else "", name)
            return None if obj is None else self.cluster.present(rt, obj, version)

    def list(self, kind_plural: str, namespace: str | None = None, label_selector: str | None = None,
             group: str = "", version: str = "v1") -> list[dict]:
        rt = self._type(kind_plural, group, version)
        requirements = parse_label_selector(label_selector)
        with self.cluster.store.lock:
            items = self.cluster.store.items(rt.key, namespace if rt.namespaced else None)
            return [self.cluster.present(rt, o, version) for o in items
                    if labels_match(requirements, o["metadata"].get("labels"))]

    def create(self, kind_plural: str, namespace: str | None, body: dict, group: str = "", version: str = "v1") -> dict:
        """Create an object as a client would (same validation and defaults), without HTTP."""
        rt = self._type(kind_plural, group, version)
        return self.cluster.create(rt, namespace, copy.deepcopy(body), version, RequestOptions())

    def delete(self, kind_plural: str, namespace: str | None, name: str, group: str = "", version: str = "v1",
               propagation_policy: str | None = None) -> dict:
        rt = self._type(kind_plural, group, version)
        options = {"propagationPolicy": propagation_policy} if propagation_policy else {}
        return self.cluster.delete(rt, namespace, name, version, RequestOptions(), options)

    def update_status(self, kind_plural: str, namespace: str | None, name: str, status: dict, group: str = "",
                      version: str = "v1") -> dict:
        """Replace an object's status, as its controller would (one MODIFIED event if it changed)."""
        rt = self._type(kind_plural, group, version)
        return self.cluster.write_status(rt, (namespace or "") if rt.namespaced else "", name, status)

    def create_namespace(self, name: str, labels: dict | None = None) -> dict:
        body = {"metadata": {"name": name, **({"labels": labels} if labels else {})}}
        return self.create("namespaces", None, body)

    def register_crd(self, group: str, version: str, plural: str, kind: str, namespaced: bool = True,
                     schema: dict | None = None, *, status_subresource: bool = True,
                     short_names: tuple[str, ...] = (), versions: tuple[str, ...] | None = None) -> dict:
        """Serve a custom resource (``/apis/<group>/<version>/...``) by creating its CustomResourceDefinition."""
        return self.cluster.register_crd(group, version, plural, kind, namespaced, schema,
                                         status_subresource=status_subresource, short_names=short_names,
                                         versions=versions)

    @property
    def resource_version(self) -> int:
        return self.cluster.store.rv

    # ------------------------------------------------------------ kubelet / scheduler playing

    def _pod(self, namespace: str, name: str) -> dict:
        pod = self.cluster.store.get(("", "pods"), namespace, name)
        if pod is None:
            raise KeyError(f'pods "{name}" not found in namespace "{namespace}"')
        return pod

    def schedule_pod(self, namespace: str, name: str, node: str = NODE_NAME) -> dict:
        """Bind a pod to a node (what a scheduler does): spec.nodeName and PodScheduled=True."""
        with self.cluster.store.lock:
            pod = self._pod(namespace, name)
            updated = copy.deepcopy(pod)
            updated["spec"]["nodeName"] = node
            conditions = [c for c in (updated.get("status") or {}).get("conditions") or []
                          if c["type"] != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": now_rfc3339()})
            updated.setdefault("status", {})["conditions"] = conditions
            return self.cluster.replace_object(self.cluster.lookup("", "v1", "pods"), pod, updated)

    def set_pod_phase(self, namespace: str, name: str, phase: str, *, container_states: dict[str, dict] | None = None,
                      reason: str | None = None, message: str | None = None,
                      conditions: list[dict] | None = None) -> dict:
        """Move a pod to ``phase`` with kubelet-shaped status.

        ``container_states`` maps container names to a state (``{"running": {...}}``, ``{"terminated": {...}}``
        or ``{"waiting": {...}}``); containers left out get the usual state for the phase. ``conditions``
        entries replace the derived condition of the same type.
        """
        with self.cluster.store.lock:
            pod = self._pod(namespace, name)
            updated = copy.deepcopy(pod)
            if not updated["spec"].get("nodeName"):
                updated["spec"]["nodeName"] = NODE_NAME
            pod_ip = (pod.get("status") or {}).get("podIP") or self.cluster.allocator.pod_ip()
            updated["status"] = kubelet.pod_status(
                updated, phase, now=now_rfc3339(), pod_ip=pod_ip, host_ip="192.168.0.2",
                container_states=container_states, reason=reason, message=message, conditions=conditions)
            return self.cluster.replace_object(self.cluster.lookup("", "v1", "pods"), pod, updated)

    def run_pod(self, namespace: str, name: str) -> dict:
        return self.set_pod_phase(namespace, name, "Running")

    def succeed_pod(self, namespace: str, name: str, message: str | None = None) -> dict:
        now = now_rfc3339()
        return self.set_pod_phase(namespace, name, "Succeeded", container_states=self._terminated_states(
            namespace, name, 0, "Completed", message, now))

    def fail_pod(self, namespace: str, name: str, exit_code: int = 1, reason: str = "Error",
                 message: str | None = None) -> dict:
        now = now_rfc3339()
        return self.set_pod_phase(namespace, name, "Failed", container_states=self._terminated_states(
            namespace, name, exit_code, reason, message, now))

    def _terminated_states(self, namespace: str, name: str, exit_code: int, reason: str, message: str | None,
                           now: str) -> dict[str, dict]:
        with self.cluster.store.lock:
            pod = self._pod(namespace, name)
        previous = {c["name"]: c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        states = {}
        for container in pod["spec"].get("containers") or []:
            running = ((previous.get(container["name"]) or {}).get("state") or {}).get("running") or {}
            terminated = {"exitCode": exit_code, "reason": reason, "startedAt": running.get("startedAt", now),
                          "finishedAt": now}
            if message is not None:
                terminated["message"] = message
            states[container["name"]] = {"terminated": terminated}
        return states

    def pending_pod(self, namespace: str, name: str, reason: str = "Unschedulable", message: str | None = None) -> dict:
        """Keep a pod Pending: ``Unschedulable`` (PodScheduled=False, no node) or a container waiting reason
        such as ``ErrImagePull`` / ``ImagePullBackOff`` / ``CreateContainerConfigError``."""
        with self.cluster.store.lock:
            pod = self._pod(namespace, name)
            updated = copy.deepcopy(pod)
            now = now_rfc3339()
            if reason == "Unschedulable":
                updated["spec"].pop("nodeName", None)
                updated["status"] = kubelet.pod_status(
                    updated, "Pending", now=now, pod_ip="", host_ip="", unschedulable=True,
                    message=message or kubelet.pending_message(reason))
            else:
                if not updated["spec"].get("nodeName"):
                    updated["spec"]["nodeName"] = NODE_NAME
                states = {}
                for container in updated["spec"].get("containers") or []:
                    text = message or kubelet.pending_message(reason, container.get("image", ""), container["name"],
                                                              f"{namespace}/{name}")
                    states[container["name"]] = {"waiting": {"reason": reason, **({"message": text} if text else {})}}
                updated["status"] = kubelet.pod_status(
                    updated, "Pending", now=now, pod_ip="", host_ip="192.168.0.2", container_states=states)
            return self.cluster.replace_object(self.cluster.lookup("", "v1", "pods"), pod, updated)

    def append_log(self, namespace: str, pod: str, text: str, container: str | None = None, *,
                   at: datetime | float | None = None) -> None:
        """Append lines to a container's log; each line is stamped now (or at ``at``, for sinceTime tests)."""
        with self.cluster.store.lock:
            obj = self._pod(namespace, pod)
            spec = obj["spec"]
            names = [c["name"] for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])]
            container = container or names[0]
            if container not in names:
                raise ValueError(f"pod {namespace}/{pod} has no container {container!r}; containers: {names}")
            uid = obj["metadata"]["uid"]
            existing = self.cluster.store.log_lines(uid, container)
            # Lines stamped "now" stay strictly ordered even within one clock tick.
            start = _to_ns(at) if at is not None else max(time.time_ns(),
                                                          existing[-1].timestamp_ns + 1 if existing else 0)
            lines = [LogLine(start + i, line) for i, line in enumerate(text.splitlines())]
            self.cluster.store.append_log(uid, container, lines)

    def print_lines(self, namespace: str, pod: str, prefix: str, count: int, width: int = 80,
                    container: str | None = None) -> None:
        """A container prints ``count`` lines of ``width`` characters, each ``<prefix> line <n> xxx...``: made
        here, so that a benchmark's process does not pay for building what a master prints."""
        self.append_log(namespace, pod, "\n".join(f"{prefix} line {i:07d} ".ljust(width - 1, "x")
                                                 for i in range(count)), container)

    def add_event(self, namespace: str, involved_kind: str, involved_name: str, reason: str, message: str,
                  type: str = "Warning") -> dict:
        """Record a core/v1 Event about an object, as kubelet or the scheduler would."""
        with self.cluster.store.lock:
            involved = {"kind": involved_kind, "namespace": namespace, "name": involved_name}
            owner_rt = next((rt for rt in self.cluster.types() if rt.kind == involved_kind), None)
            if owner_rt is not None:
                involved["apiVersion"] = owner_rt.api_version()
                target = self.cluster.store.get(owner_rt.key, namespace if owner_rt.namespaced else "", involved_name)
                if target is not None:
                    involved["uid"] = target["metadata"]["uid"]
                    involved["resourceVersion"] = target["metadata"]["resourceVersion"]
            component = "default-scheduler" if reason in ("FailedScheduling", "Scheduled") else "kubelet"
            now = now_rfc3339()
            event = {
                "metadata": {"name": f"{involved_name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
                "involvedObject": involved, "reason": reason, "message": message, "type": type,
                "source": {"component": component, **({"host": NODE_NAME} if component == "kubelet" else {})},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": component, "reportingInstance": NODE_NAME if component == "kubelet" else "",
            }
            return self.create("events", namespace, event)

    # ------------------------------------------------------------ faults, history, request log

    def inject_faults(self, method: str | None = None, path_regex: str = ".*", statuses: Iterable[int] = (500, 429),
                      *, retry_after: int = 0) -> None:
        """Answer the next requests matching ``method`` and ``path_regex`` with ``statuses``, in order."""
        self._fault_retry_after = retry_after
        with self._requests_lock:
            self._faults.append(_FaultRule(method, path_regex, statuses, retry_after))

    def clear_faults(self) -> None:
        with self._requests_lock:
            self._faults.clear()

    def _take_fault(self, method: str, path: str) -> int | None:
        with self._requests_lock:
            for rule in self._faults:
                code = rule.take(method, path)
                if code is not None:
                    self._fault_retry_after = rule.retry_after
                    if not rule.statuses:
                        self._faults.remove(rule)
                    return code
        return None

    # ------------------------------------------------------------ timing of watches, dropped connections

    @property
    def bookmark_interval(self) -> float | None:
        return self.cluster.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float | None) -> None:
        self.cluster.bookmark_interval = seconds

    @property
    def min_request_timeout(self) -> float:
        return self.cluster.min_request_timeout

    @min_request_timeout.setter
    def min_request_timeout(self, seconds: float) -> None:
        self.cluster.min_request_timeout = seconds

    @property
    def ignore_timeout_seconds(self) -> bool:
        return self.cluster.ignore_timeout_seconds

    @ignore_timeout_seconds.setter
    def ignore_timeout_seconds(self, value: bool) -> None:
        self.cluster.ignore_timeout_seconds = value

    def _watch_opened(self, path: str) -> _OpenWatch:
        watch = _OpenWatch(path)
        with self._requests_lock:
            self._watches.append(watch)
        return watch

    def _watch_closed(self, watch: _OpenWatch) -> None:
        with self._requests_lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def _refuse(self, request: RecordedRequest) -> None:
        with self._requests_lock:
            self.refused.append(request)

    @property
    def open_watches(self) -> int:
        """Watches being served now."""
        with self._requests_lock:
            return len(self._watches)

    def drop_watches(self, count: int | None = None, path_regex: str = ".*") -> int:
        """Cut open watches mid-stream (all, or the ``count`` oldest whose path matches), as a restarting API
        server or a load balancer does; returns how many. Each is cut within 0.2 s."""
        pattern = re.compile(path_regex)
        with self._requests_lock:
            chosen = [w for w in self._watches if not w.dropped.is_set() and pattern.search(w.path)]
        chosen = chosen if count is None else chosen[:count]
        for watch in chosen:
            watch.dropped.set()
        return len(chosen)

    def request_counts(self, path_regex: str = ".*") -> dict[str, int]:
        """Requests so far by Kubernetes verb (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
        ``delete``, ``deletecollection``), of the paths matching ``path_regex``."""
        pattern = re.compile(path_regex)
        counts: dict[str, int] = {}
        for request in self.requests:
            if pattern.search(request.path):
                verb = request_verb(request)
                counts[verb] = counts.get(verb, 0) + 1
        return counts

    def wait_for_requests(self, verb: str, count: int = 1, path_regex: str = ".*", timeout: float = 30.0) -> int:
        """Block until ``count`` requests of a Kubernetes ``verb`` (as ``request_counts`` names them) to paths matching
        ``path_regex`` have arrived since the last ``reset_requests()``; returns how many. A request counts when it is
        received, before it is answered. ``TimeoutError`` after ``timeout`` seconds, so a client that never calls
        fails the test instead of hanging it."""
        pattern = re.compile(path_regex)

        def seen() -> int:
            return sum(1 for r in self._requests if pattern.search(r.path) and request_verb(r) == verb)

        with self._request_recorded:
            if not self._request_recorded.wait_for(lambda: seen() >= count, timeout):
                raise TimeoutError(f"{count} {verb} request(s) to {path_regex!r} expected within {timeout} s, "
                                   f"{seen()} seen")
            return seen()

    def compact(self) -> None:
        """Forget watch history: resuming from an older resourceVersion now gets 410 Gone."""
        self.cluster.store.compact()

    def _record(self, request: RecordedRequest) -> None:
        with self._request_recorded:
            self._requests.append(request)
            self._request_recorded.notify_all()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._requests_lock:
            return list(self._requests)

    def reset_requests(self) -> None:
        with self._requests_lock:
            self._requests.clear()

    # ------------------------------------------------------------ discovery documents

    def _group_versions(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for rt in self.cluster.types():
            if rt.group:
                versions = groups.setdefault(rt.group, [])
                for version in rt.versions:
                    if version not in versions:
                        versions.append(version)
        return groups

    def _group(self, group: str) -> dict | None:
        versions = self._group_versions().get(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries,
                "preferredVersion": entries[0]}

    def _group_list(self) -> dict:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [self._group(g) for g in sorted(self._group_versions())]}

    def _resource_list(self, group: str, version: str) -> dict | None:
        types = [rt for rt in self.cluster.types() if rt.group == group and version in rt.versions]
        if not types:
            return None
        resources = []
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        for rt in types:
            entry: dict[str, Any] = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                                     "kind": rt.kind, "verbs": verbs}
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            resources.append(entry)
            for sub in rt.subresources:
                sub_kind, sub_verbs = rt.kind, ["get", "patch", "update"]
                if sub == "log":
                    sub_verbs = ["get"]
                elif sub in ("exec", "attach", "portforward"):
                    sub_kind, sub_verbs = {"exec": "PodExecOptions", "attach": "PodAttachOptions",
                                           "portforward": "PodPortForwardOptions"}[sub], ["create", "get"]
                elif sub in ("binding", "eviction"):
                    sub_kind, sub_verbs = {"binding": "Binding", "eviction": "Eviction"}[sub], ["create"]
                elif sub == "finalize":
                    sub_verbs = ["update"]
                resources.append({"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                  "kind": sub_kind, "verbs": sub_verbs})
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
