"""Derive the strict ``openAPIV3Schema`` of the Kubeflow Trainer v2 ``TrainJob`` from the typed models of
``kubeflow-trainer-api`` (pydantic), for the API emulator's CustomResourceDefinition.

Run by hand when the targeted release changes; the output (``trainjob-v1alpha1.json``) is committed, so that the
tests do not build it on every run:

    pip install 'kubeflow-trainer-api==2.3.0'
    python tests/data/trainjob/generate_schema.py

What is done to pydantic's JSON schema of ``TrainerV1alpha1TrainJob`` (``by_alias``: the JSON names):
- every ``$ref`` is inlined (a CRD schema has no references), ``Optional[X]`` becomes ``X``;
- every object with declared properties gets ``additionalProperties: false``: a field the models do not have is
  unknown to the CRD, which the API server drops (or, with ``fieldValidation=Strict``, refuses);
- a oneOf wrapper model (``actual_instance``: quantities, int-or-string) becomes the ``anyOf`` of what it wraps;
- titles, descriptions and defaults are dropped: the schema is for checking bodies, not for reading.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "trainjob-v1alpha1.json"
_DROPPED = {"title", "description", "default"}


def _inline(node: Any, defs: dict[str, Any], trail: tuple[str, ...] = ()) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, trail) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in trail:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}  # recursion: left open
        return _inline(defs[name], defs, (*trail, name))
    options = node.get("anyOf")
    if isinstance(options, list):
        concrete = [item for item in options if item != {"type": "null"}]
        if len(concrete) == 1:
            rest = {key: value for key, value in node.items() if key != "anyOf"}
            return _inline({**concrete[0], **rest}, defs, trail)
    wrapped = (node.get("properties") or {}).get("actual_instance")
    if isinstance(wrapped, dict):
        # A oneOf wrapper model (a quantity, an int-or-string): its JSON is the bare value it wraps.
        kinds = [item for item in wrapped.get("anyOf", []) if item != {"type": "null"}]
        return {"anyOf": kinds} if kinds else {}
    result = {key: _inline(value, defs, trail) for key, value in node.items() if key not in _DROPPED}
    if result.get("type") == "object" and "properties" in result and "additionalProperties" not in result:
        result["additionalProperties"] = False
    return result


def trainjob_schema() -> dict[str, Any]:
    from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob

    raw = TrainerV1alpha1TrainJob.model_json_schema(by_alias=True)
    schema = _inline({key: value for key, value in raw.items() if key != "$defs"}, raw.get("$defs", {}))
    schema["x-generated-from"] = f"kubeflow-trainer-api {version('kubeflow-trainer-api')}"
    return schema


if __name__ == "__main__":
    OUT.write_text(json.dumps(trainjob_schema(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
