"""A job's startup phases per replica and for the job (``jobstate.startup``), pure, from the pod JSON shapes the API
serves (kube-apiserver v1.20 as the tests' control plane stores them) and from log timestamps."""

from __future__ import annotations

import json

import pytest

from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.jobstate.startup import (
    PHASES,
    POD_UNKNOWN,
    PROCESS_UNKNOWN,
    epoch,
    job_startup,
    pod_startup,
    process_startup,
    replica_lines,
    startup_line,
)
from airflow_distributed.replica.live_report import record_line

T0 = epoch("2026-11-27T09:30:00Z")


def _pod(created: str, *, scheduled: str | None = None, unschedulable: str | None = None,
         container: dict | None = None, last_state: dict | None = None, name: str = "base") -> dict:
    """A pod as the API serves it: whole-second times, conditions, the main container's status."""
    conditions = []
    if unschedulable is not None:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "lastProbeTime": None, "lastTransitionTime": unschedulable,
                           "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."})
    if scheduled is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": scheduled})
        conditions.append({"type": "Initialized", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": scheduled})
    statuses = [] if container is None else [{
        "name": name, "image": "trainer:1", "imageID": "", "ready": "running" in container, "restartCount": 0,
        "started": "running" in container, "state": container, "lastState": last_state or {},
    }]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "creationTimestamp": created},
            "spec": {"containers": [{"name": name, "image": "trainer:1"}]},
            "status": {"phase": "Running" if container and "running" in container else "Pending",
                       "conditions": conditions, "containerStatuses": statuses, "qosClass": "BestEffort",
                       **({"startTime": scheduled} if scheduled else {})}}


POD_CASES = [
    pytest.param(_pod("2026-11-27T09:30:00Z"),
                 {"created": 0.0, "scheduled": None, "running": None}, id="created, not yet scheduled"),
    pytest.param(_pod("2026-11-27T09:30:00Z", unschedulable="2026-11-27T09:30:00Z"),
                 {"created": 0.0, "scheduled": None, "running": None}, id="left Unschedulable: not scheduled"),
    pytest.param(_pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:04Z",
                      container={"waiting": {"reason": "ContainerCreating"}}),
                 {"created": 0.0, "scheduled": 4.0, "running": None}, id="scheduled, image being pulled"),
    pytest.param(_pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:04Z",
                      container={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}),
                 {"created": 0.0, "scheduled": 4.0, "running": None}, id="image pull backing off"),
    pytest.param(_pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:04Z",
                      container={"running": {"startedAt": "2026-11-27T09:31:10Z"}}),
                 {"created": 0.0, "scheduled": 4.0, "running": 70.0}, id="running"),
    pytest.param(_pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:01Z",
                      container={"terminated": {"exitCode": 0, "reason": "Completed",
                                                "startedAt": "2026-11-27T09:30:02Z",
                                                "finishedAt": "2026-11-27T09:35:00Z"}}),
                 {"created": 0.0, "scheduled": 1.0, "running": 2.0}, id="completed"),
    pytest.param(_pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:01Z",
                      container={"running": {"startedAt": "2026-11-27T09:32:00Z"}},
                      last_state={"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                 "startedAt": "2026-11-27T09:30:03Z",
                                                 "finishedAt": "2026-11-27T09:31:00Z"}}),
                 {"created": 0.0, "scheduled": 1.0, "running": 3.0}, id="restarted in place: its first start"),
    pytest.param(_pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:01Z",
                      container={"running": {"startedAt": "2026-11-27T09:30:02Z"}}, name="sidecar"),
                 {"created": 0.0, "scheduled": 1.0, "running": None}, id="only another container started"),
    pytest.param({"metadata": {"creationTimestamp": "2026-11-27T09:30:00.250000000Z"}, "status": {}},
                 {"created": 0.25, "scheduled": None, "running": None}, id="fractional time, no status yet"),
]


@pytest.mark.parametrize(("pod", "expected"), POD_CASES)
def test_a_pods_phases_are_its_own_timestamps_and_unknown_ones_stay_unknown(pod, expected):
    startup = job_startup([pod_startup("r", pod)], created=T0, unknown=POD_UNKNOWN)
    row = startup["replicas"]["r"]
    assert {phase: row[phase] for phase in expected} == expected
    # a pod's status never says when its image was pulled, nor plain pods when they were admitted
    assert (row["admitted"], row["image_pulled"], row["rendezvous"]) == (None, None, None)
    assert set(startup["unknown"]) == {"admitted", "image_pulled"}
    json.dumps(startup, allow_nan=False)


def _stamped(seconds: float, text: str) -> str:
    whole, fraction = divmod(seconds, 1)
    return f"2026-11-27T09:30:{int(whole):02d}.{round(fraction * 1e9):09d}Z {text}"


@pytest.mark.parametrize(("lines", "first_line", "first_progress"), [
    pytest.param([], None, None, id="no line"),
    pytest.param([_stamped(5.5, "loading data"), _stamped(7, "step 1")], 5.5, None, id="lines, no report"),
    pytest.param([_stamped(5.5, "loading"), _stamped(6, record_line({"progress": None, "metrics": {"a": 1}})),
                  _stamped(9.25, record_line({"progress": {"step": 1, "total": 10}}))], 5.5, 9.25,
                 id="a record without progress is not the first progress"),
    pytest.param([_stamped(3, record_line({"progress": {"step": 1, "total": 10}})), _stamped(4, "hello")],
                 4.0, 3.0, id="a record before any line"),
])
def test_a_logs_first_line_and_first_progress_record_from_its_timestamps(lines, first_line, first_progress):
    cursor = LogCursor()
    for line in lines:
        cursor.accept(line)
    again = LogCursor.from_dict(json.loads(json.dumps(cursor.as_dict())))  # as a trigger's event carries it
    for kept in (cursor, again):
        got = [None if ns is None else round(ns / 1e9 - T0, 3) for ns in (kept.first_ns, kept.first_progress_ns)]
        assert got == [first_line, first_progress]


def test_the_job_is_its_slowest_replica_and_its_rendezvous_the_masters_first_progress():
    pods = {
        "m": _pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:01Z",
                  container={"running": {"startedAt": "2026-11-27T09:30:05Z"}}),
        "w0": _pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:02Z",
                   container={"running": {"startedAt": "2026-11-27T09:30:09Z"}}),
        "w1": _pod("2026-11-27T09:30:01Z", scheduled="2026-11-27T09:30:03Z",
                   container={"running": {"startedAt": "2026-11-27T09:30:06Z"}}),
    }
    replicas = [pod_startup("m", pods["m"], first_line=T0 + 5.5, first_report=T0 + 12.0),
                pod_startup("w0", pods["w0"]), pod_startup("w1", pods["w1"])]
    startup = job_startup(replicas, master="m", unknown=POD_UNKNOWN)
    assert startup["created_at"] == "2026-11-27T09:30:00Z"
    assert startup["job"] == {"created": 1.0, "admitted": None, "scheduled": 3.0, "image_pulled": None,
                              "running": 9.0, "rendezvous": 12.0}
    assert startup["slowest"] == {"created": "w1", "scheduled": "w1", "running": "w0", "rendezvous": "m"}
    assert startup["rendezvous_by"] == "progress"
    assert startup["replicas"]["m"]["rendezvous_by"] == "progress"
    assert startup["replicas"]["w0"] == {"created": 0.0, "admitted": None, "scheduled": 2.0, "image_pulled": None,
                                         "running": 9.0, "rendezvous": None, "rendezvous_by": None}
    assert startup_line("ns/job", startup) == (
        "startup of ns/job: scheduled 3.0s, running 9.0s, rendezvous 12.0s (first progress, slowest m); "
        "unknown: admitted, image_pulled")


@pytest.mark.parametrize(("firsts", "master_report", "job_rendezvous", "by"), [
    pytest.param({"m": 2.0, "w0": 3.0, "w1": 4.5}, None, 4.5, "line", id="every first line: the last of them"),
    pytest.param({"m": 2.0, "w0": 3.0, "w1": None}, None, None, None, id="one replica printed nothing: unknown"),
    pytest.param({"m": 2.0, "w0": None, "w1": None}, 6.0, 6.0, "progress", id="the master's first progress"),
])
def test_the_jobs_rendezvous_is_never_invented(firsts, master_report, job_rendezvous, by):
    replicas = [process_startup(name, created=T0, started=T0 + 0.5, first_line=None if at is None else T0 + at,
                                first_report=(T0 + master_report) if name == "m" and master_report else None)
                for name, at in firsts.items()]
    startup = job_startup(replicas, master="m", unknown=PROCESS_UNKNOWN, created=T0)
    assert (startup["job"]["rendezvous"], startup["rendezvous_by"]) == (job_rendezvous, by)
    assert startup["job"]["running"] == 0.5
    assert [startup["job"][phase] for phase in ("admitted", "scheduled", "image_pulled")] == [None, None, None]
    assert set(startup["unknown"]) == {"admitted", "scheduled", "image_pulled"}


def test_phases_in_order_and_what_the_task_log_says_per_replica():
    replicas = [process_startup("m", created=T0, started=T0 + 0.1, first_line=T0 + 1.0),
                process_startup("w", created=T0, started=T0 + 0.2, first_line=T0 + 3.0)]
    startup = job_startup(replicas, master="m", created=T0)
    assert list(startup["job"]) == list(PHASES)
    assert replica_lines(startup) == ["  m: running 0.1s, rendezvous 1.0s (first line)",
                                      "  w: running 0.2s, rendezvous 3.0s (first line)"]


def test_no_known_creation_no_section_and_odd_times_are_unknown():
    assert job_startup([pod_startup("r", None)]) == {}
    assert job_startup([]) == {}
    assert [epoch(value) for value in (None, "", "yesterday", 5)] == [None, None, None, None]
    assert startup_line("j", {}) is None


def _spans(page: str) -> list[tuple[str, str]]:
    """``(class, title)`` of each waterfall bar in a page."""
    import re

    return re.findall(r'<rect class="span (\w+)"[^>]*><title>([^<]*)</title></rect>', page)


def test_the_job_view_draws_a_waterfall_of_known_phases_only_and_says_which_are_unknown():
    from airflow_distributed.plugins.page import job_page
    from airflow_distributed.task_instance import TaskInstanceRef

    pods = {"m<b>": _pod("2026-11-27T09:30:00Z", scheduled="2026-11-27T09:30:02Z",
                         container={"running": {"startedAt": "2026-11-27T09:30:07Z"}}),
            "w": _pod("2026-11-27T09:30:00Z")}
    startup = job_startup([pod_startup("m<b>", pods["m<b>"], first_report=T0 + 10.0), pod_startup("w", pods["w"])],
                          master="m<b>", unknown=POD_UNKNOWN)
    record = {"job_name": "j", "state": "failed", "replicas": [], "startup": json.loads(json.dumps(startup))}
    page = job_page(record, TaskInstanceRef(dag_id="d", run_id="r", task_id="t"), source="recorded",
                    show_logs=False, json_href="/x")
    assert "<script" not in page and "m<b>" not in page and "m&lt;b&gt;" in page
    # the job row: w was never scheduled, so the job's phases after its creation are unknown: nothing drawn but
    # its rendezvous (the master's first progress) from its creation; m: each span between two known phases
    assert _spans(page) == [("rdzv", "to the rendezvous: 10 s"),
                            ("wait", "waiting to be scheduled: 2 s"), ("start", "starting: 5 s"),
                            ("rdzv", "to the rendezvous: 3 s")]
    assert "image pulled: unknown (a pod&#39;s status has no image-pull time" in page
    assert "the master&#39;s first progress report" in page
    assert "Startup" not in job_page({**record, "startup": {}}, TaskInstanceRef(dag_id="d", run_id="r", task_id="t"),
                                     source="recorded", show_logs=False, json_href="/x")


@pytest.mark.parametrize(("conditions", "admitted"), [
    pytest.param([], None, id="never suspended"),
    pytest.param([{"type": "Created", "status": "True", "lastTransitionTime": "2026-11-27T09:30:00Z"},
                  {"type": "Suspended", "status": "True", "reason": "PyTorchJobSuspended",
                   "lastTransitionTime": "2026-11-27T09:30:00Z"}], None, id="still suspended"),
    pytest.param([{"type": "Created", "status": "True", "lastTransitionTime": "2026-11-27T09:30:00Z"},
                  {"type": "Suspended", "status": "False", "reason": "PyTorchJobResumed",
                   "lastTransitionTime": "2026-11-27T09:31:30Z"},
                  {"type": "Running", "status": "True", "lastTransitionTime": "2026-11-27T09:31:40Z"}], 90.0,
                 id="a PyTorchJob admitted"),
    pytest.param([{"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed",
                   "lastTransitionTime": "2026-11-27T09:30:05Z", "observedGeneration": 1}], 5.0,
                 id="a TrainJob resumed (metav1.Condition)"),
])
def test_a_custom_jobs_admission_is_its_suspended_condition_turning_false(conditions, admitted):
    from airflow_distributed.jobstate.startup import NEVER_SUSPENDED, admitted_at, custom_job_unknown

    at = admitted_at({"status": {"conditions": conditions}})
    assert (None if at is None else at - T0) == admitted
    assert ("admitted" in custom_job_unknown(at)) is (admitted is None)
    assert custom_job_unknown(None)["admitted"] == NEVER_SUSPENDED


LINES = [_stamped(2.0, "loading"), _stamped(3.5, record_line({"progress": {"step": 1, "total": 9}})),
         _stamped(4.0, "step 1")]


@pytest.mark.parametrize(("relayed", "stamped", "asked", "expected"), [
    pytest.param({"uid": "u-1", "last_ns": 1, "emitted_at_last": 1, "first_ns": int((T0 + 1.0) * 1e9),
                  "first_progress_ns": int((T0 + 1.5) * 1e9)}, LINES, 30, (1.0, 1.5), id="the relay's"),
    pytest.param({"uid": "u-0", "last_ns": 1, "emitted_at_last": 1, "first_ns": int((T0 + 1.0) * 1e9)}, LINES, 30,
                 (2.0, 3.5), id="another pod's relay: the whole log read at the end"),
    pytest.param({"uid": "u-1", "last_ns": 1, "emitted_at_last": 1}, LINES, 30, (2.0, 3.5),
                 id="a relay of an earlier release, without firsts"),
    pytest.param(None, LINES, 3, (None, None), id="as many lines as asked: maybe not the whole log, unknown"),
    pytest.param(None, [], 30, (None, None), id="no line"),
])
def test_a_deferred_masters_first_line_is_the_relays_else_its_whole_log(relayed, stamped, asked, expected):
    from airflow_distributed.jobstate.startup import master_log_cursor

    cursor = master_log_cursor(relayed, "u-1", stamped, asked)
    got = tuple(None if ns is None else round(ns / 1e9 - T0, 3) for ns in (cursor.first_ns, cursor.first_progress_ns))
    assert got == expected
