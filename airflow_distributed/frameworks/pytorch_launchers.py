"""How a PyTorch job's launcher starts each replica's processes: its argv, with the whole topology said outright.

``environment.pytorch.launcher`` names the launcher (``spec.models.Launcher``); each replica (a node) runs it once and
it starts the replica's processes. Every argv below gives the launcher the number of nodes, this node's rank, the
processes per node and the master's address and port on its command line, never through variables it might not read:
Accelerate ignores torchrun's ``PET_*`` variables, and a launcher left to count nodes or devices itself can start a
lone process at world size 1 without an error.

- ``torchrun``: ``python3 -m torch.distributed.run`` with a static rendezvous hosted by the master's launcher.
- ``deepspeed``: DeepSpeed's per-node launcher, ``python3 -m deepspeed.launcher.launch``, which is what ``deepspeed
  --no_ssh --hostfile ...`` runs on each node: the nodes and their slots as its ``--world_info`` (base64 JSON, one
  key per replica in rank order), so no hostfile, no ssh and no device count is needed. ``--no_local_rank``: every
  process reads ``LOCAL_RANK`` from its environment, as under torchrun, and the command is run as given.
- ``accelerate``: ``python3 -m accelerate.commands.launch --multi_gpu`` (torch's launcher underneath, on CPUs too:
  the script asks for the CPU with ``Accelerator(cpu=True)``); ``--num_processes`` is the whole job's, Accelerate
  divides it by ``--num_machines``. Never ``--cpu``: with it Accelerate runs one process per node whatever the
  counts say.

Under a training operator (``plan.launch.operator``) torchrun only, one line per role's pod template that reads the
node's rank and the master's address when it runs (``operator_launched_command``).

Where the command is run by a Python interpreter, each process first runs ``replica/world_size.py`` (by that
interpreter, so on the ``local`` backend the job's): it refuses to train unless its launcher's ``WORLD_SIZE`` is the
plan's, ``contract.ENV_WORLD_SIZE``.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_distributed.frameworks.base import rank_of

if TYPE_CHECKING:
    from airflow_distributed.cluster_plan import ClusterPlan, Replica

#: The module each launched process runs first (``replica/world_size.py``).
WORLD_SIZE_CHECK = "airflow_distributed.replica.world_size"
# An interpreter the check can run under: python, python3, python3.11, or a path to one.
_PYTHON = re.compile(r"python[0-9.]*")
#: Programs that start a launcher themselves, and which launcher they are: a command starting one is not wrapped
#: again. torchrun reads the replica's ``PET_*`` variables; the others read none of them (see ``launcher_in_command``).
LAUNCHER_PROGRAMS = {"torchrun": "torchrun", "torch.distributed.run": "torchrun", "deepspeed": "deepspeed",
                     "deepspeed.launcher.launch": "deepspeed", "accelerate": "accelerate",
                     "accelerate.commands.launch": "accelerate"}


def launcher_in_command(command: Sequence[str]) -> str | None:
    """The launcher ``command`` starts itself (its program, or ``python -m`` one), or ``None``."""
    for part in command[:3]:
        launcher = LAUNCHER_PROGRAMS.get(os.path.basename(part))
        if launcher is not None:
            return launcher
    return None


def replica_launcher(plan: ClusterPlan) -> str | None:
    """The launcher every replica of a non-elastic PyTorch job runs: the one the spec names, torchrun for several
    processes per replica, else none (the command runs as the replica's one process). ``None`` too where a training
    operator runs the pods (``plan.launch.operator``: the framework wraps the command in torchrun itself there)."""
    if plan.launch.operator is not None or plan.elastic is not None:
        return None
    return plan.launcher or ("torchrun" if plan.processes_per_replica > 1 else None)


def world_size(plan: ClusterPlan) -> int:
    """The job's planned world size: every process of every replica."""
    return len(plan.replicas) * plan.processes_per_replica


def launched_command(launcher: str, replica: Replica, plan: ClusterPlan, command: Sequence[str]) -> tuple[str, ...]:
    """``command`` under ``launcher`` on ``replica``'s node, every process checking its world size first.

    :param launcher: one of ``spec.models.LAUNCHERS``.
    :param command: the training command (resolved: on ``local`` its leading ``python`` is the job's interpreter).
    """
    checked = checked_command(command)
    nodes, node_rank, per_node = len(plan.replicas), rank_of(replica), plan.processes_per_replica
    master_host, master_port = plan.master.host, str(plan.master.port)
    if launcher == "torchrun":
        return ("python3", "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(node_rank),
                "--nproc-per-node", str(per_node), "--master-addr", master_host, "--master-port", master_port,
                # The command is run as given (an interpreter and a script, or any program), not as a script path.
                "--no-python", *checked)
    if launcher == "deepspeed":
        nodes_in_rank_order = sorted(plan.replicas, key=rank_of)
        slots = {node.name: list(range(per_node)) for node in nodes_in_rank_order}
        world_info = base64.urlsafe_b64encode(json.dumps(slots).encode()).decode()
        return ("python3", "-u", "-m", "deepspeed.launcher.launch", f"--world_info={world_info}",
                f"--node_rank={node_rank}", f"--master_addr={master_host}", f"--master_port={master_port}",
                "--no_python", "--no_local_rank", *checked)
    if launcher == "accelerate":
        return ("python3", "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", str(nodes),
                "--machine_rank", str(node_rank), "--num_processes", str(nodes * per_node),
                "--main_process_ip", master_host, "--main_process_port", master_port,
                # The master's address as torch's MASTER_ADDR (static rendezvous), not a c10d endpoint.
                "--same_network",
                # A failed process fails the replica and so the job: restarts are elastic training's business.
                "--max_restarts", "0",
                "--no_python", *checked)
    raise ValueError(f"unknown launcher {launcher!r}")


def operator_launched_command(plan: ClusterPlan, command: Sequence[str]) -> tuple[str, ...]:
    """``command`` under torch's launcher where a training operator runs one pod template per role and sets the node's
    ``RANK`` (its node rank), ``MASTER_ADDR`` and ``MASTER_PORT`` (a TrainJob's node program sets them from Trainer's
    ``PET_*``): the per-node values are read from those when the pod runs, the counts are said outright, so that an
    operator that sets no ``PET_NNODES`` or ``PET_NPROC_PER_NODE`` cannot leave a node training alone. Neither the
    Training Operator nor Trainer starts the launcher itself."""
    launch = (
        'export NODE_RANK="$RANK"; exec python3 -m torch.distributed.run '
        f'--nnodes {len(plan.replicas)} --node-rank "$RANK" --nproc-per-node {plan.processes_per_replica} '
        '--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" --no-python "$@"'
    )
    return ("sh", "-c", launch, "sh", *command)


def checked_command(command: Sequence[str]) -> tuple[str, ...]:
    """``command`` behind the world-size check, run by the command's own interpreter; a command that no Python
    interpreter runs (a shell script, a binary) is left as it is."""
    if not command or not _PYTHON.fullmatch(os.path.basename(command[0])):
        return tuple(command)
    return (command[0], "-m", WORLD_SIZE_CHECK, *command)
