"""What every training script in this folder shares, whatever its framework: options, exit codes, failure helpers.

The scripts are run by path (``python .../pytorch_ddp.py``), which puts this folder first on ``sys.path``, so they
import this module as plain ``common``. It uses the standard library only, as it must import in every framework's
environment, the MXNet one included (which has neither torch nor the provider's Airflow dependencies).

- :func:`make_parser` and :func:`parse_args` -- the options all scripts take, with the same names, meanings and checks;
- :func:`add_failure_options`, :func:`crash_if_asked`, :func:`sleep_if_asked` -- ``--crash-at-step``,
  ``--crash-rank``, ``--crash-on-try`` and ``--sleep-per-step``, which the failure tests use to make a replica die
  or run long;
- :func:`is_log_step` -- the steps that go into the loss history;
- :func:`batches` -- which of a process's rows each step trains on;
- :func:`sum_of_ranks_is_right` -- the check of a collective's sum of ``rank + 1`` over every process;
- :func:`result_metrics` -- the metrics a run reports at the end, under the names every script uses.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence

CRASH_EXIT_CODE = 3
DIVERGED_EXIT_CODE = 4


def make_parser(doc: str, *, default_steps: int, unit: str) -> argparse.ArgumentParser:
    """A parser with the options every script takes; ``unit`` names a process of the job ("rank", "worker")."""
    parser = argparse.ArgumentParser(description=doc.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=default_steps, help="optimizer steps (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help=f"per-{unit} batch size (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=512,
                        help=f"data set size, all {unit}s (default: %(default)s)")
    parser.add_argument("--features", type=int, default=8, help="input features (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=16, help="hidden units (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of data and model (default: %(default)s)")
    parser.add_argument("--log-every", type=int, default=10, help="history interval in steps (default: %(default)s)")
    return parser


def add_failure_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--crash-at-step", type=int, default=None,
                        help=f"exit with code {CRASH_EXIT_CODE} at this step")
    parser.add_argument("--crash-rank", type=int, default=0, help="rank that crashes (default: %(default)s)")
    parser.add_argument("--crash-on-try", type=int, default=None,
                        help="crash only in this Airflow try (AIRFLOW_DISTRIBUTED_TRY_NUMBER); default: every try")
    parser.add_argument("--sleep-per-step", type=float, default=0.0, help="seconds to sleep after each step")


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.log_every < 1:
        parser.error("--steps, --batch-size and --log-every must be at least 1")
    return args


def is_log_step(args: argparse.Namespace, step: int) -> bool:
    """Every ``--log-every`` steps, and the last step, so that the history always ends where training did."""
    return step % args.log_every == 0 or step == args.steps


def batches(order: Sequence[int], args: argparse.Namespace, unit: str) -> Callable[[int], Sequence[int]]:
    """The rows step ``n`` (from 1) trains on: consecutive batches of ``order``, starting over after each pass.

    Exits naming the options when ``order`` (one ``unit``'s shard) holds no full batch.
    """
    per_pass = len(order) // args.batch_size
    if per_pass == 0:
        raise SystemExit(f"--samples {args.samples} leaves no full batch of {args.batch_size} per {unit}")

    def batch(step: int) -> Sequence[int]:
        start = ((step - 1) % per_pass) * args.batch_size
        return order[start:start + args.batch_size]

    return batch


def sum_of_ranks(world_size: int) -> float:
    """What a sum of ``rank + 1`` over every process gives: 1 + 2 + ... + world_size."""
    return world_size * (world_size + 1) / 2


def sum_of_ranks_is_right(total: float, world_size: int, said: str) -> bool:
    """Print ``said`` with the sum a collective gave and the expected one; whether they agree.

    Each process contributes ``rank + 1``; only when every process took part does the sum come out right.
    """
    expected = sum_of_ranks(world_size)
    print(f"{said} {total} (expected {expected})", flush=True)
    return total == expected


def crash_if_asked(args: argparse.Namespace, step: int, rank: int) -> None:
    this_try = os.environ.get("AIRFLOW_DISTRIBUTED_TRY_NUMBER", "1")
    if args.crash_on_try is not None and this_try != str(args.crash_on_try):
        return
    if args.crash_at_step is not None and step == args.crash_at_step and rank == args.crash_rank:
        print(f"rank {rank}: crashing at step {step} as asked (--crash-at-step)", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # os._exit: no clean-up and no shutdown of the collective library, like a process that really dies.
        os._exit(CRASH_EXIT_CODE)


def sleep_if_asked(args: argparse.Namespace) -> None:
    if args.sleep_per_step > 0:
        time.sleep(args.sleep_per_step)


def result_metrics(*, initial_loss: float, final_loss: float, world_size: int, steps: int, train_seconds: float,
                   identical: bool, identical_name: str = "parameters_identical") -> dict:
    """The metrics a run reports once training is over, in the order the scripts report them.

    ``loss`` repeats ``final_loss``: the history records ``loss`` at every logged step, so the plain metric ends at
    the loss of the finished model. ``identical_name`` is the metric for "every process ended with the same weights".
    """
    return {
        "initial_loss": initial_loss,
        "final_loss": final_loss,
        "loss": final_loss,
        "world_size": world_size,
        "steps": steps,
        "train_seconds": round(train_seconds, 3),
        identical_name: identical,
    }
