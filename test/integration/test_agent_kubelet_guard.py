"""A kubelet still running on kvolumed's root-dir (issue 34 item 5): two
volume managers would mount and unmount the same volumes.  kubelet takes no
lock there, but every kubelet listens on <root-dir>/pod-resources/kubelet.sock
(and the device manager on <root-dir>/device-plugins/kubelet.sock for the
default root-dir).  The "kubelet" here is a process of the test's namespace
named kubelet that listens where kubelet does; what a stopped kubelet leaves
(the socket file, nothing listening) must not stop kvolumed."""
import os
import socket
import subprocess
import sys

import pytest

from integration.agent_fixtures import DRIVER, write_config

EXIT_CONFIG_ERROR = 1

# A listener whose /proc/PID/comm is "kubelet", as the real one's.
FAKE_KUBELET = r"""
import ctypes, os, socket, sys
ctypes.CDLL(None).prctl(15, b"kubelet", 0, 0, 0)   # PR_SET_NAME
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(16)
print("listening", flush=True)
sys.stdin.read()
"""


class FakeKubelet:
    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-c", FAKE_KUBELET, path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "listening\n"

    def stop(self):
        """As a stopped kubelet: the socket file stays, nothing listens."""
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def run_second(env, kvolumed_bin):
    config = write_config(env.tmp_path / "guard.conf", env.root, env.api.kubeconfig_path,
                          f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n')
    return subprocess.run([kvolumed_bin, "--config", config], env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)


@pytest.mark.parametrize("where", ["pod-resources/kubelet.sock", "device-plugins/kubelet.sock"])
def test_a_kubelet_serving_on_root_dir_is_refused(volume_env, kvolumed_bin, where):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    kubelet = FakeKubelet(os.path.join(env.root, where))
    try:
        r = run_second(env, kvolumed_bin)
        # Exit 1: the unit's RestartPreventExitStatus, no restart loop.
        assert r.returncode == EXIT_CONFIG_ERROR, r.stderr
        # Which root-dir, which socket, which process, and what to do.
        assert f"A kubelet is running on root-dir {env.root}: pid {kubelet.proc.pid}, kubelet answers on " \
               f"{env.root}/{where}" in r.stderr, r.stderr
        assert "Stop kubelet first" in r.stderr and "Handing a node over" in r.stderr, r.stderr
        # It touched nothing: no driver call, no request to the API server
        # beyond what precedes the root-dir lock, no record under root-dir.
        assert env.driver.calls() == []
        assert not os.path.exists(os.path.join(env.root, "kvolumed", "pods"))
    finally:
        kubelet.stop()


def test_what_a_stopped_kubelet_leaves_does_not_hold_kvolumed(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    path = os.path.join(env.root, "pod-resources", "kubelet.sock")
    FakeKubelet(path).stop()
    assert os.path.exists(path)
    with pytest.raises(ConnectionRefusedError):
        socket.socket(socket.AF_UNIX).connect(path)
    agent = env.start()
    agent.wait_for_log("Ready: volumes on disk reconstructed", timeout=60)
    assert agent.proc.poll() is None
