"""What a job cost, from requests and start and end times (``jobstate.usage``), pure."""

from __future__ import annotations

import json

from airflow_distributed.jobstate.pod_state import pod_essentials
from airflow_distributed.jobstate.usage import ReplicaRun, Requests, add_usage, job_usage, pod_requests, pod_run
from airflow_distributed.spec import load_spec


def _pod(start: str | None, ends: list[str | None], requests: dict, limits: dict | None = None) -> dict:
    statuses = [{"name": f"c{i}", "state": {"terminated": {"startedAt": start, "finishedAt": end}} if end else
                 {"running": {"startedAt": start}}} for i, end in enumerate(ends)]
    return {"spec": {"containers": [{"name": "base", "resources": {"requests": requests, "limits": limits or {}}},
                                    {"name": "sidecar", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"startTime": start, "containerStatuses": statuses}}


def test_a_pod_costs_its_containers_requests_from_its_start_to_its_last_container_end():
    pod = _pod("2026-01-01T00:00:00Z", ["2026-01-01T00:01:00Z", "2026-01-01T00:01:40Z"],
               {"cpu": "1500m", "memory": "2Gi"}, {"nvidia.com/gpu": "2", "memory": "4Gi"})
    run = pod_run("m", pod, now=0.0)
    assert run.requests == Requests(cpu=1.6, memory_gib=2.0, gpu=2.0)
    assert run.ended - run.started == 100.0
    usage = job_usage([run], wall_seconds=120.0)
    assert usage["replicas"]["m"] == {"runs": 1, "cpu": 1.6, "memory_gib": 2.0, "gpu": 2.0, "processes": 1,
                                      "running_seconds": 100.0, "cpu_seconds": 160.0, "memory_gib_seconds": 200.0,
                                      "gpu_seconds": 200.0, "process_seconds": 100.0}
    assert (usage["wall_seconds"], usage["tries"], usage["cpu_seconds"]) == (120.0, 1, 160.0)


def test_a_pod_still_running_counts_to_now_and_one_never_started_counts_nothing():
    running = pod_run("w", _pod("2026-01-01T00:00:00Z", ["2026-01-01T00:00:10Z", None], {"cpu": "1"}),
                      now=pod_run("x", _pod("2026-01-01T00:00:30Z", ["2026-01-01T00:00:30Z"], {}), 0).started)
    assert running.ended - running.started == 30.0
    pending = pod_run("p", {"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}, "status": {}}, 5.0)
    usage = job_usage([running, pending], 40.0)
    assert usage["replicas"]["p"]["runs"] == 0 and usage["replicas"]["p"]["cpu_seconds"] == 0.0
    assert usage["cpu_seconds"] == 1.1 * 30


def test_a_replica_of_several_processes_counts_each_of_them_and_each_of_its_gpus():
    # A pod as the API server returns it, then as a waiter keeps it (``pod_essentials``): 4 processes on 4 GPUs.
    pod = _pod("2026-01-01T00:00:00Z", ["2026-01-01T00:01:40Z", "2026-01-01T00:01:40Z"],
               {"cpu": "8", "nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "4"})
    pod["spec"]["containers"][0]["env"] = [{"name": "MASTER_ADDR", "value": "m"},
                                           {"name": "PET_NPROC_PER_NODE", "value": "4"}]
    for seen in (pod, pod_essentials(pod)):
        usage = add_usage(job_usage([pod_run("m", seen, now=0.0)], 100.0),
                          job_usage([pod_run("m", seen, now=0.0), pod_run("w", pod, now=0.0)], 100.0))
        assert usage["replicas"]["m"]["processes"] == 4
        assert (usage["replicas"]["m"]["gpu_seconds"], usage["replicas"]["m"]["process_seconds"]) == (800.0, 800.0)
        assert (usage["running_seconds"], usage["gpu_seconds"], usage["process_seconds"]) == (300.0, 1200.0, 1200.0)
    assert pod_essentials(pod)["spec"]["containers"][0]["env"] == [{"name": "PET_NPROC_PER_NODE", "value": "4"}]
    # a replica that says nothing of its processes runs one
    assert job_usage([pod_run("x", _pod("2026-01-01T00:00:00Z", ["2026-01-01T00:00:10Z"], {}), 0)],
                     10.0)["process_seconds"] == 10.0


def test_runs_of_one_replica_and_earlier_tries_add_up():
    one = job_usage([ReplicaRun("m", Requests(2, 1, 0), 0.0, 10.0), ReplicaRun("m", Requests(2, 1, 0), 20.0, 25.0),
                     ReplicaRun("w", Requests(1, 0.5, 1), 0.0, 30.0)], 30.0)
    assert one["replicas"]["m"]["runs"] == 2 and one["replicas"]["m"]["cpu_seconds"] == 30.0
    two = add_usage(json.loads(json.dumps(one)), job_usage([ReplicaRun("m", Requests(2, 1, 0), 0.0, 1.0)], 2.0))
    assert (two["tries"], two["wall_seconds"], two["replicas"]["m"]["runs"]) == (2, 32.0, 3)
    assert (two["cpu_seconds"], two["memory_gib_seconds"], two["gpu_seconds"]) == (62.0, 31.0, 30.0)
    # whatever a store held that is not a usage counts for nothing
    assert add_usage({"replicas": {"m": {"runs": "x", "cpu_seconds": float("nan")}}, "tries": None},
                     job_usage([], 1.0))["cpu_seconds"] == 0.0
    json.dumps(two, allow_nan=False)


def test_the_plans_requests_are_the_request_else_the_limit():
    from airflow_distributed.jobstate.usage import plan_requests

    spec = load_spec("pytorch", {"resources": {"cpu": {"limits": 2}, "memory": {"requests": 512},
                                                "gpu": {"limits": 1}}})
    assert plan_requests(spec.environment.resources) == Requests(cpu=2.0, memory_gib=0.5, gpu=1.0)
    assert pod_requests({}) == Requests()


def test_the_job_view_says_what_was_requested_in_hours_over_the_tries():
    from airflow_distributed.plugins.job_state import TaskInstanceRef
    from airflow_distributed.plugins.page import job_page

    usage = add_usage(job_usage([ReplicaRun("m", Requests(2, 4, 1), 0.0, 3600.0)], 3600.0),
                      job_usage([ReplicaRun("m", Requests(2, 4, 1), 0.0, 1800.0)], 1800.0))
    record = {"job_name": "j", "state": "succeeded", "replicas": [], "usage": usage}
    page = job_page(record, TaskInstanceRef(dag_id="d", run_id="r", task_id="t"), source="recorded", show_logs=True,
                    json_href="/x")
    assert "requested 3 CPU-h, 6 GiB-h, 1.5 GPU-h over 2 tries" in page
    assert "requested" not in job_page({**record, "usage": {"cpu_seconds": float("nan")}},
                                       TaskInstanceRef(dag_id="d", run_id="r", task_id="t"), source="recorded",
                                       show_logs=True, json_href="/x")
