"""DeepSpeed ZeRO stage 2 on the CPU over gloo: a tiny regression trained by every process its launcher started.

Run under DeepSpeed's per-node launcher (``python -m deepspeed.launcher.launch``), which sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` for each process it starts and passes
``--local_rank`` unless told ``--no_local_rank``. ``deepspeed.initialize`` partitions the optimizer state and
gradients across all processes (ZeRO-2) and all-reduces the gradients; every process then writes its report
(see ``common_launch``).
"""

from __future__ import annotations

import atexit
import os
import sys

import common_launch
import deepspeed
import torch
import torch.distributed as dist

CONFIG = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 1000,
}


def main() -> int:
    parser = common_launch.make_parser(__doc__)
    parser.add_argument("--local_rank", type=int, default=-1, help="set by DeepSpeed's launcher")
    args = parser.parse_args()
    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    engine, _, _, _ = deepspeed.initialize(model=common_launch.model(), config=CONFIG)
    x, y = common_launch.data(rank, world_size)
    initial_loss = common_launch.shard_loss(engine, x, y)
    for step in range(args.steps):
        rows = slice((step * 8) % len(x), (step * 8) % len(x) + 8)
        loss = torch.nn.functional.mse_loss(engine(x[rows]), y[rows])
        engine.backward(loss)
        engine.step()
    common_launch.write_report(args.report_dir, rank, world_size, launcher="deepspeed",
                               zero_stage=engine.zero_optimization_stage(), local_rank_argument=args.local_rank,
                               checksum=common_launch.checksum(engine.module), initial_loss=initial_loss,
                               final_loss=common_launch.shard_loss(engine, x, y))
    dist.barrier()  # every rank is done with the group: what ends each process below cannot cut a collective
    return 0


if __name__ == "__main__":
    code = main()
    # Ended without the C++ destructors that once aborted a finished DeepSpeed job on the CPU (SIGABRT at exit): why,
    # in bench/gpu_check/training/gpu_deepspeed.py.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
