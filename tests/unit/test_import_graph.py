"""The package's layers, read from its import statements (every one, function-local imports included).

docs/architecture.md: data flows down; the pure layers do no I/O and know nothing of hooks, triggers, backends
or Airflow glue; hooks and triggers know nothing of the backends that drive them; backends know nothing of the
operator and sensors that pick them. A function-local import still counts: it hides a dependency from a reader,
not from the design.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "airflow_distributed"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

PURE = {"contract", "spec", "frameworks", "launch", "cluster_plan", "plan", "elastic", "manifests", "jobstate",
        "naming", "status", "outputs", "strict_json", "task_instance", "mlflow_run"}
#: what runs inside replicas, not in Airflow; ``replica.ray_driver`` is a program run in the Ray cluster
REPLICA = f"{PACKAGE}.replica"
RAY_DRIVER = f"{REPLICA}.ray_driver"
IO = {"hooks", "triggers"}
GLUE = {"operators", "sensors", "decorators", "plugins", "airflow_features"}
#: layer -> the top-level parts of the package it must not import
FORBIDDEN = {
    **{layer: IO | {"backends"} | GLUE for layer in PURE},
    **{layer: {"backends"} | GLUE for layer in IO},
    "backends": GLUE,
    # what the operator hands to Airflow's features (links, lineage, assets, retry policy): used by the operator,
    # never using it; ``links`` names the job view's paths (``plugins.urls``)
    "airflow_features": IO | {"backends"} | GLUE - {"airflow_features", "plugins"},
}
FEATURES = f"{PACKAGE}.airflow_features"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in ROOT.rglob("*.py")}


def imported(module: str, *, typing_only: bool) -> Iterator[str]:
    """The package's modules that ``module`` imports, anywhere in its body; ``typing_only``: with those imported
    only for a type checker (``if TYPE_CHECKING:``)."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for_types = {
        id(inner) for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for inner in ast.walk(block)
    }
    for node in ast.walk(tree):
        if id(node) in for_types and not typing_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join([*here, base] if base else here)
            # ``from pkg import module`` needs ``pkg.module``; ``from pkg import name`` needs ``pkg`` (its
            # ``__init__``, and through it what that imports: a package's own submodules are real edges).
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # ``from pkg.mod import Class`` -> pkg.mod
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def graph(*, typing_only: bool) -> dict[str, set[str]]:
    # Every edge counts, a package's ``__init__`` importing its own submodules included: importing the package
    # loads them, so ``plan`` -> ``frameworks`` -> ``frameworks.base`` -> ``plan`` is a circle.
    return {module: set(imported(module, typing_only=typing_only)) for module in MODULES}


#: what runs: a cycle here is two modules that need each other loaded
GRAPH = graph(typing_only=False)
#: what a reader sees, annotations included: a layer may not even name a type of a layer above it
GRAPH_WITH_TYPES = graph(typing_only=True)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_is_read() -> None:
    # The checks below are only as good as the graph: known edges must be in it.
    assert "airflow_distributed.backends.registry" in GRAPH["airflow_distributed.operators.training"]
    assert "airflow_distributed.spec" in GRAPH["airflow_distributed.plan"] or any(
        top(target) == "spec" for target in GRAPH["airflow_distributed.plan"])
    assert len(MODULES) > 50


def test_cycles_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert cycles(GRAPH) == []


def test_no_import_cycles_even_for_types() -> None:
    # Two modules naming each other's types cannot be read, or moved, one without the other: a type both need
    # lives below both (``task_instance``), or one names the other's base class (``hooks.kube_api``).
    assert cycles(GRAPH_WITH_TYPES) == []


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downwards(layer: str) -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH_WITH_TYPES.items() if top(module) == layer
        for target in targets if top(target) in FORBIDDEN[layer]
    )
    assert wrong == []


def test_replica_helpers_import_only_the_contract() -> None:
    # Training images import them (through ``tracking``) with no Airflow: nothing of the provider above the contract.
    allowed = {f"{PACKAGE}.contract", f"{PACKAGE}.strict_json", REPLICA}
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH_WITH_TYPES.items()
        if module.startswith(REPLICA + ".") and module != RAY_DRIVER
        for target in targets if target not in allowed and not target.startswith(REPLICA + ".")
    )
    assert wrong == []


def test_nothing_imports_the_ray_driver() -> None:
    # A program, run by its module name in the Ray cluster (``manifests.ray.DRIVER_MODULE``), not a library.
    assert sorted(module for module, targets in GRAPH_WITH_TYPES.items() if RAY_DRIVER in targets) == []


def external_imports(module: str) -> set[str]:
    """The top-level names of what ``module`` imports from outside the package."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    return {name.split(".")[0] for name in names} - {PACKAGE}


@pytest.mark.parametrize("entry", ["airflow_distributed.tracking", "airflow_distributed.contract"])
def test_what_training_images_import_needs_the_standard_library_only(entry: str) -> None:
    # Training images import ``tracking`` (and through it the contract) without Airflow, pydantic or kubernetes.
    seen, todo = set(), [entry, PACKAGE]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(GRAPH_WITH_TYPES[module])
    outside = {f"{module}: {name}" for module in seen for name in external_imports(module)
               if name not in sys.stdlib_module_names}
    assert outside == set()


#: Every function-local import of the package, and what it keeps out of the process that does not need it. A
#: module's other imports are at its top, where a reader sees them. DAG parsing imports the operator, the decorator,
#: the sensors and each backend's front (its checks); a replica imports ``tracking``.
LAZY_BOUNDARIES = {
    **{(f"{PACKAGE}.backends.{name}", f"{PACKAGE}.backends.{name}_run"): "the backend's run: its hooks and trigger"
       for name in ("kubernetes", "kubeflow", "trainjob", "ray", "local")},
    (f"{PACKAGE}.sensors.base", f"{PACKAGE}.sensors.job_reads"): "a poke's reads: the Kubernetes hooks and triggers",
    (f"{PACKAGE}.plugins.plugin", f"{PACKAGE}.plugins.app"): "the job view's pages: only the API server serves them",
    (f"{PACKAGE}.operators.training", f"{FEATURES}.lineage"): "the optional OpenLineage provider, about 1 s to load",
    (f"{PACKAGE}.operators.training", f"{FEATURES}.retry_policy"): "raises ImportError on Airflow < 3.3",
    (f"{PACKAGE}.operators.training", f"{PACKAGE}.hooks.mlflow"): "the MLflow hook (requests): mlflow_conn_id only",
    (f"{PACKAGE}.hooks.ray", "ray.job_submission"): "Ray is an extra; waiting for a job needs none of it",
    (f"{PACKAGE}.replica.trainer_status", "ssl"): "a replica reporting to no Trainer endpoint does not pay for it",
    (f"{PACKAGE}.replica.trainer_status", "urllib.request"): "likewise",
}


def function_local_imports(module: str) -> set[tuple[str, str]]:
    """``(module, what it imports)`` for each import inside a function of ``module`` (``TYPE_CHECKING`` aside):
    the package's module it names, or the outside module as written."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and node.module:
                name = node.module
            elif isinstance(node, ast.Import):
                name = node.names[0].name
            else:
                continue
            if name.startswith(PACKAGE):
                while name not in MODULES:
                    name = name.rpartition(".")[0]
            found.add((module, name))
    return found


def test_every_function_local_import_is_a_named_lazy_boundary() -> None:
    found = set().union(*(function_local_imports(module) for module in MODULES))
    assert sorted(found - set(LAZY_BOUNDARIES)) == []  # new: move it to the top, or name it here with its reason
    assert sorted(set(LAZY_BOUNDARIES) - found) == []  # gone: take it out of the list
