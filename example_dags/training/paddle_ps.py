"""Linear regression in PaddlePaddle's parameter-server mode on the CPU: pservers hold the parameters, trainers
push gradients to them and pull the parameters back.

Every replica runs this script. Fleet's ``PaddleCloudRoleMaker`` reads the contract's ``TRAINING_ROLE``,
``PADDLE_PSERVERS_IP_PORT_LIST``, ``PADDLE_TRAINER_ENDPOINTS``, ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID``,
``POD_IP`` and ``PADDLE_PORT``. A pserver serves until the job stops it (the master's end decides the job). Trainers
run Fleet's asynchronous mode (``a_sync``): each step pulls the dense parameters from the pservers, computes the
gradient on the trainer's own shard of a synthetic data set and pushes it; the pservers apply every trainer's
gradients with SGD. (Paddle's synchronous mode crashes in ``send_barrier`` with the CPU wheels, see
docs/frameworks.md.)

The exchange is checked at the end: every trainer flushes its pushes, waits until all trainers have, pulls the
parameters once more and writes their checksum into the model directory; trainer 0 (the master) fails unless all
checksums are identical (the trainers fit different shards, so they only are when they all
read what the pservers made of everyone's gradients). The files need a model directory every replica sees (the
local backend's, or a shared volume on Kubernetes).

Trainer 0 saves ``model.pdparams`` and reports ``initial_loss``, ``final_loss`` (mean squared error over the whole
data set, with the pservers' parameters), ``world_size`` (trainers), ``pservers`` and the history through
:mod:`airflow_distributed.tracking`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import common
import numpy as np

from airflow_distributed import tracking

# How long a trainer waits for the others (trainer 0's initial parameters, everyone's last push, the checksums).
PEER_TIMEOUT_SECONDS = 300.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = common.make_parser(__doc__, default_steps=60, unit="trainer")
    # Asynchronous updates from several trainers land on parameters the others read a step earlier: a smaller step
    # than the synchronous examples' keeps it converging (0.05 diverges here).
    parser.set_defaults(lr=0.01)
    return common.parse_args(parser, argv)


def make_data(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.samples, args.features)).astype("float32")
    weights = rng.standard_normal((args.features, 1)).astype("float32")
    y = (x @ weights + 0.3 + 0.01 * rng.standard_normal((args.samples, 1))).astype("float32")
    return x, y


def wait_for(predicate, what: str) -> None:
    deadline = time.monotonic() + PEER_TIMEOUT_SECONDS
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {PEER_TIMEOUT_SECONDS:.0f} s waiting for {what}")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import paddle
    import paddle.distributed.fleet as fleet
    from paddle.distributed.ps.utils.public import get_the_one_recv_context

    paddle.enable_static()
    fleet.init(fleet.PaddleCloudRoleMaker(is_collective=False))
    paddle.seed(args.seed)
    x = paddle.static.data("x", [None, args.features], "float32")
    y = paddle.static.data("y", [None, 1], "float32")
    loss = paddle.mean(paddle.square(paddle.static.nn.fc(x, 1, name="linear") - y))
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=args.lr), strategy).minimize(loss)
    # minimize() puts in place the trainer's own programs (with the push of the gradients): use those from here on.
    main_program, startup = paddle.static.default_main_program(), paddle.static.default_startup_program()

    env = os.environ
    if fleet.is_server():
        print(f"pserver {fleet.server_index()}/{fleet.server_num()}: serving on {env['POD_IP']}:{env['PADDLE_PORT']}",
              flush=True)
        fleet.init_server()
        fleet.run_server()  # until the job stops it
        return 0

    rank, world = fleet.worker_index(), fleet.worker_num()
    print(f"trainer {rank}/{world}: {fleet.server_num()} pservers {','.join(fleet.server_endpoints())}", flush=True)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    fleet.init_worker()  # trainer 0 pushes its initial parameters to the pservers
    runtime = fleet.fleet._runtime_handle
    scope = paddle.static.global_scope()
    names = sorted(p.name for p in main_program.all_parameters())

    def pull() -> dict[str, np.ndarray]:
        """The pservers' current parameters, into this trainer's scope (Fleet's own pull, as init_worker does)."""
        runtime._pull_all_dense(runtime.scopes, runtime._send_ctx, get_the_one_recv_context(runtime.context))
        return {name: np.array(scope.find_var(name).get_tensor()) for name in names}

    def mse(params: dict[str, np.ndarray]) -> float:
        weight, bias = params["linear.w_0"], params["linear.b_0"]
        return float(np.mean(np.square(x_all @ weight + bias - y_all)))

    # Without Paddle's gloo barrier the others may pull before trainer 0 pushed: wait until its weights are there.
    wait_for(lambda: bool(np.any(pull()["linear.w_0"])), "trainer 0's initial parameters on the pservers")
    x_all, y_all = make_data(args)
    x_mine, y_mine = x_all[rank::world], y_all[rank::world]
    batch_of = common.batches(np.random.default_rng(args.seed + rank).permutation(len(x_mine)), args, "trainer")
    initial_loss = mse(pull())
    started = time.monotonic()
    for step in range(1, args.steps + 1):
        pull()
        batch = batch_of(step)
        (local_loss,) = exe.run(main_program, feed={"x": x_mine[batch], "y": y_mine[batch]}, fetch_list=[loss])
        if common.is_log_step(args, step):
            tracking.log_metrics(step=step, loss=float(np.asarray(local_loss)))
            if rank == 0:
                print(f"step {step} loss (trainer 0's batch) {float(np.asarray(local_loss)):.6f}", flush=True)
    runtime._worker.client_flush()  # this trainer's pushes, sent
    train_seconds = time.monotonic() - started

    # Named after the job and try: a directory no earlier run or try has files in.
    exchange = Path(tracking.get_model_dir()) / (
        f".paddle-ps-{env.get('AIRFLOW_DISTRIBUTED_JOB', 'local')}-try{env.get('AIRFLOW_DISTRIBUTED_TRY_NUMBER', '1')}")
    exchange.mkdir(parents=True, exist_ok=True)
    (exchange / f"done-{rank}").touch()
    wait_for(lambda: len(list(exchange.glob("done-*"))) == world, "every trainer's last push")
    final = pull()
    flat = np.concatenate([final[name].ravel() for name in names]).astype("float64")
    checksum = [float(flat.sum()), float((flat * flat).sum())]
    (exchange / f"checksum-{rank}.json.tmp").write_text(json.dumps(checksum))
    (exchange / f"checksum-{rank}.json.tmp").rename(exchange / f"checksum-{rank}.json")
    print(f"trainer {rank}: parameter checksum {checksum}", flush=True)
    # Only once every trainer has pulled: stop_worker on trainer 0 also stops the pservers.
    wait_for(lambda: len(list(exchange.glob("checksum-*.json"))) == world, "every trainer's checksum")
    fleet.stop_worker()
    if rank != 0:
        return 0

    rows = [json.loads((exchange / f"checksum-{r}.json").read_text()) for r in range(world)]
    identical = all(row == rows[0] for row in rows)
    if not identical:
        print(f"trainer 0: parameters differ across trainers: {rows}", file=sys.stderr)
        return common.DIVERGED_EXIT_CODE
    final_loss = mse(final)
    model_path = os.path.join(tracking.get_model_dir(), "model.pdparams")
    paddle.static.save(main_program, model_path.removesuffix(".pdparams"))
    metrics = common.result_metrics(initial_loss=initial_loss, final_loss=final_loss, world_size=world,
                                    steps=args.steps, train_seconds=train_seconds, identical=identical)
    metrics.update(pservers=fleet.server_num(), parameter_checksum=checksum[0])
    tracking.log_metrics(**metrics)
    tracking.log_model(model_path)
    print(f"trainer 0: initial loss {initial_loss:.6f}, final loss {final_loss:.6f} after {args.steps} steps on "
          f"{world} trainers and {fleet.server_num()} pservers in {train_seconds:.2f} s; parameters identical on all "
          "trainers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
