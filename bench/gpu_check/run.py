"""The GPU check: real Airflow DAG runs (``airflow dags test``, SQLite) of the local backend on this machine's GPUs.

Checks (``--checks``, default all):
  a  a PyTorch job asking for one GPU, NCCL: its replica reports its device and process group backend
  b  one replica with every visible GPU and ``n_proc_per_node="auto"``: a process per GPU, an NCCL all-reduce
     across them, each process's RANK/LOCAL_RANK/LOCAL_WORLD_SIZE/NODE_RANK and device
  c  a job asking for one GPU more than visible: refused before any replica starts, naming both numbers
  d  DeepSpeed on the GPUs: check b's replica started by DeepSpeed's launcher (``launcher="deepspeed"``), a tiny
     model under ZeRO stage 2; skipped, saying why, where the replicas' interpreter cannot import deepspeed

Without a GPU (``nvidia-smi`` not on PATH, or torch sees no CUDA device) it says so, writes every check as skipped
and exits 0. ``--device cpu`` is the dry run of the same DAGs anywhere: gloo instead of NCCL, and two GPUs faked
with ``CUDA_VISIBLE_DEVICES=0,1`` (the local backend counts those; the replicas run on the CPU); its check d runs
``.venvs/launchers`` of the checkout (``scripts/framework-venv.sh launchers``) when it exists. ``GPU_CHECK_PYTHON``
names check d's interpreter outright; else it is the one running this script.

Prints a table and writes ``results.json`` and each check's Airflow log (``logs/``) to ``--out``. Exits 1 when a
check failed, else 0. Usage (from the checkout, or wherever ``bench/gpu_check`` was copied)::

    python bench/gpu_check/run.py [--device cuda|cpu] [--checks a,b,c,d] [--out DIR] [--timeout S] [--budget S]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The checkout's DeepSpeed/Accelerate environment: check d's replicas run it in the dry run when it is there.
LAUNCHERS_PYTHON = HERE.parents[1] / ".venvs" / "launchers" / "bin" / "python"
DAGS = HERE / "dags"
# The least time a DAG run is given under --budget: Airflow's start alone takes about 10 s on a busy machine.
MIN_CHECK_SECONDS = 30
# The dry run's fake GPUs: enough for check b to run two processes and for check c to ask one more.
CPU_FAKE_GPUS = "0,1"


@dataclass(frozen=True)
class Check:
    key: str
    title: str
    dag_id: str

    @property
    def dag_file(self) -> Path:
        return DAGS / f"{self.dag_id}.py"


CHECKS = (
    Check("a", "one GPU, one process", "gpu_check_a_one_gpu"),
    Check("b", 'every GPU, n_proc_per_node="auto"', "gpu_check_b_all_gpus"),
    Check("c", "more GPUs than visible: refused", "gpu_check_c_short"),
    Check("d", "DeepSpeed ZeRO-2, every GPU", "gpu_check_d_deepspeed"),
)


def no_gpu_reason() -> str | None:
    """Why this machine cannot run the GPU checks, or ``None`` when it can."""
    if shutil.which("nvidia-smi") is None:
        return "no GPU: nvidia-smi is not on PATH"
    try:
        import torch
    except ImportError as err:
        return f"torch cannot be imported ({err})"
    if not torch.cuda.is_available():
        return f"no GPU: torch {torch.__version__} sees no CUDA device"
    return None


def gpu_names() -> list[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in out.splitlines() if line.startswith("GPU ")]


def deepspeed_python(device: str) -> str:
    """The interpreter check d's replicas run: ``GPU_CHECK_PYTHON``, else the dry run's ``.venvs/launchers`` when
    it exists, else this one (Airflow's, whose replicas' default it is)."""
    if os.environ.get("GPU_CHECK_PYTHON"):
        return os.environ["GPU_CHECK_PYTHON"]
    if device == "cpu" and LAUNCHERS_PYTHON.exists():
        return str(LAUNCHERS_PYTHON)
    return sys.executable


def no_deepspeed_reason(python: str, env: dict[str, str]) -> str | None:
    """Why ``python`` cannot run check d (it cannot import deepspeed), or ``None`` when it can."""
    try:
        probe = subprocess.run([python, "-c", "import deepspeed"], env=env, capture_output=True, text=True,
                               timeout=180)
    except (OSError, subprocess.SubprocessError) as err:
        return f"{python} cannot be run to import deepspeed ({err})"
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    raised = [line.strip() for line in lines if re.match(r"[\w.]+(Error|Exception): ", line.strip())]
    said = (raised or lines or [f"exit {probe.returncode}"])[-1][:200]
    return (f"deepspeed cannot be imported by the replicas' interpreter {python} ({said}); docs/gpu.md says how to "
            "carry it")


def parse_errors(files: list[Path]) -> dict[str, str]:
    """Each DAG file's import error (the product's parse-time refusals among them), by file name."""
    sys.path.insert(0, str(DAGS))  # the DAGs import gpu_check_kit, as Airflow's DAG folder on sys.path allows
    from airflow.dag_processing.dagbag import DagBag

    errors = {}
    for path in files:
        bag = DagBag(dag_folder=str(path))
        for error in bag.import_errors.values():
            errors[path.name] = str(error)
    return errors


def run_dag(check: Check, env: dict[str, str], log: Path, timeout: float) -> tuple[int, float]:
    """``airflow dags test`` of the check's DAG, its output to ``log``; the whole process group is killed past
    ``timeout`` so that no replica outlives the check."""
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen([sys.executable, "-m", "airflow", "dags", "test", check.dag_id, "-f",
                                 str(check.dag_file)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = -signal.SIGKILL
            out.write(f"\nrun.py: killed after {timeout:.0f} s\n")
    return rc, round(time.monotonic() - started, 1)


def log_tail(log: Path, lines: int = 3) -> list[str]:
    """The exceptions the DAG run's tasks failed with (else its last lines), for a check that failed without a
    verdict. Lines before the run's first task are left out: ``dags test`` parses the whole DAG folder first, check
    b's refusal included."""
    text = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.exists() else []
    first = next((i for i, line in enumerate(text) if "[DAG TEST] starting" in line), 0)
    text = [line.strip() for line in text[first:]]
    raised = [line for line in text if re.match(r"[\w.]+(Error|Exception|Exit): ", line)]
    return [line[:240] for line in (raised or text)[-lines:]]


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def judge_training(check: Check, verdict: dict[str, Any] | None, log: Path) -> tuple[str, str, dict[str, Any]]:
    if verdict is None:
        return "FAIL", "the job gave no verdict; it failed with: " + " | ".join(log_tail(log)), {}
    facts = verdict.get("facts", {})
    if not verdict.get("ok"):
        return "FAIL", "; ".join(verdict.get("problems", [])), facts
    if check.key == "a":
        detail = (f"{facts.get('backend')} on {facts.get('device')} ({facts.get('device_name')}), "
                  f"CUDA_VISIBLE_DEVICES={facts.get('cuda_visible_devices')}")
    elif check.key == "d":
        processes = facts.get("processes", [])
        detail = (f"world size {facts.get('world_size')}, {facts.get('backend')}, ZeRO {facts.get('zero_stage')}, "
                  f"RANK {sorted(p.get('RANK') for p in processes)} on {[p.get('device') for p in processes]}, loss "
                  f"{facts.get('initial_loss', 0):.4f} -> {facts.get('final_loss', 0):.4f}, deepspeed "
                  f"{facts.get('deepspeed_version')}")
    else:
        processes = facts.get("processes", [])
        detail = (f"{len(processes)} processes, {facts.get('backend')}, LOCAL_RANK "
                  f"{sorted(p.get('LOCAL_RANK') for p in processes)} on {[p.get('device') for p in processes]}")
    return "PASS", detail, facts


def judge_refusal(results: Path, log: Path) -> tuple[str, str, dict[str, Any]]:
    verdict = read_json(results / "c.json")
    if verdict is None:
        return "FAIL", "the job was not refused (no failure recorded); last lines: " + " | ".join(log_tail(log)), {}
    started = sorted(p.name for p in (results / "c-started").glob("started-*")) if (results / "c-started").exists() \
        else []
    problems = []
    message = verdict.get("message", "")
    for what in ("asked", "visible"):
        if str(verdict.get(what)) not in message:
            problems.append(f"the message does not name the {verdict.get(what)} GPU(s) {what}")
    if started:
        problems.append(f"replicas started before the refusal: {started}")
    facts = {**verdict, "replicas_started": len(started)}
    if problems:
        return "FAIL", "; ".join(problems) + f" (message: {message})", facts
    return "PASS", f"{verdict.get('error_type')}: {message}", facts


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'check':5}  {'what':36}  {'result':11}  {'s':>6}  detail")
    for row in rows:
        seconds = "" if row["seconds"] is None else f"{row['seconds']:.1f}"
        print(f"{row['check']:5}  {row['title']:36}  {row['status']:11}  {seconds:>6}  {row['detail'][:300]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--checks", default="a,b,c,d", help="comma-separated check keys")
    parser.add_argument("--out", default=os.environ.get("OUT") or os.path.expanduser(
        "~/.cache/airflow-distributed/gpu-check/out"), help="where results.json and logs/ go")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per check's DAG run")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole run: a check that cannot get 30 of them is skipped, saying so")
    args = parser.parse_args(argv)
    unknown = set(args.checks.split(",")) - {c.key for c in CHECKS}
    if unknown:
        parser.error(f"--checks: unknown {sorted(unknown)}; allowed: {', '.join(c.key for c in CHECKS)}")
    wanted = [c for c in CHECKS if c.key in args.checks.split(",")]
    deadline = None if args.budget is None else time.monotonic() + args.budget
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "host": platform.node(), "cpus": os.cpu_count(), "mode": args.device,
                              "gpus": gpu_names(), "checks": []}
    rows = report["checks"]

    def row(check: Check, status: str, detail: str, seconds: float | None = None, **facts: Any) -> None:
        rows.append({"check": check.key, "title": check.title, "status": status, "detail": detail,
                     "seconds": seconds, "facts": facts})
        # Written after every check: a run cut short by its machine's time limit still tells what it did.
        (out / "results.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")

    reason = no_gpu_reason() if args.device == "cuda" else None
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        if reason:
            print(f"GPU check skipped: {reason}. (`--device cpu` runs the same DAGs on the CPU.)")
            for check in wanted:
                row(check, "SKIP", reason)
        else:
            run_checks(args, wanted, work, out, report, row, deadline)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows)
    print(f"results: {out / 'results.json'}")
    return 1 if any(r["status"] == "FAIL" for r in rows) else 0


def run_checks(args: argparse.Namespace, wanted: list[Check], work: Path, out: Path, report: dict[str, Any],
               row: Any, deadline: float | None) -> None:
    """Migrate a fresh SQLite Airflow in ``work``, parse the checks' DAGs, run each (within ``deadline``, a
    ``time.monotonic()`` value, when given), judge it."""
    results = work / "results"
    env = dict(os.environ, AIRFLOW_HOME=str(work / "airflow-home"), AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", GPU_CHECK_DEVICE=args.device, GPU_CHECK_RESULTS=str(results),
               PYTHONUNBUFFERED="1")
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = CPU_FAKE_GPUS
    skipped: dict[str, str] = {}
    if any(check.key == "d" for check in wanted):
        env["GPU_CHECK_PYTHON"] = deepspeed_python(args.device)
        reason = no_deepspeed_reason(env["GPU_CHECK_PYTHON"], env)
        if reason:
            skipped["d"] = reason
        report["deepspeed_python"] = env["GPU_CHECK_PYTHON"]
    os.environ.update(env)  # this process parses the DAGs (and counts the GPUs) as the DAG runs will
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "CRITICAL"  # a parse error is reported in the table
    from airflow_distributed.hooks.local import LocalProcessHook

    visible = LocalProcessHook.visible_gpus()  # the product's own count: what the checks ask for
    env["GPU_CHECK_GPUS"] = os.environ["GPU_CHECK_GPUS"] = str(len(visible))
    env["GPU_CHECK_VISIBLE"] = os.environ["GPU_CHECK_VISIBLE"] = ",".join(visible)
    report["visible"] = visible
    names = "".join(f"; {name}" for name in report["gpus"])
    print(f"GPU check ({args.device}): the local backend sees GPUs {visible}{names}")
    if all(check.key in skipped for check in wanted):  # nothing to run: no Airflow to set up
        for check in wanted:
            row(check, "SKIP", skipped[check.key])
        return
    migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True,
                             text=True)
    if migrate.returncode != 0:
        (out / "logs" / "migrate.log").write_text(migrate.stdout + migrate.stderr, encoding="utf-8")
        for check in wanted:
            row(check, "FAIL", f"airflow db migrate failed (exit {migrate.returncode}), see logs/migrate.log")
        return
    errors = parse_errors([c.dag_file for c in wanted if c.key not in skipped])
    for check in wanted:
        if check.key in skipped:
            row(check, "SKIP", skipped[check.key])
            continue
        error = errors.get(check.dag_file.name)
        if error is not None:
            # The spec refusing n_proc_per_node is this build's answer to check b, not a broken check.
            refusal = [line.strip() for line in error.splitlines() if "n_proc_per_node" in line]
            if check.key in ("b", "d") and refusal:
                row(check, "UNSUPPORTED", f"not supported by this build: {refusal[-1]}")
            else:
                row(check, "FAIL", "the DAG does not parse: " + " ".join(error.split())[-300:])
            continue
        left = args.timeout if deadline is None else min(args.timeout, deadline - time.monotonic())
        if left < MIN_CHECK_SECONDS:
            row(check, "SKIP", f"out of budget: {max(0, left):.0f} s left of --budget {args.budget:.0f}")
            continue
        log = out / "logs" / f"{check.key}.log"
        rc, seconds = run_dag(check, env, log, left)
        if check.key == "c":
            status, detail, facts = judge_refusal(results, log)
        else:
            status, detail, facts = judge_training(check, read_json(results / f"{check.key}.json"), log)
        row(check, status, detail, seconds, airflow_exit=rc, **facts)


if __name__ == "__main__":
    sys.exit(main())
