#!/bin/bash
# Fetches libcurl 8.x from bookworm-backports into a private folder, for the
# tests of csi/'s connection-reuse path, without touching the system: a
# private apt source list and private state/cache dirs; the .debs are only
# unpacked (dpkg-deb -x), never installed.  Prints the directory to put in
# LD_LIBRARY_PATH; exits 1 (with the reason on stderr) when backports cannot
# be reached.
#
# usage: csi-fetch-curl8.sh [DIR]   (default: /var/tmp/kvolumed-curl8)
set -euo pipefail

dir=${1:-/var/tmp/kvolumed-curl8}
libdir=$dir/root/usr/lib/x86_64-linux-gnu
if ls "$libdir"/libcurl.so.4.* >/dev/null 2>&1; then
    echo "$libdir"
    exit 0
fi
mkdir -p "$dir"/apt/lists/partial "$dir"/apt/cache/archives/partial "$dir"/debs "$dir"/root
echo "deb http://deb.debian.org/debian bookworm-backports main" > "$dir"/apt/sources.list
apt_opts=(-o Dir::Etc::sourcelist="$dir/apt/sources.list" -o Dir::Etc::sourceparts=/nonexistent
          -o Dir::State::Lists="$dir/apt/lists" -o Dir::Cache="$dir/apt/cache"
          -o Dir::State::status=/var/lib/dpkg/status -o Debug::NoLocking=1 -o APT::Get::List-Cleanup=0)
if ! apt-get "${apt_opts[@]}" update >"$dir"/update.log 2>&1; then
    echo "bookworm-backports unreachable: $(tail -3 "$dir"/update.log)" >&2
    exit 1
fi
# libcurl4 8.x and the libraries of that version it needs beyond bookworm's.
cd "$dir"/debs
if ! apt-get "${apt_opts[@]}" download libcurl4/bookworm-backports >"$dir"/download.log 2>&1; then
    echo "cannot download libcurl4 from bookworm-backports: $(tail -3 "$dir"/download.log)" >&2
    exit 1
fi
for deb in "$dir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$dir"/root
done
ls "$libdir"/libcurl.so.4.* >/dev/null
echo "$libdir"
