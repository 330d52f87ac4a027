#!/bin/bash
# What one operation's durable records cost (see durability_bench.py): one
# syncfs(2), the rule before issue 31, against what kvolumed does, an
# fdatasync/fsync of each file and changed directory, on a quiet file system
# and beside a steady writer of hundreds of MiB that never syncs.
# Usage: test/bench/durability.sh [--workdir /var/tmp] [--repeat 100] [--rate 512] [--window 512] [--isolated]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
exec "$PYTHON" "$REPO_DIR/test/bench/durability_bench.py" "$@"
