"""One process of a GPU check job: joins the process group, all-reduces, trains a few DDP steps, reports.

Works for a replica of one process (check a) and for every process of a replica that runs several (check b,
``n_proc_per_node``): the device is ``cuda:<LOCAL_RANK>`` of what the process sees (the operator hands a replica
``CUDA_VISIBLE_DEVICES`` of its GPUs; torch's launcher gives each process its ``LOCAL_RANK``). Global rank 0
reports, through ``airflow_distributed.tracking``, the backend, its device and, for every process, the
``RANK``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE``/``NODE_RANK`` it was given and the device it used.

``--started DIR``: each process first writes ``DIR/started-<RANK>``, so a check can prove that no replica of a
refused job ever ran. Exits 5 when ``--device cuda`` finds no GPU, 4 when a check inside the job fails.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from airflow_distributed import tracking

# What the contract gives every process; LOCAL_* and NODE_RANK default to a replica of one process.
TOPOLOGY = (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1"), ("NODE_RANK", "0"))


def pick_device(kind: str) -> torch.device:
    """The process's device: ``cuda:<LOCAL_RANK>`` among the GPUs it sees (wrapped, should a launcher narrow
    ``CUDA_VISIBLE_DEVICES`` to one per process), else the CPU."""
    if kind == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 0:
        raise SystemExit(5)
    index = int(os.environ.get("LOCAL_RANK", "0")) % count
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def what_i_am(device: torch.device) -> dict:
    facts: dict = {name: int(os.environ.get(name, default)) for name, default in TOPOLOGY}
    facts["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    facts["device"] = str(device)
    facts["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    facts["pid"] = os.getpid()
    return facts


def train(device: torch.device, rank: int, world: int, steps: int) -> tuple[float, float, bool]:
    """A small regression under DDP; each rank its shard. Returns the first and last loss over all the data and
    whether every rank ends with the same parameters (DDP's all-reduce of the gradients did its work)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 16, generator=generator)
    y = x @ torch.randn(16, 1, generator=generator)
    x, y = x.to(device), y.to(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    loss_fn = torch.nn.MSELoss()
    with torch.no_grad():
        first = loss_fn(model(x), y).item()
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        loss_fn(ddp(x[rank::world]), y[rank::world]).backward()
        optimizer.step()
        tracking.log_progress(step, steps)
    with torch.no_grad():
        last = loss_fn(model(x), y).item()
    return first, last, parameters_identical(model, world)


def parameters_identical(model: torch.nn.Module, world: int) -> bool:
    """Whether every rank ends with the same parameters (a checksum of each, all-gathered)."""
    with torch.no_grad():
        checksum = torch.cat([p.detach().flatten() for p in model.parameters()]).double().sum().reshape(1)
    sums = [torch.zeros_like(checksum) for _ in range(world)]
    dist.all_gather(sums, checksum)
    return all(torch.equal(s, sums[0]) for s in sums)


def parse_args(doc: str) -> argparse.Namespace:
    """The arguments every check's process takes; marks the process's start in ``--started`` first."""
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    parser.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--started", help="folder to mark this process's start in")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds the process group waits for a peer")
    args = parser.parse_args()
    if args.started:
        Path(args.started).mkdir(parents=True, exist_ok=True)
        Path(args.started, f"started-{os.environ.get('RANK', '0')}").touch()
    return args


def main() -> int:
    args = parse_args(__doc__)

    device = pick_device(args.device)
    extra = {"device_id": device} if args.backend == "nccl" else {}
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout), **extra)
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total)
    expected = world * (world + 1) / 2
    everyone: list = [None] * world
    dist.all_gather_object(everyone, what_i_am(device))
    first, last, identical = train(device, rank, world, args.steps)
    ok = total.item() == expected and identical and last < first
    if rank == 0:
        tracking.log_metrics(
            backend=str(dist.get_backend()), device=str(device), world_size=world,
            allreduce=total.item(), allreduce_expected=expected, initial_loss=first, final_loss=last,
            parameters_identical=identical, processes=everyone, torch_version=torch.__version__,
            torch_cuda=torch.version.cuda or "none",
        )
    print(f"rank {rank}/{world} on {device}: allreduce {total.item()} (expected {expected}), loss {first:.4f} -> "
          f"{last:.4f}, identical={identical}", flush=True)
    if args.backend == "nccl":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 4


if __name__ == "__main__":
    sys.exit(main())
