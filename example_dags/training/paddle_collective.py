"""Data-parallel linear regression with PaddlePaddle's collective mode on the CPU, gradients all-reduced over gloo.

Every replica (the ``master``, trainer 0, and each ``worker``) runs this script as one trainer.
``paddle.distributed.init_parallel_env`` reads the contract's ``PADDLE_TRAINER_ENDPOINTS``,
``PADDLE_CURRENT_ENDPOINT``, ``PADDLE_TRAINER_ID`` and ``PADDLE_TRAINERS_NUM``; its TCP store runs on trainer 0's
endpoint. On the CPU the process group must be gloo: ``PADDLE_DISTRI_BACKEND=gloo`` unless set otherwise.

Each trainer fits its own shard of a synthetic data set; after every backward pass the gradients are summed over all
trainers with ``all_reduce`` and divided by their number, so every trainer applies the same update. Two checks show
the exchange: an ``all_reduce`` of ``trainer id + 1`` must give ``n (n + 1) / 2`` (``allreduce_sum``), and after
training the trainers all-gather a checksum of their parameters and fail unless they are identical (they fit
different shards, so they only are when the gradients were really summed).

Trainer 0 saves ``model.pdparams`` into the model directory and reports ``initial_loss``, ``final_loss`` (mean
squared error over the whole data set), ``world_size`` and the history through :mod:`airflow_distributed.tracking`.

Run by hand without the contract's variables, it trains alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import common
import numpy as np

from airflow_distributed import tracking


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser(__doc__, default_steps=60, unit="trainer")
    common.add_failure_options(parser)
    return common.parse_args(parser, argv)


def make_data(args: argparse.Namespace, rank: int, world: int) -> tuple[np.ndarray, ...]:
    """The whole data set (x, y), then this trainer's shard of it (x, y)."""
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, 1)).astype("float32")
    y = (x @ weights - 0.2 + 0.01 * rng.standard_normal((args.samples, 1))).astype("float32")
    return x, y, x[rank::world], y[rank::world]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Gloo is the only collective backend of a CPU build; a GPU job sets PADDLE_DISTRI_BACKEND=nccl.
    os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")
    import paddle
    import paddle.distributed as dist

    paddle.seed(args.seed)
    distributed = int(os.environ.get("PADDLE_TRAINERS_NUM", "1")) > 1
    if distributed:
        dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"trainer {rank}/{world}: endpoint {os.environ.get('PADDLE_CURRENT_ENDPOINT', 'local')}", flush=True)

    def all_reduce(tensor):
        if distributed:
            dist.all_reduce(tensor)
        return tensor

    total = float(all_reduce(paddle.to_tensor([float(rank + 1)])).numpy()[0])
    if not common.sum_of_ranks_is_right(total, world, f"trainer {rank}: all-reduce sum of trainer ids + 1 is"):
        return common.DIVERGED_EXIT_CODE

    x_all, y_all, x, y = make_data(args, rank, world)
    batch_of = common.batches(np.random.default_rng(args.seed + rank).permutation(len(x)), args, "trainer")
    model = paddle.nn.Linear(args.features, 1)
    optimizer = paddle.optimizer.SGD(learning_rate=args.lr, parameters=model.parameters())

    def mse() -> float:
        with paddle.no_grad():
            return float(paddle.mean(paddle.square(model(paddle.to_tensor(x_all)) - paddle.to_tensor(y_all))))

    initial_loss = mse()
    history = []
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        common.crash_if_asked(args, step, rank)
        batch = batch_of(step)
        loss = paddle.mean(paddle.square(model(paddle.to_tensor(x[batch])) - paddle.to_tensor(y[batch])))
        loss.backward()
        for parameter in model.parameters():
            # The sum over trainers, then the mean: every trainer applies the same averaged gradient.
            parameter.grad.set_value(all_reduce(parameter.grad) / world)
        optimizer.step()
        optimizer.clear_grad()
        if common.is_log_step(args, step):
            global_loss = float(all_reduce(loss.detach()).numpy()) / world
            history.append({"step": step, "loss": global_loss})
            tracking.log_metrics(step=step, loss=global_loss)
            if rank == 0:
                print(f"step {step} loss (mean over trainers) {global_loss:.6f}", flush=True)
        common.sleep_if_asked(args)
    train_seconds = time.monotonic() - started
    final_loss = mse()

    flat = np.concatenate([p.numpy().astype("float64").ravel() for p in model.parameters()])
    checksum = paddle.to_tensor([flat.sum(), (flat * flat).sum()], dtype="float64")
    gathered: list = []
    if distributed:
        dist.all_gather(gathered, checksum)
    else:
        gathered = [checksum]
    rows = np.stack([t.numpy() for t in gathered])
    identical = bool(np.all(rows == rows[0]))
    if not identical:
        print(f"trainer {rank}: parameters differ across trainers: {rows.tolist()}", file=sys.stderr)
        return common.DIVERGED_EXIT_CODE

    if rank == 0:
        model_path = os.path.join(tracking.get_model_dir(), "model.pdparams")
        paddle.save(model.state_dict(), model_path)
        metrics = common.result_metrics(initial_loss=initial_loss, final_loss=final_loss, world_size=world,
                                        steps=args.steps, train_seconds=train_seconds, identical=identical)
        metrics.update(allreduce_sum=total, allreduce_expected=common.sum_of_ranks(world),
                       parameter_checksum=float(rows[0][0]))
        tracking.log_metrics(**metrics)
        tracking.log_model(model_path)
        print(f"trainer 0: initial loss {initial_loss:.6f}, final loss {final_loss:.6f} after {args.steps} steps on "
              f"{world} trainers in {train_seconds:.2f} s; parameters identical on all trainers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
