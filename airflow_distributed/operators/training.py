"""``DistributedTrainingOperator``: one Airflow task that runs a whole distributed training job."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_distributed.links import JobLinks, operator_links
from airflow_distributed.spec import SpecValidationError, TrainingSpec, load_spec

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.local import LocalJob

Backend = Literal["local", "kubernetes", "kubeflow"]
BACKENDS = ("local", "kubernetes", "kubeflow")


class DistributedJobError(AirflowException):
    """The job ran and failed: a replica exited non-zero, or it timed out."""


def _has_template(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(_has_template(k) or _has_template(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_template(v) for v in value)
    return False


class DistributedTrainingOperator(BaseOperator):
    """Run a distributed training job (TensorFlow, MXNet, PyTorch or Horovod) from a Polyaxon-style spec.

    The spec is validated when the DAG is parsed. At run time every replica of the plan is started with the
    variables its framework expects; the task waits for the master, stops every other replica, and returns
    ``{"job_name", "framework", "backend", "state", "metrics", "model_path", "replicas"}``; ``metrics`` and
    ``model_path`` are also pushed under their own XCom keys (``train.output["metrics"]``).

    :param framework: ``tensorflow``, ``mxnet``, ``pytorch`` or ``horovod``. May be omitted when ``environment``
        has exactly one framework section or is a polyaxonfile with a ``framework``. (templated: no)
    :param environment: the Polyaxon ``environment`` section: a dict, YAML text, a path to a YAML/JSON file or a whole
        polyaxonfile. ``None`` runs the master alone. (templated)
    :param command: the command every replica runs, as an argv list (no shell). A leading ``python`` means the
        interpreter given by ``python`` on the local backend. (templated)
    :param args: extra arguments appended to ``command``. (templated)
    :param image: the container image (Kubernetes backend; ignored by the local backend). (templated)
    :param env: variables for every replica, below each replica's ``env_vars`` and the contract's variables.
        (templated)
    :param model_dir: where replicas save the model (``AIRFLOW_DISTRIBUTED_MODEL_DIR``). Local default:
        ``$AIRFLOW_HOME/distributed/models/<dag_id>/<job_name>``. (templated)
    :param backend: ``local`` (subprocesses on the worker, no cluster), ``kubernetes`` or ``kubeflow`` (one
        TFJob/PyTorchJob/MXJob/MPIJob for a cluster that runs the Kubeflow Training Operator).
    :param wait_for_completion: wait for the job to finish (the local backend always waits).
    :param startup_timeout: seconds a replica may stay pending before the job fails (Kubernetes).
    :param poll_interval: seconds between status checks of the local backend.
    :param python: interpreter of the local replicas (e.g. a framework's own virtualenv); default: Airflow's.
    :param stop_grace_period: seconds a replica gets after SIGTERM before SIGKILL.
    :param settle_period: seconds the other replicas get to finish on their own after the master succeeds.
    :param kubernetes_conn_id: the cncf provider's Kubernetes connection (Kubernetes backend).
    :param namespace: namespace of the job's objects; default: the connection's ``namespace`` extra, else
        ``default``. (templated)
    :param deferrable: wait in the triggerer instead of a worker slot (Kubernetes backend); default:
        ``[operators] default_deferrable``.
    :param clean_pod_policy: what is deleted when the job ends: ``all`` (the job's Service and, by cascade, every
        object of it), ``running`` (pods still pending or running; finished ones are kept for their logs until the
        next try) or ``none``. Default: ``all`` after success, ``running`` after failure. A killed task deletes its
        job whatever the policy.
    :param gpu_resource_key: the Kubernetes resource name of the spec's ``gpu``.
    :param scheduler_name: the pods' scheduler (with ``gang_scheduling="volcano"``: ``volcano`` by default).
    :param gang_scheduling: ``volcano`` or ``scheduler-plugins``: a PodGroup makes the replicas start together.
    :param queue_name: a Kueue LocalQueue; Kueue then admits the job's pods as one workload.
    :param model_volume: what is mounted at ``model_dir`` in every pod: a PersistentVolumeClaim name or a volume
        dict; default an emptyDir (lost with the pod: use a claim or a URL ``model_dir`` to keep the model).
    :param log_replicas: replicas whose logs are followed into the task log besides the master's: ``"all"``, or
        role names (``"worker"``), ``"<role>-<index>"`` or pod names (synchronous mode; at most 32).
    :param job_links: extra link buttons as (name, URL template) pairs, e.g.
        ``("TensorBoard", "https://tb.example.com/#scalars&regexInput={job_name}")``; placeholders ``{job_name}``,
        ``{dag_id}``, ``{run_id}``, ``{task_id}``, ``{map_index}``, ``{try_number}``.
    :param watch_timings: how the wait watches the job (Kubernetes and Kubeflow backends, synchronous and
        deferred), a dict of ``hooks.watch_loop.WatchTimings`` fields: ``server_timeout`` (``timeoutSeconds`` of
        each watch request, default 300), ``read_timeout_margin`` (client read timeout above it, 30),
        ``connect_timeout`` (10), ``reconnect_budget`` (how long the API server may stay unreachable, 300),
        ``reconnect_delay`` / ``max_reconnect_delay`` / ``jitter`` (spreading of reconnects). See
        ``docs/kubernetes.md``, "Timing".
    """

    template_fields: Sequence[str] = (
        "image", "command", "args", "env", "environment", "model_dir", "python", "namespace",
    )
    template_fields_renderers = {"environment": "json", "env": "json", "command": "py"}
    ui_color = "#d4e6f9"
    operator_extra_links = operator_links()

    def __init__(
        self,
        *,
        command: Sequence[str],
        framework: str | None = None,
        environment: Mapping[str, Any] | str | None = None,
        args: Sequence[str] | None = None,
        image: str | None = None,
        env: Mapping[str, str] | None = None,
        model_dir: str | None = None,
        backend: Backend = "local",
        wait_for_completion: bool = True,
        startup_timeout: float = 600.0,
        poll_interval: float = 0.2,
        python: str | None = None,
        stop_grace_period: float = 5.0,
        settle_period: float = 5.0,
        kubernetes_conn_id: str | None = "kubernetes_default",
        namespace: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        clean_pod_policy: Literal["all", "running", "none"] | None = None,
        gpu_resource_key: str = "nvidia.com/gpu",
        scheduler_name: str | None = None,
        gang_scheduling: Literal["volcano", "scheduler-plugins"] | None = None,
        queue_name: str | None = None,
        model_volume: str | Mapping[str, Any] | None = None,
        log_replicas: str | Sequence[str] | None = None,
        job_links: JobLinks | None = None,
        watch_timings: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if job_links:
            self.operator_extra_links = operator_links(job_links)
        self.framework = framework
        self.environment = environment
        self.command = command
        self.args = args
        self.image = image
        self.env = env
        self.model_dir = model_dir
        self.backend = backend
        self.wait_for_completion = wait_for_completion
        self.startup_timeout = startup_timeout
        self.poll_interval = poll_interval
        self.python = python
        self.stop_grace_period = stop_grace_period
        self.settle_period = settle_period
        self.kubernetes_conn_id = kubernetes_conn_id
        self.namespace = namespace
        self.deferrable = deferrable
        self.clean_pod_policy = clean_pod_policy
        self.gpu_resource_key = gpu_resource_key
        self.scheduler_name = scheduler_name
        self.gang_scheduling = gang_scheduling
        self.queue_name = queue_name
        self.model_volume = model_volume
        self.log_replicas = log_replicas
        self.watch_timings = dict(watch_timings) if watch_timings is not None else None
        self._local_job: LocalJob | None = None
        self._check_arguments()
        # Validate at parse time unless the spec is still a template (then: after rendering, before anything starts).
        if not _has_template(environment) and not _has_template(framework):
            self.spec: TrainingSpec | None = load_spec(framework, environment)
        else:
            self.spec = None

    def _check_arguments(self) -> None:
        problems = []
        if self.backend not in BACKENDS:
            problems.append(("backend", f"{self.backend!r} is not supported; allowed: {', '.join(BACKENDS)}"))
        if isinstance(self.command, str) or not self.command:
            problems.append(("command", "must be a non-empty list of arguments, e.g. ['python', 'train.py']"))
        if self.backend == "local" and not self.wait_for_completion:
            problems.append(("wait_for_completion", "the local backend's replicas are children of the task, "
                             "so it always waits; use backend='kubernetes' to start a job and return"))
        if self.watch_timings is not None:
            from airflow_distributed.hooks.watch_loop import WatchTimings

            try:
                WatchTimings.of(self.watch_timings)
            except ValueError as error:
                problems.append(("watch_timings", str(error)))
        if self.backend == "kubernetes":
            from airflow_distributed.operators.kubernetes_backend import check_kubernetes_arguments

            problems.extend(check_kubernetes_arguments(self))
        if self.backend == "kubeflow":
            from airflow_distributed.operators.kubeflow_backend import check_kubeflow_arguments

            problems.extend(check_kubeflow_arguments(self))
        if problems:
            raise SpecValidationError(problems, source=f"task {self.task_id}")

    # ----------------------------------------------------------------- run
    def execute(self, context: Context) -> dict[str, Any]:
        spec = load_spec(self.framework, self.environment)
        ti = context["ti"]
        from airflow_distributed.naming import job_name

        name = job_name(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))
        command = [str(part) for part in [*self.command, *(self.args or [])]]
        if self.backend == "kubernetes":
            from airflow_distributed.operators.kubernetes_backend import run_kubernetes

            # Pushes metrics, model_path, job_name and job itself (also when resumed after a deferral).
            return run_kubernetes(self, context, spec, name, command)
        if self.backend == "kubeflow":
            from airflow_distributed.operators.kubeflow_backend import run_kubeflow

            return run_kubeflow(self, context, spec, name, command)
        result = self._run_local(spec, name, command, context)
        ti.xcom_push(key="metrics", value=result["metrics"])
        ti.xcom_push(key="model_path", value=result["model_path"])
        ti.xcom_push(key="job_name", value=result["job_name"])
        return result

    def _local_dirs(self, name: str) -> tuple[str, str]:
        home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
        work_dir = os.path.join(home, "distributed", "jobs", self.dag_id, name)
        model_dir = self.model_dir or os.path.join(home, "distributed", "models", self.dag_id, name)
        return work_dir, model_dir

    def _run_local(self, spec: TrainingSpec, name: str, command: list[str], context: Context) -> dict[str, Any]:
        from airflow_distributed.hooks.local import LocalProcessHook
        from airflow_distributed.manifests.local import process_specs, resolve_python
        from airflow_distributed.outputs import job_record, job_result, parse_output_document
        from airflow_distributed.plan import Layout, LocalAddressing, build_plan, replica_count
        from airflow_distributed.status import render_table

        hook = LocalProcessHook(logger=self.log)
        work_dir, model_dir = self._local_dirs(name)
        output_path = os.path.join(work_dir, "output.json")
        os.makedirs(model_dir, exist_ok=True)
        os.makedirs(work_dir, exist_ok=True)
        if os.path.exists(output_path):
            os.remove(output_path)  # a retry must not report the previous try's metrics
        layout = Layout(model_dir=model_dir, output_path=output_path, files_dir=os.path.join(work_dir, "files"))
        interpreter = self.python or sys.executable
        addressing = LocalAddressing(ports=hook.free_ports(replica_count(spec)))
        plan = build_plan(spec, name, addressing, layout, resolve_python(command, interpreter), backend="local",
                          env=self.env)
        specs = process_specs(
            plan,
            interpreter=interpreter,
            gpus=hook.visible_gpus(),
            cpu_count=os.cpu_count() or 1,
            base_env=os.environ,
        )
        hook.write_files(layout.files_dir, plan.files)
        self.log.info("job %s: %s with %d replicas on the local backend", name, spec.framework, len(specs))
        started = time.monotonic()
        job = self._local_job = hook.start(specs, cwd=work_dir)
        try:
            outcome = job.wait(
                poll_interval=self.poll_interval,
                settle=self.settle_period,
                on_change=lambda rows: self.log.info("replicas of %s:\n%s", name, render_table(rows)),
            )
        finally:
            job.stop(self.stop_grace_period)
            self._local_job = None
        elapsed = time.monotonic() - started
        self.log.info("replicas of %s (final):\n%s", name, render_table(outcome.replicas))
        # Read on failure too: metrics logged before a crash help whoever looks at the failed run.
        document = parse_output_document(_read_text(output_path))
        result = job_result(
            job_name=name, framework=spec.framework, backend="local",
            state="succeeded" if outcome.succeeded else "failed", document=document, replicas=outcome.replicas,
        )
        logs = {replica.spec.name: list(replica.tail) for replica in job.replicas}
        context["ti"].xcom_push(key="job", value=job_record(result, document, logs, elapsed))
        if not outcome.succeeded:
            raise DistributedJobError(self._failure_message(name, outcome, elapsed))
        if document["metrics"] == {} and document["model_path"] is None:
            self.log.warning("the master wrote no output document at %s: no metrics or model path", output_path)
        self.log.info(
            "job %s succeeded in %.1fs; metrics: %s; model path: %s",
            name, elapsed, json.dumps(result["metrics"]), result["model_path"],
        )
        return result

    @staticmethod
    def _failure_message(name: str, outcome: Any, elapsed: float) -> str:
        if outcome.stopped:
            return f"job {name} was stopped after {elapsed:.1f}s (task killed); no replica is left running"
        if outcome.timed_out:
            return f"job {name} timed out after {elapsed:.1f}s; every replica was stopped"
        tail = "\n".join(f"    {line}" for line in outcome.tail[-15:]) or "    (no output)"
        return (
            f"job {name} failed: replica {outcome.failed_replica} exited with code {outcome.exit_code} "
            f"after {elapsed:.1f}s; every other replica was stopped. Its last lines:\n{tail}"
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resumes a deferred Kubernetes job with the trigger's event: output, logs, clean-up, XCom."""
        if self.backend == "kubeflow":
            from airflow_distributed.operators.kubeflow_backend import resume_kubeflow

            return resume_kubeflow(self, context, event)
        from airflow_distributed.operators.kubernetes_backend import resume_kubernetes

        return resume_kubernetes(self, context, event)

    def on_kill(self) -> None:
        if self.backend == "kubeflow":
            from airflow_distributed.operators.kubeflow_backend import kill_kubeflow

            kill_kubeflow(self)
            return
        if self.backend == "kubernetes":
            from airflow_distributed.operators.kubernetes_backend import kill_kubernetes

            kill_kubernetes(self)
            return
        job = self._local_job
        if job is not None:
            self.log.info("task killed: stopping every replica")
            job.stop(self.stop_grace_period)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
