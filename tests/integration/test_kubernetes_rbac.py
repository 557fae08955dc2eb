"""The Role in docs/rbac.yaml is exactly what the backend needs: every request of whole jobs (success, failure,
startup failure, retry, Horovod with gang scheduling, a deferred job killed) is allowed by it, and every rule of
it is used by one of them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import yaml

from airflow_distributed.manifests.kubernetes import job_secret_names
from tests.conftest import ROOT
from tests.k8s_emulator import KubeEmulator, RecordedRequest
from tests.kubernetes_helpers import Kubelet, make_job, new_hook, settled, train_and_succeed, trigger_for

ROLE_FILE = ROOT / "docs" / "rbac.yaml"
NAMESPACE = "ml"
_PATH = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<resource>[^/]+)"
                   r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")


def role(name: str = "airflow-distributed") -> dict:
    return next(doc for doc in yaml.safe_load_all(ROLE_FILE.read_text())
                if doc["kind"] == "Role" and doc["metadata"]["name"] == name)


@contextmanager
def cluster_with_role(tmp_path, rbac_role: dict,
                      register: Callable[[KubeEmulator], None] | None = None) -> Iterator[tuple[KubeEmulator, str]]:
    """``(emulator, kubeconfig)``: an emulator serving ``register``'s CRDs, with the namespace and ``rbac_role`` in
    it (the Role itself is valid RBAC: the emulator validates it like the API server)."""
    with KubeEmulator(kubernetes_version="1.31", bookmark_interval=0.5) as emu:
        if register is not None:
            register(emu)
        config = emu.write_kubeconfig(tmp_path / "config")
        emu.create_namespace(NAMESPACE)
        emu.create("roles", NAMESPACE, rbac_role, group="rbac.authorization.k8s.io")
        yield emu, config


def allowed(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def needed(request: RecordedRequest) -> set[tuple[str, str, str]]:
    """The (apiGroup, resource, verb)s the API server authorizes a request as."""
    match = _PATH.match(request.path)
    assert match, f"not a namespaced request: {request.method} {request.path}"
    group, resource, name, sub = match["group"] or "", match["resource"], match["name"], match["sub"]
    if sub:
        resource = f"{resource}/{sub}"
    if sub == "exec":
        return {(group, resource, "get"), (group, resource, "create")}  # websocket GET: "get" before 1.30
    verb = {
        "POST": "create", "PUT": "update", "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
        "GET": "get" if name else ("watch" if request.is_watch else "list"),
    }[request.method]
    return {(group, resource, verb)}


def test_the_role_allows_every_request_of_whole_jobs_and_holds_nothing_unused(tmp_path):
    with cluster_with_role(tmp_path, role()) as (emu, config):
        hook = new_hook(config)
        emu.reset_requests()

        # Horovod with gang scheduling: Secret, ConfigMap, PodGroup; followed log, output, success clean-up.
        build, slots, name = make_job(NAMESPACE, {"replicas": {"n_workers": 2}}, framework="horovod",
                                      gang_scheduling="volcano")
        hook.ensure_job(NAMESPACE, build(None), slots)
        kubelet = Kubelet(emu, NAMESPACE).play(train_and_succeed)
        outcome = hook.wait_for_job(NAMESPACE, name, slots, startup_timeout=30, follow=[slots[0].name],
                                    emit=lambda replica, line: None)
        kubelet.check()
        assert outcome.succeeded
        assert hook.read_output(NAMESPACE, outcome.pods[slots[0].name])
        hook.read_log_tail(NAMESPACE, slots[0].name)
        hook.delete_job(NAMESPACE, name)
        settled(emu, NAMESPACE, {"services": [], "pods": [], "configmaps": [], "secrets": []})

        # A worker fails (scheduler-plugins gang scheduling): its log tail, then the running pods deleted.
        build, slots, name = make_job(NAMESPACE, gang_scheduling="scheduler-plugins")
        hook.ensure_job(NAMESPACE, build(None), slots)
        Kubelet(emu, NAMESPACE).play(lambda k: (k.run_all(), k.fail(k.pod("worker-0"), 2))).check()
        outcome = hook.wait_for_job(NAMESPACE, name, slots, startup_timeout=30)
        assert outcome.ending == "exit"
        hook.read_log_tail(NAMESPACE, slots[1].name)
        # Were it elastic, the lost worker's pod would be deleted and created again under the same name.
        uid = emu.get("services", NAMESPACE, name)["metadata"]["uid"]
        hook.recreate_pod(NAMESPACE, next(p for p in build(uid).pods if p.metadata.name == slots[1].name))
        hook.delete_unfinished_pods(NAMESPACE, name)
        # Whatever the policy keeps of the pods, the job's Secrets go when it ends.
        hook.delete_secrets(NAMESPACE, job_secret_names(name))

        # The retry replaces the failed job; a replica that cannot start; its events.
        hook.ensure_job(NAMESPACE, build(None), slots)
        Kubelet(emu, NAMESPACE).play(lambda k: k.emu.pending_pod(NAMESPACE, k.pod("worker-1"))).check()
        outcome = hook.wait_for_job(NAMESPACE, name, slots, startup_timeout=0.5)
        assert outcome.ending == "startup"
        hook.pod_events(NAMESPACE, slots[2].name)

        # A deferred job the user kills: the trigger's watch, then its on_kill().
        async def killed() -> None:
            trigger = trigger_for(config, NAMESPACE, name, slots)
            task = asyncio.create_task(anext(trigger.run()))
            await asyncio.sleep(1.0)
            task.cancel()
            await trigger.on_kill()

        asyncio.run(killed())
        assert emu.get("services", NAMESPACE, name) is None

        used = set().union(*(needed(request) for request in emu.requests))

    rules = allowed(role()["rules"])
    assert used <= rules, f"requests the Role does not allow: {sorted(used - rules)}"
    assert rules <= used, f"rules no request needed: {sorted(rules - used)}"


def test_the_kubeflow_role_allows_every_request_of_kubeflow_jobs_and_holds_nothing_unused(tmp_path):
    """Every kind: submit, a retry's 409 and read-back, the watch until Succeeded, the output, the deletion."""
    from kubernetes import client

    from airflow_distributed.hooks.kubeflow import KubeflowJobHook
    from airflow_distributed.manifests.kubeflow_kinds import KINDS, kubeflow_resource
    from airflow_distributed.manifests.kubeflow_status import pod_group_of
    from tests.helpers import wait_until
    from tests.integration.kubeflow_controller import KubeflowController, register_kubeflow_crds

    with cluster_with_role(tmp_path, role("airflow-distributed-kubeflow"), register_kubeflow_crds) as (emu, config):
        hook = KubeflowJobHook(kubernetes_conn_id=None, config_file=config,
                               client_configuration=client.Configuration())
        emu.reset_requests()
        for framework, kind in KINDS.items():
            resource = kubeflow_resource(framework)
            name = f"job-{framework}"
            body = {"apiVersion": kind.api_version, "kind": kind.kind,
                    "metadata": {"name": name, "labels": {"airflow-distributed/job": name}},
                    "spec": {kind.replica_specs_key: {kind.master_type: {"replicas": 1, "template": {"spec": {
                        "containers": [{"name": kind.container, "image": "trainer:1"}]}}}}}}
            hook.submit_kubeflow_job(NAMESPACE, resource, body)
            assert hook.submit_kubeflow_job(NAMESPACE, resource, body).reattached == "pending"
            controller = KubeflowController(emu, NAMESPACE, resource.plural)
            controller.job = controller.get(name)
            controller.create_pods()

            def finish(controller: KubeflowController, master: str = kind.master_type) -> None:
                wait_until(controller.watched, timeout=30, interval=0.02)
                controller.succeed(f"{master.lower()}-0", {"metrics": {"loss": 0.1}})
                controller.conditions(("Succeeded", "Succeeded", ""))

            controller.play(finish)
            outcome = hook.wait_for_kubeflow_job(NAMESPACE, resource, name)
            controller.check()
            assert outcome.ending == "succeeded"
            assert hook.kubeflow_output(NAMESPACE, outcome.job_object)
            hook.delete_kubeflow_job(NAMESPACE, resource, name)
        # A gang-scheduled job whose PodGroup (Volcano's, scheduler-plugins') is not admitted: read while no pod exists.
        for scheduler in ("volcano", "scheduler-plugins"):
            name = f"gang-{scheduler}"
            kind, resource = KINDS["pytorch"], kubeflow_resource("pytorch")
            body = {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name}, "spec": {
                "runPolicy": {"schedulingPolicy": {"minAvailable": 1}},
                kind.replica_specs_key: {kind.master_type: {"replicas": 1, "template": {"spec": {
                    "schedulerName": scheduler, "containers": [{"name": kind.container, "image": "trainer:1"}]}}}}}}
            hook.submit_kubeflow_job(NAMESPACE, resource, body)
            ref = pod_group_of(body)
            assert ref is not None
            emu.register_crd(ref.group, ref.version, ref.plural, "PodGroup")
            emu.create(ref.plural, NAMESPACE, {"apiVersion": f"{ref.group}/{ref.version}", "kind": "PodGroup",
                                               "metadata": {"name": name}, "spec": {"minMember": 1}},
                       group=ref.group, version=ref.version)
            emu.update_status(ref.plural, NAMESPACE, name, {"phase": "Pending"}, group=ref.group, version=ref.version)
            outcome = hook.wait_for_kubeflow_job(NAMESPACE, resource, name, queue_timeout=1)
            assert (outcome.ending, outcome.reason) == ("queue", "PodGroupPending"), outcome
            hook.delete_kubeflow_job(NAMESPACE, resource, name)
        used = set().union(*(needed(request) for request in emu.requests))

    rules = allowed(role("airflow-distributed-kubeflow")["rules"])
    assert used <= rules | allowed(role()["rules"]), f"requests no Role allows: {sorted(used - rules)}"
    assert rules <= used, f"rules no request needed: {sorted(rules - used)}"


def test_the_trainjob_role_allows_every_request_of_a_trainjob_and_holds_nothing_unused(tmp_path):
    """Submit, a retry's 409 and read-back, the watch until Complete, node 0's output, the deletion."""
    from kubernetes import client

    from airflow_distributed.hooks.trainjob import TRAINJOB, TrainJobHook
    from tests.helpers import wait_until
    from tests.integration.trainjob_controller import TrainerController, register_trainjob_crd

    with cluster_with_role(tmp_path, role("airflow-distributed-trainjob"), register_trainjob_crd) as (emu, config):
        hook = TrainJobHook(kubernetes_conn_id=None, config_file=config, client_configuration=client.Configuration())
        emu.reset_requests()
        name = "job-trainjob"
        body = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": name, "labels": {"airflow-distributed/job": name}},
                "spec": {"runtimeRef": {"name": "torch-distributed"},
                         "trainer": {"numNodes": 2, "image": "trainer:1", "command": ["python", "train.py"]},
                         "runtimePatches": [{"manager": "m", "trainingRuntimeSpec": {"template": {"spec": {
                             "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {}}}}]}}}}]}}
        hook.submit_kubeflow_job(NAMESPACE, TRAINJOB, body, field_validation="Strict")
        assert hook.submit_kubeflow_job(NAMESPACE, TRAINJOB, body).reattached == "pending"
        controller = TrainerController(emu, NAMESPACE)
        controller.wait_for_job()
        controller.create_pods()

        def finish(controller: TrainerController) -> None:
            wait_until(controller.watched, timeout=30, interval=0.02)
            controller.succeed(0, {"metrics": {"loss": 0.1}})
            controller.succeed(1)
            controller.condition("Complete", "True", "AllJobsCompleted", "")

        controller.play(finish)
        outcome = hook.wait_for_kubeflow_job(NAMESPACE, TRAINJOB, name)
        controller.check()
        assert outcome.ending == "succeeded"
        assert hook.kubeflow_output(NAMESPACE, outcome.job_object) == '{"metrics": {"loss": 0.1}}'
        hook.delete_kubeflow_job(NAMESPACE, TRAINJOB, name)
        used = set().union(*(needed(request) for request in emu.requests))

    rules = allowed(role("airflow-distributed-trainjob")["rules"])
    assert used <= rules | allowed(role()["rules"]), f"requests no Role allows: {sorted(used - rules)}"
    assert rules <= used, f"rules no request needed: {sorted(rules - used)}"
