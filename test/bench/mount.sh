#!/bin/bash
# The mount path's benchmark (see mount_bench.py): a new pod's overhead beside
# 0, 1,000 and 10,000 published volumes, on the kernel's mount events and on
# the /proc/self/mountinfo fallback, in one run.  Builds kvolumed if needed
# and runs in a private mount namespace, root-dir on /var/tmp.
# With --dirty: a new pod's overhead beside a busy writer to root-dir's file
# system against the same writer to a tmpfs, under the per-file durability
# rule and the syncfs rule before it (issue 31).
# Usage (as root): test/bench/mount.sh [--levels 0,1000,10000] [--repeat 5] [--pods 20] [--trace]
#                  [--driver-state root-dir|hostpath|tmpfs]  (the mock driver's state file, see mount_bench.py)
#                  test/bench/mount.sh --dirty [--repeat 3] [--pods 20] [--dirty-rate 512] [--dirty-window 512] [--isolated]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/mount_bench.py" "$@"
