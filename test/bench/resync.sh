#!/bin/bash
# The safety-net resync's benchmark (see resync_bench.py): the spread of new
# pods' overheads beside 10,000 published volumes, created one after the
# other across several resyncs.  Builds kvolumed if needed and runs in a
# private mount namespace, root-dir on /var/tmp.
# Usage (as root): test/bench/resync.sh [--level 10000] [--pods 1000] [--resync 30s]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/resync_bench.py" "$@"
