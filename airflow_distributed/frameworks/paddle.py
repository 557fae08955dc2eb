"""PaddlePaddle: collective mode (trainers only) or parameter-server mode (pservers + trainers), chosen by ``n_ps``.

The master is trainer 0 in both modes, its exit decides the job (CONTRACT.md), and worker i is trainer i + 1.

Collective mode (``n_ps`` 0): the variables ``paddle.distributed.init_parallel_env`` reads (and
``paddle.distributed.launch`` sets for the processes it starts): every trainer's endpoint, this trainer's, its id and
the trainer count. Without ``MASTER_ADDR``/``MASTER_PORT`` or ``PADDLE_MASTER``, Paddle puts its TCP store on the
first endpoint, trainer 0's port, so the master's port is where every trainer meets.

Parameter-server mode (``n_ps`` >= 1, the seeds' pserver/trainer set-up): the variables Fleet's
``PaddleCloudRoleMaker(is_collective=False)`` reads, as ``paddle.distributed.launch`` sets them in its ps mode:
``TRAINING_ROLE`` (``PSERVER``/``TRAINER``), ``PADDLE_PSERVERS_IP_PORT_LIST``, ``PADDLE_TRAINER_ENDPOINTS``,
``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID`` (trainers), and ``POD_IP``/``PADDLE_PORT``, this replica's own
endpoint: a pserver finds its id as the position of ``POD_IP:PADDLE_PORT`` in the pserver list and serves on it.
Pservers never end by themselves; the backend stops them once the master has ended.
"""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role, rank_of
from airflow_distributed.launch import Operator

PSERVER = "pserver"


class Paddle(Framework):
    name = "paddle"
    # Pservers before workers, so that they are up when the trainers connect (as TensorFlow's ps).
    roles = (Role("master", None), Role(PSERVER, "ps"), Role("worker", "worker"))
    # PaddleJob's default port.
    default_port = 36543

    def replica_env(self, replica, plan):
        trainers = [r for r in plan.replicas if r.role != PSERVER]
        pservers = [r for r in plan.replicas if r.role == PSERVER]
        trainer_endpoints = ",".join(r.address for r in trainers)
        if not pservers:
            return {
                "PADDLE_TRAINER_ENDPOINTS": trainer_endpoints,
                "PADDLE_CURRENT_ENDPOINT": replica.address,
                "PADDLE_TRAINER_ID": str(rank_of(replica)),
                "PADDLE_TRAINERS_NUM": str(len(trainers)),
            }
        role = "PSERVER" if replica.role == PSERVER else "TRAINER"
        env = {
            "TRAINING_ROLE": role,
            # paddle.distributed.launch sets both names; scripts written for it read either.
            "PADDLE_ROLE": role,
            "PADDLE_PSERVERS_IP_PORT_LIST": ",".join(r.address for r in pservers),
            "PADDLE_TRAINER_ENDPOINTS": trainer_endpoints,
            "PADDLE_TRAINERS_NUM": str(len(trainers)),
            "POD_IP": replica.host,
            "PADDLE_PORT": str(replica.port),
        }
        if replica.role != PSERVER:
            env["PADDLE_TRAINER_ID"] = str(rank_of(replica))
        return env

    def kept_env(self, replica, plan):
        # The PaddleJob operator sets none of the trainer variables (only PADDLE_MASTER and launch's own).
        return self.replica_env(replica, plan) if plan.launch.operator is Operator.TRAINING_OPERATOR else {}

    def first_peers(self, replica, plan):
        pservers = [(r.host, r.port) for r in plan.replicas if r.role == PSERVER]
        if not pservers:
            return super().first_peers(replica, plan)
        # Parameter-server mode: trainers (the master included) connect to the pservers, which connect to nobody;
        # the master itself listens on nothing there, so nobody may wait for it.
        return [] if replica.role == PSERVER else pservers
