"""The master's progress and latest metrics POSTed to Kubeflow Trainer v2's status endpoint, where there is one
(``TrainJobStatus`` feature gate): best effort, never stopping training (standard library only)."""

from __future__ import annotations

import json
import math
import os
import sys
from datetime import datetime, timezone
from typing import Any

# Kubeflow Trainer v2 (``TrainJobStatus`` feature gate) gives a TrainJob's trainer containers an HTTPS endpoint
# for its status.trainerStatus, a CA file and a bearer token file (a projected token that rotates: read each time).
ENV_TRAINER_URL = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_TRAINER_CA = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TRAINER_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
#: At most one report per interval (seconds), as the Trainer asks of its clients; the last step is always sent.
TRAINER_REPORT_INTERVAL = 5.0
_trainer: dict[str, Any] = {}


def report_to_trainer(now: float, percent: int, eta: float | None, last: bool, metrics: dict[str, Any]) -> None:
    """POST the progress and the latest scalar metrics to the Trainer's status endpoint, if there is one.

    Never raises, and gives up on a slow endpoint after a few seconds: a report must not stop training.
    """
    url = os.environ.get(ENV_TRAINER_URL)
    if not url or (not last and now - _trainer.get("sent", -math.inf) < TRAINER_REPORT_INTERVAL):
        return
    _trainer["sent"] = now
    # Not at the top: every replica imports this module (through ``tracking``), and these two would about double
    # the cost of that import for the few jobs that have a Trainer endpoint to report to.
    import ssl
    import urllib.request

    scalars = [{"name": str(name)[:64], "value": str(value)[:64]}
               for name, value in metrics.items()
               if isinstance(value, (int, float, str)) and not isinstance(value, bool) and str(name)][:256]
    status: dict[str, Any] = {"progressPercentage": max(0, min(100, percent)),
                              "lastUpdatedTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if eta is not None:
        status["estimatedRemainingSeconds"] = max(0, int(eta))
    if scalars:
        status["metrics"] = scalars
    headers = {"Content-Type": "application/json"}
    try:
        token_path = os.environ.get(ENV_TRAINER_TOKEN)
        if token_path:
            with open(token_path, encoding="utf-8") as handle:
                headers["Authorization"] = f"Bearer {handle.read().strip()}"
        context = ssl.create_default_context(cafile=os.environ.get(ENV_TRAINER_CA) or None) \
            if url.startswith("https:") else None
        request = urllib.request.Request(url, data=json.dumps({"trainerStatus": status}).encode(), headers=headers,
                                         method="POST")
        with urllib.request.urlopen(request, timeout=3, context=context) as response:
            response.read()
    except Exception as error:  # best effort: a failed report must not stop training
        if not _trainer.get("warned"):
            _trainer["warned"] = True
            print(f"airflow_distributed.tracking: could not report progress to {url}: {error}", file=sys.stderr,
                  flush=True)


__all__ = ["ENV_TRAINER_CA", "ENV_TRAINER_TOKEN", "ENV_TRAINER_URL", "TRAINER_REPORT_INTERVAL", "report_to_trainer"]
