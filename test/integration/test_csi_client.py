"""csi/ against the mock CSI driver (Python grpcio), through test/tools/csi-harness.

The harness performs the calls given as JSON lines and prints one JSON line
per result and per registration event.  Every test runs twice: with this
machine's libcurl (7.88 on Debian 12: a fresh connection per call) and with
libcurl 8 from bookworm-backports unpacked privately (test/tools/
csi-fetch-curl8.sh: one multiplexed connection per driver); the second is
skipped with the reason when backports cannot be reached.
"""
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time

import pytest

from doubles.mockcsi.burst import BurstProxy

TEST_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TEST_DIR)
BUILD_DIR = os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO_DIR, "build"))
HARNESS = os.path.join(BUILD_DIR, "test", "tools", "csi-harness")
FETCH_CURL8 = os.path.join(TEST_DIR, "tools", "csi-fetch-curl8.sh")
DRIVER = "mock.csi.kvolumed.io"

_curl8 = {}


def curl8_libdir():
    """LD_LIBRARY_PATH holding libcurl 8 from bookworm-backports, or skip."""
    if "dir" not in _curl8:
        p = subprocess.run([FETCH_CURL8], capture_output=True, text=True)
        _curl8["dir"] = p.stdout.strip() if p.returncode == 0 else None
        _curl8["why"] = p.stderr.strip()
    if not _curl8["dir"]:
        pytest.skip("libcurl 8 not available: %s" % _curl8["why"])
    return _curl8["dir"]


class Harness:
    """One csi-harness process; call() sends a command and waits for its result."""

    def __init__(self, args, libcurl="system", log_path=None):
        if not os.access(HARNESS, os.X_OK):
            pytest.skip("%s not built (set KVOLUMED_BUILD_DIR)" % HARNESS)
        env = dict(os.environ, KVOLUMED_LOG_TARGET="stderr")
        if libcurl == "curl8":
            env["LD_LIBRARY_PATH"] = curl8_libdir()
        self.log_path = log_path
        self.stderr = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([HARNESS] + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, text=True, bufsize=1)
        self.events = queue.Queue()
        self.results = {}
        self.lock = threading.Condition()
        self.other = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.ready = self.wait_event("ready", timeout=10)
        self.n = 0

    def _read(self):
        for line in self.proc.stdout:
            ev = json.loads(line)
            with self.lock:
                if ev["event"] in ("result", "bench", "cancelled"):
                    self.results.setdefault(ev["id"], []).append(ev)
                else:
                    self.other.append(ev)
                self.lock.notify_all()

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def start(self, method, request=None, driver=DRIVER):
        self.n += 1
        cid = "c%d" % self.n
        self.send({"id": cid, "method": method, "driver": driver, "request": request or {}})
        return cid

    def result(self, cid, timeout=30, kind="result"):
        end = time.time() + timeout
        with self.lock:
            while True:
                for ev in self.results.get(cid, []):
                    if ev["event"] == kind:
                        return ev
                left = end - time.time()
                assert left > 0, "no %s for %s within %ss" % (kind, cid, timeout)
                self.lock.wait(left)

    def call(self, method, request=None, driver=DRIVER, timeout=30):
        return self.result(self.start(method, request, driver), timeout)

    def wait_event(self, kind, timeout=20, contains=None, **match):
        """The first event of this kind whose fields equal `match` (and whose
        "reason" holds `contains`): events that do not match are left, so a
        retried early failure is not taken for the answer awaited."""
        end = time.time() + timeout
        with self.lock:
            while True:
                for i, ev in enumerate(self.other):
                    if ev["event"] == kind and all(ev.get(k) == v for k, v in match.items()) and \
                            (contains is None or contains in (ev.get("reason") or "")):
                        del self.other[i]
                        return ev
                left = end - time.time()
                assert left > 0, "no %s event %s within %ss; saw %s" % (kind, match, timeout, self.other)
                self.lock.wait(left)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log_path:
            self.stderr.close()
        return self.proc.returncode


@pytest.fixture(params=["system", "curl8"])
def libcurl(request):
    if request.param == "curl8":
        curl8_libdir()
    return request.param


@pytest.fixture
def harness_factory(libcurl, tmp_path):
    made = []

    def make(*args, **kw):
        h = Harness(args, libcurl=libcurl, log_path=str(tmp_path / ("harness%d.log" % len(made))), **kw)
        assert h.ready["reuse"] == (libcurl == "curl8"), h.ready
        made.append(h)
        return h
    yield make
    for h in made:
        rc = h.close()
        assert rc == 0, "csi-harness exited %s" % rc


@pytest.fixture
def regdir():
    """A short registration dir: unix socket paths are limited to 107 bytes."""
    import pathlib
    import tempfile
    d = tempfile.mkdtemp(prefix="kvreg", dir="/tmp")
    yield pathlib.Path(d) / "plugins_registry"
    shutil.rmtree(d, ignore_errors=True)


def static(drv):
    return "--driver=%s=%s" % (drv.name, drv.endpoint)


def test_every_call_round_trips(mock_csi, harness_factory, tmp_path):
    h = harness_factory(static(mock_csi), "--metrics")
    r = h.call("GetPluginInfo")
    assert r["code"] == "OK" and r["response"]["name"] == DRIVER and r["response"]["vendor_version"] == "0.1.0"
    assert h.call("GetPluginCapabilities")["code"] == "OK"
    assert h.call("Probe")["response"] == {"ready": True}
    caps = h.call("NodeGetCapabilities")["response"]["capabilities"]
    assert set(caps) == {"STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "EXPAND_VOLUME"}
    info = h.call("NodeGetInfo")["response"]
    assert info["node_id"] == "node-1"

    staging = tmp_path / "globalmount"
    target = tmp_path / "pod" / "mount"
    staging.mkdir()
    target.parent.mkdir()
    cap = {"mount": {"fs_type": "ext4", "mount_flags": ["noatime"]}, "access_mode": "SINGLE_NODE_WRITER"}
    stage = {"volume_id": "vol-1", "staging_target_path": str(staging), "volume_capability": cap,
             "publish_context": {"devicePath": "/dev/x"}, "secrets": {"password": "hunter2"},
             "volume_context": {"size": "32Mi"}}
    r = h.call("NodeStageVolume", stage, timeout=60)
    assert r["code"] == "OK", r
    publish = {"volume_id": "vol-1", "staging_target_path": str(staging), "target_path": str(target),
               "volume_capability": cap, "readonly": False, "secrets": {"password": "hunter2"},
               "volume_context": {"size": "32Mi"}}
    assert h.call("NodePublishVolume", publish)["code"] == "OK"
    assert os.path.ismount(str(target))
    stats = h.call("NodeGetVolumeStats", {"volume_id": "vol-1", "volume_path": str(target)})
    assert stats["code"] == "OK", stats
    units = {u["unit"]: u for u in stats["response"]["usage"]}
    assert units["BYTES"]["total"] > 0 and "INODES" in units
    r = h.call("NodeExpandVolume", {"volume_id": "vol-1", "volume_path": str(target),
                                    "capacity_range": {"required_bytes": 48 << 20}})
    assert r["code"] == "OK" and r["response"]["capacity_bytes"] >= 48 << 20, r
    assert h.call("NodeUnpublishVolume", {"volume_id": "vol-1", "target_path": str(target)})["code"] == "OK"
    assert not os.path.ismount(str(target))
    assert h.call("NodeUnstageVolume", {"volume_id": "vol-1", "staging_target_path": str(staging)})["code"] == "OK"

    # What the driver received, field by field (its log shows secret keys, not values).
    req = mock_csi.calls("NodeStageVolume")[-1]["request"]
    assert req["volume_id"] == "vol-1" and req["staging_target_path"] == str(staging)
    assert req["publish_context"] == {"devicePath": "/dev/x"} and req["volume_context"] == {"size": "32Mi"}
    assert req["secrets"] == {"password": "password"}
    assert req["volume_capability"]["mount"] == {"fs_type": "ext4", "mount_flags": ["noatime"]}
    assert req["volume_capability"]["access_mode"] == {"mode": "SINGLE_NODE_WRITER"}
    req = mock_csi.calls("NodePublishVolume")[-1]["request"]
    assert req["target_path"] == str(target) and req["staging_target_path"] == str(staging)
    methods = [c["method"] for c in mock_csi.calls()]
    for m in ("GetPluginInfo", "GetPluginCapabilities", "Probe", "NodeGetCapabilities", "NodeGetInfo",
              "NodeStageVolume", "NodePublishVolume", "NodeGetVolumeStats", "NodeExpandVolume",
              "NodeUnpublishVolume", "NodeUnstageVolume"):
        assert m in methods

    # One metrics sample per call, with kubelet's label values.
    # (the twelfth: the NodeGetInfo the client asks a static driver at start)
    metrics = [e for e in h.other if e["event"] == "metrics"]
    assert len(metrics) == 12
    assert {"driver_name": DRIVER, "method_name": "/csi.v1.Node/NodeStageVolume",
            "grpc_status_code": "OK"}.items() <= next(
        m for m in metrics if m["method_name"].endswith("NodeStageVolume")).items()
    # The secret never reached our log either (harness runs at info level here).
    h.close()
    assert "hunter2" not in open(h.log_path).read()


@pytest.mark.parametrize("code,final", [
    ("NOT_FOUND", True), ("INVALID_ARGUMENT", True), ("FAILED_PRECONDITION", True), ("INTERNAL", True),
    ("UNIMPLEMENTED", True), ("ABORTED", False), ("RESOURCE_EXHAUSTED", False), ("UNAVAILABLE", False),
    ("DEADLINE_EXCEEDED", False), ("CANCELLED", False)])
def test_errors_arrive_intact(mock_csi_factory, harness_factory, code, final):
    drv = mock_csi_factory(tmpfs=True)
    h = harness_factory(static(drv))
    message = "volume \"vol 7\" is 100% gone: caf\u00e9 \u2713 / line\nnext"
    drv.control.fail_next("NodeUnpublishVolume", code, message)
    r = h.call("NodeUnpublishVolume", {"volume_id": "vol-7", "target_path": "/nonexistent/x"})
    names = {"NOT_FOUND": "NotFound", "INVALID_ARGUMENT": "InvalidArgument",
             "FAILED_PRECONDITION": "FailedPrecondition", "INTERNAL": "Internal", "UNIMPLEMENTED": "Unimplemented",
             "ABORTED": "Aborted", "RESOURCE_EXHAUSTED": "ResourceExhausted", "UNAVAILABLE": "Unavailable",
             "DEADLINE_EXCEEDED": "DeadlineExceeded", "CANCELLED": "Canceled"}
    assert r["code"] == names[code]
    assert r["message"] == message
    assert r["final"] is final


# libcurl 7.88's race (csi/grpc.c, call_ended_unsent): a server answering a
# call on its headers (grpcio, an unknown method) and ending the stream may
# have its answer read before the request's body is sent; libcurl then fails
# the call with no message of its own, and kvolumed asks again, twice at most.
# Seen in CI as this test's Unavailable; under strace (each sendto slowed)
# it is lost most times.
CURL788_RACE = "Stream error in the HTTP/2 framing layer"


def asked_again(h):
    with open(h.log_path) as f:
        return f.read().count("the server ended the stream before its request was sent")


def test_unknown_method_is_unimplemented(mock_csi_factory, harness_factory, regdir, libcurl):
    # The registration socket serves only pluginregistration: csi.v1 is unknown there.
    drv = mock_csi_factory(tmpfs=True, registration_dir=str(regdir))
    h = harness_factory("--driver=%s=unix://%s" % (DRIVER, drv.registration_socket), "--log-level=debug")
    r = h.call("NodeGetInfo")
    if r["code"] == "Unimplemented" and r["final"]:
        return
    # The race lost on every attempt (a machine under heavy load): only after
    # kvolumed asked again twice, in libcurl's words, and never anything else.
    if not (libcurl == "system" and r["code"] == "Unavailable" and not r["final"]
            and r["message"].endswith(CURL788_RACE) and asked_again(h) >= 2):
        pytest.fail("answered %s" % json.dumps(r))


def test_driver_not_up_yet(mock_csi_factory, harness_factory):
    drv = mock_csi_factory(start=False, tmpfs=True)
    h = harness_factory(static(drv))
    t0 = time.time()
    r = h.call("NodeGetInfo")
    assert r["code"] == "Unavailable" and not r["final"]
    assert time.time() - t0 < 1.0 and r["duration_ms"] < 100, r
    drv.start()
    r = h.call("NodeGetInfo")
    assert r["code"] == "OK" and r["response"]["node_id"] == "node-1"


def test_driver_killed_mid_call(mock_csi_factory, harness_factory, tmp_path):
    drv = mock_csi_factory(tmpfs=True)
    h = harness_factory(static(drv))
    assert h.call("NodeGetInfo")["code"] == "OK"  # a connection exists (reused on libcurl 8)
    drv.control.hang("NodeGetVolumeStats")
    cid = h.start("NodeGetVolumeStats", {"volume_id": "v", "volume_path": str(tmp_path)})
    drv.control.wait_hung("NodeGetVolumeStats")
    drv.kill()
    r = h.result(cid, timeout=10)
    assert r["code"] == "Unavailable" and not r["final"], r
    drv.start()
    r = h.call("NodeGetInfo")
    assert r["code"] == "OK", r


def test_hung_call_deadline(mock_csi_factory, harness_factory, tmp_path):
    drv = mock_csi_factory(tmpfs=True)
    h = harness_factory(static(drv), "--call-timeout-ms=1500")
    drv.control.hang("NodeGetVolumeStats")
    t0 = time.time()
    r = h.call("NodeGetVolumeStats", {"volume_id": "v", "volume_path": str(tmp_path)}, timeout=10)
    took = time.time() - t0
    drv.control.release()
    assert r["code"] == "DeadlineExceeded" and not r["final"], r
    assert 1.4 <= took < 2.5, took
    assert 1400 <= r["duration_ms"] < 1700, r


def test_response_over_receive_limit(mock_csi_factory, harness_factory):
    drv = mock_csi_factory(tmpfs=True)
    h = harness_factory(static(drv), "--max-receive=65536")
    h.wait_event("registered", driver=DRIVER, timeout=60)
    drv.control.oversize(100000)
    r = h.call("NodeGetInfo")
    assert r["code"] == "ResourceExhausted" and not r["final"], r
    drv.control.oversize(60000)
    r = h.call("NodeGetInfo")
    assert r["code"] == "OK" and len(r["response"]["node_id"]) > 60000
    drv.control.clear_faults()
    assert h.call("NodeGetInfo")["code"] == "OK"


def test_default_receive_limit_is_4mib(mock_csi_factory, harness_factory):
    drv = mock_csi_factory(tmpfs=True)
    h = harness_factory(static(drv))
    # The client's own NodeGetInfo of a static driver is done first, so that
    # it neither gets a 4 MiB answer nor retries beside the calls below.
    h.wait_event("registered", driver=DRIVER, timeout=60)
    # 4 MiB answers from the Python driver: beside parallel workers on 2
    # cores one took over 30 s.
    drv.control.oversize(4 * 1024 * 1024 + 1)
    assert h.call("NodeGetInfo", timeout=120)["code"] == "ResourceExhausted"
    drv.control.oversize(4 * 1024 * 1024 - 64)
    assert h.call("NodeGetInfo", timeout=120)["code"] == "OK"


def test_answer_ending_in_one_read(mock_csi_factory, harness_factory):
    """The end of an answer that reaches the client in one read, late (the
    driver ran late on a loaded machine), is read at once.

    libcurl before 8.1.0 reads HTTP/2 32 KiB at a time and pauses nghttp2
    when the DATA of one read overflows the transfer's receive buffer (16 KiB
    by default); it then serves the paused bytes, but leaves the frames after
    them (here the grpc-status trailers) in its buffer and arms no timer: the
    call waited for its deadline (test_default_receive_limit_is_4mib[system]
    once hung 120 s so, when the end of a 4 MiB answer came in one read).
    The proxy makes that read happen every time: the answer's last DATA
    frame, 8000 bytes of the one before it and the trailers (over 16 KiB,
    under 32 KiB) arrive together, a second after the connect, once the
    client has read all before them."""
    drv = mock_csi_factory(tmpfs=True)
    proxy = BurstProxy(drv.socket_path, os.path.join(drv.sock_dir, "burst.sock"), tail=8000).start()
    try:
        h = harness_factory("--driver=%s=%s" % (drv.name, proxy.endpoint), "--call-timeout-ms=30000")
        # The client's own NodeGetInfo of a static driver is done first.
        h.wait_event("registered", driver=DRIVER, timeout=60)
        drv.control.oversize(29000)
        # A stalled call ends with DeadlineExceeded after its 30 s.
        r = h.call("NodeGetInfo", timeout=60)
        assert r["code"] == "OK" and len(r["response"]["node_id"]) > 29000, r
        # The double did what it is for: the answer's end in one write that
        # one read of libcurl takes whole and that overflows its 16 KiB.
        assert 16384 < proxy.bursts[-1] < 32768, proxy.bursts
    finally:
        proxy.stop()


def test_max_parallel_queues(mock_csi_factory, harness_factory):
    drv = mock_csi_factory(tmpfs=True)
    h = harness_factory(static(drv), "--max-parallel=2")
    drv.control.delay("NodeGetInfo", 0.3)
    t0 = time.time()
    ids = [h.start("NodeGetInfo") for _ in range(6)]
    results = [h.result(i) for i in ids]
    took = time.time() - t0
    assert all(r["code"] == "OK" for r in results)
    assert took >= 0.85, took  # 6 calls, 2 at a time, 0.3 s each
    # FIFO: the later calls waited longer.
    assert results[5]["duration_ms"] > results[0]["duration_ms"] + 500


def test_cancel(mock_csi_factory, harness_factory, tmp_path):
    drv = mock_csi_factory(tmpfs=True)
    h = harness_factory(static(drv))
    drv.control.hang("NodeGetVolumeStats")
    cid = h.start("NodeGetVolumeStats", {"volume_id": "v", "volume_path": str(tmp_path)})
    drv.control.wait_hung("NodeGetVolumeStats")
    h.send({"id": cid, "cancel": True})
    h.result(cid, kind="cancelled")
    drv.control.release()
    assert h.call("NodeGetInfo")["code"] == "OK"
    time.sleep(0.2)
    assert [e for e in h.results[cid] if e["event"] == "result"] == []


def test_plugin_registration(mock_csi_factory, harness_factory, regdir):
    h = harness_factory("--registration-dir=%s" % regdir)
    assert h.call("NodeGetInfo")["error"] == "call not started"  # unknown before registration
    drv = mock_csi_factory(tmpfs=True, registration_dir=str(regdir), node_id="node-7", max_volumes=13,
                           topology={"topology.kvolumed.io/zone": "z1"})
    ev = h.wait_event("registered", driver=DRIVER)
    assert ev["endpoint"] == drv.socket_path
    assert ev["registration_socket"] == drv.registration_socket
    assert ev["version"] == "1.0.0"
    assert ev["node_info"] == {"node_id": "node-7", "max_volumes_per_node": 13,
                               "accessible_topology": {"topology.kvolumed.io/zone": "z1"}}
    assert h.call("NodeGetInfo")["response"]["node_id"] == "node-7"
    deadline = time.time() + 5
    while not drv.control.registration()["notifications"] and time.time() < deadline:
        time.sleep(0.05)
    notes = drv.control.registration()["notifications"]
    assert [(n["plugin_registered"], n["error"]) for n in notes] == [(True, "")]
    assert [c["method"] for c in drv.calls()][:3] == ["GetInfo", "GetPluginInfo", "NodeGetInfo"]

    drv.control.stop_registration()
    ev = h.wait_event("deregistered", driver=DRIVER)
    assert ev["registration_socket"] == drv.registration_socket
    assert h.call("NodeGetInfo")["error"] == "call not started"

    drv.control.start_registration()
    h.wait_event("registered", driver=DRIVER)
    assert h.call("NodeGetInfo")["code"] == "OK"


def test_registration_of_sockets_present_at_start_and_in_subdirs(mock_csi_factory, harness_factory, regdir):
    drv = mock_csi_factory(tmpfs=True, registration_dir=str(regdir / "sub" / "dir"))
    hidden = mock_csi_factory(tmpfs=True, name="hidden.csi.kvolumed.io", registration_dir=str(regdir / ".hidden"))
    h = harness_factory("--registration-dir=%s" % regdir)
    ev = h.wait_event("registered", driver=DRIVER)
    assert ev["registration_socket"] == drv.registration_socket
    # A subdirectory made after the start is watched too.
    late = mock_csi_factory(tmpfs=True, name="late.csi.kvolumed.io", registration_dir=str(regdir / "late"))
    h.wait_event("registered", driver="late.csi.kvolumed.io")
    time.sleep(0.5)
    assert not [e for e in h.other if e.get("driver") == "hidden.csi.kvolumed.io"]
    assert not hidden.calls()
    late.stop()
    h.wait_event("deregistered", driver="late.csi.kvolumed.io")


@pytest.mark.parametrize("opts,reason", [
    ({"registration_versions": ["2.0.0", "0.9"]}, "plugin validation failed"),
    ({"registration_type": "DevicePlugin"}, "no handler registered for plugin type: DevicePlugin"),
])
def test_registration_refused(mock_csi_factory, harness_factory, regdir, opts, reason):
    h = harness_factory("--registration-dir=%s" % regdir)
    drv = mock_csi_factory(tmpfs=True, registration_dir=str(regdir), **opts)
    # kvolumed may see the socket before the driver listens on it: that first,
    # retried failure is not the refusal this test waits for.
    h.wait_event("registration_failed", contains=reason)
    deadline = time.time() + 5
    while not drv.control.registration()["notifications"] and time.time() < deadline:
        time.sleep(0.05)
    n = drv.control.registration()["notifications"][-1]
    assert n["plugin_registered"] is False and reason in n["error"]
    assert not [e for e in h.other if e["event"] == "registered"]


def test_registration_refused_by_the_layer_above(mock_csi_factory, harness_factory, regdir):
    h = harness_factory("--registration-dir=%s" % regdir, "--refuse-registration=13")
    drv = mock_csi_factory(tmpfs=True, registration_dir=str(regdir))
    ev = h.wait_event("registered", driver=DRIVER)
    assert ev["refused"] is True
    h.wait_event("registration_failed", contains="Permission denied")
    assert h.call("NodeGetInfo")["error"] == "call not started"
    deadline = time.time() + 5
    while not drv.control.registration()["notifications"] and time.time() < deadline:
        time.sleep(0.05)
    assert drv.control.registration()["notifications"][0]["plugin_registered"] is False
