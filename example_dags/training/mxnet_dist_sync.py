"""Synchronous data-parallel training with MXNet's parameter server (``kvstore='dist_sync'``), on the CPU.

Every replica runs this script; what it does depends on ``DMLC_ROLE``:

- ``scheduler`` (the job's master) and ``server``: importing mxnet starts ps-lite in that role and blocks until the
  workers are done; then MXNet exits the process itself. The scheduler catches that exit to report the results
  (see "Reporting" below).
- ``worker``: trains a small Gluon MLP on a synthetic regression. Each worker reads its own shard of the data;
  every step its gradients are pushed to the servers, which sum them over all workers and update the weights that
  every worker then pulls.

After training the workers exchange a checksum of their weights through the same key-value store and fail unless
they are identical, which they are only when every worker took its weights from the same servers.
Worker 0 saves the model parameters (``model.params``) into the model directory.

Reporting. Only the master replica, here the scheduler, is given ``AIRFLOW_DISTRIBUTED_OUTPUT``, but only the workers
know the losses. ps-lite offers no way to send arbitrary data to the scheduler, so worker 0 writes its results to
``metrics.json`` in the model directory (atomically) before it leaves the key-value store; the scheduler's ps-lite
loop cannot end before every worker has left, so when it does the file is complete, and the scheduler passes it on
through :mod:`airflow_distributed.tracking`. The model directory is the one place every replica of a job can reach
(on Kubernetes it must be shared storage, as it must be anyway for the saved model to outlive the job); a stale file
from an earlier attempt is removed by the scheduler before ps-lite starts, when no worker can have written yet.

Run by hand without ``DMLC_ROLE``, it trains alone with a local key-value store.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import common
import numpy as np

from airflow_distributed import tracking

HANDOFF_FILE = "metrics.json"
# Beside common's exit codes: the scheduler found no results from worker 0.
MISSING_RESULTS_EXIT_CODE = 5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return common.parse_args(common.make_parser(__doc__, default_steps=40, unit="worker"), argv)


def prepare_environment() -> None:
    # ps-lite advertises the address of the first non-loopback interface unless told otherwise. When the scheduler is
    # on the loopback (the local backend), the other nodes must be reached there too.
    if os.environ.get("DMLC_PS_ROOT_URI", "").startswith("127.") and "DMLC_NODE_HOST" not in os.environ:
        os.environ["DMLC_NODE_HOST"] = "127.0.0.1"
    if "OMP_NUM_THREADS" not in os.environ:
        # Several processes share a few cores: one thread each avoids oversubscription, which is far slower.
        os.environ["OMP_NUM_THREADS"] = "1"


def run_parameter_server_node(role: str) -> int:
    model_dir = tracking.get_model_dir()
    handoff = os.path.join(model_dir, HANDOFF_FILE)
    if role == "scheduler" and "://" not in model_dir:
        try:
            os.unlink(handoff)
        except FileNotFoundError:
            pass
    started = time.monotonic()
    print(f"{role}: starting ps-lite", flush=True)
    try:
        # On a scheduler or server, importing mxnet runs the ps-lite loop and then calls sys.exit() in the middle of
        # the import, once every worker has finalized.
        import mxnet  # noqa: F401
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise
    else:
        print(f"{role}: importing mxnet returned instead of running ps-lite; is DMLC_ROLE set?", file=sys.stderr)
        return 1
    print(f"{role}: ps-lite finished after {time.monotonic() - started:.2f} s", flush=True)
    if role != "scheduler":
        return 0

    try:
        with open(handoff, encoding="utf-8") as handle:
            results = json.load(handle)
    except (OSError, ValueError) as exc:
        print(f"scheduler: no results from worker 0 in {handoff}: {exc}", file=sys.stderr)
        return MISSING_RESULTS_EXIT_CODE
    report(results)
    print(f"scheduler: reported {json.dumps(results['metrics'])}")
    return 0


def report(results: dict) -> None:
    for entry in results.get("history", []):
        entry = dict(entry)
        tracking.log_metrics(step=entry.pop("step"), **entry)
    tracking.log_metrics(**results["metrics"])
    if results.get("model_path"):
        tracking.log_model(results["model_path"])


def make_data(args: argparse.Namespace, rank: int, num_workers: int) -> tuple[np.ndarray, ...]:
    """The whole data set (x, y), then this worker's shard of it (x, y)."""
    # The same seed on every worker gives every worker the same data set; each then keeps every n-th example.
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, 1)).astype("float32")
    y = (x @ weights + 0.5 * np.sin(2.0 * x[:, :1]) + 0.01 * rng.standard_normal((args.samples, 1))).astype("float32")
    return x, y, x[rank::num_workers], y[rank::num_workers]


def train_worker(args: argparse.Namespace) -> int:
    import mxnet as mx
    from mxnet import autograd, gluon

    distributed = "DMLC_ROLE" in os.environ
    kv = mx.kv.create("dist_sync" if distributed else "local")
    rank, num_workers = kv.rank, kv.num_workers
    print(f"worker {rank}/{num_workers}: key-value store {kv.type} ready", flush=True)

    mx.random.seed(args.seed)
    np.random.seed(args.seed)
    x_all, y_all, x, y = make_data(args, rank, num_workers)
    batch_of = common.batches(np.random.default_rng(args.seed + rank).permutation(len(x)), args, "worker")

    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(args.hidden, activation="tanh"), gluon.nn.Dense(1))
    net.initialize(mx.init.Xavier())
    net(mx.nd.array(x[:1]))  # deferred initialization: gives the parameters their shapes now
    # The parameter-server mode of dist_sync: every step each worker pushes its gradients, the servers wait for all
    # workers' pushes, sum them, apply the SGD update to the weights they hold, and the workers pull the new weights.
    # (update_on_kvstore=False, where the servers only sum and each worker updates itself, is not used: Gluon's
    # Trainer initializes the weights and sums the gradients under the same keys, and a worker's first pull of the
    # initial weights can then race with the other workers' first gradients and return those instead.)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": args.lr}, kvstore=kv,
                            update_on_kvstore=True)
    loss_fn = gluon.loss.L2Loss()  # 0.5 * squared error

    def mse() -> float:
        return float(np.mean(np.square(net(mx.nd.array(x_all)).asnumpy() - y_all)))

    initial_loss = mse()
    history = []
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        batch = batch_of(step)
        features, targets = mx.nd.array(x[batch]), mx.nd.array(y[batch])
        with autograd.record():
            loss = loss_fn(net(features), targets)
        loss.backward()
        # Gradients are summed over all workers, so normalize by the global batch to average them.
        trainer.step(args.batch_size * num_workers)
        if common.is_log_step(args, step):
            # Worker 0's own batch, as a mean squared error (L2Loss halves it).
            batch_loss = 2.0 * float(loss.mean().asscalar())
            history.append({"step": step, "loss": batch_loss})
            if rank == 0:
                print(f"step {step} batch loss (worker 0) {batch_loss:.6f}", flush=True)
    train_seconds = time.monotonic() - started
    final_loss = mse()

    checksums = exchange_checksums(kv, net, trainer, rank, num_workers)
    identical = bool(np.all(checksums == checksums[0]))
    if not identical:
        print(f"worker {rank}: parameters differ across workers: {checksums.tolist()}", file=sys.stderr)
        return common.DIVERGED_EXIT_CODE

    if rank == 0:
        model_dir = tracking.get_model_dir()
        model_path = os.path.join(model_dir, "model.params")
        net.save_parameters(model_path)
        results = {
            "metrics": common.result_metrics(
                initial_loss=initial_loss, final_loss=final_loss, world_size=num_workers, steps=args.steps,
                train_seconds=train_seconds, identical=identical),
            "model_path": model_path,
            "history": history,
        }
        if distributed:
            write_handoff(os.path.join(model_dir, HANDOFF_FILE), results)
        else:
            report(results)  # no scheduler: this process is the master
        print(f"worker 0: initial loss {initial_loss:.6f}, final loss {final_loss:.6f} after {args.steps} steps on "
              f"{num_workers} workers in {train_seconds:.2f} s; parameters identical on all workers")
    return 0


def exchange_checksums(kv, net, trainer, rank: int, num_workers: int) -> np.ndarray:
    """Every worker's checksum of its parameters, as a (workers, 3) array, on every worker.

    Each worker pushes a zero matrix with its checksum in its own row; dist_sync sums the pushes of all workers. The
    servers run the training optimizer on every key, this one included, so what comes back is the SGD step from
    zero, ``-lr * rescale_grad * sum``: the same elementwise map for every row, undone here. The servers compute it
    in float32, so rows that differ by less than about one part in 10**7 would compare equal; workers that did not
    share their updates, each fitting its own shard, differ by orders of magnitude more.
    """
    import mxnet as mx

    flat = np.concatenate([p.data().asnumpy().astype("float64").ravel() for p in net.collect_params().values()])
    positions = np.arange(1, flat.size + 1, dtype="float64")
    rows = np.zeros((num_workers, 3), dtype="float64")
    rows[rank] = [flat.sum(), (flat * flat).sum(), (flat * positions).sum()]
    # Trainer uses the integer keys 0..n-1 for the n parameters, and a store takes keys of one type only: n is free.
    key = len(list(net.collect_params().keys()))
    kv.init(key, mx.nd.zeros(rows.shape, dtype="float64"))
    kv.push(key, mx.nd.array(rows, dtype="float64"))
    out = mx.nd.zeros(rows.shape, dtype="float64")
    kv.pull(key, out=out)
    return out.asnumpy() / -(trainer.learning_rate * trainer.optimizer.rescale_grad)


def write_handoff(path: str, results: dict) -> None:
    # Written whole and renamed into place: the scheduler must never read half a file.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(results, handle)
    os.chmod(tmp, 0o644)  # mkstemp makes it private; the scheduler may run as another user on shared storage
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    prepare_environment()
    role = os.environ.get("DMLC_ROLE", "worker")
    if role in ("scheduler", "server"):
        return run_parameter_server_node(role)
    if role != "worker":
        raise SystemExit(f"DMLC_ROLE must be scheduler, server or worker, not {role!r}")
    return train_worker(args)


if __name__ == "__main__":
    sys.exit(main())
