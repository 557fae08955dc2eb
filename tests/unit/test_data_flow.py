"""Data flows down and does not double back: the spec is parsed once per try, a resumed task reads what it needs
from the trigger's event, and the plan of a job a training operator runs carries only the framework variables that
operator leaves out."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_distributed.backends.base import ClusterSettings
from airflow_distributed.backends.registry import REGISTRY
from airflow_distributed.frameworks import get_framework
from airflow_distributed.manifests.kubeflow import KUBEFLOW_LAUNCH, KubeflowAddressing
from airflow_distributed.manifests.kubernetes import POD_LAUNCH, layout_for_kubernetes
from airflow_distributed.manifests.trainjob import TRAINJOB_LAUNCH, TrainJobAddressing
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.operators import training as training_module
from airflow_distributed.plan import KubernetesAddressing, build_plan
from airflow_distributed.spec import SpecValidationError, load_spec

ENVIRONMENT = {"pytorch": {"n_workers": 2}}


@pytest.fixture
def parses(monkeypatch) -> list[Any]:
    """The environments the operator module parsed, in order."""
    seen: list[Any] = []

    def counting(framework: Any = None, environment: Any = None) -> Any:
        seen.append(environment)
        return load_spec(framework, environment)

    monkeypatch.setattr(training_module, "load_spec", counting)
    return seen


class RecordingBackend:
    """Starts nothing; keeps the spec each step was given."""

    name = "recording"
    options_class = ClusterSettings

    def __init__(self) -> None:
        self.checked: Any = None
        self.ran: Any = None

    def check(self, settings, spec):
        self.checked = spec
        return []

    def run(self, task, settings, context, spec, job_name, command):
        self.ran = spec
        return {"job_name": job_name, "state": "started"}

    def resume(self, task, settings, context, event):
        return {"job_name": event["job_name"], "state": "started"}

    def kill(self):
        pass


class TI:
    dag_id, task_id, run_id, map_index, try_number = "d", "t", "r", -1, 1


def _operator(monkeypatch, environment: Any) -> DistributedTrainingOperator:
    monkeypatch.setitem(REGISTRY, "recording", RecordingBackend)
    return DistributedTrainingOperator(task_id="t", framework="pytorch", environment=environment,
                                       command=["python", "x.py"], image="img:1",
                                       backend="recording")  # type: ignore[arg-type]


def test_the_spec_parsed_with_the_dag_is_checked_run_and_used_for_lineage_without_parsing_again(monkeypatch, parses):
    operator = _operator(monkeypatch, ENVIRONMENT)
    backend = operator._backend
    assert isinstance(backend, RecordingBackend)
    assert parses == [ENVIRONMENT]
    assert operator.spec is not None and backend.checked is operator.spec

    operator.execute({"ti": TI()})  # type: ignore[arg-type]
    assert backend.ran is operator.spec
    assert operator._task_calls().spec() is operator.spec  # what a resumed backend or lineage gets
    assert parses == [ENVIRONMENT]


def test_a_templated_spec_is_parsed_once_rendered_and_that_parse_serves_the_whole_try(monkeypatch, parses):
    operator = _operator(monkeypatch, {"pytorch": {"n_workers": "{{ params.workers }}"}})
    assert operator.spec is None and parses == []

    operator.environment = {"pytorch": {"n_workers": 3}}  # what rendering leaves
    operator.execute({"ti": TI()})  # type: ignore[arg-type]
    backend = operator._backend
    assert isinstance(backend, RecordingBackend)
    assert backend.ran.cluster.n_workers == 3
    assert operator._task_calls().spec() is backend.ran
    assert parses == [{"pytorch": {"n_workers": 3}}]


def test_a_spec_rendered_to_other_values_than_at_parse_time_is_parsed_again(monkeypatch, parses):
    # A value Jinja turns into another (a native-rendered "3" is 3, a trailing newline goes) is parsed as rendered.
    operator = _operator(monkeypatch, "pytorch:\n  n_workers: 1\n")
    operator.environment = "pytorch:\n  n_workers: 2"
    operator.execute({"ti": TI()})  # type: ignore[arg-type]
    backend = operator._backend
    assert isinstance(backend, RecordingBackend)
    assert backend.ran.cluster.n_workers == 2 and len(parses) == 2


def test_with_the_spec_parsed_once_the_arguments_problems_still_come_before_the_specs_own(parses):
    with pytest.raises(SpecValidationError) as error:
        DistributedTrainingOperator(task_id="t", framework="pytorch", environment={"pytorch": {"n_workers": -1}},
                                    command=[], backend="local")
    assert "command" in str(error.value) and "n_workers" not in str(error.value)
    with pytest.raises(SpecValidationError) as error:
        DistributedTrainingOperator(task_id="t", framework="pytorch", environment={"pytorch": {"n_workers": -1}},
                                    command=["python", "x.py"], backend="local")
    assert "environment.pytorch.n_workers" in str(error.value)
    assert len(parses) == 2  # once per operator


# ---------------------------------------------------------------------------------------------- resume


def _unparseable(backend: str) -> DistributedTrainingOperator:
    """An operator whose spec is still a template: parsing its settings fails, so a resume that reads the spec
    fails too."""
    return DistributedTrainingOperator(task_id="t", framework="{{ params.framework }}", environment="{{ params.env }}",
                                       command=["python", "x.py"], image="img:1",
                                       backend=backend)  # type: ignore[arg-type]


ELASTIC = {"min_replicas": 2, "max_replicas": 3, "max_restarts": 1, "rdzv_timeout": 900}


def test_a_resumed_kubernetes_job_takes_its_framework_and_elastic_budget_from_the_event():
    from airflow_distributed.backends.kubernetes_run import KubernetesJobRun
    from airflow_distributed.elastic import ElasticPlan

    operator = _unparseable("kubernetes")
    task, settings = operator._task_calls(), operator._settings()
    event = {"job_name": "train-1", "namespace": "ml", "replicas": [["train-1-master-0", "master", 0]],
             "resume_state": {"framework": "pytorch", "elastic": ELASTIC}, "status": "succeeded"}
    run = KubernetesJobRun.resume(task, settings, {"ti": TI()}, event)  # type: ignore[arg-type]
    assert (run.framework, run.elastic.plan, run.name, run.namespace) == ("pytorch", ElasticPlan(**ELASTIC),
                                                                           "train-1", "ml")
    assert run.objects is None  # built only for an elastic restart, from the spec
    assert run.secrets is None  # a trigger that did not carry them: every name a job may have is deleted
    # The job's Secrets ride along: its end deletes those, no request for one it never had.
    for secrets in ([], ["train-1-ssh"]):
        resumed = KubernetesJobRun.resume(task, settings, {"ti": TI()}, {  # type: ignore[arg-type]
            **event, "resume_state": {**event["resume_state"], "secrets": secrets}})
        assert resumed.secrets == tuple(secrets)
    run = KubernetesJobRun.resume(task, settings, {"ti": TI()}, {**event, "resume_state": {  # type: ignore[arg-type]
        "framework": "tensorflow", "elastic": None}})
    assert (run.framework, run.elastic.plan) == ("tensorflow", None)
    # An event of a trigger that did not hand them back: the spec is read, and here it cannot be.
    with pytest.raises(SpecValidationError):
        KubernetesJobRun.resume(task, settings, {"ti": TI()}, {  # type: ignore[arg-type]
            key: value for key, value in event.items() if key != "resume_state"})


def test_an_elastic_restart_after_a_deferral_builds_the_pods_once_and_watches_the_events_replicas(parses):
    from airflow_distributed.backends.kubernetes_run import KubernetesJobRun

    operator = DistributedTrainingOperator(task_id="t", framework="pytorch", command=["python", "x.py"],
                                           environment={"pytorch": {"n_workers": 2, "elastic": {"min_workers": 1}}},
                                           image="img:1", backend="kubernetes", namespace="ml")
    task, settings = operator._task_calls(), operator._settings()
    # worker-0 was lost before the deferral and the job carried on without it: the trigger watched the others.
    watched = [["train-1-master-0", "master", 0], ["train-1-worker-1", "worker", 1]]
    event = {"job_name": "train-1", "namespace": "ml", "replicas": watched,
             "resume_state": {"framework": "pytorch", "elastic": ELASTIC}, "status": "failed"}
    ti = type("TI", (TI,), {"try_number": 2})()
    run = KubernetesJobRun.resume(task, settings, {"ti": ti}, event)  # type: ignore[arg-type]
    pod = run._pod_manifest("train-1-worker-1")
    assert pod.metadata.name == "train-1-worker-1" and pod.metadata.namespace == "ml"
    env = {var.name: var.value for var in pod.spec.containers[0].env}
    assert (env["RANK"], env["AIRFLOW_DISTRIBUTED_TRY_NUMBER"]) == ("2", "2")
    assert run._pod_manifest("train-1-master-0").metadata.name == "train-1-master-0"
    assert [slot.name for slot in run.slots] == ["train-1-master-0", "train-1-worker-1"]
    assert len(parses) == 1  # the DAG's parse: the restart reuses it, and builds the objects once
    assert run.objects is not None and len(run.objects.pods) == 3


@pytest.mark.parametrize(("backend", "framework", "kind"), [("kubeflow", "pytorch", "PyTorchJob"),
                                                           ("kubeflow", "tensorflow", "TFJob"),
                                                           ("trainjob", "pytorch", "TrainJob")])
def test_a_resumed_kubeflow_job_takes_its_framework_from_the_event(backend, framework, kind):
    operator = _unparseable(backend)
    run_class = type(operator._backend).run_class()  # type: ignore[attr-defined]
    event = {"job_name": "train-1", "namespace": "ml", "started_at": 1.5, "resume_state": {"framework": framework},
             "status": "succeeded"}
    run = run_class.resume(operator._task_calls(), operator._settings(), {"ti": TI()}, event)
    assert (run.framework, run.resource.kind, run.started_at) == (framework, kind, 1.5)


def test_the_triggers_hand_the_resume_state_back_in_every_event_and_keep_it_when_serialized():
    from airflow_distributed.triggers.kubeflow import KubeflowJobTrigger
    from airflow_distributed.triggers.kubernetes import DistributedJobTrigger

    state = {"framework": "pytorch", "elastic": ELASTIC}
    pods = DistributedJobTrigger(job_name="train-1", namespace="ml", replicas=[["train-1-master-0", "master", 0]],
                                 startup_timeout=60.0, started_at=1.5, resume_state=state)
    kubeflow = KubeflowJobTrigger(job_name="train-1", namespace="ml", group="kubeflow.org", version="v1",
                                  plural="pytorchjobs", started_at=1.5, resume_state={"framework": "pytorch"})
    for trigger, expected in ((pods, state), (kubeflow, {"framework": "pytorch"})):
        classpath, kwargs = trigger.serialize()
        assert kwargs["resume_state"] == expected
        assert type(trigger)(**kwargs)._event_base()["resume_state"] == expected
    # The sensors' triggers watch jobs they did not start: nothing to hand back.
    bare = DistributedJobTrigger(job_name="train-1", namespace="ml", replicas=[], startup_timeout=1.0, started_at=1.0)
    assert "resume_state" not in bare._event_base()


# ---------------------------------------------------------------------------------------------- variables

JOB = "train-3f9a1c2b"
LAUNCHES = {"kubernetes": POD_LAUNCH, "kubeflow": KUBEFLOW_LAUNCH, "trainjob": TRAINJOB_LAUNCH}


def _plan(framework: str, environment: dict[str, Any], backend: str) -> Any:
    spec = load_spec(framework, environment)
    addressing: Any = {"kubernetes": KubernetesAddressing("ml"), "kubeflow": KubeflowAddressing("ml", framework),
                       "trainjob": TrainJobAddressing("ml")}[backend]
    return build_plan(spec, JOB, addressing, layout_for_kubernetes(), ["python", "t.py"], backend=backend,
                      launch=LAUNCHES[backend])


@pytest.mark.parametrize(("framework", "environment", "backend", "kept", "left_to_the_operator"), [
    ("pytorch", {"pytorch": {"n_workers": 2}}, "kubeflow", {"LOCAL_RANK": "0"},
     {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NNODES", "PET_NODE_RANK"}),
    ("pytorch", {"pytorch": {"n_workers": 2}}, "trainjob", {}, {"MASTER_ADDR", "RANK", "LOCAL_RANK", "PET_NNODES"}),
    ("tensorflow", {"tensorflow": {"n_workers": 2, "n_ps": 1}}, "kubeflow", {}, {"TF_CONFIG"}),
    ("mxnet", {"mxnet": {"n_workers": 2, "n_ps": 1}}, "kubeflow", {},
     {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_WORKER_ID", "DMLC_SERVER_ID", "DMLC_NODE_HOST", "DMLC_INTERFACE"}),
    ("horovod", {"replicas": {"n_workers": 2}}, "kubeflow", {}, {"OMPI_MCA_orte_default_hostfile"}),
    ("horovod", {"replicas": {"n_workers": 2}}, "trainjob", {}, {"OMPI_MCA_orte_default_hostfile"}),
    ("xgboost", {"xgboost": {"n_workers": 2}}, "kubeflow",
     {"DMLC_TRACKER_URI": f"{JOB}-master-0.ml.svc", "DMLC_TRACKER_PORT": "9999", "DMLC_NUM_WORKER": "3",
      "DMLC_TASK_ID": "0"}, {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}),
    ("xgboost", {"xgboost": {"n_workers": 2}}, "trainjob", {}, {"DMLC_TRACKER_URI", "DMLC_TASK_ID", "RANK"}),
    ("paddle", {"paddle": {"n_workers": 1}}, "kubeflow",
     {"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "2", "PADDLE_CURRENT_ENDPOINT": f"{JOB}-master-0.ml.svc:36543"},
     set()),
    ("jax", {"jax": {"n_workers": 1}}, "trainjob", {}, {"JAX_COORDINATOR_ADDRESS", "JAX_PROCESS_ID"}),
])
def test_an_operator_run_jobs_plan_has_only_the_framework_variables_its_operator_leaves_out(
        framework, environment, backend, kept, left_to_the_operator):
    master = _plan(framework, environment, backend).master
    assert {name: master.env.get(name) for name in kept} == kept
    assert not left_to_the_operator & set(master.env)
    assert master.env["AIRFLOW_DISTRIBUTED_JOB"] == JOB  # the contract's own variables are always there


@pytest.mark.parametrize("backend", ["kubeflow", "trainjob"])
@pytest.mark.parametrize(("framework", "environment"), [
    ("pytorch", {"pytorch": {"n_workers": 2}}), ("pytorch", {"pytorch": {"n_workers": 2, "elastic": {}}}),
    ("tensorflow", {"tensorflow": {"n_workers": 1, "n_ps": 1}}), ("mxnet", {"mxnet": {"n_workers": 1, "n_ps": 1}}),
    ("horovod", {"replicas": {"n_workers": 1}}), ("xgboost", {"xgboost": {"n_workers": 11}}),
    ("paddle", {"paddle": {"n_workers": 2}}), ("jax", {"jax": {"n_workers": 1}}),
])
def test_what_a_framework_keeps_beside_an_operator_is_what_it_gives_every_other_backend(framework, environment,
                                                                                        backend):
    plan = _plan(framework, environment, backend)
    implementation = get_framework(framework)
    for replica in plan.replicas:
        full = implementation.replica_env(replica, plan)
        kept = implementation.kept_env(replica, plan)
        assert kept.items() <= full.items(), replica.name


def test_a_kubernetes_plan_still_has_every_framework_variable():
    plan = _plan("pytorch", {"pytorch": {"n_workers": 1}}, "kubernetes")
    worker = plan.replicas[1]
    assert (worker.env["RANK"], worker.env["WORLD_SIZE"], worker.env["LOCAL_RANK"]) == ("1", "2", "0")
    assert worker.env["MASTER_ADDR"] == f"{JOB}-master-0.{JOB}.ml.svc"
