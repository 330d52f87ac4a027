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
        apt_get_waiting update -qq || die "apt-get update failed"
        apt_get_waiting install -y -qq --no-install-recommends "${missing[@]}" ||
                die "apt-get install failed for: ${missing[*]}"
}

# apt-get that waits (up to APT_LOCK_WAIT seconds, default 10 minutes) for
# another apt-get to release its locks (unattended-upgrades, apt-daily, an
# operator) instead of failing at once.  DPkg::Lock::Timeout makes apt wait
# for dpkg's locks (apt-get install takes the frontend lock first, for its
# whole run); the package lists' lock that apt-get update takes has no such
# option in apt 2.6, so a run refused by a held lock is tried again.
apt_get_waiting() {
        local wait=${APT_LOCK_WAIT:-600} err said=
        local deadline=$((SECONDS + wait))
        while :; do
                err=$(apt-get -o DPkg::Lock::Timeout="$wait" "$@" 2>&1 >/dev/null) && return 0
                if ! grep -q -e 'Could not get lock' -e 'Unable to lock' <<<"$err" || [ "$SECONDS" -ge "$deadline" ]; then
                        printf '%s\n' "$err" >&2
                        return 1
                fi
                [ -n "$said" ] || say "another apt-get holds its lock; waiting for it"
                said=1
                sleep 2
        done
}

# meson setup once, then ninja; "dir" and extra meson options.  The tests'
# builds read the KVOLUMED_TEST_* switches (-Dtest-hooks=true) unless the
# options say otherwise; a directory set up before the option existed, or
# without it, is switched on too.
build_in() {
        local dir=$1; shift
        local hooks=-Dtest-hooks=true
        case " $* " in *" -Dtest-hooks="*) hooks= ;; esac
        if [ ! -f "$dir/build.ninja" ]; then
                meson setup "$dir" "$REPO_DIR" $hooks "$@" >"$dir.setup.log" 2>&1 ||
                        { cat "$dir.setup.log" >&2; die "meson setup failed"; }
                rm -f "$dir.setup.log"
        elif [ -n "$hooks" ] && ! grep -q '"name": "test-hooks", "value": true' "$dir/meson-info/intro-buildoptions.json" 2>/dev/null; then
                # --reconfigure: "meson configure" refuses an option its
                # directory was set up without.
                meson setup --reconfigure "$dir" "$REPO_DIR" $hooks >/dev/null ||
                        die "meson setup --reconfigure $hooks failed in $dir"
        fi
        ninja -C "$dir" >/dev/null || { ninja -C "$dir" >&2; die "build failed in $dir"; }
}

# The daemon's integration tests that test/check runs again under ASan+UBSan
# (test/lib/asan-slice.txt, one pytest node id per line, relative to the
# repository); test/asan runs all of them.
asan_slice() {
        sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e "s#^#$REPO_DIR/#" "$REPO_DIR/test/lib/asan-slice.txt"
}
