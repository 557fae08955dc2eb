"""Data-parallel training with PyTorch DistributedDataParallel over the gloo backend, on the CPU.

Every replica (the ``master``, rank 0, and each ``worker``) runs this script. The process group is set up from the
variables of the replica contract (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``) with
``init_method="env://"``. A small MLP learns a synthetic regression, or with ``--data`` a torch file of tensors ``x``
and ``y`` prepared upstream; every rank trains on its own shard of the data and DDP averages the gradients across
ranks after each backward pass.

After training the ranks all-gather a checksum of their parameters and fail unless they are identical: since the
shards differ, they only are when the gradients really were all-reduced. Rank 0 saves ``model.pt`` into the model
directory and reports ``initial_loss``, ``final_loss`` (mean squared error over the whole data set, gathered from
all ranks), ``world_size`` and the loss history through :mod:`airflow_distributed.tracking`; it logs each point of
the history as it goes. Every rank then destroys the process group, and with it gloo's threads, before the
interpreter finalizes (see the import of ``torch.distributed.nn``).

The data, model, training loop, check and report are shared with ``horovod_torch.py`` in ``torch_regression.py``;
this script sets up the process group, wraps the model in DDP and gives the shared code torch.distributed's
collectives.

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

import common
import torch
import torch.distributed as dist

# Imported before the process group exists, on purpose: its functions take ``group=group.WORLD`` as a default
# argument, evaluated at import. Imported later (DistributedDataParallel's constructor does), they would hold the
# default group, so that destroy_process_group() would not destroy it: gloo's threads would run on into the
# interpreter's finalization, where Python ends a thread that asks for the GIL by unwinding it, which in gloo's C++
# aborts the process ("terminate called without an active exception").
import torch.distributed.nn
import torch_regression
from torch.nn.parallel import DistributedDataParallel


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser(__doc__, default_steps=60, unit="rank")
    torch_regression.add_data_option(parser)
    torch_regression.add_checkpoint_option(parser)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for a peer in set-up or a collective (default: %(default)s)")
    common.add_failure_options(parser)
    return common.parse_args(parser, argv)


class TorchDistributed(torch_regression.Collectives):
    """The collectives of torch.distributed, which reduce in place and take no names."""

    def sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        tensor = tensor.clone()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def mean(self, tensor: torch.Tensor, name: str) -> float:
        return self.sum(tensor, name).item() / dist.get_world_size()

    def gather(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        gathered = [torch.zeros_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, tensor)
        return torch.stack(gathered)


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
    torch_regression.limit_threads()

    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world_size}: process group ready ({os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']})",
          flush=True)

    shards = torch_regression.shard_data(args, rank, world_size)
    model = torch_regression.make_model(args)
    # DDP broadcasts rank 0's initial parameters to the others, then all-reduces (averages) the gradients.
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=args.lr)

    exit_code = torch_regression.fit(args, model, ddp_model, optimizer, shards, rank, world_size, TorchDistributed(),
                                     log_history_live=True)
    if exit_code != 0:
        return exit_code
    # Keeps rank 0's process group alive until everyone has finished the last collective.
    dist.barrier()
    # DDP's reducer holds the group too: without it, destroy_process_group() destroys the group here, joining gloo's
    # threads while the interpreter is whole (see the import of torch.distributed.nn above).
    del ddp_model
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
