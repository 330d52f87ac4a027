"""Restart and crash safety: reconstruction from disk, intent records, the
mount-reference guard on unstage, volumesInUse computed against the Node,
pinned volume sources, and the defects of issue 9 (each fails on the code
before it)."""
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import time

import pytest

from doubles.mockcsi.mounts import assert_loops_released
from integration.agent_fixtures import DRIVER, VolumeEnv, answered_requests, loops_under, wait_until
from integration.pod_volume_fixtures import OTHER_BOOT_ID, kill_agent, records_of_previous_boot

UNIQUE = f"kubernetes.io/csi/{DRIVER}^"


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def inline_volume(name):
    return {"name": name, "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1Mi"}}}


def attachment_name(handle):
    return "csi-" + hashlib.sha256((handle + DRIVER + "test-node").encode()).hexdigest()


def in_use(env):
    return (env.node().get("status") or {}).get("volumesInUse", [])


def on_node_evidence(env):
    """What says a volume is on the node (its dirs under plugins/, mounts
    under root-dir), each with its identity (inode and ctime, mount ID):
    equal before and after a read of the Node only if none of it went, or
    went and came back, in between.  None while a dir goes as we look."""
    found = []
    for path in sorted(glob.glob(f"{env.root}/plugins/kubernetes.io/csi/*/*")):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        found.append((path, st.st_ino, st.st_ctime_ns))
    with open("/proc/self/mountinfo") as f:
        found += sorted((line.split()[4], line.split()[0]) for line in f
                        if line.split()[4].startswith(env.root + "/"))
    return found


def in_use_violation(env, unique, read_node=in_use):
    """The safety rule at one instant: an attachable volume on the node is
    in Node.status.volumesInUse.  The Node is read between two looks at the
    node; only when both looks see the same dirs and mounts was the volume
    on the node for the whole read.  One look before the read is not enough:
    kvolumed may finish an unstage and drop the volume from the list (the
    right order) between them, and under load it did.  Returns what is
    wrong, or None (also when nothing can be concluded)."""
    if env.agent.proc.poll() is not None:
        return None
    before = on_node_evidence(env)
    if not before:
        return None
    listed = read_node(env)
    if on_node_evidence(env) != before or env.agent.proc.poll() is not None:
        return None
    if unique in listed:
        return None
    return f"an attachable volume on the node is missing from volumesInUse {listed}: {before}"


def attach(env, pv, handle):
    """What the attach/detach controller and csi-attacher do for one volume."""
    node = env.node()
    attached = (node.get("status") or {}).get("volumesAttached", [])
    node.setdefault("status", {})["volumesAttached"] = attached + [{"name": UNIQUE + handle, "devicePath": ""}]
    env.api.update(node)
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                    "metadata": {"name": attachment_name(handle)},
                    "spec": {"attacher": DRIVER, "nodeName": "test-node", "source": {"persistentVolumeName": pv}},
                    "status": {"attached": True}})


def unpublished_targets(env):
    return [c["request"]["target_path"] for c in env.calls("NodeUnpublishVolume")]


def records_under(root):
    return sorted(glob.glob(f"{root}/**/vol_data.json", recursive=True)
                  + glob.glob(f"{root}/**/kvolumed.json", recursive=True)
                  + glob.glob(f"{root}/**/kvolumed-*.json", recursive=True))


def mounts_under(root):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(root + "/")]


def assert_all_gone(env, timeout=30.0):
    """Nothing left once no pod wants anything: mounts, records, dirs, volumesInUse."""
    wait_until(lambda: not mounts_under(env.root), timeout, what="no mounts under root-dir\n"
               + env.agent.output()[-3000:])
    wait_until(lambda: not records_under(env.root), timeout, what="no records under root-dir")
    wait_until(lambda: not glob.glob(f"{env.root}/pods/*"), timeout, what="no pod dirs")
    wait_until(lambda: not glob.glob(f"{env.root}/plugins/kubernetes.io/csi/*/*"), timeout,
               what="no staging dirs")
    wait_until(lambda: not in_use(env), timeout, what="volumesInUse empty")
    assert not env.driver.violations()


def shared_pv(env, attach_required=False):
    env.csidriver(attachRequired=attach_required, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-shared", "vol-shared", claim="shared")
    env.pvc("shared", "pv-shared")


# --- the six defects ------------------------------------------------------------------


def test_pod_deleted_while_down_is_unpublished_before_unstage(volume_env):
    """Defect 1: A and B share a PV; A is deleted while kvolumed is down.  A's
    publish must be found and unpublished, and NodeUnstage wait for both."""
    env = volume_env
    shared_pv(env)
    env.start()
    a = env.pod("a", [claim_volume("data", "shared")])
    b = env.pod("b", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(a, "pv-shared"))
    env.wait_mounted(env.target(b, "pv-shared"))
    kill_agent(env)
    env.api.remove("pods", "default", "a")
    env.start()
    env.wait_gone(os.path.dirname(env.target(a, "pv-shared")))
    assert os.path.ismount(env.target(b, "pv-shared"))
    assert env.target(b, "pv-shared") not in unpublished_targets(env)
    env.api.remove("pods", "default", "b")
    env.wait_calls("NodeUnstageVolume")
    order = [c["method"] for c in env.calls() if c["method"] in ("NodeUnpublishVolume", "NodeUnstageVolume")]
    assert order == ["NodeUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"]
    assert_all_gone(env)


def test_volumes_of_pods_gone_while_down_are_cleaned_up(volume_env):
    """Defect 2: no leak of mounts, dirs, records or volumesInUse entries."""
    env = volume_env
    shared_pv(env, attach_required=True)
    env.start()
    inline = env.pod("inline", [inline_volume("scratch")])
    pod = env.pod("web", [claim_volume("data", "shared")])
    wait_until(lambda: UNIQUE + "vol-shared" in in_use(env), timeout=30, what="volumesInUse")
    attach(env, "pv-shared", "vol-shared")
    env.wait_mounted(env.target(pod, "pv-shared"))
    env.wait_mounted(env.target(inline, "scratch"))
    kill_agent(env)
    env.api.remove("pods", "default", "web")
    env.api.remove("pods", "default", "inline")
    env.start()
    assert_all_gone(env)
    env.wait_calls("NodeUnstageVolume")


def test_volumes_in_use_restored_when_the_node_is_recreated(volume_env):
    """Defect 3: compared with the Node, not with kvolumed's last patch."""
    env = volume_env
    shared_pv(env, attach_required=True)
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared")])
    wait_until(lambda: UNIQUE + "vol-shared" in in_use(env), timeout=30, what="volumesInUse")
    attach(env, "pv-shared", "vol-shared")
    env.wait_mounted(env.target(pod, "pv-shared"))
    # Someone else clears the field: listed again.
    node = env.node()
    node["status"]["volumesInUse"] = []
    env.api.update(node)
    wait_until(lambda: UNIQUE + "vol-shared" in in_use(env), timeout=30, what="volumesInUse restored after an edit")
    # The Node is deleted and registered again: listed again.
    env.api.remove("nodes", None, "test-node")
    env.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "test-node"}, "status": {}})
    wait_until(lambda: UNIQUE + "vol-shared" in in_use(env), timeout=30, what="volumesInUse restored on a new Node")
    assert os.path.ismount(env.target(pod, "pv-shared"))


def test_csidriver_recreated_without_attach_keeps_the_volume_in_use(volume_env):
    """Defect 4: a mounted attachable volume stays in volumesInUse until unstaged."""
    env = volume_env
    shared_pv(env, attach_required=True)
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared")])
    wait_until(lambda: UNIQUE + "vol-shared" in in_use(env), timeout=30, what="volumesInUse")
    attach(env, "pv-shared", "vol-shared")
    env.wait_mounted(env.target(pod, "pv-shared"))
    env.api.remove("csidrivers", None, DRIVER)
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    # Let kvolumed see both events; a later pod proves it has.
    env.pod("probe", [inline_volume("x")])
    env.wait_mounted(env.target(env.api.get("pods", "default", "probe"), "x"))
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert UNIQUE + "vol-shared" in in_use(env), "dropped from volumesInUse while staged"
        time.sleep(0.1)
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume")
    wait_until(lambda: UNIQUE + "vol-shared" not in in_use(env), timeout=30, what="dropped after unstage")
    unstaged = env.calls("NodeUnstageVolume")[0]["time"]
    patches = [r for r in answered_requests(env.api, lambda r: r["method"] == "PATCH" and "volumesInUse" in str(r["body"])
                                            and UNIQUE + "vol-shared" not in str(r["body"]))
               if r["status"] == 200]
    assert patches and min(p["time"] for p in patches) >= unstaged


def test_pv_recreated_with_another_handle_keeps_the_running_volume(volume_env):
    """Defect 5: what a running pod resolved is pinned; an Event says why.
    A bound claim's PV is final for the GET cache, read again only by the
    safety-net resync (here every second)."""
    env = volume_env
    shared_pv(env)
    env.start(agent="resync-interval = 1s\n")
    pod = env.pod("web", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(pod, "pv-shared"))
    env.api.remove("persistentvolumes", None, "pv-shared")
    env.pv("pv-shared", "vol-other", claim="shared")
    env.wait_event("VolumeSourceChanged", "vol-other", timeout=15)
    assert os.path.ismount(env.target(pod, "pv-shared"))
    assert not env.calls("NodeUnpublishVolume")
    assert all(c["request"]["volume_id"] == "vol-shared" for c in env.calls("NodePublishVolume"))
    # The pod keeps its volume until it goes; then all of it goes.
    env.api.remove("pods", "default", "web")
    assert_all_gone(env)
    assert [c["request"]["volume_id"] for c in env.calls("NodeUnstageVolume")] == ["vol-shared"]


def test_pv_recreated_with_another_handle_while_down_keeps_the_running_volume(volume_env):
    """The same across a restart: the pin is not in memory any more, but the
    pod's publish found on disk is what the pod resolved.  Unpublishing it
    to publish the new PV's volume at the same path would swap the data under
    a running container."""
    env = volume_env
    shared_pv(env, attach_required=True)
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared")])
    target = env.target(pod, "pv-shared")
    wait_until(lambda: UNIQUE + "vol-shared" in in_use(env), timeout=30, what="volumesInUse")
    attach(env, "pv-shared", "vol-shared")
    env.wait_mounted(target)
    with open(os.path.join(target, "written-before"), "w") as f:
        f.write("kept")
    kill_agent(env)
    env.api.remove("persistentvolumes", None, "pv-shared")
    env.pv("pv-shared", "vol-other", claim="shared")
    env.start()
    env.wait_event("VolumeSourceChanged", "vol-other", timeout=15)
    # A later pod proves the restarted kvolumed has planned past this one.
    probe = env.pod("probe", [inline_volume("x")])
    env.wait_mounted(env.target(probe, "x"))
    assert os.path.ismount(target)
    with open(os.path.join(target, "written-before")) as f:
        assert f.read() == "kept"
    assert target not in unpublished_targets(env)
    assert [c["request"]["volume_id"] for c in env.calls("NodePublishVolume")
            if c["request"]["target_path"] == target] == ["vol-shared"]
    assert not [c for c in env.calls("NodeStageVolume") if c["request"]["volume_id"] == "vol-other"]
    # The attach/detach controller must not detach what the pod still uses.
    assert UNIQUE + "vol-shared" in in_use(env) and UNIQUE + "vol-other" not in in_use(env)
    # The pod keeps its volume until it goes; then all of it goes.
    env.api.remove("pods", "default", "web")
    env.api.remove("pods", "default", "probe")
    assert_all_gone(env)
    assert [c["request"]["volume_id"] for c in env.calls("NodeUnstageVolume")] == ["vol-shared"]


def test_two_pvs_with_one_handle_publish_at_their_own_paths(volume_env):
    """Defect 6: each pod's target is named after its own PV."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-a", "vol-same", claim="ca")
    env.pv("pv-b", "vol-same", claim="cb")
    env.pvc("ca", "pv-a")
    env.pvc("cb", "pv-b")
    env.start()
    a = env.pod("a", [claim_volume("data", "ca")])
    env.wait_mounted(env.target(a, "pv-a"))
    b = env.pod("b", [claim_volume("data", "cb")])
    env.wait_mounted(env.target(b, "pv-b"))
    assert len(env.calls("NodeStageVolume")) == 1
    with open(os.path.join(env.target(b, "pv-b"), "..", "vol_data.json")) as f:
        assert json.load(f)["specVolID"] == "pv-b"
    env.api.remove("pods", "default", "a")
    env.api.remove("pods", "default", "b")
    assert_all_gone(env)


# --- start-up conditions -------------------------------------------------------------


def test_nothing_is_torn_down_while_the_api_server_does_not_answer(volume_env):
    env = volume_env
    shared_pv(env)
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(pod, "pv-shared"))
    kill_agent(env)
    env.api.remove("pods", "default", "web")
    env.api.fail_next(100000, status=503)
    agent = env.start()
    wait_until(lambda: len([r for r in env.api.requests() if r["status"] == 503]) >= 5, timeout=20,
               what="kvolumed retrying the API server")
    assert os.path.ismount(env.target(pod, "pv-shared"))
    assert not env.calls("NodeUnpublishVolume") and not env.calls("NodeUnstageVolume")
    assert agent.proc.poll() is None
    env.api.clear_faults()
    assert_all_gone(env, timeout=30)


def test_teardown_waits_for_an_absent_driver_and_others_proceed(volume_env, mock_csi_factory):
    env = volume_env
    other = mock_csi_factory(name="other.csi.kvolumed.io", tmpfs=True)
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                    "metadata": {"name": "other.csi.kvolumed.io"},
                    "spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    extra = f'[driver "other.csi.kvolumed.io"]\nendpoint = {other.endpoint}\n'
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.start(extra)
    pod = env.pod("web", [inline_volume("scratch")])
    env.wait_mounted(env.target(pod, "scratch"))
    kill_agent(env)
    env.driver.control.shutdown(cleanup=False)  # the driver goes, its mounts stay
    env.driver.wait_exit()
    env.api.remove("pods", "default", "web")
    env.start(extra)
    second = env.pod("second", [{"name": "v", "csi": {"driver": "other.csi.kvolumed.io"}}])
    env.wait_mounted(env.target(second, "v"))
    assert os.path.ismount(env.target(pod, "scratch")), "torn down without its driver"
    env.driver.start()
    env.wait_gone(os.path.dirname(env.target(pod, "scratch")), timeout=30)
    env.api.remove("pods", "default", "second")
    assert_all_gone(env)


# --- a node set up by kubelet, and a reboot ------------------------------------------------


def kubelet_vol_data(path, **keys):
    with open(path, "w") as f:
        f.write(json.dumps(keys, sort_keys=True, separators=(",", ":")) + "\n")


def test_adopts_a_node_set_up_by_kubelet(volume_env):
    """Directories, vol_data.json and mounts as kubelet leaves them (no intent
    records): the wanted volume stays, the other is torn down and cleaned."""
    env = volume_env
    shared_pv(env)
    env.pv("pv-old", "vol-old", claim="old")
    env.pvc("old", "pv-old")
    keep = env.pod("keep", [claim_volume("data", "shared")])
    uid_gone = "0b5e9c1e-1111-4222-8333-444455556666"
    csi = env.driver.csi
    for handle, uid, pv in (("vol-shared", keep["metadata"]["uid"], "pv-shared"), ("vol-old", uid_gone, "pv-old")):
        staging = env.staging(handle)
        os.makedirs(staging)
        kubelet_vol_data(os.path.join(os.path.dirname(staging), "vol_data.json"), driverName=DRIVER,
                         volumeHandle=handle)
        csi.stage(handle, staging)
        target = f"{env.root}/pods/{uid}/volumes/kubernetes.io~csi/{pv}/mount"
        os.makedirs(os.path.dirname(target))
        kubelet_vol_data(os.path.join(os.path.dirname(target), "vol_data.json"), attachmentID="csi-x",
                         driverName=DRIVER, nodeName="test-node", specVolID=pv, volumeHandle=handle,
                         volumeLifecycleMode="Persistent")
        csi.publish(handle, target, staging_path=staging)
    # A leftover of an interrupted removal: a dir with only our record.
    leftover = f"{env.root}/pods/{uid_gone}/volumes/kubernetes.io~csi/half-gone"
    os.makedirs(leftover + "/mount")
    with open(leftover + "/kvolumed.json", "w") as f:
        f.write('{"operation":"unpublish","done":false,"mount":false,"bootID":"1234"}')
    env.start()
    env.wait_gone(f"{env.root}/pods/{uid_gone}")
    env.wait_gone(os.path.dirname(env.staging("vol-old")))
    env.wait_calls("NodeUnstageVolume")
    assert os.path.ismount(env.target(keep, "pv-shared"))
    assert env.target(keep, "pv-shared") not in unpublished_targets(env)
    unstaged = [c["request"]["volume_id"] for c in env.calls("NodeUnstageVolume")]
    assert unstaged == ["vol-old"]
    env.api.remove("pods", "default", "keep")
    assert_all_gone(env)


def block_device_path(env, pod, spec_name):
    return f"{env.root}/pods/{pod['metadata']['uid']}/volumeDevices/kubernetes.io~csi/{spec_name}"


def block_mapped(env, pod, spec_name):
    path = block_device_path(env, pod, spec_name)
    return os.path.exists(path) and stat.S_ISBLK(os.stat(path).st_mode)


def test_reboot_sets_wanted_volumes_up_again_and_cleans_the_rest(fake_api, mock_csi_factory, start_agent, tmp_path):
    """After a reboot nothing is mounted, but the driver may keep state that
    only NodeUnpublishVolume / NodeUnstageVolume end (iSCSI sessions set up
    again at boot, NVMe-oF connections, its block publish file): the driver
    runs in the mode that keeps such state (boot_sessions).  The wanted
    volumes are set up again; for the others kvolumed calls the driver as
    kubelet does, before it removes their directories, and a NOT_FOUND (the
    driver knows nothing of one) counts as done."""
    env = VolumeEnv(fake_api, mock_csi_factory(name=DRIVER, tmpfs=True, boot_sessions=True), start_agent, tmp_path)
    shared_pv(env)
    env.pv("pv-2", "vol-2", claim="c2")
    env.pvc("c2", "pv-2")
    for name in ("bk", "bg"):
        env.pv(f"pv-{name}", f"vol-{name}", claim=name, volume_mode="Block")
        env.pvc(name, f"pv-{name}")
    env.start()
    keep = env.pod("keep", [claim_volume("data", "shared"), inline_volume("scratch"), claim_volume("disk", "bk")],
                   devices=["disk"])
    gone = env.pod("gone", [claim_volume("data", "c2"), inline_volume("scratch"), claim_volume("disk", "bg")],
                   devices=["disk"])
    for pod, name in ((keep, "pv-shared"), (keep, "scratch"), (gone, "pv-2"), (gone, "scratch")):
        env.wait_mounted(env.target(pod, name))
    for pod, name in ((keep, "pv-bk"), (gone, "pv-bg")):
        wait_until(lambda: block_mapped(env, pod, name), timeout=30, what=f"{name} mapped")
    kill_agent(env)
    # The reboot: every mount and loop device gone (kvolumed's device locks and
    # bind mounts, then what the driver's clean stop undoes), a new boot ID.
    for name in os.listdir("/sys/block"):
        try:
            backing = open(f"/sys/block/{name}/loop/backing_file").read().strip()
        except OSError:
            continue
        if backing.startswith(env.root + "/"):
            subprocess.run(["losetup", "-d", f"/dev/{name}"], check=True)
    # A detached loop device keeps its backing file, and so the mount that
    # holds it, busy until its last opener (udev's blkid after the detach's
    # uevent) closes it; a boot has no such opener left.
    assert_loops_released(lambda: loops_under(env.root))
    for mount_point in sorted(mounts_under(env.root), key=len, reverse=True):
        if "/volumeDevices/" in mount_point and "/dev/" in mount_point:
            subprocess.run(["umount", mount_point], check=True)
    env.driver.stop()
    assert not mounts_under(env.root)
    records_of_previous_boot(env.root)
    env.driver.start()
    gone_uid = gone["metadata"]["uid"]
    gone_publishes = sorted([env.target(gone, "pv-2"), env.target(gone, "scratch"),
                             f"{env.root}/plugins/kubernetes.io/csi/volumeDevices/publish/pv-bg/{gone_uid}"])
    gone_stagings = sorted([env.staging("vol-2"), f"{env.root}/plugins/kubernetes.io/csi/volumeDevices/staging/pv-bg"])
    sessions = env.driver.state()["sessions"]
    assert sorted(k.split(" ", 1)[1] for k in sessions if gone_uid in k) == gone_publishes
    # The driver has forgotten one of them: it answers NOT_FOUND.
    env.driver.control.forget_session("publish " + env.target(gone, "scratch"))
    before = len(env.calls())
    env.api.remove("pods", "default", "gone")
    env.start()
    env.wait_mounted(env.target(keep, "pv-shared"))
    env.wait_mounted(env.target(keep, "scratch"))
    wait_until(lambda: block_mapped(env, keep, "pv-bk"), timeout=30, what="pv-bk mapped again")
    env.wait_gone(f"{env.root}/pods/{gone_uid}")
    env.wait_gone(os.path.dirname(env.staging("vol-2")))
    env.wait_gone(f"{env.root}/plugins/kubernetes.io/csi/volumeDevices/pv-bg")
    after = [c for c in env.calls()[before:]]
    assert sorted(c["request"]["target_path"] for c in after if c["method"] == "NodeUnpublishVolume") == \
        gone_publishes, "each publish of the previous boot no pod wants is unpublished, once"
    assert sorted(c["request"]["staging_target_path"] for c in after if c["method"] == "NodeUnstageVolume") == \
        gone_stagings, "each staging of the previous boot no pod wants is unstaged, once"
    assert [c["code"] for c in after if c["method"] == "NodeUnpublishVolume"
            and c["request"]["target_path"] == env.target(gone, "scratch")] == ["NOT_FOUND"]
    assert not [k for k in env.driver.state()["sessions"] if gone_uid in k or "vol-2" in k or "vol-bg" in k], \
        "the driver's state of the previous boot leaks"
    assert sorted(c["request"]["volume_id"] for c in after if c["method"] == "NodeStageVolume") == \
        ["vol-bk", "vol-shared"]
    env.api.remove("pods", "default", "keep")
    assert_all_gone(env)
    assert not env.driver.state()["sessions"]


# --- handing the node back to kubelet -----------------------------------------------


def records_done(env):
    """Whether every intent record kvolumed keeps under root-dir says done."""
    paths = glob.glob(f"{env.root}/**/kvolumed*.json", recursive=True)
    for path in paths:
        try:
            with open(path) as f:
                if not json.load(f).get("done"):
                    return False
        except (OSError, ValueError):
            return False
    return bool(paths)


def kubelet_layout(env):
    """A filesystem PV, an inline volume and a block PV, set up by kvolumed for
    one pod; returns (pod, fs volume dirs, staging volume dir, block PV dirs)."""
    shared_pv(env)
    env.pv("pv-blk", "vol-blk", claim="blk", volume_mode="Block")
    env.pvc("blk", "pv-blk")
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared"), inline_volume("scratch"), claim_volume("disk", "blk")],
                  devices=["disk"])
    env.wait_mounted(env.target(pod, "pv-shared"))
    env.wait_mounted(env.target(pod, "scratch"))
    wait_until(lambda: block_mapped(env, pod, "pv-blk"), timeout=30, what="pv-blk mapped")
    env.wait_calls("NodePublishVolume", 3, code="OK")
    # kvolumed records an operation as done after the driver's answer (the
    # mount is seen, and the call logged, before): a kill before that leaves
    # it uncertain, and the restart rightly sets it up again.
    wait_until(lambda: records_done(env), timeout=15, what=lambda: "every record done\n" + env.agent.output()[-3000:])
    fs_dirs = [os.path.dirname(env.target(pod, name)) for name in ("pv-shared", "scratch")]
    return pod, fs_dirs, os.path.dirname(env.staging("vol-shared")), \
        f"{env.root}/plugins/kubernetes.io/csi/volumeDevices/pv-blk"


def assert_only_kubelets_files(env, pod, fs_dirs, staging_dir, blk):
    """What kubelet writes in each volume dir (kubelet-facts §1.1-§1.3), and nothing else."""
    uid = pod["metadata"]["uid"]
    for d in fs_dirs:
        assert sorted(os.listdir(d)) == ["mount", "vol_data.json"], d
    assert sorted(os.listdir(staging_dir)) == ["globalmount", "vol_data.json"]
    assert sorted(os.listdir(blk)) == ["data", "dev"]
    assert os.listdir(f"{blk}/data") == ["vol_data.json"]
    assert os.listdir(f"{blk}/dev") == [uid]
    assert os.listdir(f"{env.root}/pods/{uid}/volumeDevices/kubernetes.io~csi") == ["pv-blk"]


def kubelet_remove_mount_dir(path):
    """kubelet's removeMountDir (csi_mounter.go, kubelet-facts §1.2)."""
    assert not os.path.ismount(path)
    if os.path.lexists(path):
        os.rmdir(path)
    try:
        os.remove(os.path.join(os.path.dirname(path), "vol_data.json"))
    except FileNotFoundError:
        pass
    os.rmdir(os.path.dirname(path))


def test_a_stopped_kvolumed_leaves_volume_dirs_kubelet_can_tear_down(volume_env):
    """Handed a root-dir kvolumed laid out, kubelet adopts the volumes and,
    when the pod goes, removes them its own way: kvolumed's records must not
    be in its way (a file left in a volume dir fails kubelet's removal for
    ever).  kvolumed started again afterwards drops the records of volumes
    kubelet tore down, and calls nothing."""
    env = volume_env
    pod, fs_dirs, staging_dir, blk = kubelet_layout(env)
    uid = pod["metadata"]["uid"]
    env.agent.stop()  # SIGTERM: records as a stop leaves them
    assert_only_kubelets_files(env, pod, fs_dirs, staging_dir, blk)
    env.api.remove("pods", "default", "web")  # kubelet's node now: the pod goes

    # kubelet's teardown: UnmapBlockVolume + NodeUnpublish + cleanup (§1.3, §5.2) ...
    csi = env.driver.csi
    bind = f"{blk}/dev/{uid}"
    for name in os.listdir("/sys/block"):
        try:
            backing = open(f"/sys/block/{name}/loop/backing_file").read().strip()
        except OSError:
            continue
        if backing == bind:
            subprocess.run(["losetup", "-d", f"/dev/{name}"], check=True)
            # The kernel lets the loop device go when its last user does:
            # until then it holds the bind's file, and umount says busy.
            wait_until(lambda: not os.path.exists(f"/sys/block/{name}/loop/backing_file"), timeout=30,
                       what=f"/dev/{name} released")
    os.remove(f"{env.root}/pods/{uid}/volumeDevices/kubernetes.io~csi/pv-blk")
    subprocess.run(["umount", bind], check=True)
    os.remove(bind)
    publish = f"{env.root}/plugins/kubernetes.io/csi/volumeDevices/publish/pv-blk/{uid}"
    csi.unpublish("vol-blk", publish)
    csi.unstage("vol-blk", f"{env.root}/plugins/kubernetes.io/csi/volumeDevices/staging/pv-blk")
    shutil.rmtree(f"{env.root}/plugins/kubernetes.io/csi/volumeDevices")
    # ... TearDownAt + removeMountDir, UnmountDevice + removeMountDir (§1.2, §5.3) ...
    csi_inline = hashlib.sha256((uid + "scratch").encode()).hexdigest()
    csi.unpublish("csi-" + csi_inline, env.target(pod, "scratch"))
    kubelet_remove_mount_dir(env.target(pod, "scratch"))
    csi.unpublish("vol-shared", env.target(pod, "pv-shared"))
    kubelet_remove_mount_dir(env.target(pod, "pv-shared"))
    csi.unstage("vol-shared", env.staging("vol-shared"))
    kubelet_remove_mount_dir(env.staging("vol-shared"))
    # ... and the orphaned pod dir (§8): directories only, one file system.
    for top, dirs, files in os.walk(f"{env.root}/pods/{uid}", topdown=False):
        assert not files, f"a file kubelet's orphan cleanup cannot remove: {top}/{files}"
        os.rmdir(top)
    assert not mounts_under(env.root)

    before = len(env.calls())
    env.start()
    probe = env.pod("probe", [inline_volume("x")])
    env.wait_mounted(env.target(probe, "x"))
    env.api.remove("pods", "default", "probe")
    assert_all_gone(env)
    assert [c["method"] for c in env.calls()[before:] if c["method"].startswith("Node") and "Volume" in c["method"]
            and c["method"] != "NodeGetVolumeStats"] == ["NodePublishVolume", "NodeUnpublishVolume"]
    assert not glob.glob(f"{env.root}/**/kvolumed*.json", recursive=True), "records of volumes kubelet tore down"


def test_records_an_older_kvolumed_left_in_volume_dirs_are_moved_and_read(volume_env):
    """An older kvolumed kept its records in the volume dirs: they are read
    (the volumes are known set up: no call repeated) and moved out."""
    env = volume_env
    pod, fs_dirs, staging_dir, blk = kubelet_layout(env)
    uid = pod["metadata"]["uid"]
    kill_agent(env)
    # The old layout: kvolumed.json beside vol_data.json, and a block
    # publish's kvolumed-<uid>.json in its PV's data dir.
    records = glob.glob(f"{env.root}/**/kvolumed*.json", recursive=True)
    assert records
    old = []
    for path in records:
        rel = os.path.relpath(path, env.root)
        if rel.startswith("kvolumed/"):
            rel = rel[len("kvolumed/"):]
        if os.path.join(env.root, rel) != path:
            os.rename(path, os.path.join(env.root, rel))
        old.append(os.path.join(env.root, rel))
    assert f"{blk}/data/kvolumed-{uid}.json" in old and os.path.join(fs_dirs[0], "kvolumed.json") in old
    os.unlink(f"{env.root}/kvolumed/intent-log")  # nor had it an intent log
    for top, dirs, files in os.walk(f"{env.root}/kvolumed", topdown=False):
        os.rmdir(top)
    before = len(env.calls())
    env.start()
    probe = env.pod("probe", [inline_volume("x")])
    env.wait_mounted(env.target(probe, "x"))
    wait_until(lambda: not [p for p in old if os.path.exists(p)], timeout=15, what="old records moved")
    # The driver logs a call after answering it: the mount can be seen first.
    wait_until(lambda: [c for c in env.calls()[before:] if c["method"] == "NodePublishVolume"
                        and c["request"]["target_path"] == env.target(probe, "x")], what="the probe's publish logged")
    assert_only_kubelets_files(env, pod, fs_dirs, staging_dir, blk)
    # The driver logs a call after its reply, so after the mount appeared.
    wait_until(lambda: [c for c in env.calls()[before:] if c["method"] == "NodePublishVolume"
                        and c["request"]["target_path"] == env.target(probe, "x")],
               what="the probe's NodePublishVolume in the driver's log")
    assert [c["request"]["target_path"] for c in env.calls()[before:] if c["method"] in
            ("NodeStageVolume", "NodePublishVolume")] == [env.target(probe, "x")], "set up again: records not read"
    env.api.remove("pods", "default", "web")
    env.api.remove("pods", "default", "probe")
    assert_all_gone(env)
    assert not glob.glob(f"{env.root}/**/kvolumed*.json", recursive=True)


# --- the guard ------------------------------------------------------------------------


def held_or_unstaged(env, held):
    """Waits until kvolumed says the unstage is held, or until it unstaged."""
    wait_until(lambda: held in env.agent.output() or env.calls("NodeUnstageVolume"), timeout=15,
               what=lambda: f"{held!r} logged or NodeUnstageVolume called\n" + env.agent.output()[-3000:])


@pytest.mark.parametrize("stacked", [False, True], ids=["bind", "bind-under-another-mount"])
def test_unstage_is_refused_while_another_mount_of_the_volume_exists(volume_env, stacked):
    """Below the reconciler: a bind mount of the staged file system that no
    record names (here made behind kvolumed's back) holds NodeUnstage, also
    when another mount hides it (issue 20 item 2: stacked mounts count)."""
    env = volume_env
    shared_pv(env)
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(pod, "pv-shared"))
    stray = f"{env.root}/stray"
    os.makedirs(stray)
    assert os.system(f"mount --bind {env.staging('vol-shared')} {stray}") == 0
    if stacked:
        assert os.system(f"mount -t tmpfs hide {stray}") == 0
    try:
        env.api.remove("pods", "default", "web")
        held_or_unstaged(env, "still mount")
        time.sleep(0.5)
        assert not env.calls("NodeUnstageVolume"), "unstaged under another mount"
    finally:
        os.system(f"umount {stray}")
        if stacked:
            os.system(f"umount {stray}")
    env.wait_calls("NodeUnstageVolume", timeout=30)
    os.rmdir(stray)
    assert_all_gone(env)


@pytest.mark.parametrize("mounted", [True, False], ids=["publish-mounted", "publish-record-left"])
def test_unstage_is_refused_while_a_publish_exists_on_disk(volume_env, mounted):
    """Issue 20 item 2: with a driver whose stage mounts nothing (the CSI
    hostpath driver), globalmount is no mount point and the mount table
    names no reference: a publish of the volume that the state does not
    know (made behind kvolumed's back, or a state lost) must hold
    NodeUnstageVolume all the same, from what is on disk: its mount point
    with kubelet's vol_data.json, or that record not yet removed."""
    env = volume_env
    env.driver.control.set_config(stage_mount=False)
    shared_pv(env)
    env.start()
    pod = env.pod("web", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(pod, "pv-shared"))
    staging = env.staging("vol-shared")
    assert not os.path.ismount(staging)
    uid = "0b5e9c1e-2222-4333-8444-555566667777"
    stray = f"{env.root}/pods/{uid}/volumes/kubernetes.io~csi/pv-shared/mount"
    os.makedirs(os.path.dirname(stray))
    kubelet_vol_data(os.path.join(os.path.dirname(stray), "vol_data.json"), attachmentID="csi-x",
                     driverName=DRIVER, nodeName="test-node", specVolID="pv-shared", volumeHandle="vol-shared",
                     volumeLifecycleMode="Persistent")
    if mounted:
        env.driver.csi.publish("vol-shared", stray, staging_path=staging)
        assert os.path.ismount(stray)
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(env.target(pod, "pv-shared")))
    held_or_unstaged(env, "is still published on this node")
    assert not env.calls("NodeUnstageVolume"), "unstaged under a publish"
    # The publish goes: the unstage follows (after its backoff).
    if mounted:
        env.driver.csi.unpublish("vol-shared", stray)
    os.unlink(os.path.join(os.path.dirname(stray), "vol_data.json"))
    os.rmdir(os.path.dirname(stray))
    env.wait_calls("NodeUnstageVolume", code="OK", timeout=30)
    for d in (f"{env.root}/pods/{uid}/volumes/kubernetes.io~csi", f"{env.root}/pods/{uid}/volumes",
              f"{env.root}/pods/{uid}"):
        os.rmdir(d)
    assert_all_gone(env)


# --- the crash matrix -----------------------------------------------------------------
#
# For each flow, kvolumed is killed with SIGKILL while a CSI call is in
# flight (the driver holds it: "before" it did the work, or "after"), or
# right after a pod appears (before any intent may be written); the pod is
# deleted while kvolumed is down or kept; then kvolumed restarts and the node
# must converge: the pod's volume where it belongs, no NodeUnstage while a
# publish exists (the driver records that as a violation), no teardown of a
# volume whose pod still exists, volumesInUse listing an attachable volume
# whenever it is on the node, and nothing left once the pods are gone.

# "hostpath": a persistent volume whose NodeStageVolume mounts nothing at
# globalmount (the CSI hostpath driver), each publish mounting the volume.
SETUP_CALLS = {"persistent": ["NodeStageVolume", "NodePublishVolume"], "inline": ["NodePublishVolume"],
               "block": ["NodeStageVolume", "NodePublishVolume"],
               "block-shared": ["NodeStageVolume", "NodePublishVolume"],
               "hostpath": ["NodeStageVolume", "NodePublishVolume"]}
TEARDOWN_CALLS = {"persistent": ["NodeUnpublishVolume", "NodeUnstageVolume"], "inline": ["NodeUnpublishVolume"],
                  "block": ["NodeUnpublishVolume", "NodeUnstageVolume"],
                  "block-shared": ["NodeUnpublishVolume", "NodeUnstageVolume"],
                  "hostpath": ["NodeUnpublishVolume", "NodeUnstageVolume"]}

# "block-shared": two block PVs with one volume handle, each used by its own
# pod: one staging (under the first PV's name), a publish under each PV's.
MATRIX = []
for flow in ("persistent", "inline", "block", "block-shared", "hostpath"):
    for method in SETUP_CALLS[flow]:
        for when in ("before", "after"):
            for delete_while_down in (False, True):
                MATRIX.append((flow, method, when, delete_while_down))
    for method in TEARDOWN_CALLS[flow]:
        for when in ("before", "after"):
            MATRIX.append((flow, method, when, True))
    MATRIX.append((flow, "immediately", "-", False))
    MATRIX.append((flow, "immediately", "-", True))


def matrix_id(case):
    flow, method, when, delete_while_down = case
    return f"{flow}-{method}-{when}-{'deleted' if delete_while_down else 'kept'}"


@pytest.mark.parametrize("case", MATRIX, ids=[matrix_id(c) for c in MATRIX])
def test_crash_matrix(volume_env, case):
    flow, method, when, delete_while_down = case
    env = volume_env
    persistent = flow in ("persistent", "block", "block-shared", "hostpath")
    block = flow in ("block", "block-shared")
    if flow == "hostpath":
        env.driver.control.set_config(stage_mount=False)
    env.csidriver(attachRequired=persistent, volumeLifecycleModes=["Persistent", "Ephemeral"])
    # (pod name, claim, spec name): one pod per PV.
    users = [("web", "c", "pv-c")] + ([("web2", "d", "pv-d")] if flow == "block-shared" else [])
    if persistent:
        for _, claim, pv in users:
            env.pv(pv, "vol-c", claim=claim, volume_mode="Block" if block else None)
            env.pvc(claim, pv)
        attach(env, "pv-c", "vol-c")  # the controller was quick: attached before the pod
    unique = UNIQUE + "vol-c"

    def on_node():
        """The volume may be on the node: volumesInUse must list it then."""
        return bool(glob.glob(f"{env.root}/plugins/kubernetes.io/csi/*/*")) or bool(mounts_under(env.root))

    def set_up(pod, spec_name):
        if not block:
            return os.path.ismount(env.target(pod, spec_name))
        device = f"{env.root}/pods/{pod['metadata']['uid']}/volumeDevices/kubernetes.io~csi/{spec_name}"
        return os.path.exists(device) and stat.S_ISBLK(os.stat(device).st_mode)

    def all_set_up():
        return all(set_up(pod, spec_name) for pod, spec_name in pods)

    def check_in_use():
        if persistent:
            violation = in_use_violation(env, unique)
            assert not violation, violation + "\n" + env.agent.output()[-15000:]

    def remove_pods():
        for pod, _ in pods:
            env.api.remove("pods", "default", pod["metadata"]["name"])

    if method != "immediately":
        env.driver.control.hang(method, count=1, when=when)
    env.start()
    pods = []
    for name, claim, spec_name in users:
        volume = claim_volume("data", claim) if persistent else inline_volume("scratch")
        spec_name = spec_name if persistent else "scratch"
        pods.append((env.pod(name, [volume], devices=["data"] if block else None), spec_name))
    targets = [(f"{env.root}/plugins/kubernetes.io/csi/volumeDevices/publish/{spec_name}/{pod['metadata']['uid']}"
                if block else env.target(pod, spec_name)) for pod, spec_name in pods]
    if method in TEARDOWN_CALLS[flow]:
        wait_until(all_set_up, timeout=15, what="set up")
        env.wait_calls("NodePublishVolume", count=len(pods), code="OK")
        check_in_use()
        remove_pods()
    if method != "immediately":
        env.driver.control.wait_hung(method, timeout=15)
    kill_agent(env)
    if method != "immediately":
        env.driver.control.release(method)
    if delete_while_down and method not in TEARDOWN_CALLS[flow]:
        remove_pods()
    alive = not delete_while_down
    env.start()

    if alive:
        deadline = time.monotonic() + 20
        while not all_set_up():
            assert time.monotonic() < deadline, "not published again after the restart\n" + env.agent.output()[-3000:]
            check_in_use()
            time.sleep(0.05)
        for target in targets:
            assert target not in unpublished_targets(env), "torn down while its pod exists"
        check_in_use()
        remove_pods()
    else:
        # Until the volume is gone, volumesInUse must keep listing it.
        deadline = time.monotonic() + 20
        while on_node():
            assert time.monotonic() < deadline, "not torn down after the restart\n" + env.agent.output()[-3000:]
            check_in_use()
            time.sleep(0.05)
    assert_all_gone(env)
    if persistent:
        assert not loops_under(env.root), "a loop lock remains"
        # NodeUnstage only after every publish is gone: the driver's own
        # bookkeeping (a violation) and the order of the call log agree.
        calls = [c for c in env.calls() if c["code"] == "OK"]
        published = set()
        for c in calls:
            if c["method"] == "NodePublishVolume":
                published.add(c["request"]["target_path"])
            elif c["method"] == "NodeUnpublishVolume":
                published.discard(c["request"]["target_path"])
            elif c["method"] == "NodeUnstageVolume":
                assert not published, f"NodeUnstage while published at {published}"
        # Every publish was unpublished where it was made.
        assert not published, f"never unpublished: {published}"


# --- a crash between the rounds of a sync ----------------------------------------------
#
# A sync makes the files written durable in one round, then the directories
# whose entries changed, those naming the files among them (rootdir.c).
# Killed between the two rounds (the test hook holds the sync there), the
# call that mounts has not been made, and it must not be made twice; the
# node converges as after a crash before the call.  "torn": the record is
# also cut in half, as a power loss would leave it were its name durable
# before its bytes (what the rounds' order prevents): a record that cannot
# be read says nothing, the volume is uncertain, and the node converges
# all the same.  The rule of a pass whose records the intent log cannot
# take (KVOLUMED_TEST_NO_INTENT_LOG=1 makes every pass so); with the log,
# these rounds come after the call (see the power loss tests below).

BETWEEN_ROUNDS = [(flow, deleted, torn) for flow in ("inline", "persistent") for deleted in (False, True)
                  for torn in (False, True)]


@pytest.mark.parametrize("flow,deleted,torn", BETWEEN_ROUNDS,
                         ids=[f"{f}-{'deleted' if d else 'kept'}{'-torn' if t else ''}" for f, d, t in BETWEEN_ROUNDS])
def test_crash_between_the_rounds_of_a_sync(volume_env, tmp_path, flow, deleted, torn):
    env = volume_env
    persistent = flow == "persistent"
    method = "NodeStageVolume" if persistent else "NodePublishVolume"
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    if persistent:
        env.pv("pv-c", "vol-c", claim="c")
        env.pvc("c", "pv-c")
    hold = str(tmp_path / "hold")
    env.start(env={"KVOLUMED_TEST_SYNC_HOLD": hold, "KVOLUMED_TEST_NO_INTENT_LOG": "1"})
    with open(hold, "w"):
        pass
    pod = env.pod("web", [claim_volume("data", "c") if persistent else inline_volume("scratch")])
    wait_until(lambda: os.path.exists(hold + ".held"), timeout=30, what="the sync held between its rounds\n"
               + env.agent.output()[-3000:])
    records = glob.glob(f"{env.root}/kvolumed/**/kvolumed.json", recursive=True)
    assert records, "no record written before the sync"
    kill_agent(env)
    os.unlink(hold)
    if torn:
        for record in records:
            with open(record, "r+") as f:
                f.truncate(len(f.read()) // 2)
    if deleted:
        env.api.remove("pods", "default", "web")
    env.start()
    target = env.target(pod, "pv-c" if persistent else "scratch")
    if not deleted:
        env.wait_mounted(target)
        assert target not in unpublished_targets(env), "torn down while its pod exists"
        env.api.remove("pods", "default", "web")
    assert_all_gone(env)
    # The call held back by the sync was never made before the crash: once
    # made after the restart for a pod kept, never for a pod deleted.
    assert len([c for c in env.calls(method) if c["code"] == "OK"]) == (0 if deleted else 1), env.calls(method)


def sync_threads(pid):
    """kvolumed's threads that make root-dir's changes durable, by TID."""
    tids = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().startswith("kv-sync"):
                    tids.add(int(tid))
        except OSError:
            pass  # a thread that ended meanwhile
    return tids


@pytest.mark.parametrize("rule", ["intent-log", "files"])
def test_the_same_threads_make_every_sync_durable(volume_env, tmp_path, rule):
    """The threads of a sync are kept from one sync to the next, rather than
    started and joined for each (issue 31: that cost more than the fsyncs on
    a fast disk); each new pod's sync is held between its rounds, where its
    threads are all there, and they are the same threads each time; a stop
    joins them (kvolumed exits 0, in time).  With the intent log, the rounds
    are the later thread's, after the call."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    hold = str(tmp_path / "hold")
    env.start(env={"KVOLUMED_TEST_SYNC_HOLD": hold, "KVOLUMED_TEST_NO_INTENT_LOG": "1" if rule == "files" else "0"})
    seen = []
    for i in range(3):
        with open(hold, "w"):
            pass
        pod = env.pod(f"web-{i}", [inline_volume("scratch")])
        wait_until(lambda: os.path.exists(hold + ".held"), timeout=30, what="the sync held between its rounds\n"
                   + env.agent.output()[-3000:])
        seen.append(sync_threads(env.agent.proc.pid))
        os.unlink(hold)
        wait_until(lambda: not os.path.exists(hold + ".held"), timeout=30, what="the sync released")
        env.wait_mounted(env.target(pod, "scratch"), timeout=30)
    # One thread for the sync (and one for the records after their calls,
    # with the log), seven beside it for its rounds.
    assert len(seen[0]) == (8 if rule == "files" else 9), seen
    assert seen[1] == seen[0] and seen[2] == seen[0], seen
    env.agent.signal(signal.SIGTERM)
    assert env.agent.wait(timeout=30) == 0, env.agent.output()[-3000:]


# --- power loss ------------------------------------------------------------------------
#
# SIGKILL keeps the page cache: the matrix above cannot tell a record on disk
# from one in memory.  Here root-dir is an ext4 file system of its own, on a
# loop device whose image is what the disk holds, with a journal commit
# interval (10 min) and a writeback delay (30 s) that write nothing
# by themselves during the test.  While the driver holds the call that
# mounts, the image is copied: the node losing power at that instant.  The
# copy must hold everything the call depends on (its records, vol_data.json,
# the directories naming them), with its content; a syncfs() of the file
# system passes too (it writes everything), a pass that syncs nothing does not.
#
# Then kvolumed runs under strace: it must never wait for the whole file
# system (sync, syncfs), and before the call that mounts arrives it must
# have fsync'ed each file it wrote and each directory whose entries it
# changed, which ext4's own ordering would hide from the image above; the
# directory naming a file only once the file's fdatasync returned (a power
# loss in between may leave the name without the bytes: a torn record).

def run(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


@pytest.fixture
def disk_root(volume_env, tmp_path):
    """volume_env with root-dir on an ext4 file system of its own; yields the
    image's path.  The loop device and the mount go with the test."""
    env = volume_env
    image = str(tmp_path / "root.img")
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", image)
    loop = run("losetup", "--find", "--show", image).stdout.strip()
    try:
        run("mount", "-t", "ext4", "-o", "commit=600", loop, env.root)
        yield image
    finally:
        if env.agent and env.agent.proc.poll() is None:
            kill_agent(env)
        subprocess.run(["umount", "-R", "--lazy", env.root], capture_output=True)
        subprocess.run(["losetup", "-d", loop], capture_output=True)


def power_loss_copy(image, dest):
    """What the disk holds now, never syncing: the loop device's writes are in
    the image's page cache, which a read of the image sees.  e2fsck replays
    the journal, as mounting it after the power came back would."""
    shutil.copyfile(image, dest)
    r = run("e2fsck", "-f", "-y", dest, check=False)
    assert r.returncode in (0, 1), f"e2fsck: {r.returncode}\n{r.stdout}{r.stderr}"
    return dest


def on_disk(copy, relpath):
    """The content of relpath in the copy; None when it is not there."""
    r = run("debugfs", "-R", f"cat /{relpath}", copy, check=False)
    if r.returncode != 0 or "File not found" in r.stderr:
        return None
    return r.stdout


def dir_on_disk(copy, relpath):
    r = run("debugfs", "-R", f"ls -l /{relpath}", copy, check=False)
    return r.returncode == 0 and "File not found" not in r.stderr


def held_call_records(env, flow, method):
    """Starts a pod whose `method` the driver holds; returns the records and
    directories (relative to root-dir) the held call depends on."""
    persistent = flow == "persistent"
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    if persistent:
        env.pv("pv-c", "vol-c", claim="c")
        env.pvc("c", "pv-c")
    env.driver.control.hang(method, count=1, when="before")
    pod = env.pod("web", [claim_volume("data", "c") if persistent else inline_volume("scratch")])
    uid = pod["metadata"]["uid"]
    if method == "NodeStageVolume":
        volume_dir = os.path.dirname(env.staging("vol-c"))[len(env.root) + 1:]
        dirs = [volume_dir, volume_dir + "/globalmount"]
        operation = "stage"
    else:
        volume_dir = f"pods/{uid}/volumes/kubernetes.io~csi/{'pv-c' if persistent else 'scratch'}"
        dirs = [volume_dir]
        operation = "publish"
    return pod, volume_dir, f"kvolumed/{volume_dir}/kvolumed.json", dirs, operation


POWER_LOSS = [(flow, method, rule) for flow, method in (("inline", "NodePublishVolume"),
                                                       ("persistent", "NodeStageVolume"),
                                                       ("persistent", "NodePublishVolume"))
              for rule in ("intent-log", "files")]
POWER_LOSS_IDS = [f"{f}-{m}-{r}" for f, m, r in POWER_LOSS]

# With the intent log, a pass's records are durable before their call by one
# fdatasync() of the log, and by themselves after the call: the tests hold
# that later sync (KVOLUMED_TEST_LATER_HOLD), so that only the log holds
# them when the power goes.  "files": the rule of a pass the log cannot take
# (KVOLUMED_TEST_NO_INTENT_LOG=1 makes every pass so), each record and each
# changed directory fsync'ed before the call.
INTENT_LOG = "kvolumed/intent-log"


def rule_env(rule, hold):
    """kvolumed's environment for a rule; with the log, the records' own
    sync held from its first take until the file `hold` is removed."""
    if rule == "files":
        return {"KVOLUMED_TEST_NO_INTENT_LOG": "1"}
    with open(hold, "w"):
        pass
    return {"KVOLUMED_TEST_LATER_HOLD": hold}


SLOT, HEADER = 4096, 104


def intent_log_slots(data):
    """[(offset, seq, path, record)] of each slot whose checksum holds, as
    kvolumed's replay reads the log (volume/host/intentlog.c): 4 KiB slots,
    "KVINTENT", sha256 of what follows it, version, mode, seq, the lengths,
    the boot, then the path and the record."""
    out = []
    for at in range(0, len(data), SLOT):
        slot = data[at:at + SLOT]
        if slot[:8] != b"KVINTENT":
            continue
        version, _mode, seq, path_len, data_len = struct.unpack_from("<IIQII", slot, 40)
        end = HEADER + path_len + data_len
        if version != 1 or path_len == 0 or end > SLOT or hashlib.sha256(slot[40:end]).digest() != slot[8:40]:
            continue
        out.append((at, seq, slot[HEADER:HEADER + path_len].decode(), slot[HEADER + path_len:end]))
    return out


def intent_log_records(data):
    """{relpath: bytes} of the newest slot of each path."""
    newest = {}
    for _, seq, path, body in intent_log_slots(data):
        if path not in newest or newest[path][0] < seq:
            newest[path] = (seq, body)
    return {path: body for path, (_, body) in newest.items()}


def intent_log_of_previous_boot(root):
    """What a reboot leaves of the log: each slot (and the record in it)
    written in another boot, its checksum made again."""
    with open(f"{root}/{INTENT_LOG}", "r+b") as f:
        data = bytearray(f.read())
        for at, _, path, body in intent_log_slots(bytes(data)):
            if os.path.basename(path).startswith("kvolumed"):
                record = json.loads(body)
                record["bootID"] = OTHER_BOOT_ID
                body = json.dumps(record, separators=(",", ":")).encode()
            path_len = len(path.encode())
            struct.pack_into("<I", data, at + 60, len(body))
            data[at + 64:at + HEADER] = OTHER_BOOT_ID.encode().ljust(HEADER - 64, b"\0")
            data[at + HEADER + path_len:at + HEADER + path_len + len(body)] = body
            end = HEADER + path_len + len(body)
            data[at + 8:at + 40] = hashlib.sha256(bytes(data[at + 40:at + end])).digest()
        f.seek(0)
        f.write(data)


def log_on_disk(copy, tmp_path):
    dest = str(tmp_path / "intent-log.dump")
    run("debugfs", "-R", f"dump /{INTENT_LOG} {dest}", copy)
    with open(dest, "rb") as f:
        return intent_log_records(f.read())


def test_no_stage_while_our_patch_dropping_it_from_volumes_in_use_is_on_its_way(volume_env):
    """After a crash during NodeStageVolume kvolumed finds the stage
    uncertain, and its first pass (the pod's claim not looked up yet)
    unstages it and patches volumesInUse without it.  The claim's lookup
    then brings the volume back: it must not be staged again on the word of
    a Node informer that does not show that patch yet, or the Node stops
    listing a staged volume once the patch lands.  Here the lookup is slowed
    to a second and the patch to three, so that the stage comes in that
    window every time; under load it did now and then
    (block-shared-NodeStageVolume-before-kept)."""
    env = volume_env
    env.csidriver(attachRequired=True)
    env.pv("pv-c", "vol-c", claim="c")
    env.pvc("c", "pv-c")
    attach(env, "pv-c", "vol-c")
    unique = UNIQUE + "vol-c"
    env.driver.control.hang("NodeStageVolume", count=1, when="before")
    env.start()
    pod = env.pod("web", [claim_volume("data", "c")])
    env.driver.control.wait_hung("NodeStageVolume", timeout=15)
    kill_agent(env)
    env.driver.control.release("NodeStageVolume")
    env.api.set_delay(1.0, path_prefix="/api/v1/namespaces/default/persistentvolumeclaims", method="GET")
    env.api.set_delay(3.0, path_prefix="/api/v1/nodes/test-node/status", method="PATCH")
    env.start()

    def settled():
        """Published again, listed, and no patch of the Node's status on its way."""
        pending = [r for r in env.api.requests()
                   if r["method"] == "PATCH" and r["path"] == "/api/v1/nodes/test-node/status" and r["status"] is None]
        return os.path.ismount(env.target(pod, "pv-c")) and not pending and unique in in_use(env)

    deadline = time.monotonic() + 60
    while not settled():
        assert time.monotonic() < deadline, "not published again after the restart\n" + env.agent.output()[-3000:]
        violation = in_use_violation(env, unique)
        assert not violation, violation + "\n" + env.agent.output()[-6000:]
        time.sleep(0.05)
    env.api.set_delay(0)
    env.api.remove("pods", "default", "web")
    assert_all_gone(env)


def test_in_use_check_sees_violations_and_not_an_unstage_between_its_looks(volume_env):
    """The crash matrix's check of volumesInUse, made deterministic: under
    load it failed block-shared-NodeStageVolume-before-kept now and then.
    There kvolumed unstaged a reconstructed volume after the restart (its
    pods' claims not looked up yet) and dropped it from volumesInUse after
    its dirs had gone, as it must; the check had looked at the node during
    the unstage and read the Node after the drop, and took that for a
    volume on the node missing from the list.  Here the unstage finishes
    between the look and the read, every time; the check must see nothing
    wrong, and still see a list without a volume that is on the node."""
    env = volume_env
    env.csidriver(attachRequired=True)
    env.pv("pv-c", "vol-c", claim="c")
    env.pvc("c", "pv-c")
    attach(env, "pv-c", "vol-c")
    unique = UNIQUE + "vol-c"
    env.start()
    pod = env.pod("web", [claim_volume("data", "c")])
    env.wait_mounted(env.target(pod, "pv-c"))
    wait_until(lambda: unique in in_use(env), timeout=15, what="volumesInUse lists the volume")

    # A list without the volume while it is on the node: a violation.
    assert in_use_violation(env, unique, read_node=lambda env: [])
    assert not in_use_violation(env, unique)

    env.driver.control.hang("NodeUnstageVolume", count=1, when="before")
    env.api.remove("pods", "default", "web")
    env.driver.control.wait_hung("NodeUnstageVolume", timeout=15)

    def read_after_the_unstage(env):
        """The unstage ends and the list drops the volume between the look and the read."""
        env.driver.control.release("NodeUnstageVolume")
        wait_until(lambda: unique not in in_use(env), timeout=15, what="volumesInUse drops the volume\n"
                   + env.agent.output()[-3000:])
        return in_use(env)

    assert in_use_violation(env, unique, read_node=read_after_the_unstage) is None
    assert_all_gone(env)


@pytest.mark.parametrize("flow,method,rule", POWER_LOSS, ids=POWER_LOSS_IDS)
def test_records_survive_power_loss_at_the_call_that_mounts(volume_env, disk_root, tmp_path, flow, method, rule):
    env = volume_env
    hold = str(tmp_path / "later-hold")
    env.start(env=rule_env(rule, hold))
    pod, volume_dir, record, dirs, operation = held_call_records(env, flow, method)
    env.driver.control.wait_hung(method, timeout=30)
    copy = power_loss_copy(disk_root, str(tmp_path / "after-power-loss.img"))
    live = {path: open(f"{env.root}/{path}", "rb").read() for path in (record, volume_dir + "/vol_data.json")}
    if rule == "intent-log":
        assert os.path.exists(hold + ".held"), "the records' own sync not held back"
        os.unlink(hold)
    env.driver.control.release(method)

    if rule == "intent-log":
        # What replay writes back: each record as it was when the call left.
        logged = log_on_disk(copy, tmp_path)
        for path, text in live.items():
            assert logged.get(path) == text, (f"{path} is not in the intent log on disk when {method} arrives: "
                                              f"{sorted(logged)}\n" + env.agent.output()[-3000:])
        text, vol_data = logged[record].decode(), logged[volume_dir + "/vol_data.json"].decode()
    else:
        text = on_disk(copy, record)
        assert text, f"{record} is not on disk when {method} arrives\n" + env.agent.output()[-3000:]
        vol_data = on_disk(copy, volume_dir + "/vol_data.json")
        assert vol_data, f"{volume_dir}/vol_data.json is not on disk when {method} arrives"
        for d in dirs:
            assert dir_on_disk(copy, d), f"{d} is not on disk when {method} arrives"
    intent = json.loads(text)
    assert intent["operation"] == operation and intent["done"] is False, intent
    assert json.loads(vol_data)["volumeHandle"], vol_data

    wait_until(lambda: os.path.ismount(env.target(pod, "pv-c" if flow == "persistent" else "scratch")),
               timeout=30, what="published")
    env.api.remove("pods", "default", "web")
    assert_all_gone(env)


@pytest.mark.parametrize("flow", ["inline", "persistent"])
def test_the_log_is_durable_while_the_records_files_are_still_to_be_written(volume_env, disk_root, tmp_path, flow):
    """A pass puts its records in the intent log first and has the log made
    durable off the loop while it makes their directories and files
    (operations.c, rootsync.c): held after the records were logged and
    before any directory of the volume was made (KVOLUMED_TEST_PREPARE_HOLD),
    a power loss finds both records in the log on disk, with the bytes the
    files get, and no volume dir yet.  Released, the call is made as ever."""
    env = volume_env
    hold = str(tmp_path / "prepare-hold")
    with open(hold, "w"):
        pass
    env.start(env={"KVOLUMED_TEST_PREPARE_HOLD": hold})
    persistent = flow == "persistent"
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    if persistent:
        env.pv("pv-c", "vol-c", claim="c")
        env.pvc("c", "pv-c")
    pod = env.pod("web", [claim_volume("data", "c") if persistent else inline_volume("scratch")])
    uid = pod["metadata"]["uid"]
    if persistent:  # the first operation: the stage
        volume_dir = os.path.dirname(env.staging("vol-c"))[len(env.root) + 1:]
    else:
        volume_dir = f"pods/{uid}/volumes/kubernetes.io~csi/scratch"
    record, vol_data = f"kvolumed/{volume_dir}/kvolumed.json", volume_dir + "/vol_data.json"
    try:
        wait_until(lambda: os.path.exists(hold + ".held"), timeout=30, what="the pass held after its records "
                   "were logged\n" + env.agent.output()[-3000:])
        logged = {}

        def log_durable():
            nonlocal logged
            copy = power_loss_copy(disk_root, str(tmp_path / "after-power-loss.img"))
            logged = log_on_disk(copy, tmp_path)
            return record in logged and vol_data in logged and not dir_on_disk(copy, volume_dir)
        wait_until(log_durable, timeout=20, interval=0.2,
                   what=f"the log on disk holding {record} and {vol_data} before {volume_dir} is made: "
                   f"it holds {sorted(logged)}")
        assert not os.path.exists(f"{env.root}/{volume_dir}"), "the volume dir made before the hold"
    finally:
        os.unlink(hold)
    env.wait_mounted(env.target(pod, "pv-c" if persistent else "scratch"), timeout=30)
    assert open(f"{env.root}/{vol_data}", "rb").read() == logged[vol_data]
    # Found durable when the pass handed its records over: the call started
    # without the sync thread's round trip (rootsync.c, durable_already).
    assert re.search(rf"The intent log of {re.escape(env.root)} was made durable while \d+ records were written",
                     env.agent.output()), env.agent.output()[-3000:]
    intent = json.loads(logged[record])
    assert intent["operation"] == ("stage" if persistent else "publish") and intent["done"] is False, intent
    env.api.remove("pods", "default", "web")
    assert_all_gone(env)


@pytest.mark.parametrize("flow", ["inline", "persistent"])
def test_records_the_disk_lost_are_written_back_from_the_intent_log(volume_env, tmp_path, flow):
    """The records a power loss took while only the log held them (their
    own sync held back, then kvolumed killed, the mounts gone with the boot,
    the files removed as the disk would have lost them, the log as the
    previous boot left it): the next start writes them back before
    reconstruction, so that the volume the call made is known, and cleaned up
    through its driver (which may keep state a reboot does not end) once its
    pod is gone.  Within one boot nothing is written back (the next test)."""
    env = volume_env
    persistent = flow == "persistent"
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    if persistent:
        env.pv("pv-c", "vol-c", claim="c")
        env.pvc("c", "pv-c")
    hold = str(tmp_path / "later-hold")
    env.start(env=rule_env("intent-log", hold))
    pod = env.pod("web", [claim_volume("data", "c") if persistent else inline_volume("scratch")])
    target = env.target(pod, "pv-c" if persistent else "scratch")
    env.wait_mounted(target, timeout=30)
    wait_until(lambda: os.path.exists(hold + ".held"), timeout=30, what="the records' own sync held")
    kill_agent(env)
    os.unlink(hold)
    subprocess.run(["umount", target], check=True)
    if persistent:
        subprocess.run(["umount", env.staging("vol-c")], check=True)
    lost = records_under(env.root)
    assert lost
    for path in lost:
        os.unlink(path)
    intent_log_of_previous_boot(env.root)
    env.api.remove("pods", "default", "web")
    env.start()
    ok = env.wait_calls("NodeUnpublishVolume", code="OK", timeout=30)
    assert ok and ok[-1]["request"]["target_path"] == target
    if persistent:
        assert env.wait_calls("NodeUnstageVolume", code="OK", timeout=30)
    assert_all_gone(env)
    assert f"Wrote back {len(lost)} records from the intent log" in env.agent.output(), env.agent.output()[-3000:]


def test_within_a_boot_the_intent_log_writes_nothing_back(volume_env, tmp_path):
    """kvolumed killed while its records' own sync is held, a record changed
    meanwhile by someone else (a newer kvolumed, rolled back): started again
    in the same boot, the page cache holds every write, the log writes
    nothing over it, and it is emptied."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    hold = str(tmp_path / "later-hold")
    env.start(env=rule_env("intent-log", hold))
    pod = env.pod("web", [inline_volume("scratch")])
    env.wait_mounted(env.target(pod, "scratch"), timeout=30)
    wait_until(lambda: os.path.exists(hold + ".held"), timeout=30, what="the records' own sync held")
    kill_agent(env)
    os.unlink(hold)
    with open(f"{env.root}/{INTENT_LOG}", "rb") as f:
        assert intent_log_records(f.read()), "nothing in the log while its records' sync was held"
    vol_data = f"{os.path.dirname(env.target(pod, 'scratch'))}/vol_data.json"
    with open(vol_data) as f:
        changed = json.load(f)
    changed["writtenSince"] = "by another"
    with open(vol_data, "w") as f:
        json.dump(changed, f)
    env.start()
    env.agent.wait_for_log("Reconstructed")
    assert "from the intent log" not in env.agent.output()
    with open(vol_data) as f:
        assert json.load(f) == changed
    with open(f"{env.root}/{INTENT_LOG}", "rb") as f:
        assert not intent_log_records(f.read())


def test_a_clean_stop_leaves_the_intent_log_empty(volume_env):
    """SIGTERM just after a publish, while its records' own sync waits its
    turn: the stop makes them durable and frees their slots, so that nothing
    of kvolumed's is left to write back (a handover to kubelet, a reboot)."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pods = [env.pod(f"web-{i}", [inline_volume("scratch")]) for i in range(3)]
    for pod in pods:
        env.wait_mounted(env.target(pod, "scratch"), timeout=30)
    env.agent.signal(signal.SIGTERM)
    assert env.agent.wait(timeout=30) == 0, env.agent.output()[-3000:]
    with open(f"{env.root}/{INTENT_LOG}", "rb") as f:
        assert not intent_log_slots(f.read())


def test_passes_wait_once_four_takes_queue_for_their_own_sync(volume_env, tmp_path):
    """The records' own sync held (a disk that stalls): the log lets the
    calls of one pass after another go, but at most four takes queue behind
    the one being synced, each holding its paths in memory; the next pass
    waits, as it waited for its own files before the log, and goes once the
    sync moves again."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    hold = str(tmp_path / "later-hold")
    env.start(env=rule_env("intent-log", hold))
    published = lambda: len([c for c in env.calls("NodePublishVolume") if c["code"] == "OK"])  # noqa: E731
    pods = []
    for i in range(5):
        pods.append(env.pod(f"web-{i}", [inline_volume("scratch")]))
        wait_until(lambda: published() == i + 1, timeout=30, what=f"pod {i} published while the sync is held")
        if i == 0:
            wait_until(lambda: os.path.exists(hold + ".held"), timeout=30, what="the first take's sync held")
    pods.append(env.pod("web-5", [inline_volume("scratch")]))
    time.sleep(1.5)
    assert published() == 5, "a sixth take queued behind a held sync"
    os.unlink(hold)
    for pod in pods:
        env.wait_mounted(env.target(pod, "scratch"), timeout=30)


def test_an_intent_log_that_cannot_be_used_leaves_the_rule_before_it(volume_env, tmp_path):
    """Something else where the log would be (here a symlink to a file
    outside root-dir): kvolumed says so, writes nothing through it, starts,
    and makes each record durable by itself before its call."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    outside = tmp_path / "outside"
    outside.write_text("not kvolumed's")
    os.makedirs(f"{env.root}/kvolumed")
    os.symlink(outside, f"{env.root}/{INTENT_LOG}")
    env.start()
    pod = env.pod("web", [inline_volume("scratch")])
    env.wait_mounted(env.target(pod, "scratch"), timeout=30)
    assert "Cannot use the intent log" in env.agent.output(), env.agent.output()[-3000:]
    assert outside.read_text() == "not kvolumed's"


def strace_lines(prefix):
    """-ff: a file per thread, so that no call is split by another thread's."""
    lines = []
    for path in glob.glob(prefix + ".*"):
        with open(path, errors="replace") as f:
            lines += f.read().splitlines()
    return lines


@pytest.mark.parametrize("flow,method,rule", POWER_LOSS, ids=POWER_LOSS_IDS)
def test_each_record_and_changed_directory_synced_never_the_file_system(volume_env, disk_root, tmp_path,
                                                                         flow, method, rule):
    env = volume_env
    trace = str(tmp_path / "strace.out")
    hold = str(tmp_path / "later-hold")
    env.start(env=rule_env(rule, hold))
    # Attached to kvolumed, not kvolumed started under it: strace detaches
    # when stopped, and kvolumed stays the fixture's to stop.  -f: every
    # thread, the sync threads made later too; -y: each descriptor's path;
    # a line is written once its call returns.
    tracer = subprocess.Popen(["strace", "-p", str(env.agent.proc.pid), "-f", "-ff", "-qq", "-y", "-ttt", "-T",
                               "-e", "trace=sync,syncfs,fsync,fdatasync", "-o", trace])
    try:
        def traced():
            with open(f"/proc/{env.agent.proc.pid}/status") as f:
                return any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in f)
        wait_until(traced, timeout=30, what="strace attached")
        created = time.time()
        pod, volume_dir, record, dirs, _ = held_call_records(env, flow, method)
        env.driver.control.wait_hung(method, timeout=30)
        lines = strace_lines(trace)
        if rule == "intent-log":
            os.unlink(hold)
        env.driver.control.release(method)
        if rule == "intent-log":
            # After the call, the records and directories by themselves.
            env.wait_mounted(env.target(pod, "pv-c" if flow == "persistent" else "scratch"), timeout=30)
            wait_until(lambda: any(f"<{env.root}/{record}>" in line for line in strace_lines(trace)), timeout=30,
                       what=f"{record} made durable after its call")
    finally:
        tracer.terminate()
        tracer.wait(timeout=60)

    whole = [line for line in lines if re.match(r"[\d.]+ +(sync|syncfs)\(", line)]
    assert not whole, f"waited for every writer of root-dir's file system: {whole}"
    if rule == "intent-log":
        # Before the call: one fdatasync() of the log, none of the records.
        log_syncs = [line for line in lines
                     if re.match(rf"([\d.]+) +fdatasync\(\d+<{re.escape(env.root)}/{INTENT_LOG}>\) += 0", line)
                     and float(line.split()[0]) > created]
        assert log_syncs, "the intent log not synced before the call\n" + "\n".join(lines[-40:])
        early = [line for line in lines if f"<{env.root}/{record}>" in line]
        assert not early, f"the call waited for {record}'s own sync: {early}"
        return

    def syncs(relpath):
        """(start, end) of each successful fsync/fdatasync of relpath, in seconds."""
        want = f"<{env.root}/{relpath}>" if relpath else f"<{env.root}>"
        out = []
        for line in lines:
            m = re.match(r"([\d.]+) +(fsync|fdatasync)\(\d+(<[^>]*>)\) += 0 <([\d.]+)>", line)
            if m and m.group(3) == want:
                out.append((float(m.group(1)), float(m.group(1)) + float(m.group(4))))
        return out

    def synced(relpath):
        return bool(syncs(relpath))

    # Each file the call depends on, and each directory naming one of them or
    # one of the directories made for it, up to where one existed before.
    must = [record, volume_dir + "/vol_data.json"] + dirs
    for path in (record, volume_dir + "/vol_data.json"):
        d = os.path.dirname(path)
        while d and d not in ("pods", "plugins/kubernetes.io/csi"):
            must.append(d)
            d = os.path.dirname(d)
    missing = [p for p in must if not synced(p)]
    assert not missing, f"not synced before {method}: {missing}\n" + "\n".join(lines[-40:])
    # The name of each file made durable after its bytes: every sync of its
    # directory (made in this pass, with the file) began after the file's
    # fdatasync returned.
    for path in (record, volume_dir + "/vol_data.json"):
        data_end = min(end for _, end in syncs(path))
        name_start = min(start for start, _ in syncs(os.path.dirname(path)))
        assert name_start >= data_end, (f"{os.path.dirname(path)} synced before {path}'s data\n"
                                        + "\n".join(lines[-40:]))

    wait_until(lambda: os.path.ismount(env.target(pod, "pv-c" if flow == "persistent" else "scratch")),
               timeout=30, what="published")
    env.api.remove("pods", "default", "web")
    assert_all_gone(env)
