"""A real Kubernetes node beside the real control plane: containerd, runc, the CNI bridge, a local registry, the
endpoint controllers, a DNS stand-in and a real kubelet (v1.20.2), so that a job's replicas run as containers.

The binaries come from ``scripts/build-kube-node.sh`` (kubelet, pause) and Debian's packages; the images from
``scripts/build-kube-node-images.sh``, pushed to a registry on 127.0.0.1:5000 whose storage is cached beside them.
Everything the node writes lives in one temporary directory, but for what the kubelet and containerd put on the
host at fixed places, which ``stop()`` undoes: ``/var/log/pods`` (and ``/var/log/containers``), ``/run/netns``
(containerd makes it a mount), the CNI cache, the pods' network namespaces, veths and the bridge, the ``kubepods``
and ``k8s.io`` cgroups, and the three kernel settings the kubelet changes with no way to opt out.

Addresses: pods in 198.18.0.0/24 on the bridge ``adnode0``, whose host address 198.18.0.1 is the node's IP (a
kubelet refuses a loopback one), where the DNS stand-in listens and the kubelet serves; Services in 198.19.0.0/16.
No masquerade and no default route: the pods reach each other and the host, nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml

from tests.kube_control_plane.control_plane import ROOT, ControlPlane, Process, free_port, wait_for
from tests.kube_control_plane.control_plane import bin_dir as plane_bin_dir
from tests.kube_control_plane.custom_jobs import custom_job_kinds

NODE_BUILD = ROOT / "scripts" / "build-kube-node.sh"
IMAGES_BUILD = ROOT / "scripts" / "build-kube-node-images.sh"
NODE_NAME = "airflow-distributed-node"
NODE_USER = f"system:node:{NODE_NAME}"
BRIDGE = "adnode0"
POD_SUBNET = "198.18.0.0/24"
NODE_IP = "198.18.0.1"
SERVICE_CIDR = "198.19.0.0/16"
REGISTRY = "127.0.0.1:5000"
#: What the kubelet sets at its start (for its memory accounting and to reboot on a kernel panic); restored.
KERNEL_SETTINGS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops")
#: Host paths the kubelet, containerd or the CNI plugins create at fixed places: removed if they were not there.
HOST_PATHS = ("/var/log/pods", "/var/log/containers", "/run/netns", "/var/lib/cni", "/run/containerd",
              "/var/lib/kubelet")
CGROUP_ROOTS = ("kubepods", "k8s.io")
PACKAGES_BINARIES = ("containerd", "runc", "docker-registry", "skopeo", "umoci", "debootstrap", "ip", "ctr")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-distributed"
#: One real node per machine: the bridge, the registry's port and the kubelet's host paths are the machine's.
LOCK = CACHE / "kube-node.lock"
REGISTRY_STORAGE = CACHE / "kube-node-images" / "registry"


def bin_dir() -> Path:
    out = subprocess.run(["bash", str(NODE_BUILD), "--print-bin-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def missing() -> str | None:
    """Why no real node can be had here (to skip with), or ``None``."""
    if os.geteuid() != 0:
        return "not root (a kubelet, containerd and network namespaces need root)"
    where = bin_dir()
    absent = [name for name in ("kubelet", "pause") if not (where / name).is_file()]
    absent += [name for name in PACKAGES_BINARIES if shutil.which(name) is None]
    if absent:
        return f"no {', '.join(absent)}: run `make kube` (scripts/build-kube-node.sh)"
    if not Path("/usr/lib/cni/bridge").is_file():
        return "no CNI plugins in /usr/lib/cni: run `make kube` (containernetworking-plugins)"
    return None


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def pki(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a client certificate signed by it, of a ``system:masters`` user: how the API server is known to the
    kubelet when it proxies logs and exec. Returns (CA, client certificate, client key)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    cert, key, request = directory / "client.crt", directory / "client.key", directory / "client.csr"
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
        "-days", "2", "-subj", "/CN=airflow-distributed-kubelet-clients")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(request),
        "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    run("openssl", "x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "2")
    return ca, cert, key


@dataclass
class RealNode:
    """Start with ``start()``; ``images`` names the images the registry serves (``pause``, ``busybox``,
    ``trainer``) by their reference. ``stop()`` ends everything started here and undoes what it left on the host."""

    control_plane: ControlPlane = field(init=False)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kube-node-")))
    processes: list[Process] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)
    kernel_settings: dict[str, str] = field(default_factory=dict)
    created_paths: list[str] = field(default_factory=list)
    netns_before: set[str] = field(default_factory=set)
    cgroups_before: set[Path] = field(default_factory=set)
    bridge_created: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    _lock: IO | None = None

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd.sock"

    @property
    def kubelet_clients(self) -> Path:
        return self.workdir / "kubelet-clients"

    # ------------------------------------------------------------ lifecycle

    def control_plane_to_join(self) -> ControlPlane:
        """A control plane (to start) the node can join: the kubelet's user, Services in the node's range, and the
        client certificate the API server shows the kubelet to read logs and exec."""
        _, cert, key = pki(self.kubelet_clients)
        return ControlPlane(
            service_cidr=SERVICE_CIDR,
            users={NODE_USER: "system:nodes"},
            apiserver_args=("--kubelet-client-certificate", str(cert), "--kubelet-client-key", str(key)),
            # The kubeflow and trainjob backends' kinds, whose stand-in controllers make pods the node runs.
            **custom_job_kinds(),
        )

    def start(self, control_plane: ControlPlane) -> RealNode:
        self.control_plane = control_plane
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        self._lock = LOCK.open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise RuntimeError(f"another test session holds the machine's real node ({LOCK})") from None
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        began = time.monotonic()
        self._record_host()
        self._bridge()
        self._registry()
        self.timings["images"] = self._push_images()
        self._containerd()
        self.timings["pull"] = self._pull_images()
        self._endpoint_controllers()
        self._dns()
        self._kubelet()
        self.timings["ready"] = time.monotonic() - began

    def _record_host(self) -> None:
        for name in KERNEL_SETTINGS:
            self.kernel_settings[name] = run("sysctl", "-n", name).stdout.strip()
        self.created_paths = [path for path in HOST_PATHS if not os.path.exists(path)]
        self.netns_before = set(self._netns())
        self.cgroups_before = set(self._cgroups())

    @staticmethod
    def _netns() -> list[str]:
        return [line.split()[0] for line in run("ip", "netns", "list", check=False).stdout.splitlines() if line]

    @staticmethod
    def _cgroups() -> list[Path]:
        return [Path("/sys/fs/cgroup") / hierarchy / top for hierarchy in os.listdir("/sys/fs/cgroup")
                for top in CGROUP_ROOTS if (Path("/sys/fs/cgroup") / hierarchy / top).is_dir()]

    def _bridge(self) -> None:
        # Made here, not by the CNI plugin at the first pod, so that the DNS stand-in and the kubelet can bind
        # the node's address from the start.
        if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            raise RuntimeError(f"a bridge {BRIDGE} already exists: a node of an earlier run was not stopped")
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        self.bridge_created = True
        run("ip", "addr", "add", f"{NODE_IP}/{POD_SUBNET.split('/')[1]}", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")

    def _registry(self) -> None:
        REGISTRY_STORAGE.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "registry.yml"
        config.write_text(yaml.safe_dump({
            "version": 0.1, "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(REGISTRY_STORAGE)}},
            "http": {"addr": REGISTRY},
        }))
        self._run("registry", ["docker-registry", "serve", str(config)])

        def answers() -> bool:
            self._check_alive()
            try:
                with urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                return False

        wait_for(answers, 30, f"the registry on {REGISTRY}", interval=0.2)

    def _push_images(self, *frameworks: str) -> float:
        began = time.monotonic()
        command = ["nice", "-n", "10", "bash", str(IMAGES_BUILD), "--push", REGISTRY]
        for framework in frameworks:
            command += ["--with", framework]
        out = subprocess.run(command, check=False, capture_output=True, text=True,
                             env={**os.environ, "PYTHON": sys.executable})
        if out.returncode != 0:
            raise RuntimeError(f"building the node's images failed:\n{out.stderr[-4000:]}")
        self.images.update(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
        return time.monotonic() - began

    def framework_image(self, framework: str) -> str:
        """The reference of ``trainer-<framework>`` (tensorflow, jax, xgboost), built and pushed at the first ask:
        hundreds of megabytes each, which only the tests that train that framework pay for."""
        name = f"trainer-{framework}"
        if name not in self.images:
            self.timings[name] = self._push_images(framework)
        return self.images[name]

    def _pull_images(self) -> float:
        """Pulls the images every session's pods run into containerd before the kubelet starts: a pod the first job
        deletes while the kubelet still pulls its image for it (the kubelet pulls one image at a time) took 50-100
        s to go; pulled here, the first job's pods start as fast as every later job's."""
        began = time.monotonic()
        for name in ("pause", "busybox", "trainer"):
            pulled = self._ctr("images", "pull", "--plain-http", self.images[name])
            if pulled.returncode != 0:
                raise RuntimeError(f"pulling {self.images[name]} into the node's containerd failed:\n"
                                   f"{pulled.stderr[-2000:]}")
        return time.monotonic() - began

    def _containerd(self) -> None:
        certs = self.workdir / "containerd" / "certs.d" / REGISTRY
        certs.mkdir(parents=True)
        (certs / "hosts.toml").write_text(
            f'server = "http://{REGISTRY}"\n[host."http://{REGISTRY}"]\n  capabilities = ["pull", "resolve"]\n')
        cni = self.workdir / "cni"
        (cni / "net.d").mkdir(parents=True)
        (cni / "net.d" / "10-airflow-distributed.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "airflow-distributed",
            # No ipMasq and no default route: a pod reaches the other pods and the host, nothing else.
            "plugins": [{"type": "bridge", "bridge": BRIDGE, "isGateway": False, "ipMasq": False,
                         "hairpinMode": True,
                         "ipam": {"type": "host-local", "dataDir": str(cni / "ipam"),
                                  "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]]}}],
        }))
        cri = '"io.containerd.grpc.v1.cri"'
        config = self.workdir / "containerd.toml"
        config.write_text(f"""version = 2
root = "{self.workdir / 'containerd' / 'root'}"
state = "{self.workdir / 'containerd' / 'state'}"
[grpc]
  address = "{self.socket}"
[plugins.{cri}]
  sandbox_image = "{self.images['pause']}"
  stream_server_address = "127.0.0.1"
  # This kind of VM lacks CAP_SYS_RESOURCE: nothing may lower an oom_score_adj, and every sandbox (-998) would fail
  # to start (runc: "can't get final child's PID from pipe: EOF"). Clamped to containerd's own instead.
  restrict_oom_score_adj = true
  [plugins.{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins.{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins.{cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni / 'net.d'}"
  [plugins.{cri}.registry]
    config_path = "{self.workdir / 'containerd' / 'certs.d'}"
""")
        self._run("containerd", ["containerd", "--config", str(config)])
        wait_for(lambda: self._check_alive() or run("ctr", "-a", str(self.socket), "version", check=False)
                 .returncode == 0, 30, "containerd", interval=0.2)

    def _endpoint_controllers(self) -> None:
        # The control plane's controller-manager runs without them; headless Services need their Endpoints.
        plane = self.control_plane
        self._run("endpoint-controllers", [
            str(plane_bin_dir() / "kube-controller-manager"),
            "--kubeconfig", str(plane.workdir / "kcm.kubeconfig"),
            "--port", "0", "--secure-port", "0", "--leader-elect=false",
            "--controllers", "endpoint,endpointslice", "--use-service-account-credentials",
        ])

    def _dns(self) -> None:
        token = self.workdir / "dns.token"
        token.write_text(self.control_plane.tokens["admin"])
        self._run("dns", [sys.executable, "-m", "tests.kube_node.dns", "--server", self.control_plane.url,
                          "--token-file", str(token), "--ca-file", str(self.control_plane.ca_file),
                          "--listen", NODE_IP], cwd=ROOT)
        wait_for(lambda: self._check_alive() or "serving" in self._output("dns"), 30, "the DNS stand-in",
                 interval=0.2)

    def _kubelet(self) -> None:
        plane = self.control_plane
        plane.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": "airflow-distributed-node"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": NODE_USER}],
        })
        kubeconfig = plane.kubeconfig(self.workdir / "kubelet.kubeconfig", plane.tokens[NODE_USER])
        resolv = self.workdir / "resolv.conf"
        resolv.write_text(f"nameserver {NODE_IP}\n")
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": NODE_IP, "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            # Only the API server (its client certificate) may ask the kubelet for logs and exec.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.kubelet_clients / "ca.crt")}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs", "failSwapOn": False,
            "clusterDomain": "cluster.local", "clusterDNS": [NODE_IP], "resolvConf": str(resolv),
            "makeIPTablesUtilChains": False, "serializeImagePulls": False,
            # The disk is shared with other work: evict on real trouble only, never collect the images.
            "evictionHard": {"memory.available": "200Mi", "nodefs.available": "2%", "imagefs.available": "2%",
                             "nodefs.inodesFree": "2%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "nodeStatusUpdateFrequency": "5s",
            # A memory-backed emptyDir's tmpfs sized to its sizeLimit (the pods' /dev/shm), as every kubelet since
            # 1.22 does by default; this 1.20 kubelet has it behind its alpha gate.
            "featureGates": {"SizeMemoryBackedVolumes": True},
        }))
        self._run("kubelet", [
            str(bin_dir() / "kubelet"), "--config", str(config), "--kubeconfig", kubeconfig,
            "--container-runtime", "remote", "--container-runtime-endpoint", f"unix://{self.socket}",
            "--hostname-override", NODE_NAME, "--node-ip", NODE_IP, "--root-dir", str(self.workdir / "kubelet"),
            "--cert-dir", str(self.workdir / "kubelet-pki"), "--volume-plugin-dir", str(self.workdir / "plugins"),
            "--node-labels", "airflow-distributed/real-node=true", "--logtostderr", "--v", "1",
        ])

        def ready() -> bool:
            self._check_alive()
            node = plane.get(f"/api/v1/nodes/{NODE_NAME}")
            if node is None or node["spec"].get("taints"):
                return False
            return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

        wait_for(ready, 120, f"node {NODE_NAME} Ready and untainted", interval=0.5)

    def stop(self) -> None:
        """Everything started here ended by its pid, and the host as it was; errors of one step do not keep the
        others from running."""
        steps = [self._stop_containers, self._stop_processes, self._kill_shims, self._unmount, self._remove_network,
                 self._remove_cgroups, self._restore_host]
        for step in steps:
            try:
                step()
            except Exception as error:  # the next steps must run whatever this one met
                print(f"real node clean-up: {step.__name__}: {error}", file=sys.stderr)
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def leftovers(self) -> list[str]:
        """What a stopped node left on the host (nothing, unless its clean-up missed something)."""
        left = [f"{name} = {now} (was {self.kernel_settings[name]})" for name in KERNEL_SETTINGS
                if name in self.kernel_settings
                and (now := run("sysctl", "-n", name).stdout.strip()) != self.kernel_settings[name]]
        left += [f"path {path}" for path in self.created_paths if os.path.exists(path)]
        left += [f"network namespace {ns}" for ns in set(self._netns()) - self.netns_before]
        left += [f"cgroup {top}" for top in set(self._cgroups()) - self.cgroups_before]
        if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
            left.append(f"bridge {BRIDGE}")
        left += [f"process {p.name}" for p in self.processes if p.popen.poll() is None]
        mounts = Path("/proc/self/mountinfo").read_text()
        left += [f"mount {line.split()[4]}" for line in mounts.splitlines() if str(self.workdir) in line.split()[4]]
        return left

    def _alive(self, name: str) -> bool:
        return any(p.name == name and p.popen.poll() is None for p in self.processes)

    def _ctr(self, *argv: str) -> subprocess.CompletedProcess:
        return run("ctr", "-a", str(self.socket), "-n", "k8s.io", *argv, check=False)

    def _stop_containers(self) -> None:
        if not self._alive("containerd"):
            return
        if self._alive("kubelet") and getattr(self, "control_plane", None) and self.control_plane.processes:
            # Through the API first, so that the kubelet tears each pod's network down through CNI.
            for pod in self.control_plane.request("GET", "/api/v1/pods")["items"]:
                meta = pod["metadata"]
                with contextlib.suppress(Exception):
                    self.control_plane.request(
                        "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                        {"gracePeriodSeconds": 0})
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: not self._ctr("tasks", "ls", "-q").stdout.strip(), 60, "the pods' containers")
        for task in self._ctr("tasks", "ls", "-q").stdout.split():
            self._ctr("tasks", "kill", "-s", "SIGKILL", task)
        for task in self._ctr("tasks", "ls", "-q").stdout.split():
            self._ctr("tasks", "delete", "-f", task)
        for container in self._ctr("containers", "ls", "-q").stdout.split():
            self._ctr("containers", "delete", container)

    def _stop_processes(self) -> None:
        for proc in reversed(self.processes):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
                try:
                    proc.popen.wait(15)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    proc.popen.wait(10)
        self.processes.clear()

    def _kill_shims(self) -> None:
        # A shim outlives containerd by design; ours name our socket in their arguments.
        address = f"-address {self.socket}"
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "containerd-shim" in argv and address in argv:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)

    def _unmount(self) -> None:
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(str(self.workdir))), reverse=True):
            run("umount", "-l", mount, check=False)

    def _remove_network(self) -> None:
        for namespace in set(self._netns()) - self.netns_before:
            run("ip", "netns", "delete", namespace, check=False)
        # Deleting the bridge takes the pods' veths left on it.
        if self.bridge_created:
            run("ip", "link", "delete", BRIDGE, check=False)
            self.bridge_created = False

    def _remove_cgroups(self) -> None:
        for top in set(self._cgroups()) - self.cgroups_before:
            for directory in sorted((d for d, _, _ in os.walk(top)), key=len, reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(directory)

    def _restore_host(self) -> None:
        for name, value in self.kernel_settings.items():
            run("sysctl", "-q", "-w", f"{name}={value}", check=False)
        for path in self.created_paths:
            # containerd makes /run/netns a mount of itself.
            while run("mountpoint", "-q", path, check=False).returncode == 0:
                run("umount", path, check=False)
            shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------ processes

    def _run(self, name: str, argv: list[str], cwd: Path | None = None) -> None:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=cwd or self.workdir, start_new_session=True,
                                     env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        self.processes.append(Process(name, popen, log))

    def _output(self, name: str) -> str:
        return next((p.output() for p in self.processes if p.name == name), "")

    def _check_alive(self) -> bool:
        for proc in self.processes:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.output()}")
        return False

    def logs(self, name: str, lines: int = 80) -> str:
        return next((p.output(lines) for p in self.processes if p.name == name), "")
