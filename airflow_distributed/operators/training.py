"""``DistributedTrainingOperator``: one Airflow task that runs a whole distributed training job."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from airflow.providers.common.compat.sdk import TaskDeferred, conf
from airflow.sdk import Asset, AssetAlias, BaseOperator

from airflow_distributed.airflow_features.assets import (
    alias_name,
    event_extra,
    model_uri,
    names_the_run,
    template_problems,
)
from airflow_distributed.airflow_features.links import JobLinks, operator_links
from airflow_distributed.backends.base import Backend as JobBackend
from airflow_distributed.backends.base import (
    BackendSettings,
    DistributedJobError,
    TaskCalls,
    has_template,
)
from airflow_distributed.backends.registry import REGISTRY, backend_named
from airflow_distributed.jobstate.watch_timings import WatchTimings
from airflow_distributed.mlflow_run import RunKey, first_try_since_clear, job_params, try_tags
from airflow_distributed.naming import job_name
from airflow_distributed.plan import Layout, ReplicaProgram, asked_processes, role_summary
from airflow_distributed.spec import SpecValidationError, TrainingSpec, load_spec
from airflow_distributed.spec.kubernetes_rules import env_name_problems
from airflow_distributed.spec.limits import name_shown, shape_problems, shown, type_shown
from airflow_distributed.status import ReplicaState

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The ``backend=`` names, for type checkers; a test holds it equal to ``BACKENDS``.
Backend = Literal["local", "kubernetes", "kubeflow", "trainjob", "ray"]
#: The ``backend=`` names: the registry's (``backends.registry``), the only list of them.
BACKENDS = tuple(REGISTRY)
#: ``logging_interval``'s default: seconds between two relays of the master's new lines into a deferred task's log.
DEFAULT_LOGGING_INTERVAL = 15.0
#: The XCom of the registered model's version (``register_model``), also a key of the model's asset event ``extra``.
MODEL_VERSION_XCOM = "mlflow_model_version"
#: Arguments kept in the serialized DAG besides the template fields: where the job runs, for the job view.
SERIALIZED_JOB_FIELDS = frozenset({"backend", "kubernetes_conn_id", "framework"})


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
    :param image: the container image (Kubernetes backend; ignored by the local backend, which says so once in the
        task log). (templated)
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
        checkpoint files a succeeded job saved (``tracking.save_checkpoint``) and the folders it created, nothing
        else of the directory (a failed job always keeps them, for the retry).
    :param model_asset: a URI template of the trained model as an Airflow Asset, e.g.
        ``"s3://models/{dag_id}/{task_id}"``: a successful job emits an event on it whose ``extra`` holds
        ``model_path``, ``metrics`` and ``job_name``, so a DAG scheduled on it (deploy) can read them. A template
        naming the run (``{job_name}``, ``{run_id}``, ``{map_index}``) makes a new asset per run, added through an
        ``AssetAlias`` named ``airflow-distributed.<dag_id>.<task_id>.model``. Any ``Asset`` the task has among its
        ``outlets`` gets the same ``extra``.
    :param backend: ``local`` (subprocesses on the worker, no cluster), ``kubernetes``, ``kubeflow`` (one
        TFJob/PyTorchJob/MXJob/MPIJob for a cluster that runs the Kubeflow Training Operator) or ``trainjob`` (one
        Kubeflow Trainer v2 ``TrainJob`` referencing a training runtime; PyTorch, JAX, XGBoost, Horovod; needs the
        ``trainjob`` extra) or ``ray`` (one Ray Job on an existing Ray cluster; needs the ``ray`` extra; see
        ``docs/ray.md``).
    :param runtime: ``backend="trainjob"`` only (refused by the other backends): the training runtime the TrainJob
        references; default the framework's
        (``torch-distributed`` for PyTorch, ``jax-distributed`` for JAX, ``xgboost-distributed`` for
        XGBoost; required for Horovod: the cluster's MPI runtime). (templated)
    :param runtime_kind: ``backend="trainjob"``: ``ClusterTrainingRuntime`` (default) or ``TrainingRuntime`` (a
        runtime in the job's namespace).
    :param wait_for_completion: wait for the job to finish (the local backend always waits).
    :param startup_timeout: seconds a replica may stay pending before the job fails (Kubernetes); with
        ``queue_timeout``, counted from when the last replica was scheduled.
    :param queue_timeout: the cluster backends: how long the replicas may wait to be scheduled (no capacity or
        quota: unschedulable, held or suspended by Kueue), a ``timedelta`` or seconds, from the start of the wait;
        past it the task fails with ``ReplicaNotScheduledError`` naming the scheduler's (or Kueue's) reason. Default:
        none, and on ``backend="kubernetes"`` ``startup_timeout`` covers the wait for scheduling too. The local
        backend ignores it; ``ray`` refuses it.
    :param image_pull_grace: seconds a replica's image pull may keep failing (``ErrImagePull``,
        ``ImagePullBackOff``) before the job fails, for registries that flap; a pull that succeeds within it does
        not fail the job. Default 0: the first failed pull fails the job, naming the replica, the image and the
        kubelet's message (Kubernetes backend). An image name that cannot be parsed fails at once whatever this is.
    :param poll_interval: seconds between status checks of the local backend.
    :param python: interpreter of the local replicas (e.g. a framework's own virtualenv); default: Airflow's. The
        Kubernetes-side backends ignore it (and say so once in the task log): a pod runs the image's.
    :param stop_grace_period: seconds a replica gets after SIGTERM before SIGKILL.
    :param settle_period: seconds the other replicas get to finish on their own after the master succeeds.
    :param kubernetes_conn_id: the cncf provider's Kubernetes connection (Kubernetes backend).
    :param ray_conn_id: the Ray cluster's connection (its dashboard, where the Jobs API is), ``backend="ray"``.
    :param ray_options: ``backend="ray"`` only (refused by the others), a dict of ``manifests.ray.RayOptions``
        fields: ``placement_strategy`` (``PACK`` by default, ``SPREAD``, ``STRICT_PACK``, ``STRICT_SPREAD``),
        ``resources`` (Ray custom resources every replica's bundle reserves, name to amount), ``accelerator_type``
        (e.g. ``A100``) and ``liveness_grace`` (seconds a job goes on after its task is lost, SIGKILLed, before its
        driver stops it; default 300). See ``docs/ray.md``.
    :param namespace: namespace of the job's objects, a DNS-1123 label (checked when the DAG is parsed, and once
        rendered before anything is created); default: the connection's ``namespace`` extra, else ``default``.
        (templated)
    :param deferrable: wait in the triggerer instead of a worker slot (Kubernetes-side backends; the local backend
        always waits in the task, and says so once in the task log); default: ``[operators] default_deferrable``.
    :param logging_interval: in deferrable mode, seconds between two reads of the master's new lines by the
        trigger, which shows them in the task log with the master's progress (``kubernetes``, ``kubeflow``,
        ``trainjob``); each read is bounded and each line shown once. Default 15; ``None`` shows the master's last
        lines once, when the job ends.
    :param clean_pod_policy: what is deleted when the job ends: ``all`` (the job's Service and, by cascade, every
        object of it), ``running`` (pods still pending or running; finished ones are kept for their logs until the
        next try) or ``none``. Default: ``all`` after success, ``running`` after failure. A killed task deletes its
        job whatever the policy.
    :param gpu_resource_key: the Kubernetes resource name of the spec's ``gpu`` (``kubernetes``, ``kubeflow``:
        every pod template; ``trainjob``: ``resourcesPerNode``), e.g. ``amd.com/gpu``.
    :param shm_size: the memory-backed ``/dev/shm`` of every training pod (``kubernetes``, ``kubeflow``,
        ``trainjob``): ``"auto"`` (default) sizes it to half the replica's memory limit (its pages count against
        that limit; no limit: no size), a Kubernetes quantity such as ``"8Gi"`` (at most a replica's memory limit),
        or ``None`` for the container runtime's own 64 MiB. ``model_dir`` and ``checkpoint_dir`` may not be under
        ``/dev/shm`` while it is mounted. See ``docs/kubernetes.md``, "GPU training".
    :param scheduler_name: the pods' scheduler (with ``gang_scheduling="volcano"``: ``volcano`` by default).
    :param gang_scheduling: ``volcano`` or ``scheduler-plugins``: a PodGroup makes the replicas start together.
    :param queue_name: a Kueue LocalQueue; Kueue then admits the job's pods as one workload.
    :param model_volume: what is mounted at ``model_dir`` in every pod: a PersistentVolumeClaim name or a volume
        dict; default an emptyDir (lost with the pod: use a claim or a URL ``model_dir`` to keep the model). Refused
        by the local backend, whose replicas save the model in ``model_dir`` on the worker.
    :param log_replicas: replicas whose logs are followed into the task log besides the master's: ``"all"``, or
        role names (``"worker"``), ``"<role>-<index>"`` or pod names (``kubernetes`` backend, synchronous mode; at
        most 32). The local backend logs every replica anyway; ``kubeflow`` and ``trainjob`` ignore it, saying so
        once in the task log.
    :param job_links: extra link buttons as (name, URL template) pairs, e.g.
        ``("TensorBoard", "https://tb.example.com/#scalars&regexInput={job_name}")``; placeholders ``{job_name}``,
        ``{dag_id}``, ``{run_id}``, ``{task_id}``, ``{map_index}``, ``{try_number}``.
    :param retry_policy: Airflow's (>= 3.3) retry policy of the task. Default, when ``retries`` > 0: the provider's
        ``retry_policy.DistributedRetryPolicy``, which retries a job the cluster interrupted (a replica evicted,
        preempted or lost with its node) at once, fails at once one whose image cannot be pulled, that the cluster
        refused or whose arguments are invalid, and leaves a script's error to ``retries``; see
        ``docs/failures.md``. Give another policy to replace it (``ExceptionRetryPolicy(rules=[])``: plain
        ``retries`` for every failure). On Airflow < 3.3 there is none, and the errors' classes are still raised.
    :param progress_timeout: the hang watchdog (every backend, in the task or the triggerer; on ``"ray"`` the
        job's driver keeps the clock), a ``timedelta`` or seconds: when the
        master has reported no progress or metric (``tracking.log_progress``/``log_metrics``) and printed no line for
        that long while every replica runs, the job is hung: each replica prints its Python stacks (where its script
        imports ``airflow_distributed.tracking``; on Kubernetes asked over pods/exec), every replica is stopped (the
        Kubernetes job, or the Kubeflow job or TrainJob, deleted; the Ray job ended), and the task fails with
        ``JobHungError``, naming
        the last step reported and quoting each replica's last lines. A job that is slow but reports is never
        stopped by it. Default: none.
    :param watch_timings: how the wait watches the job (Kubernetes and Kubeflow backends, synchronous and
        deferred), a dict of ``jobstate.watch_timings.WatchTimings`` fields: ``server_timeout`` (``timeoutSeconds`` of
        each watch request, default 300), ``read_timeout_margin`` (client read timeout above it, 30),
        ``connect_timeout`` (10), ``reconnect_budget`` (how long the API server may stay unreachable, 300),
        ``reconnect_delay`` / ``max_reconnect_delay`` / ``jitter`` (spreading of reconnects). See
        ``docs/kubernetes.md``, "Timing".
    :param mlflow_conn_id: an Airflow connection of an MLflow tracking server (its URL and credentials; see
        ``docs/mlflow.md``): the task logs one MLflow run per task instance, continued by every retry and ended as
        the task ends (a cleared task starts a new one), with the job's shape as params, the master's metric history
        at its steps, usage, tags and the model. A tracking server that is down, slow or refuses the credentials is
        a warning in the task log, never a failure. Default: none, nothing is sent; a
        template that renders empty (``"{{ params.mlflow_conn_id }}"``) sends nothing either. (templated)
    :param mlflow_experiment: the MLflow experiment of the runs, created when missing; default the DAG's id.
        (templated)
    :param mlflow_params: names of the DAG's params to log as MLflow params ``param.<name>``.
    :param register_model: with ``mlflow_conn_id``, a registered model's name: after success the model becomes a
        new version of it, whose number is the XCom ``mlflow_model_version`` and is in the model asset's event
        ``extra``. (templated)
    :param tensorboard_url: a link to TensorBoard, a URL template with the placeholders of ``job_links`` (e.g.
        ``"https://tb.example.com/#scalars&regexInput={job_name}"``); the replicas write their events under
        ``AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR`` either way.
    """

    template_fields: Sequence[str] = (
        "image", "command", "args", "env", "environment", "model_dir", "checkpoint_dir", "python", "namespace",
        "runtime", "mlflow_conn_id", "mlflow_experiment", "register_model",
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
        ray_conn_id: str | None = "ray_default",
        ray_options: Mapping[str, Any] | None = None,
        namespace: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        logging_interval: float | None = DEFAULT_LOGGING_INTERVAL,
        clean_pod_policy: Literal["all", "running", "none"] | None = None,
        gpu_resource_key: str = "nvidia.com/gpu",
        shm_size: str | None = "auto",
        scheduler_name: str | None = None,
        gang_scheduling: Literal["volcano", "scheduler-plugins"] | None = None,
        queue_name: str | None = None,
        model_volume: str | Mapping[str, Any] | None = None,
        log_replicas: str | Sequence[str] | None = None,
        job_links: JobLinks | None = None,
        watch_timings: Mapping[str, Any] | None = None,
        runtime: str | None = None,
        runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = "ClusterTrainingRuntime",
        progress_timeout: timedelta | float | None = None,
        queue_timeout: timedelta | float | None = None,
        mlflow_conn_id: str | None = None,
        mlflow_experiment: str | None = None,
        mlflow_params: Sequence[str] | None = None,
        register_model: str | None = None,
        tensorboard_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        # The return value's keys are XComs of their own (see outputs.py); a missing one resolves to None.
        kwargs.setdefault("multiple_outputs", True)
        super().__init__(**kwargs)
        if getattr(self, "retry_policy", None) is None and self.retries:
            policy = default_retry_policy()
            if policy is not None:
                self.retry_policy = policy
        if job_links or mlflow_conn_id or tensorboard_url is not None:
            self.operator_extra_links = operator_links(job_links, mlflow=bool(mlflow_conn_id),
                                                       tensorboard_url=tensorboard_url)
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
        self.ray_conn_id = ray_conn_id
        self.ray_options = dict(ray_options) if isinstance(ray_options, Mapping) else ray_options
        self.namespace = namespace
        self.deferrable = deferrable
        self.logging_interval = logging_interval
        self.clean_pod_policy = clean_pod_policy
        self.gpu_resource_key = gpu_resource_key
        self.shm_size = shm_size
        self.scheduler_name = scheduler_name
        self.gang_scheduling = gang_scheduling
        self.queue_name = queue_name
        self.model_volume = model_volume
        self.log_replicas = log_replicas
        self.watch_timings = dict(watch_timings) if isinstance(watch_timings, Mapping) else watch_timings
        self.runtime = runtime
        self.runtime_kind = runtime_kind
        self.progress_timeout = _seconds(progress_timeout)
        self.queue_timeout = _seconds(queue_timeout)
        self.mlflow_conn_id = mlflow_conn_id
        self.mlflow_experiment = mlflow_experiment
        self.mlflow_params = mlflow_params
        self.register_model = register_model
        self.tensorboard_url = tensorboard_url
        #: the MLflow run this try logs to, for its extra link (``links.MlflowRunLink``)
        self.mlflow_run_url: str | None = None
        #: this try's ``hooks.mlflow.MlflowJobRun``, which ``on_kill`` ends ``KILLED``
        self._mlflow_run: Any = None
        # Picked once: the backend object keeps the state of the job it runs (for on_kill).
        self._backend: JobBackend | None = backend_named(backend)
        self.model_asset = model_asset
        self._job_result: dict[str, Any] | None = None
        #: what this try's job cost and how it started (the ``usage`` and ``startup`` of its ``job`` record), for the
        #: lineage facet
        self._job_sections: dict[str, dict[str, Any]] = {}
        #: the spec validated when the DAG was parsed, and what it was parsed from; ``None`` while it is a template
        #: (then it is validated once rendered, before anything starts)
        self.spec: TrainingSpec | None = None
        self._spec_source = (framework, environment)
        #: the spec of the running try (``_spec_of_try``)
        self._try_spec: TrainingSpec | None = None
        spec_error = None
        # Measured first: has_template walks the environment recursively.
        too_big = shape_problems(environment, "environment")
        if too_big:
            spec_error = SpecValidationError(too_big)
        elif not has_template(environment) and not (isinstance(framework, str) and has_template(framework)):
            try:
                self.spec = load_spec(framework, environment)
            except SpecValidationError as error:
                spec_error = error  # reported after the arguments' problems, as the spec's own
        self._check_arguments(self.spec)
        if spec_error is not None:
            raise spec_error
        if model_asset is not None:
            self.outlets = [*self.outlets, self._model_outlet()]

    @classmethod
    def get_serialized_fields(cls) -> frozenset[str]:
        # The job view reads where a job runs from the serialized DAG (plugins/job_state.py), never from an XCom.
        return frozenset(super().get_serialized_fields() | SERIALIZED_JOB_FIELDS)

    def _check_arguments(self, spec: TrainingSpec | None) -> None:
        """Refuse the arguments, naming each problem: when the DAG is parsed (templates are left for later), and
        in ``execute`` once rendered, before anything starts."""
        problems = []
        if self._backend is None:
            problems.append(("backend", f"{name_shown(self.backend)} is not supported; allowed: {', '.join(BACKENDS)}"))
        if isinstance(self.command, str) or not self.command:
            problems.append(("command", "must be a non-empty list of arguments, e.g. ['python', 'train.py']"))
        problems.extend(_env_problems(self.env))
        grace = self.image_pull_grace
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < float("inf"):
            problems.append(("image_pull_grace", f"{shown(grace)} is not allowed: seconds, a number >= 0 (0: fail at "
                             "the first failed pull)"))
        interval = self.logging_interval
        if interval is not None and (isinstance(interval, bool) or not isinstance(interval, (int, float))
                                     or not 0 < interval < float("inf")):
            problems.append(("logging_interval", f"{shown(interval)} is not allowed: seconds, a number > 0, or None "
                             "(the master's last lines once, at the end)"))
        for limit in ("progress_timeout", "queue_timeout"):
            wait = getattr(self, limit)
            if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float))
                                     or not 0 < wait < float("inf")):
                problems.append((limit, "is not allowed: a timedelta or seconds, a number > 0"))
        problems.extend(_watch_timings_problems(self.watch_timings))
        if self.ray_options is not None and self.backend != "ray":
            problems.append(("ray_options", f"is read by backend='ray' only; backend={self.backend!r} places no Ray "
                             "placement group: remove it, or use backend='ray'"))
        problems.extend(self._mlflow_problems())
        if self._backend is not None:
            problems.extend(self._backend.check(self._settings(), spec))
        if self.model_asset is not None:
            asset_problems = template_problems(self.model_asset)
            problems.extend(("model_asset", problem) for problem in asset_problems)
            if not asset_problems:
                try:
                    self._model_outlet()
                except ValueError as error:  # Airflow's own rules of an Asset URI (length, reserved schemes)
                    problems.append(("model_asset", f"is not a valid Asset URI once formatted: {error}"))
        if problems:
            raise SpecValidationError(problems, source=f"task {self.task_id}")

    # ----------------------------------------------------------------- run
    def _task_calls(self) -> TaskCalls:
        return TaskCalls(log=self.log, defer=self.defer, replica_program=self._replica_program,
                         spec=self._spec_of_try)

    def _spec_of_try(self) -> TrainingSpec:
        """The spec of this try, from the rendered arguments, parsed at most once: the one parsed with the DAG when
        rendering left the arguments as they were (no template), else the rendered values parsed now."""
        if self._try_spec is None:
            if self.spec is not None and (self.framework, self.environment) == self._spec_source:
                self._try_spec = self.spec
            else:
                self._try_spec = load_spec(self.framework, self.environment)
        return self._try_spec

    def _settings(self) -> BackendSettings[Any]:
        """The arguments as they are now (rendered in ``execute``), split for the chosen backend: its own options
        typed, the other backends' as given (``BackendSettings``)."""
        return BackendSettings.of(self, self._chosen_backend().options_class)

    def _chosen_backend(self) -> JobBackend:
        if self._backend is None:  # refused when the DAG was parsed; kept for a type checker
            raise SpecValidationError([("backend", f"{self.backend!r} is not supported")],
                                      source=f"task {self.task_id}")
        return self._backend

    def execute(self, context: Context) -> dict[str, Any]:
        settings = self._settings()  # rendered by now
        self._try_spec = None  # a new try (one operator object may run several under dag.test())
        spec = self._spec_of_try()
        self._check_arguments(spec)  # the rendered values, before anything starts
        ti = context["ti"]
        name = job_name(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))
        command = [str(part) for part in [*settings.command, *(settings.args or [])]]
        return self._tracked(context, name, lambda: self._chosen_backend().run(
            self._task_calls(), settings, context, spec, name, command))

    def _replica_program(self, command: list[str], layout: Layout) -> ReplicaProgram:
        """What every replica runs and the files it needs besides the framework's, given where the job's files
        go; a subclass that ships code (``@task.distributed``) changes both."""
        return ReplicaProgram(command)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resumes a deferred job with the trigger's event: output, logs, clean-up, XCom."""
        self._try_spec = None
        ti = context["ti"]
        name = job_name(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))
        return self._tracked(context, name, lambda: self._chosen_backend().resume(
            self._task_calls(), self._settings(), context, event))

    def _tracked(self, context: Context, name: str, run_job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``run_job()`` (the backend's run or resume), its MLflow run opened before and closed after it, from the
        ``job`` record the backend pushed; then the model's asset events."""
        ti = context["ti"]
        mlflow_run = self._mlflow_run = self._open_mlflow_run(context, name)
        try:
            result = run_job()
        except TaskDeferred:
            raise  # the job goes on in the triggerer; execute_complete closes the run
        except BaseException:
            record = _recorded_job(ti)
            self._job_sections = _sections_of(record)
            if mlflow_run is not None:
                mlflow_run.close(record, succeeded=False, try_number=ti.try_number)
            raise
        record = _recorded_job(ti)
        self._job_sections = _sections_of(record)
        model_version = None
        if mlflow_run is not None and result.get("state") == ReplicaState.SUCCEEDED:
            mlflow_run.close(record, succeeded=True, try_number=ti.try_number,
                             register_model=self.register_model or None)
            model_version = mlflow_run.model_version
            if model_version is not None:
                ti.xcom_push(key=MODEL_VERSION_XCOM, value=model_version)
        return self._succeeded(context, result, model_version)

    def _open_mlflow_run(self, context: Context, name: str) -> Any:
        """The try's ``hooks.mlflow.MlflowJobRun``, its run found or created; ``None`` without ``mlflow_conn_id``."""
        if not self.mlflow_conn_id:
            return None
        # The hook and requests load only for a task that logs to MLflow, never when a DAG is parsed.
        from airflow_distributed.hooks.mlflow import MlflowHook, MlflowJobRun

        ti = context["ti"]
        try:
            hook = MlflowHook(self.mlflow_conn_id)
        except Exception as error:  # no such connection, no host: the job runs without MLflow
            self.log.warning("MLflow: connection %s cannot be used (%s); the job goes on without MLflow",
                             self.mlflow_conn_id, type(error).__name__)
            return None
        spec = self._spec_of_try()
        key = RunKey(ti.dag_id, ti.task_id, ti.run_id, _map_index(ti),
                     first_try_since_clear(ti.try_number, getattr(ti, "max_tries", 0) or 0, self.retries or 0))
        params = job_params(framework=spec.framework, backend=self.backend, roles=role_summary(spec),
                            processes_per_replica=asked_processes(spec),
                            dag_params=dict(context.get("params") or {}), chosen=list(self.mlflow_params or []))
        mlflow_run = MlflowJobRun(hook, self.log)
        mlflow_run.open(key, experiment=self.mlflow_experiment or ti.dag_id, params=params,
                        tags=try_tags(try_number=ti.try_number, job_name=name, framework=spec.framework,
                                      backend=self.backend))
        self.mlflow_run_url = mlflow_run.run.url if mlflow_run.run is not None else None
        return mlflow_run

    def _mlflow_problems(self) -> list[tuple[str, str]]:
        problems = []
        if self.mlflow_conn_id and not self.wait_for_completion:
            problems.append(("mlflow_conn_id", "needs wait_for_completion=True: the run is logged from what the "
                             "task sees of the job's end"))
        # Given with no connection at all; one that renders empty turns tracking off for the run, registry included.
        if self.register_model and self.mlflow_conn_id is None:
            problems.append(("register_model", "needs mlflow_conn_id: the registry is the tracking server's"))
        chosen = self.mlflow_params
        if chosen is not None and (isinstance(chosen, str) or not isinstance(chosen, Sequence)
                                   or not all(isinstance(name, str) for name in chosen)):
            problems.append(("mlflow_params", "must be a list of the DAG's param names, e.g. ['steps']"))
        return problems

    # ----------------------------------------------------------------- the model as an asset, lineage
    def _model_outlet(self) -> Any:
        assert self.model_asset is not None
        if names_the_run(self.model_asset):
            return AssetAlias(alias_name(self.dag_id, self.task_id))
        return Asset(model_uri(self.model_asset, dag_id=self.dag_id, task_id=self.task_id))

    def _succeeded(self, context: Context, result: dict[str, Any], model_version: int | None = None) -> dict[str, Any]:
        """After a job that succeeded: its model's asset events carry the model path and metrics (and the model's
        registered version, when ``register_model`` registered one)."""
        if result.get("state") != ReplicaState.SUCCEEDED:
            return result  # started without waiting (wait_for_completion=False): nothing is known yet
        self._job_result = result
        extra = event_extra(result)
        if model_version is not None:
            extra[MODEL_VERSION_XCOM] = model_version
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
        return self._lineage(self._job_result, ReplicaState.SUCCEEDED.value)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """OpenLineage for a failed try: the job's shape, no output."""
        return self._lineage(None, ReplicaState.FAILED.value)

    def _lineage(self, result: dict[str, Any] | None, state: str) -> Any:
        # The OpenLineage provider's modules are optional and heavy: loaded when the provider asks for facets, never
        # when a DAG is parsed.
        from airflow_distributed.airflow_features.lineage import job_lineage

        return job_lineage(self._spec_of_try(), self.backend, result, state, self._job_sections.get("usage"),
                           self._job_sections.get("startup"))

    def on_kill(self) -> None:
        # The MLflow run is ended KILLED beside the replicas' stop, not after it: the stop may outlast the
        # supervisor's grace before SIGKILL, and the request never holds the stop up.
        mlflow_run = getattr(self, "_mlflow_run", None)
        ending = mlflow_run.end_killed() if mlflow_run is not None else None
        if self._backend is not None:
            self._backend.kill()
        if ending is not None:
            from airflow_distributed.hooks.mlflow import KILL_TIMEOUT

            ending.join(KILL_TIMEOUT)


def _env_problems(env: Any) -> list[tuple[str, str]]:
    """``env`` is a mapping of variable names to strings; names are shown, values (maybe secrets) never."""
    if env is None or (isinstance(env, str) and has_template(env)):
        return []
    if isinstance(env, (str, bytes, int, float, list, tuple, set)):
        return [("env", f"expected a mapping of variable names to strings, got {type_shown(env)}")]
    if not isinstance(env, Mapping):
        return []  # an XComArg and the like, resolved at run time
    problems = env_name_problems([name for name in env if not has_template(name)], "env")
    for name, value in env.items():
        if isinstance(name, str) and (value is None or isinstance(value, (bytes, int, float, list, tuple, dict, set))):
            problems.append((f"env.{name}", f"expected a string, got {type_shown(value)}"))
    return problems


def _watch_timings_problems(timings: Any) -> list[tuple[str, str]]:
    if timings is None:
        return []
    if not isinstance(timings, Mapping):
        return [("watch_timings", "expected a mapping of WatchTimings field names to numbers, e.g. "
                 f"{{'server_timeout': 60}}, got {type_shown(timings)}")]
    if not all(isinstance(key, str) for key in timings):
        return [("watch_timings", "keys must be WatchTimings field names (strings)")]
    not_numbers = [(f"watch_timings.{key}", f"expected a number of seconds, got {type_shown(value)}")
                   for key, value in timings.items() if isinstance(value, bool) or not isinstance(value, (int, float))]
    not_numbers += [(f"watch_timings.{key}", "is out of range: at most 2^64 seconds")
                    for key, value in timings.items() if isinstance(value, int) and value.bit_length() > 64]
    if not_numbers:
        return not_numbers
    try:
        WatchTimings.of(timings)
    except (ValueError, TypeError) as error:
        return [("watch_timings", str(error))]
    return []



def _seconds(value: Any) -> Any:
    """A ``timedelta`` in seconds; anything else as it is (checked by ``_check_arguments``)."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def default_retry_policy() -> Any:
    """The provider's retry policy, or ``None`` on an Airflow without retry policies (< 3.3)."""
    try:  # imported here: the module cannot be imported on an Airflow without retry policies
        from airflow_distributed.airflow_features.retry_policy import DistributedRetryPolicy
    except ImportError:  # no airflow.sdk.RetryPolicy: the errors' classes are raised all the same
        return None
    return DistributedRetryPolicy()


def _recorded_job(task_instance: Any) -> dict[str, Any] | None:
    """The ``job`` record this try pushed (``outputs.job_record``), for the lineage facet and MLflow; None when there
    is none (the job never ran, or did not wait) or it cannot be read: neither ever fails the task."""
    try:
        record = task_instance.xcom_pull(task_ids=task_instance.task_id, key="job",
                                         map_indexes=getattr(task_instance, "map_index", -1))
    except Exception:
        return None
    return record if isinstance(record, dict) else None


def _sections_of(record: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The ``usage`` and ``startup`` of a ``job`` record, for the lineage facet."""
    found = record or {}
    return {key: found[key] for key in ("usage", "startup") if isinstance(found.get(key), dict)}


def _map_index(task_instance: Any) -> int:
    value = getattr(task_instance, "map_index", -1)
    return -1 if value is None else int(value)


__all__ = ["BACKENDS", "Backend", "DistributedJobError", "DistributedTrainingOperator", "default_retry_policy"]
