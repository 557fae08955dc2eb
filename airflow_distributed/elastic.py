"""Elastic jobs: the restart budget of a job's replicas and what a backend does when one of them ends badly.

Pure. The backends (local processes, Kubernetes pods) keep the replicas; this module only decides. Under torch's
elastic agent a worker process that dies is restarted by the agent of its replica (torchrun restarts its worker
group and the other agents re-rendezvous); what the backend sees is a replica (the agent itself) that ended:

- lost (killed by a signal, its pod failed or was deleted): the backend restarts it under the same name and
  address while it has restarts left;
- failed (the agent gave up: its own restarts are spent, or the rendezvous timed out): not restarted; the job
  carries on only while at least ``min_workers`` replicas are left and the master is among them.

The master hosts the c10d rendezvous, so losing it ends the job whatever the budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from airflow_distributed.spec.models import TrainingSpec

Action = Literal["restart", "continue", "fail"]
RESTART: Final = "restart"
CONTINUE: Final = "continue"
FAIL: Final = "fail"

# torchrun's agent, at log level INFO, when it restarts its worker group after a failure (membership changes,
# "Detected N new nodes ... will restart worker group", do not count: torchrun does not charge them either).
_AGENT_RESTART = re.compile(r"Worker group (FAILED|UNHEALTHY)\. \d+/\d+ attempts left; will restart worker group")


@dataclass(frozen=True)
class ElasticPlan:
    """The resolved ``environment.pytorch.elastic`` of one job: counts are replicas, the master included."""

    min_replicas: int
    max_replicas: int
    max_restarts: int
    rdzv_timeout: int

    @property
    def nnodes(self) -> str:
        """torchrun's ``--nnodes``: ``MIN:MAX``."""
        return f"{self.min_replicas}:{self.max_replicas}"


def elastic_plan(spec: TrainingSpec) -> ElasticPlan | None:
    """The job's elastic settings with the defaults filled in (every replica), or ``None`` for a fixed job."""
    policy = getattr(spec.cluster, "elastic", None)
    if policy is None:
        return None
    replicas = 1 + spec.cluster.n_workers
    high = policy.max_workers if policy.max_workers is not None else replicas
    low = policy.min_workers if policy.min_workers is not None else high
    return ElasticPlan(low, high, policy.max_restarts, policy.rdzv_timeout)


def agent_restarted(line: str) -> bool:
    """Whether a line of a replica's log is its agent restarting the worker group after a failure."""
    return _AGENT_RESTART.search(line) is not None


def lost(exit_code: int | None) -> bool:
    """A replica that did not end on its own: killed by a signal (``-9`` locally, ``137`` in a container), or
    gone without an exit code (its pod failed or was deleted)."""
    return exit_code is None or exit_code < 0 or exit_code > 128


@dataclass(frozen=True)
class Decision:
    action: Action
    #: one line for the task log or the failure message, naming the replica
    message: str


def after_replica_ended(policy: ElasticPlan, *, name: str, is_master: bool, exit_code: int | None, restarts: int,
                        left: int) -> Decision:
    """What to do with replica ``name`` that ended without success.

    :param restarts: how often it was restarted so far (by its agent and by the backend).
    :param left: replicas of the job still running, this one not counted.
    """
    ended = _ended(exit_code)
    budget = f"{restarts} restart{'s' if restarts != 1 else ''} of max_restarts={policy.max_restarts}"
    if is_master:
        return Decision(FAIL, f"replica {name} (the master, which hosts the rendezvous) {ended} after {budget}")
    if lost(exit_code) and restarts < policy.max_restarts:
        return Decision(RESTART, f"replica {name} {ended}: restarting it ({restarts + 1} of "
                                 f"max_restarts={policy.max_restarts})")
    if left >= policy.min_replicas:
        return Decision(CONTINUE, f"replica {name} {ended} after {budget}; carrying on with {left} replicas "
                                  f"(min_workers={policy.min_replicas})")
    return Decision(FAIL, f"replica {name} {ended} after {budget}: {left} replica{'s' if left != 1 else ''} left, "
                          f"below min_workers={policy.min_replicas}")


def _ended(exit_code: int | None) -> str:
    if exit_code is None:
        return "was lost (its pod failed or was deleted)"
    if exit_code < 0:
        return f"was killed by signal {-exit_code}"
    if exit_code > 128:
        return f"was killed (exit code {exit_code})"
    return f"failed with exit code {exit_code}"
