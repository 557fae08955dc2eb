"""``backend="ray"`` I/O: the Ray Jobs API of a cluster, named by an Airflow connection (``ray_default``).

A job is submitted with Ray's ``JobSubmissionClient`` (it also uploads this package to the cluster, so the driver
runs the same code as the task); its state, log, stop and deletion go over the Jobs API's HTTP routes, so that
waiting needs no Ray client. The connection: ``host`` the dashboard's address (``http://ray-head``, or with its
scheme in ``schema``), ``port`` the dashboard's (8265 by default), extras ``headers`` (e.g. an ``Authorization``
header for a cluster behind a proxy) and ``verify`` (TLS verification, or a CA bundle's path).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

import requests
from airflow.sdk import BaseHook

import airflow_distributed
from airflow_distributed.jobstate.ray_poll import FINAL_STATES
from airflow_distributed.manifests.ray import liveness_key

#: What a request raises when it finds the Jobs API unreachable (a dropped or refused connection, a timeout): a wait
#: counts it against its outage budget (``jobstate.ray_poll``), never as a failure of the job.
UNREACHABLE = (requests.ConnectionError, requests.Timeout)
DEFAULT_PORT = 8265
#: Seconds one HTTP call to the Jobs API may take.
REQUEST_TIMEOUT = 30.0


class RayJobsApiError(RuntimeError):
    """The Jobs API answered with an error."""


def jobs_api_address(host: str | None, port: int | None, schema: str | None) -> str:
    """``scheme://host:port`` of the dashboard from a connection's fields."""
    if not host:
        raise ValueError("the Ray connection has no host: set it to the Ray dashboard's address (e.g. ray-head)")
    if "://" not in host:
        host = f"{schema or 'http'}://{host}"
    scheme, _, rest = host.partition("://")
    if ":" not in rest.split("/", 1)[0]:
        rest = rest.replace("/", f":{port or DEFAULT_PORT}/", 1) if "/" in rest else f"{rest}:{port or DEFAULT_PORT}"
    return f"{scheme}://{rest}".rstrip("/")


class RayJobHook(BaseHook):
    """Submit, watch, stop and delete Ray Jobs through a cluster's Jobs API.

    :param ray_conn_id: the Airflow connection of the cluster's dashboard.
    """

    conn_name_attr = "ray_conn_id"
    default_conn_name = "ray_default"
    conn_type = "ray"
    hook_name = "Ray (Jobs API)"

    def __init__(self, ray_conn_id: str = default_conn_name, *, sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__()
        self.ray_conn_id = ray_conn_id
        self._sleep = sleep

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login", "password"],
            "relabeling": {"host": "Ray dashboard address", "schema": "Scheme (http or https)"},
            "placeholders": {"host": "ray-head", "port": str(DEFAULT_PORT),
                             "extra": json.dumps({"headers": {"Authorization": "Bearer ..."}, "verify": True})},
        }

    @cached_property
    def _settings(self) -> tuple[str, dict[str, str], bool | str]:
        conn = self.get_connection(self.ray_conn_id)
        extra = conn.extra_dejson or {}
        headers = extra.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise ValueError(f"connection {self.ray_conn_id!r}: extra 'headers' must be a mapping of header names "
                             "to values")
        verify = extra.get("verify", True)
        return jobs_api_address(conn.host, conn.port, conn.schema), {str(k): str(v) for k, v in headers.items()}, verify

    @property
    def address(self) -> str:
        return self._settings[0]

    def _request(self, method: str, route: str, data: str | None = None) -> requests.Response:
        address, headers, verify = self._settings
        return requests.request(method, f"{address}{route}", data=data, headers=headers, verify=verify,
                                timeout=REQUEST_TIMEOUT)

    def submit(self, name: str, entrypoint: str, runtime_env: Mapping[str, Any],
               metadata: Mapping[str, str] | None = None, ship_package: bool = True) -> str:
        """Submit the job under submission id ``name``; with ``ship_package``, this package goes with it (Ray
        uploads it once per content)."""
        # Ray is the ``ray`` extra, and only submitting needs it: the triggerer and the connection form use this
        # hook where it may be missing.
        from ray.job_submission import JobSubmissionClient

        address, headers, verify = self._settings
        env = dict(runtime_env)
        if ship_package:
            env["py_modules"] = [os.path.dirname(airflow_distributed.__file__)]
            env["excludes"] = ["**/__pycache__/**"]
        client = JobSubmissionClient(address, headers=headers, verify=verify)
        return client.submit_job(entrypoint=entrypoint, submission_id=name, runtime_env=env,
                                 metadata=dict(metadata or {}))

    def info(self, name: str) -> dict[str, Any] | None:
        """The job's details (``status``, ``message``, ``start_time``, ``end_time``...), ``None`` if there is none."""
        response = self._request("GET", f"/api/jobs/{name}")
        if response.status_code == 404:
            return None
        _raise_for(response, f"reading Ray job {name}")
        return response.json()

    def logs(self, name: str) -> str:
        """The job's whole log (its driver's output)."""
        response = self._request("GET", f"/api/jobs/{name}/logs")
        if response.status_code == 404:
            return ""
        _raise_for(response, f"reading the log of Ray job {name}")
        return str(response.json().get("logs") or "")

    def stop(self, name: str) -> bool:
        """Ask the cluster to stop the job (SIGTERM to its driver, SIGKILL 3 s later); ``False`` if it had ended."""
        response = self._request("POST", f"/api/jobs/{name}/stop")
        if response.status_code == 404:
            return False
        _raise_for(response, f"stopping Ray job {name}")
        return bool(response.json().get("stopped"))

    def delete(self, name: str) -> None:
        """Forget a finished job (its submission id is then free for a new try)."""
        response = self._request("DELETE", f"/api/jobs/{name}")
        if response.status_code != 404:
            _raise_for(response, f"deleting Ray job {name}")

    def renew_liveness(self, name: str) -> None:
        """Tell job ``name``'s driver that its task still waits for it: write a new value to the job's liveness key.

        The key is written through the Jobs API's package upload route (``PUT /api/packages/gcs/<key>``), which
        stores it in the cluster's GCS key-value store, where the driver reads it: the one route of the Jobs API
        that writes, the one this task already uses to submit (same address, headers and TLS), and one small
        request per renewal. The value is this host's clock, only to differ from the last one: the driver measures
        time with its own clock."""
        protocol, _, package = liveness_key(name).partition("://")
        response = self._request("PUT", f"/api/packages/{protocol}/{package}", data=f"{time.time():.6f}")
        _raise_for(response, f"renewing the liveness of Ray job {name}")

    def wait_final(self, name: str, timeout: float, interval: float = 0.5) -> dict[str, Any] | None:
        """The job's details once in a final state, or as last seen after ``timeout``."""
        deadline = time.monotonic() + timeout
        info = self.info(name)
        while info is not None and info.get("status") not in FINAL_STATES and time.monotonic() < deadline:
            self._sleep(interval)
            info = self.info(name)
        return info


def renew_liveness(hook: RayJobHook, name: str, log: Any) -> None:
    """Renew job ``name``'s liveness; an answer of the Jobs API that refuses it is said, not taken for a failure of
    the job (the driver's grace outlasts several renewals). A dropped connection is the caller's to count."""
    try:
        hook.renew_liveness(name)
    except RayJobsApiError as error:
        log.warning("could not renew the liveness of Ray job %s: %s", name, error)


def _raise_for(response: requests.Response, doing: str) -> None:
    if response.status_code >= 400:
        raise RayJobsApiError(f"{doing}: the Ray Jobs API answered {response.status_code}: {response.text[:500]}")


__all__ = ["FINAL_STATES", "UNREACHABLE", "RayJobHook", "RayJobsApiError", "jobs_api_address", "renew_liveness"]
