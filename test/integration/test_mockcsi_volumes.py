"""The mock CSI driver does the real work a driver does: loop devices, ext4,
bind mounts, block device files, tmpfs — checked against the kernel's tables."""
import os

import grpc
import pytest

from doubles.mockcsi import mounts

MiB = 1024 * 1024


def backing_of(drv, vid):
    return drv.state()["volumes"][vid]["backing"]


def kubelet_dirs(tmp_path, spec="pv-1"):
    """Directories kubelet creates before calling the driver (kubelet-facts §1)."""
    staging = tmp_path / "plugins" / "sha" / "globalmount"
    staging.mkdir(parents=True)
    pod = tmp_path / "pods" / "uid1" / "volumes" / "kubernetes.io~csi" / spec
    pod.mkdir(parents=True)
    return str(staging), str(pod / "mount")


def test_fs_round_trip_and_data_survives_restage(mock_csi, tmp_path):
    c = mock_csi.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("vol-1", staging, fs_type="ext4")
    st = mounts.mount_entry(staging)
    assert st["fstype"] == "ext4"
    loop = st["source"]
    assert loop.startswith("/dev/loop")
    assert mounts.loop_backing_files()[loop] == backing_of(mock_csi, "vol-1")

    c.publish("vol-1", target, staging_path=staging)
    pub = mounts.mount_entry(target)
    assert (pub["fstype"], pub["source"], pub["options"].split(",")[0]) == ("ext4", loop, "rw")
    with open(os.path.join(target, "hello"), "w") as f:
        f.write("persisted")

    c.unpublish("vol-1", target)
    assert not mounts.is_mount_point(target)
    assert not os.path.exists(target)  # the driver created it, the driver removes it
    c.unstage("vol-1", staging)
    assert not mounts.is_mount_point(staging)
    assert os.path.isdir(staging)  # kubelet's dir: left alone
    mounts.assert_loops_released(lambda: mounts.loops_for(backing_of(mock_csi, "vol-1")))
    assert os.path.getsize(backing_of(mock_csi, "vol-1")) == 64 * MiB  # the "disk" persists

    c.stage("vol-1", staging, fs_type="ext4")
    c.publish("vol-1", target, staging_path=staging)
    with open(os.path.join(target, "hello")) as f:
        assert f.read() == "persisted"
    assert [(e["method"], e["code"]) for e in mock_csi.calls()] == [
        (m, "OK") for m in ("NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume",
                            "NodeUnstageVolume", "NodeStageVolume", "NodePublishVolume")]
    c.unpublish("vol-1", target)
    c.unstage("vol-1", staging)


def test_block_write_through_published_file_reads_back_from_loop(mock_csi, tmp_path):
    c = mock_csi.csi
    staging = tmp_path / "volumeDevices" / "staging" / "pv-b"
    staging.mkdir(parents=True)
    (tmp_path / "volumeDevices" / "publish" / "pv-b").mkdir(parents=True)
    target = str(tmp_path / "volumeDevices" / "publish" / "pv-b" / "pod-uid")
    c.stage("blk-1", str(staging), block=True, volume_context={"size": "8Mi"})
    loop = mock_csi.state()["volumes"]["blk-1"]["device"]
    assert loop.startswith("/dev/loop")
    assert not mounts.is_mount_point(str(staging))

    c.publish("blk-1", target, staging_path=str(staging), block=True)
    assert os.path.isfile(target) is False and os.path.exists(target)  # a device node now
    assert os.major(os.stat(target).st_rdev) == os.major(os.stat(loop).st_rdev) == 7
    assert os.stat(target).st_rdev == os.stat(loop).st_rdev
    payload = os.urandom(4096)
    fd = os.open(target, os.O_WRONLY)
    os.pwrite(fd, payload, 8192)
    os.fsync(fd)
    os.close(fd)
    fd = os.open(loop, os.O_RDONLY)
    assert os.pread(fd, 4096, 8192) == payload
    os.close(fd)

    c.unpublish("blk-1", target)
    assert not os.path.exists(target)  # the file the driver created is gone
    c.unstage("blk-1", str(staging))
    mounts.assert_loops_released(lambda: mounts.loops_for(backing_of(mock_csi, "blk-1")))
    with open(backing_of(mock_csi, "blk-1"), "rb") as f:  # it really went to the disk
        f.seek(8192)
        assert f.read(4096) == payload
    assert os.path.getsize(backing_of(mock_csi, "blk-1")) == 8 * MiB


def test_restage_while_the_detached_loop_is_still_open_takes_another(mock_csi, tmp_path):
    """A loop device detached while another process has it open (udev's
    blkid after a write, a `losetup -a`, a neighbour's `losetup -f` that
    raced for it) stays attached until that process closes it, and then
    goes.  A stage in between must not take it again: the volume's device
    would then vanish under it (its next mount failed, under load)."""
    c = mock_csi.csi
    staging, _ = kubelet_dirs(tmp_path)
    c.stage("vol-1", staging, fs_type="ext4")
    backing = backing_of(mock_csi, "vol-1")
    loop = mounts.mount_entry(staging)["source"]
    holder = os.open(loop, os.O_RDONLY)  # what blkid does for a moment
    try:
        c.unstage("vol-1", staging)
        assert mounts.loop_detaching(loop) and loop in mounts.loops_for(backing)
        c.stage("vol-1", staging, fs_type="ext4")
        again = mounts.mount_entry(staging)["source"]
        assert again != loop and not mounts.loop_detaching(again)
    finally:
        os.close(holder)
    mounts.assert_loops_released(lambda: [d for d in mounts.loops_for(backing) if d == loop])
    assert mounts.loops_for(backing) == [again] and mounts.mount_entry(staging)["source"] == again
    with open(os.path.join(staging, "f"), "w") as f:
        f.write("x")
    c.unstage("vol-1", staging)
    mounts.assert_loops_released(lambda: mounts.loops_for(backing))


def test_block_publish_creates_missing_parent_and_records_violation(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(allow_violations=True)
    staging = tmp_path / "stg"
    staging.mkdir()
    target = str(tmp_path / "publish" / "pv" / "uid")
    drv.csi.stage("blk", str(staging), block=True, volume_context={"size": "4Mi"})
    drv.csi.publish("blk", target, staging_path=str(staging), block=True)
    assert os.path.exists(target)
    assert [v["message"] for v in drv.violations()] == [
        "NodePublishVolume blk: parent of target_path %s did not exist" % target]
    drv.csi.unpublish("blk", target)
    drv.csi.unstage("blk", str(staging))


def test_readonly_publish_refuses_writes(mock_csi, tmp_path):
    c = mock_csi.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("ro", staging)
    with open(os.path.join(staging, "f"), "w") as f:
        f.write("x")
    c.publish("ro", target, staging_path=staging, readonly=True)
    assert "ro" in mounts.mount_entry(target)["options"].split(",")
    with pytest.raises(OSError) as e:
        open(os.path.join(target, "new"), "w")
    assert e.value.errno == 30  # EROFS
    with open(os.path.join(target, "f")) as f:
        assert f.read() == "x"
    c.unpublish("ro", target)
    c.unstage("ro", staging)


def test_mount_flags_apply_to_stage_and_publish(mock_csi, tmp_path):
    c = mock_csi.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("mf", staging, mount_flags=["noatime"])
    assert "noatime" in mounts.mount_entry(staging)["options"].split(",")
    c.publish("mf", target, staging_path=staging, mount_flags=["noexec"])
    assert "noexec" in mounts.mount_entry(target)["options"].split(",")
    c.unpublish("mf", target)
    c.unstage("mf", staging)


@pytest.mark.parametrize("context", [{"csi.storage.k8s.io/ephemeral": "true"}, {}],
                         ids=["ephemeral-flag", "unknown-volume-no-staging"])
def test_ephemeral_volume_is_a_fresh_tmpfs(mock_csi, tmp_path, context):
    c = mock_csi.csi
    _, target = kubelet_dirs(tmp_path)
    vid = "csi-" + "a" * 64
    c.publish(vid, target, volume_context=dict(context, size="2Mi"))
    m = mounts.mount_entry(target)
    assert m["fstype"] == "tmpfs"
    assert os.statvfs(target).f_blocks * os.statvfs(target).f_frsize == 2 * MiB
    assert os.listdir(target) == []
    c.publish(vid, target, volume_context=dict(context, size="2Mi"))  # idempotent
    c.unpublish(vid, target)
    assert not os.path.exists(target)
    assert mock_csi.state()["ephemeral"] == {}
    assert mock_csi.state()["volumes"] == {}  # no disk was made for it


def test_tmpfs_mode_round_trip_keeps_data(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(tmpfs=True)
    c = drv.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("t1", staging, fs_type="ext4")
    assert mounts.mount_entry(staging)["fstype"] == "tmpfs"
    c.publish("t1", target, staging_path=staging)
    assert mounts.mount_entry(target)["fstype"] == "tmpfs"
    with open(os.path.join(target, "keep"), "w") as f:
        f.write("tmpfs data")
    c.unpublish("t1", target)
    c.unstage("t1", staging)
    mounts.assert_loops_released(lambda: mounts.loops_under(drv.state_dir))
    c.stage("t1", staging)
    with open(os.path.join(staging, "keep")) as f:
        assert f.read() == "tmpfs data"
    c.unstage("t1", staging)


def test_no_stage_publishes_device_directly(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(stage=False)
    c = drv.csi
    assert c.caps() == ["EXPAND_VOLUME", "GET_VOLUME_STATS"]
    _, target = kubelet_dirs(tmp_path)
    with pytest.raises(grpc.RpcError) as e:
        c.stage("d1", str(tmp_path))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    c.publish("d1", target)
    m = mounts.mount_entry(target)
    assert m["fstype"] == "ext4" and m["source"].startswith("/dev/loop")
    c.unpublish("d1", target)
    mounts.assert_loops_released(lambda: mounts.loops_for(backing_of(drv, "d1")))


def test_volume_mount_group_sets_gid_and_setgid(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(caps=["STAGE_UNSTAGE_VOLUME", "VOLUME_MOUNT_GROUP"])
    c = drv.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("g1", staging, volume_mount_group="4321")
    c.publish("g1", target, staging_path=staging, volume_mount_group="4321")
    st = os.stat(target)
    assert st.st_gid == 4321
    assert st.st_mode & 0o2070 == 0o2070
    c.unpublish("g1", target)
    c.unstage("g1", staging)


def test_stats_and_expand(mock_csi, tmp_path):
    c = mock_csi.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("e1", staging)
    c.publish("e1", target, staging_path=staging)
    usage = {u.unit: u for u in c.stats("e1", target).usage}
    pb = c.pb.VolumeUsage
    before = usage[pb.BYTES].total
    assert 40 * MiB < before <= 64 * MiB
    assert usage[pb.BYTES].used + usage[pb.BYTES].available <= before
    assert usage[pb.INODES].total > 0
    assert c.expand("e1", target, 128 * MiB).capacity_bytes == 128 * MiB
    assert os.path.getsize(backing_of(mock_csi, "e1")) == 128 * MiB
    assert c.expand("e1", target, 32 * MiB).capacity_bytes == 128 * MiB  # never shrinks
    if mock_csi.state()["volumes"]["e1"].get("resize_pending"):
        # No CAP_SYS_RESOURCE here: online ext4 growth is impossible, the
        # driver grows the fs offline at the next stage.
        assert not has_cap_sys_resource()
        c.unpublish("e1", target)
        c.unstage("e1", staging)
        c.stage("e1", staging)
        c.publish("e1", target, staging_path=staging)
    assert has_cap_sys_resource() or not mock_csi.state()["volumes"]["e1"]["resize_pending"]
    after = {u.unit: u for u in c.stats("e1", staging).usage}[pb.BYTES].total
    assert after > before + 50 * MiB
    c.unpublish("e1", target)
    c.unstage("e1", staging)


def test_expand_in_tmpfs_mode_is_immediate(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(tmpfs=True)
    c = drv.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("te", staging, volume_context={"size": "8Mi"})
    c.publish("te", target, staging_path=staging)
    assert c.expand("te", target, 16 * MiB).capacity_bytes == 16 * MiB
    s = os.statvfs(target)
    assert s.f_blocks * s.f_frsize == 16 * MiB
    c.unpublish("te", target)
    c.unstage("te", staging)


def has_cap_sys_resource():
    with open("/proc/self/status") as f:
        eff = int([l for l in f if l.startswith("CapEff:")][0].split()[1], 16)
    return bool(eff & (1 << 24))


def test_boot_sessions_outlive_a_clean_stop_until_unstage_and_unpublish(mock_csi_factory, tmp_path):
    """boot_sessions: the state a real driver keeps across a reboot (iSCSI,
    NVMe-oF) ends only with NodeUnpublish/NodeUnstage; of what it knows
    nothing it answers NOT_FOUND."""
    drv = mock_csi_factory(tmpfs=True, boot_sessions=True)
    c = drv.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("s1", staging)
    c.publish("s1", target, staging_path=staging)
    drv.stop()  # clean: every mount undone, as after a reboot
    assert not os.path.ismount(target) and not os.path.ismount(staging)
    drv.start()
    assert sorted(drv.state()["sessions"]) == sorted([f"stage {staging}", f"publish {target}"])
    c.unpublish("s1", target)
    c.unstage("s1", staging)
    assert drv.state()["sessions"] == {}
    for call in (lambda: c.unpublish("s1", target), lambda: c.unstage("s1", staging)):
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("tmpfs", [False, True], ids=["loop", "tmpfs"])
def test_stage_that_mounts_nothing(mock_csi_factory, tmp_path, tmpfs):
    """stage_mount=False: as the CSI hostpath driver, NodeStageVolume makes the
    volume ready and mounts nothing; each publish mounts the volume itself,
    and two publishes see the same data.  Unstaging while a publish exists
    is still a violation: nothing at the staging path tells a CO it is in use."""
    drv = mock_csi_factory(stage_mount=False, tmpfs=tmpfs, allow_violations=True)
    c = drv.csi
    staging, target = kubelet_dirs(tmp_path)
    _, target2 = kubelet_dirs(tmp_path / "second")
    c.stage("vol-1", staging, fs_type="ext4")
    assert not mounts.is_mount_point(staging)
    c.stage("vol-1", staging, fs_type="ext4")  # idempotent: not taken for a lost mount
    c.publish("vol-1", target, staging_path=staging)
    c.publish("vol-1", target2, staging_path=staging)
    assert mounts.is_mount_point(target) and mounts.is_mount_point(target2)
    with open(os.path.join(target, "hello"), "w") as f:
        f.write("shared")
    with open(os.path.join(target2, "hello")) as f:
        assert f.read() == "shared"
    c.unpublish("vol-1", target2)
    assert not drv.violations()
    c.unstage("vol-1", staging)
    assert [v["message"] for v in drv.violations()] == \
        ["NodeUnstageVolume vol-1 while still published at %s" % [target]]
    with open(os.path.join(target, "hello")) as f:
        assert f.read() == "shared"  # the publish holds the volume
    c.unpublish("vol-1", target)
    assert not mounts.is_mount_point(target)
    assert drv.state()["volumes"]["vol-1"]["device"] is None


def test_publish_that_mounts_nothing(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(publish_mount=False, tmpfs=True)
    c = drv.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("vol-1", staging)
    c.publish("vol-1", target, staging_path=staging)
    assert os.path.isdir(target) and not mounts.is_mount_point(target)
    c.publish("vol-1", target, staging_path=staging)  # idempotent: not taken for a lost mount
    c.unpublish("vol-1", target)
    assert not os.path.exists(target)
    c.unstage("vol-1", staging)
    eph = str(tmp_path / "pods" / "uid2" / "mount")
    os.makedirs(os.path.dirname(eph))
    c.publish("csi-eph", eph, volume_context={"csi.storage.k8s.io/ephemeral": "true"})
    assert os.path.isdir(eph) and not mounts.is_mount_point(eph)
    c.unpublish("csi-eph", eph)
    assert not os.path.exists(eph)


def test_noop_fault_answers_ok_and_does_nothing(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(tmpfs=True)
    c = drv.csi
    staging, target = kubelet_dirs(tmp_path)
    c.stage("vol-1", staging)
    c.publish("vol-1", target, staging_path=staging)
    drv.control.inject("NodeUnpublishVolume", noop=1)
    c.unpublish("vol-1", target)
    assert mounts.is_mount_point(target)
    assert [e["code"] for e in drv.calls("NodeUnpublishVolume")] == ["OK"]
    c.unpublish("vol-1", target)
    assert not mounts.is_mount_point(target)
    c.unstage("vol-1", staging)


@pytest.mark.parametrize("mode", ["safe", "hostpath"])
def test_state_file_written_as_the_mode_says(mock_csi_factory, tmp_path, mode):
    """--state-write: "safe" replaces state.json through a synced temporary
    file (a new inode at each change); "hostpath" writes it in place, as the
    CSI hostpath driver's os.WriteFile does (the same inode).  Either way the
    file holds each change once the call is answered."""
    drv = mock_csi_factory(tmpfs=True, state_write=mode)
    state_file = os.path.join(drv.state_dir, "state.json")
    # Held open: a replaced file's inode cannot be freed and given again to
    # its replacement (tmpfs reuses inode numbers at once).
    held = os.open(state_file, os.O_RDONLY)
    inode = os.fstat(held).st_ino
    staging, _ = kubelet_dirs(tmp_path)
    drv.csi.stage("vol-w", staging, fs_type="ext4")
    # state(): read from the file, as a restarted driver reads it.
    assert drv.state()["volumes"]["vol-w"]["staged"]["path"] == staging
    assert (os.stat(state_file).st_ino == inode) == (mode == "hostpath")
    os.close(held)
    assert not [f for f in os.listdir(drv.state_dir) if ".tmp." in f]
    drv.csi.unstage("vol-w", staging)
    assert drv.state()["volumes"]["vol-w"]["staged"] is None
