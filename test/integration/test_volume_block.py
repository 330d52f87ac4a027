"""Raw block volumes (KEP-565): a PV with volumeMode Block used through a pod's
volumeDevices reaches the pod as a device, with kubelet's paths, bind mount,
symlink and loop-device lock, and goes again leaving nothing behind."""
import json
import os
import shutil
import stat
import subprocess

import pytest

from doubles.mockcsi.mounts import loop_detaching
from integration.agent_fixtures import DRIVER, loops_under, wait_until

BLOCK = "plugins/kubernetes.io/csi/volumeDevices"


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def block_pv(env, name, handle, claim):
    env.pv(name, handle, claim=claim, volume_mode="Block")
    env.pvc(claim, name)


def device_path(env, pod, spec_name):
    return f"{env.root}/pods/{pod['metadata']['uid']}/volumeDevices/kubernetes.io~csi/{spec_name}"


def loops_backed_by(path):
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                if f.read().strip().removesuffix(" (deleted)") == path:
                    found.append(name)
        except OSError:
            pass
    return found


def mounts_under(root):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(root + "/")]


def wait_mapped(env, pod, spec_name):
    path = device_path(env, pod, spec_name)
    bind = f"{env.root}/{BLOCK}/{spec_name}/dev/{pod['metadata']['uid']}"
    wait_until(lambda: os.path.exists(path) and stat.S_ISBLK(os.stat(path).st_mode) and loops_backed_by(bind),
               timeout=15, what=lambda: f"{path} mapped\n" + env.agent.output()[-3000:])
    return path


def done_record(path):
    """kvolumed's intent record at `path` once it says the operation is done."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if record.get("done") else None


def listdir_or_empty(path):
    """kvolumed removes these dirs while we look: gone means empty."""
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


def assert_nothing_left(env):
    block = f"{env.root}/{BLOCK}"
    wait_until(lambda: not mounts_under(env.root), timeout=15, what="no mounts under root-dir")
    wait_until(lambda: set(listdir_or_empty(block)) <= {"staging", "publish"}
               and not any(listdir_or_empty(f"{block}/{d}") for d in listdir_or_empty(block)),
               timeout=15, what="no block dirs")
    wait_until(lambda: not listdir_or_empty(f"{env.root}/pods"), timeout=15, what="no pod dirs")
    assert not loops_under(env.root), "a loop lock remains"
    assert not env.driver.violations()


def test_block_volume_is_mapped_into_the_pod_and_goes_again(staged_volume_env):
    map_and_go_again(staged_volume_env)


def test_block_publish_record_is_read_once_done_whatever_the_delay(volume_env):
    """The test above read kvolumed's publish record as soon as the pod's
    device was mapped, and under ASan once found it not done yet: "done" is
    written after the mapping, which the test waited for.  strace makes
    every rename (the record's replacement) take half a second, so the
    record comes late every time; the test must wait for it."""
    if not shutil.which("strace"):
        pytest.fail("strace is needed (test/deps lists it)")
    map_and_go_again(volume_env, wrapper=("strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=rename,renameat,renameat2",
                                          "-e", "inject=rename,renameat,renameat2:delay_enter=500000"))


def map_and_go_again(env, wrapper=()):
    env.csidriver(attachRequired=False)
    block_pv(env, "pv-blk", "vol-blk", "blk")
    env.start(wrapper=wrapper)
    pod = env.pod("web", [claim_volume("disk", "blk")], devices=["disk"])
    uid = pod["metadata"]["uid"]
    path = wait_mapped(env, pod, "pv-blk")
    publish = f"{env.root}/{BLOCK}/publish/pv-blk/{uid}"
    staging = f"{env.root}/{BLOCK}/staging/pv-blk"

    # The pod's device path is a link to the device the driver published.
    assert os.readlink(path) == publish
    device = env.driver.state()["volumes"]["vol-blk"]["device"]
    assert os.stat(path).st_rdev == os.stat(device).st_rdev
    stage = env.wait_calls("NodeStageVolume")[0]["request"]
    assert stage["staging_target_path"] == staging
    assert "block" in stage["volume_capability"] and "mount" not in stage["volume_capability"]
    pub = env.wait_calls("NodePublishVolume")[0]["request"]
    assert pub["target_path"] == publish and pub["staging_target_path"] == staging
    assert "block" in pub["volume_capability"]
    with open(f"{env.root}/{BLOCK}/pv-blk/data/vol_data.json") as f:
        assert json.load(f) == {"attachmentID": json.load(open(f.name))["attachmentID"], "driverName": DRIVER,
                                "nodeName": "test-node", "specVolID": "pv-blk", "volumeHandle": "vol-blk"}
    # kvolumed's record of the publish: in its own tree, never in kubelet's dirs.
    assert os.listdir(f"{env.root}/{BLOCK}/pv-blk/data") == ["vol_data.json"]
    # Written once the mapping is made (record_done after the map step):
    # the mapping can be seen before it.
    record = wait_until(lambda: done_record(f"{env.root}/kvolumed/{BLOCK}/pv-blk/data/kvolumed-{uid}.json"),
                        timeout=15, what=lambda: "the publish recorded as done\n" + env.agent.output()[-3000:])
    assert record["device"] == "%d:%d" % (os.major(os.stat(device).st_rdev),
                                                             os.minor(os.stat(device).st_rdev))

    # Data written through the pod's device path is on the volume.
    data = os.urandom(4096)
    scratch = str(env.tmp_path / "block-data")
    with open(scratch, "wb") as f:
        f.write(data)
    subprocess.run(["dd", f"if={scratch}", f"of={path}", "bs=4096", "count=1", "oflag=direct",
                    "conv=fsync", "status=none"], check=True)
    with open(device, "rb") as f:
        assert f.read(4096) == data

    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume")
    order = [c["method"] for c in env.calls() if c["method"] in ("NodeUnpublishVolume", "NodeUnstageVolume")]
    assert order == ["NodeUnpublishVolume", "NodeUnstageVolume"]
    assert_nothing_left(env)


def test_two_pods_map_one_volume_staged_once(staged_volume_env):
    env = staged_volume_env
    env.csidriver(attachRequired=False)
    block_pv(env, "pv.with.dots", "vol-dots", "dots")
    env.start()
    a = env.pod("a", [claim_volume("disk", "dots")], devices=["disk"])
    b = env.pod("b", [claim_volume("disk", "dots")], devices=["disk"])
    pa = wait_mapped(env, a, "pv.with.dots")
    pb = wait_mapped(env, b, "pv.with.dots")
    assert os.stat(pa).st_rdev == os.stat(pb).st_rdev
    assert len(env.calls("NodeStageVolume")) == 1
    env.wait_calls("NodePublishVolume", 2)
    env.api.remove("pods", "default", "a")
    env.wait_calls("NodeUnpublishVolume", timeout=30)  # the ASan slice runs it too
    wait_until(lambda: not os.path.lexists(pa), what="a's device path gone")
    assert not env.calls("NodeUnstageVolume"), "unstaged while pod b maps the volume"
    assert stat.S_ISBLK(os.stat(pb).st_mode)
    env.api.remove("pods", "default", "b")
    env.wait_calls("NodeUnstageVolume")
    assert_nothing_left(env)


def test_wrong_mode_combinations_are_refused(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False)
    block_pv(env, "pv-b", "vol-b", "cb")
    env.pv("pv-f", "vol-f", claim="cf")
    env.pvc("cf", "pv-f")
    env.start()
    env.pod("mounts-block", [claim_volume("disk", "cb")])
    env.pod("maps-fs", [claim_volume("disk", "cf")], devices=["disk"])
    env.wait_event("FailedMount", "has volumeMode Block but is used in volumeMounts")
    env.wait_event("FailedMount", "has volumeMode Filesystem but is used in volumeDevices")
    assert not [c for c in env.calls() if c["method"].startswith("NodeStage") or c["method"].startswith("NodePub")]


def test_a_device_file_left_by_the_driver_fails_nothing(volume_env):
    """The publish target file is the driver's to make and remove; one the
    driver leaves behind (here: there before, so the mock driver keeps it)
    stays, and the teardown still completes without retrying."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-left", "vol-left", claim="left", volume_mode="Block")
    env.pvc("left")  # bound below, once the pod's UID is known
    env.start()
    pod = env.pod("web", [claim_volume("disk", "left")], devices=["disk"])
    publish = f"{env.root}/{BLOCK}/publish/pv-left/{pod['metadata']['uid']}"
    os.makedirs(os.path.dirname(publish))
    open(publish, "w").close()
    env.bind("left", "pv-left")
    wait_mapped(env, pod, "pv-left")
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume")
    wait_until(lambda: not mounts_under(env.root), what="no mounts")
    wait_until(lambda: not os.path.exists(f"{env.root}/{BLOCK}/pv-left"), what="kvolumed's own dirs gone")
    assert os.path.isfile(publish) and not os.path.ismount(publish), "the driver's file was touched"
    assert len(env.calls("NodeUnpublishVolume")) == 1, "the teardown was retried"
    os.unlink(publish)


def test_a_mapping_lost_behind_our_back_is_mapped_again(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False)
    block_pv(env, "pv-again", "vol-again", "again")
    env.start()
    pod = env.pod("web", [claim_volume("disk", "again")], devices=["disk"])
    wait_mapped(env, pod, "pv-again")
    bind = f"{env.root}/{BLOCK}/pv-again/dev/{pod['metadata']['uid']}"
    for loop in loops_backed_by(bind):
        subprocess.run(["losetup", "-d", f"/dev/{loop}"], check=True)
    # The kernel frees a detached loop device at its last close (udev's blkid
    # may hold it after the detach's uevent): until then its backing file
    # keeps the bind busy.
    wait_until(lambda: not [loop for loop in loops_backed_by(bind) if loop_detaching(loop)], timeout=120,
               what="the detached loop device freed")
    subprocess.run(["umount", bind], check=True)
    wait_until(lambda: os.path.ismount(bind) and loops_backed_by(bind), timeout=15,
               what=lambda: "the pod's mapping restored\n" + env.agent.output()[-2000:])
    assert len(env.calls("NodeStageVolume")) == 1
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume")
    assert_nothing_left(env)


def test_pv_recreated_with_another_handle_while_down_keeps_the_mapped_device(volume_env):
    """The running pod keeps the device it had before the restart: the new
    PV's volume would take its paths (all named after the PV)."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    block_pv(env, "pv-blk", "vol-blk", "blk")
    env.start()
    pod = env.pod("web", [claim_volume("disk", "blk")], devices=["disk"])
    path = wait_mapped(env, pod, "pv-blk")
    device = env.driver.state()["volumes"]["vol-blk"]["device"]
    env.agent.proc.kill()
    env.agent.proc.wait()
    env.api.remove("persistentvolumes", None, "pv-blk")
    env.pv("pv-blk", "vol-other", claim="blk", volume_mode="Block")
    env.start()
    env.wait_event("VolumeSourceChanged", "vol-other", timeout=15)
    probe = env.pod("probe", [{"name": "x", "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1Mi"}}}])
    env.wait_mounted(env.target(probe, "x"))
    assert os.stat(path).st_rdev == os.stat(device).st_rdev
    assert not env.calls("NodeUnpublishVolume") and not env.calls("NodeUnstageVolume")
    assert [c["request"]["volume_id"] for c in env.calls("NodeStageVolume")] == ["vol-blk"]
    env.api.remove("pods", "default", "web")
    env.api.remove("pods", "default", "probe")
    env.wait_calls("NodeUnstageVolume")
    assert [c["request"]["volume_id"] for c in env.calls("NodeUnstageVolume")] == ["vol-blk"]
    assert_nothing_left(env)


def shared_block_pvs(env):
    """Two block PVs with one volume handle (a volume imported twice)."""
    env.csidriver(attachRequired=False)
    block_pv(env, "pv-a", "vol-same", "ca")
    block_pv(env, "pv-b", "vol-same", "cb")


def publish_path(env, pod, spec_name):
    return f"{env.root}/{BLOCK}/publish/{spec_name}/{pod['metadata']['uid']}"


def assert_unpublished_in_order(env, *targets):
    """Each publish unpublished at its own path, and NodeUnstage after all
    (a call the driver refused, ABORTED beside another, is tried again)."""
    calls = [c for c in env.calls() if c["method"] in ("NodeUnpublishVolume", "NodeUnstageVolume")
             and c["code"] == "OK"]
    unpublished = [c["request"]["target_path"] for c in calls if c["method"] == "NodeUnpublishVolume"]
    assert sorted(unpublished) == sorted(targets), unpublished
    assert calls[-1]["method"] == "NodeUnstageVolume"
    assert [c["method"] for c in calls].count("NodeUnstageVolume") == 1


def test_two_block_pvs_with_one_handle_stay_apart_when_the_first_goes(volume_env):
    """Each publish is named after its own PV; the one staging of the volume
    survives the pods of the PV that staged it, and goes with the last."""
    env = volume_env
    shared_block_pvs(env)
    env.start()
    a = env.pod("a", [claim_volume("disk", "ca")], devices=["disk"])
    pa = wait_mapped(env, a, "pv-a")
    b = env.pod("b", [claim_volume("disk", "cb")], devices=["disk"])
    pb = wait_mapped(env, b, "pv-b")
    assert os.readlink(pb) == publish_path(env, b, "pv-b")
    assert len(env.calls("NodeStageVolume")) == 1
    assert [p for d, _, files in os.walk(f"{env.root}/kvolumed") for p in (os.path.join(d, f) for f in files)
            if a["metadata"]["uid"] in p], "pod a's publish has records to wait for"
    env.api.remove("pods", "default", "a")
    env.wait_calls("NodeUnpublishVolume", timeout=30)  # the ASan slice runs it too
    wait_until(lambda: not os.path.lexists(pa), what="a's device path gone")
    assert [c["request"]["target_path"] for c in env.calls("NodeUnpublishVolume")] == [publish_path(env, a, "pv-a")]
    assert not env.calls("NodeUnstageVolume"), "unstaged while pod b maps the volume"
    assert stat.S_ISBLK(os.stat(pb).st_mode)
    # The teardown ends with a's records, after the call: a kill before that
    # is a crash in the middle of it, whose restart unpublishes again (a
    # second NodeUnpublishVolume seen once under ASan's slowness).
    uid_a = a["metadata"]["uid"]
    def records_of_a():
        return [os.path.join(d, f) for d, _, files in os.walk(f"{env.root}/kvolumed") for f in files
                if uid_a in os.path.join(d, f)]
    wait_until(lambda: not records_of_a(), what="pod a's records removed")
    # A restart now finds b's publish where it is, and the staging it uses.
    env.agent.proc.kill()
    env.agent.proc.wait()
    env.start()
    probe = env.pod("probe", [claim_volume("disk", "cb")], devices=["disk"])
    wait_mapped(env, probe, "pv-b")
    assert len(env.calls("NodeUnpublishVolume")) == 1 and not env.calls("NodeUnstageVolume")
    assert stat.S_ISBLK(os.stat(pb).st_mode)
    env.api.remove("pods", "default", "b")
    env.api.remove("pods", "default", "probe")
    env.wait_calls("NodeUnstageVolume")
    assert_unpublished_in_order(env, publish_path(env, a, "pv-a"), publish_path(env, b, "pv-b"),
                                publish_path(env, probe, "pv-b"))
    assert_nothing_left(env)


def test_two_block_pvs_with_one_handle_both_deleted_while_down(volume_env):
    """kvolumed killed, both pods deleted meanwhile: after the restart each
    publish is unpublished at its own PV's path, then the volume unstaged,
    and nothing is left (publish mounts, device-map binds, loop locks)."""
    env = volume_env
    shared_block_pvs(env)
    env.start()
    a = env.pod("a", [claim_volume("disk", "ca")], devices=["disk"])
    b = env.pod("b", [claim_volume("disk", "cb")], devices=["disk"])
    wait_mapped(env, a, "pv-a")
    wait_mapped(env, b, "pv-b")
    env.agent.proc.kill()
    env.agent.proc.wait()
    env.api.remove("pods", "default", "a")
    env.api.remove("pods", "default", "b")
    env.start()
    env.wait_calls("NodeUnstageVolume", timeout=30)
    assert_unpublished_in_order(env, publish_path(env, a, "pv-a"), publish_path(env, b, "pv-b"))
    assert_nothing_left(env)


def test_unstage_waits_for_a_mapping_of_the_volume_under_another_pv(volume_env):
    """Issue 20 item 2: a block volume's staging path is no mount point, so
    only what is on disk can hold NodeUnstageVolume: here a bind file of a
    mapping made through another PV of the same handle (its own spec dir,
    which the volume's bind-file count never looked at), left where the
    state does not know it."""
    env = volume_env
    env.csidriver(attachRequired=False)
    block_pv(env, "pv-blk", "vol-blk", "blk")
    env.start()
    pod = env.pod("web", [claim_volume("disk", "blk")], devices=["disk"])
    wait_mapped(env, pod, "pv-blk")
    twin = f"{env.root}/{BLOCK}/pv-twin"
    os.makedirs(f"{twin}/data")
    os.makedirs(f"{twin}/dev")
    with open(f"{twin}/data/vol_data.json", "w") as f:
        json.dump({"driverName": DRIVER, "volumeHandle": "vol-blk", "specVolID": "pv-twin",
                   "nodeName": "test-node", "attachmentID": "csi-x"}, f)
    open(f"{twin}/dev/0b5e9c1e-2222-4333-8444-555566667777", "w").close()
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnpublishVolume")
    held = ("is still published on this node", "is still referenced from other Pods")
    wait_until(lambda: any(h in env.agent.output() for h in held) or env.calls("NodeUnstageVolume"),
               timeout=15, what="the unstage held or made")
    assert not env.calls("NodeUnstageVolume"), "unstaged while a mapping of the volume exists"
    os.unlink(f"{twin}/dev/0b5e9c1e-2222-4333-8444-555566667777")
    env.wait_calls("NodeUnstageVolume", code="OK", timeout=30)
    os.unlink(f"{twin}/data/vol_data.json")
    for d in ("data", "dev", ""):
        os.rmdir(os.path.join(twin, d))
    assert_nothing_left(env)
