"""PyTorch: a master (rank 0) and workers, rendezvous through ``MASTER_ADDR``/``MASTER_PORT`` (``env://``).

Several processes per replica (``environment.pytorch.n_proc_per_node`` > 1) or a launcher named
(``environment.pytorch.launcher``: torchrun, DeepSpeed's or Accelerate's): every replica runs the command under that
launcher (torch's by default), given the whole topology on its command line (``pytorch_launchers``); it gives each of
its processes the global ``RANK``/``WORLD_SIZE`` (replicas x processes) and ``LOCAL_RANK``, and each process checks
that world size against the plan's before it trains.

Elastic (``environment.pytorch.elastic``): every replica runs the command under torch's elastic agent
(``python3 -m torch.distributed.run``) with a c10d rendezvous hosted by the master's agent at the master's address,
so that a worker process that dies is restarted by its agent and the group forms again without failing the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_distributed.contract import ENV_WORLD_SIZE
from airflow_distributed.frameworks.base import Framework, Role, master_rank_env
from airflow_distributed.frameworks.pytorch_launchers import (
    launched_command,
    launcher_in_command,
    operator_launched_command,
    replica_launcher,
    world_size,
)
from airflow_distributed.launch import Operator


class PyTorch(Framework):
    name = "pytorch"
    roles = (Role("master", None), Role("worker", "worker"))
    default_port = 23456
    trainer_runtime = "torch-distributed"

    def replica_env(self, replica, plan):
        env = master_rank_env(replica, plan)
        env = {
            **env,
            "LOCAL_RANK": "0",
            # The same values under torchrun's names, for jobs that run torchrun in each replica.
            "PET_MASTER_ADDR": env["MASTER_ADDR"],
            "PET_MASTER_PORT": env["MASTER_PORT"],
            "PET_NNODES": env["WORLD_SIZE"],
            "PET_NODE_RANK": env["RANK"],
            "PET_NPROC_PER_NODE": str(plan.processes_per_replica),
        }
        elastic = plan.elastic
        if elastic is None:
            if plan.processes_per_replica > 1 or plan.launcher is not None:
                # torchrun passes its own variables to its processes, and the replica's on: NODE_RANK is the
                # contract's name for the replica's place among the nodes, which torchrun calls GROUP_RANK.
                env["NODE_RANK"] = env["RANK"]
            if replica_launcher(plan) is not None:
                env[ENV_WORLD_SIZE] = str(world_size(plan))
            return env
        return {
            **env,
            # torchrun reads its options from these when they are not on its command line (Kubeflow's names too).
            "PET_NNODES": elastic.nnodes,
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": plan.master.address,
            "PET_RDZV_ID": plan.job_name,
            "PET_MAX_RESTARTS": str(elastic.max_restarts),
            # The agent reports a restart of its workers at INFO only; the backends count restarts from that line.
            "LOGLEVEL": "INFO",
            # A fresh store per rendezvous round, hosted by rank 0's worker. The store the agents share by default
            # outlives rounds and its keys are prefixed by each agent's own restart count, which differs once one
            # agent restarted after a failure and the others only re-formed the group: the workers then read the
            # dead worker's address from the previous round and fail to connect.
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        }

    def kept_env(self, replica, plan):
        # The PyTorch operator sets MASTER_*, WORLD_SIZE, RANK and PET_* but not LOCAL_RANK; on a TrainJob torchrun
        # sets it.
        return {"LOCAL_RANK": "0"} if plan.launch.operator is Operator.TRAINING_OPERATOR else {}

    def replica_command(self, replica, plan, command: Sequence[str], files_dir):
        elastic = plan.elastic
        if launcher_in_command(command) is not None:
            return tuple(command)
        if elastic is None:
            # Under a training operator every pod of a role has one template: its node rank is read when it runs.
            if plan.launch.operator is not None:
                return tuple(command) if plan.processes_per_replica == 1 else operator_launched_command(plan, command)
            launcher = replica_launcher(plan)
            return tuple(command) if launcher is None else launched_command(launcher, replica, plan, command)
        # Every replica's address resolves to this machine on the local backend, so torchrun cannot tell which
        # agent hosts the rendezvous by its hostname: it is said outright (the master's).
        rdzv_conf = f"is_host={str(replica.is_master).lower()},join_timeout={elastic.rdzv_timeout}"
        return (
            # python3: in a pod, the name Debian-based images have (no python); locally the job's interpreter.
            "python3", "-m", "torch.distributed.run",
            "--nnodes", elastic.nnodes,
            "--nproc-per-node", str(plan.processes_per_replica),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", plan.master.address,
            "--rdzv-id", plan.job_name,
            "--rdzv-conf", rdzv_conf,
            "--max-restarts", str(elastic.max_restarts),
            # The command is run as given (an interpreter and a script, or any program), not as a script path.
            "--no-python",
            *command,
        )

