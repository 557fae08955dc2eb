"""``@task.distributed``: a Python function run on every replica of a distributed training job.

.. code-block:: python

    from airflow.sdk import task

    @task.distributed(framework="pytorch", environment={"pytorch": {"n_workers": 2}})
    def train(steps: int) -> dict:
        import torch.distributed as dist
        dist.init_process_group("gloo")   # MASTER_ADDR, RANK, WORLD_SIZE... come from the job
        ...
        return {"loss": loss}            # the master's value is the task's return_value

The function's source becomes a script in the job's files directory (a ConfigMap on Kubernetes), which every replica
runs with the image's Python (the provider's package must be installed there for the result to be recorded); its
(JSON-safe, possibly templated or XCom) arguments, which may be rendered secrets, go apart into a file readable by the
job's user only (a Secret on Kubernetes), removed when the job ends. It takes the operator's arguments, except
``command`` and ``args``.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory
from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS

from airflow_distributed.manifests.function_script import (
    ARGUMENTS_FILE,
    FUNCTION_FILE,
    function_arguments,
    function_script,
    shipping_problems,
)
from airflow_distributed.operators.training import DistributedTrainingOperator
from airflow_distributed.plan import ReplicaProgram
from airflow_distributed.spec.errors import SpecValidationError

#: What runs the function: in a pod, the image's Python 3 by the name Debian-based images have (no ``python``
#: there), as the job's own steps call it (``JobManifestOptions.image_python``); on the local backend, a name the
#: job's interpreter replaces.
FUNCTION_PYTHON = "python3"

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.plan import Layout


class DistributedDecoratedOperator(DecoratedOperator, DistributedTrainingOperator):
    """The operator behind ``@task.distributed``; ``python_callable`` runs on every replica.

    :param python_callable: the function; it must import what it uses in its own body (checked when the DAG is
        parsed) and take everything else as arguments.
    :param op_args: positional arguments of the function: JSON-safe values, templates or XComArgs. (templated)
    :param op_kwargs: keyword arguments of the function, likewise. (templated)
    """

    custom_operator_name = "@task.distributed"
    template_fields: Sequence[str] = (
        "op_args", "op_kwargs",
        *(name for name in DistributedTrainingOperator.template_fields if name not in ("command", "args")),
    )
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def __init__(self, *, python_callable: Callable[..., Any], **kwargs: Any) -> None:
        for argument in ("command", "args"):
            if argument in kwargs:
                raise TypeError(f"@task.distributed takes no {argument!r}: the decorated function is what every "
                                "replica runs; pass its inputs as the function's arguments")
        problems = [("python_callable", f"{python_callable.__name__} cannot run in the replicas: {problem}")
                    for problem in shipping_problems(python_callable, frozenset(KNOWN_CONTEXT_KEYS))]
        if kwargs.get("backend") in ("kubeflow", "trainjob"):
            problems.append(("backend", f"{kwargs['backend']!r} cannot ship a function: a Kubeflow job or TrainJob "
                             "has no files directory; use backend='kubernetes' or 'local'"))
        if kwargs.get("backend") == "ray":
            problems.append(("backend", "'ray' cannot ship a function: its arguments would travel in the Ray job's "
                             "description, which the cluster's dashboard shows; use backend='kubernetes' or 'local'"))
        if problems:
            raise SpecValidationError(problems, source=f"task {kwargs.get('task_id')}")
        # ``command`` is set per job by ``_replica_program``; ``python3`` stands in for the interpreter until then.
        super().__init__(python_callable=python_callable, command=[FUNCTION_PYTHON], **kwargs)

    def _replica_program(self, command: list[str], layout: Layout) -> ReplicaProgram:
        # The arguments may be rendered secrets: a secret file (a Secret on Kubernetes), apart from the source.
        arguments = function_arguments(list(self.op_args), self.op_kwargs)
        script = function_script(self.get_python_source(), self.python_callable.__name__)
        return ReplicaProgram(
            [FUNCTION_PYTHON, posixpath.join(layout.files_dir, FUNCTION_FILE),
             posixpath.join(layout.secret_files_dir or layout.files_dir, ARGUMENTS_FILE)],
            files={FUNCTION_FILE: script}, secret_files={ARGUMENTS_FILE: arguments})

    def execute(self, context: Context) -> Any:
        return _return_value(context, super().execute(context))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        return _return_value(context, super().execute_complete(context, event))


def _return_value(context: Context, result: Any) -> Any:
    """The master's return value out of the job result (``None`` when the function returned nothing).

    The task's own XComs are the function's; the job's ``metrics``, ``model_path`` and ``job_name`` are pushed
    beside them, as the operator's are.
    """
    if not isinstance(result, dict):
        return result
    for key in ("metrics", "model_path", "job_name"):
        if key in result:
            context["ti"].xcom_push(key=key, value=result[key])
    return result.get("return_value")


def distributed_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """``@task.distributed(framework=..., environment=..., backend=..., ...)``: run the function on every replica.

    :param python_callable: the function (given when used as ``@task.distributed`` without arguments).
    :param multiple_outputs: push each key of the master's returned dict as an XCom of its own.
    :param kwargs: the arguments of :class:`~airflow_distributed.operators.DistributedTrainingOperator`, except
        ``command`` and ``args``.
    """
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=DistributedDecoratedOperator,
        **kwargs,
    )
