"""PaddlePaddle collective mode: one trainer per replica, the master is trainer 0 and hosts the job's store.

The variables are those ``paddle.distributed.init_parallel_env`` reads (and ``paddle.distributed.launch`` sets for
the processes it starts): every trainer's endpoint, this trainer's, its id and the trainer count. Without
``MASTER_ADDR``/``MASTER_PORT`` or ``PADDLE_MASTER``, Paddle puts its TCP store on the first endpoint, trainer 0's
port, so the master's port is where every trainer meets.
"""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role, rank_of


class Paddle(Framework):
    name = "paddle"
    roles = (Role("master", None), Role("worker", "worker"))
    # PaddleJob's default port.
    default_port = 36543

    def replica_env(self, replica, plan, backend):
        return {
            "PADDLE_TRAINER_ENDPOINTS": ",".join(r.address for r in plan.replicas),
            "PADDLE_CURRENT_ENDPOINT": replica.address,
            "PADDLE_TRAINER_ID": str(rank_of(replica)),
            "PADDLE_TRAINERS_NUM": str(len(plan.replicas)),
        }
