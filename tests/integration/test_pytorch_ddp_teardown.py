"""The PyTorch DDP example ends its gloo process group in ``destroy_process_group()``, not in the interpreter's
finalization: a group still alive then is destroyed while Python tears itself down, where one of gloo's threads that
still needs the GIL aborts the replica (``terminate called without an active exception``, exit -6) after training
was complete.

The script runs by hand (a group of one, on a free local port), under a few lines that list, from an ``atexit``
handler, the threads still alive when the interpreter starts to finalize: none may be the process group's.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = ROOT / "example_dags" / "training" / "pytorch_ddp.py"

#: Runs the script as ``python pytorch_ddp.py`` would (its folder first on sys.path, ``__main__``), then, at exit,
#: prints the names the kernel has for this process's threads (gloo's are ``pt_gloo_*`` and ``gloo_*``).
RUN_AND_LIST_THREADS_AT_EXIT = """
import atexit, os, runpy, sys

def list_threads():
    names = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as comm:
            names.append(comm.read().strip())
    print("threads at exit: " + ",".join(sorted(names)), flush=True)

atexit.register(list_threads)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
runpy.run_path(script, run_name="__main__")
"""


def test_the_ddp_example_destroys_its_gloo_group_before_the_interpreter_finalizes(tmp_path) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), AIRFLOW_DISTRIBUTED_MODEL_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_THREADS_AT_EXIT, str(SCRIPT), "--steps", "3"],
        env=env, capture_output=True, text=True, timeout=120,
    )

    assert done.returncode == 0, done.stderr
    assert "parameters identical on all ranks" in done.stdout
    listed = [line for line in done.stdout.splitlines() if line.startswith("threads at exit: ")]
    assert len(listed) == 1, done.stdout
    threads = listed[0].removeprefix("threads at exit: ").split(",")
    # gloo's worker and transport threads, and the store's server thread of rank 0
    assert [name for name in threads if "gloo" in name or "tcpstore" in name] == [], threads
