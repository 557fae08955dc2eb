"""Run every benchmark and print one JSON document of ratios and figures (record them in bench/README.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import crash_latency
import elastic_restart
import import_time
import kubernetes_submit
import kubernetes_wait
import local_vs_torchrun
import processes_vs_replicas
import ray_vs_local
import startup_phases
import triggerer_logs
import triggerer_scale

if __name__ == "__main__":
    results = {
        "import_time": import_time.measure(),
        "crash_latency": crash_latency.measure(),
        "elastic_restart": elastic_restart.measure(),
        "local_vs_torchrun": local_vs_torchrun.measure(),
        "processes_vs_replicas": processes_vs_replicas.measure(),
        "ray_vs_local": ray_vs_local.measure(),
        "startup_phases": startup_phases.measure(),
        "kubernetes_submit": kubernetes_submit.measure(),
        "kubernetes_wait": kubernetes_wait.measure(),
        "triggerer_scale": triggerer_scale.measure(),
        "triggerer_logs": triggerer_logs.measure(),
    }
    print(json.dumps(results, indent=2))
