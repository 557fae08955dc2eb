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
from airflow_distributed.spec.kubernetes_rules import env_name_problems

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_distributed.hooks.local import LocalJob

Backend = Literal["local", "kubernetes", "kubeflow", "trainjob"]
BACKENDS = ("local", "kubernetes", "kubeflow", "trainjob")


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
    ``{"job_name", "framework", "backend", "state", "metrics", "model_path", "replicas"}``. Each key is also an
    XCom of its own (``multiple_outputs``), so ``train.output["model_path"]`` is ``None`` and
    ``train.output["metrics"]`` is ``{}`` when the master reported none, never an ``XComNotFound``.

    :param framework: ``tensorflow``, ``mxnet``, ``pytorch``, ``horovod``, ``jax``, ``xgboost`` or ``paddle``. May
        be omitted when ``environment`` has exactly one framework section or is a polyaxonfile with a
        ``framework``. (templated: no)
    :param environment: the Polyaxon ``environment`` section: a dict, YAML text, a path to a YAML/JSON file or a whole
        polyaxonfile. ``None`` runs the master alone. ``pytorch.elastic`` (``min_workers``, ``max_workers``,
        ``max_restarts``, ``rdzv_timeout``) runs the replicas under torch's elastic agent and restarts lost ones
        (local and kubernetes backends; see ``docs/frameworks.md``). (templated)
    :param command: the command every replica runs, as an argv list (no shell). A leading ``python`` means the
        interpreter given by ``python`` on the local backend. (templated)
    :param args: extra arguments appended to ``command``. (templated)
    :param image: the container image (Kubernetes backend; ignored by the local backend). (templated)
    :param env: variables for every replica, below each replica's ``env_vars`` and the contract's variables.
        (templated)
    :param model_dir: where replicas save the model (``AIRFLOW_DISTRIBUTED_MODEL_DIR``). Local default:
        ``$AIRFLOW_HOME/distributed/models/<dag_id>/<job_name>``. (templated)
    :param checkpoint_dir: where replicas save checkpoints (``AIRFLOW_DISTRIBUTED_CHECKPOINT_DIR``), the same for
        every try of a task instance so that a retry resumes from the failed try's last checkpoint
        (``tracking.save_checkpoint``/``latest_checkpoint``). Local default:
        ``$AIRFLOW_HOME/distributed/checkpoints/<dag_id>/<job_name>``; Kubernetes default:
        ``<model_dir>/checkpoints/<job_name>`` when ``model_dir`` is a path (it outlives the pods only on a
        ``model_volume`` claim), else ``<model_dir>/checkpoints/<job_name>`` as a URL for the framework. (templated)
    :param keep_checkpoints: keep the checkpoints after the job succeeds; by default the local backend removes the
        checkpoint files of a succeeded job (a failed job always keeps them, for the retry).
    :param model_asset: a URI template of the trained model as an Airflow Asset, e.g.
        ``"s3://models/{dag_id}/{task_id}"``: a successful job emits an event on it whose ``extra`` holds
        ``model_path``, ``metrics`` and ``job_name``, so a DAG scheduled on it (deploy) can read them. A template
        naming the run (``{job_name}``, ``{run_id}``, ``{map_index}``) makes a new asset per run, added through an
        ``AssetAlias`` named ``airflow-distributed.<dag_id>.<task_id>.model``. Any ``Asset`` the task has among its
        ``outlets`` gets the same ``extra``.
    :param backend: ``local`` (subprocesses on the worker, no cluster), ``kubernetes``, ``kubeflow`` (one
        TFJob/PyTorchJob/MXJob/MPIJob for a cluster that runs the Kubeflow Training Operator) or ``trainjob`` (one
        Kubeflow Trainer v2 ``TrainJob`` referencing a training runtime; PyTorch, JAX, XGBoost, Horovod; needs the
        ``trainjob`` extra).
    :param runtime: ``backend="trainjob"``: the training runtime the TrainJob references; default the framework's
        (``torch-distributed`` for PyTorch, ``jax-distributed`` for JAX, ``xgboost-distributed`` for
        XGBoost; required for Horovod: the cluster's MPI runtime). (templated)
    :param runtime_kind: ``backend="trainjob"``: ``ClusterTrainingRuntime`` (default) or ``TrainingRuntime`` (a
        runtime in the job's namespace).
    :param wait_for_completion: wait for the job to finish (the local backend always waits).
    :param startup_timeout: seconds a replica may stay pending before the job fails (Kubernetes).
    :param image_pull_grace: seconds a replica's image pull may keep failing (``ErrImagePull``,
        ``ImagePullBackOff``) before the job fails, for registries that flap; a pull that succeeds within it does
        not fail the job. Default 0: the first failed pull fails the job, naming the replica, the image and the
        kubelet's message (Kubernetes backend). An image name that cannot be parsed fails at once whatever this is.
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
        "image", "command", "args", "env", "environment", "model_dir", "checkpoint_dir", "python", "namespace",
        "runtime",
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
        checkpoint_dir: str | None = None,
        keep_checkpoints: bool = False,
        model_asset: str | None = None,
        backend: Backend = "local",
        wait_for_completion: bool = True,
        startup_timeout: float = 600.0,
        image_pull_grace: float = 0.0,
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
        runtime: str | None = None,
        runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = "ClusterTrainingRuntime",
        **kwargs: Any,
    ) -> None:
        # The return value's keys are XComs of their own (see outputs.py); a missing one resolves to None.
        kwargs.setdefault("multiple_outputs", True)
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
        self.checkpoint_dir = checkpoint_dir
        self.keep_checkpoints = keep_checkpoints
        self.backend = backend
        self.wait_for_completion = wait_for_completion
        self.startup_timeout = startup_timeout
        self.image_pull_grace = image_pull_grace
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
        self.runtime = runtime
        self.runtime_kind = runtime_kind
        self._local_job: LocalJob | None = None
        self.model_asset = model_asset
        self._job_result: dict[str, Any] | None = None
        self._check_arguments()
        if model_asset is not None:
            self.outlets = [*self.outlets, self._model_outlet()]
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
        if isinstance(self.env, Mapping) and not _has_template(list(self.env)):
            problems.extend(env_name_problems(self.env, "env"))
        grace = self.image_pull_grace
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < float("inf"):
            problems.append(("image_pull_grace", f"{grace!r} is not allowed: seconds, a number >= 0 (0: fail at the "
                             "first failed pull)"))
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
        if self.backend == "trainjob":
            from airflow_distributed.operators.trainjob_backend import check_trainjob_arguments

            problems.extend(check_trainjob_arguments(self))
        elif self._n_proc_per_node() not in (None, 1):
            problems.append(("environment.pytorch.n_proc_per_node", "is read by backend='trainjob' only (the "
                             "TrainJob's numProcPerNode); the other backends run one process per replica"))
        if self.model_asset is not None:
            from airflow_distributed.assets import template_problems

            problems.extend(("model_asset", problem) for problem in template_problems(self.model_asset))
        if problems:
            raise SpecValidationError(problems, source=f"task {self.task_id}")

    def _n_proc_per_node(self) -> Any:
        if isinstance(self.environment, Mapping) and isinstance(self.environment.get("pytorch"), Mapping):
            return self.environment["pytorch"].get("n_proc_per_node")
        return None

    # ----------------------------------------------------------------- run
    def execute(self, context: Context) -> dict[str, Any]:
        spec = load_spec(self.framework, self.environment)
        ti = context["ti"]
        from airflow_distributed.naming import job_name

        name = job_name(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))
        command = [str(part) for part in [*self.command, *(self.args or [])]]
        if self.backend == "kubernetes":
            from airflow_distributed.operators.kubernetes_backend import run_kubernetes

            return self._succeeded(context, run_kubernetes(self, context, spec, name, command))
        if self.backend == "kubeflow":
            from airflow_distributed.operators.kubeflow_backend import run_kubeflow

            return self._succeeded(context, run_kubeflow(self, context, spec, name, command))
        if self.backend == "trainjob":
            from airflow_distributed.operators.trainjob_backend import run_trainjob

            return self._succeeded(context, run_trainjob(self, context, spec, name, command))
        return self._succeeded(context, self._run_local(spec, name, command, context))

    def _local_dirs(self, name: str) -> tuple[str, str, str]:
        home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser("~/airflow")
        work_dir = os.path.join(home, "distributed", "jobs", self.dag_id, name)
        model_dir = self.model_dir or os.path.join(home, "distributed", "models", self.dag_id, name)
        checkpoint_dir = self.checkpoint_dir or os.path.join(home, "distributed", "checkpoints", self.dag_id, name)
        return work_dir, model_dir, checkpoint_dir

    def _run_local(self, spec: TrainingSpec, name: str, command: list[str], context: Context) -> dict[str, Any]:
        from airflow_distributed.hooks.local import LocalProcessHook
        from airflow_distributed.manifests.local import process_specs, resolve_python
        from airflow_distributed.operators.local_live import LIVE_XCOM_KEY, LiveJobReport
        from airflow_distributed.outputs import job_record, job_result, parse_output_document
        from airflow_distributed.plan import Layout, LocalAddressing, build_plan, replica_count
        from airflow_distributed.status import render_table

        hook = LocalProcessHook(logger=self.log)
        work_dir, model_dir, checkpoint_dir = self._local_dirs(name)
        output_path = os.path.join(work_dir, "output.json")
        os.makedirs(model_dir, exist_ok=True)
        os.makedirs(work_dir, exist_ok=True)
        if os.path.exists(output_path):
            os.remove(output_path)  # a retry must not report the previous try's metrics
        layout = Layout(model_dir=model_dir, output_path=output_path, files_dir=os.path.join(work_dir, "files"),
                        checkpoint_dir=checkpoint_dir)
        interpreter = self.python or sys.executable
        addressing = LocalAddressing(ports=hook.free_ports(replica_count(spec)))
        command, files = self._replica_program(command, layout.files_dir)
        plan = build_plan(spec, name, addressing, layout, resolve_python(command, interpreter), backend="local",
                          env=self.env, try_number=context["ti"].try_number, files=files)
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
        job = self._local_job = hook.start(specs, cwd=work_dir, elastic=plan.elastic)
        live = LiveJobReport(
            job_name=name, framework=spec.framework, read_document=lambda: _read_text(output_path),
            publish=lambda record: context["ti"].xcom_push(key=LIVE_XCOM_KEY, value=record),
            logs=lambda: {replica.spec.name: list(replica.tail) for replica in job.replicas}, log=self.log,
        )
        try:
            outcome = job.wait(
                poll_interval=self.poll_interval,
                settle=self.settle_period,
                on_change=lambda rows: self.log.info("replicas of %s:\n%s", name, render_table(rows)),
                on_poll=live,
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
        if not self.keep_checkpoints:
            removed = hook.remove_checkpoints(checkpoint_dir)
            if removed:
                self.log.info("job %s succeeded: removed its %d checkpoint files (keep_checkpoints=False)",
                              name, removed)
        if document["metrics"] == {} and document["model_path"] is None:
            self.log.warning("the master wrote no output document at %s: no metrics or model path", output_path)
        self.log.info(
            "job %s succeeded in %.1fs; metrics: %s; model path: %s",
            name, elapsed, json.dumps(result["metrics"]), result["model_path"],
        )
        return result

    def _replica_program(self, command: list[str], files_dir: str) -> tuple[list[str], dict[str, str]]:
        """What every replica runs and the files it needs besides the framework's, given the job's files
        directory; a subclass that ships code (``@task.distributed``) changes both."""
        return command, {}

    @staticmethod
    def _failure_message(name: str, outcome: Any, elapsed: float) -> str:
        if outcome.stopped:
            return f"job {name} was stopped after {elapsed:.1f}s (task killed); no replica is left running"
        if outcome.timed_out:
            return f"job {name} timed out after {elapsed:.1f}s; every replica was stopped"
        tail = "\n".join(f"    {line}" for line in outcome.tail[-15:]) or "    (no output)"
        if outcome.reason:
            return (f"job {name} failed after {elapsed:.1f}s: {outcome.reason}; every other replica was stopped. "
                    f"Its last lines:\n{tail}")
        return (
            f"job {name} failed: replica {outcome.failed_replica} exited with code {outcome.exit_code} "
            f"after {elapsed:.1f}s; every other replica was stopped. Its last lines:\n{tail}"
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resumes a deferred Kubernetes job with the trigger's event: output, logs, clean-up, XCom."""
        if self.backend == "kubeflow":
            from airflow_distributed.operators.kubeflow_backend import resume_kubeflow

            return self._succeeded(context, resume_kubeflow(self, context, event))
        if self.backend == "trainjob":
            from airflow_distributed.operators.trainjob_backend import resume_trainjob

            return self._succeeded(context, resume_trainjob(self, context, event))
        from airflow_distributed.operators.kubernetes_backend import resume_kubernetes

        return self._succeeded(context, resume_kubernetes(self, context, event))

    # ----------------------------------------------------------------- the model as an asset, lineage
    def _model_outlet(self) -> Any:
        from airflow.sdk import Asset, AssetAlias

        from airflow_distributed.assets import alias_name, model_uri, names_the_run

        assert self.model_asset is not None
        if names_the_run(self.model_asset):
            return AssetAlias(alias_name(self.dag_id, self.task_id))
        return Asset(model_uri(self.model_asset, dag_id=self.dag_id, task_id=self.task_id))

    def _succeeded(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """After a job that succeeded: its model's asset events carry the model path and metrics."""
        if result.get("state") != "succeeded":
            return result  # started without waiting (wait_for_completion=False): nothing is known yet
        from airflow.sdk import Asset, AssetAlias

        from airflow_distributed.assets import alias_name, event_extra, model_uri

        self._job_result = result
        extra = event_extra(result)
        events = context["outlet_events"]
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                events[outlet].extra.update(extra)
            elif isinstance(outlet, AssetAlias) and outlet.name == alias_name(self.dag_id, self.task_id):
                ti = context["ti"]
                uri = model_uri(str(self.model_asset), dag_id=self.dag_id, task_id=self.task_id,
                                job_name=result.get("job_name"), run_id=ti.run_id, map_index=ti.map_index)
                events[outlet].add(Asset(uri), extra=extra)
        return result

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (when its provider is installed): the job's shape as a run facet, the model as output."""
        from airflow_distributed.lineage import job_lineage

        return job_lineage(load_spec(self.framework, self.environment), self.backend, self._job_result, "succeeded")

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """OpenLineage for a failed try: the job's shape, no output."""
        from airflow_distributed.lineage import job_lineage

        return job_lineage(load_spec(self.framework, self.environment), self.backend, None, "failed")

    def on_kill(self) -> None:
        if self.backend == "kubeflow":
            from airflow_distributed.operators.kubeflow_backend import kill_kubeflow

            kill_kubeflow(self)
            return
        if self.backend == "trainjob":
            from airflow_distributed.operators.trainjob_backend import kill_trainjob

            kill_trainjob(self)
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
