"""Data-parallel training with Horovod and PyTorch, on the CPU (Gloo).

The job's launcher replica runs this script under ``horovodrun`` (or ``mpirun``), which starts one process per slot
over all replicas, the launcher's own slots first, so that rank 0 runs on the launcher. Each rank trains a small MLP
on its own shard of a synthetic regression, or with ``--data`` of a torch file of tensors ``x`` and ``y`` prepared
upstream (a path every rank can read); ``hvd.DistributedOptimizer`` averages the gradients of all ranks with an
all-reduce before every update, after ``hvd.broadcast_parameters`` has given every rank rank 0's initial weights.

After training the ranks all-gather a checksum of their parameters and fail unless they are identical: since the
shards differ, they only are when the gradients really were all-reduced. Rank 0 saves ``model.pt`` into the model
directory and reports ``initial_loss``, ``final_loss`` (mean squared error over the whole data set), ``world_size``
and the loss history through :mod:`airflow_distributed.tracking`; it logs the history with the final metrics, once
training is over. The launcher forwards its environment, so every rank sees ``AIRFLOW_DISTRIBUTED_OUTPUT``; only
rank 0 writes.

The data, model, training loop, check and report are shared with ``pytorch_ddp.py`` in ``torch_regression.py``;
this script starts Horovod, sets up the optimizer and gives the shared code Horovod's collectives.

Run by hand without a launcher, it trains alone as rank 0 of 1.

Options for failure tests: ``--crash-at-step N --crash-rank R`` makes rank R exit with code 3 at step N;
``--sleep-per-step S`` slows every step down, for timeout and kill tests.
"""

from __future__ import annotations

import argparse
import sys

import common
import horovod.torch as hvd
import torch
import torch_regression


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser(__doc__, default_steps=60, unit="rank")
    torch_regression.add_data_option(parser)
    common.add_failure_options(parser)
    return common.parse_args(parser, argv)


class HorovodCollectives(torch_regression.Collectives):
    """Horovod's collectives. Horovod matches a collective across ranks by its name."""

    def sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        return hvd.allreduce(tensor, op=hvd.Sum, name=name)

    def mean(self, tensor: torch.Tensor, name: str) -> float:
        return hvd.allreduce(tensor, op=hvd.Average, name=name).item()

    def gather(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        # allgather concatenates along the first dimension: one row per rank.
        return hvd.allgather(tensor.unsqueeze(0), name=name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch_regression.limit_threads()

    hvd.init()
    rank, world_size = hvd.rank(), hvd.size()
    print(f"rank {rank}/{world_size} (local rank {hvd.local_rank()}): horovod ready", flush=True)

    shards = torch_regression.shard_data(args, rank, world_size)
    model = torch_regression.make_model(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    # Start every rank from rank 0's weights (and optimizer state), then average gradients at every step.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)

    exit_code = torch_regression.fit(args, model, model, optimizer, shards, rank, world_size, HorovodCollectives(),
                                     log_history_live=False)
    if exit_code != 0:
        return exit_code
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
