"""Horovod, MPI launcher model: the launcher (rank 0) runs the command under ``horovodrun`` over every replica.

Workers run nothing of their own: the backend keeps them on standby (sshd on Kubernetes, an idle
process locally) while the launcher's ``horovodrun`` starts one rank per slot across the hostfile.
"""

from __future__ import annotations

from collections import OrderedDict

from airflow_distributed.frameworks.base import Framework, Role

HOSTFILE = "hostfile"
SSH_PORT = 22


class Horovod(Framework):
    name = "horovod"
    roles = (Role("launcher", None), Role("worker", "worker"))
    default_port = 2222

    def replica_env(self, replica, plan, backend):
        return {"OMPI_MCA_orte_default_hostfile": plan.file_path(HOSTFILE)}

    def files(self, plan, backend):
        return {HOSTFILE: "".join(f"{host} slots={slots}\n" for host, slots in self.hosts(plan, backend).items())}

    def hosts(self, plan, backend) -> OrderedDict[str, int]:
        """Host -> slots (GPUs requested, else 1); local replicas share one host, so their slots add up."""
        hosts: OrderedDict[str, int] = OrderedDict()
        for replica in plan.replicas:
            host = "localhost" if backend == "local" else replica.host
            slots = max(replica.resources.device_count("gpu"), 1) if replica.resources else 1
            hosts[host] = hosts.get(host, 0) + slots
        return hosts

    def replica_command(self, replica, plan, command, files_dir):
        if not replica.is_master:
            return None
        total = sum(self.hosts(plan, plan.backend).values())
        launcher = ["horovodrun", "--gloo", "-np", str(total), "--hostfile", plan.file_path(HOSTFILE)]
        if plan.backend != "local":
            launcher += ["-p", str(SSH_PORT)]
        return (*launcher, *command)
