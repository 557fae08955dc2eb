"""A prelude for training scripts in the tests of several processes per replica (``n_proc_per_node``), in a module
that defines no DAG so that DAG files of several backends share it: each process prints the rank variables it was
started with, on one line the tests read from the task log, then runs the script given as its first argument as
``python SCRIPT ARGS...`` would."""

from __future__ import annotations

import json

#: what every line starts with, before the variables as JSON
MARK = "process variables: "
VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "CUDA_VISIBLE_DEVICES")

PRELUDE = f"""
import json, os, runpy, sys
line = {MARK!r} + json.dumps({{key: os.environ.get(key) for key in {VARIABLES!r}}}, sort_keys=True) + "\\n"
os.write(1, line.encode())  # one write: print's two (text, newline) interleave with the replica's other processes
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
runpy.run_path(script, run_name="__main__")
"""

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")


def ranks_seen(out: str) -> list[dict[str, str]]:
    """The rank variables of every process that printed them in ``out`` (a task log), each once, in rank order: a
    line can be in the log twice, as the replica printed it and in the closing block of its last lines. The task log
    adds the logger's name and the source location after the line."""
    seen = {}
    for line in out.splitlines():
        if MARK in line:
            process = json.JSONDecoder().raw_decode(line.split(MARK, 1)[1])[0]
            ranks = {key: process[key] for key in RANK_VARIABLES}
            seen[json.dumps(ranks, sort_keys=True)] = ranks
    return sorted(seen.values(), key=lambda ranks: int(ranks["RANK"]))


def ranks_expected(replicas: int, processes: int) -> list[dict[str, str]]:
    """What torch's launcher and the plan give each process of ``replicas`` x ``processes``, in rank order."""
    world = replicas * processes
    return [{"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank % processes),
             "LOCAL_WORLD_SIZE": str(processes), "NODE_RANK": str(rank // processes)} for rank in range(world)]
