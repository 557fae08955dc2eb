"""Distributed XGBoost (its collective, formerly Rabit): the master runs the tracker, every replica trains.

The master (rank 0) starts ``xgboost.tracker.RabitTracker`` on its own address and port, then joins it like every
worker; workers join it at ``DMLC_TRACKER_URI``/``DMLC_TRACKER_PORT``. Every replica is one training process, so
the world size is 1 + n_workers, as in Kubeflow's XGBoostJob (whose ``MASTER_*``/``WORLD_SIZE``/``RANK`` are set too).

XGBoost reads none of these variables itself: the script passes them to ``xgboost.collective.init`` (or
``CommunicatorContext``) as ``dmlc_tracker_uri``, ``dmlc_tracker_port`` and ``dmlc_task_id``.
"""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role, master_rank_env, rank_of
from airflow_distributed.launch import Operator


def task_id(rank: int, world_size: int) -> str:
    """``rank`` zero-padded to the width of the largest rank.

    The tracker (``sortby="task"``) gives ranks in the order of the task ids compared as strings, so unpadded ids
    would rank task 10 before task 2; padded, rank order is the replicas' order.
    """
    return str(rank).zfill(len(str(world_size - 1)))


class XGBoost(Framework):
    name = "xgboost"
    roles = (Role("master", None), Role("worker", "worker"))
    # XGBoostJob's default port; the tracker listens on it.
    default_port = 9999
    trainer_runtime = "xgboost-distributed"

    def replica_env(self, replica, plan):
        return {
            **self._tracker_env(replica, plan),
            # XGBoostJob's names for the same values, for scripts written for it.
            **master_rank_env(replica, plan),
        }

    def kept_env(self, replica, plan):
        # XGBoostJob's operator sets only the MASTER_*/WORLD_SIZE/RANK names; Trainer's runtime sets DMLC_* too.
        return self._tracker_env(replica, plan) if plan.launch.operator is Operator.TRAINING_OPERATOR else {}

    @staticmethod
    def _tracker_env(replica, plan):
        world_size = len(plan.replicas)
        return {
            "DMLC_TRACKER_URI": plan.master.host,
            "DMLC_TRACKER_PORT": str(plan.master.port),
            "DMLC_TASK_ID": task_id(rank_of(replica), world_size),
            "DMLC_NUM_WORKER": str(world_size),
        }
