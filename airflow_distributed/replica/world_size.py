"""A launched training process starts only at the world size its job was planned at.

A program, run by a PyTorch launcher (torchrun, DeepSpeed's, Accelerate's) in place of each process's command:
``python3 -m airflow_distributed.replica.world_size COMMAND...``. It compares the ``WORLD_SIZE`` the launcher gave
the process with the job's planned world size (``contract.ENV_WORLD_SIZE``, replicas x processes per replica) and,
when they agree, replaces itself with ``COMMAND`` (same pid, same environment). When they differ it exits at once
with :data:`WRONG_WORLD_SIZE`, naming both numbers: a launcher that misread its topology (Accelerate's ``--cpu``
takes a one-process path whatever ``--num_processes`` says; ``accelerate launch`` ignores torchrun's ``PET_*``
variables) would otherwise train silently at another size, each node on its own.

Before it runs ``COMMAND`` it also gives the process its replica's GPUs back (:func:`replica_gpus`): DeepSpeed's
launcher sets each process's ``CUDA_VISIBLE_DEVICES`` to its slot numbers, 0..n-1, which on a machine the ``local``
backend shares among replicas are GPUs another replica was given, or GPUs a replica that asked for none must not see.

Standard library and ``contract`` only: it runs in training images, which have no Airflow.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from airflow_distributed.contract import ENV_REPLICA_GPUS, ENV_WORLD_SIZE

#: The exit code of a process whose launcher started it at another world size than the plan's (EX_CONFIG).
WRONG_WORLD_SIZE = 78


def world_size_problem(environ: Mapping[str, str]) -> str | None:
    """Why this process must not train, or ``None``: the launcher's ``WORLD_SIZE`` is the planned one.

    :param environ: the process's environment.
    """
    planned = environ.get(ENV_WORLD_SIZE)
    if planned is None:
        return None
    seen = environ.get("WORLD_SIZE")
    if seen == planned:
        return None
    # A launcher that sets no WORLD_SIZE leaves the process alone: torch.distributed's env:// then fails, and most
    # libraries (Accelerate, DeepSpeed) run it as a group of one.
    shown = "no WORLD_SIZE (a process on its own, world size 1)" if seen is None else f"world size {seen}"
    return (f"the launcher started this process with {shown}, but the job was planned at world size {planned} "
            f"({ENV_WORLD_SIZE}: replicas x processes per replica); not training at another size")


def replica_gpus(environ: Mapping[str, str]) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` this process must have, or ``None`` to leave it as it is.

    Where the backend said the replica's GPUs (``contract.ENV_REPLICA_GPUS``) and the launcher changed the
    process's list, the launcher's entries are slot numbers: slot ``i`` is the replica's ``i``-th GPU, and a slot the
    replica has no GPU for is dropped (torchrun passes the list through unchanged: nothing to do).

    :param environ: the process's environment.
    """
    given = environ.get(ENV_REPLICA_GPUS)
    seen = environ.get("CUDA_VISIBLE_DEVICES")
    if given is None or seen is None or seen == given:
        return None
    own = [gpu for gpu in given.split(",") if gpu]
    slots = [int(slot) for slot in seen.split(",") if slot.strip().isdigit()]
    return ",".join(own[slot] for slot in slots if slot < len(own))


def main(argv: Sequence[str]) -> int:
    """Check, then run ``argv`` in this process's place.

    :param argv: the training command (its program first).
    """
    if not argv:
        print("usage: python3 -m airflow_distributed.replica.world_size COMMAND...", file=sys.stderr)
        return 2
    problem = world_size_problem(os.environ)
    if problem is not None:
        print(f"airflow_distributed: {problem}", file=sys.stderr, flush=True)
        return WRONG_WORLD_SIZE
    gpus = replica_gpus(os.environ)
    if gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus
    sys.stdout.flush()
    os.execvp(argv[0], list(argv))
    return 0  # not reached: execvp replaces the process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
