"""The end of a job on ``backend="kubernetes"``: its output, its replicas' last lines, clean-up, the ``job`` XCom.

``KubernetesJobFinish`` is a job of one task instance as its end sees it (its identity, its hook, its elastic
state); ``KubernetesJobRun`` (``kubernetes_run``) adds how it starts and is waited for.

Clean-up (``clean_pod_policy``): ``all`` deletes the job (its Service; the rest goes by cascade), ``running``
deletes the pods still pending or running and keeps the finished ones (their logs) for the next try,
``none`` deletes nothing. Default: ``all`` after success or after the last try (no retry will look at them, and
nothing else would ever delete them), ``running`` after a failed try that a retry follows
(``job_run.clean_pod_policy``). A killed task deletes its job whatever the policy. Whatever the policy, the job's
Secrets (its SSH private key, its function's arguments) are deleted when it ends: pods may be kept to look at,
secrets are not; only those it has (``JobObjects.secret_names``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_distributed.backends.job_end import end_job, read_document
from airflow_distributed.backends.job_options import watch_timings
from airflow_distributed.backends.job_run import TAIL_LINES, clean_pod_policy, last_try
from airflow_distributed.backends.job_usage import usage_over_tries
from airflow_distributed.backends.kubernetes_elastic import ElasticRestarts
from airflow_distributed.exceptions import KubernetesJobError
from airflow_distributed.frameworks import get_framework
from airflow_distributed.jobstate.hang_watch import HUNG_REPLICAS
from airflow_distributed.jobstate.log_cursor import LogCursor
from airflow_distributed.jobstate.outcome import HUNG_TAIL_LINES, Ending, JobOutcome
from airflow_distributed.jobstate.pod_state import log_available, may_have_started
from airflow_distributed.jobstate.startup import POD_UNKNOWN, first_moments, job_startup, pod_startup
from airflow_distributed.jobstate.usage import pod_run
from airflow_distributed.manifests.kubernetes import MAIN_CONTAINER, job_secret_names
from airflow_distributed.outputs import parse_output_document
from airflow_distributed.replica.live_report import without_records
from airflow_distributed.status import ReplicaState, ReplicaStatus

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.backends.base import ForCluster, TaskCalls
    from airflow_distributed.hooks.kubernetes import PodJobHook
    from airflow_distributed.jobstate.verdicts import ReplicaSlot

CLEANUP_NOTES = {
    "all": "the job was deleted",
    "running": "its pods still running were deleted; the finished ones are kept until the next try",
    "none": "its pods were left as they are (clean_pod_policy='none')",
}
#: Seconds between two looks at a succeeded job's pods while its replicas still running get ``finish_grace`` to end.
SETTLE_PAUSE = 0.5
#: Seconds (within ``finish_grace``) a succeeded job's replicas last seen starting get to be reported running or
#: ended: a real kubelet reports a container's start and end 1-2 s late (its one-second relist, then its status sync).
LATE_REPORT = 3.0
#: The note of a ``running`` the user chose, after the last try: no try comes to delete the finished pods.
KEPT_AFTER_LAST_TRY = ("its pods still running were deleted; the finished ones and the job's Service are kept, as "
                       "clean_pod_policy='running' asks: delete the Service when done with them")


class KubernetesJobFinish:
    """One job of one task instance (its replicas, its hook), and what its end does."""

    def __init__(self, task: TaskCalls, settings: ForCluster, context: Context, namespace: str, name: str,
                 slots: Sequence[ReplicaSlot], framework: str, hook: PodJobHook) -> None:
        self.task, self.settings, self.context = task, settings, context
        self.namespace, self.name = namespace, name
        self.slots = tuple(slots)
        self.framework = framework
        self.hook = hook
        self.log = task.log
        self.started = time.monotonic()
        #: an elastic job's budget and what it did with it (see ``kubernetes_elastic``)
        self.elastic = ElasticRestarts()
        #: each followed replica's log place, ``{replica: (its pod's uid, LogCursor)}``: kept across the waits of a
        #: try (no line twice), and where its first line and first progress report were (the startup phases)
        self.log_cursors: dict[str, tuple[str, LogCursor]] = {}
        #: the job's Secrets, deleted by name when it ends (``JobObjects.secret_names``); ``None`` when not known
        #: (resumed from a trigger of a release that did not carry them): every name a job may have
        self.secrets: tuple[str, ...] | None = None

    @property
    def master(self) -> ReplicaSlot:
        return self.slots[0]

    def tail(self, replica: str, pods: Mapping[str, Any], container: str | None = None,
             lines: int = TAIL_LINES, timestamps: bool = False) -> list[str]:
        """A replica's last lines (with ``timestamps``: as read, timestamped, live records included); best effort: a
        log that cannot be read decides nothing."""
        if pods.get(replica) is None:
            return []
        try:
            read = self.hook.read_log_tail(self.namespace, replica, lines, container or MAIN_CONTAINER,
                                           timestamps=timestamps)
            return read if timestamps else without_records(read)
        except KubernetesJobError as error:
            self.log.warning("could not read the last lines of %s: %s", replica, error)
            return []

    def finish(self, outcome: JobOutcome, elapsed: float) -> dict[str, Any]:
        """Output, logs, clean-up, XCom; raises ``DistributedJobError`` unless the job succeeded."""
        killed = outcome.ending == Ending.STOPPED
        hung = outcome.ending == Ending.HUNG  # deleted whole, as a kill: a hung job's pods hold their GPUs
        outcome = self.settled(outcome)
        try:
            if hung:
                outcome = replace(outcome, logs=self.hung_logs(outcome))
            document, outcome = self._collect(outcome, killed or hung)
        except BaseException:
            # Whatever could not be read, the pods must not outlive the task.
            self.clean_up_quietly(outcome.succeeded, killed or hung)
            raise
        stopped = self.clean_up(outcome.succeeded, kill=killed or hung)
        return end_job(self.context, self.log, name=self.name, framework=self.framework, backend="kubernetes",
                       outcome=outcome if outcome.succeeded else self.elastic.failed(outcome), document=document,
                       replicas=after_cleanup(self.elastic.with_dropped(outcome.replicas, self.slots), stopped),
                       logs=outcome.logs, elapsed=elapsed, namespace=self.namespace,
                       usage=self.usage(outcome.pods, elapsed), startup=self.startup(outcome.pods),
                       cleanup="the job was deleted" if killed or hung else self.cleanup_note(False),
                       startup_timeout=self.settings.startup_timeout, queue_timeout=self.settings.options.queue_timeout)

    def settled(self, outcome: JobOutcome) -> JobOutcome:
        """A succeeded job whose clean-up would delete replicas still running: they get ``finish_grace`` seconds to
        end on their own (one LIST every ``SETTLE_PAUSE``), and the outcome their states as they ended. Workers
        leave the process group a moment after the master: deleted at once, they would read ``stopped`` and the
        user could not tell a worker that finished from one that was cut off. Replicas last seen starting
        (``pod_state.may_have_started``: scheduled, nothing holding them back) are looked at again for up to
        ``LATE_REPORT`` seconds (within ``finish_grace``): a real kubelet reports a short replica's run late, and
        one that ran and exited 0 must not read ``pending``. Those not scheduled, or held back (an image that cannot
        be pulled), are not waited for; a look that fails keeps the states as they were (the clean-up says
        ``stopped``)."""
        grace = watch_timings(self.settings).grace_after_success()
        if not outcome.succeeded or grace <= 0 or self.policy(True) == "none":
            return outcome
        running = sum(self.ends_by_itself(row) for row in outcome.replicas)
        starting = {row.name for row in outcome.replicas
                    if row.state == ReplicaState.PENDING and may_have_started(outcome.pods.get(row.name))}
        if not running and not starting:
            return outcome
        slots = self.elastic.watched(self.slots)
        late = min(grace, LATE_REPORT)
        self.log.info("job %s/%s succeeded: waiting up to %gs for its %d replica(s) still running to end and up to "
                      "%gs for the %d last seen starting to be reported", self.namespace, self.name, grace, running,
                      late, len(starting))
        began = time.monotonic()
        try:
            while True:
                tracker = self.hook.job_tracker(self.namespace, self.name, slots)
                rows = tracker.statuses()
                waited = time.monotonic() - began
                if waited >= grace or (
                        not any(self.ends_by_itself(row) for row in rows)
                        and (waited >= late or not any(row.state == ReplicaState.PENDING and row.name in starting
                                                       for row in rows))):
                    break
                time.sleep(SETTLE_PAUSE)
        except KubernetesJobError as error:
            self.log.warning("could not look at the pods of job %s/%s again (%s): the replicas still running are "
                             "deleted", self.namespace, self.name, error)
            return outcome
        return replace(outcome, replicas=rows, pods={**outcome.pods, **tracker.last_pods()})

    def ends_by_itself(self, row: ReplicaStatus) -> bool:
        """Whether a replica still running may end on its own: not a standby replica of a launcher model (its
        sshd, which the launcher's ranks were started through, runs until the pod is deleted: waiting for it would
        cost every such job its whole ``finish_grace``)."""
        if row.state != ReplicaState.RUNNING:
            return False
        return row.name == self.master.name or not get_framework(self.framework).launches_over_ssh

    def hung_logs(self, outcome: JobOutcome) -> dict[str, list[str]]:
        """The last lines of a hung job's replicas (the first ``HUNG_REPLICAS``), after asking each to print its
        Python stacks (pods/exec; the processes that imported ``tracking`` print them). A replica that could not
        be asked is said so in the task log, and its last lines are quoted all the same."""
        pods = outcome.pods
        names = [slot.name for slot in self.elastic.watched(self.slots) if pods.get(slot.name)][:HUNG_REPLICAS]
        self.hook.dump_stacks(self.namespace, names, MAIN_CONTAINER)
        return {name: self.tail(name, pods, lines=HUNG_TAIL_LINES) for name in names}

    def usage(self, pods: Mapping[str, Any], elapsed: float) -> dict[str, Any]:
        """What the job cost, from its pods' requests and start and end times (those replaced before included)."""
        now = time.time()
        runs = [*self.elastic.earlier_runs,
                *(pod_run(slot.name, pods.get(slot.name), now) for slot in self.elastic.watched(self.slots))]
        return usage_over_tries(self.context, runs, elapsed, self.log)

    def startup(self, pods: Mapping[str, Any]) -> dict[str, Any]:
        """The job's startup phases from the pods the wait read and the logs it followed (no request of its own):
        a replica's first line and report count only if they are its current pod's (an elastic job's recreated pod
        is followed from its start)."""
        current = {name: cursor for name, (uid, cursor) in self.log_cursors.items()
                   if uid and uid == str(((pods.get(name) or {}).get("metadata") or {}).get("uid") or "")}
        firsts = first_moments(current.items())
        replicas = [pod_startup(slot.name, pods.get(slot.name), first_line=firsts.get(slot.name, (None, None))[0],
                                first_report=firsts.get(slot.name, (None, None))[1])
                    for slot in self.elastic.watched(self.slots)]
        return job_startup(replicas, master=self.master.name, unknown=POD_UNKNOWN)

    def _collect(self, outcome: JobOutcome, killed: bool) -> tuple[dict[str, Any], JobOutcome]:
        """The output document, and the outcome with the failed replica's last lines (or its pod's events) and the
        master's last lines added to its logs."""
        pods = outcome.pods
        document = self._document(pods) if not killed else parse_output_document(None)
        logs = {name: list(lines) for name, lines in outcome.logs.items()}
        tail: list[str] = []
        events: list[str] = []
        if outcome.replica is not None:
            if outcome.ending == Ending.EXITED:
                tail = logs[outcome.replica] = self.tail(outcome.replica, pods, outcome.container)
            elif outcome.ending in (Ending.NOT_STARTED, Ending.QUEUED) and pods.get(outcome.replica) is not None:
                events = self.hook.pod_events(self.namespace, outcome.replica)
        if not killed and self.master.name not in logs and log_available(pods.get(self.master.name)):
            logs[self.master.name] = self.tail(self.master.name, pods)
        return document, replace(outcome, tail=tuple(tail), events=tuple(events), logs=logs)

    def _document(self, pods: Mapping[str, Any]) -> dict[str, Any]:
        master = pods.get(self.master.name)
        return read_document(self.hook.read_output(self.namespace, master) if master is not None else None, self.log)

    # ------------------------------------------------------------------ clean-up

    def policy(self, succeeded: bool) -> str:
        return clean_pod_policy(self.settings, succeeded, self.context)

    def clean_up(self, succeeded: bool, kill: bool = False) -> bool:
        """Apply the clean-up policy (a kill deletes everything), then delete the job's Secrets whatever the policy;
        returns whether unfinished pods were deleted."""
        policy = "all" if kill else self.policy(succeeded)
        try:
            if policy == "all":
                self.hook.delete_job(self.namespace, self.name)
            elif policy == "running":
                self.hook.delete_unfinished_pods(self.namespace, self.name)
        finally:
            delete_secrets(self.hook, self.namespace, self.name, self.secrets)
        return policy != "none"

    def clean_up_quietly(self, succeeded: bool = False, kill: bool = False) -> bool:
        """``clean_up``, its failure logged rather than raised (the task fails with what came before it); returns
        whether it was done."""
        try:
            self.clean_up(succeeded, kill=kill)
        except Exception as error:
            self.log.error("could not clean up job %s/%s: %s", self.namespace, self.name, error)
            return False
        return True

    def cleanup_note(self, succeeded: bool) -> str:
        policy = self.policy(succeeded)
        if policy == "running" and not succeeded and last_try(self.context):
            return KEPT_AFTER_LAST_TRY
        return CLEANUP_NOTES[policy]


def delete_secrets(hook: PodJobHook, namespace: str, name: str, secrets: Sequence[str] | None) -> None:
    """Delete the Secrets of job ``name`` (its SSH key pair, its secret files) by name: the cascade from the Service
    does it only when the Service goes, which a clean-up policy that keeps pods does not do.

    :param secrets: the Secrets the job has (``JobObjects.secret_names``): no request for one it never had;
        ``None``: not known, every name a job may have.
    """
    names = job_secret_names(name) if secrets is None else secrets
    if names:
        hook.delete_secrets(namespace, names)


def after_cleanup(rows: Sequence[ReplicaStatus], deleted: bool) -> tuple[ReplicaStatus, ...]:
    """Replicas still pending or running when their pods were deleted are ``stopped``."""
    if not deleted:
        return tuple(rows)
    return tuple(replace(row, state=ReplicaState.STOPPED) if row.state in (ReplicaState.PENDING, ReplicaState.RUNNING)
                 else row for row in rows)


__all__ = ["LATE_REPORT", "SETTLE_PAUSE", "KubernetesJobFinish", "after_cleanup", "delete_secrets"]
