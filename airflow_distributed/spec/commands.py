"""The launcher a training command starts by itself, and when the DAG is parsed, whether it may (pure).

A PyTorch replica's processes are started by a launcher: the product's own (``environment.pytorch.launcher``, or
torchrun for ``n_proc_per_node`` > 1, or torch's elastic agent), or one the command names itself (``torchrun ...``,
``deepspeed ...``, ``accelerate launch ...``, ``python -m torch.distributed.run ...``, or such a line in
``sh -c``). Both at once nest: every process of the product's launcher starts its own group, at a world size the
plan does not know. A launcher of the command's own is only kept where the product starts none and it would train
at the plan's world size (see ``own_launcher_problems``).

Recognised by the program's basename, ``python -m <module>`` and, in ``sh -c``/``bash -c`` lines, the first word(s)
of each simple command (split at ``;``, ``&&``, ``||``, ``|``, ``&`` and newlines): no shell is parsed, so a launcher
hidden behind a variable, a function or a script file is not found (it is then run as given).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_distributed.spec.limits import name_shown
from airflow_distributed.spec.models import SECTION_OF, TrainingSpec

Problem = tuple[str, str]

SECTION = f"environment.{SECTION_OF['pytorch']}"

#: An interpreter: python, python3, python3.11, or a path to one.
PYTHON_PROGRAM = re.compile(r"python[0-9.]*")
#: Programs that are a launcher, and which (``accelerate`` only with its ``launch`` subcommand; ``ds`` and
#: ``deepspeed.pt`` are other names DeepSpeed installs for its runner).
LAUNCHER_PROGRAMS = {"torchrun": "torchrun", "deepspeed": "deepspeed", "ds": "deepspeed", "deepspeed.pt": "deepspeed",
                     "accelerate-launch": "accelerate"}
#: Modules that are a launcher when run with ``python -m``: torch's (and its older ``launch``), DeepSpeed's runner
#: and per-node launcher, Accelerate's.
LAUNCHER_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun",
                    "deepspeed.launcher.runner": "deepspeed", "deepspeed.launcher.launch": "deepspeed",
                    "accelerate.commands.launch": "accelerate"}
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
# Interpreter options that take the next word as their value.
_PYTHON_VALUED = frozenset({"-W", "-X", "-Q"})
# Words that run the next one as the program.
_PREFIXES = frozenset({"exec", "env", "nohup", "time", "command"})
# torchrun options that take no value: any other option is read with the word after it (or after ``=``).
_TORCHRUN_FLAGS = frozenset({"--standalone", "--no-python", "-m", "--module", "--run-path"})
_SHELL_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;", "(", ")", "{", "}"})


@dataclass(frozen=True)
class LauncherCall:
    """A launcher a command starts itself."""

    #: which one: ``torchrun``, ``deepspeed`` or ``accelerate`` (``spec.models.LAUNCHERS``)
    launcher: str
    #: how the command names it (``"torchrun"``, ``"python -m torch.distributed.run"``), for messages
    spelling: str
    #: the argv position of the word that names it (for ``sh -c``, of the shell line)
    position: int
    #: the words after it: its options, then the command it runs
    options: tuple[str, ...]


def launcher_call(argv: Sequence[str]) -> LauncherCall | None:
    """The launcher ``argv`` starts itself, or ``None``: a command that only mentions one among its arguments
    (``python train.py --launcher torchrun``) starts none."""
    return _call([str(word) for word in argv], 0, shell_depth=0)


def _call(argv: list[str], offset: int, *, shell_depth: int) -> LauncherCall | None:
    start = _program_start(argv)
    if start is None:
        return None
    program, rest = os.path.basename(argv[start]), argv[start + 1:]
    position = offset + start
    if program == "accelerate":
        return (LauncherCall("accelerate", "accelerate launch", position, tuple(rest[1:]))
                if rest[:1] == ["launch"] else None)
    if program in LAUNCHER_PROGRAMS:
        return LauncherCall(LAUNCHER_PROGRAMS[program], program, position, tuple(rest))
    if PYTHON_PROGRAM.fullmatch(program):
        module = _python_module(rest)
        if module is not None and module[0] in LAUNCHER_MODULES:
            return LauncherCall(LAUNCHER_MODULES[module[0]], f"python -m {module[0]}", position, module[1])
        return None
    if program in _SHELLS and shell_depth == 0:
        line = _shell_line(rest)
        if line is None:
            return None
        for simple in _simple_commands(line):
            found = _call(simple, 0, shell_depth=1)
            if found is not None:
                return LauncherCall(found.launcher, f"{found.spelling} (in {program} -c)",
                                    position + 1 + rest.index(line), found.options)
    return None


def _program_start(argv: list[str]) -> int | None:
    """Where the program is, past ``exec``/``env`` and ``NAME=value`` words."""
    for position, word in enumerate(argv):
        if word in _PREFIXES or (not word.startswith("-") and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word)):
            continue
        if word.startswith("-") and position and os.path.basename(argv[position - 1]) in ("env", "time"):
            continue  # env -i, time -p
        return position
    return None


def _python_module(rest: list[str]) -> tuple[str, tuple[str, ...]] | None:
    """``(module, the words after it)`` of ``python [options] -m module ...``; ``None`` for a script or ``-c``."""
    skip = False
    for position, word in enumerate(rest):
        if skip:
            skip = False
        elif word == "-m":
            return (rest[position + 1], tuple(rest[position + 2:])) if position + 1 < len(rest) else None
        elif word.startswith("-m"):
            return word[2:], tuple(rest[position + 1:])
        elif word == "-c" or not word.startswith("-") or word == "-":
            return None
        elif word in _PYTHON_VALUED:
            skip = True
    return None


def _shell_line(rest: list[str]) -> str | None:
    """The line of ``sh [options] -c LINE ...`` (an option word holding ``c``: ``-c``, ``-ec``, ``-lc``)."""
    given = False
    for word in rest:
        if word.startswith("-") and not word.startswith("--"):
            given = given or "c" in word[1:]
        elif word.startswith("--"):
            continue
        else:
            return word if given else None
    return None


def _simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of a shell line; quotes are honoured, nothing is expanded."""
    lexer = shlex.shlex(line.replace("\n", " ; "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: the shell refuses the line itself, the words are still read
        words = line.split()
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _SHELL_SEPARATORS or set(word) <= set(";&|()"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [command for command in commands if command]


def torchrun_options(options: Sequence[str]) -> dict[str, str]:
    """The options torchrun's words give, up to the script it runs (the words after it are the script's), by name:
    ``--nproc-per-node 4`` and ``--nproc_per_node=4`` both read ``{"--nproc-per-node": "4"}``; a flag reads ``""``."""
    words = list(options)
    found: dict[str, str] = {}
    position = 0
    while position < len(words) and words[position].startswith("-"):
        name, equals, value = words[position].partition("=")
        name = name.replace("_", "-") if name.startswith("--") else name
        if equals or name in _TORCHRUN_FLAGS:
            found[name] = value
            position += 1
        else:
            found[name] = words[position + 1] if position + 1 < len(words) else ""
            position += 2
    return found


def own_launcher_problems(spec: TrainingSpec | None, command: Any, args: Any, *,
                          operator_processes: bool = False) -> list[Problem]:
    """A command (with ``args``) that starts a launcher where it must not, found when the DAG is parsed (and again
    once rendered). Refused: any launcher of the command's own where the product starts the replica's processes
    itself (``elastic``, ``launcher``, or ``n_proc_per_node`` other than 1), DeepSpeed's or Accelerate's anywhere
    (they read none of the replica's variables: each replica would train alone), and a torchrun whose process or
    node count gives another world size than the plan's.

    :param operator_processes: a training operator sets torchrun's process count (``PET_NPROC_PER_NODE``) by its
        own default where the spec says none (``kubeflow``, ``trainjob``): a torchrun of the command's own must then
        say ``--nproc-per-node 1``.
    """
    if spec is None or spec.framework != "pytorch" or not isinstance(command, (list, tuple)):
        return []
    # A templated word names no launcher and its value is left alone: the operator checks its arguments again once
    # rendered, before anything starts.
    found = launcher_call([*command, *(args if isinstance(args, (list, tuple)) else [])])
    if found is None:
        return []
    field = "command" if found.position < len(command) else "args"
    cluster = spec.cluster  # a job of the master alone has no pytorch section: a WorkerCluster, none of these keys
    elastic, launcher = getattr(cluster, "elastic", None), getattr(cluster, "launcher", None)
    processes = getattr(cluster, "n_proc_per_node", None)
    instead = (f"drop {found.spelling} from {field}, start the script with python, and set {SECTION}.n_proc_per_node "
               "(and .launcher for DeepSpeed or Accelerate): the product then starts the processes")
    if elastic is not None:
        return [(field, f"starts {found.spelling}, but {SECTION}.elastic already runs each replica under torch's "
                 "elastic agent (torchrun): a launcher of the command's own would run in its place or under it, at "
                 f"counts of its own; drop {found.spelling} from {field} and start the script with python (the agent's "
                 f"process count is {SECTION}.n_proc_per_node)")]
    asked = [said for said, given in ((f"launcher={launcher!r}", launcher),
                                      (f"n_proc_per_node={processes!r}", processes not in (None, 1))) if given]
    if asked:
        return [(field, f"starts {found.spelling}, but {SECTION}.{' and '.join(asked)} already has each replica's "
                 "processes started under a launcher: a second one in the command would run in its place or under "
                 f"it, at counts of its own; {instead}")]
    replicas = 1 + cluster.n_workers
    if found.launcher != "torchrun":
        return [(field, f"starts {found.spelling}, which reads none of the replica's variables: each replica "
                 "would train on its own, at a world size of its own device count, not with the others at the "
                 f"plan's world size {replicas}; {instead}")]
    given = torchrun_options(found.options)
    nproc, nnodes = (None if value is None or _templated(value) else value
                     for value in (given.get("--nproc-per-node"), given.get("--nnodes")))
    problems: list[Problem] = []
    if "--nproc-per-node" not in given and operator_processes:
        problems.append((field, f"starts {found.spelling} with no --nproc-per-node: it would start the training "
                         "operator's default count of processes (PET_NPROC_PER_NODE; 'auto' is one per GPU or CPU), "
                         f"not the plan's one per replica; give --nproc-per-node 1, or {instead}"))
    elif nproc not in (None, "1"):
        world = f"world size {replicas * int(nproc)}" if nproc.isdigit() else "a world size counted when it runs"
        problems.append((field, f"starts {found.spelling} with --nproc-per-node {name_shown(nproc)}: {world}, not the "
                         f"plan's {replicas} ({replicas} replicas x 1 process); {instead}"))
    if "--standalone" in given and replicas > 1:
        problems.append((field, f"starts {found.spelling} --standalone: each of the {replicas} replicas would train "
                         "alone, not together at the plan's world size; drop --standalone (torchrun reads the "
                         "replica's PET_* variables)"))
    elif nnodes is not None and nnodes != str(replicas):
        problems.append((field, f"starts {found.spelling} with --nnodes {name_shown(nnodes)}, but the job has "
                         f"{replicas} replicas (the master and n_workers); drop --nnodes (torchrun reads the replica's "
                         "PET_NNODES)"))
    return problems


def _templated(word: str) -> bool:
    return "{{" in word or "{%" in word
