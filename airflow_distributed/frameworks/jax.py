"""JAX multi-process: process 0 (the master) hosts the coordinator service, every replica is one JAX process.

The variables are the names ``jax.distributed.initialize`` and Kubeflow Trainer's JAX runtime use:
``JAX_COORDINATOR_ADDRESS`` is read by JAX itself; ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` are passed
to it by the script, since JAX detects them only inside the clusters it knows (SLURM, Open MPI, TPU VMs).
"""

from __future__ import annotations

from airflow_distributed.frameworks.base import Framework, Role, rank_of


class Jax(Framework):
    name = "jax"
    roles = (Role("master", None), Role("worker", "worker"))
    # JAXJob's default port for the coordinator.
    default_port = 6666
    trainer_runtime = "jax-distributed"

    def replica_env(self, replica, plan):
        return {
            "JAX_COORDINATOR_ADDRESS": plan.master.address,
            "JAX_NUM_PROCESSES": str(len(plan.replicas)),
            "JAX_PROCESS_ID": str(rank_of(replica)),
        }
