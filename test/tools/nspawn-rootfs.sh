#!/bin/bash
# Builds (once) the minimal Debian 12 root file system the real-systemd test
# boots with systemd-nspawn: debootstrap minbase plus systemd, D-Bus, procps
# (for /bin/kill of ExecReload=) and the shared libraries kvolumed links.
# The result is cached under a directory named by ROOTFS_VERSION: change
# the version when the package list changes.  Prints the directory; exits 1
# with the reason on stderr when the mirror cannot be reached.
#
# usage: nspawn-rootfs.sh [CACHE_DIR]   (default: /var/tmp/kvolumed-nspawn-rootfs)
set -euo pipefail

ROOTFS_VERSION=1
cache=${1:-/var/tmp/kvolumed-nspawn-rootfs}
dir=$cache/v$ROOTFS_VERSION
if [ -f "$dir/.complete" ]; then
    echo "$dir"
    exit 0
fi
# Concurrent test runs build it once: the second waits for the first.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -f "$dir/.complete" ]; then
    echo "$dir"
    exit 0
fi
# The mirror apt uses on this machine.
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
# kvolumed's shared libraries are listed: bump ROOTFS_VERSION when it links a new one.
packages=systemd,systemd-sysv,dbus,procps,libcurl4,libcjson1,libprotobuf-c1,libmount1,libudev1,libinih1,libssl3,libmicrohttpd12,libyaml-0-2
rm -rf "$dir" "$dir.tmp"
if ! debootstrap --variant=minbase --include="$packages" bookworm "$dir.tmp" "$mirror" >"$cache/debootstrap.log" 2>&1; then
    echo "debootstrap of bookworm from $mirror failed (no network to the mirror?): $(tail -3 "$cache/debootstrap.log")" >&2
    rm -rf "$dir.tmp"
    exit 1
fi
# Used as the read-only lower layer of an overlay per test: each boot makes up
# its own machine ID.
rm -f "$dir.tmp/etc/machine-id"
echo kvolumed-test > "$dir.tmp/etc/hostname"
touch "$dir.tmp/.complete"
mv "$dir.tmp" "$dir"
echo "$dir"
