"""Hugging Face Accelerate data parallelism on the CPU: a tiny regression trained by every process it launched.

Run under ``accelerate launch --cpu --multi_gpu`` (or anything that sets torch's launch variables): the
``Accelerator`` sets up the process group from ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` (gloo
on the CPU) and wraps the model in DistributedDataParallel; every process then writes its report (see
``common_launch``).
"""

from __future__ import annotations

import sys

import common_launch
import torch
from accelerate import Accelerator


def main() -> int:
    args = common_launch.make_parser(__doc__).parse_args()
    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    rank, world_size = accelerator.process_index, accelerator.num_processes
    model = common_launch.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = common_launch.data(rank, world_size)
    initial_loss = common_launch.shard_loss(model, x, y)
    for step in range(args.steps):
        rows = slice((step * 8) % len(x), (step * 8) % len(x) + 8)
        loss = torch.nn.functional.mse_loss(model(x[rows]), y[rows])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    common_launch.write_report(args.report_dir, rank, world_size, launcher="accelerate",
                               distributed_type=str(accelerator.distributed_type),
                               checksum=common_launch.checksum(accelerator.unwrap_model(model)),
                               initial_loss=initial_loss, final_loss=common_launch.shard_loss(model, x, y))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    sys.exit(main())
