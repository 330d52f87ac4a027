#!/bin/bash
# kvolumed's memory at rest beside published volumes (see memory_bench.py):
# RSS, PSS, anonymous memory and each library's share, median of repeats,
# each build of --builds in turn in one run (before/after).  Runs in a
# private mount namespace, root-dir on /var/tmp.
# Usage (as root): test/bench/memory.sh --builds before=DIR,after=DIR [--level 1000] [--repeat 5]
#   [--pods 3] [--idle 10] [--report /var/tmp/kvolumed-memory-bench.md]
# Build a release binary to measure what a package ships:
#   meson setup build-rel -Dtest-hooks=false --buildtype=release && ninja -C build-rel
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/memory_bench.py" "$@"
