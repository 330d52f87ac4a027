"""csi/ against three independent gRPC server implementations: Python grpcio
(Debian), Node @grpc/grpc-js (npm registry) and grpc-go 1.33 (Debian, built
offline), each serving the same canned CSI plugin from test/interop/, with
this machine's libcurl and with libcurl 8 (see test_csi_client.py).

The toolchains are installed by the test when missing (apt-get for Go, npm
into /var/tmp for Node); a server is skipped, with the reason, only when its
toolchain cannot be installed.
"""
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from integration.test_csi_client import TEST_DIR, Harness, curl8_libdir

INTEROP = os.path.join(TEST_DIR, "interop")
REFERENCE = os.environ.get("KVOLUMED_REFERENCE_DIR",
                           os.path.join(os.path.dirname(os.path.dirname(TEST_DIR)), "shared", "reference"))
CACHE = "/var/tmp/kvolumed-interop"
GO_PACKAGES = ["golang-1.19-go", "golang-google-grpc-dev", "golang-goprotobuf-dev", "protobuf-compiler"]
DRIVER = "interop.csi"

_built = {}


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@contextlib.contextmanager
def _cache_lock(name):
    """The cache is shared by every process that runs these tests (pytest-xdist
    workers, other runs of the suite): one of them at a time fills an entry."""
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _go_server():
    """The Go server, built once for its sources (build.sh, server.go, the
    reference csi.proto) and kept: a directory per digest, made whole under
    a temporary name and renamed, never removed while another process may
    build or run from it."""
    digest = hashlib.sha256()
    for path in (os.path.join(INTEROP, "go", "build.sh"), os.path.join(INTEROP, "go", "server.go"),
                 os.path.join(REFERENCE, "csi.proto")):
        with open(path, "rb") as f:
            digest.update(f.read())
    d = os.path.join(CACHE, "go-" + digest.hexdigest()[:16])
    binary = os.path.join(d, "csi-go-server")
    with _cache_lock("go"):
        if os.access(binary, os.X_OK):
            return binary
        work = tempfile.mkdtemp(prefix=".go-", dir=CACHE)
        try:
            p = _run([os.path.join(INTEROP, "go", "build.sh"), REFERENCE, work], timeout=900)
            if p.returncode != 0:
                raise RuntimeError("go build failed: %s" % p.stderr[-2000:])
            os.rename(work, d)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return binary


def server_command(kind):
    """argv prefix to start the server of "kind" (the socket path is appended), or skip."""
    if kind in _built:
        if isinstance(_built[kind], str):
            pytest.skip(_built[kind])
        return _built[kind]
    try:
        if kind == "python":
            cmd = ["/usr/bin/python3", os.path.join(INTEROP, "python", "server.py")]
        elif kind == "node":
            d = os.path.join(CACHE, "node")
            with _cache_lock("node"):
                if not os.path.isdir(os.path.join(d, "node_modules", "@grpc", "grpc-js")):
                    if not shutil.which("npm"):
                        raise RuntimeError("npm is not installed")
                    os.makedirs(d, exist_ok=True)
                    shutil.copy(os.path.join(INTEROP, "node", "package.json"), d)
                    p = _run(["npm", "install", "--no-audit", "--no-fund"], cwd=d, timeout=600)
                    if p.returncode != 0:
                        raise RuntimeError("npm install failed: %s" % p.stderr[-1000:])
            cmd = ["env", "NODE_PATH=" + os.path.join(d, "node_modules"), "node",
                   os.path.join(INTEROP, "node", "server.js"), REFERENCE]
        elif kind == "go":
            if not os.path.exists("/usr/lib/go-1.19/bin/go") or not os.path.exists("/usr/bin/protoc-gen-go"):
                p = _run(["apt-get", "install", "-y", "--no-install-recommends"] + GO_PACKAGES, timeout=900)
                if p.returncode != 0:
                    raise RuntimeError("cannot install %s: %s" % (" ".join(GO_PACKAGES), p.stderr[-1000:]))
            cmd = [_go_server()]
        else:
            raise ValueError(kind)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        _built[kind] = "%s gRPC server unavailable: %s" % (kind, e)
        pytest.skip(_built[kind])
    _built[kind] = cmd
    return cmd


class Server:
    def __init__(self, cmd):
        self.dir = tempfile.mkdtemp(prefix="kvinterop", dir="/tmp")
        self.socket = os.path.join(self.dir, "csi.sock")
        env = dict(os.environ, PYTHONPATH=TEST_DIR)
        # The server writes through its own descriptor in append mode and we read
        # through another: with one shared descriptor our seek(0) moved the
        # server's write offset too, and a line it wrote after "READY" could
        # overwrite the "R" (seen in CI: "server did not start: \nEADY ...").
        out_path = os.path.join(self.dir, "out")
        with open(out_path, "a") as server_out:
            self.proc = subprocess.Popen(cmd + [self.socket], stdout=server_out, stderr=subprocess.STDOUT, env=env)
        self.out = open(out_path, "r")
        end = time.time() + 60
        while time.time() < end:
            self.out.seek(0)
            if "READY" in self.out.read():
                return
            assert self.proc.poll() is None, "server died: %s" % self.output()
            time.sleep(0.05)
        raise AssertionError("server did not start: %s" % self.output())

    def output(self):
        self.out.seek(0)
        return self.out.read()[-3000:]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.out.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(params=["python", "node", "go"])
def server(request):
    s = Server(server_command(request.param))
    s.kind = request.param
    yield s
    s.stop()


def _harness(libcurl, server, tmp_path, call_timeout_ms):
    if libcurl == "curl8":
        curl8_libdir()
    h = Harness(["--driver=%s=unix://%s" % (DRIVER, server.socket), "--call-timeout-ms=%d" % call_timeout_ms],
                libcurl=libcurl, log_path=str(tmp_path / "harness.log"))
    assert h.ready["reuse"] == (libcurl == "curl8")
    return h


@pytest.fixture(params=["system", "curl8"])
def harness(request, server, tmp_path):
    h = _harness(request.param, server, tmp_path, 3000)
    yield h
    assert h.close() == 0


# A deadline no busy machine reaches: what is tested is that every call
# gets its own answer, not how soon.
@pytest.fixture(params=["system", "curl8"])
def patient_harness(request, server, tmp_path):
    h = _harness(request.param, server, tmp_path, 60000)
    yield h
    assert h.close() == 0


def call(h, method, request=None):
    return h.call(method, request, driver=DRIVER, timeout=20)


def test_round_trip(server, harness):
    h = harness
    r = call(h, "GetPluginInfo")
    assert r["code"] == "OK", r
    assert r["response"] == {"name": "%s.csi.kvolumed.io" % server.kind, "vendor_version": "%s-1" % {
        "python": "py", "node": "js", "go": "go"}[server.kind],
        "manifest": {"impl": {"python": "grpcio", "node": "grpc-js", "go": "grpc-go"}[server.kind]}}
    r = call(h, "GetPluginCapabilities")["response"]
    assert r["volume_accessibility_constraints"] and r["volume_expansion"] == 1 and not r["controller_service"]
    assert call(h, "Probe")["response"] == {"ready": True}
    assert call(h, "NodeGetCapabilities")["response"] == {"capabilities": ["STAGE_UNSTAGE_VOLUME",
                                                                          "VOLUME_MOUNT_GROUP"]}
    assert call(h, "NodeGetInfo")["response"] == {"node_id": "node-%s" % server.kind, "max_volumes_per_node": 9,
                                                  "accessible_topology": {"zone": "a"}}
    cap = {"mount": {"fs_type": "xfs", "mount_flags": ["ro", "noatime"]}, "access_mode": "SINGLE_NODE_MULTI_WRITER"}
    assert call(h, "NodeStageVolume", {"volume_id": "v", "staging_target_path": "/s", "volume_capability": cap,
                                       "secrets": {"key": "value"}})["code"] == "OK"
    r = call(h, "NodePublishVolume", {"volume_id": "v", "target_path": "/target", "readonly": True,
                                      "secrets": {"key": "value"}, "volume_capability": cap})
    assert r["code"] == "OK", r
    assert call(h, "NodeUnpublishVolume", {"volume_id": "v", "target_path": "/target"})["code"] == "OK"
    assert call(h, "NodeUnstageVolume", {"volume_id": "v", "staging_target_path": "/s"})["code"] == "OK"
    r = call(h, "NodeGetVolumeStats", {"volume_id": "v", "volume_path": "/target"})["response"]
    assert r == {"usage": [{"available": 1, "total": 3, "used": 2, "unit": "BYTES"}],
                 "volume_condition": {"abnormal": True, "message": "bad"}}
    r = call(h, "NodeExpandVolume", {"volume_id": "v", "volume_path": "/target",
                                     "capacity_range": {"required_bytes": 5 << 30}})
    assert r["response"] == {"capacity_bytes": 5 << 30}


def test_error_codes_and_messages(server, harness):
    names = ["OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
             "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
             "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"]
    ids = {code: harness.start("NodeUnpublishVolume", {"volume_id": "fail-%d" % code, "target_path": "/t"},
                               driver=DRIVER) for code in range(1, 17)}
    for code, cid in ids.items():
        r = harness.result(cid, timeout=20)
        assert r["code"] == names[code], r
        assert r["message"] == "failed: 100%% \"fail-%d\" caf\u00e9" % code, r
        assert r["final"] == (code not in (1, 4, 8, 10, 14))


def test_deadline(server, harness):
    t0 = time.time()
    r = call(harness, "NodeGetVolumeStats", {"volume_id": "hang", "volume_path": "/x"})
    assert r["code"] == "DeadlineExceeded", r
    # The server never answers "hang": only the client's 3 s deadline ends
    # the call.  Not before it; after it by however long a loaded machine
    # takes to run the loop (a bound, not a timing: without the deadline the
    # call would never end).
    assert 2.9 < time.time() - t0 < 30


# 100 calls at once, each answered OK.  With the 3 s deadline of the other
# tests the servers answered some too late beside parallel workers on 2
# cores, and a loop of builds beside (load 14 to 20) slows them as much
# even alone: the deadline here is a minute.  Still run alone: 100 calls to three servers
# at once is load of its own.
@pytest.mark.serial
def test_parallel(server, patient_harness):
    ids = [patient_harness.start("NodeGetInfo", driver=DRIVER) for _ in range(100)]
    results = [patient_harness.result(i, timeout=120) for i in ids]
    assert all(r["code"] == "OK" for r in results), [r for r in results if r["code"] != "OK"][:3]
    assert all(r["response"]["node_id"] == "node-%s" % server.kind for r in results), results[:3]
