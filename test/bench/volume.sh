#!/bin/bash
# Volume manager benchmark (see volume_bench.py): builds kvolumed if needed and
# runs the benchmark in a private mount namespace, root-dir on /var/tmp.
# Usage (as root): test/bench/volume.sh [--pods 100] [--volumes 5] [--sequential 200]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/volume_bench.py" "$@"
