"""A real Kubernetes control plane for the tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler.

The binaries come from ``scripts/build-kube-control-plane.sh`` (its cache, or ``$KUBE_CONTROL_PLANE_BIN``); etcd
from Debian's ``etcd-server``. Everything listens on 127.0.0.1 free ports and lives in one temporary directory:
the apiserver's self-signed certificate (``--cert-dir``), a static token file (the admin, the scheduler and the
controller-manager), the service-account key pair, the audit log of every request, each process's output.
``stop()`` ends each process it started, by its pid, and removes the directory.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes import config as kube_config

from tests.kubernetes_helpers import comes_to

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-kube-control-plane.sh"
BIN_ENV = "KUBE_CONTROL_PLANE_BIN"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: The controllers the tests rely on: owned objects deleted with their owner, namespaces emptied, the default
#: service account and its token made, a heartbeating node's not-ready taint lifted.
CONTROLLERS = ("garbagecollector", "namespace", "serviceaccount", "serviceaccount-token", "nodelifecycle")
SERVICE_CIDR = "10.96.0.0/16"
ADMIN = "admin"
#: The service account the task runs as, as in docs/rbac.yaml's bindings.
TASK_ACCOUNT = "airflow-worker"
#: What a job leaves in its namespace once cleaned up (``left``).
NOTHING: dict[str, list[str]] = {"services": [], "pods": [], "configmaps": [], "secrets": []}


def bin_dir() -> Path:
    """Where the build script puts (or has put) the binaries: the script owns the cache's layout."""
    if os.environ.get(BIN_ENV):
        return Path(os.environ[BIN_ENV])
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-bin-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def missing() -> str | None:
    """Why the control plane cannot start here (to skip with), or ``None``."""
    where = bin_dir()
    absent = [name for name in BINARIES if not (where / name).is_file()]
    if absent:
        return f"no {', '.join(absent)} in {where}: run `make kube` (scripts/build-kube-control-plane.sh)"
    if shutil.which("etcd") is None:
        return "no etcd on PATH: run `make kube` (it installs Debian's etcd-server)"
    return None


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork: the child only calls it
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies, so a killed run leaves no control plane behind."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def structural_schema(schema: dict) -> dict:
    """A JSON schema (``tests/data/trainjob``'s) as a CRD's structural ``openAPIV3Schema``: the object's own
    ``metadata`` left to the server; ``additionalProperties: false`` dropped (the server prunes unknown fields
    instead, and a structural schema may not say it); ``additionalProperties: true`` as preserved unknown fields;
    a number-or-string (a Quantity) as ``x-kubernetes-int-or-string``."""

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {k: convert(v) for k, v in node.items() if k not in ("additionalProperties", "anyOf")}
        extra = node.get("additionalProperties")
        if extra is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, dict) and "properties" not in node:
            out["additionalProperties"] = convert(extra)
        if "anyOf" in node:
            types = {branch.get("type") for branch in node["anyOf"]}
            assert types <= {"number", "integer", "string"}, f"no structural form for anyOf {types}"
            out.update({"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]})
        return out

    root = convert({k: v for k, v in schema.items() if not k.startswith("x-generated")})
    root["properties"]["metadata"] = {"type": "object"}
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1) -> Any:
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not within {timeout} s")
        time.sleep(interval)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def output(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ControlPlane:
    """Start with ``start()`` (or ``with``); ``admin`` is an ``ApiClient`` with every right.

    :param min_request_timeout: the apiserver's ``--min-request-timeout``: a watch sent without ``timeoutSeconds``
        is ended by the server after between this and twice this many seconds.
    :param progress_notify_interval: etcd's ``--experimental-watch-progress-notify-interval``, what lets quiet
        watches get bookmarks (with the ``EfficientWatchResumption`` gate).
    :param crds: ``(group, version, plural, kind)`` of custom resources to serve, installed before the
        controller-manager starts: its garbage collector finds a kind installed later only at its next discovery
        (every 30 s), so objects owned by one would outlive their owner until then.
    :param apiserver_args: more flags for kube-apiserver (e.g. ``--watch-cache-sizes``).
    :param schemas: the ``openAPIV3Schema`` of some of those kinds, by plural (``structural_schema`` makes it one
        the server takes); the others take any content.
    :param service_cidr: the Services' addresses (``--service-cluster-ip-range``).
    :param users: more users of the static token file, by name, each with its group (a real kubelet's
        ``system:node:<name>`` in ``system:nodes``); their tokens are in ``tokens``.
    """

    min_request_timeout: int = 1800
    progress_notify_interval: str = "5s"
    crds: tuple[tuple[str, str, str, str], ...] = ()
    schemas: dict[str, dict] = field(default_factory=dict)
    apiserver_args: tuple[str, ...] = ()
    service_cidr: str = SERVICE_CIDR
    users: dict[str, str] = field(default_factory=dict)
    etcd_url: str = ""
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kube-control-plane-")))
    processes: list[Process] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    port: int = 0

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        binaries = bin_dir()
        (self.workdir / "certs").mkdir(parents=True)
        self._keys()
        etcd_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._run("etcd", [
            "etcd", "--name", "default", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
            "--experimental-watch-progress-notify-interval", self.progress_notify_interval,
        ])
        self.port = free_port()
        policy = self.workdir / "audit-policy.yaml"
        # Metadata for every request: who, what, and the answer's code.
        policy.write_text(yaml.safe_dump({"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                                          "rules": [{"level": "Metadata"}]}))
        self._run("kube-apiserver", [
            str(binaries / "kube-apiserver"),
            "--etcd-servers", f"http://127.0.0.1:{etcd_port}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.port), "--insecure-port", "0",
            "--cert-dir", str(self.workdir / "certs"),
            "--token-auth-file", str(self.workdir / "tokens.csv"),
            "--authorization-mode", "RBAC",
            "--service-account-key-file", str(self.workdir / "sa.pub"),
            "--service-account-signing-key-file", str(self.workdir / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range", self.service_cidr,
            "--endpoint-reconciler-type", "none",
            "--feature-gates", "EfficientWatchResumption=true",
            "--kubelet-preferred-address-types", "InternalIP",
            "--audit-policy-file", str(policy), "--audit-log-path", str(self.audit_log),
            "--min-request-timeout", str(self.min_request_timeout),
            "--profiling=false", *self.apiserver_args,
        ])
        self._wait_ready()
        self.admin = self.api_client(self.kubeconfig(self.workdir / "admin.kubeconfig", self.tokens[ADMIN]))
        for crd in self.crds:
            self.install_crd(*crd, schema=self.schemas.get(crd[2]))
        self._run("kube-controller-manager", [
            str(binaries / "kube-controller-manager"),
            "--kubeconfig", self.kubeconfig(self.workdir / "kcm.kubeconfig",
                                            self.tokens["system:kube-controller-manager"]),
            "--port", "0", "--secure-port", "0", "--leader-elect=false",
            "--controllers", ",".join(CONTROLLERS), "--use-service-account-credentials",
            "--service-account-private-key-file", str(self.workdir / "sa.key"),
            "--root-ca-file", str(self.ca_file), "--node-monitor-period", "1s",
        ])
        self._run("kube-scheduler", [
            str(binaries / "kube-scheduler"),
            "--kubeconfig", self.kubeconfig(self.workdir / "scheduler.kubeconfig",
                                            self.tokens["system:kube-scheduler"]),
            "--port", "0", "--secure-port", "0", "--leader-elect=false",
        ])
        # The controllers are up once the default namespace has its service account and token.
        self.service_account_token("default", "default", timeout=60)

    def stop(self) -> None:
        """End every process started here, by pid (the last started first), then remove the directory."""
        for proc in reversed(self.processes):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
                try:
                    proc.popen.wait(10)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    proc.popen.wait(10)
        self.processes.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def check_alive(self) -> None:
        for proc in self.processes:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.output()}")

    def _run(self, name: str, argv: list[str]) -> None:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.workdir, start_new_session=True, preexec_fn=_die_with_parent)
        self.processes.append(Process(name, popen, log))

    def _keys(self) -> None:
        for user in (ADMIN, "system:kube-controller-manager", "system:kube-scheduler", *self.users):
            self.tokens[user] = secrets.token_hex(16)
        groups = {ADMIN: "system:masters", **self.users}
        (self.workdir / "tokens.csv").write_text("".join(
            f'{token},{user},{user},"{groups.get(user, "")}"\n' for user, token in self.tokens.items()))
        key = self.workdir / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(self.workdir / "sa.pub")],
                       check=True, capture_output=True)

    def _wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            self.check_alive()
            if not self.ca_file.is_file():
                return False
            try:
                context = ssl.create_default_context(cafile=str(self.ca_file))
            except ssl.SSLError:  # the server is still writing its certificate
                return False
            request = urllib.request.Request(f"{self.url}/readyz",
                                             headers={"Authorization": f"Bearer {self.tokens[ADMIN]}"})
            try:
                with urllib.request.urlopen(request, context=context, timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                return False

        wait_for(ready, timeout, "kube-apiserver's /readyz", interval=0.2)

    # ------------------------------------------------------------ where things are

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The apiserver's self-signed certificate and the CA that signed it."""
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def kubeconfig(self, path: Path, token: str, namespace: str = "default") -> str:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": "test", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}],
        }))
        return str(path)

    @staticmethod
    def api_client(kubeconfig: str) -> client.ApiClient:
        configuration = client.Configuration()
        kube_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return client.ApiClient(configuration)

    # ------------------------------------------------------------ admin requests

    def request(self, method: str, path: str, body: Any = None, query: list | None = None,
                content_type: str = "application/json") -> Any:
        """One request as the admin; the answer's JSON (``None`` for an empty one)."""
        answer = self.admin.call_api(path, method, query_params=query or [], body=body,
                                     header_params={"Content-Type": content_type, "Accept": "application/json"},
                                     auth_settings=["BearerToken"], _preload_content=False,
                                     _return_http_data_only=True)
        data = answer.data
        return json.loads(data) if data else None

    def get(self, path: str) -> Any:
        try:
            return self.request("GET", path)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def service_account_token(self, namespace: str, name: str, timeout: float = 30.0) -> str:
        """The token of a service account, once the token controller has made its secret."""
        def token() -> str | None:
            self.check_alive()
            account = self.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")
            for ref in (account or {}).get("secrets") or []:
                secret = self.get(f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")
                data = (secret or {}).get("data") or {}
                if "token" in data:
                    return base64.b64decode(data["token"]).decode()
            return None

        return wait_for(token, timeout, f"the token of service account {namespace}/{name}", interval=0.1)

    def create_namespace(self, name: str, timeout: float = 120.0) -> None:
        """A namespace that pods can be created in: its ``default`` service account and token exist. One of that
        name an earlier test deleted (another module's DAG of the same namespace) is first let go by the namespace
        controller."""
        wait_for(lambda: self.get(f"/api/v1/namespaces/{name}") is None, timeout,
                 f"namespace {name} deleted by an earlier test to be gone", interval=0.2)
        self.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        self.service_account_token(name, "default")

    def delete_namespace(self, name: str) -> None:
        try:
            self.request("DELETE", f"/api/v1/namespaces/{name}")
        except client.ApiException as error:
            if error.status != 404:
                raise

    def bind_role(self, namespace: str, role: dict | list[dict], account: str) -> str:
        """Create the Role(s) in the namespace, a service account bound to exactly them, and a kubeconfig that
        talks as that account; returns the kubeconfig's path."""
        self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": account}})
        for each in role if isinstance(role, list) else [role]:
            name = each["metadata"]["name"]
            self.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
                         {**each, "metadata": {"name": name}})
            self.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
                "metadata": {"name": f"{name}-{account}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            })
        token = self.service_account_token(namespace, account)
        return self.kubeconfig(self.workdir / f"{namespace}-{account}.kubeconfig", token, namespace)

    def install_crd(self, group: str, version: str, plural: str, kind: str, schema: dict | None = None) -> None:
        """A namespaced custom resource with a status subresource, once the server serves it: with ``schema``
        (made structural), or any content (the stand-in controllers' kinds)."""
        open_schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        name = f"{plural}.{group}"
        if self.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") is None:
            self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": name},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
                         "versions": [{"name": version, "served": True, "storage": True,
                                       "subresources": {"status": {}},
                                       "schema": {"openAPIV3Schema": structural_schema(schema) if schema
                                                  else open_schema}}]},
            })

        def served() -> bool:
            try:
                found = self.request("GET", f"/apis/{group}/{version}")
            except client.ApiException:
                return False
            return any(r["name"] == plural for r in found["resources"])

        wait_for(served, 30, f"the custom resource {name}", interval=0.1)

    def left(self, namespace: str) -> dict[str, list[str]]:
        """Names of what is left in a namespace, per kind of ``NOTHING``: its service-account tokens aside."""
        found = {}
        for plural in NOTHING:
            items = self.request("GET", f"/api/v1/namespaces/{namespace}/{plural}")["items"]
            found[plural] = sorted(o["metadata"]["name"] for o in items
                                   if o.get("type") != "kubernetes.io/service-account-token")
        return found

    # ------------------------------------------------------------ etcd

    def _etcd(self, call: str, body: dict) -> dict:
        """One call of etcd's v3 JSON gateway."""
        request = urllib.request.Request(f"{self.etcd_url}/v3/{call}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def compact_etcd(self) -> int:
        """Compact etcd up to its current revision (what the apiserver does every 5 minutes): a watch from an
        older resourceVersion is then answered 410 Gone. Returns the revision."""
        revision = int(self._etcd("kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
        self._etcd("kv/compaction", {"revision": revision, "physical": True})
        return revision

    # ------------------------------------------------------------ audit

    def audit_events(self, username: str | None = None) -> Iterator[dict]:
        """The audit log's events (one per request stage), of one user if given.

        The server appends to the log while it is read: a last line without its newline is still being written, and
        is left for the next read."""
        if not self.audit_log.is_file():
            return
        with self.audit_log.open() as lines:
            for line in lines:
                if not line.endswith("\n"):
                    return
                event = json.loads(line)
                if username is None or (event.get("user") or {}).get("username") == username:
                    yield event

    def assert_clean(self, namespace: str, username: str, timeout: float = 60) -> None:
        """What a job leaves: nothing in ``namespace`` within ``timeout`` (the garbage collector and the kubelet
        finish deletions on their own schedule), and no request of ``username`` refused by RBAC."""
        comes_to(lambda: self.left(namespace), NOTHING, timeout=timeout)
        assert self.refused(username) == []

    def refused(self, username: str) -> list[str]:
        """``verb URI -> code`` of the requests of ``username`` the server refused (401/403)."""
        return sorted({f"{e['verb']} {e['requestURI']} -> {e['responseStatus']['code']}"
                       for e in self.audit_events(username)
                       if (e.get("responseStatus") or {}).get("code") in (401, 403)})
