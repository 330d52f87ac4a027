"""The migration and upgrade guide's statements (README "Migrating and
upgrading"), each tested: a root-dir kvolumed leaves is kubelet's, byte for
byte where kubelet's format is fixed (vol_data.json's keys, JSON encoding
and mode, the directories' modes), and a rollback over records of a newer
kvolumed leaves those records and their volumes alone."""
import glob
import hashlib
import json
import os
import stat

from integration.agent_fixtures import DRIVER, wait_until
from integration.test_volume_restart import assert_all_gone, kill_agent, kubelet_layout

NODE = "test-node"


def kubelet_encode(data):
    """Go's json.NewEncoder(f).Encode(map[string]string): keys sorted,
    compact, HTML characters escaped, a trailing newline (csi_util.go
    saveVolumeData, kubelet-facts §1.2)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") + "\n").encode()


def attachment_id(handle):
    """kubelet's getAttachmentName: csi-<sha256(handle + driver + node)>."""
    return "csi-" + hashlib.sha256((handle + DRIVER + NODE).encode()).hexdigest()


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_root_dir_left_by_kvolumed_is_kubelets_byte_for_byte(volume_env):
    """The reverse of adoption: every vol_data.json kvolumed wrote is exactly
    the bytes kubelet writes for that volume (key set, order, encoding,
    newline), with kubelet's file mode (0666 under systemd's default umask
    0022), in directories of kubelet's mode 0750."""
    env = volume_env
    pod, fs_dirs, staging_dir, blk = kubelet_layout(env)
    uid = pod["metadata"]["uid"]
    inline_handle = "csi-" + hashlib.sha256((uid + "scratch").encode()).hexdigest()
    env.agent.stop()
    expected = {
        f"{env.root}/pods/{uid}/volumes/kubernetes.io~csi/pv-shared": {
            "attachmentID": attachment_id("vol-shared"), "driverName": DRIVER, "nodeName": NODE,
            "specVolID": "pv-shared", "volumeHandle": "vol-shared", "volumeLifecycleMode": "Persistent"},
        f"{env.root}/pods/{uid}/volumes/kubernetes.io~csi/scratch": {
            "attachmentID": attachment_id(inline_handle), "driverName": DRIVER, "nodeName": NODE,
            "specVolID": "scratch", "volumeHandle": inline_handle, "volumeLifecycleMode": "Ephemeral"},
        staging_dir: {"driverName": DRIVER, "volumeHandle": "vol-shared"},
        f"{blk}/data": {"attachmentID": attachment_id("vol-blk"), "driverName": DRIVER, "nodeName": NODE,
                        "specVolID": "pv-blk", "volumeHandle": "vol-blk"},
    }
    found = sorted(os.path.dirname(p) for p in glob.glob(f"{env.root}/**/vol_data.json", recursive=True))
    assert found == sorted(expected)
    for d, data in expected.items():
        with open(f"{d}/vol_data.json", "rb") as f:
            assert f.read() == kubelet_encode(data), d
        assert mode(f"{d}/vol_data.json") == 0o644, d
        assert mode(d) == 0o750, d
    for d in (blk, f"{blk}/dev", os.path.dirname(staging_dir), f"{env.root}/pods/{uid}/volumes/kubernetes.io~csi",
              f"{env.root}/pods/{uid}/volumeDevices/kubernetes.io~csi"):
        assert mode(d) == 0o750, d
    # kvolumed again, and the pod gone: nothing left behind.
    env.start()
    env.api.remove("pods", "default", "web")
    assert_all_gone(env)


def records_of(env):
    return {p: open(p, "rb").read() for p in glob.glob(f"{env.root}/kvolumed/**/kvolumed*.json", recursive=True)}


def test_a_newer_record_is_left_untouched_and_its_volume_not_torn_down(volume_env):
    """A rollback: kvolumed finds an intent record of a format newer than it
    knows (version 2).  It warns once, leaves the record byte for byte, and
    neither unpublishes nor unstages that volume although its pod is gone;
    the volumes with records it knows are torn down as usual.  A record
    without a version (before the field) is read as version 1."""
    env = volume_env
    pod, fs_dirs, staging_dir, blk = kubelet_layout(env)
    uid = pod["metadata"]["uid"]
    kill_agent(env)
    records = records_of(env)
    for text in records.values():
        assert json.loads(text)["version"] == 1
    newer = f"{env.root}/kvolumed/pods/{uid}/volumes/kubernetes.io~csi/pv-shared/kvolumed.json"
    assert newer in records
    newer_text = b'{"version":2,"steps":[{"call":"NodePublishVolume","state":"maybe"}],"bootID":"x"}'
    with open(newer, "wb") as f:
        f.write(newer_text)
    # The inline volume's record as kvolumed wrote it before the field.
    scratch = f"{env.root}/kvolumed/pods/{uid}/volumes/kubernetes.io~csi/scratch/kvolumed.json"
    old = json.loads(records[scratch])
    del old["version"]
    with open(scratch, "w") as f:
        json.dump(old, f, separators=(",", ":"))
    before = len(env.calls())
    env.api.remove("pods", "default", "web")
    env.start()

    # The others go as usual (the unversioned record read as version 1)...
    env.wait_gone(os.path.dirname(env.target(pod, "scratch")), timeout=30)
    wait_until(lambda: not os.path.exists(blk), timeout=30, what="the block volume torn down")
    env.agent.wait_for_log("newer than this kvolumed's (1): left untouched")
    # ... while pv-shared's publish and its staging stay, the record intact.
    out = env.agent.output()
    assert out.count("has record format version 2") == 1, out
    assert os.path.ismount(env.target(pod, "pv-shared"))
    with open(newer, "rb") as f:
        assert f.read() == newer_text
    calls = env.calls()[before:]
    unpublished = [c["request"]["volume_id"] for c in calls if c["method"] == "NodeUnpublishVolume"]
    unstaged = [c["request"]["volume_id"] for c in calls if c["method"] == "NodeUnstageVolume"]
    inline_handle = "csi-" + hashlib.sha256((uid + "scratch").encode()).hexdigest()
    assert inline_handle in unpublished and "vol-blk" in unpublished, unpublished
    assert "vol-shared" not in unpublished and "vol-shared" not in unstaged, (unpublished, unstaged)


def test_a_stop_waits_at_most_the_call_timeout_and_leaves_volumes(volume_env):
    """An in-place upgrade's stop: SIGTERM lets the CSI calls in flight finish
    or time out (csi.call-timeout, here 2 s), exits 0, and tears nothing
    down: a published volume stays mounted and is known set up after the
    restart, with no call repeated."""
    import signal
    import time

    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start(csi="call-timeout = 2s\n")
    kept = env.pod("kept", [{"name": "v", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(kept, "v"))
    env.driver.control.hang("NodePublishVolume")
    hung = env.pod("hung", [{"name": "v", "csi": {"driver": DRIVER}}])
    env.driver.control.wait_hung("NodePublishVolume")
    started = time.monotonic()
    env.agent.signal(signal.SIGTERM)
    assert env.agent.wait(timeout=15) == 0
    took = time.monotonic() - started
    # The hung call's deadline, not more (the call started before the signal).
    assert took < 2.0 + 3.0, took
    env.agent.wait_for_log("Waiting for 1 operations in flight before stopping")
    assert os.path.ismount(env.target(kept, "v"))
    assert not env.calls("NodeUnpublishVolume")
    env.driver.control.release()
    env.driver.control.clear_faults()

    publishes = len(env.calls("NodePublishVolume"))
    env.start(csi="call-timeout = 2s\n")
    env.agent.wait_for_log("Ready:", timeout=15)
    env.api.remove("pods", "default", "hung")
    # The uncertain publish of the pod gone is cleaned up: passes have run.
    env.wait_gone(os.path.dirname(env.target(hung, "v")), timeout=30)
    assert os.path.ismount(env.target(kept, "v"))
    # The kept volume was known set up: no NodePublishVolume for it again.
    assert [c for c in env.calls("NodePublishVolume")[publishes:]
            if c["request"]["target_path"] == env.target(kept, "v")] == []
    env.api.remove("pods", "default", "kept")
    assert_all_gone(env)
