#!/bin/bash
# Runtime gate benchmark (see runtime_bench.py): the time from the container
# runtime's "the pod's sandbox stopped" (StopPodSandbox; its containers had
# exited, and the READY sandbox held the volume) to NodeUnpublishVolume, with
# GetContainerEvents and with the polling fallback, in one run.  Builds
# kvolumed if needed and runs in a private mount namespace, root-dir on /var/tmp.
# Usage (as root): test/bench/runtime.sh [--pods 100] [--modes events,polling]
set -u -o pipefail
. "$(dirname "$0")/../lib/common.sh"
require_root
install_deps
build_in "$BUILD_DIR"
exec unshare -m --propagation private "$PYTHON" "$REPO_DIR/test/bench/runtime_bench.py" "$@"
