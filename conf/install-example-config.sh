#!/bin/sh
# meson install script: puts the example configuration in place only when
# there is none, so that reinstalling never overwrites an operator's file.
# usage: install-example-config.sh SOURCE CONFIGDIR   (honours $DESTDIR)
set -eu
src=$1
dir=${DESTDIR:-}$2
mkdir -p "$dir"
if [ -e "$dir/kvolumed.conf" ]; then
        echo "Keeping the existing $dir/kvolumed.conf (the example is in the documentation directory)"
else
        install -m 0644 "$src" "$dir/kvolumed.conf"
        echo "Installing $src to $dir/kvolumed.conf"
fi
