"""Synchronous data-parallel training with TensorFlow's MultiWorkerMirroredStrategy, on the CPU.

Every replica (the ``chief`` and each ``worker``) runs this script; the strategy reads the cluster and this
replica's place in it from ``TF_CONFIG``. A small Keras model learns a synthetic regression in a custom training
loop: each worker's input pipeline reads its own shard of the data, and the Keras optimizer all-reduces the
gradients across workers at every step.

After training the workers exchange a checksum of their weights and fail unless they are identical: since each
worker sees other data, they only are when the gradients really were combined. The chief saves the model into the
model directory and reports ``initial_loss``, ``final_loss`` (mean squared error on the whole data set),
``world_size`` and the loss history through :mod:`airflow_distributed.tracking`. The other workers also save, as
TensorFlow asks every worker to take part in saving a distributed model, but into a temporary directory that they
delete again.

Run by hand without ``TF_CONFIG``, it trains alone in one process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

# TensorFlow's C++ start-up chatter (oneDNN notices, CPU feature lines) would bury the training log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import common
import numpy as np
import tensorflow as tf

from airflow_distributed import tracking


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return common.parse_args(common.make_parser(__doc__, default_steps=40, unit="worker"), argv)


def make_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    # The same seed on every worker gives every worker the same data set; the input pipeline then shards it.
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, 1)).astype("float32")
    y = x @ weights + 0.5 * np.sin(2.0 * x[:, :1]) + 0.01 * rng.standard_normal((args.samples, 1))
    return x, y.astype("float32")


def is_chief(resolver: tf.distribute.cluster_resolver.ClusterResolver) -> bool:
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type is None:  # no TF_CONFIG: a single worker is its own chief
        return True
    # Without a "chief" entry in the cluster, TensorFlow treats worker 0 as the chief.
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)


def weights_checksum(strategy: tf.distribute.Strategy, model: tf.keras.Model) -> np.ndarray:
    """Every worker's checksum of its own copy of the weights, as a (workers, 3) array, on every worker.

    Each replica puts its checksum in its own row of a zero matrix and the rows are summed across the cluster: an
    all-gather made of one all-reduce, which MultiWorkerMirroredStrategy runs over the same collectives as training.
    """
    replicas = strategy.num_replicas_in_sync

    def exchange() -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        flat = tf.concat([tf.reshape(tf.cast(w, tf.float64), [-1]) for w in model.trainable_weights], axis=0)
        positions = tf.range(1, tf.size(flat) + 1, dtype=tf.float64)
        checksum = tf.stack([tf.reduce_sum(flat), tf.reduce_sum(flat * flat), tf.reduce_sum(flat * positions)])
        row = tf.one_hot(context.replica_id_in_sync_group, replicas, dtype=tf.float64)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, row[:, None] * checksum[None, :])

    gathered = strategy.run(tf.function(exchange))
    # Every local replica holds the same reduced value; take the first.
    return strategy.experimental_local_results(gathered)[0].numpy()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if "OMP_NUM_THREADS" not in os.environ:
        # Several processes share a few cores: one thread per op avoids oversubscription. Inter-op threads are left
        # alone, as collective ops need more than one to make progress.
        tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(args.seed)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    chief = is_chief(resolver)
    workers = strategy.num_replicas_in_sync
    print(f"{resolver.task_type or 'local'} {resolver.task_id or 0}: {workers} replicas in sync", flush=True)

    x, y = make_data(args)
    global_batch = args.batch_size * workers

    def shard(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Each worker's pipeline takes its own slice of the examples (worker i: every n-th one) and batches it at
        # the per-replica size, so one step consumes a global batch of batch_size x workers.
        per_replica = context.get_per_replica_batch_size(global_batch)
        return (
            tf.data.Dataset.from_tensor_slices((x, y))
            .shard(context.num_input_pipelines, context.input_pipeline_id)
            .shuffle(args.samples, seed=args.seed + context.input_pipeline_id)
            .repeat()
            .batch(per_replica, drop_remainder=True)
        )

    batches = iter(strategy.distribute_datasets_from_function(shard))

    with strategy.scope():
        # Variables created in the scope are mirrored on every worker, with worker 0's initial values.
        model = tf.keras.Sequential([
            tf.keras.Input(shape=(args.features,)),
            tf.keras.layers.Dense(args.hidden, activation="tanh"),
            tf.keras.layers.Dense(1),
        ])
        optimizer = tf.keras.optimizers.SGD(learning_rate=args.lr)
        optimizer.build(model.trainable_variables)

    # A custom loop rather than model.fit: Keras 3's fit() does not run under MultiWorkerMirroredStrategy (its data
    # adapter hands PerReplica values to ops that want tensors), while its optimizer does: apply_gradients inside
    # strategy.run all-reduces (sums) the gradients across workers before the update.
    @tf.function
    def train_step(iterator) -> tf.Tensor:
        def replica_step(features: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
            with tf.GradientTape() as tape:
                squared_error = tf.reduce_mean(tf.square(model(features, training=True) - targets), axis=-1)
                # Divided by the global batch, so that the summed gradients are those of the global mean loss.
                loss = tf.nn.compute_average_loss(squared_error, global_batch_size=global_batch)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return loss

        per_replica_loss = strategy.run(replica_step, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)

    def mse() -> float:
        # Every worker holds the same weights (checked below), so each evaluates the whole data set by itself.
        return float(np.mean(np.square(model(x, training=False).numpy() - y)))

    initial_loss = mse()
    history = []
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        batch_loss = float(train_step(batches))
        if common.is_log_step(args, step):
            history.append((step, batch_loss))
            if chief:
                print(f"step {step} batch loss {batch_loss:.6f}", flush=True)
    train_seconds = time.monotonic() - started
    final_loss = mse()

    checksums = weights_checksum(strategy, model)
    identical = bool(np.all(checksums == checksums[0]))
    if not identical:
        print(f"weights differ across workers: {checksums.tolist()}", file=sys.stderr)
        return common.DIVERGED_EXIT_CODE

    # Every worker saves; only the chief's copy is kept.
    model_dir = tracking.get_model_dir() if chief else tempfile.mkdtemp(prefix="tf-worker-model-")
    model_path = os.path.join(model_dir, "model.keras")
    model.save(model_path)
    if not chief:
        shutil.rmtree(model_dir, ignore_errors=True)
        print(f"worker done: final loss {final_loss:.6f}")
        return 0

    for step, batch_loss in history:
        tracking.log_metrics(step=step, loss=batch_loss)
    tracking.log_metrics(**common.result_metrics(
        initial_loss=initial_loss, final_loss=final_loss, world_size=workers, steps=args.steps,
        train_seconds=train_seconds, identical=identical, identical_name="weights_identical"))
    tracking.log_model(model_path)
    print(f"chief: initial loss {initial_loss:.6f}, final loss {final_loss:.6f} after {args.steps} steps on "
          f"{workers} workers in {train_seconds:.2f} s; weights identical on all workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
