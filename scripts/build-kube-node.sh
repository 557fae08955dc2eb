#!/usr/bin/env bash
# Builds what a real Kubernetes node needs beside the control plane of scripts/build-kube-control-plane.sh: Debian's
# containerd, runc, CNI plugins, docker-registry, umoci, skopeo, debootstrap and iptables, a kubelet v1.20.2 built
# from the same Debian source package, and the pod sandbox's `pause` program from that tree's
# build/pause/linux/pause.c. The kubelet and pause go beside the control plane, keyed by the same source version:
# ${XDG_CACHE_HOME:-~/.cache}/airflow-distributed/kube/<version>/bin (print it with --print-bin-dir;
# tests/kube_node finds them there).
#
# Usage: scripts/build-kube-node.sh [--print-bin-dir]
#
# The kubelet is linked statically without cgo (KUBE_STATIC_OVERRIDES=kubelet, CGO_ENABLED=0) and gets the same
# reflect2 replacement as the control plane (the vendored v1.0.1 crashes under Go >= 1.18). Root is needed to
# install the packages; the build takes about 10 minutes on 2 shared cores and 2 GB of scratch space, removed
# afterwards. Quiet unless failing.
set -euo pipefail

me="scripts/build-kube-node.sh"
binaries=(kubelet pause)
# Run time: the node's own programs; build time: what compiles the kubelet and pause.
runtime_packages=(containerd runc containernetworking-plugins docker-registry umoci skopeo debootstrap busybox-static
                  iptables iproute2 curl)
build_packages=(golang-go golang-github-modern-go-reflect2-dev dpkg-dev rsync gcc libc6-dev)
# The version, the cache, the lock, quiet logging and the unpacked source tree: shared with the control plane's build.
source "$(dirname "$0")/kube-source.sh" "$@"

if built; then
    install_packages "${runtime_packages[@]}"
else
    install_packages "${runtime_packages[@]}" "${build_packages[@]}"
fi

if ! built; then
    start=$SECONDS
    unpack_kube_source
    mkdir -p "$work/bin"
    # The sandbox image's program: static, since the image holds nothing else.
    gcc -Os -Wall -Werror -static -DVERSION=v3.4-airflow-distributed -o "$work/bin/pause" \
        "$tree/build/pause/linux/pause.c" >"$log" 2>&1 || fail "compiling pause"
    (cd "$tree/.go/src/k8s.io/kubernetes" \
        && GOPATH="$tree/.go" GOCACHE="$work/go-build" GOFLAGS=-mod=vendor GOPROXY=off HOME="$work" \
            KUBE_STATIC_OVERRIDES=kubelet CGO_ENABLED=0 make WHAT=cmd/kubelet) >"$log" 2>&1 \
        || fail "building the kubelet"
    out="$(compgen -G "$tree/_output/local/go/bin/kubelet" || compgen -G "$tree/_output/*/bin/kubelet" | head -n 1)" \
        || fail "finding the built kubelet"
    cp "$out" "$work/bin/kubelet"
    # Moved into place only once both are built, so an interrupted build never looks cached.
    mkdir -p "$bin"
    mv "$work/bin/pause" "$bin/pause.new" && mv "$work/bin/kubelet" "$bin/kubelet.new"
    mv "$bin/pause.new" "$bin/pause" && mv "$bin/kubelet.new" "$bin/kubelet"
    echo "built kubelet v1.20.2 and pause in $((SECONDS - start)) s into $bin"
fi

"$bin/kubelet" --version >"$log" 2>&1 || fail "running the cached kubelet"
echo "kube node: $bin ($(cat "$log"), containerd $(containerd --version | awk '{print $3}'))"
