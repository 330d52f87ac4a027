#!/bin/bash
# Restart benchmark (see restart_bench.py): builds kvolumed if needed and runs
# the benchmark in a private mount namespace, root-dir on /var/tmp.
# Usage (as root): test/bench/restart.sh [--pods 200] [--volumes 5] [--runs 3]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/restart_bench.py" "$@"
