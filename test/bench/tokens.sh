#!/bin/bash
# Projected token renewals (see tokens_bench.py): 1,000 pods with the
# kube-api-access volume over one hour of node time on a scaled clock; prints
# the renewal TokenRequests per second (max, median) beside kubelet's rule.
# Builds kvolumed (with test hooks) if needed and runs in a private mount
# namespace, root-dir on /var/tmp.
# Usage (as root): test/bench/tokens.sh [--pods 1000] [--scale 20]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/tokens_bench.py" "$@"
