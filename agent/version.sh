#!/bin/sh
# Prints the build's version or commit, for meson's vcs_tag() (agent/meson.build)
# and for test/package, which puts the same version in debian/changelog.
#
# usage: version.sh SOURCE_DIR BASE_VERSION version|commit
#
# The version orders as the commits do, for dpkg and apt as for a reader:
#   <base>+git<YYYYMMDD>.<HHMMSS>.<commit>    e.g. 0.1.0+git20261128.050245.917b4578fabc
# from the commit's own date (UTC), so that the same commit always gives the
# same version, a later commit a greater one (dpkg --compare-versions), and a
# snapshot of <base> sorts after <base> and before the next release.  The
# commit is "git describe"'s hash (12 digits), "-dirty" when the tree has
# changes that no commit holds.
#
# A tree without .git (test/package's copy, a release tarball) carries the
# two values in SOURCE_DIR/.kvolumed-version ("version=..." and "commit=..."
# lines), written by whoever copied it; without either, the version is
# <base> and the commit "unknown".
set -eu
src=$1 base=$2 what=$3

version=$base
commit=unknown
if [ -f "$src/.kvolumed-version" ]; then
        version=$(sed -n 's/^version=//p' "$src/.kvolumed-version")
        commit=$(sed -n 's/^commit=//p' "$src/.kvolumed-version")
# Only the tree's own repository: a tarball unpacked inside another
# repository's work tree must not take that one's commit.
elif top=$(git -C "$src" rev-parse --show-toplevel 2>/dev/null) &&
     [ "$(cd "$top" && pwd -P)" = "$(cd "$src" && pwd -P)" ]; then
        commit=$(git -C "$src" describe --always --dirty --abbrev=12 --match=kvolumed-no-such-tag)
        stamp=$(TZ=UTC0 git -C "$src" log -1 --format=%cd --date=format-local:%Y%m%d.%H%M%S HEAD)
        version=$base+git$stamp.$(git -C "$src" rev-parse --short=12 HEAD)
fi

case $what in
version) echo "$version" ;;
commit) echo "$commit" ;;
*) echo "usage: version.sh SOURCE_DIR BASE_VERSION version|commit" >&2; exit 2 ;;
esac
