"""Dump what every training task of the DAG files would create on each cluster backend, with no cluster or network.

For every ``DistributedTrainingOperator`` task (``@task.distributed`` included; a mapped task once per map index of a
literal ``expand``) of every DAG file in ``example_dags/`` and ``tests/dags/`` (the DAGs folder the tests use), and
for each cluster backend, one canonical JSON file (sorted keys, indent 1) holding what the backend's own run-time
build step makes:

- ``kubernetes``: the request bodies of the job's objects (Service, Secrets, ConfigMaps, PodGroup, pods), in
  creation order, from ``KubernetesJobRun.start`` (its ``objects``);
- ``kubeflow``: the Kubeflow v1 job object, from ``KubeflowJobRun.start`` (its ``body``);
- ``trainjob``: the TrainJob object, from ``TrainJobRun.start`` (skipped, with a note, without the optional
  ``kubeflow_trainer_api``; a framework with no Trainer runtime is refused by the backend's check: its problems);
- ``ray``: the submission ``RayBackend.run`` makes (submission id, entrypoint, runtime_env, metadata, and the job's
  description decoded from runtime_env), captured by a stand-in for ``RayJobHook`` that answers "no such job" and
  records the submission instead of sending it.

Each file's ``status`` says which it holds: ``objects``; ``problems`` (the ``(argument, message)`` pairs the operator
refuses the task with on that backend, at parse or once rendered: what ``execute`` checks before anything starts);
``skipped`` (a note); or ``error`` (the build raised: its class and message).

The fixed context (so that two dumps of the same code are byte-identical):

- DAG files are parsed by path with Airflow's ``DagBag`` in a temporary ``AIRFLOW_HOME`` (set before Airflow is
  imported, unless this runs inside a process that has imported it already, e.g. a test);
- task instance: run id ``manual__2026-01-01T00:00:00+00:00``, try number 1, map index -1 (a mapped task's own
  index), no start date; the job name is the package's ``naming.job_name`` of these;
- templates are RENDERED, with the task's Jinja environment and a small fixed context: ``params`` (the task's
  defaults), ``dag``, ``task``, ``ti``/``task_instance``, ``run_id``, ``ds``, ``ts``, ``logical_date``,
  ``dag_run`` (its ``conf`` is empty; a missing key reads as ``"<conf.KEY>"``), ``ti.xcom_pull(...)`` returns
  ``"<xcom TASK_IDS.KEY>"``; an ``XComArg`` argument becomes ``"<xcom TASK_ID.KEY>"`` before rendering;
- a task that names no ``image`` (one for the local backend) is given ``registry.invalid/dump-manifests/
  no-image-given:0`` on the backends that run images, and its files say ``image_defaulted``;
- a Kubernetes connection named by a task is an empty one (its namespace ``default``), given as an environment
  variable of this process for the time of the build;
- generated secret material is masked: an SSH private key becomes ``<generated ssh private key>``, an SSH public
  key's material ``<generated>``; every other value of a Secret (a function's rendered arguments) becomes
  ``<masked: N chars, sha256 PREFIX>``, so that a change still shows;
- paths of this machine are written as ``$ROOT`` (this checkout), ``$PYTHON`` (the interpreter), ``$PREFIX`` (its
  environment) and ``$AIRFLOW_HOME``, so that two checkouts of the same code dump the same files.

Usage::

    python scripts/dump_manifests.py OUT_DIR [DAG_FOLDER_OR_FILE ...]
    python scripts/dump_manifests.py --compare A B        # exit 1 and list the files that differ

``OUT_DIR`` is emptied first. ``OUT_DIR/index.json`` lists every file with its DAG, task, backend and status.
Run it from the checkout's root with ``PYTHONPATH=$PWD`` so that the package of this checkout is the one used.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import filecmp
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DAG_FOLDERS = (ROOT / "example_dags", ROOT / "tests" / "dags")
#: The cluster backends, in the order they are dumped.
BACKENDS = ("kubernetes", "kubeflow", "trainjob", "ray")
RUN_ID = "manual__2026-01-01T00:00:00+00:00"
LOGICAL_DATE = "2026-01-01T00:00:00+00:00"
TRY_NUMBER = 1
#: The backends that run every replica from an image, and the image a task that names none is given there.
IMAGE_BACKENDS = ("kubernetes", "kubeflow", "trainjob")
DEFAULT_IMAGE = "registry.invalid/dump-manifests/no-image-given:0"
INDEX_FILE = "index.json"


# ============================================================================ the package's entry points
# Every call into ``airflow_distributed`` is in this section: a function or class that moves changes one line here.


def _operator_class() -> type:
    from airflow_distributed.operators.training import DistributedTrainingOperator

    return DistributedTrainingOperator


def _decorated_class() -> Any:
    from airflow_distributed.decorators.distributed import DistributedDecoratedOperator

    return DistributedDecoratedOperator


def _spec_error_class() -> Any:
    from airflow_distributed.spec import SpecValidationError

    return SpecValidationError


def _job_name(dag_id: str, task_id: str, run_id: str, map_index: int) -> str:
    from airflow_distributed.naming import job_name

    return job_name(dag_id, task_id, run_id, map_index)


def _with_backend(operator: Any, backend: str) -> Any:
    """A copy of the (rendered) operator that runs on ``backend``, as if it had been given ``backend=``."""
    from airflow_distributed.backends.registry import backend_named

    other = copy.copy(operator)
    other.backend = backend
    other._backend = backend_named(backend)
    other._try_spec = None
    return other


def _decorator_refusal(operator: Any, backend: str) -> None:
    """``@task.distributed`` refuses some backends in its constructor, before the operator's checks: the same
    constructor, given ``backend``, raises the same refusal (nothing else of it is used)."""
    if not isinstance(operator, _decorated_class()):
        return
    spec_error = _spec_error_class()
    try:
        _decorated_class()(task_id=operator.task_id, python_callable=operator.python_callable,
                           op_args=operator.op_args, op_kwargs=operator.op_kwargs, framework=operator.framework,
                           environment=operator.environment, backend=backend)
    except spec_error as error:  # only its refusal of the backend: the rest is the operator's, checked next
        refused = [problem for problem in error.problems if problem[0] == "backend"]
        if refused:
            raise spec_error(refused, source=f"task {operator.task_id}") from None


def _checked(operator: Any) -> tuple[Any, Any, list[str]]:
    """What ``execute`` does before the backend runs: the settings, the spec of the try (checked), the command."""
    settings = operator._settings()
    spec = operator._spec_of_try()
    operator._check_arguments(spec)
    return settings, spec, [str(part) for part in [*settings.command, *(settings.args or [])]]


def _build_kubernetes(operator: Any, context: Any, name: str) -> Any:
    from airflow_distributed.backends.kubernetes_run import KubernetesJobRun

    settings, spec, command = _checked(operator)
    objects = KubernetesJobRun.start(operator._task_calls(), settings, context, spec, name, command).objects
    assert objects is not None
    return objects.as_dicts()


def _build_kubeflow(operator: Any, context: Any, name: str) -> Any:
    from airflow_distributed.backends.kubeflow_run import KubeflowJobRun

    settings, spec, command = _checked(operator)
    return KubeflowJobRun.start(operator._task_calls(), settings, context, spec, name, command).body


def _build_trainjob(operator: Any, context: Any, name: str) -> Any:
    from airflow_distributed.backends.trainjob import MODELS_PACKAGE
    from airflow_distributed.backends.trainjob_run import TrainJobRun

    if importlib.util.find_spec(MODELS_PACKAGE) is None:
        return _Skipped(f"the optional {MODELS_PACKAGE!r} is not installed: no TrainJob can be built")
    settings, spec, command = _checked(operator)
    return TrainJobRun.start(operator._task_calls(), settings, context, spec, name, command).body


def _build_ray(operator: Any, context: Any, name: str) -> Any:
    from airflow_distributed.backends.ray import RayBackend
    from airflow_distributed.hooks.ray import RayJobHook
    from airflow_distributed.manifests.ray import JOB_VARIABLE

    settings, spec, command = _checked(operator)
    with _replaced(RayJobHook, _RecordingRayHook):
        try:
            RayBackend().run(operator._task_calls(), settings, context, spec, name, command)
        except _Submitted as submitted:
            job = submitted.job
        else:
            raise RuntimeError("RayBackend.run returned without submitting a job")
    job["description"] = json.loads(job["runtime_env"]["env_vars"][JOB_VARIABLE])
    return job


BUILDERS: dict[str, Callable[[Any, Any, str], Any]] = {
    "kubernetes": _build_kubernetes, "kubeflow": _build_kubeflow, "trainjob": _build_trainjob, "ray": _build_ray,
}


# ============================================================================ stand-ins and the fixed context


class _Skipped:
    def __init__(self, note: str) -> None:
        self.note = note


class _Submitted(Exception):  # a signal, not an error
    """Raised by the recording Ray hook instead of sending the job: it carries the submission."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__("submitted")
        self.job = job


class _RecordingRayHook:
    """``RayJobHook`` as ``RayBackend.run`` uses it before the submission: no job of that name exists yet."""

    default_conn_name = "ray_default"
    address = "http://ray-head.invalid:8265"

    def __init__(self, ray_conn_id: str = default_conn_name, **_: Any) -> None:
        self.ray_conn_id = ray_conn_id

    def info(self, name: str) -> None:
        return None

    def submit(self, name: str, entrypoint: str, runtime_env: dict[str, Any],
               metadata: Mapping[str, Any] | None = None) -> None:
        raise _Submitted({"ray_conn_id": self.ray_conn_id, "submission_id": name, "entrypoint": entrypoint,
                          "runtime_env": runtime_env, "metadata": dict(metadata or {})})


@contextlib.contextmanager
def _replaced(real: Any, stand_in: Any) -> Iterator[None]:
    """``real`` replaced by ``stand_in`` wherever a module of the package binds it (where it is defined, and every
    module that imported it), put back afterwards; a module imported meanwhile imports the stand-in."""
    bound = [(module, name) for module in list(sys.modules.values())
             if getattr(module, "__name__", "").startswith("airflow_distributed")
             for name, value in list(vars(module).items()) if value is real]
    for module, name in bound:
        setattr(module, name, stand_in)
    try:
        yield
    finally:
        for module, name in bound:
            setattr(module, name, real)


class _Conf(dict):
    """``dag_run.conf`` of the fixed context: empty; a missing key reads as a placeholder naming it."""

    def __missing__(self, key: Any) -> str:
        return f"<conf.{key}>"


class _TaskInstance:
    """The task instance of the fixed context."""

    def __init__(self, dag_id: str, task_id: str, map_index: int) -> None:
        self.dag_id, self.task_id, self.run_id, self.map_index = dag_id, task_id, RUN_ID, map_index
        self.try_number = TRY_NUMBER
        self.start_date = None

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **_: Any) -> str:
        return f"<xcom {task_ids}.{key}>"

    def xcom_push(self, key: str, value: Any) -> None:
        pass


class _DagRun:
    def __init__(self, dag_id: str) -> None:
        self.dag_id, self.run_id, self.run_type = dag_id, RUN_ID, "manual"
        self.conf = _Conf()
        self.logical_date = self.run_after = _logical_date()


def _logical_date() -> Any:
    import pendulum

    return pendulum.parse(LOGICAL_DATE)


def _context(operator: Any, map_index: int) -> dict[str, Any]:
    ti = _TaskInstance(operator.dag_id, operator.task_id, map_index)
    params: dict[str, Any] = {}
    for source in (getattr(operator.dag, "params", None) or {}, operator.params or {}):
        params.update((key, source[key]) for key in source)
    return {
        "dag": operator.dag, "task": operator, "ti": ti, "task_instance": ti, "run_id": RUN_ID,
        "dag_run": _DagRun(operator.dag_id), "params": params, "ds": LOGICAL_DATE[:10],
        "ds_nodash": LOGICAL_DATE[:10].replace("-", ""), "ts": LOGICAL_DATE, "logical_date": _logical_date(),
        "map_index": map_index, "try_number": TRY_NUMBER,
    }


def _without_xcom_args(value: Any) -> Any:
    """``value`` with each ``XComArg`` in it replaced by a placeholder string (nothing resolves them here)."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    if isinstance(value, XComArg):
        operator = getattr(value, "operator", None)
        return f"<xcom {getattr(operator, 'task_id', '?')}.{getattr(value, 'key', '?')}>"
    if isinstance(value, dict):
        return {key: _without_xcom_args(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_xcom_args(item) for item in value)
    return value


def _rendered(operator: Any, context: dict[str, Any]) -> Any:
    for field in operator.template_fields:
        setattr(operator, field, _without_xcom_args(getattr(operator, field)))
    operator.render_template_fields(context)
    return operator


@contextlib.contextmanager
def _kubernetes_connections(operator: Any) -> Iterator[None]:
    """The task's Kubernetes connection as an empty one (namespace ``default``), for the time of a build."""
    conn_id = getattr(operator, "kubernetes_conn_id", None)
    if not conn_id:
        yield
        return
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    before = os.environ.get(variable)
    os.environ[variable] = json.dumps({"conn_type": "kubernetes"})
    try:
        yield
    finally:
        if before is None:
            del os.environ[variable]
        else:
            os.environ[variable] = before


# ============================================================================ tasks of the DAG files


def _training_tasks(dag: Any) -> Iterator[tuple[str, int | None, Any]]:
    """``(task id as dumped, map index, operator not yet rendered)`` of each training task, by task id."""
    operator_class = _operator_class()
    for task_id in sorted(dag.task_dict):
        task = dag.task_dict[task_id]
        if isinstance(task, operator_class):
            yield task_id, -1, task
        elif _is_training_class(getattr(task, "operator_class", None)):
            count = _literal_map_count(task)
            if count is None:
                yield f"{task_id}[*]", None, task
            for map_index in range(count or 0):
                yield f"{task_id}[{map_index}]", map_index, task


def _is_training_class(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, _operator_class())


def _literal_map_count(task: Any) -> int | None:
    """How many task instances a mapped task has when its ``expand`` is literal lists; ``None`` when it depends on
    an upstream task's output (known at run time only)."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    expand_input = task._get_specified_expand_input()
    values = getattr(expand_input, "value", None)
    if not isinstance(values, dict) or not all(isinstance(value, (list, tuple, dict)) for value in values.values()):
        return None
    if any(isinstance(value, XComArg) for value in values.values()):
        return None
    return math.prod(len(value) for value in values.values())


def _unmapped(task: Any, map_index: int, context: dict[str, Any]) -> Any:
    """The operator of one map index of a mapped task, as the task runner unmaps it."""
    if map_index < 0:
        return copy.copy(task)
    kwargs, _ = task._expand_mapped_kwargs(context)
    operator = task.unmap(kwargs)
    context["task"] = operator
    return operator


def load_dags(paths: Sequence[Path]) -> list[tuple[Path, Any]]:
    """``(file, DAG)`` of every DAG of the files (folders: their ``*.py``), by file then DAG id."""
    from airflow.dag_processing.dagbag import DagBag

    files = sorted(file for path in paths for file in (sorted(path.glob("*.py")) if path.is_dir() else [path])
                   if file.name != "__init__.py")
    dags: list[tuple[Path, Any]] = []
    for file in files:
        bag = DagBag(dag_folder=str(file), safe_mode=False)
        if bag.import_errors:
            raise RuntimeError(f"{file}: {bag.import_errors}")
        dags.extend((file, bag.dags[dag_id]) for dag_id in sorted(bag.dags))
    return dags


# ============================================================================ one dump


def dump_one(task: Any, map_index: int | None, backend: str) -> dict[str, Any]:
    """What ``task`` (of ``map_index``) would create on ``backend``: the record of one file."""
    if map_index is None:
        return {"status": "skipped", "note": "mapped over an upstream task's output: expanded at run time only"}
    spec_error = _spec_error_class()
    context = _context(task, map_index)
    try:
        operator = _rendered(_unmapped(task, map_index, context), context)
    except Exception as error:
        return {"status": "error", "stage": "render", "error": _error(error)}
    context["task"] = operator
    name = _job_name(operator.dag_id, operator.task_id, RUN_ID, map_index)
    defaulted: dict[str, Any] = {}
    if backend in IMAGE_BACKENDS and not operator.image:
        operator.image = defaulted["image_defaulted"] = DEFAULT_IMAGE
    try:
        _decorator_refusal(operator, backend)
        with _kubernetes_connections(operator):
            built = BUILDERS[backend](_with_backend(operator, backend), context, name)
    except spec_error as error:
        return {"status": "problems", "job_name": name, **defaulted,
                "problems": [list(problem) for problem in error.problems]}
    except Exception as error:
        return {"status": "error", "stage": "build", "job_name": name, **defaulted, "error": _error(error)}
    if isinstance(built, _Skipped):
        return {"status": "skipped", "job_name": name, **defaulted, "note": built.note}
    return {"status": "objects", "job_name": name, **defaulted, "objects": built}


def _error(error: BaseException) -> dict[str, str]:
    return {"class": type(error).__name__, "message": str(error)}


def dump(out_dir: Path, paths: Sequence[Path] = DAG_FOLDERS) -> list[dict[str, Any]]:
    """Write one file per (DAG, task, backend) and the index under ``out_dir`` (emptied first); returns the index."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    index: list[dict[str, Any]] = []
    for file, dag in load_dags(paths):
        for task_id, map_index, task in _training_tasks(dag):
            for backend in BACKENDS:
                record = dump_one(task, map_index, backend)
                record = {"dag_id": dag.dag_id, "task_id": task_id, "backend": backend, **record}
                relative = f"{dag.dag_id}/{task_id}.{backend}.json"
                target = out_dir / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(canonical(normalised(masked(record))))
                index.append({"dag_id": dag.dag_id, "task_id": task_id, "backend": backend, "file": relative,
                              "dag_file": _shown_path(file), "status": record["status"],
                              "problems": len(record.get("problems", ()))})
    (out_dir / INDEX_FILE).write_text(canonical(normalised(index)))
    return index


def _shown_path(file: Path) -> str:
    try:
        return file.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(file)


# ============================================================================ canonical, masked, normalised


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----\n?", re.S)
_PUBLIC_KEY = re.compile(r"\b(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp\d+) [A-Za-z0-9+/=]{16,}")


def _mask_text(text: str) -> str:
    text = _PRIVATE_KEY.sub("<generated ssh private key>", text)
    return _PUBLIC_KEY.sub(r"\1 <generated>", text)


def masked(value: Any) -> Any:
    """Generated key material masked everywhere; every other value of a Secret masked to its size and digest."""
    if isinstance(value, str):
        return _mask_text(value)
    if isinstance(value, list):
        return [masked(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: masked(item) for key, item in value.items()}
    if out.get("kind") == "Secret":
        for field in ("data", "stringData", "string_data"):
            if isinstance(out.get(field), dict):
                out[field] = {key: _secret_value(item) for key, item in out[field].items()}
    return out


def _secret_value(value: Any) -> Any:
    if not isinstance(value, str) or "<generated" in value:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    return f"<masked: {len(value)} chars, sha256 {digest}>"


def _machine_paths() -> list[tuple[str, str]]:
    """This machine's paths and the names they are written as, longest first."""
    paths = {str(ROOT): "$ROOT", sys.executable: "$PYTHON", sys.prefix: "$PREFIX"}
    home = os.environ.get("AIRFLOW_HOME")
    if home:
        paths[home] = "$AIRFLOW_HOME"
    return sorted(paths.items(), key=lambda item: -len(item[0]))


def normalised(value: Any) -> Any:
    if isinstance(value, str):
        for path, shown in _machine_paths():
            # Whole path names only: the environment /x/.venv is not the start of /x/.venvs/mxnet.
            value = re.sub(re.escape(path) + r"(?![\w.-])", shown.replace("\\", r"\\"), value)
        return value
    if isinstance(value, list):
        return [normalised(item) for item in value]
    if isinstance(value, dict):
        return {normalised(key): normalised(item) for key, item in value.items()}
    return value


# ============================================================================ compare


def compare(a: Path, b: Path) -> list[str]:
    """The files (relative paths) that differ between two dumps, or exist in one only."""
    def files(root: Path) -> set[str]:
        return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}

    in_a, in_b = files(a), files(b)
    differing = [f"only in {a}: {name}" for name in sorted(in_a - in_b)]
    differing += [f"only in {b}: {name}" for name in sorted(in_b - in_a)]
    differing += [f"differs: {name}" for name in sorted(in_a & in_b)
                  if not filecmp.cmp(a / name, b / name, shallow=False)]
    return differing


# ============================================================================ command line


def _airflow_home() -> None:
    """A throw-away ``AIRFLOW_HOME`` for the parse, unless Airflow is imported already (its settings are made)."""
    if "airflow" in sys.modules:
        return
    home = tempfile.mkdtemp(prefix="dump-manifests-airflow-")
    os.environ["AIRFLOW_HOME"] = home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = os.path.join(home, "dags")
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")
    import atexit

    atexit.register(shutil.rmtree, home, True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), type=Path, help="compare two dumps")
    parser.add_argument("out_dir", nargs="?", type=Path, help="where to write the dump (emptied first)")
    parser.add_argument("paths", nargs="*", type=Path, help="DAG folders or files (default: %(default)s)",
                        default=list(DAG_FOLDERS))
    args = parser.parse_args(argv)
    if args.compare:
        differing = compare(*args.compare)
        for line in differing:
            print(line)
        print(f"{len(differing)} file(s) differ" if differing else "identical")
        return 1 if differing else 0
    if args.out_dir is None:
        parser.error("give OUT_DIR, or --compare A B")
    _airflow_home()
    index = dump(args.out_dir, args.paths)
    statuses: dict[str, int] = {}
    for row in index:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    tasks = len({(row["dag_id"], row["task_id"]) for row in index})
    print(f"{len(index)} files ({tasks} tasks x {len(BACKENDS)} backends) in {args.out_dir}: "
          + ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
          + f"; {sum(row['problems'] for row in index)} problems recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
