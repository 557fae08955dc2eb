"""What the PyTorch training scripts share: a small MLP fitting a regression, trained data-parallel on the CPU.

``pytorch_ddp.py`` (DistributedDataParallel) and ``horovod_torch.py`` (Horovod) differ only in how the processes
find each other, how gradients are averaged and which collectives they call; both then run :func:`fit` here:

- the data: a synthetic regression from ``--seed``, the same on every rank, or with ``--data`` a torch file of
  tensors ``x`` and ``y`` prepared upstream; every rank trains on its own shard (:class:`DistributedSampler`);
- the model: Linear, tanh, Linear;
- the loop: ``--steps`` SGD steps with the options of :mod:`common` for crashes and slow steps;
- the check: the ranks gather a checksum of their parameters and fail (exit code 4) unless all are identical,
  which, since the shards differ, they only are when the gradients really were all-reduced;
- the report: rank 0 saves ``model.pt`` and logs the metrics of :func:`common.result_metrics` and the loss
  history through :mod:`airflow_distributed.tracking`, the history either as it goes or with the metrics.

A script hands :func:`fit` the collectives of its library as a :class:`Collectives`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import common
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from airflow_distributed import tracking


class Collectives:
    """The three collectives the shared code needs, over all ranks; ``name`` is for libraries that name them."""

    def sum(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """The element-wise sum of ``tensor`` over all ranks, as a new tensor."""
        raise NotImplementedError

    def mean(self, tensor: torch.Tensor, name: str) -> float:
        """The mean of a one-element ``tensor`` over all ranks."""
        raise NotImplementedError

    def gather(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """Every rank's ``tensor``, stacked in rank order: shape ``(world_size, *tensor.shape)``."""
        raise NotImplementedError


def add_data_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None, help="a torch file of tensors x and y to train on instead")


def limit_threads() -> None:
    if "OMP_NUM_THREADS" not in os.environ:
        # Several tiny processes share a few cores: one thread each avoids oversubscription, which is far slower.
        torch.set_num_threads(1)


def make_data(args: argparse.Namespace) -> TensorDataset:
    if args.data:
        # A data set prepared upstream (e.g. by a pipeline's prepare step): a dict of tensors "x" and "y".
        tensors = torch.load(args.data)
        args.samples, args.features = tensors["x"].shape
        return TensorDataset(tensors["x"].float(), tensors["y"].float().reshape(-1, 1))
    # The same generator seed on every rank gives every rank the same data set; the sampler then shards it.
    generator = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=generator)
    weights = torch.randn(args.features, 1, generator=generator)
    # A non-linear term, so that the hidden layer has something to learn beyond a linear fit.
    y = x @ weights + 0.5 * torch.sin(2.0 * x[:, :1]) + 0.01 * torch.randn(args.samples, 1, generator=generator)
    return TensorDataset(x, y)


def shard_data(args: argparse.Namespace, rank: int,
               world_size: int) -> tuple[DistributedSampler, DataLoader, DataLoader]:
    """This rank's sampler over the data set, its training batches and its evaluation batches."""
    dataset = make_data(args)
    # drop_last keeps every rank at the same number of batches, so no rank waits on an all-reduce nobody joins.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed,
                                 drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    eval_loader = DataLoader(dataset, batch_size=256, sampler=sampler)
    if len(loader) == 0:
        raise SystemExit(f"--samples {args.samples} leaves no full batch of {args.batch_size} per rank")
    return sampler, loader, eval_loader


def make_model(args: argparse.Namespace) -> nn.Module:
    # Seeded, so that a run is repeatable; the ranks start from rank 0's weights either way, as both libraries
    # broadcast them.
    torch.manual_seed(args.seed)
    return nn.Sequential(nn.Linear(args.features, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 1))


def global_mse(model: nn.Module, loader: DataLoader, collectives: Collectives) -> float:
    """Mean squared error over every rank's shard: sums and counts are all-reduced, so all ranks get the same value."""
    totals = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for x, y in loader:
            totals[0] += nn.functional.mse_loss(model(x), y, reduction="sum").double()
            totals[1] += y.numel()
    totals = collectives.sum(totals, "mse_totals")
    return (totals[0] / totals[1]).item()


def parameter_checksum(model: nn.Module) -> torch.Tensor:
    """Three float64 summaries of all parameters; a weighted sum makes a permutation or sign change show up too."""
    flat = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    positions = torch.arange(1, flat.numel() + 1, dtype=torch.float64)
    return torch.stack([flat.sum(), (flat * flat).sum(), (flat * positions).sum()])


def add_checkpoint_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="save a checkpoint every N steps and resume from the newest one on a retry (0: off)")


def resume_from_checkpoint(args: argparse.Namespace, model: nn.Module, rank: int, collectives: Collectives) -> int:
    """Load the newest checkpoint of this task instance into ``model`` on every rank; return its step (0: none).

    Rank 0 reads it and hands it to the others through a sum in which only rank 0 contributes (a broadcast made of
    the collectives every framework here has), so workers need no access to the checkpoint directory.
    """
    if getattr(args, "checkpoint_every", 0) <= 0:
        return 0
    saved = tracking.latest_checkpoint() if rank == 0 else None
    found = torch.tensor([0.0 if saved is None else float(saved[0] + 1)], dtype=torch.float64)
    step = int(collectives.sum(found, "checkpoint_step").item()) - 1
    if step < 0:
        return 0
    state = saved[1]["model"] if saved is not None else model.state_dict()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            mine = state[name] if rank == 0 else torch.zeros_like(tensor)
            tensor.copy_(collectives.sum(mine, f"checkpoint_{name}"))
    if rank == 0:
        print(f"resuming from the checkpoint of step {step} (try {tracking.get_try_number()})", flush=True)
    return step


def train(args: argparse.Namespace, module: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader,
          sampler: DistributedSampler, rank: int, collectives: Collectives,
          log_history_live: bool, start_step: int = 0, model: nn.Module | None = None) -> list[tuple[int, float]]:
    """Run ``--steps`` optimizer steps and return the loss history: ``(step, batch loss averaged over ranks)``.

    ``module`` is what the forward pass runs through (the DDP wrapper, or the model itself when the optimizer does
    the averaging). With ``log_history_live``, rank 0 logs each history point as soon as it has it. Training starts
    after ``start_step`` (a resumed checkpoint); with ``--checkpoint-every``, rank 0 saves ``model`` that often.
    """
    history = []
    step = start_step
    epoch = start_step // max(1, len(loader))
    checkpoint_every = getattr(args, "checkpoint_every", 0)
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            step += 1
            common.crash_if_asked(args, step, rank)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(module(x), y)
            loss.backward()
            optimizer.step()
            if common.is_log_step(args, step):
                batch_loss = collectives.mean(loss.detach(), f"batch_loss_{step}")
                history.append((step, batch_loss))
                if rank == 0:
                    print(f"step {step} batch loss {batch_loss:.6f}", flush=True)
                    if log_history_live:
                        tracking.log_metrics(step=step, loss=batch_loss)
            if rank == 0:
                tracking.log_progress(step, args.steps)  # paced by tracking: at most one write a second
            if checkpoint_every > 0 and model is not None and step % checkpoint_every == 0 and rank == 0:
                tracking.save_checkpoint({"model": model.state_dict()}, step)
            common.sleep_if_asked(args)
            if step >= args.steps:
                break
        epoch += 1
    return history


def fit(args: argparse.Namespace, model: nn.Module, module: nn.Module, optimizer: torch.optim.Optimizer,
        shards: tuple[DistributedSampler, DataLoader, DataLoader], rank: int, world_size: int,
        collectives: Collectives, *, log_history_live: bool) -> int:
    """Train, check that every rank ended with the same parameters, and report on rank 0; return the exit code.

    ``model`` is the plain model (evaluated, checked and saved), ``module`` what training runs through (see
    :func:`train`), ``optimizer`` already set up to average the gradients over all ranks, and ``shards`` what
    :func:`shard_data` returned.
    """
    sampler, loader, eval_loader = shards

    initial_loss = global_mse(model, eval_loader, collectives)
    if rank == 0:
        print(f"initial loss {initial_loss:.6f}", flush=True)

    start_step = resume_from_checkpoint(args, model, rank, collectives)
    started = time.monotonic()
    history = train(args, module, optimizer, loader, sampler, rank, collectives, log_history_live,
                    start_step=start_step, model=model)
    train_seconds = time.monotonic() - started

    final_loss = global_mse(model, eval_loader, collectives)
    checksums = collectives.gather(parameter_checksum(model), "parameter_checksums")
    identical = all(torch.equal(checksums[0], other) for other in checksums[1:])
    if not identical:
        print(f"rank {rank}: parameters differ across ranks: {checksums.tolist()}", file=sys.stderr)
        return common.DIVERGED_EXIT_CODE

    if rank == 0:
        print(f"final loss {final_loss:.6f} after {args.steps} steps on {world_size} ranks in {train_seconds:.2f} s; "
              f"parameters identical on all ranks", flush=True)
        model_path = os.path.join(tracking.get_model_dir(), "model.pt")
        torch.save(model.state_dict(), model_path)
        if not log_history_live:
            for logged_step, batch_loss in history:
                tracking.log_metrics(step=logged_step, loss=batch_loss)
        tracking.log_metrics(**common.result_metrics(
            initial_loss=initial_loss, final_loss=final_loss, world_size=world_size, steps=args.steps,
            train_seconds=train_seconds, identical=identical), resumed_from_step=start_step)
        tracking.log_model(model_path)
    return 0
