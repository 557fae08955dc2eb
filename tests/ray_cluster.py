"""A real local Ray cluster for the tests and the benchmark: ``ray start --head`` on 127.0.0.1, stopped afterwards.

Ray turns 127.0.0.1 into the machine's interface address unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is set
(``resolve_ip_for_localhost``): it is set for the cluster and for every client in this process, so that no traffic
leaves the loopback range. Every port is picked free; the cluster's files live in a temporary folder removed with it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
ROOT = Path(__file__).resolve().parent.parent


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class RayCluster:
    """One head node with ``cpus`` logical CPUs and the custom ``resources`` given (name to amount); ``address``
    is its dashboard (the Jobs API)."""

    def __init__(self, cpus: int = 4, resources: dict[str, float] | None = None) -> None:
        self.cpus = cpus
        self.resources = dict(resources or {})
        self.temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
        self.env = {**os.environ, **LOOPBACK_ONLY, "PYTHONPATH": str(ROOT)}
        self._ray = str(Path(sys.executable).with_name("ray"))
        self._pick_ports()

    def _pick_ports(self) -> None:
        gcs, dashboard, client, agent = _free_ports(4)
        self.gcs_port, self.dashboard_port, self.client_port, self.agent_port = gcs, dashboard, client, agent
        self.address = f"http://127.0.0.1:{dashboard}"

    def connection(self) -> str:
        """``ray_default`` as an Airflow connection in JSON."""
        return json.dumps({"conn_type": "ray", "host": "127.0.0.1", "port": self.dashboard_port})

    def start(self, attempts: int = 3) -> RayCluster:
        """``ray start``; a port picked free may be taken again before Ray binds it: then again, on new ports."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start()
            except subprocess.CalledProcessError as error:
                self._stop_processes()
                if attempt == attempts:
                    self.stop()  # its folder too: a failed __enter__ gets no __exit__
                    raise RuntimeError(f"ray start failed: {error.stderr.decode(errors='replace')[-2000:]}") from None
                self._pick_ports()
        raise AssertionError("unreachable")

    def _start(self) -> RayCluster:
        subprocess.run(
            [self._ray, "start", "--head", "--node-ip-address", "127.0.0.1", "--num-cpus", str(self.cpus),
             "--dashboard-host", "127.0.0.1", "--dashboard-port", str(self.dashboard_port),
             "--port", str(self.gcs_port), "--ray-client-server-port", str(self.client_port),
             "--dashboard-agent-listen-port", str(self.agent_port), "--temp-dir", self.temp_dir,
             "--disable-usage-stats", "--include-dashboard", "true",
             *(["--resources", json.dumps(self.resources)] if self.resources else [])],
            check=True, capture_output=True, env=self.env, timeout=120,
        )
        deadline = time.monotonic() + 60
        while True:  # the Jobs API answers a little after `ray start` returns
            try:
                with urllib.request.urlopen(f"{self.address}/api/jobs/", timeout=5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def get(self, route: str) -> object:
        with urllib.request.urlopen(f"{self.address}{route}", timeout=30) as response:
            return json.loads(response.read())

    def placement_groups(self, detail: bool = False) -> list[dict]:
        """Every placement group the cluster knows, with its ``state`` (``REMOVED`` once removed); with ``detail``,
        its ``bundles`` too."""
        answer = self.get(f"/api/v0/placement_groups?limit=1000&detail={str(detail).lower()}")
        return answer["data"]["result"]["result"]  # type: ignore[index]

    def actors(self) -> list[dict]:
        """Every actor the cluster knows, with its ``class_name`` and ``state`` (``DEAD`` once gone)."""
        answer = self.get("/api/v0/actors?limit=1000")
        return answer["data"]["result"]["result"]  # type: ignore[index]

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: those whose command line names its temporary folder or its GCS address."""
        marks = (self.temp_dir, f"127.0.0.1:{self.gcs_port}")
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(mark in part for part in proc.info["cmdline"] or () for mark in marks):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def family(self) -> list[psutil.Process]:
        """This cluster's processes and every descendant of them (Ray's workers rename themselves)."""
        found: dict[int, psutil.Process] = {}
        for proc in self.processes():
            found[proc.pid] = proc
            try:
                found.update((child.pid, child) for child in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return list(found.values())

    def stop(self) -> None:
        """Stop this cluster's processes only (``ray stop`` would stop every Ray cluster of the machine)."""
        self._stop_processes()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _stop_processes(self, grace: float = 3.0) -> None:
        """TERM the family, KILL what outlives ``grace``: most of it is gone within 2 s, but ``gcs_server`` and a
        helper of it outlast any wait (15 s measured) when their peers are TERMed at once, and nothing of a test
        cluster needs an orderly exit (its folder is removed after)."""
        family = self.family()
        for proc in family:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(family, timeout=grace)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=10)

    def __enter__(self) -> RayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
