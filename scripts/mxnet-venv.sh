#!/usr/bin/env bash
# Creates the MXNet environment the MXNet examples and tests run in: .venvs/mxnet inside the repository (git-ignored),
# with mxnet==1.9.1 and numpy<1.24 (MXNet 1.9.1 still uses numpy aliases that NumPy 1.24 removed, so it cannot share
# the main environment's NumPy). The project's root is put on that environment's path with a .pth file, so
# `import airflow_distributed.tracking` works there without installing Airflow: the package's __init__ imports nothing.
#
# Usage: scripts/mxnet-venv.sh [python]   (default: python3 on PATH; MXNet 1.9.1's wheel is py3-none and runs on 3.11)
# Idempotent: a complete environment is left alone. Quiet unless failing; prints the environment's python at the end.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.venvs/mxnet"
base_python="${1:-python3}"
requirements=("mxnet==1.9.1" "numpy<1.24")
# The marker names what was installed, so a change to the pins above rebuilds the environment.
marker="$venv/.complete-$(printf '%s\n' "${requirements[@]}" | sha256sum | cut -c1-16)"

# Importing mxnet with DMLC_ROLE=scheduler or server starts ps-lite and blocks, so the checks run without DMLC_*.
check() {
    env -u DMLC_ROLE -u DMLC_PS_ROOT_URI -u DMLC_PS_ROOT_PORT -u DMLC_NUM_SERVER -u DMLC_NUM_WORKER \
        "$venv/bin/python" -c 'import mxnet, numpy, airflow_distributed.tracking; assert mxnet.__version__ == "1.9.1"'
}

if [[ -f "$marker" ]] && check >/dev/null 2>&1; then
    echo "mxnet environment: $venv/bin/python"
    exit 0
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
fail() {
    echo "scripts/mxnet-venv.sh: $1 failed; its output:" >&2
    cat "$log" >&2
    exit 1
}

rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$base_python" -m venv "$venv" >"$log" 2>&1 || fail "creating $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}" >"$log" 2>&1 \
    || fail "pip install ${requirements[*]}"
site_packages="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\n' "$repo" >"$site_packages/airflow_distributed_repo.pth"
check >"$log" 2>&1 || fail "importing mxnet and airflow_distributed.tracking"
touch "$marker"
echo "mxnet environment: $venv/bin/python"
