"""One process of the GPU check's DeepSpeed job (check d): a tiny regression under ZeRO stage 2, then a report.

Started by DeepSpeed's per-node launcher (``environment.pytorch.launcher="deepspeed"``), which sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and the master's address for each process. The device is ``cuda:<LOCAL_RANK>`` of
what the process sees (NCCL), or the CPU in the dry run (gloo). ``deepspeed.initialize`` partitions the optimizer
state and gradients across the processes and averages the gradients; each process trains on its own shard, so
their parameters end equal only if that averaging happened. Global rank 0 reports, through
``airflow_distributed.tracking``, the backend, the ZeRO stage, the losses over all the data and, for every process,
the ranks it was given and the device it used.

``--started DIR``: each process first writes ``DIR/started-<RANK>``. Exits 5 when ``--device cuda`` finds no GPU,
4 when a check inside the job fails.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys

import deepspeed
import torch
import torch.distributed as dist

# Run by its path, so this folder is first on sys.path: check a's and b's process script is importable.
from gpu_replica import parameters_identical, parse_args, pick_device

from airflow_distributed import tracking

# The variables DeepSpeed's launcher sets for each process, recorded as seen (None when absent).
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CUDA_VISIBLE_DEVICES")
MICRO_BATCH = 16


def config(world: int) -> dict:
    """ZeRO stage 2 with a plain SGD optimizer; the batch is the micro batch times the processes, one step each."""
    return {
        "train_batch_size": MICRO_BATCH * world,
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "optimizer": {"type": "SGD", "params": {"lr": 0.05}},
        "zero_optimization": {"stage": 2},
        "zero_allow_untested_optimizer": True,  # ZeRO is tested by DeepSpeed with Adam; SGD is the model's choice
        "steps_per_print": 10**6,
    }


def what_i_am(device: torch.device) -> dict:
    facts: dict = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    facts["device"] = str(device)
    facts["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return facts


def main() -> int:
    args = parse_args(__doc__)
    device = pick_device(args.device)
    deepspeed.init_distributed(dist_backend=args.backend, timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(MICRO_BATCH * 16, 16, generator=generator)
    y = x @ torch.randn(16, 1, generator=generator)
    x, y = x.to(device), y.to(device)
    torch.manual_seed(rank)  # different starting points: DeepSpeed's broadcast of rank 0's must make them equal
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    engine, _, _, _ = deepspeed.initialize(model=model, config=config(world))
    loss_fn = torch.nn.MSELoss()
    with torch.no_grad():
        first = loss_fn(engine(x), y).item()
    shard_x, shard_y = x[rank::world], y[rank::world]
    for step in range(1, args.steps + 1):
        rows = slice((step * MICRO_BATCH) % len(shard_x), (step * MICRO_BATCH) % len(shard_x) + MICRO_BATCH)
        engine.backward(loss_fn(engine(shard_x[rows]), shard_y[rows]))
        engine.step()
        tracking.log_progress(step, args.steps)
    with torch.no_grad():
        last = loss_fn(engine(x), y).item()
    identical = parameters_identical(engine.module, world)
    everyone: list = [None] * world
    dist.all_gather_object(everyone, what_i_am(device))
    if rank == 0:
        tracking.log_metrics(
            backend=str(dist.get_backend()), device=str(device), world_size=world,
            zero_stage=engine.zero_optimization_stage(), initial_loss=first, final_loss=last,
            parameters_identical=identical, processes=everyone, torch_version=torch.__version__,
            torch_cuda=torch.version.cuda or "none", deepspeed_version=deepspeed.__version__,
        )
    print(f"rank {rank}/{world} on {device}: ZeRO {engine.zero_optimization_stage()}, loss {first:.4f} -> "
          f"{last:.4f}, identical={identical}", flush=True)
    dist.barrier()  # every rank is done with the group: what ends each process below cannot cut a collective
    return 0 if identical and last < first else 4


if __name__ == "__main__":
    code = main()
    # DeepSpeed on the CPU (gloo, its shared-memory collectives' op) aborted once at the end of a finished job,
    # after every rank had trained and reported ("terminate called without an active exception", SIGABRT, the
    # launcher's exit 250): a C++ thread still joinable as the group or the interpreter was torn down. The process
    # ends here instead, once its exit hooks ran (the tracking module's last record among them), with none of the
    # C++ destructors that race.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
