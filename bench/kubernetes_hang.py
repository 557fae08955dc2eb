"""The hang watchdog (``progress_timeout``) of ``backend="kubernetes"``, ``"kubeflow"`` and ``"trainjob"``
(``--kind``) on the real control plane of ``tests/kube_control_plane`` (``make kube`` builds it): how long after the
master's last line a hung job's wait ends, and what watching costs.

``kubernetes``: the task's pods; ``kubeflow``: a PyTorchJob of a master and 2 workers, ``trainjob``: a TrainJob of 3
nodes, their pods made by the stand-in controllers of ``tests/kube_control_plane/custom_jobs.py`` and their waits
those of the task (``wait_for_kubeflow_job``: each look LISTs the job's pods, then reads the master's new lines).

Latency: a job of 3 pods played by the test kubelet, all running; the master prints a line, then nothing;
``progress_timeout`` 10 s. From the master's last line to the wait returning its ``hung`` verdict (3 rounds,
medians; ``--latency-only`` skips the cost, ``--rounds`` changes their number). The task's stacks exec, tails and
deletion come after it (2 s for the stacks, a few requests).

Cost: a job whose master prints a line every second for 60 s, waited for with and without ``progress_timeout=60``
(one look every 15 s): the task's requests in the namespace (audit log) and the waiting thread's CPU seconds
(``time.thread_time``, so the kubelet's threads in this process do not count), alternating rounds, medians; the
last round's requests by verb and resource.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client

from tests.integration.test_kubernetes_rbac import role
from tests.kube_control_plane.control_plane import TASK_ACCOUNT, ControlPlane, missing
from tests.kube_control_plane.custom_jobs import (
    RealKubeflowController,
    RealTrainerController,
    control_plane_with_custom_jobs,
)
from tests.kube_control_plane.kubelet import KubeletNode
from tests.kubernetes_helpers import Kubelet, make_job, new_hook

ROUNDS = 3
HANG_TIMEOUT = 10.0
COST_SECONDS = 60
COST_TIMEOUT = 60.0
KINDS = ("kubernetes", "kubeflow", "trainjob")
#: The Roles each kind's task is bound to (docs/rbac.yaml).
ROLES = {"kubernetes": ("airflow-distributed",),
         "kubeflow": ("airflow-distributed", "airflow-distributed-kubeflow"),
         "trainjob": ("airflow-distributed", "airflow-distributed-trainjob")}


def _namespace(plane: ControlPlane, name: str, kind: str) -> tuple[str, str]:
    plane.create_namespace(name)
    config = plane.bind_role(name, [role(r) for r in ROLES[kind]], TASK_ACCOUNT)
    return config, f"system:serviceaccount:{name}:{TASK_ACCOUNT}"


def _requests(plane: ControlPlane, user: str, namespace: str) -> dict[str, str]:
    """The task's requests in ``namespace`` so far (audit log): audit ID -> ``verb resource[/subresource]``."""
    found = {}
    for event in plane.audit_events(user):
        ref = event.get("objectRef") or {}
        if ref.get("namespace") == namespace:
            sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
            found[event["auditID"]] = f"{event['verb']} {ref.get('resource')}{sub}"
    return found


@dataclass
class Job:
    """One job of a kind, made in ``namespace`` as the task makes it (the wait's requests alone are counted).

    :param wait: the task's wait, with ``progress_timeout`` (``None``: none); its outcome.
    :param play: runs a script in the background: ``running()`` once every replica runs, then ``line(text)`` for
        each line the master prints, then ``finish()`` for a master that succeeds; ``check()`` afterwards.
    """

    wait: Callable[[float | None], Any]
    play: Callable[[Callable[[Callable[[str], None]], None], bool], Any]
    delete: Callable[[], Any]


def kubernetes_job(plane: ControlPlane, node: KubeletNode, namespace: str, config: str) -> Job:
    hook = new_hook(config)
    build, slots, name = make_job(namespace)
    hook.ensure_job(namespace, build(None), slots)

    def play(lines: Callable[[Callable[[str], None]], None], succeed: bool) -> Any:
        def script(k: Kubelet) -> None:
            k.run_all()
            lines(lambda text: k.log(k.master, text))
            if succeed:
                k.master_exits(0, document={"metrics": {"loss": 0.1}})
        return Kubelet(node, namespace).play(script)

    return Job(lambda timeout: hook.wait_for_job(namespace, name, slots, startup_timeout=60,
                                                 progress_timeout=timeout),
               play, lambda: hook.delete_job(namespace, name))


def kubeflow_job(plane: ControlPlane, node: KubeletNode, namespace: str, config: str) -> Job:
    from airflow_distributed.hooks.kubeflow import KubeflowJobHook
    from airflow_distributed.manifests.kubeflow_kinds import KINDS as KUBEFLOW_KINDS
    from airflow_distributed.manifests.kubeflow_kinds import kubeflow_resource

    hook = KubeflowJobHook(kubernetes_conn_id=None, config_file=config, client_configuration=client.Configuration())
    resource, kind, name = kubeflow_resource("pytorch"), KUBEFLOW_KINDS["pytorch"], "hang"
    template = {"spec": {"containers": [{"name": kind.container, "image": "trainer:1"}]}}
    hook.submit_kubeflow_job(namespace, resource, {
        "apiVersion": kind.api_version, "kind": kind.kind,
        "metadata": {"name": name, "labels": {"airflow-distributed/job": name}},
        "spec": {kind.replica_specs_key: {kind.master_type: {"replicas": 1, "template": template},
                                          "Worker": {"replicas": 2, "template": template}}}})

    def play(lines: Callable[[Callable[[str], None]], None], succeed: bool) -> Any:
        def script(c: RealKubeflowController) -> None:
            c.start()
            lines(lambda text: c.log("master-0", text, container=kind.container))
            if succeed:
                c.succeed("master-0", {"metrics": {"loss": 0.1}})
                c.conditions(("Succeeded", "Succeeded", ""))
        return RealKubeflowController(plane, node, namespace, resource.plural).play(script)

    return Job(lambda timeout: hook.wait_for_kubeflow_job(namespace, resource, name, progress_timeout=timeout),
               play, lambda: hook.delete_kubeflow_job(namespace, resource, name))


def trainjob_job(plane: ControlPlane, node: KubeletNode, namespace: str, config: str) -> Job:
    from airflow_distributed.hooks.trainjob import TRAINJOB, TrainJobHook

    hook = TrainJobHook(kubernetes_conn_id=None, config_file=config, client_configuration=client.Configuration())
    name = "hang"
    hook.submit_kubeflow_job(namespace, TRAINJOB, {
        "apiVersion": f"{TRAINJOB.group}/{TRAINJOB.version}", "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"airflow-distributed/job": name}},
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"numNodes": 3, "image": "trainer:1", "command": ["python", "train.py"]},
                 "runtimePatches": [{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {
                     "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {}}}}]}}}}]}})

    def play(lines: Callable[[Callable[[str], None]], None], succeed: bool) -> Any:
        def script(c: RealTrainerController) -> None:
            c.start()
            lines(lambda text: c.log(0, text))
            if succeed:
                for rank in range(3):
                    c.succeed(rank, {"metrics": {"loss": 0.1}} if rank == 0 else None)
                c.condition("Complete", "True", "AllJobsCompleted", "jobset completed successfully")
        return RealTrainerController(plane, node, namespace).play(script)

    return Job(lambda timeout: hook.wait_for_kubeflow_job(namespace, TRAINJOB, name, progress_timeout=timeout),
               play, lambda: hook.delete_kubeflow_job(namespace, TRAINJOB, name))


JOBS = {"kubernetes": kubernetes_job, "kubeflow": kubeflow_job, "trainjob": trainjob_job}


def hang_round(plane: ControlPlane, node: KubeletNode, kind: str, index: int) -> float:
    namespace = f"bench-hang-{kind}-{index}"
    config, _ = _namespace(plane, namespace, kind)
    job = JOBS[kind](plane, node, namespace, config)
    last_line: list[float] = []

    def lines(line: Callable[[str], None]) -> None:
        time.sleep(1.0)
        line("step 1 loss 0.500")
        last_line.append(time.monotonic())

    player = job.play(lines, False)
    outcome = job.wait(HANG_TIMEOUT)
    ended = time.monotonic()
    player.check()
    assert outcome.ending == "hung", outcome
    job.delete()
    plane.delete_namespace(namespace)
    return ended - last_line[0]


def cost_round(plane: ControlPlane, node: KubeletNode, kind: str, index: int,
               watchdog: bool) -> tuple[int, float, dict[str, int]]:
    namespace = f"bench-cost-{kind}-{index}-{int(watchdog)}"
    config, user = _namespace(plane, namespace, kind)
    job = JOBS[kind](plane, node, namespace, config)

    def lines(line: Callable[[str], None]) -> None:
        for step in range(COST_SECONDS):
            line(f"step {step}")
            time.sleep(1.0)

    before = _requests(plane, user, namespace)
    player = job.play(lines, True)
    cpu = time.thread_time()
    outcome = job.wait(COST_TIMEOUT if watchdog else None)
    cpu = time.thread_time() - cpu
    player.check()
    assert outcome.succeeded, outcome
    time.sleep(1.0)  # the audit log's last lines
    made = Counter(what for audit_id, what in _requests(plane, user, namespace).items() if audit_id not in before)
    job.delete()
    plane.delete_namespace(namespace)
    return sum(made.values()), cpu, dict(made)


def _summary(cost: list[tuple[int, float, dict[str, int]]]) -> dict[str, Any]:
    return {"requests": [r for r, _, _ in cost], "cpu": [c for _, c, _ in cost],
            "requests_median": statistics.median(r for r, _, _ in cost),
            "cpu_median": statistics.median(c for _, c, _ in cost), "last_round": cost[-1][2]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, action="append", help="the backends to measure (default: all)")
    parser.add_argument("--latency-only", action="store_true")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    reason = missing()
    assert reason is None, reason
    assert threading.current_thread() is threading.main_thread()
    figures: dict[str, Any] = {}
    with control_plane_with_custom_jobs() as plane:
        node = KubeletNode(plane).start()
        try:
            for kind in args.kind or KINDS:
                latencies = [hang_round(plane, node, kind, i) for i in range(args.rounds)]
                cost: dict[bool, list[tuple[int, float, dict[str, int]]]] = {True: [], False: []}
                for i in range(0 if args.latency_only else args.rounds):
                    for watchdog in ((False, True) if i % 2 == 0 else (True, False)):
                        cost[watchdog].append(cost_round(plane, node, kind, i, watchdog))
                figures[kind] = {"progress_timeout": HANG_TIMEOUT, "hang_seconds": latencies,
                                 "hang_median": statistics.median(latencies)}
                if cost[True]:
                    figures[kind].update({"cost_seconds": COST_SECONDS, "with": _summary(cost[True]),
                                          "without": _summary(cost[False])})
                print(json.dumps({kind: figures[kind]}, indent=1), flush=True)
        finally:
            node.stop()


if __name__ == "__main__":
    main()
