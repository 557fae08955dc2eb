"""``ClusterPlan`` -> one ``ProcessSpec`` per replica for the local backend (pure)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_distributed.contract import ENV_REPLICA_GPUS
from airflow_distributed.launch import Launch
from airflow_distributed.plan import ClusterPlan

#: How the local backend starts replicas (``plan.build_plan``'s ``launch``): processes of one machine, the plan
#: sets every variable.
LOCAL_LAUNCH = Launch(shared_host=True)

# Names that mean "the Python of this job" in a command; replaced by the interpreter the job runs with, so a
# DAG's ["python", "train.py"] does not depend on which python happens to be first on the worker's PATH.
PYTHON_NAMES = ("python", "python3")
# Horovod workers run nothing of their own: their ranks are started by the launcher's horovodrun.
STANDBY_CODE = "import signal\nsignal.pause()\n"


class LocalResourceError(ValueError):
    """The plan asks for more than this machine has (e.g. GPUs)."""


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    role: str
    index: int
    is_master: bool
    argv: tuple[str, ...]
    env: Mapping[str, str]


def process_specs(
    plan: ClusterPlan,
    *,
    interpreter: str,
    gpus: Sequence[str] = (),
    cpu_count: int = 1,
    base_env: Mapping[str, str] | None = None,
) -> list[ProcessSpec]:
    """Argv and full environment of every replica process.

    :param interpreter: the Python that replaces a leading ``python``/``python3`` and runs standby replicas.
    :param gpus: device ids visible to this worker; each replica gets its own, never shared.
    :param cpu_count: cores of this machine; a replica without a cpu limit gets an even share as its thread hint.
    :param base_env: the environment replicas inherit (the worker's), below the plan's variables.
    """
    devices = assign_gpus(plan, gpus)
    share = max(1, cpu_count // max(1, len(plan.replicas)))
    specs = []
    for replica in plan.replicas:
        env = dict(base_env or {})
        env.update(replica.env)
        cpu_limit = replica.resources.cpu_limit() if replica.resources else None
        env.setdefault("OMP_NUM_THREADS", str(max(1, math.floor(cpu_limit)) if cpu_limit else share))
        if gpus or replica.name in devices:
            env["CUDA_VISIBLE_DEVICES"] = env[ENV_REPLICA_GPUS] = ",".join(devices.get(replica.name, []))
        argv = replica.command if replica.command is not None else (interpreter, "-c", STANDBY_CODE)
        specs.append(
            ProcessSpec(replica.name, replica.role, replica.index, replica.is_master, _resolve(argv, interpreter), env)
        )
    return specs


def assign_gpus(plan: ClusterPlan, gpus: Sequence[str]) -> dict[str, list[str]]:
    """Hand out devices in plan order without overlap; fail before anything starts if there are too few."""
    wanted = {r.name: r.resources.device_count("gpu") for r in plan.replicas if r.resources}
    total = sum(wanted.values())
    if total > len(gpus):
        asked = ", ".join(f"{name}: {n}" for name, n in wanted.items() if n)
        raise LocalResourceError(
            f"the job asks for {total} GPU(s) ({asked}) but this worker has {len(gpus)} visible; "
            "lower the gpu resources or run on the kubernetes backend"
        )
    devices: dict[str, list[str]] = {}
    free = list(gpus)
    for name, count in wanted.items():
        devices[name], free = free[:count], free[count:]
    return devices


def resolve_python(command: Sequence[str], interpreter: str) -> list[str]:
    """The job's command with a leading ``python``/``python3`` replaced by ``interpreter``.

    Done on the user's command before planning, so it also holds where a launcher wraps it (horovodrun).
    """
    command = list(command)
    if command and command[0] in PYTHON_NAMES:
        command[0] = interpreter
    return command


def _resolve(argv: Sequence[str], interpreter: str) -> tuple[str, ...]:
    if not argv:
        return tuple(argv)
    head = argv[0]
    if head in PYTHON_NAMES:
        head = interpreter
    elif head == "horovodrun":
        # The launcher of the interpreter's own environment, which is where horovod is installed.
        head = os.path.join(os.path.dirname(interpreter), "horovodrun")
    return (head, *argv[1:])
