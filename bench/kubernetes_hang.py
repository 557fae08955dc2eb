"""The hang watchdog of ``backend="kubernetes"`` (``progress_timeout``) on the real control plane of
``tests/kube_control_plane`` (``make kube`` builds it): how long after the master's last line a hung job's wait ends,
and what watching costs.

Latency: a job of 3 pods played by the test kubelet, all running; the master prints a line, then nothing;
``progress_timeout`` 10 s. From the master's last line to ``wait_for_job`` returning its ``hung`` verdict (3 rounds,
medians; ``--latency-only`` skips the cost). The task's stacks exec, tails and deletion come after it (2 s for
the stacks, a few requests).

Cost: a job whose master prints a line every second for 60 s, waited for with and without ``progress_timeout=60``
(one look every 15 s): the task's requests in the namespace (audit log) and the waiting thread's CPU seconds
(``time.thread_time``, so the kubelet's threads in this process do not count), alternating rounds, medians.
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane.control_plane import TASK_ACCOUNT, ControlPlane, missing
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import Kubelet, make_job, new_hook

ROUNDS = 3
HANG_TIMEOUT = 10.0
COST_SECONDS = 60
COST_TIMEOUT = 60.0


def _namespace(plane: ControlPlane, name: str) -> tuple[str, str]:
    plane.create_namespace(name)
    config = plane.bind_role(name, role("airflow-distributed"), TASK_ACCOUNT)
    return config, f"system:serviceaccount:{name}:{TASK_ACCOUNT}"


def _requests(plane: ControlPlane, user: str, namespace: str) -> int:
    return len({e["auditID"] for e in plane.audit_events(user) if (e.get("objectRef") or {}).get("namespace")
                == namespace})


def hang_round(plane: ControlPlane, node: KubeletNode, index: int) -> float:
    namespace = f"bench-hang-{index}"
    config, _ = _namespace(plane, namespace)
    hook = new_hook(config)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)
    last_line: list[float] = []

    def script(k: Kubelet) -> None:
        k.run_all()
        time.sleep(1.0)
        k.log(k.master, "step 1 loss 0.500")
        last_line.append(time.monotonic())

    player = Kubelet(node, namespace).play(script)
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=60, progress_timeout=HANG_TIMEOUT)
    ended = time.monotonic()
    player.check()
    assert outcome.ending == "hung", outcome
    hook.delete_job(namespace, name)
    plane.delete_namespace(namespace)
    return ended - last_line[0]


def cost_round(plane: ControlPlane, node: KubeletNode, index: int, watchdog: bool) -> tuple[int, float]:
    namespace = f"bench-cost-{index}-{int(watchdog)}"
    config, user = _namespace(plane, namespace)
    hook = new_hook(config)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)

    def script(k: Kubelet) -> None:
        k.run_all()
        for step in range(COST_SECONDS):
            k.log(k.master, f"step {step}")
            time.sleep(1.0)
        k.master_exits(0, document={"metrics": {"loss": 0.1}})

    before = _requests(plane, user, namespace)
    player = Kubelet(node, namespace).play(script)
    cpu = time.thread_time()
    outcome = hook.wait_for_job(namespace, name, slots, startup_timeout=60,
                                progress_timeout=COST_TIMEOUT if watchdog else None)
    cpu = time.thread_time() - cpu
    player.check()
    assert outcome.succeeded, outcome
    time.sleep(1.0)  # the audit log's last lines
    requests = _requests(plane, user, namespace) - before
    hook.delete_job(namespace, name)
    plane.delete_namespace(namespace)
    return requests, cpu


def main() -> None:
    reason = missing()
    assert reason is None, reason
    assert threading.current_thread() is threading.main_thread()
    with ControlPlane(min_request_timeout=5) as plane:
        node = KubeletNode(plane).start()
        try:
            latencies = [hang_round(plane, node, i) for i in range(ROUNDS)]
            cost: dict[bool, list[tuple[int, float]]] = {True: [], False: []}
            for i in range(ROUNDS if "--latency-only" not in sys.argv else 0):
                for watchdog in ((False, True) if i % 2 == 0 else (True, False)):
                    cost[watchdog].append(cost_round(plane, node, i, watchdog))
        finally:
            node.stop()
    if not cost[True]:
        print(json.dumps({"progress_timeout": HANG_TIMEOUT, "hang_seconds": latencies,
                          "hang_median": statistics.median(latencies)}, indent=1))
        return
    print(json.dumps({
        "progress_timeout": HANG_TIMEOUT,
        "hang_seconds": latencies, "hang_median": statistics.median(latencies),
        "cost_seconds": COST_SECONDS,
        "with": {"requests": [r for r, _ in cost[True]], "cpu": [c for _, c in cost[True]],
                 "requests_median": statistics.median(r for r, _ in cost[True]),
                 "cpu_median": statistics.median(c for _, c in cost[True])},
        "without": {"requests": [r for r, _ in cost[False]], "cpu": [c for _, c in cost[False]],
                    "requests_median": statistics.median(r for r, _ in cost[False]),
                    "cpu_median": statistics.median(c for _, c in cost[False])},
    }, indent=1))


if __name__ == "__main__":
    main()
