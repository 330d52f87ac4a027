#!/bin/bash
# The runtime gate against a real containerd (see containerd_bench.py): builds
# kvolumed if needed and runs the benchmark in a private mount namespace,
# root-dir on /var/tmp.
# Usage (as root): test/bench/containerd.sh [--pods 20] [--hold 2] [--seed 1]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/containerd_bench.py" "$@"
