#!/usr/bin/env bash
# Builds the images the real node's pods run, from this machine only (Debian's mirror, the pip configuration's local
# wheels), into an OCI layout cached outside the checkout, each tagged by a hash of what it is made of, so that a
# fresh clone on the same machine reuses them: ${XDG_CACHE_HOME:-~/.cache}/airflow-distributed/kube-node-images.
#
# Usage: scripts/build-kube-node-images.sh [--push REGISTRY]
#
#   pause     the pod sandbox: scripts/build-kube-node.sh's static pause, alone
#   busybox   Debian's busybox-static and its applet links: the XCom sidecar (sh, sleep, cat, kill)
#   trainer   Debian bookworm (debootstrap --variant=minbase) with python3, the CPU torch wheel (torch==2.13.0) and
#             this project (no dependencies: training code imports airflow_distributed.tracking only), and the
#             example training scripts at /opt/airflow-distributed/training. Three layers: the system, torch (both
#             reused while their recipe stays the same), the project (rebuilt when its sources change).
#
# With --push, each image the registry lacks (plain HTTP, e.g. 127.0.0.1:5000) is copied there. Prints one line per
# image, `<name> <reference>`; quiet otherwise unless failing. Needs root (debootstrap).
set -euo pipefail

me="scripts/build-kube-node-images.sh"
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-distributed/kube-node-images"
oci="$cache/oci"
registry=""
[[ "${1:-}" == "--push" ]] && registry="${2:?--push needs a registry}"
python="${PYTHON:-python3}"
suite=bookworm
torch_requirement="torch==2.13.0"
# What the system layer is made of: changing any of it makes another tag.
system_recipe="debootstrap minbase $suite python3"

log="$(mktemp)"
work="$(mktemp -d)"
trap 'rm -f "$log"; rm -rf "$work"' EXIT
fail() {
    echo "$me: $1 failed; its output:" >&2
    tail -n 100 "$log" >&2
    exit 1
}
[[ "$(id -u)" == 0 ]] || { echo "$me: needs root (debootstrap, image files owned by root)" >&2; exit 1; }
# pip installs for the image's Python (bookworm's 3.11): the interpreter that runs it must be a 3.11 too.
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || { echo "$me: PYTHON=$python is not a Python 3.11, the trainer image's (Debian $suite)" >&2; exit 1; }
node_bin="$(bash "$root/scripts/build-kube-node.sh" --print-bin-dir)"

digest() { sha256sum | cut -c1-16; }
has_tag() { umoci ls --layout "$oci" 2>/dev/null | grep -qx "$1"; }
# layer_tar DIR TAR: DIR's contents as an uncompressed layer, owned by root, without timestamps' noise.
layer_tar() {
    tar -C "$1" --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -cf "$2" . >"$log" 2>&1 \
        || fail "archiving $1"
}
# add_layer FROM_TAG TO_TAG DIR: a new tag, FROM_TAG's layers plus DIR's contents.
add_layer() {
    layer_tar "$3" "$work/layer.tar"
    umoci raw add-layer --image "$oci:$1" --tag "$2" --history.created_by "$me" "$work/layer.tar" >"$log" 2>&1 \
        || fail "adding a layer to $2"
    rm -f "$work/layer.tar"
}

mkdir -p "$cache"
exec 9>"$cache.lock"
flock 9
[[ -d "$oci" ]] || umoci init --layout "$oci" >"$log" 2>&1 || fail "umoci init"
if ! has_tag empty; then
    umoci new --image "$oci:empty" >"$log" 2>&1 || fail "umoci new"
fi

# busybox
busybox_tag="busybox-$(digest </bin/busybox)"
if ! has_tag "$busybox_tag"; then
    r="$work/busybox"
    mkdir -p "$r/bin" "$r/tmp" "$r/etc"
    chmod 1777 "$r/tmp"
    cp /bin/busybox "$r/bin/busybox"
    for applet in $(/bin/busybox --list); do [[ -e "$r/bin/$applet" ]] || ln -s busybox "$r/bin/$applet"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
    add_layer empty "$busybox_tag" "$r"
    umoci config --image "$oci:$busybox_tag" --config.cmd /bin/sh --config.env PATH=/bin >"$log" 2>&1 \
        || fail "configuring $busybox_tag"
fi

# trainer: the system layer
system_tag="system-$(echo "$system_recipe" | digest)"
if ! has_tag "$system_tag"; then
    mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    r="$work/system"
    debootstrap --variant=minbase --include=python3 "$suite" "$r" "${mirror:-http://deb.debian.org/debian}" \
        >"$log" 2>&1 || fail "debootstrap"
    # The runtime makes /dev, /proc and /sys; apt's caches and the docs only weigh.
    rm -rf "$r"/dev/* "$r"/proc/* "$r"/sys/* "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* \
        "$r"/usr/share/doc/* "$r"/usr/share/man/* "$r"/usr/share/locale/*
    add_layer empty "$system_tag" "$r"
    rm -rf "$r"
fi

# trainer: the torch layer, resolved by pip as the machine's pip configuration finds it (a local CPU wheel)
site=usr/local/lib/python3.11/dist-packages
torch_tag="torch-$(printf '%s %s' "$system_tag" "$torch_requirement" | digest)"
if ! has_tag "$torch_tag"; then
    mkdir -p "$work/torch/$site"
    "$python" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
        --target "$work/torch/$site" "$torch_requirement" >"$log" 2>&1 || fail "pip install $torch_requirement"
    # Console scripts go to <target>/bin with the host's interpreter in their #! line: none is needed.
    rm -rf "$work/torch/$site/bin"
    add_layer "$system_tag" "$torch_tag" "$work/torch"
    rm -rf "$work/torch"
fi

# trainer: the project layer, tagged by its sources
# (the files themselves, so that changes not yet committed count)
sources_digest="$(cd "$root" && { echo "$torch_tag"; find pyproject.toml airflow_distributed example_dags/training \
    -type f \( -name '*.py' -o -name '*.toml' -o -name '*.typed' \) | sort | xargs sha256sum; } | digest)"
trainer_tag="trainer-$sources_digest"
if ! has_tag "$trainer_tag"; then
    mkdir -p "$work/project/$site" "$work/project/opt/airflow-distributed"
    # A copy of the sources without build leftovers: pip builds the wheel in the tree it is given.
    mkdir -p "$work/src"
    (cd "$root" && cp -r pyproject.toml README.md LICENSE airflow_distributed "$work/src/") >"$log" 2>&1 \
        || fail "copying the project's sources"
    find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps \
        --no-warn-script-location --target "$work/project/$site" "$work/src" >"$log" 2>&1 \
        || fail "pip install of the project"
    rm -rf "$work/project/$site/bin"
    cp -r "$root/example_dags/training" "$work/project/opt/airflow-distributed/training"
    find "$work/project" -name __pycache__ -prune -exec rm -rf {} +
    add_layer "$torch_tag" "$trainer_tag" "$work/project"
    umoci config --image "$oci:$trainer_tag" --config.cmd /usr/bin/python3 --config.workingdir / \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.env PYTHONUNBUFFERED=1 >"$log" 2>&1 || fail "configuring $trainer_tag"
fi

# pause
[[ -x "$node_bin/pause" ]] || { echo "$me: no $node_bin/pause: run scripts/build-kube-node.sh" >&2; exit 1; }
pause_tag="pause-$(digest <"$node_bin/pause")"
if ! has_tag "$pause_tag"; then
    mkdir -p "$work/pause"
    cp "$node_bin/pause" "$work/pause/pause"
    add_layer empty "$pause_tag" "$work/pause"
    # 65535: the unprivileged user upstream's pause image runs as.
    umoci config --image "$oci:$pause_tag" --config.entrypoint /pause --config.user 65535:65535 >"$log" 2>&1 \
        || fail "configuring $pause_tag"
fi


for image in "pause $pause_tag" "busybox $busybox_tag" "trainer $trainer_tag"; do
    set -- $image
    name="airflow-distributed/$1"
    tag="${2#*-}"
    if [[ -n "$registry" ]]; then
        if ! curl -sf -o /dev/null -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
            "http://$registry/v2/$name/manifests/$tag"; then
            skopeo copy --quiet --dest-tls-verify=false "oci:$oci:$2" "docker://$registry/$name:$tag" >"$log" 2>&1 \
                || fail "pushing $name:$tag to $registry"
        fi
        echo "$1 $registry/$name:$tag"
    else
        echo "$1 $oci:$2"
    fi
done
