"""Distributed gradient boosting with XGBoost's collective on the CPU: one booster trained over every replica's rows.

Every replica (the ``master``, rank 0, and each ``worker``) runs this script and is one XGBoost worker. The master
first starts XGBoost's tracker (``RabitTracker``) on its own address and port, as the replica contract says; then
every replica joins the tracker with ``DMLC_TRACKER_URI``, ``DMLC_TRACKER_PORT`` and ``DMLC_TASK_ID`` and checks
that XGBoost gave it the rank and world size the contract promised.

Each replica builds its own shard of a synthetic regression (every n-th row of one data set) and calls
``xgboost.train`` with ``tree_method="hist"``: every round the workers all-reduce their gradient histograms, so
each finds the same splits, and the training metric (rmse) is all-reduced too. Two checks show the exchange:

- before training, each replica contributes ``rank + 1`` to an all-reduce sum, which must be ``n (n + 1) / 2``
  (reported as ``allreduce_sum`` and ``allreduce_expected``);
- after training, the replicas compare a checksum of their serialized boosters (all-reduce min and max): they
  saw different rows, so their trees are identical only if the histograms were really summed across them.

The master saves the booster as ``model.ubj`` and reports the rmse of the first and last rounds, the mean squared
error over the whole data set (``initial_loss``: predicting the mean; ``final_loss``: the booster) and the history
through :mod:`airflow_distributed.tracking`.

Run by hand without the contract's variables, it trains alone.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import sys
import time

import common
import numpy as np

from airflow_distributed import tracking


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser(__doc__, default_steps=20, unit="worker")
    parser.add_argument("--max-depth", type=int, default=3, help="tree depth (default: %(default)s)")
    parser.add_argument("--timeout", type=int, default=120,
                        help="seconds the tracker and a collective wait for a peer (default: %(default)s)")
    parser.set_defaults(lr=0.3)
    return common.parse_args(parser, argv)


def make_data(args: argparse.Namespace, rank: int, world: int) -> tuple[np.ndarray, ...]:
    """The whole data set (x, y), then this worker's shard of it (x, y)."""
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal(args.features).astype("float32")
    y = (x @ weights + np.sin(2.0 * x[:, 0]) + 0.05 * rng.standard_normal(args.samples)).astype("float32")
    return x, y, x[rank::world], y[rank::world]


def wait_until_resolvable(host: str, timeout: float) -> None:
    """Until ``host`` resolves, at most ``timeout`` seconds. On a cluster a pod's own name under its job's headless
    Service resolves only once the cluster's DNS has the pod's endpoint, a moment after the pod started (its address
    reaches the API server after its containers may have begun); the tracker looks its address up at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.getaddrinfo(host, None)
            return
        except socket.gaierror:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def start_tracker(timeout: int):
    """The master's part: XGBoost's tracker on the contract's address and port, for every replica."""
    from xgboost.tracker import RabitTracker

    wait_until_resolvable(os.environ["DMLC_TRACKER_URI"], timeout)
    tracker = RabitTracker(host_ip=os.environ["DMLC_TRACKER_URI"], n_workers=int(os.environ["DMLC_NUM_WORKER"]),
                           port=int(os.environ["DMLC_TRACKER_PORT"]), sortby="task", timeout=timeout)
    tracker.start()
    print(f"master: tracker listening on {os.environ['DMLC_TRACKER_URI']}:{os.environ['DMLC_TRACKER_PORT']} "
          f"for {os.environ['DMLC_NUM_WORKER']} workers", flush=True)
    return tracker


def checksum(raw: bytes) -> float:
    """The first 6 bytes of the SHA-256 of a serialized booster, as an exact float64."""
    return float(int.from_bytes(hashlib.sha256(raw).digest()[:6], "big"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import xgboost as xgb
    from xgboost import collective

    distributed = "DMLC_TRACKER_URI" in os.environ
    is_master = os.environ.get("AIRFLOW_DISTRIBUTED_ROLE", "master") == "master"
    tracker = start_tracker(args.timeout) if distributed and is_master else None
    communicator = {}
    if distributed:
        communicator = {"dmlc_tracker_uri": os.environ["DMLC_TRACKER_URI"],
                        "dmlc_tracker_port": int(os.environ["DMLC_TRACKER_PORT"]),
                        "dmlc_task_id": os.environ["DMLC_TASK_ID"], "dmlc_retry": 10, "dmlc_timeout": args.timeout}
    with collective.CommunicatorContext(**communicator):
        rank, world = collective.get_rank(), collective.get_world_size()
        print(f"worker {rank}/{world}: task {os.environ.get('DMLC_TASK_ID', '0')}", flush=True)
        if distributed and (rank, world) != (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])):
            print(f"XGBoost gave rank {rank} of {world}, the contract rank {os.environ['RANK']} of "
                  f"{os.environ['WORLD_SIZE']}", file=sys.stderr)
            return common.DIVERGED_EXIT_CODE
        total = float(collective.allreduce(np.array([rank + 1.0]), collective.Op.SUM)[0])
        if not common.sum_of_ranks_is_right(total, world, f"worker {rank}: all-reduce sum of ranks + 1 is"):
            return common.DIVERGED_EXIT_CODE

        x_all, y_all, x, y = make_data(args, rank, world)
        dtrain = xgb.DMatrix(x, label=y)
        params = {"tree_method": "hist", "objective": "reg:squarederror", "eval_metric": "rmse", "nthread": 1,
                  "max_depth": args.max_depth, "eta": args.lr, "seed": args.seed}
        evals: dict = {}
        started = time.monotonic()
        booster = xgb.train(params, dtrain, num_boost_round=args.steps, evals=[(dtrain, "train")],
                            evals_result=evals, verbose_eval=False)
        train_seconds = time.monotonic() - started
        rmse = evals["train"]["rmse"]

        own = checksum(bytes(booster.save_raw("ubj")))
        low = float(collective.allreduce(np.array([own]), collective.Op.MIN)[0])
        high = float(collective.allreduce(np.array([own]), collective.Op.MAX)[0])
        identical = low == high == own
        if not identical:
            print(f"worker {rank}: boosters differ across workers ({low} .. {high})", file=sys.stderr)
            return common.DIVERGED_EXIT_CODE

    if rank == 0:
        initial_loss = float(np.mean(np.square(y_all - y_all.mean())))
        final_loss = float(np.mean(np.square(booster.predict(xgb.DMatrix(x_all)) - y_all)))
        model_path = os.path.join(tracking.get_model_dir(), "model.ubj")
        booster.save_model(model_path)
        for round_, value in enumerate(rmse, start=1):
            if common.is_log_step(args, round_):
                tracking.log_metrics(step=round_, rmse=value)
        metrics = common.result_metrics(initial_loss=initial_loss, final_loss=final_loss, world_size=world,
                                        steps=args.steps, train_seconds=train_seconds, identical=identical,
                                        identical_name="boosters_identical")
        metrics.update(initial_rmse=rmse[0], final_rmse=rmse[-1], allreduce_sum=total,
                       allreduce_expected=common.sum_of_ranks(world), booster_checksum=own)
        tracking.log_metrics(**metrics)
        tracking.log_model(model_path)
        print(f"worker 0: train rmse {rmse[0]:.4f} -> {rmse[-1]:.4f} after {args.steps} rounds on {world} workers in "
              f"{train_seconds:.2f} s; boosters identical on all workers")
    if tracker is not None:
        tracker.wait_for(args.timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
