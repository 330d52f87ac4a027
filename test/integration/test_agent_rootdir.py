"""root-dir is the path, not the directory found there at start (issue 29,
items 2 and 3).

A file system mounted over root-dir after kvolumed started (a node's data
disk mounted at /var/lib/kubelet by a unit not ordered before kvolumed), the
directory renamed away and made again, or a symlink in its path changed: a
second kvolumed with the same configuration must still be refused (one
kvolumed per root-dir: two would both call NodePublishVolume for one new
pod), and the running one must notice that root-dir no longer names the
directory it locked and act on nothing until it does again (its records
would go to the old directory while its CSI paths named the new one).

With a symlink in root-dir's path, kvolumed uses the resolved path, as the
kernel names mounts: the unstage guard and NOT_FOUND's "is the target still
a mount point" read the mount table under that name."""
import json
import os
import subprocess
import time

import pytest

from integration.agent_fixtures import DRIVER, REPO_DIR, build_dir, wait_until, write_config
from integration.test_agent_metrics import get, metrics_config, SERVING
from integration.test_volume_restart import claim_volume, held_or_unstaged, mounts_under, shared_pv

EXIT_CONFIG_ERROR = 1
LOST = "kvolumed stopped acting on volumes"
REGAINED = "is the directory kvolumed locked at start again: acting on volumes again"


def inline(name):
    return {"name": name, "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1Mi"}}}


def symlinked_root(env):
    """root-dir configured through a symlink: <tmp>/link -> <tmp>/real."""
    real = str(env.tmp_path / "real")
    os.makedirs(real)
    link = str(env.tmp_path / "link")
    os.symlink(real, link)
    env.root = link
    return real


def retarget(link, target):
    """Points the symlink elsewhere in one step, as a deployment tool does."""
    tmp = link + ".tmp"
    os.symlink(target, tmp)
    os.rename(tmp, link)


def volumes(address):
    status, _, body = get(address, "/volumes")
    assert status == 200, body
    return json.loads(body)


def wait_status(notify, prefix, timeout=30.0):
    """The latest STATUS= line starting with prefix, waiting for one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for m in notify.messages for line in m.split("\n") if line.startswith("STATUS=")]
        if lines and lines[-1].startswith(prefix):
            return lines[-1]
        notify.drain(0.2)
    raise AssertionError(f"no STATUS= starting with {prefix!r} within {timeout}s: {notify.messages[-5:]}")


def run_second(env, kvolumed_bin, driver):
    """The operator's copy, in the foreground, with the same root-dir and a
    driver socket of its own, so that whatever it would do is told apart."""
    config = write_config(env.tmp_path / "second.conf", env.root, env.api.kubeconfig_path,
                          f'[driver "{DRIVER}"]\nendpoint = {driver.endpoint}\n')
    try:
        return subprocess.run([kvolumed_bin, "--config", config],
                              env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"a second kvolumed ran on {env.root}: {e.stderr}") from None


# How root-dir stops being the directory kvolumed locked, how it is undone, and
# what kvolumed says about it.
def mount_over(env, real):
    assert os.system(f"mount -t tmpfs over-root-dir {env.root}") == 0


def unmount(env, real):
    assert os.system(f"umount {env.root}") == 0


def rename_away(env, real):
    os.rename(env.root, env.root + ".old")
    os.mkdir(env.root, 0o750)


def rename_back(env, real):
    os.rmdir(env.root)
    os.rename(env.root + ".old", env.root)


def link_elsewhere(env, real):
    os.makedirs(real + "2")
    retarget(env.root, real + "2")


def link_back(env, real):
    retarget(env.root, real)


# A check between the rename and the mkdir finds no root-dir at all.
CHANGES = {
    "mounted-over": (mount_over, unmount, ("is another file system's directory now",)),
    "renamed-and-made-again": (rename_away, rename_back, ("is another directory now",
                                                          "cannot be resolved any more")),
    "symlink-changed": (link_elsewhere, link_back, ("resolves to",)),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_root_dir_replaced_keeps_a_second_kvolumed_out_and_stops_the_first(
        volume_env, kvolumed_bin, mock_csi_factory, notify_socket, change):
    env = volume_env
    breaks, restores, said = CHANGES[change]
    real = symlinked_root(env) if change == "symlink-changed" else env.root
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    first = env.agent = env.start_agent(metrics_config(env, "127.0.0.1:0"), notify=notify_socket)
    first.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
    address = SERVING.search(first.output()).group(1)
    web = env.pod("web", [inline("scratch")])
    env.wait_mounted(env.target(web, "scratch"))
    env.wait_calls("NodePublishVolume")
    wait_status(notify_socket, "STATUS=Running on node")

    breaks(env, real)
    try:
        # A second kvolumed with the same configuration is refused, names the
        # first, and does nothing: the path is still the first one's.
        own_driver = mock_csi_factory(name=DRIVER, tmpfs=True)
        second = run_second(env, kvolumed_bin, own_driver)
        assert second.returncode == EXIT_CONFIG_ERROR, second.stderr
        assert f"in use by another kvolumed (PID {first.proc.pid})" in second.stderr, second.stderr
        assert own_driver.calls() == []

        # The first one notices (a mount event, its next pass, or its check
        # every few seconds), says so once, loudly, and fails /healthz.
        first.wait_for_log(LOST, timeout=30)
        assert any(reason in first.output() for reason in said), first.output()[-3000:]
        status, _, body = get(address, "/healthz")
        assert status == 503 and "not acting on volumes" in body, (status, body)
        wait_status(notify_socket, "STATUS=Not acting on volumes: root-dir")

        # The first acts on nothing meanwhile: a pod that goes is not torn
        # down, a new one is not set up, no pass looks at anything.
        before = volumes(address)
        calls = len(env.calls())
        env.api.remove("pods", "default", "web")
        wait_until(lambda: volumes(address)["pods"] == 0, timeout=15, what="the deletion seen")
        late = env.pod("late", [inline("late")])
        wait_until(lambda: volumes(address)["pods"] == 1, timeout=15, what="the new pod seen")
        after = volumes(address)
        assert after["visited"] == before["visited"], "a pass ran while root-dir was not kvolumed's"
        assert len(env.calls()) == calls, env.calls()[calls:]
        # Nothing was made in what is at root-dir's path now, by either.
        assert os.listdir(env.root) == []
        assert LOST in first.output() and first.output().count(LOST) == 1
    finally:
        restores(env, real)

    # root-dir is its directory again: it goes on by itself.
    first.wait_for_log(REGAINED, timeout=30)
    wait_until(lambda: get(address, "/healthz")[::2] == (200, "ok"), timeout=15, what="/healthz ok again")
    env.wait_mounted(env.target(late, "late"), timeout=30)
    env.wait_gone(os.path.dirname(env.target(web, "scratch")), timeout=30)
    wait_status(notify_socket, "STATUS=Running on node")
    assert first.proc.poll() is None
    assert not env.driver.violations()
    first.stop()
    assert first.proc.returncode == 0, first.output()[-3000:]


def test_a_stop_while_root_dir_is_not_its_own_holds_nothing_back(volume_env):
    """An operation held at its next step (its NodePublishVolume answered
    after root-dir was mounted over) does not keep a stopping kvolumed
    waiting: it ends where it is, its intent record saying what may exist."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    agent = env.start()
    agent.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
    env.pod("web", [inline("scratch")])
    env.driver.control.wait_hung("NodePublishVolume", timeout=30)
    mount_over(env, env.root)
    try:
        agent.wait_for_log(LOST, timeout=30)
        env.driver.control.release("NodePublishVolume")
        agent.wait_for_log("Holding the publish of", timeout=30)
        agent.signal(15)
        assert agent.wait(timeout=30) == 0
        assert "Leaving the publish of" in agent.output()
    finally:
        unmount(env, env.root)
    # The next start finds what the held publish left and takes it up.
    agent = env.start()
    agent.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
    env.api.remove("pods", "default", "web")
    wait_until(lambda: not mounts_under(env.root), timeout=30, what="the publish torn down after the restart")


# --- a symlink in root-dir's path --------------------------------------------------


def test_symlinked_root_dir_is_resolved_and_the_unstage_guard_holds(volume_env):
    """With root-dir configured through a symlink, the paths given to the
    driver are the resolved ones, and another mount of the staged file system
    under root-dir (made behind kvolumed's back) holds NodeUnstageVolume: the
    guard reads the mount table under the name the kernel gives."""
    env = volume_env
    env.driver.control.set_config(stage_mount=True)
    real = symlinked_root(env)
    shared_pv(env)
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(pod, "pv-shared"))
    env.wait_calls("NodePublishVolume")

    stray = f"{env.root}/stray"
    os.makedirs(stray)
    assert os.system(f"mount --bind {env.staging('vol-shared')} {stray}") == 0
    try:
        env.api.remove("pods", "default", "web")
        held_or_unstaged(env, "still mount")
        assert not env.calls("NodeUnstageVolume"), "unstaged under another mount"
        assert f"{real}/stray" in env.agent.output()
    finally:
        os.system(f"umount {stray}")
    env.wait_calls("NodeUnstageVolume", code="OK", timeout=30)
    os.rmdir(stray)
    # Said at start, and every path the driver was given is the resolved one.
    assert f"root-dir {env.root} is {real} with its symlinks resolved" in env.agent.output()
    for call in env.calls():
        for key in ("staging_target_path", "target_path"):
            if call["request"].get(key):
                assert call["request"][key].startswith(real + "/"), call
    wait_until(lambda: not mounts_under(real), timeout=30, what="nothing mounted under the resolved root-dir")
    assert not env.driver.violations()


def test_symlinked_root_dir_not_found_of_a_mounted_target_is_retried(volume_env):
    """NodeUnpublishVolume answers NOT_FOUND and leaves the target mounted:
    with root-dir configured through a symlink, the mount table still shows
    the target mounted (not taken as done), and the unpublish is retried."""
    env = volume_env
    real = symlinked_root(env)
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    env.wait_calls("NodePublishVolume")
    env.driver.control.fail_next("NodeUnpublishVolume", "NOT_FOUND", "volume gone", count=2, when="before")
    env.api.remove("pods", "default", "web")
    calls = env.wait_calls("NodeUnpublishVolume", 3, timeout=30)
    assert [c["code"] for c in calls] == ["NOT_FOUND", "NOT_FOUND", "OK"]
    env.wait_gone(os.path.dirname(target))
    output = env.agent.output()
    assert "taken as done" not in output, output[-3000:]
    assert f"{os.path.realpath(target)} is still a mount point: not done" in output, output[-3000:]
    assert calls[0]["request"]["target_path"] == os.path.realpath(target)
    assert not mounts_under(real)
    assert not env.driver.violations()


def test_the_unit_is_ordered_after_the_mounts_of_the_default_root_dir():
    """RequiresMountsFor= names the root-dir of the configuration kvolumed is
    shipped with, so that a data disk meant for it is mounted first."""
    unit = open(os.path.join(build_dir(), "systemd", "kvolumed.service")).read()
    shipped = open(os.path.join(REPO_DIR, "conf", "kvolumed.conf")).read()
    default = [line.split("=", 1)[1].strip() for line in shipped.splitlines()
               if line.replace(" ", "").startswith("root-dir=")]
    assert default == ["/var/lib/kubelet"], default
    section = unit.split("[Service]")[0]
    assert f"\nRequiresMountsFor={default[0]}\n" in section, section
