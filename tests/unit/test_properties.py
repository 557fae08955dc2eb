"""Properties over generated specs: any valid spec plans cleanly; any malformed one raises only SpecValidationError."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_distributed.manifests.kubernetes import POD_LAUNCH
from airflow_distributed.manifests.local import LOCAL_LAUNCH
from airflow_distributed.plan import KubernetesAddressing, Layout, LocalAddressing, build_plan, replica_count
from airflow_distributed.spec import SpecValidationError, load_spec

LAYOUT = Layout(model_dir="/m", output_path="/o/output.json", files_dir="/f")
PS_FRAMEWORKS = {"tensorflow": "tensorflow", "mxnet": "mxnet", "paddle": "paddle"}
SECTION = {"tensorflow": "tensorflow", "mxnet": "mxnet", "pytorch": "pytorch", "horovod": "replicas",
           "paddle": "paddle"}

amounts = st.one_of(st.integers(0, 64), st.sampled_from(["500m", "1", "2Gi", "256Mi", "1.5"]))
resource_amount = st.fixed_dictionaries({}, optional={"requests": st.just(1), "limits": st.integers(1, 8)})
resources = st.fixed_dictionaries(
    {}, optional={"cpu": resource_amount, "memory": resource_amount,
                  "gpu": st.integers(0, 2).map(lambda n: {"requests": n, "limits": n})},
)
pod_settings = st.fixed_dictionaries(
    {}, optional={"resources": resources, "node_selector": st.dictionaries(st.sampled_from(["zone", "pool"]),
                                                                            st.sampled_from(["a", "b"]))},
)


@st.composite
def valid_specs(draw):
    framework = draw(st.sampled_from(sorted(SECTION)))
    n_workers = draw(st.integers(0, 12))
    section: dict = {"n_workers": n_workers}
    if draw(st.booleans()):
        section["default_worker"] = draw(pod_settings)
    if n_workers:
        indices = draw(st.lists(st.integers(0, n_workers - 1), unique=True, max_size=3))
        section["worker"] = [{"index": i, **draw(pod_settings)} for i in indices]
    if framework in PS_FRAMEWORKS:
        n_ps = draw(st.integers(0, 4))
        section["n_ps"] = n_ps
        if n_ps and draw(st.booleans()):
            section["ps"] = [{"index": draw(st.integers(0, n_ps - 1)), **draw(pod_settings)}]
    env = {SECTION[framework]: section, **draw(pod_settings)}
    given_framework = draw(st.sampled_from([framework, None]))
    return given_framework, framework, env


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(valid_specs(), st.booleans())
def test_any_valid_spec_yields_a_consistent_plan(case, on_kubernetes):
    given_framework, framework, env = case
    spec = load_spec(given_framework, env)
    assert spec.framework == framework
    section = env[SECTION[framework]]
    expected = 1 + section["n_workers"] + section.get("n_ps", 0)
    assert replica_count(spec) == expected

    addressing = KubernetesAddressing("ns") if on_kubernetes else LocalAddressing(ports=range(30000, 30000 + expected))
    plan = build_plan(spec, "job-abc", addressing, LAYOUT, ["python", "t.py"],
                      backend="kubernetes" if on_kubernetes else "local",
                      launch=POD_LAUNCH if on_kubernetes else LOCAL_LAUNCH)

    names = [r.name for r in plan.replicas]
    addresses = [r.address for r in plan.replicas]
    assert len(plan.replicas) == expected
    assert len(set(names)) == expected and len(set(addresses)) == expected
    assert all(len(n) <= 63 for n in names)
    assert [r.is_master for r in plan.replicas].count(True) == 1 and plan.replicas[0].is_master
    cluster = json.loads(plan.master.env["AIRFLOW_DISTRIBUTED_CLUSTER"])
    assert sum(len(v) for v in cluster.values()) == expected
    assert all(v for v in cluster.values())  # roles with no replicas are left out
    assert [r for r in plan.replicas if "AIRFLOW_DISTRIBUTED_OUTPUT" in r.env] == [plan.master]
    if framework == "pytorch":
        ranks = sorted(int(r.env["RANK"]) for r in plan.replicas)
        assert ranks == list(range(expected))
        assert {r.env["WORLD_SIZE"] for r in plan.replicas} == {str(expected)}
    if framework == "paddle":
        trainers = [r for r in plan.replicas if r.role != "pserver"]
        assert [int(r.env["PADDLE_TRAINER_ID"]) for r in trainers] == list(range(1 + section["n_workers"]))
        assert {r.env["PADDLE_TRAINERS_NUM"] for r in plan.replicas} == {str(len(trainers))}
        if section.get("n_ps"):
            # A pserver's id is where its own POD_IP:PADDLE_PORT stands in the list every replica gets.
            pservers = plan.master.env["PADDLE_PSERVERS_IP_PORT_LIST"].split(",")
            own = [f"{r.env['POD_IP']}:{r.env['PADDLE_PORT']}" for r in plan.replicas if r.role == "pserver"]
            assert own == pservers
        else:
            assert not any("TRAINING_ROLE" in r.env for r in plan.replicas)
    if framework == "tensorflow":
        tasks = {(json.loads(r.env["TF_CONFIG"])["task"]["type"], json.loads(r.env["TF_CONFIG"])["task"]["index"])
                 for r in plan.replicas}
        assert len(tasks) == expected
    if framework == "mxnet":
        assert {r.env["DMLC_NUM_WORKER"] for r in plan.replicas} == {str(section["n_workers"])}
        assert {r.env["DMLC_NUM_SERVER"] for r in plan.replicas} == {str(section.get("n_ps", 0))}
    # Overrides replace the default for their index only.
    overrides = {o["index"]: o for o in section.get("worker", [])}
    for replica in plan.replicas:
        if replica.role == "worker" and replica.index not in overrides:
            default = section.get("default_worker") or {}
            assert (replica.settings.node_selector or None) == (default.get("node_selector") or None)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True), st.text(max_size=6)),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["index", "n_workers", "n_ps", "resources", "cpu", "memory", "gpu",
                                         "requests", "limits", "request", "worker", "ps", "default_worker",
                                         "tensorflow", "pytorch", "mxnet", "replicas", "node_selector",
                                         "worker_resources", "env_vars", "x"]), children, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.sampled_from([None, "tensorflow", "mxnet", "pytorch", "horovod", "caffe"]), json_values)
def test_malformed_input_raises_only_the_validation_error(framework, environment):
    try:
        spec = load_spec(framework, environment)
    except SpecValidationError as err:
        assert err.problems and all(isinstance(p, str) and isinstance(m, str) and m for p, m in err.problems)
        return
    # Whatever got through must plan without any other error.
    count = replica_count(spec)
    build_plan(spec, "job", LocalAddressing(ports=range(40000, 40000 + count)), LAYOUT, ["x"],
               backend="local", launch=LOCAL_LAUNCH)
