#!/bin/bash
# A pod's non-CSI volumes (see podvolumes_bench.py): an ordinary pod
# (kube-api-access projected volume, a configMap, a disk emptyDir, one
# inline CSI volume) against a CSI-only pod, from creation in the API to
# the local API's wait=mounted 200; and a configMap update to the new
# content at the host path the runner binds.  Builds kvolumed if needed and
# runs in a private mount namespace, root-dir on /var/tmp (a disk file
# system, never a tmpfs).
# Usage (as root): test/bench/podvolumes.sh [--repeat 20] [--workdir /var/tmp]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/podvolumes_bench.py" "$@"
