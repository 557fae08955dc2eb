"""The driver of a ``backend="ray"`` job: the Ray Job's entrypoint, run in the cluster by the cluster's Python.

It reserves one placement-group bundle per replica, starts one actor in each, asks every actor for its node's
address and a free port there, builds the job's plan from those addresses (``plan.build_plan``, as every backend
does), and starts each replica's command as a subprocess of its actor with the contract's variables. The master's
exit decides; a replica that exits non-zero stops the others. What it sees goes to its log as reports
(``manifests.ray.report_line``), which the task reads through the Jobs API. With ``progress_timeout`` the driver keeps
the hang watchdog's clock (``progress_watch.HangWatchdog``, as the local backend's task does): it sees the master's
lines and output document, and a job quiet that long while every replica runs has its replicas' stacks dumped, is
stopped, and ends ``hung``. It reports the moments of the job's start it saw (the placement group asked for and
granted, each actor placed, each command started, each replica's first line and first progress record) once the
master printed its first progress record and again with the outcome: the task's ``startup`` record
(``manifests.ray.ray_startup``). Whatever the ending (a stop of the Ray
Job included: SIGTERM), the replicas are stopped and the placement group removed; if the driver is SIGKILLed, Ray
removes its actors and placement group, and a replica dies with its actor (``PR_SET_PDEATHSIG``). A job whose task
is gone without stopping it (SIGKILLed, its worker lost) is stopped the same way once its liveness key has not
been renewed for the job's liveness grace (``LivenessWatch``).

Run as ``python -m airflow_distributed.replica.ray_driver`` with the job's description in ``JOB_VARIABLE``. Needs
Ray and this package (shipped with the job) on the cluster, not Airflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any

import psutil
import ray
from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_get
from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from airflow_distributed.contract import ENV_STACKS_DIR, ENV_STACKS_SIGNAL
from airflow_distributed.hooks.local import (
    STACKS_SIGNAL,
    STACKS_STAGGER,
    STACKS_WAIT,
    TAIL_LINES,
    LocalProcessHook,
    die_with_parent,
)
from airflow_distributed.jobstate.outcome import Ending
from airflow_distributed.jobstate.progress_watch import HangWatchdog
from airflow_distributed.manifests.local import PYTHON_NAMES, STANDBY_CODE, resolve_python
from airflow_distributed.manifests.ray import JOB_VARIABLE, RAY_LAUNCH, ActorAddressing, report_line
from airflow_distributed.plan import ClusterPlan, Layout, build_plan
from airflow_distributed.replica import orphan_guard
from airflow_distributed.replica.live_report import is_record, reports_progress
from airflow_distributed.replica.orphan_guard import MARK_VARIABLE, new_mark
from airflow_distributed.spec.models import TrainingSpec
from airflow_distributed.status import ReplicaState, ReplicaStatus

#: The module that stops what is left of a launcher's replica once its actor is gone unannounced.
GUARD_MODULE = orphan_guard.__name__
#: Seconds between two live reports (the master's document), when it changed.
LIVE_INTERVAL = 2.0
#: A stop of the Ray Job gives the driver 3 s (``RAY_JOB_STOP_WAIT_TIME_S``) before SIGKILL: the replicas get less.
STOP_GRACE_ON_SIGTERM = 1.5


class JobStopped(BaseException):
    """The Ray Job was stopped (SIGTERM to the driver)."""


class LivenessWatch:
    """Stops the job when the task that waits for it stopped renewing its liveness key for ``grace`` seconds.

    The key (``manifests.ray.liveness_key``, written by ``RayJobHook.renew_liveness``) is read from the GCS every
    ``grace / 10`` seconds (at most every 5 s); only a change counts, timed by this node's clock, so the two clocks
    need not agree. The grace starts when the driver does. Past it, the driver is sent the SIGTERM a stop of the
    Ray Job sends: the same clean-up runs, wherever the driver was waiting.
    """

    def __init__(self, key: str, grace: float, clock: Any = time.monotonic) -> None:
        self.key = key
        self.grace = grace
        self._clock = clock
        self._seen: bytes | None = None
        self._seen = self._read()
        self._renewed_at = clock()
        #: set once the grace passed without a renewal
        self.abandoned = False

    def _read(self) -> bytes | None:
        try:
            return _internal_kv_get(self.key)
        except Exception as error:  # the GCS unreachable a moment: not a missing renewal
            print(f"reading the liveness key: {error}", file=sys.stderr, flush=True)
            return self._seen

    def expired(self) -> bool:
        """Whether the grace passed since the last renewal seen (read now)."""
        value = self._read()
        if value is not None and value != self._seen:
            self._seen, self._renewed_at = value, self._clock()
        return self._clock() - self._renewed_at > self.grace

    def start(self) -> None:
        threading.Thread(target=self._watch, name="liveness", daemon=True).start()

    def _watch(self) -> None:
        while not self.expired():
            time.sleep(min(5.0, self.grace / 10))
        self.abandoned = True
        print(f"the task waiting for this job renewed its liveness last {self.grace:g}s ago (killed, or its worker "
              "lost): stopping the job", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

    def remove(self) -> None:
        """Delete the key (the job is over: nothing of it stays in the cluster)."""
        try:
            _internal_kv_del(self.key)
        except Exception as error:
            print(f"removing the liveness key: {error}", file=sys.stderr, flush=True)


class ReplicaActor:
    """One replica's place in the cluster: its node's address, and the process of its command."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        #: the replica's descendants as last seen alive (``_family``): a launcher (torch's) starts its processes in
        #: sessions of their own, which neither its process group nor, once it is gone, its tree reaches
        self._known_family: list[psutil.Process] = []
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._exited_at: float | None = None
        self._pump: threading.Thread | None = None
        #: lines printed so far, the live records left out (the hang watchdog's sign of life: a record is a report,
        #: timed from its own ``reported_at`` in the document; one held back and printed later is no new life)
        self._lines = 0
        #: the startup phases this actor sees (epoch seconds on its node): it was placed and its process is up now;
        #: the replica's process started, its first line, its first progress record
        self._moments: dict[str, float | None] = {"placed": time.time(), "started": None, "first_line": None,
                                                  "first_report": None}

    def endpoint(self) -> tuple[str, int]:
        """The node's address as Ray knows it, and a port free there now."""
        host = ray.util.get_node_ip_address()
        with socket.socket() as probe:
            probe.bind((host, 0))
            return host, probe.getsockname()[1]

    def start(self, name: str, argv: list[str], env: dict[str, str], files_dir: str, files: dict[str, str],
              launcher: bool = False) -> int:
        """Write the job's files on this node and start the replica's command in the work folder; its pid.

        :param launcher: the command is a launcher of several processes (``n_proc_per_node``), which it starts in
            sessions of their own: should this actor die unannounced, the launcher is sent SIGTERM, which it handles by
            stopping its processes, rather than SIGKILL, which would leave them running; and as Ray SIGKILLs an
            actor's children when it kills the actor, an ``orphan_guard`` watching from outside the actor's tree
            kills whatever of the replica is left: the processes it saw in the replica's tree, and every process that
            carries the replica's mark (``orphan_guard.MARK_VARIABLE``, given to the command here).
        """
        os.makedirs(files_dir, exist_ok=True)
        for file_name, text in files.items():
            with open(os.path.join(files_dir, file_name), "w", encoding="utf-8") as handle:
                handle.write(text)
        mark = new_mark()
        self._process = subprocess.Popen(
            argv, env={**os.environ, **env, **({MARK_VARIABLE: mark} if launcher else {})},
            cwd=os.path.dirname(files_dir), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=(lambda: die_with_parent(signal.SIGTERM)) if launcher else die_with_parent,
        )
        if launcher:
            self._guard(mark)
        self._moments["started"] = time.time()
        self._pump = threading.Thread(target=self._read, args=(name,), daemon=True)
        self._pump.start()
        return self._process.pid

    def _guard(self, mark: str) -> None:
        """Start the replica's ``orphan_guard``, detached from this actor: the shell that starts it in the background
        exits at once, so the guard is no child of the actor that Ray would kill with it. ``mark``: the replica's."""
        assert self._process is not None
        subprocess.run(
            ["sh", "-c", 'exec "$@" </dev/null >/dev/null 2>&1 &', "sh", sys.executable, "-m", GUARD_MODULE,
             str(os.getpid()), str(self._process.pid), mark],
            check=True, start_new_session=True,
        )

    def _read(self, name: str) -> None:
        assert self._process is not None and self._process.stdout is not None
        for raw in iter(self._process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if is_record(line):  # the live records a master's tracking calls print are not its lines
                if self._moments["first_report"] is None and reports_progress(line):
                    self._moments["first_report"] = time.time()
            else:
                if self._moments["first_line"] is None:
                    self._moments["first_line"] = time.time()
                self._lines += 1
                self._tail.append(line)
            print(f"[{name}] {line}", flush=True)  # into the Ray Job's log, beside the driver's reports

    def poll(self) -> dict[str, Any]:
        """The exit code (``None`` while it runs), when it exited, its last lines and how many it printed."""
        code = self._process.poll() if self._process is not None else None
        if code is None:
            self._remember_family()
        elif self._exited_at is None:
            self._exited_at = time.time()
            if self._pump is not None:
                self._pump.join(1.0)
        return {"exit_code": code, "exited_at": self._exited_at, "tail": list(self._tail), "lines": self._lines,
                "moments": dict(self._moments)}

    def _family(self) -> list[psutil.Process]:
        """The replica's process and every descendant alive, those in sessions of their own included."""
        process = self._process
        if process is None:
            return []
        try:
            root = psutil.Process(process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _remember_family(self) -> None:
        # Those seen before are kept while they run (a process gone from the tree, the replica's exit reparenting
        # it, may live on as an orphan); a pid seen again with another start time is another process.
        known = {member.pid: member for member in self._known_family if member.is_running()}
        known.update((member.pid, member) for member in self._family()[1:] if member.pid not in known)
        self._known_family = list(known.values())

    def dump_stacks(self, signal_name: str, folder: str) -> int:
        """Send ``signal_name`` to each process of the replica that registered its stack dump in ``folder``
        (``stack_dump``: one file per pid); how many. Only processes of the replica's own tree are signalled (a
        launcher's processes are in sessions of their own): a pid reused since by another process is not, and
        neither is a launcher that did not register (the signal would end it)."""
        process = self._process
        if process is None or process.poll() is not None:
            return 0
        try:
            registered = {int(entry) for entry in os.listdir(folder) if entry.isdigit()}
        except FileNotFoundError:
            return 0
        sent = 0
        for member in self._family():
            if member.pid in registered:
                if sent:  # a launcher's ranks share the replica's output: one dump at a time, each read whole
                    time.sleep(STACKS_STAGGER)
                try:
                    member.send_signal(getattr(signal, signal_name))
                    sent += 1
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
        return sent

    def stop(self, grace: float) -> int | None:
        """TERM the replica's process group and its descendants, KILL what is left after ``grace``; its exit code.

        A launcher's processes are in sessions of their own: they are signalled each, as last seen if the launcher
        is gone, and waited for, so that none outlives its replica (a replica that ended leaves none either)."""
        process = self._process
        if process is None:
            return None
        self._remember_family()
        family = self._known_family
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            alive = [member for member in family if member.is_running()]
            if process.poll() is not None and not alive:
                break
            if process.poll() is None:
                try:
                    os.killpg(process.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            for member in alive:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    member.send_signal(sig)
            deadline = time.monotonic() + wait
            # The replica's own process is reaped by Popen only (psutil's wait would leave Popen an unknown code).
            try:
                process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
            _, alive = psutil.wait_procs(alive, timeout=max(0.0, deadline - time.monotonic()))
            if process.poll() is not None and not alive:
                break
        if self._pump is not None:
            self._pump.join(1.0)
        return process.poll()

    def read(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def remove(self, folder: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def remove_checkpoints(self, folder: str, job: str) -> int:
        """Remove what job ``job``'s ``tracking.save_checkpoint`` calls wrote in ``folder`` on this node; how many."""
        return LocalProcessHook.remove_checkpoints(folder, job)


class Driver:
    """One job's run in the cluster; ``clean_up`` leaves nothing of it."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.spec = TrainingSpec.model_validate(job["spec"])
        self.layout = Layout(**job["layout"])
        self.group: Any = None
        self.actors: list[Any] = []
        self.plan: ClusterPlan | None = None
        self._last: list[dict[str, Any]] = []
        self._live_at = 0.0
        self._master_lines = 0
        self._last_live: Any = None
        self.hang: HangWatchdog | None = None
        #: when the placement group was asked for and granted (epoch seconds): the startup phases' first moments
        self._asked: float | None = None
        self._admitted: float | None = None
        #: the startup report, once sent (the master's first progress record: the job trains)
        self.startup_sent: dict[str, Any] | None = None

    def run(self) -> dict[str, Any]:
        """Start the job and wait for it; the outcome report."""
        job = self.job
        self._asked = time.time()
        self.group = placement_group(job["bundles"], strategy=job["strategy"], name=job["job_name"])
        if not self.group.wait(timeout_seconds=job["startup_timeout"]):
            return {"kind": "outcome", "ending": Ending.NOT_STARTED, "replicas": [],
                    "message": f"the cluster did not reserve the job's placement group ({job['strategy']}, "
                               f"bundles {json.dumps(job['bundles'])}) within {job['startup_timeout']:g}s: "
                               f"{self._unplaced_reason()}"}
        self._admitted = time.time()
        actor_class = ray.remote(ReplicaActor)
        for index, reserved in enumerate(job["bundles"]):
            options: dict[str, Any] = {
                "num_cpus": reserved.get("CPU", 0), "num_gpus": reserved.get("GPU", 0),
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self.group,
                                                                        placement_group_bundle_index=index),
            }
            if "memory" in reserved:
                options["memory"] = reserved["memory"]
            self.actors.append(actor_class.options(**options).remote())
        endpoints = [tuple(pair) for pair in ray.get([actor.endpoint.remote() for actor in self.actors])]
        interpreter = sys.executable  # the cluster's Python, which runs this driver and its actors
        plan = self.plan = build_plan(
            self.spec, job["job_name"], ActorAddressing(endpoints), self.layout,
            resolve_python(job["command"], interpreter), backend="ray", launch=RAY_LAUNCH, env=job["env"],
            try_number=job["try_number"], files=job["files"],
        )
        pids = []
        for replica, actor in zip(plan.replicas, self.actors):
            argv = list(replica.command) if replica.command is not None else [interpreter, "-c", STANDBY_CODE]
            if argv and argv[0] in PYTHON_NAMES:
                argv[0] = interpreter
            env = dict(replica.env)
            if job.get("progress_timeout") is not None:  # the replicas print their stacks when the job hangs
                env.update({ENV_STACKS_SIGNAL: STACKS_SIGNAL.name, ENV_STACKS_DIR: self._stacks_dir(replica.name)})
            pids.append(actor.start.remote(replica.name, argv, env, self.layout.files_dir, dict(plan.files),
                                           launcher=plan.processes_per_replica > 1))
        ray.get(pids)
        if job.get("progress_timeout") is not None:  # the clock starts once every replica runs
            self.hang = HangWatchdog(
                job["progress_timeout"], read_document=lambda: ray.get(self.actors[0].read.remote(
                    self.layout.output_path)), master_lines=lambda: self._master_lines)
        return self._wait()

    def _stacks_dir(self, replica: str) -> str:
        """Where the processes of ``replica`` note their pids for the stack dump: in the job's work folder on its
        node (removed with it), one folder per replica (several may share a node)."""
        return os.path.join(os.path.dirname(self.layout.files_dir), "stacks", replica)

    def _unplaced_reason(self) -> str:
        """Why the placement group is not placed, as far as the cluster tells: its state, and for the strict
        spread the nodes it needs against those alive; for a custom resource, whether any node has it."""
        job = self.job
        try:
            state = (placement_group_table(self.group).get("stats") or {}).get("scheduling_state") or "unknown"
            nodes = [node for node in ray.nodes() if node.get("Alive")]
        except Exception as error:
            return f"its state could not be read ({error})"
        reasons = [f"scheduling state {state}"]
        if job["strategy"] == "STRICT_SPREAD" and len(job["bundles"]) > len(nodes):
            reasons.append(f"STRICT_SPREAD needs one node per replica ({len(job['bundles'])}) and the cluster has "
                           f"{len(nodes)} alive")
        known = {name for node in nodes for name in node.get("Resources") or {}}
        missing = sorted({name for reserved in job["bundles"] for name in reserved} - known)
        if missing:
            reasons.append(f"no node of the cluster has the resources {', '.join(missing)}")
        return "; ".join(reasons)

    def _statuses(self, polls: list[dict[str, Any]], stopped: set[int] | frozenset[int] = frozenset()
                  ) -> list[dict[str, Any]]:
        assert self.plan is not None
        rows = []
        for position, (replica, poll) in enumerate(zip(self.plan.replicas, polls)):
            code = poll["exit_code"]
            state = (ReplicaState.RUNNING if code is None else ReplicaState.SUCCEEDED if code == 0
                     else ReplicaState.STOPPED if position in stopped else ReplicaState.FAILED)
            rows.append(ReplicaStatus(replica.name, replica.role, replica.index, state, code,
                                      where=replica.address).as_dict())
        return rows

    def _report_change(self, rows: list[dict[str, Any]]) -> None:
        if rows != self._last:
            print(report_line({"kind": "replicas", "replicas": rows}), flush=True)
            self._last = rows

    def startup(self, polls: list[dict[str, Any]]) -> dict[str, Any]:
        """The moments of the job's start as this driver saw them (``manifests.ray.ray_startup`` reads them): its
        placement group asked for and granted, and each replica's actor placed, command started, first line and
        first progress record (epoch seconds), master first."""
        assert self.plan is not None
        return {"created": self._asked, "admitted": self._admitted,
                "replicas": [{"name": replica.name, **poll["moments"]}
                             for replica, poll in zip(self.plan.replicas, polls)]}

    def _report_startup(self, polls: list[dict[str, Any]]) -> None:
        """The startup report, once, when the master printed its first progress record (the job trains: the task
        says its startup then); the outcome carries the final one."""
        if self.startup_sent is None and polls[0]["moments"]["first_report"] is not None:
            self.startup_sent = self.startup(polls)
            print(report_line({"kind": "startup", **self.startup_sent}), flush=True)

    def _report_live(self) -> None:
        """The master's document, at most every ``LIVE_INTERVAL`` and on change (the replicas' lines are the task
        log's: the ending report carries them)."""
        now = time.monotonic()
        if now < self._live_at:
            return
        self._live_at = now + LIVE_INTERVAL
        document = ray.get(self.actors[0].read.remote(self.layout.output_path))
        if document != self._last_live:
            self._last_live = document
            print(report_line({"kind": "live", "document": document}), flush=True)

    def _wait(self) -> dict[str, Any]:
        assert self.plan is not None
        job = self.job
        while True:
            polls = ray.get([actor.poll.remote() for actor in self.actors])
            self._report_change(self._statuses(polls))
            self._report_startup(polls)
            failed = sorted((position for position, poll in enumerate(polls) if poll["exit_code"] not in (None, 0)),
                            key=lambda position: polls[position]["exited_at"] or 0.0)
            if failed:
                first = failed[0]
                stopped = self._stop_all(job["stop_grace_period"], polls)
                polls = ray.get([actor.poll.remote() for actor in self.actors])
                return self._outcome(Ending.EXITED, polls, stopped, deciding=first)
            self._report_live()
            self._master_lines = polls[0]["lines"]
            why = self.hang() if self.hang is not None and all(poll["exit_code"] is None for poll in polls) else None
            if why is not None:
                return self._hung(why, polls)
            if polls[0]["exit_code"] == 0:
                settle_until = time.monotonic() + job["settle_period"]
                while time.monotonic() < settle_until and any(poll["exit_code"] is None for poll in polls):
                    time.sleep(min(0.2, job["poll_interval"]))
                    polls = ray.get([actor.poll.remote() for actor in self.actors])
                stopped = self._stop_all(job["stop_grace_period"], polls)
                polls = ray.get([actor.poll.remote() for actor in self.actors])
                if not job.get("keep_checkpoints") and self.layout.checkpoint_dir:
                    removed = ray.get(self.actors[0].remove_checkpoints.remote(self.layout.checkpoint_dir,
                                                                               self.job["job_name"]))
                    if removed:
                        print(f"job {job['job_name']} succeeded: removed its {removed} checkpoint files "
                              "(keep_checkpoints=False)", flush=True)
                return self._outcome(Ending.SUCCEEDED, polls, stopped)
            time.sleep(job["poll_interval"])

    def _hung(self, why: str, polls: list[dict[str, Any]]) -> dict[str, Any]:
        """Each replica dumps its stacks (its processes that imported ``tracking``), then every replica is stopped;
        the ``hung`` outcome quotes each one's last lines (the stacks among them)."""
        assert self.plan is not None
        print(f"{why}: asking the replicas for their stacks, then stopping them", flush=True)
        ray.get([actor.dump_stacks.remote(STACKS_SIGNAL.name, self._stacks_dir(replica.name))
                 for replica, actor in zip(self.plan.replicas, self.actors)])
        time.sleep(STACKS_WAIT)
        stopped = self._stop_all(self.job["stop_grace_period"], polls)
        polls = ray.get([actor.poll.remote() for actor in self.actors])
        report = self._outcome(Ending.HUNG, polls, stopped)
        report["message"] = why
        return report

    def _stop_all(self, grace: float, polls: list[dict[str, Any]]) -> set[int]:
        """Stop every replica still running; the positions of those that were."""
        running = {position for position, poll in enumerate(polls) if poll["exit_code"] is None}
        ray.get([self.actors[position].stop.remote(grace) for position in running])
        return running

    def _outcome(self, how: str, polls: list[dict[str, Any]], stopped: set[int],
                 deciding: int | None = None) -> dict[str, Any]:
        assert self.plan is not None
        rows = self._statuses(polls, stopped)
        self._report_change(rows)
        report: dict[str, Any] = {
            "kind": "outcome", "ending": how, "replicas": rows,
            "logs": {replica.name: poll["tail"] for replica, poll in zip(self.plan.replicas, polls)},
            # Read on failure too: metrics logged before a crash help whoever looks at the failed run.
            "document": ray.get(self.actors[0].read.remote(self.layout.output_path)),
            "startup": self.startup(polls),
        }
        if deciding is not None:
            report.update(replica=self.plan.replicas[deciding].name, exit_code=polls[deciding]["exit_code"],
                          tail=polls[deciding]["tail"])
        return report

    def clean_up(self, grace: float) -> None:
        """Stop what runs, remove each node's work folder, the actors and the placement group (the liveness key is
        the caller's)."""
        work_dir = os.path.dirname(self.layout.files_dir)
        try:
            if self.actors:
                ray.get([actor.stop.remote(grace) for actor in self.actors], timeout=grace + 10)
                ray.get([actor.remove.remote(work_dir) for actor in self.actors], timeout=10)
        except Exception as error:  # the actors go with the placement group anyway
            print(f"clean-up of the replicas: {error}", file=sys.stderr, flush=True)
        for actor in self.actors:
            ray.kill(actor)
        if self.group is not None:
            remove_placement_group(self.group)


def _stopped(signum: int, frame: Any) -> None:
    raise JobStopped()


def main() -> int:
    job = json.loads(os.environ[JOB_VARIABLE])
    ray.init(log_to_driver=True)
    # After ray.init, which sets its own SIGTERM handler (a bare exit): a stop must run the clean-up below.
    signal.signal(signal.SIGTERM, _stopped)
    driver = Driver(job)
    grace = job["stop_grace_period"]
    watch = LivenessWatch(job["liveness_key"], job["liveness_grace"]) if job.get("liveness_key") else None
    try:
        if watch is not None:
            watch.start()
        report = driver.run()
    except JobStopped:
        report = {"kind": "outcome", "ending": Ending.STOPPED, "replicas": driver._last,
                  **({"startup": driver.startup_sent} if driver.startup_sent is not None else {})}
        if watch is not None and watch.abandoned:  # no Ray SIGKILL follows: the replicas get their whole grace
            report["message"] = (f"no task renewed the job's liveness for {watch.grace:g}s (liveness_grace): the "
                                 "job was abandoned and stopped")
        else:
            grace = min(grace, STOP_GRACE_ON_SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not interrupted by a second stop
        driver.clean_up(grace)
        if watch is not None:
            watch.remove()
    print(report_line(report), flush=True)
    return 0 if report["ending"] == Ending.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
