"""A local job whose replicas write TensorBoard events into ``AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR`` with TensorBoard's
own writer, from ``.venvs/tensorboard`` (``scripts/framework-venv.sh tensorboard``; ``python=`` points the replicas
at it): ``tests/integration/test_tensorboard.py`` serves the folder with a real ``tensorboard``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_distributed.operators import DistributedTrainingOperator

TENSORBOARD_PYTHON = str(Path(__file__).resolve().parents[2] / ".venvs" / "tensorboard" / "bin" / "python")
STEPS = 5
# Each replica writes its loss at every step under try-<n>/<role>-<index>; on try 1 the master fails once the worker
# has written (the retry's replicas write into the same folder, the job's, shared by tries).
WRITER = """
import glob, os, sys, time
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from airflow_distributed import tracking

folder = os.environ["AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR"]
try_number = os.environ["AIRFLOW_DISTRIBUTED_TRY_NUMBER"]
me = f"{os.environ['AIRFLOW_DISTRIBUTED_ROLE']}-{os.environ['AIRFLOW_DISTRIBUTED_INDEX']}"
writer = EventFileWriter(os.path.join(folder, f"try-{try_number}", me))
for step in range(1, int(sys.argv[1]) + 1):
    loss = 1.0 / (step + int(try_number))
    writer.add_event(Event(wall_time=time.time(), step=step,
                           summary=Summary(value=[Summary.Value(tag="loss", simple_value=loss)])))
    tracking.log_metrics(step=step, loss=loss)
writer.close()
if try_number == "1" and me == "master-0":
    deadline = time.monotonic() + 60
    while not glob.glob(os.path.join(folder, "try-1", "worker-0", "events.*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    sys.exit(3)
"""

with DAG(dag_id="test_tensorboard_events", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         catchup=False, tags=["test"]):
    DistributedTrainingOperator(
        task_id="train",
        framework="pytorch",
        environment={"pytorch": {"n_workers": 1}},
        command=["python", "-c", WRITER, str(STEPS)],
        python=TENSORBOARD_PYTHON,
        retries=1,
        retry_delay=timedelta(seconds=0),
        stop_grace_period=3.0,
    )
