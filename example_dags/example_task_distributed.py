"""``@task.distributed``: a PyTorch DDP training function run on a master and two workers, no script file.

Every replica runs ``train`` with the job's variables set; it sets up its gloo process group from them, trains on
its own shard of a synthetic regression while DDP all-reduces the gradients, and checks that every rank ended with
the same weights. The master's return value is the task's XCom, which ``report`` receives.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

with DAG(
    dag_id="example_task_distributed",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"steps": 60},
    tags=["example", "distributed", "pytorch", "decorator"],
) as dag:

    @task.distributed(
        framework="pytorch",
        environment={"pytorch": {"n_workers": 2, "default_worker": {"resources": {"cpu": {"limits": 1}}}},
                     "resources": {"cpu": {"limits": 1}}},
    )
    def train(steps: int, lr: float = 0.05) -> dict:
        import os

        import torch
        import torch.distributed as dist
        import torch.distributed.nn  # before the group exists: see training/pytorch_ddp.py
        from torch.nn.parallel import DistributedDataParallel

        from airflow_distributed import tracking

        dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE come from the job
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(0)
        x = torch.randn(384, 8)
        y = x @ torch.linspace(-1.0, 1.0, 8).unsqueeze(1) + 0.5
        shard = slice(rank, None, world)  # each rank trains on its own rows
        model = DistributedDataParallel(torch.nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        initial = torch.nn.functional.mse_loss(model(x), y).item()
        for step in range(1, int(steps) + 1):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[shard]), y[shard])
            loss.backward()  # DDP averages the gradients of all ranks here
            optimizer.step()
            if step % 10 == 0:
                tracking.log_metrics(step=step, loss=loss.item())
        # Identical weights on every rank prove the gradients were all-reduced: the shards differ.
        checksum = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).sum().reshape(1)
        gathered = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(gathered, checksum)
        final = torch.nn.functional.mse_loss(model(x), y).item()
        del model  # DDP holds the group: destroy_process_group() then ends gloo's threads before the interpreter does
        dist.destroy_process_group()
        return {"rank": rank, "world_size": world, "initial_loss": initial, "final_loss": final,
                "identical": all(torch.equal(gathered[0], g) for g in gathered), "pid": os.getpid()}

    @task
    def report(result: dict) -> float:
        """What a downstream step sees: the master's return value."""
        print(f"master returned {result}")
        if not (result["identical"] and result["final_loss"] < result["initial_loss"]):
            raise ValueError(f"training did not converge on identical weights: {result}")
        return result["final_loss"]

    report(train(steps="{{ params.steps }}"))
