"""kvolumed against the benchmarks' grpc-go driver (test/bench/godriver/,
`test/bench/mount.sh --driver go`): a CSI driver in Go, as most real ones
are, that mounts a tmpfs at the target on NodePublishVolume and takes it
away on NodeUnpublishVolume, keeps a state file and logs its calls as the
Python mock does.  An inline volume of a pod is published to it, mounted,
then unpublished and gone with the pod: the figures the benchmarks take
with it are of a driver that works.  Built offline from Debian's Go
packages (installed when missing, as the interop tests do); skipped, with
the reason, only when they cannot be installed."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from benchlib import CallLogTail, go_driver_binary  # noqa: E402

GO_DRIVER = "go.csi.kvolumed.io"
TMPFS_MAGIC = 0x01021994


@pytest.fixture
def go_driver(tmp_path):
    try:
        binary = go_driver_binary()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        pytest.skip(f"the Go driver cannot be built here: {e}")
    sockdir = tempfile.mkdtemp(prefix="kvgo", dir="/tmp")  # a socket path has 107 bytes at most
    state = tmp_path / "go-driver"
    proc = subprocess.Popen([binary, "-endpoint", f"{sockdir}/csi.sock", "-name", GO_DRIVER,
                             "-state-dir", str(state)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("READY"), proc.stderr.read()
    yield {"endpoint": f"unix://{sockdir}/csi.sock", "state": state, "calls": CallLogTail(str(state / "calls.jsonl"))}
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(sockdir, ignore_errors=True)


def test_an_inline_volume_is_published_to_a_go_driver_and_goes_with_its_pod(volume_env, go_driver):
    env = volume_env
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": GO_DRIVER},
                    "spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    env.start(extra=f'[driver "{GO_DRIVER}"]\nendpoint = {go_driver["endpoint"]}\n')
    pod = env.pod("go", [{"name": "scratch", "csi": {"driver": GO_DRIVER}}])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    assert _fs_magic(target) == TMPFS_MAGIC
    published = go_driver["calls"].wait(0, "NodePublishVolume", 1, 10)
    assert published[0]["time"] > 0 and published[0]["code"] == "OK"
    state = json.loads((go_driver["state"] / "state.json").read_text())
    assert list(state["published"]) == [target]

    env.api.remove("pods", "default", "go")
    # The driver removes the target; kvolumed, after the call, the volume dir.
    env.wait_gone(os.path.dirname(target))
    go_driver["calls"].wait(0, "NodeUnpublishVolume", 1, 10)
    assert json.loads((go_driver["state"] / "state.json").read_text())["published"] == {}


def _fs_magic(path):
    """statfs(2)'s f_type, which os.statvfs does not give."""
    out = subprocess.run(["stat", "-f", "-c", "%t", path], capture_output=True, text=True, check=True).stdout
    return int(out.strip(), 16)
