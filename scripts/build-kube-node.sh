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

version="1.20.5+really1.20.2-1.1+deb12u1"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-distributed/kube/$version"
bin="$cache/bin"
binaries=(kubelet pause)
# Run time: the node's own programs; build time: what compiles the kubelet and pause.
runtime_packages=(containerd runc containernetworking-plugins docker-registry umoci skopeo debootstrap busybox-static
                  iptables iproute2 curl)
build_packages=(golang-go golang-github-modern-go-reflect2-dev dpkg-dev rsync gcc libc6-dev)
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
me="scripts/build-kube-node.sh"

if [[ "${1:-}" == "--print-bin-dir" ]]; then
    echo "$bin"
    exit 0
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
fail() {
    echo "$me: $1 failed; its output:" >&2
    tail -n 200 "$log" >&2
    exit 1
}

built() {
    local name
    for name in "${binaries[@]}"; do [[ -x "$bin/$name" ]] || return 1; done
}

missing_packages() {
    local package
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || echo "$package"
    done
}

# The control plane's lock: both scripts unpack the same source package into the same cache.
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9

if built; then
    needed=("${runtime_packages[@]}")
else
    needed=("${runtime_packages[@]}" "${build_packages[@]}")
fi
mapfile -t missing < <(missing_packages "${needed[@]}")
if ((${#missing[@]})); then
    [[ "$(id -u)" == 0 ]] || { echo "$me: needs root to install ${missing[*]}" >&2; exit 1; }
    apt-get update -qq >"$log" 2>&1 || fail "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1 \
        || fail "installing ${missing[*]}"
fi

if ! built; then
    start=$SECONDS
    sources=/etc/apt/sources.list.d/airflow-distributed-kube-src.sources
    if [[ ! -f "$sources" ]]; then
        [[ "$(id -u)" == 0 ]] || { echo "$me: needs root to add a deb-src entry" >&2; exit 1; }
        uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
        printf 'Types: deb-src\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: %s\n' \
            "${uri:-http://deb.debian.org/debian}" /usr/share/keyrings/debian-archive-keyring.gpg >"$sources"
        apt-get update -qq >"$log" 2>&1 || fail "apt-get update (with the deb-src entry)"
    fi
    mkdir -p "$cache"
    work="$(mktemp -d "$cache/node-build.XXXXXX")"
    trap 'rm -f "$log"; chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
    (cd "$work" && apt-get source --download-only "kubernetes=$version") >"$log" 2>&1 \
        || fail "downloading the kubernetes source package"
    orig="$(compgen -G "$work/kubernetes_*.orig.tar.*" | head -n 1)" || fail "finding the orig tarball"
    mkdir -p "$work/tree" "$work/bin"
    tar -xf "$orig" -C "$work/tree" --strip-components=1 >"$log" 2>&1 || fail "unpacking $orig"
    tree="$work/tree"
    # The sandbox image's program: static, since the image holds nothing else.
    gcc -Os -Wall -Werror -static -DVERSION=v3.4-airflow-distributed -o "$work/bin/pause" \
        "$tree/build/pause/linux/pause.c" >"$log" 2>&1 || fail "compiling pause"
    [[ -d "$tree/vendor/github.com/modern-go/reflect2" ]] || { echo "$me: no vendored reflect2 in $orig" >&2; exit 1; }
    rm -f "$tree"/vendor/github.com/modern-go/reflect2/*.go
    cp "$reflect2"/*.go "$tree/vendor/github.com/modern-go/reflect2/"
    mkdir -p "$tree/.go/src/k8s.io"
    ln -s "$tree" "$tree/.go/src/k8s.io/kubernetes"
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
