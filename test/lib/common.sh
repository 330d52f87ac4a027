# Shared by test/check and test/demo: set-up on a fresh Debian 12 machine.
# Sourced, not run.

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD_DIR=${KVOLUMED_BUILD_DIR:-$REPO_DIR/build}
ASAN_BUILD_DIR=$REPO_DIR/build-asan
# Debian's interpreter: the test doubles use Debian's python3-* modules, and
# another python3 may come first on PATH.
PYTHON=/usr/bin/python3

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_root() {
        [ "$(id -u)" = 0 ] || die "run as root: the tests mount file systems and use loop devices"
}

# Installs every Debian package named in test/deps/*.txt that is missing.
install_deps() {
        local missing=() pkg
        for pkg in $(sed -e 's/#.*//' "$REPO_DIR"/test/deps/*.txt | sort -u); do
                dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing+=("$pkg")
        done
        # Any kubectl will do for the fidelity tests; Debian's comes with kubernetes-client.
        command -v kubectl >/dev/null || missing+=(kubernetes-client)
        [ ${#missing[@]} -eq 0 ] && return 0
        say "installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null || die "apt-get update failed"
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
                die "apt-get install failed for: ${missing[*]}"
}

# meson setup once, then ninja; "dir" and extra meson options.
build_in() {
        local dir=$1; shift
        if [ ! -f "$dir/build.ninja" ]; then
                meson setup "$dir" "$REPO_DIR" "$@" >"$dir.setup.log" 2>&1 ||
                        { cat "$dir.setup.log" >&2; die "meson setup failed"; }
                rm -f "$dir.setup.log"
        fi
        ninja -C "$dir" >/dev/null || { ninja -C "$dir" >&2; die "build failed in $dir"; }
}
