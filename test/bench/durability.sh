#!/bin/bash
# What one operation's durable records cost (see durability_bench.py): one
# syncfs(2), as kvolumed makes them durable, against an fsync(2) of each file
# and directory, on a quiet file system and beside another writer's dirty pages.
# Usage: test/bench/durability.sh [--workdir /var/tmp] [--repeat 100] [--others 8]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
exec "$PYTHON" "$REPO_DIR/test/bench/durability_bench.py" "$@"
