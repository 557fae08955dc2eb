# Sourced by scripts/build-kube-control-plane.sh and scripts/build-kube-node.sh: what both builds share, the Debian
# source version and its cache, the quiet logging, the package installs, one lock, and the unpacked source tree.
# The sourcing script sets `me` (its name) and `binaries` (what it builds) first.

version="1.20.5+really1.20.2-1.1+deb12u1"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-distributed/kube/$version"
bin="$cache/bin"
reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2

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

install_packages() {
    local missing
    mapfile -t missing < <(missing_packages "$@")
    ((${#missing[@]})) || return 0
    [[ "$(id -u)" == 0 ]] || { echo "$me: needs root to install ${missing[*]}" >&2; exit 1; }
    apt-get update -qq >"$log" 2>&1 || fail "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1 \
        || fail "installing ${missing[*]}"
}

# One install and build at a time (two clones may run make test at once, and both builds unpack the same source
# package into the same cache): the second reuses the first's.
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9

# Debian's source package unpacked into a new scratch folder under the cache, its vendored reflect2 v1.0.1 (which
# crashes under Go >= 1.18, "fatal error: fault") replaced with Debian's 1.0.2, and linked into a GOPATH: sets
# `work` (removed on exit, whatever happens) and `tree`.
unpack_kube_source() {
    local sources=/etc/apt/sources.list.d/airflow-distributed-kube-src.sources uri orig
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
    tree="$work/tree"
    mkdir -p "$tree"
    tar -xf "$orig" -C "$tree" --strip-components=1 >"$log" 2>&1 || fail "unpacking $orig"
    [[ -d "$tree/vendor/github.com/modern-go/reflect2" ]] || { echo "$me: no vendored reflect2 in $orig" >&2; exit 1; }
    rm -f "$tree"/vendor/github.com/modern-go/reflect2/*.go
    cp "$reflect2"/*.go "$tree/vendor/github.com/modern-go/reflect2/"
    mkdir -p "$tree/.go/src/k8s.io"
    ln -s "$tree" "$tree/.go/src/k8s.io/kubernetes"
}
