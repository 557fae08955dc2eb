"""The spec's Kubernetes rules agree with the API server's: cross-checked against the emulator and the strict schema.

Every setting the spec refuses, built into a pod past the spec's checks, is refused by the emulator's validation or
the strict OpenAPI schema too (or by the manifests layer before any request); every setting it accepts builds pods
that both accept. The spec's rules are its own code: nothing here is imported by the provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_distributed.manifests.kubernetes import (
    POD_LAUNCH,
    JobManifestOptions,
    build_job_objects,
    layout_for_kubernetes,
    to_dict,
)
from airflow_distributed.manifests.kubernetes_resources import ManifestError
from airflow_distributed.plan import KubernetesAddressing, build_plan
from airflow_distributed.spec import Environment, SpecValidationError, TrainingSpec, load_spec
from airflow_distributed.spec import kubernetes_rules as rules
from tests.k8s_emulator.schema import schema_set, strip_nulls
from tests.k8s_emulator.selectors import label_key_problem, label_value_problem
from tests.k8s_emulator.validation import name_problems, validate_object_meta, validate_pod_spec

SCHEMAS = schema_set("1.31")  # the emulator's default version, older than the relaxed variable names of 1.34


def _pods(environment: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's pods as JSON, built from a spec that skipped ``load_spec``'s checks."""
    spec = TrainingSpec(framework="pytorch", environment=Environment.model_validate(environment))
    plan = build_plan(spec, "train-3f9a1c2b", KubernetesAddressing("ml-team"), layout_for_kubernetes(None),
                      ["python", "train.py"], backend="kubernetes", launch=POD_LAUNCH)
    options = JobManifestOptions(namespace="ml-team", image="registry.example/trainer:1.4")
    return [strip_nulls(to_dict(pod)) for pod in build_job_objects(plan, options).pods]


def _server_refusals(pod: dict[str, Any]) -> list[str]:
    """What the emulated API server says against a pod: 422 causes, 400 type errors, unknown fields (strict)."""
    causes = validate_object_meta(pod["metadata"], "subdomain", True)
    causes += validate_pod_spec(pod["spec"], "spec", is_pod=True)
    findings = SCHEMAS.check(pod, "Pod", "v1")
    return [f"{c.field}: {c.message}" for c in [*causes, *findings.causes]] + findings.type_errors + findings.unknown


@dataclass(frozen=True)
class Setting:
    name: str
    environment: dict[str, Any]
    #: the path the spec's problem must name
    path: str


BAD = [
    Setting("label key with a space", {"labels": {"bad key!": "v"}}, "environment.labels"),
    Setting("label key with an empty prefix", {"labels": {"/team": "v"}}, "environment.labels"),
    Setting("label key prefix upper case", {"labels": {"Example.com/team": "v"}}, "environment.labels"),
    Setting("label value too long", {"labels": {"team": "v" * 64}}, "environment.labels.team"),
    Setting("label value ends with a dash", {"labels": {"team": "vision-"}}, "environment.labels.team"),
    Setting("annotation key", {"annotations": {"cost center": "42"}}, "environment.annotations"),
    Setting("annotations too large", {"annotations": {"blob": "x" * (256 * 1024)}}, "environment.annotations"),
    Setting("node selector key", {"node_selector": {"pool!": "a"}}, "environment.node_selector"),
    Setting("node selector value", {"node_selector": {"pool": "a b"}}, "environment.node_selector.pool"),
    Setting("fractional gpu", {"resources": {"gpu": {"requests": 0.5, "limits": 0.5}}},
            "environment.resources.gpu.requests"),
    Setting("fractional tpu quantity", {"resources": {"tpu": {"limits": "500m"}}},
            "environment.resources.tpu.limits"),
    Setting("toleration operator", {"tolerations": [{"key": "a", "operator": "Matches"}]},
            "environment.tolerations[0].operator"),
    Setting("toleration value with Exists", {"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]},
            "environment.tolerations[0].value"),
    Setting("toleration without key must be Exists", {"tolerations": [{"operator": "Equal", "value": "x"}]},
            "environment.tolerations[0].operator"),
    Setting("toleration effect", {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoRun"}]},
            "environment.tolerations[0].effect"),
    Setting("tolerationSeconds without NoExecute",
            {"tolerations": [{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]},
            "environment.tolerations[0].tolerationSeconds"),
    Setting("toleration key", {"tolerations": [{"key": "a b", "operator": "Exists"}]},
            "environment.tolerations[0].key"),
    Setting("toleration value", {"tolerations": [{"key": "a", "value": "x y"}]}, "environment.tolerations[0].value"),
    Setting("affinity misspelt", {"affinity": {"nodeAfinity": {}}}, "environment.affinity"),
    Setting("affinity nested field misspelt", {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone", "labelSelectr": {}}]}}},
        "environment.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"),
    Setting("affinity required field missing",
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
            "environment.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"),
    Setting("security context misspelt", {"security_context": {"runAsUsr": 1}}, "environment.security_context"),
    Setting("security context type", {"security_context": {"runAsUser": "root"}},
            "environment.security_context.runAsUser"),
    Setting("service account", {"service_account": "Trainer_SA"}, "environment.service_account"),
    Setting("secret ref", {"secret_refs": ["wandb key"]}, "environment.secret_refs[0]"),
    Setting("config map ref", {"config_map_refs": ["-defaults"]}, "environment.config_map_refs[0]"),
    Setting("env var starting with a digit", {"env_vars": {"1LR": "0.1"}}, "environment.env_vars"),
    Setting("env var with '='", {"env_vars": {"A=B": "x"}}, "environment.env_vars"),
]

GOOD = [
    Setting("qualified label keys and values", {"labels": {"example.com/team": "vision", "tier": "", "a.b_c-d": "X1"}},
            ""),
    Setting("annotation keys any case", {"annotations": {"Example.com/Owner": "free text, any length: " + "x" * 300}},
            ""),
    Setting("node selector", {"node_selector": {"cloud.google.com/gke-nodepool": "training"}}, ""),
    Setting("whole devices", {"resources": {"gpu": {"requests": 2, "limits": 2}, "tpu": {"limits": "4"}}}, ""),
    Setting("tolerations", {"tolerations": [
        {"operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "value": "true", "effect": "NoExecute", "tolerationSeconds": 60},
        {"key": "dedicated", "operator": "Equal", "value": "", "effect": "PreferNoSchedule"}]}, ""),
    Setting("affinity in both spellings", {"affinity": {"node_affinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {
            "matchExpressions": [{"key": "gpu", "operator": "Gt", "values": ["1"]}]}}]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "x"}}}}]}}}, ""),
    Setting("security context", {"security_context": {
        "runAsUser": 1000, "fsGroup": 1000, "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"},
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "sysctls": [{"name": "a", "value": "1"}]}},
        ""),
    Setting("names", {"service_account": "trainer", "secret_refs": ["wandb.key"], "config_map_refs": ["defaults-1"],
                      "image_pull_secrets": ["registry-credentials"]}, ""),
    Setting("env vars", {"env_vars": {"LOG_LEVEL": "debug", "my.var-1": "x", "_X": "y"}}, ""),
]


@pytest.mark.parametrize("case", BAD, ids=[c.name for c in BAD])
def test_what_the_spec_refuses_the_api_server_refuses(case: Setting):
    with pytest.raises(SpecValidationError) as err:
        load_spec("pytorch", case.environment)
    assert case.path in err.value.paths, err.value.problems
    try:
        pods = _pods(case.environment)
    except ManifestError:
        return  # refused by the manifests layer, before any request
    assert all(_server_refusals(pod) for pod in pods), f"the emulated API server accepts {case.environment}"


@pytest.mark.parametrize("case", GOOD, ids=[c.name for c in GOOD])
def test_what_the_spec_accepts_the_api_server_accepts(case: Setting):
    load_spec("pytorch", case.environment)
    for pod in _pods(case.environment):
        assert _server_refusals(pod) == [], pod["metadata"]["name"]


def test_image_pull_secret_names_are_refused_although_the_api_server_takes_them():
    # The API server stores any imagePullSecrets name, but no Secret can have an invalid one: every pull would fail
    # (ErrImagePull) after the pods were created, so the spec refuses it first.
    environment = {"image_pull_secrets": ["Registry Credentials"]}
    with pytest.raises(SpecValidationError) as err:
        load_spec("pytorch", environment)
    assert "environment.image_pull_secrets[0]" in err.value.paths
    assert name_problems("Registry Credentials", "subdomain")


# Text near the rules' edges: the allowed alphabet plus a few characters they refuse, up to 70 long.
_EDGY = st.text(alphabet="aZ09-_./ !=", max_size=70) | st.from_regex(r"\A[a-z0-9.]{1,12}/[A-Za-z0-9._-]{1,64}\Z")


@settings(max_examples=300, deadline=None)
@given(_EDGY)
def test_label_key_and_value_rules_match_the_api_server(text: str):
    assert rules.is_qualified_name(text) == (label_key_problem(text) is None)
    assert rules.is_label_value(text) == (label_value_problem(text) is None)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="az09-.A_", max_size=260) | st.from_regex(r"\A[a-z0-9-]{1,63}(\.[a-z0-9-]{1,63}){0,4}\Z"))
def test_name_rule_matches_the_api_server(text: str):
    assert rules.is_subdomain(text) == (text != "" and not name_problems(text, "subdomain"))


def test_the_security_context_fields_are_those_of_the_kubernetes_models():
    # The spec cannot import the client (a DAG parse must not), so its table is checked against it here.
    from kubernetes import client

    fields = set(client.V1PodSecurityContext.attribute_map.values()) | set(
        client.V1SecurityContext.attribute_map.values())
    table = {name for name in rules._SECURITY_CONTEXT if name != rules.REQUIRED}
    assert table == fields
    affinity = {name for name in rules._AFFINITY if name != rules.REQUIRED}
    assert affinity == set(client.V1Affinity.attribute_map.values())
    toleration = {name for name in rules._TOLERATION if name != rules.REQUIRED}
    assert toleration == set(client.V1Toleration.attribute_map.values())
