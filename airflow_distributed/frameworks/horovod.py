"""Horovod, MPI launcher model: the launcher (rank 0) runs the command under ``horovodrun`` over every replica.

Workers run nothing of their own: the backend keeps them on standby (sshd in pods, an idle process on one host)
while the launcher's ``horovodrun`` starts one rank per slot across the hostfile.

Where the cluster's MPI runtime writes the hostfile (``Launch.mpi_hostfile``: Kubeflow Trainer's MPI plugin, which
also sets ``OMPI_MCA_orte_default_hostfile`` and mounts the SSH keys), this framework ships neither; horovodrun is
given no controller flag and no SSH port there, since the runtime's image decides both (its MPI, its ssh client's
config).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from airflow_distributed.frameworks.base import Framework, Role

if TYPE_CHECKING:
    from airflow_distributed.cluster_plan import Replica

HOSTFILE = "hostfile"
SSH_PORT = 22
#: Where every replica of a job on Kubernetes has the job's key pair and ssh's config (``manifests.horovod_ssh``);
#: the Kubeflow MPIJob is told the same place (``sshAuthMountPath``).
SSH_DIR = "/root/.ssh"


def slots(replica: Replica) -> int:
    """The ranks a replica runs: one per GPU it requests, else one."""
    return max(replica.resources.device_count("gpu"), 1) if replica.resources else 1


class Horovod(Framework):
    name = "horovod"
    roles = (Role("launcher", None), Role("worker", "worker"))
    default_port = 2222
    trainer_mpi = True
    launches_over_ssh = True

    def replica_env(self, replica, plan):
        # Not asked on a job a training operator runs (kept_env: none): mpi-operator and Trainer's MPI plugin set it.
        return {"OMPI_MCA_orte_default_hostfile": plan.file_path(HOSTFILE)}

    def files(self, plan):
        if plan.launch.mpi_hostfile is not None:
            return {}
        return {HOSTFILE: "".join(f"{host} slots={slots}\n" for host, slots in self.hosts(plan).items())}

    def hosts(self, plan) -> OrderedDict[str, int]:
        """Host -> slots (GPUs requested, else 1); replicas that share one host have their slots added up."""
        launch = plan.launch
        hosts: OrderedDict[str, int] = OrderedDict()
        for replica in plan.replicas:
            host = "localhost" if launch.shared_host else replica.host
            hosts[host] = hosts.get(host, 0) + slots(plan.master if launch.nodes_like_master else replica)
        return hosts

    def replica_command(self, replica, plan, command, files_dir):
        if not replica.is_master:
            return None
        total = sum(self.hosts(plan).values())
        launch = plan.launch
        if launch.mpi_hostfile is not None:
            return ("horovodrun", "-np", str(total), "--hostfile", launch.mpi_hostfile, *command)
        launcher = ["horovodrun", "--gloo", "-np", str(total), "--hostfile", plan.file_path(HOSTFILE)]
        if not launch.shared_host:  # replicas on other hosts are reached over their sshd
            launcher += ["-p", str(SSH_PORT)]
        return (*launcher, *command)
