"""Run one example DAG end to end on a throw-away SQLite Airflow in ./airflow-home and print its XCom outputs.

Usage: python scripts/run_example.py [dag_id] [--conf JSON]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "airflow-home"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("dag_id", nargs="?", default="example_pytorch_ddp")
    parser.add_argument("--conf", type=json.loads, default=None, help="DAG run conf as JSON")
    args = parser.parse_args()

    os.environ["AIRFLOW_HOME"] = str(HOME)
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    HOME.mkdir(exist_ok=True)
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run([str(airflow), "db", "migrate"], check=True, stdout=subprocess.DEVNULL)

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    bag = DagBag()
    if bag.import_errors:
        for path, error in bag.import_errors.items():
            print(f"import error in {path}:\n{error}", file=sys.stderr)
        return 1
    dag = bag.get_dag(args.dag_id)
    if dag is None:
        print(f"no DAG {args.dag_id!r}; examples: {', '.join(sorted(bag.dag_ids))}", file=sys.stderr)
        return 1
    run = dag.test(run_conf=args.conf)
    with create_session() as session:
        rows = session.execute(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id)).all()
        outputs = {(row[0].task_id, row[0].key): XComModel.deserialize_value(row[0]) for row in rows}
    print(f"\n{args.dag_id}: {run.state}")
    for (task_id, key), value in sorted(outputs.items()):
        if key in ("metrics", "model_path", "job_name"):
            print(f"  {task_id}.{key} = {json.dumps(value)}")
    return 0 if run.state == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
