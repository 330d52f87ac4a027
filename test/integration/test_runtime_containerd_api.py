"""The pod runner's side of the node (DESIGN.md, "The node's other half"),
against a real containerd: the runner waits on kvolumed's local volumes API
for a pod's volumes, runs the pod with the host paths the API gives, and
waits for the teardown; a final error is answered at once with its reason.

Written against the API's contract (the [api] section, GET
/v1/pods/{uid}/volumes with wait=mounted|unmounted and a timeout: 200 when
done, 409 at once on a final error of the pod, 504 at the timeout, 404 for a
pod kvolumed knows nothing of), built on another branch at the same time:
until it is merged these tests fail, on purpose; none is skipped."""
import http.client
import json
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
import uuid

import pytest

from integration.agent_fixtures import DRIVER, wait_until
from integration.containerd_node import node, written  # noqa: F401  (fixture)

# One worker runs the real containerd's tests: see test_runtime_containerd.py.
pytestmark = pytest.mark.xdist_group("containerd")

UNKNOWN_DRIVER = "nosuch.csi.kvolumed.io"
# kvolumed waits this long for a driver to register before it calls the
# volume failed (volume/internal.h DRIVER_WAIT_GRACE_USEC).
DRIVER_GRACE = 20.0


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class Api:
    """The local API as a runner uses it (curl --unix-socket would do)."""

    def __init__(self, path):
        self.path = path

    def get(self, url, timeout=90.0):
        conn = UnixHTTPConnection(self.path, timeout)
        try:
            conn.request("GET", url)
            r = conn.getresponse()
            return r.status, json.loads(r.read() or b"null")
        finally:
            conn.close()

    def volumes(self, uid, wait=None, timeout=None):
        url = f"/v1/pods/{uid}/volumes"
        if wait:
            url += f"?wait={wait}" + (f"&timeout={timeout}" if timeout else "")
        return self.get(url)

    def wait_async(self, uid, wait, timeout):
        """Starts the wait in a thread; returns it, with .result = (status,
        body, monotonic time of the answer, wall time of the answer) once answered."""
        t = threading.Thread(target=self._wait, args=(uid, wait, timeout), daemon=True)
        t.result = None
        t.sent = time.time()
        t.start()
        return t

    def _wait(self, uid, wait, timeout):
        status, body = self.volumes(uid, wait, timeout)
        threading.current_thread().result = (status, body, time.monotonic(), time.time())


@pytest.fixture
def api_socket():
    d = tempfile.mkdtemp(prefix="kvapi-", dir="/tmp")  # socket paths fit in 107 bytes
    yield os.path.join(d, "run", "kvolumed.sock")  # "run" does not exist: kvolumed makes it
    shutil.rmtree(d, ignore_errors=True)


def start(node, api_socket, modes=("Persistent", "Ephemeral")):
    node.start(modes=modes, extra=f"[api]\nsocket = {api_socket}\n")
    wait_until(lambda: os.path.exists(api_socket), timeout=15, what="the API socket")
    return Api(api_socket)


def answered(thread, timeout):
    thread.join(timeout)
    assert not thread.is_alive(), f"no answer within {timeout}s"
    return thread.result


def test_runner_waits_for_mounted_runs_the_pod_then_waits_for_unmounted(node, api_socket):
    api = start(node, api_socket)
    env = node.env
    # Each publish takes 300 ms, so that every wait below is asked before
    # its volume is published: the figure is the wait's latency after the
    # publish, not a lookup.
    env.driver.control.delay("NodePublishVolume", 0.3)
    latencies = []
    for i in range(5):
        pod, target = node.inline_pod(f"w{i}")
        uid = pod["metadata"]["uid"]
        waiter = api.wait_async(uid, "mounted", "30s")
        status, body, _, answered_at = answered(waiter, 30)
        assert status == 200, body
        # The mock driver logs a call after its reply: the answer can come first.
        def publish_logged():
            return [c for c in env.calls("NodePublishVolume") if c["request"]["target_path"] == target]
        call = wait_until(publish_logged, what="the publish in the driver's log")
        assert call[0]["code"] == "OK"
        published = call[0]["time"] + call[0]["duration"]
        assert waiter.sent < published, "the wait began after the publish: no latency to measure"
        assert answered_at >= published - 0.005, body  # never before the volume is there
        latencies.append(answered_at - published)
        assert body["uid"] == uid and body["pod"] == f"default/w{i}"
        assert body["allMounted"] is True and body["allTornDown"] is False
        (vol,) = body["volumes"]
        assert vol["name"] == "scratch" and vol["driver"] == DRIVER and vol["state"] == "published"
        assert vol["hostPath"] == target and os.path.ismount(target)
        assert vol["readOnly"] is False and vol["block"] is False and "reason" not in vol
    env.driver.control.clear_faults()
    median = statistics.median(latencies)
    print(f"wait=mounted answered {median * 1000:.1f} ms (median of 5) after the publish ended; "
          f"max {max(latencies) * 1000:.1f} ms")
    assert median < 0.5, latencies  # event-driven: answered by the pass that saw the publish

    # The runner runs the pod with the host path the API gave.
    status, body = api.volumes(uid)
    assert status == 200
    host_path = body["volumes"][0]["hostPath"]
    cid = node.run_writer(pod, host_path)
    # Torn down only once the runtime says the container stopped and the
    # sandbox too: the wait for unmounted is not answered while it runs.
    gone = api.wait_async(uid, "unmounted", "60s")
    env.api.remove("pods", "default", pod["metadata"]["name"])
    node.wait_held(pod)
    assert gone.is_alive() and os.path.ismount(target)
    node.runner.stop_container(cid)
    node.runner.stop_pod(node.sandbox(pod))
    status, body, _, answered_at = answered(gone, 30)
    assert status == 200, body
    assert body["allTornDown"] is True
    (unpublish,) = wait_until(lambda: node.unpublishes(target), what="the driver's log of the unpublish")
    assert answered_at >= unpublish["time"]
    assert not os.path.lexists(target)
    # And at once for a pod already torn down.
    status, body = api.volumes(uid, "unmounted", "30s")
    assert status in (200, 404), body


def test_final_errors_answered_at_once_with_their_reason(node, api_socket):
    """A lifecycle mode the driver refuses, a claim that is not bound and
    (after kvolumed's grace for a driver to register) an unknown driver: the
    wait for mounted answers 409 with the reason, long before its timeout.
    The three waits run at once; the file's longest test (about 21 s)
    because the unknown driver is only final after its 20 s grace."""
    api = start(node, api_socket, modes=("Persistent",))  # no Ephemeral: inline volumes are refused
    env = node.env
    # Nothing known of a pod: 404; a wait for a pod never seen: 504 at its timeout.
    status, body = api.volumes(str(uuid.uuid4()))
    assert status == 404 and body.get("error"), body
    t0 = time.monotonic()
    status, body = api.volumes(str(uuid.uuid4()), "mounted", "500ms")
    assert status == 504 and 0.4 <= time.monotonic() - t0 < 5, (status, body)

    lifecycle, _ = node.inline_pod("lifecycle")
    env.pvc("pending")  # never bound
    unbound = env.pod("unbound", [{"name": "data", "persistentVolumeClaim": {"claimName": "pending"}}])
    env.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-nodriver"},
                    "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                             "csi": {"driver": UNKNOWN_DRIVER, "volumeHandle": "vol-nodriver"}},
                    "status": {"phase": "Available"}})
    env.pvc("nodriver-claim", "pv-nodriver")
    nodriver = env.pod("nodriver", [{"name": "data", "persistentVolumeClaim": {"claimName": "nodriver-claim"}}])
    t0 = time.monotonic()
    waits = {name: api.wait_async(p["metadata"]["uid"], "mounted", "90s")
             for name, p in (("lifecycle", lifecycle), ("unbound", unbound), ("nodriver", nodriver))}
    expect = {"lifecycle": 'volume mode "Ephemeral" not supported by driver ' + DRIVER,
              "unbound": "error processing PVC default/pending: PVC is not bound",
              "nodriver": f"driver name {UNKNOWN_DRIVER} not found in the list of registered CSI drivers"}
    for name in ("lifecycle", "unbound", "nodriver"):
        status, body, at, _ = answered(waits[name], 60)
        took = at - t0
        print(f"{name}: {status} after {took:.2f} s")
        assert status == 409, body
        assert expect[name] in body["error"], body
        (vol,) = body["volumes"]
        assert vol["state"] != "published" and expect[name] in vol["reason"], vol
        assert body["allMounted"] is False
        if name == "nodriver":
            assert DRIVER_GRACE - 1 <= took < DRIVER_GRACE + 10, took
        else:
            assert took < 5, took  # at once, not at the 90 s timeout
    assert not env.calls("NodePublishVolume")
