"""The mock driver's faults for the fault storm (test/storm): random errors,
random hangs that end when the client goes, the count of calls in flight, and
a mount left by a killed predecessor taken over instead of mounted twice."""
import os
import subprocess
import threading
import time

import grpc
import pytest

from doubles.mockcsi import ControlError, mounts, status_of as err_of

C = grpc.StatusCode
EPHEMERAL = {"csi.storage.k8s.io/ephemeral": "true"}


def wait_for(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def test_error_rate_fails_calls_before_or_after_the_work(mock_csi, csi_dirs):
    c, ctl = mock_csi.csi, mock_csi.control
    _, target = csi_dirs
    ctl.inject("NodePublishVolume", error_rate={"rate": 1.0, "codes": ["ABORTED"], "message": "random"})
    assert err_of(c.publish, "e", target, volume_context=EPHEMERAL) == (C.ABORTED, "random")
    assert not mounts.is_mount_point(target)
    ctl.inject("NodePublishVolume", error_rate={"rate": 1.0, "codes": [14], "when": "after"})
    assert err_of(c.publish, "e", target, volume_context=EPHEMERAL)[0] == C.UNAVAILABLE
    assert mounts.is_mount_point(target)  # the work was done, the answer lost
    ctl.inject("NodePublishVolume", error_rate=None)
    assert err_of(c.publish, "e", target, volume_context=EPHEMERAL) == (C.OK, "")
    logged = [(e["code"], e.get("fault", {}).get("error", {}).get("when")) for e in mock_csi.calls("NodePublishVolume")]
    assert logged == [("ABORTED", "before"), ("UNAVAILABLE", "after"), ("OK", None)]
    c.unpublish("e", target)


def test_error_rate_zero_and_bad_specs(mock_csi):
    ctl = mock_csi.control
    ctl.inject("Probe", error_rate={"rate": 0.0, "codes": ["UNAVAILABLE"]})
    for _ in range(20):
        assert err_of(mock_csi.csi.identity, "Probe") == (C.OK, "")
    for bad in ({"rate": 1, "codes": ["NOPE"]}, {"rate": 1, "when": "sometimes"}):
        with pytest.raises(ControlError) as e:
            ctl.inject("Probe", error_rate=bad)
        assert e.value.status == 400
    assert ctl.faults()["Probe"]["error_rate"]["rate"] == 0.0  # a bad spec changes nothing


def test_hung_call_ends_when_its_client_goes(mock_csi, csi_dirs):
    c, ctl = mock_csi.csi, mock_csi.control
    _, target = csi_dirs
    ctl.inject("NodePublishVolume", hang_rate=1.0)
    t0 = time.monotonic()
    assert err_of(c.publish, "h", target, volume_context=EPHEMERAL, timeout=0.5)[0] == C.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 5
    # The driver notices the cancellation: the call stops hanging and goes on
    # with the work, as a driver whose hang ends does; it is logged with
    # client_gone and no longer counts as in flight.
    entry = wait_for(lambda: mock_csi.calls("NodePublishVolume"), what="the call logged")[-1]
    assert (entry["code"], entry["client_gone"], entry["fault"]["hang"]) == ("OK", True, "before")
    assert ctl.hung() == {}
    assert ctl.in_flight()["now"] == 0
    assert mounts.is_mount_point(target)
    ctl.inject("NodePublishVolume", hang_rate=0.0)
    assert err_of(c.publish, "h", target, volume_context=EPHEMERAL) == (C.OK, "")
    assert "client_gone" not in mock_csi.calls("NodePublishVolume")[-1]
    c.unpublish("h", target)


def test_in_flight_counts_the_calls_a_client_waits_for(mock_csi):
    ctl = mock_csi.control
    assert ctl.in_flight(reset_max=True)["max"] == 0
    ctl.hang("Probe", count=3)
    threads = [threading.Thread(target=mock_csi.csi.identity, args=("Probe",)) for _ in range(3)]
    for t in threads:
        t.start()
    ctl.wait_hung("Probe", 3)
    assert ctl.in_flight() == {"now": 3, "max": 3, "volume_ops_max": 0, "by_method_max": {"Probe": 3}}
    assert ctl.release("Probe") == 3
    for t in threads:
        t.join(10)
    assert ctl.in_flight() == {"now": 0, "max": 3, "volume_ops_max": 0, "by_method_max": {"Probe": 3}}
    assert ctl.in_flight(reset_max=True)["max"] == 3
    assert ctl.in_flight() == {"now": 0, "max": 0, "volume_ops_max": 0, "by_method_max": {}}


def test_a_mount_without_record_is_taken_over_not_mounted_twice(mock_csi, csi_dirs):
    """A driver killed while its mount(8) ran: the child finishes the mount,
    the state never says so.  The restarted driver must answer the retried
    call without mounting a second file system on top."""
    c = mock_csi.csi
    staging, target = csi_dirs
    eph = os.path.join(os.path.dirname(target), "eph")
    os.makedirs(eph)
    for path in (staging, eph):
        subprocess.run(["mount", "-t", "tmpfs", "orphan", path], check=True)
    c.stage("v", staging)
    c.publish("v", target, staging_path=staging)
    os.makedirs(target + "2")
    subprocess.run(["mount", "--bind", staging, target + "2"], check=True)
    c.publish("v", target + "2", staging_path=staging)
    c.publish("e", eph, volume_context=EPHEMERAL)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for path in (staging, target, target + "2", eph):
        assert points.count(path) == 1, path
    c.unpublish("e", eph)
    c.unpublish("v", target + "2")
    c.unpublish("v", target)
    c.unstage("v", staging)
    for path in (staging, target, target + "2", eph):
        assert not mounts.is_mount_point(path), path
