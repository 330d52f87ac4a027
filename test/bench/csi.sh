#!/bin/bash
# CSI client benchmark (see bench_csi.py): kvolumed's client against Python
# grpcio, 10,000 NodePublishVolume calls sequentially and at 64 in flight.
# Usage (as root): test/bench/csi.sh [--count 10000] [--parallel 64]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
KVOLUMED_BUILD_DIR="$BUILD_DIR" exec "$PYTHON" "$REPO_DIR/test/bench/bench_csi.py" "$@"
