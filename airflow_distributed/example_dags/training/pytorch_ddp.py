"""Data-parallel training with PyTorch DistributedDataParallel over the gloo backend, on the CPU.

Every replica (the ``master``, rank 0, and each ``worker``) runs this script. The process group is set up from the
variables of the replica contract (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``) with
``init_method="env://"``. A small MLP learns a synthetic regression; every rank trains on its own shard of the data
and DDP averages the gradients across ranks after each backward pass.

After training the ranks all-gather a checksum of their parameters and fail unless they are identical: since the
shards differ, they only are when the gradients really were all-reduced. Rank 0 saves ``model.pt`` into the model
directory and reports ``initial_loss``, ``final_loss`` (mean squared error over the whole data set, gathered from
all ranks), ``world_size`` and the loss history through :mod:`airflow_distributed.tracking`.

Run by hand without the contract's variables, it trains alone (a group of one on a free local port).

Options for failure tests: ``--crash-at-step N --crash-rank R`` makes rank R exit with code 3 at step N;
``--sleep-per-step S`` slows every step down, for timeout and kill tests.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from airflow_distributed import tracking

CRASH_EXIT_CODE = 3
DIVERGED_EXIT_CODE = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="per-rank batch size (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=512, help="data set size, all ranks (default: %(default)s)")
    parser.add_argument("--features", type=int, default=8, help="input features (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=16, help="hidden units (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and model (default: %(default)s)")
    parser.add_argument("--data", default=None, help="a torch file of tensors x and y to train on instead")
    parser.add_argument("--log-every", type=int, default=10, help="history interval in steps (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for a peer in set-up or a collective (default: %(default)s)")
    parser.add_argument("--crash-at-step", type=int, default=None, help="exit with code 3 at this step")
    parser.add_argument("--crash-rank", type=int, default=0, help="rank that crashes (default: %(default)s)")
    parser.add_argument("--sleep-per-step", type=float, default=0.0, help="seconds to sleep after each step")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.log_every < 1:
        parser.error("--steps, --batch-size and --log-every must be at least 1")
    return args


def make_data(args: argparse.Namespace) -> TensorDataset:
    if args.data:
        # A data set prepared upstream (e.g. by a pipeline's prepare step): a dict of tensors "x" and "y".
        tensors = torch.load(args.data)
        args.samples, args.features = tensors["x"].shape
        return TensorDataset(tensors["x"].float(), tensors["y"].float().reshape(-1, 1))
    # The same generator seed on every rank gives every rank the same data set; the sampler then shards it.
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=generator)
    weights = torch.randn(args.features, 1, generator=generator)
    # A non-linear term, so that the hidden layer has something to learn beyond a linear fit.
    y = x @ weights + 0.5 * torch.sin(2.0 * x[:, :1]) + 0.01 * torch.randn(args.samples, 1, generator=generator)
    return TensorDataset(x, y)


def global_mse(model: nn.Module, loader: DataLoader) -> float:
    """Mean squared error over every rank's shard: sums and counts are all-reduced, so all ranks get the same value."""
    totals = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for x, y in loader:
            totals[0] += nn.functional.mse_loss(model(x), y, reduction="sum").double()
            totals[1] += y.numel()
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    return (totals[0] / totals[1]).item()


def parameter_checksum(model: nn.Module) -> torch.Tensor:
    """Three float64 summaries of all parameters; a weighted sum makes a permutation or sign change show up too."""
    flat = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    positions = torch.arange(1, flat.numel() + 1, dtype=torch.float64)
    return torch.stack([flat.sum(), (flat * flat).sum(), (flat * positions).sum()])


def setup_environment() -> None:
    if "WORLD_SIZE" in os.environ:
        return
    # Run by hand outside a job: a group of one, on a port the OS hands out.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_environment()
    if "OMP_NUM_THREADS" not in os.environ:
        # Several tiny processes share a few cores: one thread each avoids oversubscription, which is far slower.
        torch.set_num_threads(1)

    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world_size}: process group ready ({os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']})")

    torch.manual_seed(args.seed)
    dataset = make_data(args)
    # drop_last keeps every rank at the same number of batches, so no rank waits on an all-reduce nobody joins.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed,
                                 drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    eval_loader = DataLoader(dataset, batch_size=256, sampler=sampler)
    if len(loader) == 0:
        raise SystemExit(f"--samples {args.samples} leaves no full batch of {args.batch_size} per rank")

    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1))
    # DDP broadcasts rank 0's initial parameters to the others, then all-reduces (averages) the gradients.
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)

    initial_loss = global_mse(model, eval_loader)
    if rank == 0:
        print(f"initial loss {initial_loss:.6f}")

    started = time.monotonic()
    step, epoch = 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            step += 1
            if args.crash_at_step is not None and step == args.crash_at_step and rank == args.crash_rank:
                print(f"rank {rank}: crashing at step {step} as asked (--crash-at-step)", file=sys.stderr, flush=True)
                sys.stdout.flush()
                # os._exit: no clean-up, no process-group shutdown, like a process that really dies.
                os._exit(CRASH_EXIT_CODE)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            if step % args.log_every == 0 or step == args.steps:
                batch_loss = loss.detach().clone()
                dist.all_reduce(batch_loss, op=dist.ReduceOp.SUM)
                batch_loss = batch_loss.item() / world_size
                if rank == 0:
                    print(f"step {step} batch loss {batch_loss:.6f}")
                    tracking.log_metrics(step=step, loss=batch_loss)
            if args.sleep_per_step > 0:
                time.sleep(args.sleep_per_step)
            if step >= args.steps:
                break
        epoch += 1
    train_seconds = time.monotonic() - started

    final_loss = global_mse(model, eval_loader)

    checksums = [torch.zeros(3, dtype=torch.float64) for _ in range(world_size)]
    dist.all_gather(checksums, parameter_checksum(model))
    identical = all(torch.equal(checksums[0], other) for other in checksums[1:])
    if not identical:
        print(f"rank {rank}: parameters differ across ranks: {[c.tolist() for c in checksums]}", file=sys.stderr)
        return DIVERGED_EXIT_CODE

    if rank == 0:
        print(f"final loss {final_loss:.6f} after {args.steps} steps on {world_size} ranks in {train_seconds:.2f} s; "
              f"parameters identical on all ranks")
        model_path = os.path.join(tracking.get_model_dir(), "model.pt")
        torch.save(model.state_dict(), model_path)
        tracking.log_metrics(
            initial_loss=initial_loss,
            final_loss=final_loss,
            loss=final_loss,
            world_size=world_size,
            steps=args.steps,
            train_seconds=round(train_seconds, 3),
            parameters_identical=identical,
        )
        tracking.log_model(model_path)

    # Keeps rank 0's process group alive until everyone has finished the last collective.
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
