"""``backend="ray"`` through a real Airflow against a real local Ray cluster (``tests.ray_cluster``).

Every replica's address must be 127.0.0.1 (the cluster and the clients keep to loopback), every job leaves no
replica process, no running Ray job and no live placement group behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from airflow_distributed.manifests.ray import DEFAULT_WORK_ROOT, DRIVER_MODULE, REPORT_MARK
from airflow_distributed.replica.checkpoints import CHECKPOINT_FILE
from tests.conftest import ROOT
from tests.hang_scripts import gloo_hang_failure, last_report_named
from tests.helpers import (
    assert_master_and_two_workers_exchanged,
    replica_lines,
    replica_processes,
    run_dag,
    run_dag_at,
    wait_until,
    xcom,
)
from tests.process_variables import ranks_expected, ranks_seen
from tests.ray_cluster import LOOPBACK_ONLY, RayCluster

pytestmark = pytest.mark.usefixtures("airflow_db")
FINAL = ("SUCCEEDED", "FAILED", "STOPPED")
WORK_ROOT = Path(DEFAULT_WORK_ROOT)


@pytest.fixture(scope="module")
def ray_cluster():
    with pytest.MonkeyPatch.context() as patch:
        for name, value in LOOPBACK_ONLY.items():
            patch.setenv(name, value)
        with RayCluster(cpus=4, resources={"ssd": 2}) as cluster:
            patch.setenv("AIRFLOW_CONN_RAY_DEFAULT", cluster.connection())
            yield cluster
            assert_nothing_left(cluster)
        assert cluster.family() == []


def assert_nothing_left(cluster: RayCluster) -> None:
    """No replica process, no Ray job still running, no placement group, no live actor, no job's work folder left."""
    wait_until(lambda: replica_processes("train-") == [], timeout=30)
    assert sorted(os.listdir(WORK_ROOT / "jobs")) == []
    jobs = cluster.get("/api/jobs/")
    assert [job["submission_id"] for job in jobs if job["status"] not in FINAL] == []  # type: ignore[union-attr]
    assert cluster.placement_groups() != []  # the jobs' groups are listed, removed ones too
    wait_until(lambda: not [g for g in cluster.placement_groups() if g["state"] != "REMOVED"], timeout=30)
    assert cluster.actors() != []  # the jobs' replica actors are listed, dead ones too
    wait_until(lambda: not [a for a in cluster.actors() if a["state"] != "DEAD"], timeout=30)


def jobs_of(cluster: RayCluster, dag_id: str) -> list[dict]:
    return [job for job in cluster.get("/api/jobs/") if (job.get("metadata") or {}).get("dag_id") == dag_id]  # type: ignore[union-attr]


def driver_report(cluster: RayCluster, job: str) -> dict:
    """The driver's last report of the replicas, from the Ray Job's log."""
    from airflow_distributed.manifests.ray import last_report

    report = last_report(cluster.get(f"/api/jobs/{job}/logs")["logs"], "replicas")  # type: ignore[index]
    assert report is not None
    return report


def assert_on_loopback(cluster: RayCluster, job: str) -> list[str]:
    """Every replica's address came from an actor (the driver reports them) and is on loopback; the addresses."""
    addresses = [r["where"] for r in driver_report(cluster, job)["replicas"]]
    assert [address.rsplit(":", 1)[0] for address in addresses] == ["127.0.0.1"] * 3
    return addresses


def assert_startup_phases(run, job: dict, out: str) -> None:
    """The ``job`` XCom's ``startup``, from the driver's moments: every replica went created (the placement group
    asked for) -> admitted (granted) -> scheduled (its actor placed) -> running (its command started) ->
    rendezvous, in that order and within the task's run; no image pulled; the job's rendezvous is the master's
    first progress record; said once in the task log."""
    from airflow_distributed.jobstate.startup import epoch

    startup = job["startup"]
    master = job["replicas"][0]["name"]
    assert list(startup["replicas"]) == [r["name"] for r in job["replicas"]]
    assert set(startup["unknown"]) == {"image_pulled"}
    for row in [startup["job"], *startup["replicas"].values()]:
        assert row["image_pulled"] is None
        phases = [row[phase] for phase in ("created", "admitted", "scheduled", "running", "rendezvous")]
        assert None not in phases, row
        assert phases[0] >= 0.0 and phases == sorted(phases), row
    assert (startup["rendezvous_by"], startup["slowest"]["rendezvous"]) == ("progress", master)
    assert startup["job"]["rendezvous"] == startup["replicas"][master]["rendezvous"]
    # created when the Ray Job was submitted, within the task's run
    task = next(ti for ti in run.get_task_instances() if ti.task_id == "train")
    created = epoch(startup["created_at"])
    assert task.start_date.timestamp() <= created
    assert created + startup["job"]["rendezvous"] <= task.end_date.timestamp()
    assert out.count(f"startup of {job['job_name']}: ") == 1
    assert f"rendezvous {startup['job']['rendezvous']:.1f}s (first progress, slowest {master})" in out


def failure_line(out: str) -> str:
    return next(line for line in out.splitlines() if re.search(r"job \S+ failed after \d+\.\ds", line))


@pytest.mark.parametrize("dag_id", ["ray_pytorch_ddp", "ray_pytorch_ddp_deferrable"])
def test_pytorch_ddp_on_ray_trains_with_identical_parameters_on_every_rank(ray_cluster, dag_id, capfd):
    run, states = run_dag(dag_id)

    assert states == {"train": "success"}
    result = xcom(run, "train")
    assert result["backend"] == "ray" and result["state"] == "succeeded"
    assert [(r["role"], r["index"], r["exit_code"]) for r in result["replicas"]] == [
        ("master", 0, 0), ("worker", 0, 0), ("worker", 1, 0)]
    assert len(set(assert_on_loopback(ray_cluster, result["job_name"]))) == 3
    metrics = xcom(run, "train", "metrics")
    assert metrics["world_size"] == 3 and metrics["final_loss"] < metrics["initial_loss"]
    out = capfd.readouterr().out
    assert_startup_phases(run, xcom(run, "train", "job"), out)
    logs = replica_lines(out, result["job_name"])
    # The script fails unless the all-gathered parameter checksums are equal; each rank says it checked them.
    for rank, replica in enumerate(result["replicas"]):
        assert any(f"rank {rank}/3: process group ready (127.0.0.1:" in line for line in logs[replica["name"]])
    assert os.path.exists(result["model_path"])
    if dag_id == "ray_pytorch_ddp":
        # The job view's live record, published while the job ran, from the driver's reports.
        live = xcom(run, "train", "job_live")
        assert (live["backend"], live["state"], live["job_name"]) == ("ray", "running", result["job_name"])
        assert [r["name"] for r in live["replicas"]] == [r["name"] for r in result["replicas"]]
        # Its master saved checkpoints; they went once the job succeeded.
        checkpoints = Path(result["model_path"]).parent / "checkpoints"
        driver_log = ray_cluster.get(f"/api/jobs/{result['job_name']}/logs")["logs"]
        assert re.search(r"removed its [1-9]\d* checkpoint files \(keep_checkpoints=False\)", driver_log)
        assert [p.name for p in checkpoints.rglob("*") if CHECKPOINT_FILE.match(p.name)] == []
    assert_nothing_left(ray_cluster)


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_tensorflow_multiworker_on_ray_trains_across_a_chief_and_two_workers(ray_cluster):
    pytest.importorskip("tensorflow", reason="tensorflow-cpu is part of the test extra")
    run, states = run_dag("ray_tensorflow_multiworker")

    assert states == {"train": "success"}
    result = xcom(run, "train")
    assert [(r["role"], r["exit_code"]) for r in result["replicas"]] == [("chief", 0), ("worker", 0), ("worker", 0)]
    metrics = xcom(run, "train", "metrics")
    assert metrics["final_loss"] < metrics["initial_loss"]
    assert_on_loopback(ray_cluster, result["job_name"])
    assert_nothing_left(ray_cluster)


def _installed(module: str) -> Callable[[], str | None]:
    return lambda: None if importlib.util.find_spec(module) else f"{module} is part of the test extra"


COLLECTIVES = {
    # dag_id: (why it cannot run here, or None; framework; lines of each rank; the master's metrics: the sum
    # across ranks, and whether the replicas' parameters agree)
    "ray_xgboost": (_installed("xgboost"), "xgboost", lambda rank: [
        f"worker {rank}/3: task {rank}", f"worker {rank}: all-reduce sum of ranks + 1 is 6.0"],
        ("allreduce_sum", "boosters_identical")),
    "ray_jax": (_installed("jax"), "jax", lambda process: [
        f"process {process}/3: 1 local of 3 devices", f"process {process}: psum of process ids + 1 is 6.0"],
        ("psum", "parameters_identical")),
    "ray_paddle": (lambda: None if (ROOT / ".venvs" / "paddle" / "bin" / "python").exists()
                   else "no PaddlePaddle environment: run `make paddle`", "paddle", lambda rank: [
        f"trainer {rank}/3: endpoint 127.0.0.1:", f"trainer {rank}: all-reduce sum of trainer ids + 1 is 6.0"],
        ("allreduce_sum", "parameters_identical")),
}


# XGBoost in the default run; JAX and Paddle (the same path, other frameworks' variables) with the slow tests.
@pytest.mark.parametrize("dag_id", [pytest.param(dag_id, marks=[pytest.mark.slow] if dag_id != "ray_xgboost" else [])
                                    for dag_id in sorted(COLLECTIVES)])
def test_xgboost_jax_and_paddle_on_ray_sum_across_three_processes(ray_cluster, dag_id, capfd):
    missing, framework, lines, (total, agree) = COLLECTIVES[dag_id]
    if missing() is not None:
        pytest.skip(missing())
    run, states = run_dag(dag_id)

    assert states == {"train": "success"}
    metrics = assert_master_and_two_workers_exchanged(run, framework, lines, capfd.readouterr().out)
    assert (metrics[total], metrics[agree]) == (6.0, True)
    assert_on_loopback(ray_cluster, xcom(run, "train", "job_name"))
    assert_nothing_left(ray_cluster)


def test_a_failing_worker_stops_the_others_and_fails_the_task_naming_it(ray_cluster, capfd):
    run, states = run_dag("ray_worker_crash")

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    failure = failure_line(out)
    assert "-worker-1 exited with code 3" in failure
    assert "no replica is left running" in failure
    assert "worker-1 gives up" in out  # its last lines, in the error
    job = xcom(run, "train", "job")
    assert job["state"] == "failed"
    states = {r["name"].split("-", 2)[-1]: (r["state"], r.get("exit_code")) for r in job["replicas"]}
    # The others were running (they would for an hour) and were stopped.
    assert states["worker-1"] == ("failed", 3)
    assert states["master-0"][0] == states["worker-0"][0] == "stopped"
    assert [job["status"] for job in jobs_of(ray_cluster, "ray_worker_crash")] == ["FAILED"]
    assert_nothing_left(ray_cluster)


def test_two_replicas_of_two_processes_on_ray_train_one_ddp_model_with_every_rank_variable_right(ray_cluster, capfd):
    # One actor per replica runs torch's launcher, which starts the replica's 2 processes.
    run, states = run_dag("ray_nproc_ddp")

    out = capfd.readouterr().out
    assert states == {"train": "success"}, out[-6000:]
    result = xcom(run, "train")
    assert [(r["role"], r["index"], r["exit_code"]) for r in result["replicas"]] == [("master", 0, 0), ("worker", 0, 0)]
    # Every process's lines are in the Ray Job's log, as its actor read them from the launcher's output.
    logs = actor_lines(ray_cluster, result["job_name"])
    assert ranks_seen(logs) == ranks_expected(2, 2), logs[-6000:]
    # The script fails unless all 4 ranks ended with the same parameters; rank 0 alone reports, having compared them.
    assert "parameters identical on all ranks" in logs
    metrics = xcom(run, "train", "metrics")
    assert metrics["world_size"] == 4 and metrics["final_loss"] < metrics["initial_loss"]
    assert_no_process_left(ray_cluster)


def orphan_guards() -> list[psutil.Process]:
    """The orphan guards of this test session's replicas still running (``replica.orphan_guard``)."""
    from airflow_distributed.replica.ray_driver import GUARD_MODULE

    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            if GUARD_MODULE in proc.cmdline() and proc.environ().get("AIRFLOW_HOME") == os.environ.get("AIRFLOW_HOME"):
                found.append(proc)
    return found


def assert_no_process_left(cluster: RayCluster) -> None:
    """``assert_nothing_left``, and no orphan guard either: each ends with its replica's processes."""
    assert_nothing_left(cluster)
    wait_until(lambda: orphan_guards() == [], timeout=10)


def actor_lines(cluster: RayCluster, job: str) -> str:
    """The lines the actors printed to the Ray Job's log (the driver's reports, which quote them as JSON, left out)."""
    logs = cluster.get(f"/api/jobs/{job}/logs")["logs"]  # type: ignore[index]
    return "\n".join(line for line in logs.splitlines() if not line.startswith(REPORT_MARK))


def test_a_hung_replica_of_several_processes_on_ray_prints_the_stacks_of_each_and_leaves_none(ray_cluster, capfd):
    run, states = run_dag("ray_nproc_hung")

    out = capfd.readouterr().out
    assert states == {"train": "failed"}, out[-6000:]
    assert "JobHungError: " in out, out[-6000:]
    # faulthandler's stack of each rank's main thread names the function it is blocked in, one line per process.
    lines = actor_lines(ray_cluster, xcom(run, "train", "job")["job_name"])
    assert sum("in block_in_all_reduce" in line for line in lines.splitlines()) == 2, lines[-6000:]
    assert sum("in never_join" in line for line in lines.splitlines()) == 1, lines[-6000:]
    assert_no_process_left(ray_cluster)


# The driver keeps the clock in both wait modes; the synchronous case (about 30 s) runs with the slow tests.
@pytest.mark.parametrize("dag_id", [pytest.param("ray_hung", marks=pytest.mark.slow), "ray_hung_deferrable"])
def test_a_job_whose_ranks_block_in_an_all_reduce_fails_as_hung_with_their_stacks(ray_cluster, capfd, dag_id):
    run, states = run_dag(dag_id)

    assert states == {"train": "failed"}
    job = xcom(run, "train", "job")
    failure = gloo_hang_failure(capfd.readouterr().out, job)
    assert failure.splitlines()[0].endswith("; no replica is left running and its placement group is removed")
    assert [r["state"] for r in job["replicas"]] == ["stopped"] * 3
    assert [job["status"] for job in jobs_of(ray_cluster, dag_id)] == ["FAILED"]
    assert_nothing_left(ray_cluster)


# The scenario: a burst of reports within one live record interval, then the all-reduce that never completes.
# The driver keeps the clock in both wait modes: the synchronous case runs with the slow tests.
@pytest.mark.parametrize("dag_id", [pytest.param("ray_burst_hang", marks=pytest.mark.slow),
                                    "ray_burst_hang_deferrable"])
def test_a_ray_job_that_hangs_right_after_a_burst_of_reports_is_named_by_its_last_report(ray_cluster, capfd, dag_id):
    run, states = run_dag(dag_id)

    assert states == {"train": "failed"}
    out = capfd.readouterr().out
    failure = out[out.rindex("JobHungError: job "):].splitlines()[0]
    last_report_named(failure, 10)
    assert failure.endswith("; no replica is left running and its placement group is removed")
    job = xcom(run, "train", "job")
    assert [r["state"] for r in job["replicas"]] == ["stopped"] * 3
    assert_startup_phases(run, job, out)  # recorded for a failed job too
    if dag_id == "ray_burst_hang":  # the synchronous wait says it as the job trains, seconds before it hangs
        assert out.index(f"startup of {job['job_name']}: ") < out.index(f"replicas of {job['job_name']} (final)")
    assert [job["status"] for job in jobs_of(ray_cluster, dag_id)] == ["FAILED"]
    assert_nothing_left(ray_cluster)


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_a_slow_job_that_reports_is_not_hung_on_ray(ray_cluster):
    run, states = run_dag("ray_slow_but_reporting")

    assert states == {"train": "success"}
    assert xcom(run, "train", "metrics") == {"loss": 0.5}
    assert_nothing_left(ray_cluster)


@contextlib.contextmanager
def _in_a_task_process(dag_id: str) -> Iterator[subprocess.Popen]:
    """The DAG run in a process of its own, as a task process; killed if the test leaves it running."""
    code = textwrap.dedent(f"""
        from tests.helpers import run_dag_at
        import pendulum
        run_dag_at({dag_id!r}, pendulum.datetime(2026, 2, 1, tz="UTC"))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=os.environ.copy(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def _running_replicas(cluster: RayCluster, dag_id: str) -> list:
    jobs = jobs_of(cluster, dag_id)
    return jobs and jobs[0]["status"] == "RUNNING" and len(replica_processes("train-")) == 3 and jobs


def test_a_killed_task_stops_its_ray_job_and_leaves_nothing_running(ray_cluster):
    with _in_a_task_process("ray_long_running") as proc:
        wait_until(lambda: _running_replicas(ray_cluster, "ray_long_running"), timeout=120, interval=0.5)
        proc.send_signal(signal.SIGTERM)  # what Airflow sends a task it kills; its handler runs on_kill()
        proc.wait(timeout=60)

    assert [job["status"] for job in jobs_of(ray_cluster, "ray_long_running")] == ["STOPPED"]
    assert_nothing_left(ray_cluster)


def _driver_of(cluster: RayCluster, job: str) -> list:
    """The driver process of Ray Job ``job`` (one of the cluster's processes)."""
    found = []
    for proc in cluster.family():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            # The interpreter running the module (Ray starts it through a shell, whose command line names it too).
            if proc.cmdline()[1:3] == ["-m", DRIVER_MODULE] and job in json.dumps(proc.environ()):
                found.append(proc)
    return found


@pytest.mark.parametrize("end", ["task killed", "driver killed"])
def test_an_ended_job_of_several_processes_per_replica_on_ray_leaves_none_of_them(ray_cluster, end):
    # Torch's launcher starts each process in a session of its own: neither the launcher's process group nor, once
    # it is gone, its process tree reaches them. A killed task stops the job (SIGTERM to its driver); a driver
    # SIGKILLed takes its actors with it, and each launcher is then sent SIGTERM by the kernel, so that it stops its
    # processes rather than leave them training.
    with _in_a_task_process("ray_nproc_long") as proc:
        wait_until(lambda: len(replica_processes("train-")) == 6 and jobs_of(ray_cluster, "ray_nproc_long"),
                   timeout=120, interval=0.5)
        [job] = jobs_of(ray_cluster, "ray_nproc_long")
        assert len(orphan_guards()) == 2  # one per replica, while it runs
        if end == "task killed":
            proc.send_signal(signal.SIGTERM)  # what Airflow sends a task it kills; its handler runs on_kill()
        else:
            [driver] = _driver_of(ray_cluster, job["submission_id"])
            driver.kill()
        proc.wait(timeout=60)

    wait_until(lambda: replica_processes("train-") == [], timeout=30)
    if end == "driver killed":  # no clean-up ran: the job's work folder stays on its node (Ray removes the rest)
        shutil.rmtree(WORK_ROOT / "jobs" / job["submission_id"], ignore_errors=True)
    assert_no_process_left(ray_cluster)


def _gone_with_nothing_left(cluster: RayCluster, job: str) -> None:
    """Job ``job`` stopped by its driver as abandoned, nothing of it left, its liveness key removed too."""
    from airflow_distributed.manifests.ray import liveness_key

    wait_until(lambda: cluster.get(f"/api/jobs/{job}")["status"] in FINAL, timeout=90, interval=0.5)  # type: ignore[index]
    assert cluster.get(f"/api/jobs/{job}")["status"] == "FAILED"  # type: ignore[index]
    logs = cluster.get(f"/api/jobs/{job}/logs")["logs"]  # type: ignore[index]
    assert "the job was abandoned and stopped" in logs, logs[-3000:]
    with pytest.raises(urllib.error.HTTPError, match="404"):
        cluster.get(f"/api/packages/{liveness_key(job).replace('://', '/', 1)}")
    assert_nothing_left(cluster)


@pytest.mark.slow  # about 25 s: with the slow tests, to keep the default run short
def test_a_sigkilled_task_renews_no_more_and_its_driver_stops_the_abandoned_job(ray_cluster):
    # liveness_grace is 6 s in this DAG (kept above a loaded machine's stalls): while the task waits, its renewals
    # keep the job running past it.
    with _in_a_task_process("ray_abandoned") as proc:
        wait_until(lambda: _running_replicas(ray_cluster, "ray_abandoned"), timeout=120, interval=0.5)
        time.sleep(13)  # two graces
        [job] = jobs_of(ray_cluster, "ray_abandoned")
        assert job["status"] == "RUNNING" and len(replica_processes("train-")) == 3
        proc.kill()  # no handler, no on_kill: only the driver's liveness watch can stop the job now
        proc.wait(timeout=30)

    _gone_with_nothing_left(ray_cluster, job["submission_id"])


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_a_deferred_wait_renews_the_liveness_and_a_lost_triggerer_leaves_nothing_running(ray_cluster):
    from airflow_distributed.hooks.ray import RayJobHook
    from airflow_distributed.manifests.ray import RayOptions, job_description, job_layout, ray_job
    from airflow_distributed.spec import load_spec
    from airflow_distributed.triggers.ray import RayJobTrigger

    name = "train-deferred-lost"
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1}, "resources": {"limits": {"cpu": 0.5}}})
    layout = job_layout(DEFAULT_WORK_ROOT, name, "/tmp/unused-model", "/tmp/unused-model/ckpt")
    description = job_description(spec=spec, job_name=name, command=["python", "-c", "import time; time.sleep(3600)"],
                                  layout=layout, files={}, env={}, try_number=1, stop_grace_period=1.0,
                                  options=RayOptions(liveness_grace=5.0))
    hook = RayJobHook()
    hook.submit(name, *ray_job(description, sys.executable), metadata={"dag_id": "deferred_lost"})
    trigger = RayJobTrigger(job_name=name, ray_conn_id="ray_default", poll_interval=0.5, renew_every=1.0)

    async def deferred_then_triggerer_lost() -> tuple[str, int]:
        waiting = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.to_thread(wait_until, lambda: len(replica_processes(name)) == 2, 120, 0.5)
        await asyncio.sleep(11.0)  # two graces: only the trigger's renewals keep the job running
        seen = hook.info(name)["status"], len(replica_processes(name))
        waiting.cancel()  # as a triggerer that dies: nothing renews any more
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return seen

    assert asyncio.run(deferred_then_triggerer_lost()) == ("RUNNING", 2)

    _gone_with_nothing_left(ray_cluster, name)


@pytest.mark.parametrize(("dag_id", "reason"), [
    ("ray_strict_spread", "STRICT_SPREAD needs one node per replica (3) and the cluster has 1 alive"),
    ("ray_missing_resource", "no node of the cluster has the resources fpga"),
])
def test_a_placement_the_cluster_cannot_make_fails_at_startup_timeout_naming_why(ray_cluster, capfd, dag_id, reason):
    run, states = run_dag(dag_id)

    assert states == {"train": "failed"}
    failure = failure_line(capfd.readouterr().out)
    assert "did not reserve the job's placement group" in failure and reason in failure
    assert replica_processes("train-") == []
    assert_nothing_left(ray_cluster)


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_custom_resources_are_reserved_in_every_replicas_bundle(ray_cluster):
    run, states = run_dag("ray_custom_resources")

    assert states == {"train": "success"}
    job_name = xcom(run, "train")["job_name"]
    [group] = [g for g in ray_cluster.placement_groups(detail=True) if g["name"] == job_name]
    assert [bundle["unit_resources"] for bundle in group["bundles"]] == [{"CPU": 0.5, "ssd": 0.5}] * 3, group
    assert_nothing_left(ray_cluster)


@pytest.mark.slow  # with the slow tests (CI runs them too), to keep the default run near 20 minutes
def test_execution_timeout_stops_the_ray_job(ray_cluster, capfd):
    run, states = run_dag("ray_timeout")

    assert states == {"train": "failed"}
    assert "AirflowTaskTimeout" in capfd.readouterr().out
    assert [job["status"] for job in jobs_of(ray_cluster, "ray_timeout")] == ["STOPPED"]
    assert_nothing_left(ray_cluster)


@pytest.mark.slow  # about 25 s: with the slow tests, to keep the default run short
def test_a_retry_reattaches_to_the_running_ray_job_of_its_earlier_try(ray_cluster, capfd):
    # The earlier try's task process dies (SIGKILL: no handler runs); its Ray Job goes on in the cluster.
    with _in_a_task_process("ray_reattach") as proc:
        wait_until(lambda: _running_replicas(ray_cluster, "ray_reattach"), timeout=120, interval=0.5)
        proc.kill()
        proc.wait(timeout=30)
    [first] = jobs_of(ray_cluster, "ray_reattach")

    import pendulum

    run, states = run_dag_at("ray_reattach", pendulum.datetime(2026, 2, 1, tz="UTC"))

    assert states == {"train": "success"}
    assert "is already running on" in capfd.readouterr().out
    [again] = jobs_of(ray_cluster, "ray_reattach")
    assert again["submission_id"] == first["submission_id"] and again["start_time"] == first["start_time"]
    assert again["status"] == "SUCCEEDED"
    assert xcom(run, "train", "metrics")["world_size"] == 3
    assert_nothing_left(ray_cluster)


def test_killing_a_deferred_task_stops_its_ray_job(ray_cluster):
    """Airflow 3.3+ calls the trigger's on_kill when the user kills a deferred task."""
    from airflow_distributed.hooks.ray import RayJobHook
    from airflow_distributed.manifests.ray import job_description, job_layout, ray_job
    from airflow_distributed.spec import load_spec
    from airflow_distributed.triggers.ray import RayJobTrigger

    name = "train-deferred-kill"
    spec = load_spec("pytorch", {"pytorch": {"n_workers": 1}, "resources": {"limits": {"cpu": 0.5}}})
    layout = job_layout("/tmp/airflow-distributed-ray", name, "/tmp/unused-model", "/tmp/unused-model/ckpt")
    command = ["python", "-c", "import time; time.sleep(3600)"]
    description = job_description(spec=spec, job_name=name, command=command, layout=layout, files={}, env={},
                                  try_number=1, stop_grace_period=1.0)
    hook = RayJobHook()
    hook.submit(name, *ray_job(description, sys.executable), metadata={"dag_id": "deferred_kill"})
    wait_until(lambda: len(replica_processes(name)) == 2, timeout=120, interval=0.5)

    asyncio.run(RayJobTrigger(job_name=name, ray_conn_id="ray_default", poll_interval=1.0).on_kill())

    assert hook.info(name)["status"] == "STOPPED"
    # The driver's own stop handling ran (not Ray's bare exit on SIGTERM): it reported the stop.
    from airflow_distributed.manifests.ray import last_report

    assert (last_report(hook.logs(name), "outcome") or {}).get("ending") == "stopped"
    assert_nothing_left(ray_cluster)


def test_the_ray_connection_is_read_from_airflow(ray_cluster):
    from airflow_distributed.hooks.ray import RayJobHook

    assert RayJobHook().address == ray_cluster.address
    assert json.loads(ray_cluster.connection())["conn_type"] == RayJobHook.conn_type
