#!/usr/bin/env bash
# Builds a real Kubernetes control plane (kube-apiserver, kube-controller-manager, kube-scheduler) for the tests and
# installs etcd. The binaries go to a cache outside the checkout, keyed by the source version, so every clone on the
# machine reuses one build: ${XDG_CACHE_HOME:-~/.cache}/airflow-distributed/kube/<version>/bin (print it with
# --print-bin-dir; tests/kube_control_plane finds it there, or in $KUBE_CONTROL_PLANE_BIN).
#
# Usage: scripts/build-kube-control-plane.sh [--print-bin-dir]
#
# The source is Debian bookworm's package `kubernetes` (upstream v1.20.2 with its vendor/ folder), built offline with
# Debian's Go. Its vendored github.com/modern-go/reflect2 v1.0.1 crashes under Go >= 1.18 ("fatal error: fault" on
# the first custom-object create), so its files are replaced with Debian's 1.0.2 before building. Installing the
# packages (and the deb-src entry the source needs) takes root; the build takes 5-10 minutes on 2 cores and about
# 2 GB of scratch space, removed afterwards. Quiet unless failing; prints where the binaries are.
set -euo pipefail

me="scripts/build-kube-control-plane.sh"
binaries=(kube-apiserver kube-controller-manager kube-scheduler)
packages=(golang-go etcd-server rsync jq golang-github-modern-go-reflect2-dev dpkg-dev)
# The version, the cache, the lock, quiet logging and the unpacked source tree: shared with the node's build.
source "$(dirname "$0")/kube-source.sh" "$@"

# Only etcd is needed at test time once the binaries are cached.
if built; then
    install_packages etcd-server
else
    install_packages "${packages[@]}"
fi

if ! built; then
    start=$SECONDS
    unpack_kube_source
    (cd "$tree/.go/src/k8s.io/kubernetes" \
        && GOPATH="$tree/.go" GOCACHE="$work/go-build" GOFLAGS=-mod=vendor GOPROXY=off CGO_ENABLED=0 \
            make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler") >"$log" 2>&1 \
        || fail "building kube-apiserver, kube-controller-manager and kube-scheduler"
    # Moved into place only once all three are built, so an interrupted build never looks cached; one by one, so
    # the node's kubelet and pause beside them stay.
    mkdir -p "$work/bin" "$bin"
    for name in "${binaries[@]}"; do
        out="$(compgen -G "$tree/_output/local/go/bin/$name" || compgen -G "$tree/_output/*/bin/$name" | head -n 1)" \
            || fail "finding the built $name"
        cp "$out" "$work/bin/$name"
    done
    for name in "${binaries[@]}"; do mv "$work/bin/$name" "$bin/$name"; done
    echo "built ${binaries[*]} v1.20.2 in $((SECONDS - start)) s into $bin"
fi

command -v etcd >/dev/null || { echo "$me: etcd-server is installed but etcd is not on PATH" >&2; exit 1; }
echo "kube control plane: $bin (etcd $(etcd --version 2>/dev/null | awk '/etcd Version/ {print $3}'))"
