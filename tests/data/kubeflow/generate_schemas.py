"""Derive strict JSON schemas of the Kubeflow training resources from the Kubeflow SDK's typed models.

Run by hand when a targeted release changes; the output (``schemas/*.json``) is committed, so the tests need
neither the SDK nor this script. See README.md beside it for what the schemas can and cannot catch.

    pip install --no-deps kubeflow-training==1.9.4    # TFJob, PyTorchJob, XGBoostJob, PaddleJob (training-operator 1.9)
    pip download --no-deps kubeflow-training==1.8.1 -d /tmp/kubeflow-training-1.8.1   # MXJob (1.8, the last with it)
    python tests/data/kubeflow/generate_schemas.py \\
        --mxjob-sdk /tmp/kubeflow-training-1.8.1/kubeflow_training-1.8.1-py3-none-any.whl

What comes from where:
- every field name and type, the nesting, and the required fields: the SDK's models (``attribute_map``,
  ``openapi_types``, and the ``must not be None`` checks of their constructors), read in a child process per SDK
  (both versions define ``kubeflow.training``);
- ``metadata``, the pod templates and the quantities: references to the official Kubernetes schemas that
  kubernetes-validate ships, resolved by the tests from the installed package;
- MPIJob ``kubeflow.org/v2beta1`` (mpi-operator; no published package has its models): its spec's own fields are
  declared below from the mpi-operator 0.6 API reference, its run policy, replica spec and status are the SDK's
  ``kubeflow.org/v1`` models, whose fields mpi-operator 0.6 shares;
- enumerations and replica types: ``CONSTRAINTS`` below, from the operators' API references (the SDK's models
  carry none).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "schemas"

K8S_DEFINITIONS = "https://kubernetes.io/api/_definitions.json"
# Official Kubernetes schemas stand for the SDK's references to the Kubernetes client's models.
KUBERNETES_REFS = {
    "V1PodTemplateSpec": "https://kubernetes.io/api/podtemplatespec/v1",
    "V1ObjectMeta": f"{K8S_DEFINITIONS}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    "V1LabelSelector": f"{K8S_DEFINITIONS}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
    "Quantity": f"{K8S_DEFINITIONS}#/$defs/io.k8s.apimachinery.pkg.api.resource.Quantity",
    "K8sIoApiAutoscalingV2MetricSpec": f"{K8S_DEFINITIONS}#/$defs/io.k8s.api.autoscaling.v2.MetricSpec",
}
PRIMITIVES = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "object": {},
}

# The mpi-operator 0.6 MPIJobSpec's own fields (JSON name -> SDK-style type); the rest are SDK models.
DECLARED_MODELS = {
    "V2beta1MPIJob": {
        "attributes": {
            "apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta", "spec": "V2beta1MPIJobSpec",
            "status": "KubeflowOrgV1JobStatus",
        },
        "required": [],
    },
    "V2beta1MPIJobSpec": {
        "attributes": {
            "slotsPerWorker": "int", "runLauncherAsWorker": "bool", "runPolicy": "KubeflowOrgV1RunPolicy",
            "mpiReplicaSpecs": "dict(str, KubeflowOrgV1ReplicaSpec)", "sshAuthMountPath": "str",
            "mpiImplementation": "str",
        },
        "required": ["mpiReplicaSpecs"],
    },
}

RESTART_POLICIES = ["Always", "OnFailure", "Never", "ExitCode"]
CLEAN_POD_POLICIES = ["All", "Running", "None"]
# (model, field) -> extra keywords. Replica-type maps are closed: each operator knows only its own types.
CONSTRAINTS: dict[tuple[str, str], dict[str, Any]] = {
    ("KubeflowOrgV1ReplicaSpec", "restartPolicy"): {"enum": RESTART_POLICIES},
    ("KubeflowOrgV1RunPolicy", "cleanPodPolicy"): {"enum": CLEAN_POD_POLICIES},
    ("KubeflowOrgV1JobCondition", "status"): {"enum": ["True", "False", "Unknown"]},
    ("KubeflowOrgV1TFJobSpec", "tfReplicaSpecs"): {"propertyNames": {"enum": ["Chief", "Master", "PS", "Worker",
                                                                               "Evaluator"]}},
    ("KubeflowOrgV1TFJobSpec", "successPolicy"): {"enum": ["", "AllWorkers"]},
    ("KubeflowOrgV1PyTorchJobSpec", "pytorchReplicaSpecs"): {"propertyNames": {"enum": ["Master", "Worker"]}},
    ("KubeflowOrgV1MXJobSpec", "mxReplicaSpecs"): {"propertyNames": {"enum": [
        "Scheduler", "Server", "Worker", "TunerTracker", "TunerServer", "Tuner"]}},
    ("KubeflowOrgV1MXJobSpec", "jobMode"): {"enum": ["MXTrain", "MXTune"]},
    ("V2beta1MPIJobSpec", "mpiReplicaSpecs"): {"propertyNames": {"enum": ["Launcher", "Worker"]}},
    ("KubeflowOrgV1XGBoostJobSpec", "xgbReplicaSpecs"): {"propertyNames": {"enum": ["Master", "Worker"]}},
    ("KubeflowOrgV1PaddleJobSpec", "paddleReplicaSpecs"): {"propertyNames": {"enum": ["Master", "Worker"]}},
    ("V2beta1MPIJobSpec", "mpiImplementation"): {"enum": ["OpenMPI", "Intel", "MPICH"]},
}

# file -> what it describes, its root model, which SDK it comes from, and the Kubernetes version of its pod
# templates (the oldest the operator release supports, so a template valid there is valid on every cluster it runs on).
KINDS = {
    "tfjob-v1.json": {"kind": "TFJob", "apiVersion": "kubeflow.org/v1", "root": "KubeflowOrgV1TFJob",
                      "sdk": "installed", "release": "training-operator 1.9", "kubernetes": "1.29"},
    "pytorchjob-v1.json": {"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1", "root": "KubeflowOrgV1PyTorchJob",
                           "sdk": "installed", "release": "training-operator 1.9", "kubernetes": "1.29"},
    "mxjob-v1.json": {"kind": "MXJob", "apiVersion": "kubeflow.org/v1", "root": "KubeflowOrgV1MXJob",
                      "sdk": "mxjob", "release": "training-operator 1.8", "kubernetes": "1.29"},
    "mpijob-v2beta1.json": {"kind": "MPIJob", "apiVersion": "kubeflow.org/v2beta1", "root": "V2beta1MPIJob",
                            "sdk": "installed", "release": "mpi-operator 0.6", "kubernetes": "1.29"},
    "xgboostjob-v1.json": {"kind": "XGBoostJob", "apiVersion": "kubeflow.org/v1", "root": "KubeflowOrgV1XGBoostJob",
                           "sdk": "installed", "release": "training-operator 1.9", "kubernetes": "1.29"},
    "paddlejob-v1.json": {"kind": "PaddleJob", "apiVersion": "kubeflow.org/v1", "root": "KubeflowOrgV1PaddleJob",
                          "sdk": "installed", "release": "training-operator 1.9", "kubernetes": "1.29"},
}

# Run in a child process: prints {"version": ..., "models": {name: {"attributes": {json: type}, "required": [...]}}}
# for every SDK model reachable from the names in argv.
_DUMP = r"""
import importlib.metadata, json, re, sys
sdk = sys.argv[1]
if sdk != "installed":
    sys.path.insert(0, sdk)
import kubeflow.training.models as models
from kubeflow.training.configuration import Configuration

if sdk == "installed":
    version = importlib.metadata.version("kubeflow-training")
else:
    version = re.search(r"kubeflow_training-([^-]+)-", sdk).group(1)
NONE = re.compile(r"Invalid value for `(\w+)`, must not be `None`")

def required(cls):
    # The generated constructors reject None for exactly the required fields, one at a time.
    given, found = {}, []
    for _ in range(len(cls.openapi_types) + 1):
        try:
            cls(local_vars_configuration=Configuration(), **given)
            return found
        except ValueError as err:
            match = NONE.search(str(err))
            if not match:
                raise
            given[match.group(1)] = "x"
            found.append(cls.attribute_map[match.group(1)])
    raise RuntimeError(cls.__name__)

out, todo = {}, list(sys.argv[2:])
while todo:
    name = todo.pop()
    cls = getattr(models, name, None)
    if name in out or cls is None:
        continue
    out[name] = {"attributes": {cls.attribute_map[a]: t for a, t in cls.openapi_types.items()},
                 "required": required(cls)}
    todo += re.findall(r"KubeflowOrg\w+", " ".join(cls.openapi_types.values()))
print(json.dumps({"version": version, "models": out}))
"""


def read_sdk(sdk: str, roots: list[str]) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", _DUMP, sdk, *roots], check=True, capture_output=True, text=True)
    return json.loads(result.stdout)


def type_schema(type_name: str, models: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if type_name in PRIMITIVES:
        return dict(PRIMITIVES[type_name])
    if type_name.startswith("list["):
        return {"type": "array", "items": type_schema(type_name[5:-1], models, defs)}
    if type_name.startswith("dict("):
        value_type = type_name[5:-1].split(", ", 1)[1]
        return {"type": "object", "additionalProperties": type_schema(value_type, models, defs)}
    if type_name in KUBERNETES_REFS:
        return {"$ref": KUBERNETES_REFS[type_name]}
    if type_name in models:
        if type_name not in defs:
            defs[type_name] = {}  # placeholder against recursion
            defs[type_name] = model_schema(type_name, models, defs)
        return {"$ref": f"#/$defs/{type_name}"}
    raise SystemExit(f"no schema for type {type_name!r}: add it to KUBERNETES_REFS or DECLARED_MODELS")


def model_schema(name: str, models: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly the model's fields: what a structural CRD schema accepts, no more."""
    model = models[name]
    properties = {}
    for json_name, type_name in sorted(model["attributes"].items()):
        properties[json_name] = {**type_schema(type_name, models, defs), **CONSTRAINTS.get((name, json_name), {})}
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if model["required"]:
        schema["required"] = sorted(model["required"])
    return schema


def kind_schema(file_name: str, meta: dict[str, Any], sdk: dict[str, Any]) -> dict[str, Any]:
    models = {**sdk["models"], **DECLARED_MODELS}
    defs: dict[str, Any] = {}
    type_schema(meta["root"], models, defs)
    root = defs[meta["root"]]
    root["properties"]["apiVersion"] = {"const": meta["apiVersion"]}
    root["properties"]["kind"] = {"const": meta["kind"]}
    root["required"] = sorted({*root.get("required", []), "apiVersion", "kind", "metadata", "spec"})
    declared = meta["root"] in DECLARED_MODELS
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:airflow-distributed:kubeflow:{file_name.removesuffix('.json')}",
        "title": f"{meta['kind']} {meta['apiVersion']} ({meta['release']}), strict",
        "x-derived-from": (
            f"kubeflow-training {sdk['version']} models"
            + ("; the MPIJob spec's own fields declared in generate_schemas.py" if declared else "")
        ),
        "x-pod-template-kubernetes": meta["kubernetes"],
        "$ref": f"#/$defs/{meta['root']}",
        "$defs": dict(sorted(defs.items())),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mxjob-sdk", required=True, help="path of the kubeflow-training 1.8.x wheel (MXJob)")
    args = parser.parse_args(argv)
    sources = {"installed": "installed", "mxjob": args.mxjob_sdk}
    OUT.mkdir(exist_ok=True)
    for file_name, meta in KINDS.items():
        roots = [meta["root"]] if meta["root"] not in DECLARED_MODELS else [
            "KubeflowOrgV1RunPolicy", "KubeflowOrgV1ReplicaSpec", "KubeflowOrgV1JobStatus"]
        sdk = read_sdk(sources[meta["sdk"]], roots)
        schema = kind_schema(file_name, meta, sdk)
        (OUT / file_name).write_text(json.dumps(schema, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        print(f"{file_name}: {schema['title']}; {schema['x-derived-from']}")


if __name__ == "__main__":
    main()
