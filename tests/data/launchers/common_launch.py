"""What the launcher tests' two training scripts share: the data, the model, the launch facts and the report.

The scripts are run by path, which puts this folder first on ``sys.path``: they import this module as plain
``common_launch``. It needs torch and the standard library only.

Each process writes one JSON line about itself to ``--report-dir``/rank-<RANK>.json: the variables its launcher
set (``LAUNCH_VARIABLES``), the world size and rank torch.distributed saw, and a checksum of its parameters after
training. A test reads every file: the processes' ranks, the world size they trained at and whether their parameters
ended identical (they only do when the gradients really were averaged across all of them, as each trains on its own
shard). Global rank 0 also reports the world size and its losses through ``airflow_distributed.tracking`` (the job's
metrics), when the provider is importable.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch import nn

try:
    from airflow_distributed import tracking
except ImportError:  # run by hand outside the project
    tracking = None

# What each launcher may set; recorded as seen, absent ones as None, to tell which launcher set what.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "NODE_RANK", "GROUP_RANK",
                    "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU",
                    "ACCELERATE_MIXED_PRECISION")


def make_parser(doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--report-dir", required=True, help="folder each process writes rank-<RANK>.json into")
    return parser


def data(rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's shard of a fixed synthetic regression: every rank trains on different rows."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64 * world_size, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return x[rank::world_size], y[rank::world_size]


def model() -> nn.Module:
    torch.manual_seed(rank_from_env())  # different starting points: the launcher's broadcast must make them equal
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def rank_from_env() -> int:
    return int(os.environ.get("RANK", "0"))


def checksum(module: nn.Module) -> float:
    return float(sum(parameter.detach().double().sum() for parameter in module.parameters()))


def shard_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The mean squared error over this rank's whole shard: compared before and after training."""
    with torch.no_grad():
        return float(nn.functional.mse_loss(module(x), y))


def write_report(report_dir: str, rank: int, world_size: int, **facts: object) -> None:
    seen = {name: os.environ.get(name) for name in LAUNCH_VARIABLES}
    record = {"rank": rank, "world_size": world_size, "pid": os.getpid(), "env": seen, **facts}
    Path(report_dir).mkdir(parents=True, exist_ok=True)
    Path(report_dir, f"rank-{rank}.json").write_text(json.dumps(record))
    if rank == 0 and tracking is not None:
        tracking.log_metrics(world_size=world_size, **{k: v for k, v in facts.items() if k.endswith("loss")})
    print(f"rank {rank}/{world_size}: {json.dumps(record)}", flush=True)
