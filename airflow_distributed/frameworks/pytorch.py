"""PyTorch: a master (rank 0) and workers, rendezvous through ``MASTER_ADDR``/``MASTER_PORT`` (``env://``)."""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role, master_rank_env


class PyTorch(Framework):
    name = "pytorch"
    roles = (Role("master", None), Role("worker", "worker"))
    default_port = 23456

    def replica_env(self, replica, plan, backend):
        env = master_rank_env(replica, plan)
        return {
            **env,
            "LOCAL_RANK": "0",
            # The same values under torchrun's names, for jobs that run torchrun in each replica.
            "PET_MASTER_ADDR": env["MASTER_ADDR"],
            "PET_MASTER_PORT": env["MASTER_PORT"],
            "PET_NNODES": env["WORLD_SIZE"],
            "PET_NODE_RANK": env["RANK"],
            "PET_NPROC_PER_NODE": "1",
        }
