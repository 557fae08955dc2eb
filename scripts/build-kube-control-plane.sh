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

version="1.20.5+really1.20.2-1.1+deb12u1"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-distributed/kube/$version"
bin="$cache/bin"
binaries=(kube-apiserver kube-controller-manager kube-scheduler)
packages=(golang-go etcd-server rsync jq golang-github-modern-go-reflect2-dev dpkg-dev)
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
me="scripts/build-kube-control-plane.sh"

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

# One install and build at a time (two clones may run make test at once): the second reuses the first's.
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9

# Only etcd is needed at test time once the binaries are cached.
if built; then
    needed=(etcd-server)
else
    needed=("${packages[@]}")
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
        # The machine's own Debian mirror (the first URIs of debian.sources, the main archive).
        uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
        printf 'Types: deb-src\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: %s\n' \
            "${uri:-http://deb.debian.org/debian}" /usr/share/keyrings/debian-archive-keyring.gpg >"$sources"
        apt-get update -qq >"$log" 2>&1 || fail "apt-get update (with the deb-src entry)"
    fi
    mkdir -p "$cache"
    work="$(mktemp -d "$cache/build.XXXXXX")"
    trap 'rm -f "$log"; chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
    (cd "$work" && apt-get source --download-only "kubernetes=$version") >"$log" 2>&1 \
        || fail "downloading the kubernetes source package"
    orig="$(compgen -G "$work/kubernetes_*.orig.tar.*" | head -n 1)" || fail "finding the orig tarball"
    mkdir -p "$work/tree"
    tar -xf "$orig" -C "$work/tree" --strip-components=1 >"$log" 2>&1 || fail "unpacking $orig"
    tree="$work/tree"
    [[ -d "$tree/vendor/github.com/modern-go/reflect2" ]] || { echo "$me: no vendored reflect2 in $orig" >&2; exit 1; }
    rm -f "$tree"/vendor/github.com/modern-go/reflect2/*.go
    cp "$reflect2"/*.go "$tree/vendor/github.com/modern-go/reflect2/"
    mkdir -p "$tree/.go/src/k8s.io"
    ln -s "$tree" "$tree/.go/src/k8s.io/kubernetes"
    (cd "$tree/.go/src/k8s.io/kubernetes" \
        && GOPATH="$tree/.go" GOCACHE="$work/go-build" GOFLAGS=-mod=vendor GOPROXY=off CGO_ENABLED=0 \
            make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler") >"$log" 2>&1 \
        || fail "building kube-apiserver, kube-controller-manager and kube-scheduler"
    # Moved into place only once all three are built, so an interrupted build never looks cached.
    mkdir -p "$work/bin"
    for name in "${binaries[@]}"; do
        out="$(compgen -G "$tree/_output/local/go/bin/$name" || compgen -G "$tree/_output/*/bin/$name" | head -n 1)" \
            || fail "finding the built $name"
        cp "$out" "$work/bin/$name"
    done
    rm -rf "$bin" && mv "$work/bin" "$bin"
    echo "built ${binaries[*]} v1.20.2 in $((SECONDS - start)) s into $bin"
fi

command -v etcd >/dev/null || { echo "$me: etcd-server is installed but etcd is not on PATH" >&2; exit 1; }
echo "kube control plane: $bin (etcd $(etcd --version 2>/dev/null | awk '/etcd Version/ {print $3}'))"
