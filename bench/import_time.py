"""Parse cost: import time of DistributedTrainingOperator vs the cncf provider's KubernetesPodOperator.

Each import runs in a fresh interpreter, alternating the two so that machine noise hits both alike.
Prints the medians and their ratio (ours / KubernetesPodOperator); target <= 1.0.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

IMPORTS = {
    "DistributedTrainingOperator": "from airflow_distributed.operators import DistributedTrainingOperator",
    "KubernetesPodOperator": "from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator",
}
# Airflow itself (the Task SDK) is imported first and not counted: every DAG file pays for it anyway.
PROBE = (
    "import time, airflow.sdk\n"
    "t = time.perf_counter()\n"
    "{stmt}\n"
    "print(time.perf_counter() - t)\n"
)


def measure(rounds: int = 7) -> dict:
    times: dict[str, list[float]] = {name: [] for name in IMPORTS}
    for _ in range(rounds):
        for name, stmt in IMPORTS.items():
            out = subprocess.run([sys.executable, "-c", PROBE.format(stmt=stmt)], check=True, capture_output=True,
                                 text=True).stdout
            times[name].append(float(out.strip().splitlines()[-1]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "rounds": rounds,
        "median_seconds": medians,
        "ratio": medians["DistributedTrainingOperator"] / medians["KubernetesPodOperator"],
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
