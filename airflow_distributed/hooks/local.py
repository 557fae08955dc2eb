"""Local backend: every replica is a subprocess of the Airflow worker, in a process group of its own."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

import psutil

from airflow_distributed.elastic import CONTINUE, RESTART, ElasticPlan, after_replica_ended, agent_restarted
from airflow_distributed.jobstate.outcome import Ending, JobOutcome
from airflow_distributed.logs import TaskLog
from airflow_distributed.manifests.local import ProcessSpec
from airflow_distributed.replica.checkpoints import CHECKPOINT_FILE, written_checkpoints, written_list_path
from airflow_distributed.replica.live_report import is_record, reports_progress
from airflow_distributed.status import ReplicaState, ReplicaStatus

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
TAIL_LINES = 40
#: A job's work folder and files: its user's only (they may hold rendered secrets).
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
#: What a hung job's replicas are sent to dump their Python stacks (``tracking`` registers ``faulthandler`` for it).
STACKS_SIGNAL = signal.SIGUSR1
#: How long a hung job's replicas get to print their stacks before they are stopped.
STACKS_WAIT = 1.0
#: Between two processes that share a replica's output (a launcher's ranks): faulthandler writes a dump in many small
#: writes, so dumps signalled together interleave mid-line in the one pipe; one at a time, each reads whole.
STACKS_STAGGER = 0.1


def die_with_parent(sig: int = signal.SIGKILL) -> None:  # pragma: no cover - runs in the child before exec
    # If the Airflow task process is SIGKILLed it cannot stop its replicas; the kernel does it instead (``sig``: a
    # launcher is sent one it handles, so that it stops the workers it started in sessions of their own).
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)
    except OSError:
        pass


class LocalReplicaProcess:
    """One running replica: its process, its output pump and the last lines it printed."""

    def __init__(self, spec: ProcessSpec, cwd: str, emit: Callable[[str, str], None], *, restarts: int = 0,
                 count_restarts: Callable[[str], bool] | None = None,
                 earlier_runs: Sequence[tuple[float, float]] = ()) -> None:
        self.spec = spec
        self.cwd = cwd
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        #: lines printed so far (the hang watchdog's sign of life)
        self.lines = 0
        self.exit_code: int | None = None
        self.exited_at: float | None = None
        self.stopped = False
        #: restarts so far: of this replica by the backend, and of its workers by an elastic agent inside it
        self.restarts = restarts
        #: a replica left out of an elastic job that carries on without it: its exit no longer decides anything
        self.dropped = False
        #: its descendants as last seen alive (``remember_family``): torchrun starts its workers in sessions of
        #: their own, so when the agent is killed they are orphans that neither its process group nor its
        #: process tree reaches any more
        self.known_family: list[psutil.Process] = []
        self._count_restarts = count_restarts
        #: (start, end) wall-clock times of the runs this replica had before this process (``job_usage``)
        self.earlier_runs = tuple(earlier_runs)
        self.started_at = time.time()
        self.ended_at: float | None = None
        #: when it printed its first line and its first progress record (epoch seconds; the startup phases): a
        #: replica started again keeps those of its first run
        self.first_line_at: float | None = None
        self.first_progress_at: float | None = None
        self.process = subprocess.Popen(
            list(spec.argv),
            env=dict(spec.env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        self._emit = emit
        self._pump = threading.Thread(target=self._read, name=f"log-{spec.name}", daemon=True)
        self._pump.start()
        # The exit is watched apart from the output: a child that outlives the replica (an elastic agent's worker,
        # in a session of its own) keeps the pipe open, and the replica's end must not wait for it.
        self._reaper = threading.Thread(target=self._wait, name=f"exit-{spec.name}", daemon=True)
        self._reaper.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if is_record(line):  # the job view's live record: the local backend reads the document itself
                if self.first_progress_at is None and reports_progress(line):
                    self.first_progress_at = time.time()
                continue
            if self.first_line_at is None:
                self.first_line_at = time.time()
            self.tail.append(line)
            self.lines += 1
            if self._count_restarts is not None and self._count_restarts(line):
                self.restarts += 1
            self._emit(self.spec.name, line)
        self.process.stdout.close()

    def _wait(self) -> None:
        code = self.process.wait()
        self.ended_at = time.time()
        exited_at = time.monotonic()  # which replica ended first decides what the failure names
        # Its last lines first (briefly: a surviving child may hold the pipe), so the exit is seen with them.
        self._pump.join(1.0)
        self.exited_at = exited_at
        self.exit_code = code

    @property
    def pid(self) -> int:
        return self.process.pid

    def state(self) -> ReplicaState:
        if self.exit_code is None:
            return ReplicaState.RUNNING
        if self.stopped and self.exit_code != 0:
            return ReplicaState.STOPPED
        return ReplicaState.SUCCEEDED if self.exit_code == 0 else ReplicaState.FAILED

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(
            self.spec.name, self.spec.role, self.spec.index, self.state(), self.exit_code, where=f"pid {self.pid}",
            restarts=self.restarts, processes=self.spec.processes, gpus=self.spec.gpus,
        )

    def remember_family(self) -> None:
        # Kept when none are seen: between two worker groups, or once the replica is gone and its children with it
        # from its tree (they may live on as orphans, which is the point).
        descendants = self.family()[1:] if self.exit_code is None else []
        if descendants:
            self.known_family = descendants

    def restarted(self) -> LocalReplicaProcess:
        """The same replica started again (same name, address and variables), its restart counted."""
        # What the lost process left behind (an agent's workers) goes first: its port is reused, and an orphaned
        # worker would go on training with the others.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _signal((), self.known_family, signal.SIGKILL)
        psutil.wait_procs(self.known_family, timeout=5.0)
        self.join_output(2.0)
        again = LocalReplicaProcess(self.spec, self.cwd, self._emit, restarts=self.restarts + 1,
                                    count_restarts=self._count_restarts, earlier_runs=self.runs())
        again.first_line_at, again.first_progress_at = self.first_line_at, self.first_progress_at
        return again

    def runs(self) -> tuple[tuple[float, float], ...]:
        """(start, end) wall-clock times of every run of this replica, this one to now while it runs."""
        return (*self.earlier_runs, (self.started_at, self.ended_at if self.ended_at is not None else time.time()))

    def family(self) -> list[psutil.Process]:
        """The replica and every descendant, including ones that left its process group."""
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def wait_exit(self, timeout: float) -> None:
        """Until its exit is known (``exit_code``), at most ``timeout`` seconds."""
        self._reaper.join(timeout)

    def join_output(self, timeout: float) -> None:
        self._pump.join(timeout)
        self._reaper.join(timeout)


def _registered_pids(folder: str | None) -> set[int] | None:
    """The pids that registered their stack dump in ``folder``; ``None`` without a folder."""
    if folder is None:
        return None
    try:
        return {int(entry) for entry in os.listdir(folder) if entry.isdigit()}
    except OSError:
        return set()


def _stack_dumpers(replica: LocalReplicaProcess, registered: set[int] | None) -> list[int]:
    """The processes of ``replica`` to send ``STACKS_SIGNAL``: those of its tree that registered for it, so that a
    launcher's processes (torchrun's ranks) print theirs and the launcher, which would end on the signal, is not
    sent it; the replica's own process where nothing says who registered."""
    if registered is None:
        return [replica.pid]
    return [process.pid for process in replica.family() if process.pid in registered]


class LocalJob:
    """The replicas of one job on this machine; ``stop()`` leaves none of their processes behind."""

    def __init__(
        self,
        replicas: Sequence[LocalReplicaProcess],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        elastic: ElasticPlan | None = None,
        logger: logging.Logger | TaskLog | None = None,
        stacks_dir: str | None = None,
    ) -> None:
        self.replicas = list(replicas)
        self._clock, self._sleep = clock, sleep
        self.elastic = elastic
        self._log = logger or log
        #: where each process that registered its stack dump left a file named by its pid (``stack_dump``)
        self.stacks_dir = stacks_dir

    @property
    def master(self) -> LocalReplicaProcess:
        return next(r for r in self.replicas if r.spec.is_master)

    def statuses(self) -> tuple[ReplicaStatus, ...]:
        return tuple(r.status() for r in self.replicas)

    def wait(
        self,
        *,
        poll_interval: float = 0.2,
        timeout: float | None = None,
        settle: float = 5.0,
        on_change: Callable[[tuple[ReplicaStatus, ...]], None] | None = None,
        on_poll: Callable[[tuple[ReplicaStatus, ...]], None] | None = None,
        hung: Callable[[], str | None] | None = None,
    ) -> JobOutcome:
        """Until the master succeeds or any replica fails; then the rest are stopped.

        :param settle: after the master succeeds, how long the others get to finish on their own.
        :param on_poll: called with the replicas' states at every poll while the job runs (it paces itself).
        :param hung: asked at every poll while every replica runs: why the job is hung, or ``None``. A hung job's
            replicas are sent ``STACKS_SIGNAL``, given ``STACKS_WAIT`` to print their stacks, and stopped.
        """
        deadline = None if timeout is None else self._clock() + timeout
        last: tuple[ReplicaStatus, ...] = ()
        while True:
            current = self.statuses()
            if current != last and on_change:
                on_change(current)
            last = current
            failed = sorted(
                (r for r in self.replicas if r.exit_code not in (None, 0) and not r.stopped and not r.dropped),
                key=lambda r: r.exited_at or 0.0,
            )
            if failed:
                first = failed[0]
                reason = None
                if self.elastic is not None:
                    decision = self._after_failure(first)
                    if decision is None:
                        continue
                    reason = decision
                self.stop()
                first.join_output(1.0)
                return JobOutcome(Ending.GAVE_UP if reason else Ending.EXITED, self.statuses(), first.spec.name,
                                  first.exit_code, reason, tail=tuple(first.tail))
            if self.master.exit_code == 0:
                self._settle(settle)
                self.stop()
                return JobOutcome(Ending.SUCCEEDED, self.statuses())
            if all(r.exit_code is not None for r in self.replicas):
                # Everything exited without the master succeeding: the job was stopped (on_kill) under us.
                return JobOutcome(Ending.STOPPED, self.statuses())
            if deadline is not None and self._clock() >= deadline:
                self.stop()
                return JobOutcome(Ending.TIMED_OUT, self.statuses())
            why = hung() if hung is not None and all(r.exit_code is None for r in self.replicas) else None
            if why is not None:
                return self._hung(why)
            if self.elastic is not None:
                for replica in self.replicas:
                    replica.remember_family()
            if on_poll:
                on_poll(current)
            self._sleep(poll_interval)

    def _hung(self, why: str) -> JobOutcome:
        """Each replica dumps its stacks (where its script imported ``tracking``), then every replica is stopped."""
        running = [r for r in self.replicas if r.exit_code is None]
        registered = _registered_pids(self.stacks_dir)
        for replica in running:
            for position, pid in enumerate(_stack_dumpers(replica, registered)):
                if position:
                    self._sleep(STACKS_STAGGER)
                try:
                    os.kill(pid, STACKS_SIGNAL)
                except (ProcessLookupError, PermissionError):
                    pass
        self._sleep(STACKS_WAIT)
        self.stop()
        return JobOutcome(Ending.HUNG, self.statuses(), message=why,
                          logs={r.spec.name: tuple(r.tail) for r in running})

    def _after_failure(self, replica: LocalReplicaProcess) -> str | None:
        """An elastic job's answer to a replica that ended badly: restart it or carry on (``None``), or the
        reason the job fails."""
        assert self.elastic is not None
        replica.join_output(1.0)  # its agent's last lines may still count a restart
        left = sum(1 for r in self.replicas if r is not replica and r.exit_code is None)
        decision = after_replica_ended(self.elastic, name=replica.spec.name, is_master=replica.spec.is_master,
                                       exit_code=replica.exit_code, restarts=replica.restarts, left=left)
        self._log.warning("%s", decision.message)
        if decision.action == RESTART:
            self.replicas[self.replicas.index(replica)] = replica.restarted()
            return None
        if decision.action == CONTINUE:
            replica.dropped = True
            return None
        return decision.message

    def _settle(self, settle: float) -> None:
        end = self._clock() + settle
        while self._clock() < end and any(r.exit_code is None for r in self.replicas):
            self._sleep(0.05)

    def stop(self, grace: float = 5.0) -> None:
        """TERM every replica's process group and descendants, KILL what is left after ``grace``."""
        running = [r for r in self.replicas if r.exit_code is None]
        for replica in running:
            replica.stopped = True
        # A replica's own process is reaped by its own thread only (``_wait``): had another waiter (psutil's)
        # reaped it first, Popen would read the exit of a killed replica as 0 (its waitpid fails with ECHILD), and
        # a stopped job as succeeded. psutil waits for their descendants, which are not this process's children.
        own = {replica.pid for replica in self.replicas}
        family = [p for r in self.replicas for p in (r.family() or r.known_family) if p.pid not in own]
        _signal(running, family, signal.SIGTERM)
        gone_by = time.monotonic() + grace
        _, alive = psutil.wait_procs(family, timeout=grace)
        if not _exited(running, gone_by) or alive:
            _signal(running, alive, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=max(0.0, gone_by - time.monotonic()) + 5.0)
        for replica in self.replicas:
            try:
                replica.process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - after SIGKILL this does not happen
                log.error("replica %s (pid %s) did not exit after SIGKILL", replica.spec.name, replica.pid)
            replica.join_output(2.0)


def _exited(replicas: Iterable[LocalReplicaProcess], deadline: float) -> bool:
    """Whether every one of ``replicas`` exited by ``deadline`` (``time.monotonic``), as its own thread saw it."""
    for replica in replicas:
        replica.wait_exit(max(0.0, deadline - time.monotonic()))
    return all(replica.exit_code is not None for replica in replicas)


def _signal(replicas: Iterable[LocalReplicaProcess], family: Iterable[psutil.Process], sig: int) -> None:
    """``sig`` to each replica's process group (a replica leads its own: it started a session) and to ``family``."""
    for replica in replicas:
        try:
            os.killpg(replica.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in family:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


class LocalProcessHook:
    """Starts a job's replicas as local processes; the operator talks to it as it does to the Kubernetes hook.

    Not an Airflow connection hook: the local backend needs no connection. Clock and sleep are injectable
    so timeouts are tested without waiting.
    """

    hook_name = "Distributed training (local processes)"

    def __init__(
        self,
        *,
        logger: TaskLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.log = logger or log
        self._clock, self._sleep = clock, sleep

    @staticmethod
    def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
        """Ports free right now; all sockets are held until every port is picked, so none repeats."""
        sockets = []
        try:
            for _ in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind((host, 0))
                sockets.append(sock)
            return [s.getsockname()[1] for s in sockets]
        finally:
            for sock in sockets:
                sock.close()

    @staticmethod
    def visible_gpus() -> list[str]:
        """GPU ids this worker may hand out: ``CUDA_VISIBLE_DEVICES`` if set, else what ``nvidia-smi`` lists."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            return [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
        smi = shutil.which("nvidia-smi")
        if not smi:
            return []
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]

    @staticmethod
    def make_work_dir(work_dir: str) -> None:
        """Create the job's work folder (its files, output document) readable by this user only (0700): the files
        may hold a function's arguments, and the output its return value."""
        os.makedirs(work_dir, mode=PRIVATE_DIR_MODE, exist_ok=True)
        os.chmod(work_dir, PRIVATE_DIR_MODE)  # makedirs leaves an existing folder's mode, and applies the umask

    @staticmethod
    def remove_work_dir(work_dir: str) -> None:
        """Remove the job's work folder and everything in it, once the job has ended and its output was read."""
        shutil.rmtree(work_dir, ignore_errors=True)

    def write_files(self, files_dir: str, files: Mapping[str, str]) -> None:
        """Write the job's files, each readable by this user only (0600), in a folder of mode 0700."""
        os.makedirs(files_dir, mode=PRIVATE_DIR_MODE, exist_ok=True)
        os.chmod(files_dir, PRIVATE_DIR_MODE)
        for name, text in files.items():
            fd = os.open(os.path.join(files_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
            os.fchmod(fd, PRIVATE_FILE_MODE)  # a file left by an earlier try keeps its mode otherwise
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)

    @staticmethod
    def remove_checkpoints(directory: str, job: str) -> int:
        """Remove what job ``job`` wrote in checkpoint directory ``directory``, as its list says
        (``tracking.written_checkpoints``): its checkpoint files (and the temporary files of a write cut short),
        then the folders it created, if empty, and the list. Nothing else in the directory is touched, so a shared
        directory keeps every other job's files. Returns how many checkpoint files were removed."""
        files, folders = written_checkpoints(directory, job)
        removed = 0
        for name in files:
            path = os.path.join(directory, name)
            folder, base = os.path.split(path)
            if not CHECKPOINT_FILE.match(base):
                continue
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass  # pruned by save_checkpoint's keep, or never finished
            for leftover in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(base)}.*.tmp")):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(leftover)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(written_list_path(directory, job))
        # Deepest first, so that a folder is empty by the time its parent is tried.
        paths = {os.path.normpath(os.path.join(directory, name)) for name in folders}
        for path in sorted(paths, key=lambda folder: folder.count(os.sep), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only succeeds when empty
        return removed

    def start(self, specs: Sequence[ProcessSpec], *, cwd: str, elastic: ElasticPlan | None = None,
              stacks_dir: str | None = None) -> LocalJob:
        """Start every replica; if one cannot start, the ones already started are stopped before raising.

        :param elastic: the replicas run under torch's elastic agent: one that is lost is started again within the
            budget, and the agent's restarts of its workers are counted from its log.
        :param stacks_dir: the replicas' ``AIRFLOW_DISTRIBUTED_STACKS_DIR``: a hung job's processes that registered
            there are sent ``STACKS_SIGNAL``; without it, each replica's own process.
        """
        started: list[LocalReplicaProcess] = []
        count_restarts = agent_restarted if elastic is not None else None
        try:
            for spec in specs:
                # The arguments may be rendered secrets (a password from a connection, a token from conf).
                self.log.info("starting %s: %s with %d arguments", spec.name, spec.argv[0] if spec.argv else "",
                              max(0, len(spec.argv) - 1))
                started.append(LocalReplicaProcess(spec, cwd, self._emit, count_restarts=count_restarts))
        except OSError as err:
            LocalJob(started).stop()
            raise RuntimeError(f"replica {spec.name} could not start {spec.argv[0]!r}: {err.strerror or err}") from err
        return LocalJob(started, clock=self._clock, sleep=self._sleep, elastic=elastic, logger=self.log,
                        stacks_dir=stacks_dir)

    def _emit(self, name: str, line: str) -> None:
        self.log.info("[%s] %s", name, line)

