"""PyTorch: a master (rank 0) and workers, rendezvous through ``MASTER_ADDR``/``MASTER_PORT`` (``env://``)."""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role


class PyTorch(Framework):
    name = "pytorch"
    roles = (Role("master", None), Role("worker", "worker"))
    default_port = 23456

    def replica_env(self, replica, plan, backend):
        master = plan.master
        world_size = len(plan.replicas)
        rank = 0 if replica.is_master else replica.index + 1
        return {
            "MASTER_ADDR": master.host,
            "MASTER_PORT": str(master.port),
            "WORLD_SIZE": str(world_size),
            "RANK": str(rank),
            "LOCAL_RANK": "0",
            # The same values under torchrun's names, for jobs that run torchrun in each replica.
            "PET_MASTER_ADDR": master.host,
            "PET_MASTER_PORT": str(master.port),
            "PET_NNODES": str(world_size),
            "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": "1",
        }
