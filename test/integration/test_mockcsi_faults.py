"""Fault injection, the call log, crash/restart with state, clean stop and cleanup."""
import json
import os
import threading
import time

import grpc
import pytest

from doubles.mockcsi import ControlError, CSIClient, cleanup, mounts, status_of as err_of
from doubles.mockcsi.faults import CRASH_EXIT_CODE

C = grpc.StatusCode


def test_error_queue_is_consumed_in_order(mock_csi, csi_dirs):
    c, ctl = mock_csi.csi, mock_csi.control
    staging, target = csi_dirs
    c.stage("v", staging)
    ctl.fail_next("NodePublishVolume", "UNAVAILABLE", "try later", count=2)
    ctl.fail_next("NodePublishVolume", 8, "no room")
    assert [e["code"] for e in ctl.faults()["NodePublishVolume"]["errors"]] == [
        "UNAVAILABLE", "UNAVAILABLE", "RESOURCE_EXHAUSTED"]
    results = [err_of(c.publish, "v", target, staging_path=staging) for _ in range(4)]
    assert results == [(C.UNAVAILABLE, "try later"), (C.UNAVAILABLE, "try later"),
                       (C.RESOURCE_EXHAUSTED, "no room"), (C.OK, "")]
    log = mock_csi.calls("NodePublishVolume")
    assert [(e["code"], e["message"]) for e in log] == [
        ("UNAVAILABLE", "try later"), ("UNAVAILABLE", "try later"), ("RESOURCE_EXHAUSTED", "no room"), ("OK", "")]
    assert ctl.calls("NodePublishVolume") == log
    c.unpublish("v", target)
    c.unstage("v", staging)


def test_error_after_work_leaves_the_work_done(mock_csi, csi_dirs):
    c, ctl = mock_csi.csi, mock_csi.control
    staging, target = csi_dirs
    c.stage("v", staging)
    ctl.fail_next("NodePublishVolume", "DEADLINE_EXCEEDED", "slow", when="after")
    assert err_of(c.publish, "v", target, staging_path=staging) == (C.DEADLINE_EXCEEDED, "slow")
    assert mounts.is_mount_point(target)  # the mount happened; only the reply was an error
    assert err_of(c.publish, "v", target, staging_path=staging) == (C.OK, "")
    c.unpublish("v", target)
    c.unstage("v", staging)


def test_bad_fault_specs_are_rejected(mock_csi):
    with pytest.raises(ControlError) as e:
        mock_csi.control.fail_next("Probe", "NOT_A_CODE")
    assert e.value.status == 400
    with pytest.raises(ControlError) as e:
        mock_csi.control.inject("Probe", explode=True)
    assert (e.value.status, e.value.message) == (400, "ValueError: unknown fault key 'explode'")
    assert mock_csi.control.faults() == {}


def test_delay(mock_csi):
    mock_csi.control.delay("Probe", 0.6)
    t0 = time.monotonic()
    assert mock_csi.csi.identity("Probe").ready.value is True
    assert time.monotonic() - t0 >= 0.6
    assert err_of(mock_csi.csi.identity, "Probe", timeout=0.2)[0] == C.DEADLINE_EXCEEDED
    mock_csi.control.clear_faults()
    t0 = time.monotonic()
    mock_csi.csi.identity("Probe")
    assert time.monotonic() - t0 < 0.5


def test_hang_until_released_and_concurrent_call_is_aborted(mock_csi, csi_dirs):
    c, ctl = mock_csi.csi, mock_csi.control
    staging, _ = csi_dirs
    ctl.hang("NodeStageVolume")
    result = {}
    t = threading.Thread(target=lambda: result.update(r=err_of(c.stage, "v", staging)))
    t.start()
    ctl.wait_hung("NodeStageVolume")
    assert not mounts.is_mount_point(staging)  # hung before the work
    # A second operation on the same volume while one is in flight: ABORTED.
    code, msg = err_of(c.unstage, "v", staging)
    assert (code, msg) == (C.ABORTED, "an operation with the given volume ID v already exists")
    assert ctl.release("NodeStageVolume") == 1
    t.join(10)
    assert result["r"] == (C.OK, "")
    assert mounts.is_mount_point(staging)
    assert ctl.hung() == {}
    c.unstage("v", staging)  # hang was for one call only


def test_an_injected_crash_logs_the_calls_it_takes_with_the_process(mock_csi, csi_dirs):
    """A real driver's crash ends every call it serves, not only the one that
    crashed: the others are logged as lost with it, so that the storm's audit
    (test/storm/audit.py) knows they were made and that their outcome is
    unknown, as kvolumed does."""
    c, ctl = mock_csi.csi, mock_csi.control
    staging, target = csi_dirs
    ctl.hang("NodeStageVolume", when="after")
    result = {}
    t = threading.Thread(target=lambda: result.update(r=err_of(c.stage, "v", staging)))
    t.start()
    ctl.wait_hung("NodeStageVolume")
    ctl.crash("NodePublishVolume", "before")
    assert err_of(c.publish, "w", target, staging_path=staging)[0] == C.UNAVAILABLE
    assert mock_csi.wait_exit() == CRASH_EXIT_CODE
    t.join(10)
    assert result["r"][0] == C.UNAVAILABLE
    lost = mock_csi.calls("NodeStageVolume")
    assert len(lost) == 1, lost
    assert lost[0]["code"] == "CRASH" and lost[0]["fault"]["crash"] == "lost", lost
    assert lost[0]["request"]["volume_id"] == "v"
    assert mock_csi.calls("NodePublishVolume")[-1]["fault"] == {"crash": "before"}
    mock_csi.restart()
    c.unstage("v", staging)  # the work was done before the hang: undone


def test_crash_before_and_after_work_then_restart_keeps_state(mock_csi, csi_dirs):
    c, ctl = mock_csi.csi, mock_csi.control
    staging, target = csi_dirs
    c.stage("v", staging)
    loop = mock_csi.state()["volumes"]["v"]["device"]

    ctl.crash("NodePublishVolume", "before")
    assert err_of(c.publish, "v", target, staging_path=staging)[0] == C.UNAVAILABLE
    assert mock_csi.wait_exit() == CRASH_EXIT_CODE
    assert not mounts.is_mount_point(target)
    assert mock_csi.calls("NodePublishVolume")[-1]["code"] == "CRASH"

    mock_csi.restart()
    st = mock_csi.state()["volumes"]["v"]
    assert (st["staged"]["path"], st["device"]) == (staging, loop)
    assert mounts.mount_entry(staging)["source"] == loop
    mock_csi.control.crash("NodePublishVolume", "after")
    assert err_of(c.publish, "v", target, staging_path=staging)[0] == C.UNAVAILABLE
    assert mock_csi.wait_exit() == CRASH_EXIT_CODE
    assert mounts.is_mount_point(target)  # the work was done before the crash

    mock_csi.restart()
    assert list(mock_csi.state()["volumes"]["v"]["published"]) == [target]
    assert mock_csi.control.faults() == {}  # faults live in the process, not the state
    c.publish("v", target, staging_path=staging)  # same args: idempotent OK
    c.unpublish("v", target)
    c.unstage("v", staging)
    mounts.assert_loops_released(lambda: mounts.loops_for(mock_csi.state()["volumes"]["v"]["backing"]))


def test_cleanup_after_sigkill_removes_every_mount_and_loop(mock_csi, csi_dirs, tmp_path):
    c = mock_csi.csi
    staging, target = csi_dirs
    c.stage("v", staging)
    c.publish("v", target, staging_path=staging)
    blk_staging = tmp_path / "blkstage"
    blk_staging.mkdir()
    blk_target = str(tmp_path / "pod" / "dev")
    c.stage("b", str(blk_staging), block=True, volume_context={"size": "4Mi"})
    c.publish("b", blk_target, staging_path=str(blk_staging), block=True)
    eph = str(tmp_path / "pod" / "eph")
    c.publish("csi-eph", eph, volume_context={"csi.storage.k8s.io/ephemeral": "true"})
    mock_csi.kill()
    assert len(mounts.loops_under(mock_csi.state_dir)) == 2

    done = cleanup(mock_csi.state_dir)
    assert sorted(done["unmounted"]) == sorted([staging, target, blk_target, eph])
    assert len(done["detached"]) == 2
    mounts.assert_loops_released(lambda: mounts.loops_under(mock_csi.state_dir))
    assert not any(mounts.is_mount_point(p) for p in (staging, target, blk_target, eph))
    assert not os.path.exists(blk_target) and not os.path.exists(eph) and not os.path.exists(target)
    st = mock_csi.state()
    assert st["ephemeral"] == {}
    assert {v: (s["staged"], s["published"], s["device"]) for v, s in st["volumes"].items()} == {
        "v": (None, {}, None), "b": (None, {}, None)}
    # The disks survive (a later stage sees the data), until asked to go.
    assert all(os.path.exists(s["backing"]) for s in st["volumes"].values())
    cleanup(mock_csi.state_dir, remove_volumes=True)
    assert os.listdir(os.path.join(mock_csi.state_dir, "volumes")) == []


def test_cleanup_under_root_unmounts_foreign_mounts_deepest_first(mock_csi, tmp_path):
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    mounts.mount("tmpfs", str(root / "a"), "tmpfs")
    os.makedirs(root / "a" / "b")
    mounts.mount("tmpfs", str(root / "a" / "b"), "tmpfs")
    done = cleanup(mock_csi.state_dir, under=str(root))
    assert done["unmounted"] == [str(root / "a" / "b"), str(root / "a")]
    assert not mounts.is_mount_point(str(root / "a"))


def test_sigterm_leaves_nothing(mock_csi_factory, tmp_path):
    drv = mock_csi_factory(registration_dir=True)
    c = drv.csi
    staging = tmp_path / "s"
    staging.mkdir()
    (tmp_path / "pod").mkdir()
    c.stage("v", str(staging))
    c.publish("v", str(tmp_path / "pod" / "m"), staging_path=str(staging))
    c.publish("csi-e", str(tmp_path / "pod" / "e"), volume_context={"csi.storage.k8s.io/ephemeral": "true"})
    drv.control.hang("NodeGetInfo")  # a hung call must not keep the driver alive
    t = threading.Thread(target=err_of, args=(c.node, "NodeGetInfo"))
    t.start()
    drv.control.wait_hung("NodeGetInfo")
    before = {m["mount_point"] for m in mounts.mountinfo()}
    assert str(staging) in before
    assert drv.stop() == 0
    t.join(10)
    after = {m["mount_point"] for m in mounts.mountinfo()}
    assert {p for p in after if p.startswith(str(tmp_path))} == set()
    mounts.assert_loops_released(lambda: mounts.loops_under(drv.state_dir))
    assert not os.path.exists(drv.socket_path)
    assert not os.path.exists(drv.registration_socket)
    assert not os.path.exists(drv.control_socket)
    assert drv.state()["volumes"]["v"]["staged"] is None


def test_shutdown_without_cleanup_keeps_mounts_for_the_next_driver(mock_csi, csi_dirs):
    staging, target = csi_dirs
    mock_csi.csi.stage("v", staging)
    mock_csi.control.shutdown(cleanup=False)
    assert mock_csi.wait_exit() == 0
    assert mounts.is_mount_point(staging)
    mock_csi.start()
    assert mock_csi.state()["volumes"]["v"]["staged"]["path"] == staging
    mock_csi.csi.unstage("v", staging)
    assert not mounts.is_mount_point(staging)


def test_call_log_redacts_secrets(mock_csi, csi_dirs):
    staging, target = csi_dirs
    mock_csi.csi.stage("v", staging, secrets={"password": "hunter2", "user": "admin-secret"},
                       volume_context={"k": "visible"})
    mock_csi.csi.publish("v", target, staging_path=staging, secrets={"token": "s3cr3t-token"})
    with open(mock_csi.call_log_path) as f:
        raw = f.read()
    for secret in ("hunter2", "admin-secret", "s3cr3t-token"):
        assert secret not in raw
    stage, publish = [json.loads(l) for l in raw.splitlines()]
    assert stage["method"] == "NodeStageVolume"
    assert stage["request"]["secrets"] == {"password": "password", "user": "user"}
    assert stage["request"]["volume_context"] == {"k": "visible"}
    assert stage["request"]["staging_target_path"] == staging
    assert (stage["code"], stage["message"]) == ("OK", "")
    assert publish["request"]["secrets"] == {"token": "token"}
    mock_csi.control.clear_calls()
    assert mock_csi.calls() == []
    mock_csi.csi.unpublish("v", target)
    mock_csi.csi.unstage("v", staging)


@pytest.mark.parametrize("field", ["node_id", "topology"])
def test_oversized_node_get_info(mock_csi, field):
    mock_csi.control.oversize(5 * 1024 * 1024, field=field)
    code, _ = err_of(mock_csi.csi.node, "NodeGetInfo")
    assert code == C.RESOURCE_EXHAUSTED  # over the default 4 MiB receive limit
    big = CSIClient(mock_csi.endpoint, max_receive=16 * 1024 * 1024)
    resp = big.node("NodeGetInfo")
    if field == "node_id":
        assert len(resp.node_id) == 5 * 1024 * 1024 + len("node-1")
    else:
        assert len(resp.accessible_topology.segments["mock.csi.kvolumed.io/pad"]) == 5 * 1024 * 1024


def test_fixture_teardown_reports_and_removes_leaks(tmp_path):
    """The fixtures' teardown check can fail: a leaked mount and a driver that
    died with its volumes staged are both reported and then cleaned away."""
    from doubles.mockcsi.fixtures import _Factory
    fac = _Factory(tmp_path)
    drv = fac(allow_violations=False)
    leak = tmp_path / "leak"
    leak.mkdir()
    mounts.mount("tmpfs", str(leak), "tmpfs")
    drv.csi.stage("v", str(tmp_path / "missing-staging"))  # violation: kubelet would have made it
    problems = fac.teardown()
    assert problems == [
        "mounts left behind: %s" % [str(leak)],
        "CO protocol violations seen by mock.csi.kvolumed.io: %s" % [
            "NodeStageVolume v: staging_target_path %s did not exist" % (tmp_path / "missing-staging")]]
    assert not mounts.is_mount_point(str(leak))
    mounts.assert_loops_released(lambda: mounts.loops_under(drv.state_dir))
