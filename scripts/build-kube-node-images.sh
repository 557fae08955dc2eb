#!/usr/bin/env bash
# Builds the images the real node's pods run, from this machine only (Debian's mirror, the pip configuration's local
# wheels), into an OCI layout cached outside the checkout, each tagged by a hash of what it is made of, so that a
# fresh clone on the same machine reuses them: ${XDG_CACHE_HOME:-~/.cache}/airflow-distributed/kube-node-images.
#
# Usage: scripts/build-kube-node-images.sh [--push REGISTRY] [--with FRAMEWORK]...
#
#   pause     the pod sandbox: scripts/build-kube-node.sh's static pause, alone
#   busybox   Debian's busybox-static and its applet links: the XCom sidecar (sh, sleep, cat, kill)
#   trainer   Debian bookworm (debootstrap --variant=minbase) with python3, the CPU torch wheel (torch==2.13.0) and
#             this project (no dependencies: training code imports airflow_distributed.tracking only), and the
#             example training scripts at /opt/airflow-distributed/training. Three layers: the system, torch (both
#             reused while their recipe stays the same), the project (rebuilt when its sources change).
#   --with tensorflow | jax | xgboost | mxnet | paddle | paddle_ps
#             trainer-<framework>: the same system and project layers around that framework's CPU wheels (the
#             versions of pyproject.toml's extras or of scripts/framework-venv.sh) instead of torch; built only
#             when asked, as each weighs hundreds of megabytes (the slow tests ask).
#   --with horovod
#             trainer-horovod: the torch layer's wheel and Horovod's (scripts/build-horovod.sh --wheel, built against
#             that torch for Python 3.11), then Debian's openssh-server and openssh-client installed by apt in a
#             chroot of the system layer (their maintainer scripts make sshd's user and /etc/ssh/sshd_config; the
#             host keys they make are dropped, so that each pod makes its own), then the project: the launcher model's
#             image (horovodrun over SSH to the workers' sshd).
#
# With --push, each image the registry lacks (plain HTTP, e.g. 127.0.0.1:5000) is copied there. Prints one line per
# image, `<name> <reference>`; quiet otherwise unless failing. Needs root (debootstrap).
set -euo pipefail

me="scripts/build-kube-node-images.sh"
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/airflow-distributed/kube-node-images"
oci="$cache/oci"
registry=""
frameworks=()
while (($#)); do
    case "$1" in
        --push) registry="${2:?--push needs a registry}"; shift 2 ;;
        --with) frameworks+=("${2:?--with needs a framework}"); shift 2 ;;
        *) echo "$me: unknown argument $1" >&2; exit 2 ;;
    esac
done
python="${PYTHON:-python3}"
suite=bookworm
torch_requirement="torch==2.13.0"
# Each optional framework image's wheels: the versions pyproject.toml's extras and the test environment pin.
declare -A framework_requirements=(
    [tensorflow]="tensorflow-cpu==2.21.0"
    [jax]="jax==0.10.2 jaxlib==0.10.2"
    [xgboost]="xgboost-cpu==3.2.0"
    # scripts/framework-venv.sh's pins, and why: MXNet 1.9.1 uses numpy aliases NumPy 1.24 removed.
    [mxnet]="mxnet==1.9.1 numpy<1.24"
    # Paddle imports setuptools at run time without requiring it (a virtualenv has it; a --target install not).
    [paddle]="paddlepaddle==3.3.1 setuptools"
    # Paddle's parameter-server mode: the 2.6 wheels (the 3.x CPU ones lack its core), with scripts/framework-venv.sh's
    # protobuf pin for them.
    [paddle_ps]="paddlepaddle==2.6.2 protobuf==4.25.8 setuptools"
    # Horovod's wheel, found below, is added to torch's.
    [horovod]="$torch_requirement"
)
# Debian packages a framework's wheels load but do not bundle (ldd of their libraries, beyond libc and libstdc++),
# unpacked into its layer: GCC's OpenMP runtime, and for MXNet's bundled libgfortran its quad-precision maths.
declare -A framework_packages=(
    [mxnet]="libgomp1 libquadmath0"
    [paddle]="libgomp1"
    [paddle_ps]="libgomp1"
)
# Debian packages a framework's image installs with apt (in a chroot of the system layer), in a layer of their own.
declare -A framework_apt_packages=(
    [horovod]="openssh-server openssh-client"
)
for framework in "${frameworks[@]}"; do
    [[ -n "${framework_requirements[$framework]:-}" ]] \
        || { echo "$me: no image for framework $framework (one of: ${!framework_requirements[*]})" >&2; exit 2; }
done
# What the system layer is made of: changing any of it makes another tag.
system_recipe="debootstrap minbase $suite python3"

log="$(mktemp)"
work="$(mktemp -d)"
trap 'umount -q "$work/chroot" 2>/dev/null || true; rm -f "$log"; rm -rf "$work"' EXIT
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

site=usr/local/lib/python3.11/dist-packages
# wheels_layer NAME REQUIREMENTS [PACKAGES]: sets wheels_tag to the system layer plus REQUIREMENTS, resolved by pip
# as the machine's pip configuration finds them (local CPU wheels first), and the Debian PACKAGES (from the machine's
# bookworm mirror, the image's suite), reused while that recipe stays the same.
# How the wheels' bytecode is checked at import: layer_tar sets every file's mtime to 0, which leaves pip's .pyc files
# (stamped with each source's mtime at install) stale, so every process of every pod compiled torch's Python sources
# again on import (tens of seconds of CPU per process on a shared node). Hash-based .pyc files do not depend on mtimes;
# unchecked, as an image's files never change. Part of the layer's tag, so a layer built the old way is not reused.
pyc_invalidation=unchecked-hash
wheels_layer() {
    wheels_tag="$1-$(printf '%s %s%s pyc:%s' "$system_tag" "$2" "${3:+ $3}" "$pyc_invalidation" | digest)"
    has_tag "$wheels_tag" && return
    mkdir -p "$work/wheels/$site"
    if [[ -n "${3:-}" ]]; then
        mkdir -p "$work/debs"
        # shellcheck disable=SC2086 # PACKAGES is a list of package names
        (cd "$work/debs" && apt-get download $3) >"$log" 2>&1 || fail "apt-get download $3"
        for deb in "$work/debs"/*.deb; do
            dpkg-deb -x "$deb" "$work/wheels" >"$log" 2>&1 || fail "unpacking $deb"
        done
        rm -rf "$work/debs" "$work/wheels/usr/share/doc"
    fi
    # shellcheck disable=SC2086 # REQUIREMENTS is a list of requirement words
    "$python" -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
        --target "$work/wheels/$site" $2 >"$log" 2>&1 || fail "pip install $2"
    # Console scripts go to <target>/bin with the host's interpreter in their #! line: on the image's PATH instead,
    # run by its python3 (Horovod's launcher is one: horovodrun).
    local script
    for script in "$work/wheels/$site/bin"/*; do
        [[ -f "$script" ]] || continue
        mkdir -p "$work/wheels/usr/local/bin"
        sed '1s|^#!.*python.*$|#!/usr/bin/python3|' "$script" >"$work/wheels/usr/local/bin/${script##*/}"
        chmod 755 "$work/wheels/usr/local/bin/${script##*/}"
    done
    rm -rf "$work/wheels/$site/bin"
    # -f: pip's timestamp-based .pyc files look up to date to compileall; the image's python3 is the same 3.11. As
    # with pip, a file that does not compile (a package's Python 2 template, say) is only left without bytecode.
    "$python" -m compileall -q -f -j 0 --invalidation-mode "$pyc_invalidation" "$work/wheels/$site" >"$log" 2>&1 \
        || true
    add_layer "$system_tag" "$wheels_tag" "$work/wheels"
    rm -rf "$work/wheels"
}

# apt_layer BASE_TAG NAME PACKAGES: sets apt_tag to BASE_TAG plus what apt installs for PACKAGES (recommends left
# out) in a chroot of the system layer: an overlay over that system, whose upper directory becomes the layer.
apt_layer() {
    apt_tag="$2-$(printf '%s %s' "$1" "$3" | digest)"
    has_tag "$apt_tag" && return
    local lower="$work/apt-lower" upper="$work/apt-upper" chroot="$work/chroot"
    mkdir -p "$lower" "$upper" "$work/apt-overlay" "$chroot"
    umoci raw unpack --image "$oci:$system_tag" "$lower" >"$log" 2>&1 || fail "unpacking $system_tag"
    mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work/apt-overlay" "$chroot" >"$log" 2>&1 \
        || fail "mounting the overlay for $2"
    cp /etc/resolv.conf "$chroot/etc/resolv.conf"
    # The system layer's /dev is empty (the runtime makes it); apt and the maintainer scripts write to /dev/null.
    mknod -m 666 "$chroot/dev/null" c 1 3
    # No service is started in a chroot (invoke-rc.d asks policy-rc.d: 101 = not allowed).
    printf '#!/bin/sh\nexit 101\n' >"$chroot/usr/sbin/policy-rc.d"
    chmod +x "$chroot/usr/sbin/policy-rc.d"
    # shellcheck disable=SC2086 # PACKAGES is a list of package names
    { chroot "$chroot" apt-get -o Acquire::Check-Valid-Until=false update \
        && DEBIAN_FRONTEND=noninteractive chroot "$chroot" apt-get install -y --no-install-recommends $3; } \
        >"$log" 2>&1 || fail "apt-get install $3"
    umount "$chroot"
    # Removed from the upper directory only (what this layer adds or changes), so that no whiteout hides the
    # system's own: what ran the install, apt's lists and caches, logs, backups, docs, and the host keys the
    # maintainer scripts made (each pod makes its own: manifests/horovod_ssh.py's ssh-keygen -A).
    rm -rf "$upper/etc/resolv.conf" "$upper/dev/null" "$upper/usr/sbin/policy-rc.d" "$upper"/var/lib/apt/lists/* \
        "$upper"/var/cache/apt/* "$upper"/var/cache/debconf/*-old "$upper"/var/lib/dpkg/*-old "$upper"/var/log/* \
        "$upper"/etc/ssh/ssh_host_* "$upper"/usr/share/doc/* "$upper"/usr/share/man/*
    # Files apt removed are character devices (0, 0) in an overlay's upper directory; a layer spells them .wh.<name>.
    find "$upper" -type c | while read -r gone; do
        rm -f "$gone"
        : >"$(dirname "$gone")/.wh.$(basename "$gone")"
    done
    add_layer "$1" "$apt_tag" "$upper"
    rm -rf "$lower" "$upper" "$work/apt-overlay"
}

# project_layer BASE_TAG NAME: sets project_tag to BASE_TAG plus this project and the example training scripts,
# tagged by the sources themselves (so that changes not yet committed count).
project_layer() {
    local sources_digest
    sources_digest="$(cd "$root" && { echo "$1"; find pyproject.toml airflow_distributed example_dags/training \
        -type f \( -name '*.py' -o -name '*.toml' -o -name '*.typed' \) | sort | xargs sha256sum; } | digest)"
    project_tag="$2-$sources_digest"
    has_tag "$project_tag" && return
    mkdir -p "$work/project/$site" "$work/project/opt/airflow-distributed"
    # A copy of the sources without build leftovers: pip builds the wheel in the tree it is given.
    rm -rf "$work/src"
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
    add_layer "$1" "$project_tag" "$work/project"
    rm -rf "$work/project"
    umoci config --image "$oci:$project_tag" --config.cmd /usr/bin/python3 --config.workingdir / \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.env PYTHONUNBUFFERED=1 >"$log" 2>&1 || fail "configuring $project_tag"
}

# Each image: its name under airflow-distributed/ and its tag in the layout (the part after the name is the
# registry's tag).
images=()
for framework in "${frameworks[@]}"; do
    if [[ "$framework" == horovod ]]; then
        # Kept in the image cache under its own name, so that the layer's recipe (the wheel's path) is the same
        # for every checkout on this machine.
        horovod_wheel="$(bash "$root/scripts/build-horovod.sh" --wheel "$python" 2>"$log")" \
            || fail "scripts/build-horovod.sh --wheel"
        mkdir -p "$cache/wheels"
        cp -u "$horovod_wheel" "$cache/wheels/"
        framework_requirements[horovod]+=" $cache/wheels/$(basename "$horovod_wheel")"
    fi
done
wheels_layer torch "$torch_requirement"
project_layer "$wheels_tag" trainer
images+=("trainer $project_tag")
for framework in "${frameworks[@]}"; do
    wheels_layer "$framework" "${framework_requirements[$framework]}" "${framework_packages[$framework]:-}"
    if [[ -n "${framework_apt_packages[$framework]:-}" ]]; then
        apt_layer "$wheels_tag" "$framework-apt" "${framework_apt_packages[$framework]}"
        wheels_tag="$apt_tag"
    fi
    project_layer "$wheels_tag" "trainer-$framework"
    images+=("trainer-$framework $project_tag")
done

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


images=("pause $pause_tag" "busybox $busybox_tag" "${images[@]}")
for image in "${images[@]}"; do
    set -- $image
    name="airflow-distributed/$1"
    tag="${2#"$1"-}"
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
