"""Horovod, MPI launcher model: the launcher (rank 0) runs the command under ``horovodrun`` over every replica.

Workers run nothing of their own: the backend keeps them on standby (sshd on Kubernetes, an idle
process locally) while the launcher's ``horovodrun`` starts one rank per slot across the hostfile.

On ``backend="trainjob"`` the Trainer controller's MPI plugin writes the hostfile (``TRAINER_HOSTFILE``), sets
``OMPI_MCA_orte_default_hostfile`` and mounts the SSH keys, so this framework ships neither; horovodrun is given no
controller flag and no SSH port there, since the runtime's image decides both (its MPI, its ssh client's config).
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
#: Where Kubeflow Trainer's MPI plugin mounts the hostfile on the launcher (``constants.MPIHostfileDir``/``Name``).
TRAINER_HOSTFILE = "/etc/mpi/hostfile"


def slots(replica: Replica) -> int:
    """The ranks a replica runs: one per GPU it requests, else one."""
    return max(replica.resources.device_count("gpu"), 1) if replica.resources else 1


class Horovod(Framework):
    name = "horovod"
    roles = (Role("launcher", None), Role("worker", "worker"))
    default_port = 2222
    trainer_mpi = True
    launches_over_ssh = True

    def replica_env(self, replica, plan, backend):
        # Not asked on a job a training operator runs (kept_env: none): mpi-operator and Trainer's MPI plugin set it.
        return {"OMPI_MCA_orte_default_hostfile": plan.file_path(HOSTFILE)}

    def files(self, plan, backend):
        if backend == "trainjob":
            return {}
        return {HOSTFILE: "".join(f"{host} slots={slots}\n" for host, slots in self.hosts(plan, backend).items())}

    def hosts(self, plan, backend) -> OrderedDict[str, int]:
        """Host -> slots (GPUs requested, else 1); local replicas share one host, so their slots add up."""
        hosts: OrderedDict[str, int] = OrderedDict()
        for replica in plan.replicas:
            host = "localhost" if backend == "local" else replica.host
            # A TrainJob runs every node from the master's pod template (numProcPerNode slots each).
            hosts[host] = hosts.get(host, 0) + slots(plan.master if backend == "trainjob" else replica)
        return hosts

    def replica_command(self, replica, plan, command, files_dir):
        if not replica.is_master:
            return None
        total = sum(self.hosts(plan, plan.backend).values())
        if plan.backend == "trainjob":
            return ("horovodrun", "-np", str(total), "--hostfile", TRAINER_HOSTFILE, *command)
        launcher = ["horovodrun", "--gloo", "-np", str(total), "--hostfile", plan.file_path(HOSTFILE)]
        if plan.backend != "local":
            launcher += ["-p", str(SSH_PORT)]
        return (*launcher, *command)
