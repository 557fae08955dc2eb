"""Small programs a job's pods run with the training image's own Python 3: the readiness wait, the signal
forwarder every replica's command runs under, and the master's output relay (the forwarder and a copy of its
output); and the argv that starts each.

They go in with ``python -I -c`` so nothing beyond a Python 3 interpreter has to be in the image, which it has
anyway to run the training command. ``-I`` (isolated) keeps a training repository's own ``json.py`` or a
``PYTHONPATH`` from shadowing the standard library they use.
"""

from __future__ import annotations

from collections.abc import Sequence

# The kubelet reads a container's termination message from this file (the Kubernetes default path).
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# The kubelet cuts a termination message at 4096 bytes (and at 12 KiB for all containers of a pod together).
TERMINATION_MESSAGE_LIMIT = 4096

# argv: <timeout seconds> <host:port>...  Waits until each peer's name resolves and its port accepts TCP. As its
# container's PID 1 it gets no signal it has no handler for: without one, a pod deleted while it waits (a job
# failed or killed before its master listened) would take its whole grace period (30 s by default) to go.
WAIT_FOR_PEERS = """\
import signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
timeout = float(sys.argv[1])
deadline = time.monotonic() + timeout
for peer in sys.argv[2:]:
    host, port = peer.rsplit(":", 1)
    print("waiting for", peer, flush=True)
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            break
        except OSError as err:
            if time.monotonic() > deadline:
                sys.exit(f"{peer} is not reachable after {timeout:g}s: {err}")
            time.sleep(1)
    print(peer, "is reachable", flush=True)
"""

# Runs the command as a child and forwards SIGTERM, SIGINT and SIGHUP to it, so that the command is not its
# container's PID 1: PID 1 gets no signal it has no handler for, so a training script run as PID 1 (most have no
# SIGTERM handler) ignores the kubelet's SIGTERM and its pod takes its whole grace period (30 s by default) to go
# after a delete (a failed, timed-out or killed job; a retry waits behind it). Under this parent it gets SIGTERM's
# default action, or its own handler, as anywhere else. A signal before the child exists ends the parent.
_RUN_CHILD = """\
child = None
def forward(signum, frame):
    if child is None:
        sys.exit(128 + signum)
    child.send_signal(signum)
for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, forward)
try:
    child = subprocess.Popen(command)
except OSError as err:
    print(f"cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
    sys.exit(127)
code = child.wait()
"""
# The exit status of the parent: the child's code, or 128 + the signal that ended it (as a shell says it).
_EXIT = "sys.exit(code if code >= 0 else 128 - code)\n"

# argv: <command>...  Every replica's command but the master's (which runs under RELAY_OUTPUT, that does the same).
FORWARD_SIGNALS = f"""\
import signal, subprocess, sys
command = sys.argv[1:]
{_RUN_CHILD}{_EXIT}"""

# argv: <output path> <message path> <command>...  Runs the command (signals forwarded), then copies the output
# document into the termination message, shortened to what the kubelet keeps (with "truncated": true, which
# ``outputs.sanitise_document`` turns into a warning), and exits with the command's code.
RELAY_OUTPUT = f"""\
import json, signal, subprocess, sys
LIMIT = {TERMINATION_MESSAGE_LIMIT}
output, message, command = sys.argv[1], sys.argv[2], sys.argv[3:]
{_RUN_CHILD}

def brief(text):
    if len(text.encode()) <= LIMIT:
        return text
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    document = document if isinstance(document, dict) else {{}}
    kept = {{key: document[key] for key in ("metrics", "model_path") if key in document}}
    for candidate in (kept, {{k: v for k, v in kept.items() if k == "model_path"}}):
        short = json.dumps({{**candidate, "truncated": True}})
        if len(short.encode()) <= LIMIT:
            return short
    return json.dumps({{"truncated": True}})

try:
    with open(output, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    with open(message, "w", encoding="utf-8") as handle:
        handle.write(brief(text))
except OSError:
    pass  # no document, or nowhere to put it: the exit code is what matters
{_EXIT}"""


def wait_for_peers_command(python: str, peers: Sequence[tuple[str, int]], timeout_seconds: float) -> list[str]:
    return [python, "-I", "-c", WAIT_FOR_PEERS, f"{timeout_seconds:g}", *(f"{host}:{port}" for host, port in peers)]


def forward_signals_command(python: str, command: Sequence[str]) -> list[str]:
    return [python, "-I", "-c", FORWARD_SIGNALS, *command]


def relay_output_command(
    python: str, command: Sequence[str], output_path: str, message_path: str = TERMINATION_MESSAGE_PATH
) -> list[str]:
    return [python, "-I", "-c", RELAY_OUTPUT, output_path, message_path, *command]
