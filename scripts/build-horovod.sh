#!/usr/bin/env bash
# Builds Horovod 0.28.1 with PyTorch and Gloo (no MPI, TensorFlow or MXNet) against the torch installed in the given
# Python, caches the wheel outside the checkout (${XDG_CACHE_HOME:-~/.cache}/airflow-distributed/wheels/, as the
# control plane is: every clone on the machine reuses one build) and installs it there.
#
# Usage: scripts/build-horovod.sh [--wheel] [python]   (default: python on PATH; it must already have torch installed)
#
# With --wheel, only builds (or finds) the cached wheel and prints its path, installing nothing: for images whose
# Python has the same torch and Python version (scripts/build-kube-node-images.sh --with horovod).
#
# As published the sdist does not build against recent torch: it compiles with C++14 while torch's headers need
# C++17, so the two CMakeLists that set the standard are patched to 17. The wheel is built without build isolation,
# against the torch already installed, because its extension links to that torch's libraries; the cache is therefore
# keyed by the torch version and Python tag, and a different torch gets its own build. A cached wheel is reused;
# the build itself takes about 10 minutes on 2 cores. Quiet unless failing; prints what it installed.
set -euo pipefail

wheel_only=""
if [[ "${1:-}" == "--wheel" ]]; then
    wheel_only=1
    shift
fi
python="${1:-python}"
horovod_version="0.28.1"

if ! torch_version="$("$python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)"; then
    echo "scripts/build-horovod.sh: $python has no torch; install torch==2.13.0 into it first" >&2
    exit 1
fi
py_tag="$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-distributed/wheels/horovod-$horovod_version-torch$torch_version-$py_tag"

log="$(mktemp)"
work="$(mktemp -d)"
trap 'rm -rf "$log" "$work"' EXIT
fail() {
    echo "scripts/build-horovod.sh: $1 failed; its output:" >&2
    tail -n 200 "$log" >&2
    exit 1
}

wheel() { compgen -G "$cache/horovod-$horovod_version-*.whl" | head -n 1; }

if [[ -z "$(wheel)" ]]; then
    start=$SECONDS
    # setuptools and wheel must be in the target environment since the build runs in it, not in an isolated one.
    "$python" -m pip install --quiet --disable-pip-version-check setuptools wheel >"$log" 2>&1 \
        || fail "installing setuptools and wheel"
    "$python" -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
        --dest "$work" "horovod==$horovod_version" >"$log" 2>&1 || fail "downloading the horovod sdist"
    tar -xzf "$work/horovod-$horovod_version.tar.gz" -C "$work"
    src="$work/horovod-$horovod_version"
    for cmakelists in "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"; do
        grep -q 'set(CMAKE_CXX_STANDARD 14)' "$cmakelists" \
            || { echo "scripts/build-horovod.sh: no C++14 setting to patch in $cmakelists" >&2; exit 1; }
        sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$cmakelists"
    done
    mkdir -p "$work/dist"
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
        HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
        "$python" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check \
        --wheel-dir "$work/dist" "$src" >"$log" 2>&1 || fail "building horovod"
    mkdir -p "$cache"
    # Move into place only once complete (a name of its own first: two clones may build at once), so an interrupted
    # build never leaves a wheel that looks cached.
    built="$(compgen -G "$work/dist/horovod-$horovod_version-*.whl" | head -n 1)"
    partial="$(mktemp -p "$cache" .partial.XXXXXX)"
    mv "$built" "$partial" && mv "$partial" "$cache/$(basename "$built")"
    [[ -n "$wheel_only" ]] || echo "built $(basename "$built") in $((SECONDS - start)) s"
fi
if [[ -n "$wheel_only" ]]; then
    wheel
    exit 0
fi

# With its dependencies (cloudpickle, psutil, pyyaml, packaging, cffi): none of them is torch.
"$python" -m pip install --quiet --disable-pip-version-check "$(wheel)" >"$log" 2>&1 || fail "installing $(wheel)"
"$python" -c 'import horovod.torch as hvd; assert hvd.gloo_built(), "horovod was built without gloo"' >"$log" 2>&1 \
    || fail "importing horovod.torch"
echo "horovod $horovod_version installed into $("$python" -c 'import sys; print(sys.prefix)') from $(wheel)"
