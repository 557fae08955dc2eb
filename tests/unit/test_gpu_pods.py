"""Pods fit for GPU training, on every cluster backend: a memory-backed ``/dev/shm`` sized from the replica's memory
limit or ``shm_size`` (refused at parse time when it cannot work), the GPUs under the cluster's resource key, and the
NCCL variables users set passed through unchanged on every backend (local, kubernetes, kubeflow, trainjob, ray).

Pure: the manifests and plans each backend's own build step makes, no cluster (the real control plane and the real
node check the same volume in ``tests/kube_control_plane/test_kubernetes_backend.py`` and
``tests/kube_node/test_training.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from airflow_distributed.backends.base import BackendSettings, ProcessSettings, RaySettings
from airflow_distributed.backends.local import ignored_by_local
from airflow_distributed.backends.ray_run import ignored_by_ray
from airflow_distributed.manifests.horovod_ssh import SshKeyPair
from airflow_distributed.manifests.kubeflow import (
    KUBEFLOW_LAUNCH,
    KubeflowAddressing,
    KubeflowJobOptions,
    build_kubeflow_job,
)
from airflow_distributed.manifests.kubeflow_kinds import BY_KIND
from airflow_distributed.manifests.kubernetes import (
    MAIN_CONTAINER,
    POD_LAUNCH,
    JobManifestOptions,
    build_job_objects,
    layout_for_kubernetes,
    to_dict,
)
from airflow_distributed.manifests.local import LOCAL_LAUNCH, process_specs
from airflow_distributed.manifests.ray import (
    RAY_LAUNCH,
    ActorAddressing,
    RayOptions,
    job_description,
    job_layout,
    ray_job,
)
from airflow_distributed.manifests.shared_memory import shm_size_limit
from airflow_distributed.manifests.trainjob import TRAINJOB_LAUNCH, TrainJobAddressing, TrainJobOptions, build_trainjob
from airflow_distributed.operators import DistributedTrainingOperator
from airflow_distributed.plan import KubernetesAddressing, LocalAddressing, build_plan
from airflow_distributed.plan import Layout as PlanLayout
from airflow_distributed.spec import SpecValidationError, TrainingSpec, load_spec
from airflow_distributed.spec.models import SECTION_OF

NAMESPACE = "ml"
JOB = "gpu-job-1"
KEY = SshKeyPair(private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
                 public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests job")
COMMAND = ["python", "train.py"]
#: Master with 8Gi, workers with 3Gi of memory limit, and GPUs: /dev/shm of 4Gi and 1536Mi with shm_size="auto".
GPU_ENV = {"resources": {"memory": {"requests": "8Gi", "limits": "8Gi"}, "gpu": {"limits": 8}},
           "default_worker": {"resources": {"memory": {"limits": "3Gi"}, "gpu": {"limits": 8}}}}
#: The variables users most often set for NCCL (and gloo, and PyTorch's NCCL watchdog), some on the operator's
#: ``env``, some on a replica's ``env_vars``: every replica must see each as given.
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "0", "NCCL_NET_GDR_LEVEL": "PHB",
            "NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
            "TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "GLOO_SOCKET_IFNAME": "eth0"}
REPLICA_NCCL_ENV = {"NCCL_ALGO": "Ring", "NCCL_SOCKET_NTHREADS": "4"}
SHM = "dshm"


def _spec(framework: str, section: dict[str, Any], top: dict[str, Any] | None = None) -> TrainingSpec:
    return load_spec(framework, {SECTION_OF[framework]: section, **(top or {})})


def _every_role(section: dict[str, Any], **settings: Any) -> dict[str, Any]:
    """``section`` with ``settings`` for its workers and parameter servers (the master's are the top level's)."""
    roles = {"default_worker": dict(settings)}
    if "n_ps" in section:
        roles["default_ps"] = dict(settings)
    return {**section, **roles}


def _gpu_spec(framework: str = "pytorch", n_workers: int = 2) -> TrainingSpec:
    worker = dict(GPU_ENV["default_worker"])
    return _spec(framework, {"n_workers": n_workers, "default_worker": worker}, {"resources": GPU_ENV["resources"]})


def _pods(**overrides: Any) -> JobManifestOptions:
    return JobManifestOptions(**{"namespace": NAMESPACE, "image": "trainer:1", **overrides})


def _kubernetes(spec: TrainingSpec, env: dict[str, str] | None = None, **options: Any) -> list[dict[str, Any]]:
    plan = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout_for_kubernetes(job_name=JOB), COMMAND,
                      backend="kubernetes", launch=POD_LAUNCH, env=env)
    return [to_dict(pod) for pod in build_job_objects(plan, _pods(**options), ssh_key=KEY).pods]


def _kubeflow(spec: TrainingSpec, env: dict[str, str] | None = None, **options: Any) -> dict[str, Any]:
    plan = build_plan(spec, JOB, KubeflowAddressing(NAMESPACE, spec.framework), layout_for_kubernetes(job_name=JOB),
                      COMMAND, backend="kubeflow", launch=KUBEFLOW_LAUNCH, env=env)
    return build_kubeflow_job(plan, KubeflowJobOptions(_pods(**options)))


def _templates(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    specs = body["spec"][BY_KIND[body["kind"]].replica_specs_key]
    return {rtype: replica_spec["template"] for rtype, replica_spec in specs.items()}


def _trainjob(spec: TrainingSpec, env: dict[str, str] | None = None, **options: Any) -> dict[str, Any]:
    plan = build_plan(spec, JOB, TrainJobAddressing(NAMESPACE), layout_for_kubernetes(job_name=JOB), COMMAND,
                      backend="trainjob", launch=TRAINJOB_LAUNCH, env=env)
    # Horovod runs on a runtime the cluster provides (none is built in): named here as a DAG would.
    runtime = "openmpi" if spec.framework == "horovod" else None
    return build_trainjob(plan, TrainJobOptions(_pods(**options), runtime=runtime))


def _trainjob_pods(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    replicated = body["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return {job["name"]: job["template"]["spec"]["template"] for job in replicated}


def _shm(pod_spec: dict[str, Any], container: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The pod's shm volume (or ``None``) and the mounts of it in each container named ``container``."""
    volumes = [v for v in pod_spec.get("volumes") or [] if v["name"] == SHM]
    assert len(volumes) <= 1
    mounts = [m for c in pod_spec["containers"] if c["name"] == container for m in c.get("volumeMounts") or []
              if m["name"] == SHM]
    return (volumes[0] if volumes else None), mounts


# ----------------------------------------------------------------------------------------------- /dev/shm


def test_every_kubernetes_pod_mounts_memory_of_half_its_replicas_memory_limit_at_dev_shm():
    pods = _kubernetes(_gpu_spec())
    sizes = {}
    for pod in pods:
        volume, mounts = _shm(pod["spec"], MAIN_CONTAINER)
        assert volume is not None, pod["metadata"]["name"]
        assert volume["emptyDir"]["medium"] == "Memory"
        sizes[pod["metadata"]["name"]] = volume["emptyDir"]["sizeLimit"]
        assert mounts == [{"name": SHM, "mountPath": "/dev/shm"}]
        # The sidecar and the readiness step keep the runtime's own /dev/shm: they pass no tensors.
        others = [c for c in [*pod["spec"]["containers"], *(pod["spec"].get("initContainers") or [])]
                  if c["name"] != MAIN_CONTAINER]
        assert all(m["name"] != SHM for c in others for m in c.get("volumeMounts") or [])
        for version in ("1.29", kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version())):
            kubernetes_validate.validate(pod, version, strict=True)
    assert sizes == {f"{JOB}-master-0": "4Gi", f"{JOB}-worker-0": "1536Mi", f"{JOB}-worker-1": "1536Mi"}


def test_horovod_standby_workers_get_dev_shm_too_since_the_launcher_starts_ranks_in_them():
    memory = {"resources": {"memory": {"limits": "1Gi"}}}
    pods = _kubernetes(_spec("horovod", _every_role({"n_workers": 2}, **memory), memory))
    assert [_shm(pod["spec"], MAIN_CONTAINER)[0] for pod in pods] == [
        {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": "512Mi"}}] * 3


@pytest.mark.parametrize("shm_size, expected", [
    ("auto", {"medium": "Memory", "sizeLimit": "4Gi"}),
    ("2Gi", {"medium": "Memory", "sizeLimit": "2Gi"}),
    ("1500M", {"medium": "Memory", "sizeLimit": "1500M"}),
])
def test_shm_size_sets_the_size_of_every_pods_dev_shm(shm_size, expected):
    master = _kubernetes(_gpu_spec(), shm_size=shm_size)[0]
    assert _shm(master["spec"], MAIN_CONTAINER)[0] == {"name": SHM, "emptyDir": expected}


def test_no_memory_limit_gives_an_unsized_memory_volume_and_none_turns_it_off():
    unsized = _kubernetes(_spec("pytorch", {"n_workers": 1}))
    assert [_shm(pod["spec"], MAIN_CONTAINER)[0] for pod in unsized] == [
        {"name": SHM, "emptyDir": {"medium": "Memory"}}] * 2
    for pod in _kubernetes(_gpu_spec(), shm_size=None):
        assert _shm(pod["spec"], MAIN_CONTAINER) == (None, [])


@pytest.mark.parametrize("limit, expected", [("8Gi", "4Gi"), ("3Gi", "1536Mi"), (1000, "500Mi"), ("1G", "500000000"),
                                             ("1001", "500"), (None, None)])
def test_auto_is_half_the_memory_limit_as_an_exact_quantity(limit, expected):
    environment = {"resources": {"memory": {"limits": limit}}} if limit else {}
    resources = load_spec("pytorch", environment).environment.resources
    assert shm_size_limit("auto", resources) == expected


@pytest.mark.parametrize("framework, section", [
    ("pytorch", {"n_workers": 2}),
    ("tensorflow", {"n_workers": 2, "n_ps": 1}),
    ("mxnet", {"n_workers": 1, "n_ps": 1}),
    ("xgboost", {"n_workers": 2}),
    ("paddle", {"n_workers": 2}),
    ("horovod", {"n_workers": 2}),
])
def test_every_kubeflow_replica_type_template_mounts_dev_shm(framework, section):
    memory = {"resources": {"memory": {"limits": "2Gi"}}}
    body = _kubeflow(_spec(framework, _every_role(section, **memory), memory))
    templates = _templates(body)
    assert len(templates) >= 2
    container = BY_KIND[body["kind"]].container
    for rtype, template in templates.items():
        volume, mounts = _shm(template["spec"], container)
        assert volume == {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}, rtype
        assert mounts == [{"name": SHM, "mountPath": "/dev/shm"}], rtype


def test_kubeflow_templates_are_sized_per_replica_type():
    templates = _templates(_kubeflow(_gpu_spec()))
    assert {rtype: _shm(t["spec"], "pytorch")[0]["emptyDir"]["sizeLimit"] for rtype, t in templates.items()} == {
        "Master": "4Gi", "Worker": "1536Mi"}
    assert all(_shm(t["spec"], "pytorch") == (None, []) for t in _templates(_kubeflow(_gpu_spec(),
                                                                                      shm_size=None)).values())


@pytest.mark.parametrize("framework, jobs", [("pytorch", ["node"]), ("horovod", ["launcher", "node"])])
def test_every_trainjob_node_gets_dev_shm_through_the_runtime_patch(framework, jobs):
    section: dict[str, Any] = {"n_workers": 2}
    body = _trainjob(_spec(framework, section, {"resources": {"memory": {"limits": "16Gi"}}}))
    pods = _trainjob_pods(body)
    assert sorted(pods) == sorted(jobs)
    for pod in pods.values():
        volume, mounts = _shm(pod["spec"], "node")
        assert volume == {"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
        assert mounts == [{"name": SHM, "mountPath": "/dev/shm"}]
    for pod in _trainjob_pods(_trainjob(_spec(framework, section), shm_size=None)).values():
        assert _shm(pod["spec"], "node") == (None, [])


def test_the_shm_volume_name_and_path_clash_with_none_of_the_jobs_own_volumes():
    # Every volume the project gives a pod at once: model dir, files, secret files, SSH (Horovod), and /dev/shm.
    spec = _spec("horovod", {"n_workers": 1})
    plan = build_plan(spec, JOB, KubernetesAddressing(NAMESPACE), layout_for_kubernetes(job_name=JOB), COMMAND,
                      backend="kubernetes", launch=POD_LAUNCH, secret_files={"args.json": "{}"})
    for pod in build_job_objects(plan, _pods(), ssh_key=KEY).pods:
        names = [v.name for v in pod.spec.volumes]
        assert SHM in names and len(names) == len(set(names)), names
        paths = [m.mount_path for m in pod.spec.containers[0].volume_mounts]
        assert "/dev/shm" in paths and len(paths) == len(set(paths)), paths


# ------------------------------------------------------------------------------------- parse-time refusals

CLUSTER_BACKENDS = ["kubernetes", "kubeflow", "trainjob"]


def _operator(backend: str, **kwargs: Any) -> DistributedTrainingOperator:
    kwargs.setdefault("environment", {"pytorch": {"n_workers": 1}})
    return DistributedTrainingOperator(task_id="t", framework="pytorch", command=COMMAND, image="trainer:1",
                                       backend=backend, **kwargs)


def _problems(backend: str, **kwargs: Any) -> list[tuple[str, str]]:
    with pytest.raises(SpecValidationError) as error:
        _operator(backend, **kwargs)
    return [problem for problem in error.value.problems if problem[0] in ("shm_size", "model_dir", "checkpoint_dir")]


ALLOWED = ("a Kubernetes quantity of memory such as '8Gi', 'auto' (half of each replica's memory limit) or None "
           "(no memory-backed /dev/shm)")


@pytest.mark.parametrize("backend", CLUSTER_BACKENDS)
@pytest.mark.parametrize("shm_size, problem", [
    ("lots", "is not a Kubernetes quantity (examples: '500m', '2', '1.5', '256Mi', '2Gi', '1e3'); allowed: "),
    ("-1Gi", "is not a Kubernetes quantity (examples: '500m', '2', '1.5', '256Mi', '2Gi', '1e3'); allowed: "),
    ("0", "must be at least one byte; allowed: "),
    ("500m", "must be at least one byte; allowed: "),
    (8, "a int is not allowed: "),
    (True, "a bool is not allowed: "),
])
def test_a_bad_shm_size_is_refused_at_parse_naming_the_field(backend, shm_size, problem):
    assert _problems(backend, shm_size=shm_size) == [("shm_size", problem + ALLOWED)]


@pytest.mark.parametrize("backend", CLUSTER_BACKENDS)
def test_a_shm_size_above_a_replicas_memory_limit_is_refused_at_parse(backend):
    environment = {"resources": {"memory": {"limits": "4Gi"}},
                   "pytorch": {"n_workers": 1, "default_worker": {"resources": {"memory": {"limits": "4Gi"}}}}}
    assert _problems(backend, environment=environment, shm_size="6Gi") == [
        ("shm_size", f"6Gi is more than the memory limit of {path}.resources (4Gi): /dev/shm's pages count against "
         "it; give a smaller size, 'auto' (half the limit) or None")
        for path in ("environment", "environment.pytorch.default_worker")]
    _operator(backend, environment=environment, shm_size="4Gi")  # all of it: the user's choice


@pytest.mark.parametrize("backend", CLUSTER_BACKENDS)
@pytest.mark.parametrize("argument, path", [("model_dir", "/dev/shm"), ("model_dir", "/dev/shm/model"),
                                            ("checkpoint_dir", "/dev//shm/ckpt/")])
def test_a_model_or_checkpoint_dir_on_the_shm_mount_is_refused_unless_shm_is_off(backend, argument, path):
    assert _problems(backend, **{argument: path}) == [
        (argument, "is at or under /dev/shm, where the pods mount their shared memory (shm_size); choose another "
         "path, or set shm_size=None")]
    _operator(backend, shm_size=None, **{argument: path})
    _operator(backend, **{argument: "/dev/shmem/model"})


@pytest.mark.parametrize("backend", CLUSTER_BACKENDS)
@pytest.mark.parametrize("shm_size", ["auto", None, "1Gi", "1.5Gi", "64Mi", "2e9"])
def test_good_shm_sizes_pass_the_parse(backend, shm_size):
    _operator(backend, shm_size=shm_size)


def test_manifest_options_refuse_a_bad_shm_size_too():
    with pytest.raises(ValueError, match=r"^shm_size: must be at least one byte"):
        _pods(shm_size="0")


# ------------------------------------------------------------------------------------------------ GPU key


def test_the_gpu_resource_key_reaches_every_cluster_backends_pods():
    key = "amd.com/gpu"
    for pod in _kubernetes(_gpu_spec(), gpu_resource_key=key):
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["limits"][key] == resources["requests"][key] == "8"
        assert "nvidia.com/gpu" not in resources["limits"]
    for rtype, template in _templates(_kubeflow(_gpu_spec(), gpu_resource_key=key)).items():
        limits = template["spec"]["containers"][0]["resources"]["limits"]
        assert limits[key] == "8" and "nvidia.com/gpu" not in limits, rtype
    per_node = _trainjob(_spec("pytorch", {"n_workers": 1}, {"resources": GPU_ENV["resources"]}),
                         gpu_resource_key=key)["spec"]["trainer"]["resourcesPerNode"]
    assert per_node["limits"][key] == per_node["requests"][key] == "8"


# ----------------------------------------------------------------------------------------------- NCCL


def _nccl_spec(framework: str, section: dict[str, Any]) -> TrainingSpec:
    """Workers that add their own NCCL variables (``env_vars``) to the operator's (``env``)."""
    return _spec(framework, _every_role(section, env_vars=dict(REPLICA_NCCL_ENV)), {"env_vars": dict(REPLICA_NCCL_ENV)})


def _assert_nccl(env: dict[str, Any], where: str) -> None:
    assert {name: env.get(name) for name in [*NCCL_ENV, *REPLICA_NCCL_ENV]} == {**NCCL_ENV, **REPLICA_NCCL_ENV}, where


FRAMEWORKS = [("pytorch", {"n_workers": 2}), ("tensorflow", {"n_workers": 2, "n_ps": 1}), ("jax", {"n_workers": 1}),
              ("xgboost", {"n_workers": 2}), ("paddle", {"n_workers": 2}), ("horovod", {"n_workers": 2}),
              ("mxnet", {"n_workers": 1, "n_ps": 1})]


@pytest.mark.parametrize("framework, section", FRAMEWORKS)
def test_nccl_variables_reach_every_local_process_unchanged_over_the_workers_own(framework, section):
    spec = _nccl_spec(framework, section)
    ports = range(29500, 29500 + 1 + sum(getattr(spec.cluster, n, 0) or 0 for n in ("n_workers", "n_ps")))
    plan = build_plan(spec, JOB, LocalAddressing(list(ports)),
                      PlanLayout(model_dir="/tmp/m", output_path="/tmp/o.json", files_dir="/tmp/f"), COMMAND,
                      backend="local", launch=LOCAL_LAUNCH, env=NCCL_ENV)
    worker_env = {name: "worker's own" for name in NCCL_ENV}  # the Airflow worker's environment, below the plan's
    for process in process_specs(plan, interpreter="python3", base_env=worker_env):
        _assert_nccl(dict(process.env), process.name)


@pytest.mark.parametrize("framework, section", FRAMEWORKS)
def test_nccl_variables_reach_every_kubernetes_pod_unchanged(framework, section):
    for pod in _kubernetes(_nccl_spec(framework, section), env=NCCL_ENV):
        env = {var["name"]: var.get("value") for var in pod["spec"]["containers"][0]["env"]}
        _assert_nccl(env, pod["metadata"]["name"])


@pytest.mark.parametrize("framework, section", [f for f in FRAMEWORKS if f[0] != "jax"])  # no Kubeflow v1 kind
def test_nccl_variables_reach_every_kubeflow_replica_type_unchanged(framework, section):
    for rtype, template in _templates(_kubeflow(_nccl_spec(framework, section), env=NCCL_ENV)).items():
        env = {var["name"]: var.get("value") for var in template["spec"]["containers"][0]["env"]}
        _assert_nccl(env, rtype)


@pytest.mark.parametrize("framework", ["pytorch", "jax", "xgboost", "horovod"])
def test_nccl_variables_reach_every_trainjob_node_unchanged(framework):
    # One template for every node: the nodes' env_vars are the master's (trainjob_checks refuses others).
    spec = _spec(framework, {"n_workers": 2}, {"env_vars": dict(REPLICA_NCCL_ENV)})
    body = _trainjob(spec, env=NCCL_ENV)
    _assert_nccl({var["name"]: var["value"] for var in body["spec"]["trainer"]["env"]}, "trainer.env")
    # and the node program sets no NCCL variable over them
    assert "NCCL" not in " ".join(body["spec"]["trainer"]["command"])


@pytest.mark.parametrize("framework, section", [f for f in FRAMEWORKS if f[0] in ("pytorch", "jax", "xgboost",
                                                                                   "tensorflow")])
def test_nccl_variables_reach_every_ray_actor_unchanged(framework, section):
    spec = _nccl_spec(framework, section)
    layout = job_layout("/tmp/ray-jobs", JOB, "/tmp/ray-jobs/model", "/tmp/ray-jobs/ckpt")
    description = job_description(spec=spec, job_name=JOB, command=COMMAND, layout=layout, files={}, env=NCCL_ENV,
                                  try_number=1, options=RayOptions())
    # What travels to the cluster, read back as the driver reads it, and the plan the driver builds from it.
    _, runtime_env = ray_job(description, "python3")
    job = json.loads(next(iter(runtime_env["env_vars"].values())))
    sent = TrainingSpec.model_validate(job["spec"])
    endpoints = [("127.0.0.1", 29500 + i) for i in range(len(job["bundles"]))]
    plan = build_plan(sent, JOB, ActorAddressing(endpoints), layout, COMMAND, backend="ray", launch=RAY_LAUNCH,
                      env=job["env"])
    for replica in plan.replicas:
        _assert_nccl(dict(replica.env), replica.name)


def test_the_docs_gpu_example_passes_the_parse_and_gets_the_dev_shm_it_says():
    text = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    section = text.split("## GPU training", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {"DistributedTrainingOperator": DistributedTrainingOperator}
    exec(code, namespace)  # the project's own documentation, run as written
    train = namespace["train"]
    assert "/dev/shm of 32Gi here" in code
    pods = _kubernetes(train.spec, env=train.env, shm_size=train.shm_size, gpu_resource_key=train.gpu_resource_key)
    assert {_shm(pod["spec"], MAIN_CONTAINER)[0]["emptyDir"]["sizeLimit"] for pod in pods} == {"32Gi"}
    assert len(pods) == 4
    for pod in pods:
        env = {var["name"]: var.get("value") for var in pod["spec"]["containers"][0]["env"]}
        assert env["NCCL_DEBUG"] == "INFO" and env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_shm_size_given_to_a_process_backend_is_said_to_be_ignored(backend):
    ignored_by = {"local": (ignored_by_local, ProcessSettings), "ray": (ignored_by_ray, RaySettings)}
    check, options = ignored_by[backend]
    for shm_size, said in (("8Gi", True), ("auto", False), (None, False)):
        operator = DistributedTrainingOperator(task_id="t", framework="pytorch", command=COMMAND, backend=backend,
                                               shm_size=shm_size)
        names = [name for name, _ in check(BackendSettings.of(operator, options), operator.spec)]
        assert ("shm_size" in names) is said, shm_size
