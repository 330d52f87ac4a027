"""Argument checks and idempotency of the mock CSI driver, with exact codes."""
import os

import grpc
import pytest

from doubles.mockcsi import mounts, status_of as code

C = grpc.StatusCode


def test_missing_arguments_are_invalid(mock_csi, csi_dirs):
    c, pb = mock_csi.csi, mock_csi.csi.pb
    staging, target = csi_dirs
    cap = c.capability()
    cases = {
        "stage/no volume_id": ("NodeStageVolume", pb.NodeStageVolumeRequest(
            staging_target_path=staging, volume_capability=cap)),
        "stage/no staging": ("NodeStageVolume", pb.NodeStageVolumeRequest(
            volume_id="v", volume_capability=cap)),
        "stage/no capability": ("NodeStageVolume", pb.NodeStageVolumeRequest(
            volume_id="v", staging_target_path=staging)),
        "unstage/no volume_id": ("NodeUnstageVolume", pb.NodeUnstageVolumeRequest(staging_target_path=staging)),
        "unstage/no staging": ("NodeUnstageVolume", pb.NodeUnstageVolumeRequest(volume_id="v")),
        "publish/no volume_id": ("NodePublishVolume", pb.NodePublishVolumeRequest(
            target_path=target, staging_target_path=staging, volume_capability=cap)),
        "publish/no target": ("NodePublishVolume", pb.NodePublishVolumeRequest(
            volume_id="v", staging_target_path=staging, volume_capability=cap)),
        "publish/no capability": ("NodePublishVolume", pb.NodePublishVolumeRequest(
            volume_id="v", staging_target_path=staging, target_path=target)),
        "unpublish/no volume_id": ("NodeUnpublishVolume", pb.NodeUnpublishVolumeRequest(target_path=target)),
        "unpublish/no target": ("NodeUnpublishVolume", pb.NodeUnpublishVolumeRequest(volume_id="v")),
        "stats/no volume_id": ("NodeGetVolumeStats", pb.NodeGetVolumeStatsRequest(volume_path=target)),
        "stats/no path": ("NodeGetVolumeStats", pb.NodeGetVolumeStatsRequest(volume_id="v")),
        "expand/no volume_id": ("NodeExpandVolume", pb.NodeExpandVolumeRequest(volume_path=target)),
        "expand/no path": ("NodeExpandVolume", pb.NodeExpandVolumeRequest(volume_id="v")),
        "stage/no access mode": ("NodeStageVolume", pb.NodeStageVolumeRequest(
            volume_id="v", staging_target_path=staging,
            volume_capability=pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume()))),
    }
    got = {name: code(c.node, m, req)[0] for name, (m, req) in cases.items()}
    assert got == {name: C.INVALID_ARGUMENT for name in cases}
    assert os.listdir(staging) == [] and not os.path.exists(target)
    assert mock_csi.state()["volumes"] == {}
    assert {e["code"] for e in mock_csi.calls()} == {"INVALID_ARGUMENT"}


def test_stage_and_publish_are_idempotent_and_detect_conflicts(mock_csi, csi_dirs, tmp_path):
    c = mock_csi.csi
    staging, target = csi_dirs
    c.stage("v1", staging)
    assert code(c.stage, "v1", staging) == (C.OK, "")
    assert code(c.stage, "v1", staging, mount_flags=["noatime"])[0] == C.ALREADY_EXISTS
    other = tmp_path / "other-staging"
    other.mkdir()
    assert code(c.stage, "v1", str(other))[0] == C.FAILED_PRECONDITION
    assert code(c.stage, "v2", staging)[0] == C.ALREADY_EXISTS  # another volume's staging path

    c.publish("v1", target, staging_path=staging)
    assert code(c.publish, "v1", target, staging_path=staging) == (C.OK, "")
    assert code(c.publish, "v1", target, staging_path=staging, readonly=True)[0] == C.ALREADY_EXISTS
    assert code(c.publish, "v1", target, staging_path=staging, fs_type="ext3")[0] == C.ALREADY_EXISTS
    assert len([m for m in mounts.mountinfo() if m["mount_point"] == target]) == 1

    c.unpublish("v1", target)
    assert code(c.unpublish, "v1", target) == (C.OK, "")
    c.unstage("v1", staging)
    assert code(c.unstage, "v1", staging) == (C.OK, "")


def test_publish_needs_staging_when_stage_unstage_is_advertised(mock_csi, csi_dirs, tmp_path):
    c = mock_csi.csi
    staging, target = csi_dirs
    # Unknown volume with a staging path: not ephemeral, and not staged.
    assert code(c.publish, "nostage", target, staging_path=staging)[0] == C.FAILED_PRECONDITION
    c.stage("v1", staging)
    elsewhere = str(tmp_path / "elsewhere")
    assert code(c.publish, "v1", target, staging_path=elsewhere)[0] == C.FAILED_PRECONDITION
    # Known volume, no staging_target_path at all: the spec's "staging target path not set".
    assert code(c.publish, "v1", target)[0] == C.FAILED_PRECONDITION
    assert code(c.publish, "v1", target, staging_path=staging, block=True)[0] == C.INVALID_ARGUMENT
    assert not os.path.exists(target)
    c.unstage("v1", staging)


def test_unknown_volumes_and_paths(mock_csi, csi_dirs):
    c = mock_csi.csi
    staging, target = csi_dirs
    assert code(c.unpublish, "ghost", target) == (C.OK, "")
    assert code(c.unstage, "ghost", staging) == (C.OK, "")
    assert code(c.stats, "ghost", target)[0] == C.NOT_FOUND
    assert code(c.expand, "ghost", target, 1 << 30)[0] == C.NOT_FOUND
    c.stage("v1", staging)
    assert code(c.unpublish, "v1", target) == (C.OK, "")  # known volume, never published there
    assert code(c.stats, "v1", target)[0] == C.NOT_FOUND  # known volume, unknown path
    assert code(c.unstage, "v1", target) == (C.OK, "")  # not staged there: nothing to do
    assert mounts.is_mount_point(staging)
    c.unstage("v1", staging)


def test_access_modes_need_their_capability(mock_csi_factory, csi_dirs, tmp_path):
    drv = mock_csi_factory()
    staging, target = csi_dirs
    assert code(drv.csi.stage, "v", staging, mode="SINGLE_NODE_MULTI_WRITER")[0] == C.INVALID_ARGUMENT
    assert code(drv.csi.stage, "v", staging, volume_mount_group="1000")[0] == C.INVALID_ARGUMENT
    drv.control.set_caps("STAGE_UNSTAGE_VOLUME", "SINGLE_NODE_MULTI_WRITER")
    drv.csi.stage("v", staging, mode="SINGLE_NODE_SINGLE_WRITER")
    drv.csi.publish("v", target, staging_path=staging, mode="SINGLE_NODE_SINGLE_WRITER")
    second = str(tmp_path / "pod" / "second")
    assert code(drv.csi.publish, "v", second, staging_path=staging,
                mode="SINGLE_NODE_SINGLE_WRITER")[0] == C.FAILED_PRECONDITION
    drv.csi.unpublish("v", target)
    drv.csi.unstage("v", staging)


def test_capability_gated_methods_are_unimplemented_when_not_advertised(mock_csi_factory, csi_dirs):
    drv = mock_csi_factory(caps=["STAGE_UNSTAGE_VOLUME"])
    staging, _ = csi_dirs
    drv.csi.stage("v", staging)
    assert code(drv.csi.stats, "v", staging)[0] == C.UNIMPLEMENTED
    assert code(drv.csi.expand, "v", staging, 1 << 27)[0] == C.UNIMPLEMENTED
    drv.csi.unstage("v", staging)


def test_no_auto_create_makes_unknown_volumes_not_found(mock_csi_factory, csi_dirs):
    drv = mock_csi_factory(auto_create=False)
    staging, _ = csi_dirs
    assert code(drv.csi.stage, "v", staging)[0] == C.NOT_FOUND
    drv.control.create_volume("v", size=16 << 20)
    drv.csi.stage("v", staging)
    assert os.statvfs(staging).f_blocks * os.statvfs(staging).f_frsize <= 16 << 20
    assert drv.state()["volumes"]["v"]["size"] == 16 << 20
    drv.csi.unstage("v", staging)
    drv.control.delete_volume("v")
    assert drv.state()["volumes"] == {}
    assert os.listdir(os.path.join(drv.state_dir, "volumes")) == []


def test_republish_after_external_unmount_mounts_again(mock_csi, csi_dirs):
    """Idempotency is judged against the kernel, not only the driver's records."""
    c = mock_csi.csi
    staging, target = csi_dirs
    c.stage("v", staging)
    c.publish("v", target, staging_path=staging)
    mounts.umount(target)
    mounts.umount(staging)
    c.stage("v", staging)
    assert mounts.is_mount_point(staging)
    c.publish("v", target, staging_path=staging)
    assert mounts.mount_entry(target)["fstype"] == "ext4"
    c.unpublish("v", target)
    c.unstage("v", staging)
