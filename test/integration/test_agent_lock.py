"""One kvolumed per root-dir (DESIGN.md §3, issue 20 item 10): a second
instance on the same root-dir (an operator debugging in the foreground, with
metrics off) refuses to start, names the holder's PID, exits with the
configuration-error code (1: the unit's RestartPreventExitStatus, so systemd
does not loop) and touches nothing: no CSI call, no API write."""
import os
import signal
import subprocess

from integration.agent_fixtures import DRIVER, wait_until, write_config

EXIT_CONFIG_ERROR = 1


def inline(name):
    return {"name": name, "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1Mi"}}}


def test_a_second_kvolumed_on_the_same_root_dir_refuses_to_start(volume_env, kvolumed_bin, mock_csi_factory):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    first = env.start()
    first.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
    pod = env.pod("web", [inline("scratch")])
    env.wait_mounted(env.target(pod, "scratch"))

    # The operator's copy, in the foreground, on the same root-dir.  It has
    # an identity and a driver socket of its own, so that whatever it would
    # do is told apart from what the first one does meanwhile.
    own_driver = mock_csi_factory(name=DRIVER, tmpfs=True)
    config = write_config(env.tmp_path / "debug.conf", env.root, env.api.kubeconfig_path,
                          f'[driver "{DRIVER}"]\nendpoint = {own_driver.endpoint}\n')
    second = subprocess.run([kvolumed_bin, "--config", config],
                            env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, timeout=60)
    assert second.returncode == EXIT_CONFIG_ERROR, second.stderr
    assert f"PID {first.proc.pid}" in second.stderr, second.stderr
    assert env.root in second.stderr, second.stderr
    # It called no driver and asked nothing of the API server; the first runs on.
    assert own_driver.calls() == []
    node_user = "system:node:test-node"
    assert [r for r in env.api.requests() if r["user"] != node_user] == []
    assert first.proc.poll() is None
    assert os.path.ismount(env.target(pod, "scratch"))


def test_the_lock_goes_with_the_process(volume_env):
    """Held for the process's life, by it alone: a SIGKILL releases it even
    while an fsGroup walk's child is stuck in a file system that does not
    answer (the child must not inherit it), and so does a clean stop."""
    from integration.test_volume_hostile import DeadFuse, children_of
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"], fsGroupPolicy="File")
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    first = env.start()
    stuck = env.pod("stuck", [inline("v")], security_context={"fsGroup": 2000})
    env.driver.control.wait_hung("NodePublishVolume", timeout=30)
    fuse = DeadFuse(env.target(stuck, "v"))
    try:
        env.driver.control.release("NodePublishVolume")
        walker = wait_until(lambda: children_of(first.proc.pid), 30, what="the fsGroup walk's child")[0][0]
        first.signal(signal.SIGKILL)
        first.wait()
        assert os.path.exists(f"/proc/{walker}"), "the child must still be stuck for this test"
        second = env.start()
        second.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
        assert second.proc.poll() is None
    finally:
        fuse.close()
    second.stop()
    assert second.proc.returncode == 0
    third = env.start()
    third.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
    assert third.proc.poll() is None
    env.api.remove("pods", "default", "stuck")
    env.wait_gone(env.target(stuck, "v"), timeout=60)
