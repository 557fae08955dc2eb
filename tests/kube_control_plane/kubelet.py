"""The test kubelet: a Node on the real API server whose pods the tests play, with no container runtime.

``KubeletNode`` registers a Node (cpu, memory, ``nvidia.com/gpu``), renews its Lease and Ready condition so that
kube-controller-manager lifts the ``node.kubernetes.io/not-ready`` taint, and finishes the two-phase deletion of
its pods. The pods the real scheduler binds to it are moved through ``pods/status`` by the test's script, with the
same calls as on the emulator (``run_pod``, ``set_pod_phase``, ``fail_pod``, ``append_log``...), so the players of
``tests/kubernetes_helpers.py`` drive either. Container logs are served over HTTPS at the node's
``status.daemonEndpoints.kubeletEndpoint`` port, the way the API server proxies ``pods/log`` to a kubelet, and so
is exec over the websocket channel protocol (``v4.channel.k8s.io``), as much of it as the XCom sidecar's reads take:
``cat`` of its output file (``write_file``) and the ``kill`` that ends the sidecar (``SIDECAR_STOP``).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import ssl
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from airflow.providers.cncf.kubernetes.utils.pod_manager import EMPTY_XCOM_RESULT
from airflow.providers.cncf.kubernetes.utils.xcom_sidecar import PodDefaults
from kubernetes import client

from airflow_distributed.jobstate.hang_watch import STACKS_COMMAND
from airflow_distributed.jobstate.log_cursor import parse_timestamp_ns
from airflow_distributed.manifests.kubernetes import SIDECAR_STOP
from tests.k8s_emulator import kubelet as kubelet_status
from tests.k8s_emulator.cluster import now_rfc3339
from tests.k8s_emulator.server import rfc3339nano
from tests.kube_control_plane.control_plane import ControlPlane, wait_for

CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "100Gi"}
HOST_IP = "127.0.0.1"
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
STDOUT, STDERR, ERROR = 1, 2, 3  # exec channels (0, stdin, is never read)
XCOM_FILE = f"{PodDefaults.XCOM_MOUNT_PATH}/return.json"


@dataclass
class ContainerLog:
    uid: str
    lines: list[tuple[int, str]] = field(default_factory=list)
    ended: bool = False


def micro_time() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1_000_000:06d}Z"


class KubeletNode:
    """One node. ``start()`` registers it and waits until it is schedulable; ``stop()`` ends its threads.

    :param heartbeat: seconds between Lease and node-status renewals.
    :param labels: the node's labels besides the well-known ones (what the DAGs' ``node_selector`` asks for).
    """

    def __init__(self, plane: ControlPlane, name: str = "node-1", capacity: dict[str, str] | None = None,
                 heartbeat: float = 2.0, reap_interval: float = 0.2, labels: dict[str, str] | None = None) -> None:
        self.plane, self.name, self.heartbeat, self.reap_interval = plane, name, heartbeat, reap_interval
        self.labels = dict(labels or {})
        self.capacity = dict(capacity or CAPACITY)
        self.errors: list[str] = []
        self._logs: dict[tuple[str, str, str], ContainerLog] = {}
        self._files: dict[tuple[str, str, str], str] = {}
        #: (namespace, pod, container, command) of every exec served
        self.execs: list[tuple[str, str, str, list[str]]] = []
        #: what a pod's processes print on the hang watchdog's exec (``hang_watch.STACKS_COMMAND``), by
        #: (namespace, pod): as ``tracking``'s faulthandler would, it goes to the container's log
        self.stacks: dict[tuple[str, str], str] = {}
        #: what a pod's containers exit with once its graceful deletion begins (the SIGTERM a real kubelet sends
        #: them), by (namespace, pod): reported as their exit before the kubelet finishes the deletion, as a real
        #: kubelet does. A pod not here is deleted without a report.
        self.exit_on_sigterm: dict[tuple[str, str], int] = {}
        self._ips: dict[str, str] = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 60.0) -> KubeletNode:
        self._serve()
        self.plane.request("POST", "/api/v1/nodes", self._node())
        for target in (self._beat, self._reap):
            thread = threading.Thread(target=self._loop, args=(target,), name=f"{self.name}-{target.__name__}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

        def schedulable() -> bool:
            node = self.plane.get(f"/api/v1/nodes/{self.name}") or {}
            return not any(t.get("effect") == "NoSchedule" for t in (node.get("spec") or {}).get("taints") or [])

        wait_for(schedulable, timeout, f"node {self.name} without a NoSchedule taint", interval=0.2)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(10)

    def _loop(self, step) -> None:
        interval = self.heartbeat if step == self._beat else self.reap_interval
        while not self._stop.is_set():
            try:
                step()
            except Exception as error:  # a control plane going away at the end of the session
                if not self._stop.is_set():
                    self.errors.append(f"{step.__name__}: {error!r}")
            self._stop.wait(interval)

    # ------------------------------------------------------------ the node object

    def _conditions(self) -> list[dict]:
        now = now_rfc3339()
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}
        others = [{"type": kind, "status": "False", "reason": f"KubeletHas{reason}", "lastHeartbeatTime": now,
                   "lastTransitionTime": now}
                  for kind, reason in (("MemoryPressure", "SufficientMemory"), ("DiskPressure", "NoDiskPressure"),
                                       ("PIDPressure", "SufficientPID"))]
        return [*others, ready]

    def _node(self) -> dict:
        assert self._server is not None
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": {**self.labels, "kubernetes.io/hostname": self.name,
                                                        "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
            "spec": {},
            "status": {
                "capacity": self.capacity, "allocatable": self.capacity, "conditions": self._conditions(),
                "addresses": [{"type": "InternalIP", "address": HOST_IP}, {"type": "Hostname", "address": self.name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self._server.server_address[1]}},
                "nodeInfo": {"machineID": self.name, "systemUUID": self.name, "bootID": self.name,
                             "kernelVersion": "6.1.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "containerRuntimeVersion": "containerd://1.6.20", "kubeletVersion": "v1.20.2",
                             "kubeProxyVersion": "v1.20.2", "operatingSystem": "linux", "architecture": "amd64"},
            },
        }

    def _beat(self) -> None:
        """Renew the Lease (what nodelifecycle reads) and the Ready condition."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        lease = self.plane.get(path)
        if lease is None:
            self.plane.request("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "metadata": {"name": self.name},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": micro_time()}})
        else:
            lease["spec"]["renewTime"] = micro_time()
            self.plane.request("PUT", path, lease)
        self.plane.request("PATCH", f"/api/v1/nodes/{self.name}/status", {"status": {"conditions": self._conditions()}},
                           content_type="application/strategic-merge-patch+json")

    def _reap(self) -> None:
        """Finish the deletion of this node's pods that have a deletionTimestamp (the API server's part is done)."""
        pods = self.plane.request("GET", "/api/v1/pods", query=[("fieldSelector", f"spec.nodeName={self.name}")])
        for pod in pods["items"]:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                code = self.exit_on_sigterm.pop((meta["namespace"], meta["name"]), None)
                if code is not None:
                    self._exit_on_sigterm(meta["namespace"], meta["name"], code)
                self._end_logs(meta["namespace"], meta["name"])
                try:
                    self.plane.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                       {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
                except client.ApiException as error:
                    if error.status not in (404, 409):
                        raise

    def _exit_on_sigterm(self, namespace: str, name: str, code: int) -> None:
        """Report a pod being deleted as its containers' exit with ``code`` (143: ended by the SIGTERM)."""
        try:
            self.fail_pod(namespace, name, exit_code=code)
        except KeyError:
            pass  # gone meanwhile: a real kubelet has nothing to report either
        except client.ApiException as error:
            if error.status != 404:
                raise

    # ------------------------------------------------------------ reading, as on the emulator

    def list(self, kind_plural: str, namespace: str | None = None, label_selector: str | None = None,
             group: str = "", version: str = "v1") -> list[dict]:
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        path = f"{base}/namespaces/{namespace}/{kind_plural}" if namespace else f"{base}/{kind_plural}"
        query = [("labelSelector", label_selector)] if label_selector else []
        return self.plane.request("GET", path, query=query)["items"]

    def get(self, kind_plural: str, namespace: str | None, name: str, group: str = "",
            version: str = "v1") -> dict | None:
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        return self.plane.get(f"{base}/namespaces/{namespace}/{kind_plural}/{name}" if namespace
                              else f"{base}/{kind_plural}/{name}")

    def create(self, kind_plural: str, namespace: str | None, body: dict, group: str = "", version: str = "v1") -> dict:
        """Create an object as the admin (what a stand-in controller of ``tests/integration`` does)."""
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        return self.plane.request("POST", f"{base}/namespaces/{namespace}/{kind_plural}" if namespace
                                  else f"{base}/{kind_plural}", body)

    def update_status(self, kind_plural: str, namespace: str | None, name: str, status: dict, group: str = "",
                      version: str = "v1") -> dict:
        """Replace an object's status through its status subresource, as its controller would."""
        while True:
            found = self.get(kind_plural, namespace, name, group, version)
            assert found is not None, f"no {kind_plural} {namespace}/{name}"
            base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
            try:
                return self.plane.request("PUT", f"{base}/namespaces/{namespace}/{kind_plural}/{name}/status",
                                          {**found, "status": status})
            except client.ApiException as error:
                if error.status != 409:
                    raise

    # ------------------------------------------------------------ playing pods, as on the emulator

    def bound(self, namespace: str, name: str, timeout: float = 30.0) -> dict:
        """The pod once the scheduler has bound it here."""
        def pod() -> dict | None:
            found = self.plane.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
            if found is None:
                raise KeyError(f'pods "{name}" not found in namespace "{namespace}"')
            node = (found.get("spec") or {}).get("nodeName")
            if node and node != self.name:
                raise AssertionError(f"pod {namespace}/{name} was bound to {node}, not {self.name}")
            return found if node else None

        return wait_for(pod, timeout, f"pod {namespace}/{name} bound to {self.name}", interval=0.05)

    def set_pod_phase(self, namespace: str, name: str, phase: str, *, container_states: dict[str, dict] | None = None,
                      reason: str | None = None, message: str | None = None,
                      conditions: list[dict] | None = None) -> dict:
        """Write the status a kubelet would for ``phase`` (see ``tests/k8s_emulator/kubelet.py``)."""
        while True:
            pod = self.bound(namespace, name)
            uid = pod["metadata"]["uid"]
            ip = self._ips.setdefault(uid, f"10.244.{len(self._ips) // 250}.{len(self._ips) % 250 + 2}")
            status = kubelet_status.pod_status(pod, phase, now=now_rfc3339(), pod_ip=ip, host_ip=HOST_IP,
                                               container_states=container_states, reason=reason, message=message,
                                               conditions=conditions)
            try:
                updated = self.plane.request("PUT", f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                                             {**pod, "status": status})
            except client.ApiException as error:
                if error.status == 409:
                    continue  # the pod changed meanwhile (the scheduler, a deletion): write on the new one
                raise
            break
        for entry in status.get("containerStatuses") or []:
            if "terminated" in entry["state"]:
                self._log(namespace, name, entry["name"], uid).ended = True
        with self._changed:
            self._changed.notify_all()
        return updated

    def run_pod(self, namespace: str, name: str) -> dict:
        return self.set_pod_phase(namespace, name, "Running")

    def succeed_pod(self, namespace: str, name: str, message: str | None = None) -> dict:
        return self.set_pod_phase(namespace, name, "Succeeded",
                                  container_states=self._terminated(namespace, name, 0, "Completed", message))

    def fail_pod(self, namespace: str, name: str, exit_code: int = 1, reason: str = "Error",
                 message: str | None = None) -> dict:
        return self.set_pod_phase(namespace, name, "Failed",
                                  container_states=self._terminated(namespace, name, exit_code, reason, message))

    def _terminated(self, namespace: str, name: str, code: int, reason: str, message: str | None) -> dict:
        pod = self.bound(namespace, name)
        previous = {c["name"]: c for c in (pod.get("status") or {}).get("containerStatuses") or []}
        now = now_rfc3339()
        states = {}
        for container in pod["spec"]["containers"]:
            running = ((previous.get(container["name"]) or {}).get("state") or {}).get("running") or {}
            terminated = {"exitCode": code, "reason": reason, "startedAt": running.get("startedAt", now),
                          "finishedAt": now}
            if message is not None:
                terminated["message"] = message
            states[container["name"]] = {"terminated": terminated}
        return states

    def pending_pod(self, namespace: str, name: str, reason: str = "ErrImagePull", message: str | None = None) -> dict:
        """Keep a bound pod Pending with its containers waiting for ``reason`` (``ErrImagePull``,
        ``ImagePullBackOff``, ``CreateContainerConfigError``). Unschedulable is the real scheduler's to say."""
        if reason == "Unschedulable":
            raise ValueError("on the real control plane the scheduler marks pods Unschedulable: ask for more "
                             "than the node has instead")
        pod = self.bound(namespace, name)
        states = {}
        for container in pod["spec"]["containers"]:
            text = message or kubelet_status.pending_message(reason, container.get("image", ""), container["name"],
                                                             f"{namespace}/{name}")
            states[container["name"]] = {"waiting": {"reason": reason, **({"message": text} if text else {})}}
        return self.set_pod_phase(namespace, name, "Pending", container_states=states)

    # ------------------------------------------------------------ logs

    def _log(self, namespace: str, pod: str, container: str, uid: str) -> ContainerLog:
        key = (namespace, pod, container)
        log = self._logs.get(key)
        if log is None or log.uid != uid:  # a pod created again under the same name starts a new log
            log = self._logs[key] = ContainerLog(uid)
        return log

    def _end_logs(self, namespace: str, pod: str) -> None:
        with self._changed:
            for (ns, name, _), log in self._logs.items():
                if (ns, name) == (namespace, pod):
                    log.ended = True
            self._changed.notify_all()

    def append_log(self, namespace: str, pod: str, text: str, container: str | None = None, *,
                   at: float | None = None) -> None:
        """Append lines to a container's log, each stamped now (or at ``at``, seconds since the epoch)."""
        found = self.bound(namespace, pod)
        container = container or found["spec"]["containers"][0]["name"]
        with self._changed:
            log = self._log(namespace, pod, container, found["metadata"]["uid"])
            start = int(at * 1e9) if at is not None else max(time.time_ns(), log.lines[-1][0] + 1 if log.lines else 0)
            log.lines.extend((start + i, line) for i, line in enumerate(text.splitlines()))
            self._changed.notify_all()

    def _serve(self) -> None:
        workdir = self.plane.workdir / f"kubelet-{self.name}"
        workdir.mkdir(exist_ok=True)
        cert, key = workdir / "kubelet.crt", workdir / "kubelet.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        f"/CN={self.name}", "-addext", f"subjectAltName=IP:{HOST_IP}", "-keyout", str(key),
                        "-out", str(cert)], check=True, capture_output=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the end of a followed log is the end of the connection

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                query = urllib.parse.parse_qs(url.query)
                if len(parts) == 4 and parts[0] == "containerLogs":
                    node._serve_log(self, *parts[1:], query)
                elif len(parts) == 4 and parts[0] == "exec":
                    node._serve_exec(self, *parts[1:], query)
                else:
                    self.send_error(404, f"the test kubelet serves containerLogs and exec, not {url.path}")

        self._server = ThreadingHTTPServer((HOST_IP, 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True, do_handshake_on_connect=False)
        thread = threading.Thread(target=self._server.serve_forever, name=f"{self.name}-https", daemon=True)
        thread.start()

    def _serve_log(self, handler: BaseHTTPRequestHandler, namespace: str, pod: str, container: str,
                   query: dict[str, list[str]]) -> None:
        def option(name: str) -> str | None:
            return query.get(name, [None])[-1]

        follow = option("follow") in ("true", "1")
        timestamps = option("timestamps") in ("true", "1")
        tail = int(option("tailLines")) if option("tailLines") is not None else None  # type: ignore[arg-type]
        since = option("sinceTime")
        since_ns = parse_timestamp_ns(since) if since else None
        if option("sinceSeconds"):
            since_ns = time.time_ns() - int(option("sinceSeconds")) * 10**9  # type: ignore[arg-type]
        with self._changed:
            log = next((entry for (ns, name, cont), entry in self._logs.items() if (ns, name, cont)
                        == (namespace, pod, container)), None)
            lines = [line for line in (log.lines if log else []) if since_ns is None or line[0] >= since_ns]
        if tail is not None:
            lines = lines[-tail:] if tail else []
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()

        def write(batch: list[tuple[int, str]]) -> None:
            handler.wfile.write("".join((f"{rfc3339nano(ns)} " if timestamps else "") + text + "\n"
                                        for ns, text in batch).encode())
            handler.wfile.flush()

        if not follow and option("limitBytes"):  # as the kubelet does: the first limitBytes bytes, cut mid-line
            handler.wfile.write("".join((f"{rfc3339nano(ns)} " if timestamps else "") + text + "\n" for ns, text
                                        in lines).encode()[:int(option("limitBytes"))])  # type: ignore[arg-type]
            return
        write(lines)
        if not follow:
            return
        sent = len(log.lines) if log else 0
        while not self._stop.is_set():
            with self._changed:
                log = self._logs.get((namespace, pod, container), log)
                current = copy.copy(log.lines) if log else []
                ended = bool(log and log.ended)
                if len(current) == sent and not ended:
                    self._changed.wait(1.0)
                    continue
            write(current[sent:])
            sent = len(current)
            if ended:
                return

    # ------------------------------------------------------------ exec

    def write_file(self, namespace: str, pod: str, path: str, text: str) -> None:
        """What ``cat path`` in the pod shows (the XCom sidecar's output file: ``XCOM_FILE``)."""
        self._files[(namespace, pod, path)] = text

    def _serve_exec(self, handler: BaseHTTPRequestHandler, namespace: str, pod: str, container: str,
                    query: dict[str, list[str]]) -> None:
        key = handler.headers.get("Sec-WebSocket-Key")
        if not key or (handler.headers.get("Upgrade") or "").lower() != "websocket":
            handler.send_error(400, "the test kubelet serves exec over websockets only (no SPDY)")
            return
        offered = [p.strip() for p in (handler.headers.get("Sec-WebSocket-Protocol") or "").split(",") if p.strip()]
        protocol = "v4.channel.k8s.io" if "v4.channel.k8s.io" in offered else (offered[0] if offered else "")
        accept = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()
        handler.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             f"Sec-WebSocket-Accept: {accept}\r\n"
                             + (f"Sec-WebSocket-Protocol: {protocol}\r\n" if protocol else "") + "\r\n").encode())
        command = query.get("command", [])
        self.execs.append((namespace, pod, container, command))
        out, code = self._run(namespace, pod, container, command)
        if out:
            handler.wfile.write(_frame(bytes([STDOUT]) + out.encode()))
        status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        if code:
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                      "message": f"command terminated with non-zero exit code: exit status {code}",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        handler.wfile.write(_frame(bytes([ERROR]) + json.dumps(status).encode()))
        handler.wfile.write(_frame(b"\x03\xe8", opcode=0x8))  # close, normal
        handler.wfile.flush()
        handler.close_connection = True

    def _run(self, namespace: str, pod: str, container: str, command: list[str]) -> tuple[str, int]:
        """The XCom sidecar's two commands: reading its output file, and its stop (``SIDECAR_STOP``); and the
        hang watchdog's signal to the processes that imported ``tracking``, whose stacks (``stacks``) are logged."""
        if command == STACKS_COMMAND:
            text = self.stacks.get((namespace, pod))
            if text is not None:
                self.append_log(namespace, pod, text, container)
            return f"{int(text is not None)}\n", 0
        if command[:2] == ["/bin/sh", "-c"] and f"cat {XCOM_FILE}" in command[2]:
            return self._files.get((namespace, pod, XCOM_FILE)) or EMPTY_XCOM_RESULT + "\n", 0
        if command == SIDECAR_STOP:
            # The sidecar's shell (PID 1 of its container) ends; the kubelet reports it soon after, as a real one would.
            threading.Thread(target=self._sidecar_ended, args=(namespace, pod, container), daemon=True).start()
            return "", 0
        return "", 127

    def _sidecar_ended(self, namespace: str, pod: str, container: str) -> None:
        try:
            found = self.bound(namespace, pod)
        except KeyError:
            return  # the job was deleted meanwhile (its task went on at once): a pod gone has nothing to report
        states = {c["name"]: c["state"] for c in (found.get("status") or {}).get("containerStatuses") or []}
        now = now_rfc3339()
        started = (states.get(container) or {}).get("running", {}).get("startedAt", now)
        states[container] = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started,
                                            "finishedAt": now}}
        ended = [state.get("terminated") for state in states.values()]
        if all(ended):
            phase = "Succeeded" if all(t["exitCode"] == 0 for t in ended if t) else "Failed"
        else:
            phase = "Running"
        try:
            self.set_pod_phase(namespace, pod, phase, container_states=states)
        except KeyError:
            return  # deleted between the read and the write, as above
        except client.ApiException as error:
            if error.status != 404:
                self.errors.append(f"ending the sidecar of {namespace}/{pod}: {error!r}")
        except Exception as error:
            self.errors.append(f"ending the sidecar of {namespace}/{pod}: {error!r}")


def _frame(payload: bytes, opcode: int = 0x2) -> bytes:
    """One unmasked websocket frame (a server's), FIN set."""
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | opcode, size])
    elif size < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + size.to_bytes(8, "big")
    return head + payload
