#!/usr/bin/env bash
# Creates the environment of a framework whose pins conflict with the main one: .venvs/<name> inside the repository
# (git-ignored). The project's root is put on that environment's path with a .pth file, so
# `import airflow_distributed.tracking` works there without installing Airflow: the package's __init__ imports nothing.
#
# - mxnet: mxnet==1.9.1 and numpy<1.24 (MXNet 1.9.1 still uses numpy aliases that NumPy 1.24 removed).
# - paddle: paddlepaddle==3.3.1 (CPU), which pins opt_einsum==3.3.0 and would downgrade the main environment's 3.4.0.
# - paddle-ps: paddlepaddle==2.6.2 (CPU) for Paddle's parameter-server mode, whose core (DistFleetWrapper) the 3.x CPU
#   wheels lack; with protobuf 4.25: with a newer one its DistributedStrategy refuses its own fields, with 3.20 it
#   imports google.protobuf.pyext._message, which that install lacks.
# - mlflow: the MLflow tracking server the tests run (`mlflow server`, SQLite backend store; `[auth]` for its
#   basic-auth app, which refuses wrong credentials), whose Flask, SQLAlchemy
#   and alembic pins are not Airflow's; 3.17.2, the newest release whose client (mlflow-skinny) is published too.
#   Only the tests use it: the provider's client is the `mlflow` extra (mlflow-skinny) in the main environment.
# - tensorboard: TensorBoard's server (`tensorboard --logdir`) and its event writer, which the tests' replicas use to
#   write into AIRFLOW_DISTRIBUTED_TENSORBOARD_DIR (no TensorFlow, no torch): its protobuf and werkzeug are not the main
#   environment's to choose.
# - launchers: DeepSpeed and Hugging Face Accelerate over the CPU torch 2.13.0 (the wheel on disk), for the launcher
#   tests (`deepspeed`'s per-node launcher, `accelerate launch`). DeepSpeed builds none of its C++/CUDA ops at install
#   (DS_BUILD_OPS=0), but on the CPU its process group set-up compiles one, the shared-memory collectives
#   (`deepspeed_shm_comm`, 40 s of CPU, over 2 min on 2 busy cores), into torch's extension cache
#   (~/.cache/torch_extensions): built here once, so no test run pays it. Kept apart from the main environment:
#   DeepSpeed brings ninja, hjson, msgpack, einops and py-cpuinfo, Accelerate the Hugging Face Hub client, none of
#   which the provider uses.
#
# Usage: scripts/framework-venv.sh mxnet|paddle|paddle-ps|mlflow|tensorboard|launchers [python]   (default: python3 on PATH)
# Idempotent: a complete environment is left alone. Quiet unless failing; prints the environment's python at the end.
set -euo pipefail

name="${1:?usage: scripts/framework-venv.sh mxnet|paddle|paddle-ps|mlflow|tensorboard|launchers [python]}"
base_python="${2:-python3}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venvs/$name"

case "$name" in
    mxnet)
        requirements=("mxnet==1.9.1" "numpy<1.24")
        # Importing mxnet with DMLC_ROLE=scheduler or server starts ps-lite and blocks: checked without DMLC_*.
        check() {
            env -u DMLC_ROLE -u DMLC_PS_ROOT_URI -u DMLC_PS_ROOT_PORT -u DMLC_NUM_SERVER -u DMLC_NUM_WORKER \
                "$venv/bin/python" -c 'import mxnet, numpy, airflow_distributed.tracking
assert mxnet.__version__ == "1.9.1"'
        }
        ;;
    paddle)
        requirements=("paddlepaddle==3.3.1")
        check() {
            "$venv/bin/python" -c 'import paddle, airflow_distributed.tracking; assert paddle.__version__ == "3.3.1"'
        }
        ;;
    paddle-ps)
        requirements=("paddlepaddle==2.6.2" "protobuf==4.25.8")
        check() {
            "$venv/bin/python" -c 'import paddle, airflow_distributed.tracking
from paddle.base import core
assert paddle.__version__ == "2.6.2" and hasattr(core, "DistFleetWrapper")'
        }
        ;;
    mlflow)
        requirements=("mlflow[auth]==3.17.2")
        # Read from the installed metadata: importing mlflow.server takes seconds, and every test session checks.
        check() {
            "$venv/bin/python" -c 'import importlib.metadata as installed, airflow_distributed.tracking
assert installed.version("mlflow") == "3.17.2"' && [[ -x "$venv/bin/mlflow" ]]
        }
        ;;
    tensorboard)
        requirements=("tensorboard==2.21.0")
        check() {
            "$venv/bin/python" -c 'import importlib.metadata as installed, airflow_distributed.tracking
from tensorboard.summary.writer.event_file_writer import EventFileWriter
assert installed.version("tensorboard") == "2.21.0"' && [[ -x "$venv/bin/tensorboard" ]]
        }
        ;;
    launchers)
        requirements=("torch==2.13.0" "deepspeed==0.19.8" "accelerate==1.15.0")
        export DS_BUILD_OPS=0
        post_install() {
            "$venv/bin/python" -c 'from deepspeed.accelerator import get_accelerator
get_accelerator().create_op_builder("ShareMemCommBuilder").load()'
        }
        check() {
            "$venv/bin/python" -c 'import importlib.metadata as installed, airflow_distributed.tracking
assert installed.version("deepspeed") == "0.19.8" and installed.version("accelerate") == "1.15.0"
assert installed.version("torch").startswith("2.13.0")' && [[ -x "$venv/bin/accelerate" ]]
        }
        ;;
    *)
        echo "scripts/framework-venv.sh: no environment for $name; known: mxnet, paddle, paddle-ps, mlflow, tensorboard, launchers" >&2
        exit 2
        ;;
esac
# The marker names what was installed, so a change to the pins above rebuilds the environment.
marker="$venv/.complete-$(printf '%s\n' "${requirements[@]}" | sha256sum | cut -c1-16)"

# An environment copied from another checkout runs that checkout's scripts (its console scripts' #! lines name the
# other environment's python, its .pth the other checkout): built again.
own() {
    [[ "$(head -n 1 "$venv/bin/pip" 2>/dev/null)" == "#!$venv/bin/python"* ]] \
        && grep -qxF "$repo" "$venv"/lib/python*/site-packages/airflow_distributed_repo.pth 2>/dev/null
}

if [[ -f "$marker" ]] && own && check >/dev/null 2>&1; then
    echo "$name environment: $venv/bin/python"
    exit 0
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
fail() {
    echo "scripts/framework-venv.sh: $1 failed; its output:" >&2
    cat "$log" >&2
    exit 1
}

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$base_python" -m venv "$venv" >"$log" 2>&1 || fail "creating $venv"
# --no-compile: a third of the install's time; the modules imported are compiled as they are (the Makefile
# keeps PYTHONDONTWRITEBYTECODE from its recipes, so that happens once).
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile "${requirements[@]}" >"$log" 2>&1 \
    || fail "pip install ${requirements[*]}"
site_packages="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\n' "$repo" >"$site_packages/airflow_distributed_repo.pth"
if declare -F post_install >/dev/null; then
    post_install >"$log" 2>&1 || fail "the set-up after installing $name"
fi
check >"$log" 2>&1 || fail "importing $name and airflow_distributed.tracking"
touch "$marker"
echo "$name environment: $venv/bin/python"
