#!/bin/bash
# Restart and rest benchmark (see restart_bench.py): at 0, 1,000 and 10,000
# published volumes, a restart (ready, converged, calls, requests) and the
# node at rest (idle CPU, wake-ups, RSS and heap per volume).  Builds kvolumed
# if needed and runs in a private mount namespace, root-dir on /var/tmp.
# Usage (as root): test/bench/restart.sh [--levels 0,1000,10000] [--repeat 3]
#   [--idle 10] [--mount-source auto|mountinfo] [--report /var/tmp/kvolumed-restart-bench.md]
# A run to 10,000 volumes takes about 15 minutes on a loaded 2-core machine,
# most of it the warm-up (the mock driver rewrites its state file per call).
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/restart_bench.py" "$@"
