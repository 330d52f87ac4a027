"""Issue 29 item 4: the mount table and renames.  No event reports a directory
renamed above a mount point (fanotify's mount events do not, and mountinfo's
poll does not wake), so kvolumed's mount table can hold a mount under the path
it had when last read, and its present path then looks unmounted.  Such a
stale "not mounted" must never turn a NOT_FOUND into "done", nor let the
unstage guard miss a mount of the staged file system.  Every test runs on the
mount source the suite runs on (KVOLUMED_TEST_MOUNT_SOURCE=mountinfo: the
fallback); the kernel source is the one the table can be stale on."""
import json
import os
import subprocess

from integration.agent_fixtures import DRIVER, wait_until
from integration.test_agent_metrics import SERVING, get, metrics_config, start_with_metrics


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True)


def mounts_seen(address):
    status, _, body = get(address, "/volumes")
    assert status == 200
    return json.loads(body)["mounts_seen"]


def mounts_under(root):
    """The mount points under root, as the kernel has them now."""
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f if line.split()[4].startswith(root + "/")}


def table_caught_up(env, address):
    """Returns once kvolumed has read every mount change made so far: a mount
    of the test's own under root-dir, then its removal, each seen in the
    count of /volumes (the kernel's events are read in order; mountinfo is
    read whole after each).  The count is compared with the kernel's, not
    with kvolumed's before: that one may not have caught up yet."""
    sentinel = os.path.join(env.root, "sentinel")
    os.makedirs(sentinel, exist_ok=True)
    sh("mount", "-t", "tmpfs", "sentinel", sentinel)
    try:
        wait_until(lambda: mounts_seen(address) == len(mounts_under(env.root)), timeout=30,
                   what="the sentinel mount seen")
    finally:
        sh("umount", sentinel)
    wait_until(lambda: mounts_seen(address) == len(mounts_under(env.root)), timeout=30,
               what="the sentinel's unmount seen")
    os.rmdir(sentinel)


def rename_and_back(env, address, target):
    """Renames the volume dirs of target's pod (pods/<uid>/volumes/kubernetes.io~csi),
    has kvolumed read the mount under that name (the mount moved away and
    back: any event about it, or a full read, would), and gives the dir its
    name back, which no event reports."""
    csi_dir = os.path.dirname(os.path.dirname(target))
    renamed = csi_dir + ".renamed"
    at = os.path.join(renamed, os.path.relpath(target, csi_dir))
    moved = at + ".moved"
    try:
        os.rename(csi_dir, renamed)
        os.mkdir(moved)
        sh("mount", "--move", at, moved)
        sh("mount", "--move", moved, at)
        os.rmdir(moved)
        table_caught_up(env, address)
    finally:
        os.rename(renamed, csi_dir)
    assert os.path.ismount(target)


def test_not_found_is_not_done_at_a_mount_point_renamed_back(volume_env):
    """The pod's volume dir is renamed while its NodeUnpublishVolume is in
    the driver, the table reads the mount under that name (here: the mount
    moved away and back, as any event about it or a full read would), and
    the dir gets its name back, which no event reports.  The driver then
    answers NOT_FOUND: the target is still a mount point, the kernel says
    so, and kvolumed must not take the teardown as done."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    address = start_with_metrics(env)
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    env.wait_calls("NodePublishVolume")
    env.driver.control.hang("NodeUnpublishVolume", count=1, when="before")
    env.driver.control.fail_next("NodeUnpublishVolume", "NOT_FOUND", "volume gone", count=1, when="before")
    env.api.remove("pods", "default", "web")
    env.driver.control.wait_hung("NodeUnpublishVolume", timeout=30)
    rename_and_back(env, address, target)
    env.driver.control.release("NodeUnpublishVolume")
    env.agent.wait_for_log("still a mount point: not done", timeout=30)
    assert "taken as done" not in env.agent.output()
    # Unpublished for real at the next attempt, after its backoff.
    calls = env.wait_calls("NodeUnpublishVolume", 2, timeout=30)
    assert [c["code"] for c in calls] == ["NOT_FOUND", "OK"]
    env.wait_gone(os.path.dirname(target), timeout=30)
    assert not env.driver.violations()


def test_unstage_guard_sees_a_bind_whose_directory_was_renamed_into_root_dir(volume_env, tmp_path):
    """A bind mount of the staged file system made outside root-dir, its
    directory then renamed into root-dir: a reference to the volume under
    root-dir that no event names (the kernel source read the mount's path
    when it was outside).  The guard before NodeUnstageVolume must see it."""
    env = volume_env
    env.driver.control.set_config(stage_mount=True)
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    env.pv("pv-shared", "vol-shared", claim="shared")
    env.pvc("shared", "pv-shared")
    address = start_with_metrics(env)
    pod = env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}])
    env.wait_mounted(env.target(pod, "pv-shared"))
    staging = env.staging("vol-shared")
    assert os.path.ismount(staging)
    holder = tmp_path / "outside" / "holder"
    os.makedirs(holder / "stray")
    sh("mount", "--bind", staging, str(holder / "stray"))
    inside = os.path.join(env.root, "holder")
    try:
        table_caught_up(env, address)  # the bind's path read while outside root-dir
        os.rename(holder, inside)
        env.api.remove("pods", "default", "web")
        env.wait_gone(os.path.dirname(env.target(pod, "pv-shared")), timeout=30)
        # Held by the reconciler's look at the table, or by the guard's.
        wait_until(lambda: "still mount" in env.agent.output()
                   or env.calls("NodeUnstageVolume"), timeout=30,
                   what=lambda: "the unstage held or made\n" + env.agent.output()[-3000:])
        assert not env.calls("NodeUnstageVolume"), "unstaged under a bind mount of the volume"
        assert f"{inside}/stray" in env.agent.output()
    finally:
        for stray in (os.path.join(inside, "stray"), holder / "stray"):
            if os.path.ismount(stray):
                sh("umount", str(stray))
    env.wait_calls("NodeUnstageVolume", code="OK", timeout=30)
    os.rmdir(os.path.join(inside, "stray"))
    os.rmdir(inside)
    env.wait_gone(os.path.dirname(staging), timeout=30)
    assert not env.driver.violations()


def test_a_republish_at_a_mount_point_renamed_back_is_watched(volume_env):
    """The lost-mount watch's side: a republish (requiresRepublish) answered
    while the table holds the target's mount under the name its dir had
    during a rename must not be taken for a publish that made no mount,
    which would stop watching it for its loss."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"], requiresRepublish=True)
    path = metrics_config(env, "127.0.0.1:0")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("[csi]\n", "[csi]\nrepublish-interval = 2s\n", 1))
    env.agent = env.start_agent(path)
    env.agent.wait_for_log("Serving /metrics")
    address = SERVING.search(env.agent.output()).group(1)
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "scratch")
    watched = f"{target} is a mount point: watched for its loss"
    env.agent.wait_for_log(watched, timeout=30)
    env.driver.control.hang("NodePublishVolume", count=1, when="before")
    env.driver.control.wait_hung("NodePublishVolume", timeout=30)
    rename_and_back(env, address, target)
    env.driver.control.release("NodePublishVolume")
    made_none = f"NodePublishVolume made no mount at {target}"
    wait_until(lambda: env.agent.output().count(watched) >= 2 or made_none in env.agent.output(), timeout=30,
               what=lambda: "the republish settled\n" + env.agent.output()[-3000:])
    assert made_none not in env.agent.output()
    assert os.path.ismount(target)
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(target), timeout=30)
    assert not env.driver.violations()
