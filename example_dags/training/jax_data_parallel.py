"""Data-parallel linear regression with JAX multi-process on the CPU, gradients summed by a cross-process ``psum``.

Every replica (the ``master``, process 0, which also hosts JAX's coordinator service, and each ``worker``) runs this
script and is one JAX process with one CPU device. ``jax.distributed.initialize`` is called with the variables of the
replica contract: ``JAX_COORDINATOR_ADDRESS`` (which JAX also reads itself), ``JAX_NUM_PROCESSES`` and
``JAX_PROCESS_ID``. Cross-process collectives on CPU go through gloo, chosen before initialising.

The devices of all processes form one mesh axis ``data``. Every step each process takes a batch of its own shard of
a synthetic data set; inside ``shard_map`` each device computes the gradient of its batch and ``psum`` adds the
gradients of all processes, so every process applies the same update. Two checks show the exchange really happened:

- before training, each process contributes ``process_id + 1`` to a ``psum``; the result must be
  ``n (n + 1) / 2`` on every process (reported as ``psum`` and ``psum_expected``);
- after training, the processes all-gather a checksum of their parameters and fail unless they are identical:
  they fit different shards, so they only are when the gradients were really summed across processes.

Process 0 saves ``model.npz`` into the model directory and reports ``initial_loss``, ``final_loss`` (mean squared
error over the whole data set), ``world_size``, the ``psum`` check, the checksum and the loss history through
:mod:`airflow_distributed.tracking`.

Run by hand without the contract's variables, it trains alone as one process.
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
    parser = common.make_parser(__doc__, default_steps=60, unit="process")
    parser.add_argument("--timeout", type=int, default=120,
                        help="seconds to wait for every process to join (default: %(default)s)")
    common.add_failure_options(parser)
    return common.parse_args(parser, argv)


def initialize(timeout: int):
    """Join the job's processes, if this replica is part of one; returns the ``jax`` module."""
    import jax

    # Gloo carries cross-process collectives on CPU (already the default in recent releases; older ones had none).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if "JAX_COORDINATOR_ADDRESS" in os.environ:
        jax.distributed.initialize(
            coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
            initialization_timeout=timeout,
        )
    return jax


def make_data(args: argparse.Namespace, process: int, processes: int) -> tuple[np.ndarray, ...]:
    """The whole data set (x, y), then this process's shard of it (x, y), every shard of the same size."""
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, 1)).astype("float32")
    y = (x @ weights + 0.1 + 0.01 * rng.standard_normal((args.samples, 1))).astype("float32")
    per_process = args.samples // processes
    return x, y, x[process::processes][:per_process], y[process::processes][:per_process]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    jax = initialize(args.timeout)
    import jax.numpy as jnp
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    process, processes = jax.process_index(), jax.process_count()
    print(f"process {process}/{processes}: {jax.local_device_count()} local of {jax.device_count()} devices",
          flush=True)
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharded = NamedSharding(mesh, P("data"))

    def global_array(local: np.ndarray):
        """This process's rows as its part of an array split over the ``data`` axis."""
        return jax.make_array_from_process_local_data(sharded, local)

    # The exchange on its own: each process adds process_id + 1.
    total = jax.jit(jax.shard_map(lambda v: jax.lax.psum(v, "data"), mesh=mesh, in_specs=P("data"), out_specs=P()))(
        global_array(np.full((jax.local_device_count(),), process + 1, dtype="float32")))
    psum = float(np.asarray(total.addressable_data(0))[0])
    if not common.sum_of_ranks_is_right(psum, processes, f"process {process}: psum of process ids + 1 is"):
        return common.DIVERGED_EXIT_CODE

    x_all, y_all, x, y = make_data(args, process, processes)
    batch_of = common.batches(np.random.default_rng(args.seed + process).permutation(len(x)), args, "process")

    def loss_fn(params, features, targets):
        return jnp.sum(jnp.square(features @ params["w"] + params["b"] - targets))

    def local_step(params, features, targets):
        # The sums of every process's squared errors and gradients, then the mean over the global batch.
        loss, grads = jax.value_and_grad(loss_fn)(params, features, targets)
        count = jax.lax.psum(features.shape[0], "data")
        loss, grads = jax.lax.psum((loss, grads), "data")
        scale = 1.0 / count
        params = jax.tree.map(lambda p, g: p - args.lr * scale * g, params, grads)
        return params, loss * scale

    step_fn = jax.jit(jax.shard_map(local_step, mesh=mesh, in_specs=(P(), P("data"), P("data")),
                                    out_specs=(P(), P())))

    def mse(params) -> float:
        w, b = (np.asarray(params[k].addressable_data(0)) for k in ("w", "b"))
        return float(np.mean(np.square(x_all @ w + b - y_all)))

    replicated = NamedSharding(mesh, P())
    params = {
        "w": jax.device_put(jnp.zeros((args.features, 1), jnp.float32), replicated),
        "b": jax.device_put(jnp.zeros((1,), jnp.float32), replicated),
    }
    initial_loss = mse(params)
    history = []
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        common.crash_if_asked(args, step, process)
        batch = batch_of(step)
        params, loss = step_fn(params, global_array(x[batch]), global_array(y[batch]))
        if common.is_log_step(args, step):
            batch_loss = float(np.asarray(loss.addressable_data(0)))
            history.append({"step": step, "loss": batch_loss})
            tracking.log_metrics(step=step, loss=batch_loss)
            if process == 0:
                print(f"step {step} global batch loss {batch_loss:.6f}", flush=True)
        common.sleep_if_asked(args)
    train_seconds = time.monotonic() - started
    final_loss = mse(params)

    w, b = (np.asarray(params[k].addressable_data(0), dtype="float64") for k in ("w", "b"))
    checksum = np.array([w.sum() + b.sum(), (w * w).sum() + (b * b).sum()])
    checksums = np.asarray(multihost_utils.process_allgather(checksum))
    identical = bool(np.all(checksums == checksums[0]))
    if not identical:
        print(f"process {process}: parameters differ across processes: {checksums.tolist()}", file=sys.stderr)
        return common.DIVERGED_EXIT_CODE

    if process == 0:
        model_path = os.path.join(tracking.get_model_dir(), "model.npz")
        np.savez(model_path, w=w, b=b)
        metrics = common.result_metrics(initial_loss=initial_loss, final_loss=final_loss, world_size=processes,
                                        steps=args.steps, train_seconds=train_seconds, identical=identical)
        metrics.update(psum=psum, psum_expected=common.sum_of_ranks(processes),
                       parameter_checksum=float(checksum[0]))
        tracking.log_metrics(**metrics)
        tracking.log_model(model_path)
        print(f"process 0: initial loss {initial_loss:.6f}, final loss {final_loss:.6f} after {args.steps} steps on "
              f"{processes} processes in {train_seconds:.2f} s; parameters identical on all processes")
    if processes > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
