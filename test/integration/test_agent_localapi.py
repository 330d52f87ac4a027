"""The local volumes API for the pod runner (issue 21): a pod's volumes with
their state and host paths, kubelet's WaitForAttachAndMount (200 once all are
published, 409 at once on a final error, 504 at the timeout) and
WaitForUnmount, on a unix socket that `curl --unix-socket` reads; waiting is
answered from the reconcile pass that changed the pod, never by polling."""
import grp
import http.client
import json
import os
import re
import shutil
import socket
import stat
import statistics
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from integration.agent_fixtures import DRIVER, wait_until, write_config


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def api_get(path, url, method="GET", timeout=30):
    """(status, parsed JSON body, content type) of one request on the socket."""
    conn = UnixConnection(path, timeout=timeout)
    try:
        conn.request(method, url)
        r = conn.getresponse()
        body = r.read().decode()
        ctype = r.getheader("Content-Type")
    finally:
        conn.close()
    return r.status, (json.loads(body) if ctype == "application/json" else body), ctype


@pytest.fixture
def sockdir():
    """A short directory for the socket: a unix socket path has 107 bytes at most."""
    d = tempfile.mkdtemp(prefix="kva", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def api_config(env, socket_path, group=None, metrics=None):
    """A test's own socket: the default one in /run is shared by every
    kvolumed the tests start."""
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n'
                        f"[api]\nsocket = {socket_path}\n" + (f"group = {group}\n" if group is not None else ""))
    with open(path) as f:
        text = f.read()
    if metrics:
        text = text.replace("\nlisten =\n", f"\nlisten = {metrics}\n")
    with open(path, "w") as f:
        f.write(text)
    return path


def start(env, sockdir, **kw):
    sock = os.path.join(sockdir, "run", "kvolumed.sock")
    env.agent = env.start_agent(api_config(env, sock, **kw))
    env.agent.wait_for_log("Serving the local volumes API", timeout=30)
    return sock


def claim(name, claim_name, read_only=False):
    c = {"claimName": claim_name}
    if read_only:
        c["readOnly"] = True
    return {"name": name, "persistentVolumeClaim": c}


def inline(name, driver=DRIVER):
    return {"name": name, "csi": {"driver": driver}}


def wait_in_thread(sock, uid, query, timeout=60):
    """Starts a wait; .result is (status, body, time answered) once it is."""
    class W(threading.Thread):
        result = None

        def run(self):
            try:
                status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?{query}", timeout=timeout)
            except Exception as e:  # shown by the assertion on .result
                self.result = (repr(e), None, time.time())
                return
            self.result = (status, body, time.time())
    w = W(daemon=True)
    w.start()
    return w


def test_state_and_host_paths_of_inline_persistent_and_block_volumes(volume_env, sockdir):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-fs", "vol-fs", claim="fs")
    env.pvc("fs", "pv-fs")
    env.pv("pv-blk", "vol-blk", claim="blk", volume_mode="Block")
    env.pvc("blk", "pv-blk")
    sock = start(env, sockdir)
    st = os.stat(sock)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and (st.st_uid, st.st_gid) == (0, 0)
    assert stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o755

    pod = env.pod("web", [inline("scratch"), claim("data", "fs", read_only=True), claim("disk", "blk")],
                  devices=["disk"])
    uid = pod["metadata"]["uid"]
    status, body, ctype = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=30s")
    assert (status, ctype) == (200, "application/json"), body
    assert (body["uid"], body["pod"], body["allMounted"], body["allTornDown"]) == (uid, "default/web", True, False)
    vols = {v["name"]: v for v in body["volumes"]}
    assert vols["scratch"] == {"name": "scratch", "kind": "csi", "driver": DRIVER, "state": "published",
                               "hostPath": env.target(pod, "scratch"), "readOnly": False, "block": False}
    assert vols["data"] == {"name": "data", "kind": "csi", "driver": DRIVER, "state": "published",
                            "hostPath": env.target(pod, "pv-fs"), "readOnly": True, "block": False}
    disk = f"{env.root}/pods/{uid}/volumeDevices/kubernetes.io~csi/pv-blk"
    assert vols["disk"] == {"name": "disk", "kind": "csi", "driver": DRIVER, "state": "published", "hostPath": disk,
                            "readOnly": False, "block": True}
    # What the runner puts in the container spec is there.
    assert os.path.ismount(vols["scratch"]["hostPath"]) and os.path.ismount(vols["data"]["hostPath"])
    assert stat.S_ISBLK(os.stat(disk).st_mode)
    # Without a wait: the same, at once.
    status, again, _ = api_get(sock, f"/v1/pods/{uid}/volumes")
    assert status == 200 and again == body

    # A pod kvolumed knows nothing of.
    other = str(uuid.uuid4())
    status, body, ctype = api_get(sock, f"/v1/pods/{other}/volumes")
    assert (status, ctype) == (404, "application/json") and other in body["error"]

    # The pod still runs: its volumes stay, the wait times out.
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=unmounted&timeout=300ms", timeout=10)
    assert status == 504 and body["allTornDown"] is False and "timed out" in body["error"]

    # Teardown: the wait is answered once the pod's publishes are gone.
    waiter = wait_in_thread(sock, uid, "wait=unmounted&timeout=30s")
    env.api.remove("pods", "default", "web")
    waiter.join(35)
    status, body, answered = waiter.result
    assert status == 200 and body["allTornDown"] is True, body
    unpublished = max(c["time"] + c["duration"] for c in env.calls("NodeUnpublishVolume"))
    assert len(env.calls("NodeUnpublishVolume")) == 3 and answered >= unpublished
    assert not os.path.exists(env.target(pod, "scratch"))
    # Already torn down: at once.
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=unmounted&timeout=30s", timeout=5)
    assert status == 200 and body["allTornDown"] is True


def gid_pv(env, name, handle, claim_name, gid, **kw):
    """A PV bound to claim_name with the pv.beta.kubernetes.io/gid annotation."""
    pv = env.pv(name, handle, claim=claim_name, **kw)
    pv["metadata"]["annotations"] = {"pv.beta.kubernetes.io/gid": gid}
    pv["metadata"].pop("resourceVersion", None)
    env.api.update(pv)
    env.pvc(claim_name, name)


def test_supplemental_groups_of_the_pods_pv_gid_annotations(volume_env, sockdir):
    """kubelet's GetExtraSupplementalGroupsForPod: the gid annotations of the
    pod's mounted PVs, sorted as text and once each, parsed as
    strconv.ParseInt (an invalid one ignored), without those the pod has
    in securityContext.supplementalGroups; a PV not mounted adds nothing."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    gid_pv(env, "pv-a", "vol-a", "a", "1234")
    gid_pv(env, "pv-b", "vol-b", "b", "1234")        # the same group again
    gid_pv(env, "pv-c", "vol-c", "c", "+42")         # ParseInt takes a sign
    gid_pv(env, "pv-d", "vol-d", "d", "-7")
    gid_pv(env, "pv-e", "vol-e", "e", "staff")       # invalid: ignored
    gid_pv(env, "pv-f", "vol-f", "f", "5000")        # the pod has it already
    gid_pv(env, "pv-g", "vol-g", "g", "99999999999999999999")  # beyond int64: ignored
    gid_pv(env, "pv-x", "vol-x", "x", "777", driver="nope.csi.kvolumed.io")  # never mounted
    sock = start(env, sockdir)

    vols = [claim(n, n) for n in "abcdefg"]
    pod = env.pod("groups", vols, security_context={"supplementalGroups": [5000]})
    uid = pod["metadata"]["uid"]
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s", timeout=70)
    assert status == 200 and body["allMounted"], body
    # sorted as text: "+42" < "-7" < "1234" < "5000" < "9..." < "staff"
    assert body["supplementalGroups"] == [42, -7, 1234]

    # A PV not mounted (its driver is not there) gives nothing.
    other = env.pod("waiting", [claim("x", "x"), claim("a", "a")])
    ouid = other["metadata"]["uid"]
    # Until kvolumed has the pod, the API answers 404 without "volumes".
    wait_until(lambda: {v["name"]: v["state"] for v in api_get(sock, f"/v1/pods/{ouid}/volumes")[1].get("volumes", [])}
               .get("a") == "published", timeout=60, what="volume a published for the second pod")
    status, body, _ = api_get(sock, f"/v1/pods/{ouid}/volumes")
    assert status == 200 and not body["allMounted"]
    assert body["supplementalGroups"] == [1234]

    # A pod without such volumes: an empty list.
    plain = env.pod("plain", [inline("scratch")])
    status, body, _ = api_get(sock, f"/v1/pods/{plain['metadata']['uid']}/volumes?wait=mounted&timeout=60s",
                              timeout=70)
    assert status == 200 and body["supplementalGroups"] == []


def test_wait_mounted_latency_after_the_publish(volume_env, sockdir):
    """The answer follows the driver's NodePublishVolume reply by one
    reconcile pass: no poll interval (kubelet polls every 300 ms)."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = start(env, sockdir)
    latencies = []
    for i in range(20):
        uid = str(uuid.uuid4())
        waiter = wait_in_thread(sock, uid, "wait=mounted&timeout=30s")
        # The pod is created after the wait started: a pod not yet seen is waited for.
        env.api.create({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"p{i}", "namespace": "default"},
                        "spec": {"nodeName": "test-node", "volumes": [inline("v")],
                                 "containers": [{"name": "c", "image": "busybox",
                                                 "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]},
                        "status": {"phase": "Running"}}, uid=uid)
        waiter.join(35)
        status, body, answered = waiter.result
        assert status == 200 and body["allMounted"] is True, body
        [call] = [c for c in env.calls("NodePublishVolume") if f"/pods/{uid}/" in c["request"]["target_path"]]
        latencies.append(answered - (call["time"] + call["duration"]))
    median = statistics.median(latencies)
    print(f"wait=mounted answered {median * 1000:.1f} ms (median of 20) after the NodePublishVolume reply; "
          f"max {max(latencies) * 1000:.1f} ms")
    assert all(lat > 0 for lat in latencies)
    assert median < 0.3, latencies


def test_final_errors_answer_409_at_once_and_the_timeout_504(volume_env, sockdir):
    """The unknown driver is reported after its 20 s registration grace
    (DRIVER_WAIT_GRACE_USEC): this test takes that long, and checks the
    other cases meanwhile."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    env.pvc("lonely")  # never bound
    sock = start(env, sockdir)
    started = time.time()
    # A persistent volume of a driver never registered (an inline one of a
    # driver without CSIDriver is refused at once: Persistent is the default mode).
    env.pv("pv-nd", "vol-nd", claim="nd", driver="nope.csi.kvolumed.io")
    env.pvc("nd", "pv-nd")
    unknown = env.pod("nodriver", [claim("v", "nd")])
    unknown_waiter = wait_in_thread(sock, unknown["metadata"]["uid"], "wait=mounted&timeout=60s", timeout=70)

    # Lifecycle mismatch: an inline volume of a driver that is Persistent only.
    pod = inline_pod = env.pod("inline", [inline("v")])
    t0 = time.time()
    status, body, _ = api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes?wait=mounted&timeout=60s")
    assert status == 409 and time.time() - t0 < 10, body
    [v] = body["volumes"]
    assert v["state"] == "failed" and "lifecycle mode" in v["reason"] and body["allMounted"] is False
    assert body["error"] == f"volume v: {v['reason']}"

    # A claim not bound.
    pod = env.pod("claim", [claim("data", "lonely")])
    t0 = time.time()
    status, body, _ = api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes?wait=mounted&timeout=60s")
    assert status == 409 and time.time() - t0 < 10, body
    [v] = body["volumes"]
    assert (v["state"], v["driver"], v["hostPath"]) == ("failed", None, None)
    assert "lonely" in v["reason"] and "lonely" in body["error"]
    # Bound now: the runner's retry waits for the publish and gets it.
    env.pv("pv-l", "vol-l", claim="lonely")
    env.bind("lonely", "pv-l")
    # Until kvolumed sees the binding, a wait still gets the 409 at once.
    status, body = wait_until(
        lambda: (r := api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes?wait=mounted&timeout=30s"))[0]
        != 409 and r[:2], timeout=30, what="the claim's binding seen")
    assert status == 200 and body["volumes"][0]["state"] == "published", body

    # A CSI call that fails with a final code (and the same once it is
    # retried): answered when the call has failed, not at the timeout.
    env.driver.control.fail_next("NodePublishVolume", "INVALID_ARGUMENT", "no such volume", count=2)
    env.pv("pv-bad", "vol-bad", claim="bad")
    env.pvc("bad", "pv-bad")
    pod = env.pod("badcall", [claim("data", "bad")])
    t0 = time.time()
    status, body, _ = api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes?wait=mounted&timeout=60s")
    assert status == 409 and time.time() - t0 < 10, body
    [v] = body["volumes"]
    assert v["state"] == "failed" and "no such volume" in v["reason"]
    env.driver.control.clear_faults()

    # The timeout: a volume that waits for its attachment is not a final error.
    env.api.remove("csidrivers", None, DRIVER)  # no CSIDriver: attachable
    # CSIDrivers and pods come through two watches, in no set order: a pod
    # judged before the deletion arrives needs no attachment and is
    # published.  Wait until kvolumed judges by the CSIDriver's absence (the
    # inline pod's reason says so), then make the pod.
    wait_until(lambda: "no CSIDriver object" in
               (api_get(sock, f"/v1/pods/{inline_pod['metadata']['uid']}/volumes")[1]["volumes"][0].get("reason")
                or ""), timeout=30, what="kvolumed judging without the CSIDriver")
    env.pv("pv-att", "vol-att", claim="att")
    env.pvc("att", "pv-att")
    pod = env.pod("attach", [claim("data", "att")])
    # Until kvolumed has the CSIDriver's deletion, the volume may be judged
    # by the one before (its lifecycle modes): wait for the attach wait.
    wait_until(lambda: (b := api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes")[1].get("volumes"))
               and b[0]["state"] == "pending" and "attach" in (b[0].get("reason") or ""),
               timeout=30, what="the volume waiting for its attachment")
    t0 = time.time()
    status, body, _ = api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes?wait=mounted&timeout=700ms")
    elapsed = time.time() - t0
    assert status == 504 and 0.6 < elapsed < 5, (elapsed, body)
    [v] = body["volumes"]
    assert v["state"] == "pending" and "attach" in v["reason"] and "timed out" in body["error"]
    # wait=unmounted of a pod whose volumes are not set up: at once.
    status, body, _ = api_get(sock, f"/v1/pods/{unknown['metadata']['uid']}/volumes?wait=unmounted&timeout=1ms")
    assert status == 200 and body["allTornDown"] is True

    unknown_waiter.join(70)
    status, body, answered = unknown_waiter.result
    assert status == 409, body
    assert 15 < answered - started < 40
    [v] = body["volumes"]
    assert v["state"] == "failed" and "not found in the list of registered CSI drivers" in v["reason"]


def test_socket_group_and_a_stale_socket(volume_env, sockdir):
    env = volume_env
    sock = os.path.join(sockdir, "run", "kvolumed.sock")
    os.makedirs(os.path.dirname(sock))
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock)  # left behind by a killed kvolumed: nobody listens
    stale.close()
    group = grp.getgrgid(os.getgid() or 0)
    name = next((g.gr_name for g in grp.getgrall() if g.gr_gid != 0), group.gr_name)
    gid = grp.getgrnam(name).gr_gid
    env.agent = env.start_agent(api_config(env, sock, group=name))
    env.agent.wait_for_log("Serving the local volumes API", timeout=30)
    st = os.stat(sock)
    assert stat.S_IMODE(st.st_mode) == 0o660 and (st.st_uid, st.st_gid) == (0, gid)
    status, body, _ = api_get(sock, "/volumes")
    assert status == 200 and body["node"] == "test-node"
    # A runner still waiting when kvolumed stops gets an answer, not a hang.
    uid = str(uuid.uuid4())
    waiter = wait_in_thread(sock, uid, "wait=mounted&timeout=10m")
    env.agent.wait_for_log(f"pod {uid}: waiting until mounted", timeout=10)
    env.agent.stop()
    waiter.join(10)
    assert waiter.result[0] == 503 and "stopping" in waiter.result[1]["error"]
    assert not os.path.exists(sock)


def test_bad_requests(volume_env, sockdir):
    env = volume_env
    sock = start(env, sockdir)
    uid = str(uuid.uuid4())
    cases = [
        ("/v1/pods/not-a-uid/volumes", 400, "invalid pod UID"),
        (f"/v1/pods/{uid.upper()}/volumes", 400, "invalid pod UID"),
        (f"/v1/pods/{uid}/volumes?wait=mounted&timeout=5", 400, "invalid timeout"),
        (f"/v1/pods/{uid}/volumes?wait=mounted&timeout=11m", 400, "invalid timeout"),
        (f"/v1/pods/{uid}/volumes?wait=forever", 400, "invalid wait"),
        (f"/v1/pods/{uid}/volumes?timeout=1s", 400, "timeout is for wait"),
        (f"/v1/pods/{uid}/volumes?wiat=mounted", 400, "unknown query argument \"wiat\""),
        (f"/v1/pods/{uid}/mounts", 404, "no such path"),
        (f"/v1/pods/{uid}", 404, "no such path"),
        ("/v2/pods", 404, "no such path"),
        ("/volumes?state=sleeping", 400, "invalid state"),
        ("/volumes?pod=nonamespace", 400, "invalid pod"),
        ("/volumes?node=x", 400, "unknown query argument"),
    ]
    for url, code, text in cases:
        status, body, ctype = api_get(sock, url, timeout=5)
        assert (status, ctype) == (code, "application/json"), (url, body)
        assert text in body["error"], (url, body)
    status, _, _ = api_get(sock, f"/v1/pods/{uid}/volumes", method="POST", timeout=5)
    assert status == 405
    # curl, as the man page shows it.
    if shutil.which("curl"):
        import subprocess
        out = subprocess.run(["curl", "-s", "--unix-socket", sock, f"http://localhost/v1/pods/{uid}/volumes"],
                             capture_output=True, text=True, timeout=10)
        assert "knows nothing of pod" in json.loads(out.stdout)["error"]


def test_a_hundred_waiters_are_answered_without_polling(volume_env, sockdir):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = start(env, sockdir)
    # Start-up's own passes (the driver's registration, the Node's
    # annotation) are over before the waiters come.
    env.agent.wait_for_log("Wrote the nodeid annotation", timeout=30)
    env.agent.wait_for_log("Ready", timeout=30)
    n = 100
    uids = [str(uuid.uuid4()) for _ in range(n)]
    waiters = [wait_in_thread(sock, uid, "wait=mounted&timeout=2m", timeout=150) for uid in uids]
    # Every waiter's request has reached kvolumed (and is suspended).
    checked = re.compile(r"Local API: waiter for pod (\S+) checked after a pass")

    wait_until(lambda: len(re.findall(r"Local API: pod \S+: waiting until mounted", env.agent.output())) == n,
               what="100 waiters suspended")
    # Nothing happens on the node: nothing wakes the waiters (no timer, no poll).
    before = len(checked.findall(env.agent.output()))
    time.sleep(1.0)  # a quiet second, to show nothing runs in it
    assert len(checked.findall(env.agent.output())) == before

    for i, uid in enumerate(uids):
        env.api.create({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"p{i}", "namespace": "default"},
                        "spec": {"nodeName": "test-node", "volumes": [inline("v")],
                                 "containers": [{"name": "c", "image": "busybox",
                                                 "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]},
                        "status": {"phase": "Running"}}, uid=uid)
    for w in waiters:
        w.join(150)
        status, body, _ = w.result
        assert status == 200 and body["allMounted"] is True, body
    wakeups = checked.findall(env.agent.output())[before:]
    per_pod = {u: wakeups.count(u) for u in uids}
    # Each waiter is checked by the passes that concerned its pod only: its
    # arrival, its publish's end, and the passes a burst shares.
    print(f"{len(wakeups)} waiter checks for {n} waiters; most for one pod: {max(per_pod.values())}")
    assert all(c >= 1 for c in per_pod.values())
    assert len(wakeups) < 20 * n


def metrics_get(address, url):
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://{address}{url}", timeout=10) as r:
            return r.status, r.read().decode(), r.headers["Content-Type"]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers["Content-Type"]


SERVING = re.compile(r"Serving /metrics, /healthz(?:, /volumes)? on (\S+)")


def test_volumes_filters_on_both_endpoints(volume_env, sockdir):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pvc("lonely")  # never bound
    sock = start(env, sockdir, metrics="127.0.0.1:0")
    address = SERVING.search(env.agent.output()).group(1)
    web = env.pod("web", [inline("scratch")])
    env.pod("other", [claim("data", "lonely")])
    status, _, _ = api_get(sock, f"/v1/pods/{web['metadata']['uid']}/volumes?wait=mounted&timeout=30s")
    assert status == 200
    # The claim's wait settles on "not bound" (after "looking up ..."): the two
    # endpoints are compared once nothing changes between their answers.
    wait_until(lambda: any("PVC is not bound" in p.get("message", "")
                           for p in api_get(sock, "/volumes")[1]["pending"]),
               what="the claim's settled wait in /volumes")

    def both(url):
        s1, b1, _ = api_get(sock, url)
        s2, text, ctype = metrics_get(address, url)
        assert (s1, s2, ctype) == (200, 200, "application/json"), (url, b1, text)
        b2 = json.loads(text)
        assert b1["volumes"] == b2["volumes"] and b1["pending"] == b2["pending"], url
        return b1

    everything = both("/volumes")
    assert len(everything["volumes"]) == 1 and len(everything["pending"]) == 1
    got = both("/volumes?pod=default/web")
    assert [p["pod"] for v in got["volumes"] for p in v["publishes"]] == ["default/web"] and got["pending"] == []
    got = both("/volumes?pod=default/other")
    assert got["volumes"] == [] and [p["pod"] for p in got["pending"]] == ["default/other"]
    assert both("/volumes?pod=default/nobody")["volumes"] == []
    got = both("/volumes?state=published")
    assert len(got["volumes"]) == 1 and got["pending"] == []
    got = both("/volumes?state=waiting")
    assert got["volumes"] == [] and len(got["pending"]) == 1
    got = both("/volumes?pod=default/web&state=waiting")
    assert got["volumes"] == [] and got["pending"] == []
    assert both("/volumes?state=failing")["volumes"] == []
    # The counts stay the node's.
    assert (got["published"], got["pods"]) == (everything["published"], everything["pods"]) == (1, 2)
    status, text, _ = metrics_get(address, "/volumes?state=asleep")
    assert status == 400 and "invalid state" in json.loads(text)["error"]


def test_volumes_not_served_beyond_loopback(volume_env, sockdir, kvolumed_bin):
    """A [metrics] listen on every address keeps /metrics and /healthz there,
    not /volumes (every pod, handle and path of the node): that is on the
    local socket, which the 404 names."""
    import subprocess
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = start(env, sockdir, metrics="0.0.0.0:0")
    assert "Serving /metrics, /healthz on 0.0.0.0:" in env.agent.output()
    env.agent.wait_for_log("is reachable beyond this host", timeout=10)
    port = SERVING.search(env.agent.output()).group(1).rsplit(":", 1)[1]
    # Any address of the host reaches it, the loopback one too: what counts is the listen.
    import subprocess
    ips = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    for host in ["127.0.0.1"] + [ip for ip in ips if ":" not in ip][:1]:
        status, text, ctype = metrics_get(f"{host}:{port}", "/volumes")
        assert (status, ctype) == (404, "application/json"), text
        assert f"curl --unix-socket {sock} http://localhost/volumes" in json.loads(text)["error"]
        assert metrics_get(f"{host}:{port}", "/metrics")[0] == 200
    assert api_get(sock, "/volumes")[0] == 200
    r = subprocess.run([kvolumed_bin, "--check-config", "--config", str(env.tmp_path / "kvolumed.conf")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "warning: [metrics] listen = 0.0.0.0:0 is reachable beyond this host" in r.stderr


def status(kvolumed_bin, *args):
    import subprocess
    return subprocess.run([kvolumed_bin, "status", *args], capture_output=True, text=True, timeout=30)


def test_status_prints_the_volumes_as_a_table(volume_env, sockdir, kvolumed_bin):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pvc("lonely")
    sock = start(env, sockdir)
    web = env.pod("web", [inline("scratch")])
    env.pod("other", [claim("data", "lonely")])
    assert api_get(sock, f"/v1/pods/{web['metadata']['uid']}/volumes?wait=mounted&timeout=30s")[0] == 200
    # The claim's wait settles on "not bound" (after "looking up ..."): the two
    # endpoints are compared once nothing changes between their answers.
    wait_until(lambda: any("PVC is not bound" in p.get("message", "")
                           for p in api_get(sock, "/volumes")[1]["pending"]),
               what="the claim's settled wait in /volumes")

    r = status(kvolumed_bin, "--socket", sock)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert re.match(r"POD +VOLUME +DRIVER +STATE +HOST PATH +REASON$", lines[0]), lines
    rows = [re.split(r"  +", line, maxsplit=5) for line in lines[1:]]
    assert ["default/web", "scratch", DRIVER, "published", env.target(web, "scratch")] in [r[:5] for r in rows]
    [other] = [r for r in rows if r[0] == "default/other"]
    # kvolumed_volumes' words: a claim not bound is failed, the tenant's to fix.
    assert other[1:4] == ["data", "-", "failed"] and "lonely" in other[5]
    assert other[5].startswith("claim-not-bound: "), other

    # One pod, by name or by UID; the socket from the configuration file.
    r = status(kvolumed_bin, "--config", str(env.tmp_path / "kvolumed.conf"), "default/other")
    assert r.returncode == 0 and "default/other" in r.stdout and "default/web" not in r.stdout, r
    r = status(kvolumed_bin, "--socket", sock, web["metadata"]["uid"])
    assert r.returncode == 0 and re.search(r"default/web +scratch +\S+ +published", r.stdout), r
    r = status(kvolumed_bin, "--socket", sock, str(uuid.uuid4()))
    assert r.returncode == 1 and "knows nothing of pod" in r.stderr

    env.agent.stop()
    r = status(kvolumed_bin, "--socket", sock)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"kvolumed status: kvolumed is not running: nothing answers on {sock} "
                        "(is kvolumed.service active? is [api] socket set?)\n")


def test_a_file_that_is_not_a_socket_is_never_replaced(volume_env, sockdir):
    """A mistyped [api] socket naming someone's file: kvolumed refuses to
    start rather than unlink it."""
    env = volume_env
    path = os.path.join(sockdir, "notes.txt")
    with open(path, "w") as f:
        f.write("keep me\n")
    env.agent = env.start_agent(api_config(env, path))
    assert env.agent.wait(timeout=30) != 0
    assert "exists and is not a socket" in env.agent.output()
    with open(path) as f:
        assert f.read() == "keep me\n"


def test_a_pod_whose_volumes_are_not_read_yet_is_not_mounted(volume_env, sockdir):
    """A pod is known from its informer's event before the reconcile pass
    reads its volumes; until then it has no desired volume, and "every
    wanted volume published" held vacuously: wait=mounted answered 200 at
    once and the runner would start the container without its volumes
    (seen in test_runtime_containerd_api: the answer came 300 ms before the
    publish).  Here the window is held open: no pass runs before every
    informer has listed, and the CSIDriver list keeps failing."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.api.fail_next(10 ** 6, status=500, path_prefix="/apis/storage.k8s.io/v1/csidrivers")
    sock = start(env, sockdir)
    pod = env.pod("early", [inline("v")])
    uid = pod["metadata"]["uid"]
    wait_until(lambda: api_get(sock, f"/v1/pods/{uid}/volumes")[0] == 200, 30, what="the pod known")
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=500ms")
    assert status == 504 and body["allMounted"] is False, body
    assert "not read yet" in body.get("reason", ""), body
    env.api.clear_faults()
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=30s")
    assert status == 200 and body["volumes"][0]["state"] == "published", body


def test_a_pod_found_on_disk_before_the_pod_list_is_not_mounted(volume_env, sockdir):
    """After a restart, before the pod list is in, a pod is known only from
    the publishes found on disk: they read as tearing-down (nothing wants
    them yet), and "every wanted volume published" held vacuously: the
    runner was told allMounted while its volumes were tearing-down.  Here
    the window is held open: the pod list keeps failing."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    sock = start(env, sockdir)
    pod = env.pod("restarted", [inline("v")])
    uid = pod["metadata"]["uid"]
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=30s", timeout=40)
    assert status == 200 and body["allMounted"], body
    env.agent.stop()
    env.api.fail_next(10 ** 6, status=500, path_prefix="/api/v1/pods")
    sock = start(env, sockdir)
    wait_until(lambda: api_get(sock, f"/v1/pods/{uid}/volumes")[0] == 200, 30, what="the pod found on disk")
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=500ms")
    assert status == 504 and body["allMounted"] is False, body
    assert "not listed yet" in body.get("reason", ""), body
    env.api.clear_faults()
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=30s", timeout=40)
    assert status == 200 and body["volumes"][0]["state"] == "published", body
    assert not env.calls("NodeUnpublishVolume")


def test_a_terminated_pod_is_not_mounted(volume_env, sockdir):
    """A pod whose volumes are no longer wanted (it terminated) has none
    desired: wait=mounted is a final error at once, not a vacuous 200."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    sock = start(env, sockdir)
    pod = env.pod("done", [inline("v")])
    uid = pod["metadata"]["uid"]
    obj = env.api.get("pods", "default", "done")
    obj["status"] = {"phase": "Succeeded"}
    obj["metadata"].pop("resourceVersion", None)
    env.api.update(obj)
    wait_until(lambda: api_get(sock, f"/v1/pods/{uid}/volumes?wait=unmounted&timeout=10s")[0] == 200, 30,
               what="the terminated pod's volumes torn down")
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=10s")
    assert status == 409 and body["allMounted"] is False, body
    assert "terminated" in body["error"], body


def raw_wait(sock, uid, timeout="10m"):
    """A wait sent on a raw socket, left for the caller to read or abandon."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock)
    s.sendall(f"GET /v1/pods/{uid}/volumes?wait=mounted&timeout={timeout} HTTP/1.1\r\n"
              "Host: localhost\r\n\r\n".encode())
    return s


def test_abandoned_waits_free_their_slots_at_once(volume_env, sockdir):
    """Issue 29 item 5: a runner that gave up on its waits (a shorter client
    timeout, a restart) must not keep their slots until their own 10
    minutes: with 256 held, every wait would get 503 and the real runner
    could start no container."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = start(env, sockdir)
    clients = [raw_wait(sock, str(uuid.uuid4())) for _ in range(256)]
    try:
        wait_until(lambda: env.agent.output().count(": waiting until mounted") >= 256, timeout=60,
                   what="256 waits suspended")
        status, body, _ = api_get(sock, f"/v1/pods/{uuid.uuid4()}/volumes?wait=mounted&timeout=1s")
        assert status == 503 and "too many requests waiting" in body["error"]
    finally:
        for c in clients:
            c.close()
    # Each is freed when its client hangs up, not at its timeout.
    env.agent.wait_for_log("256 gone so far", timeout=60)
    status, body, _ = api_get(sock, f"/v1/pods/{uuid.uuid4()}/volumes?wait=mounted&timeout=500ms")
    assert status == 504, body
    # The real runner's wait for a real pod gets its answer.
    pod = env.pod("web", [inline("scratch")])
    status, body, _ = api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes?wait=mounted&timeout=60s")
    assert status == 200 and body["allMounted"], body
    assert "the client went away while waiting (hang-up" in env.agent.output()


def test_a_client_that_only_shuts_down_its_sending_side_gets_its_answer(volume_env, sockdir):
    """A client may shutdown(SHUT_WR) after its request (an HTTP/1.0 habit)
    and still read: that is not a hang-up, its wait goes on."""
    env = volume_env
    sock = start(env, sockdir)
    uid = str(uuid.uuid4())
    c = raw_wait(sock, uid, timeout="2s")
    try:
        env.agent.wait_for_log(f"pod {uid}: waiting until mounted", timeout=30)
        c.shutdown(socket.SHUT_WR)
        answer = b""
        while not answer.endswith(b"}\n"):
            data = c.recv(65536)
            if not data:
                break
            answer += data
    finally:
        c.close()
    assert answer.startswith(b"HTTP/1.1 504 "), answer
    assert "the client went away" not in env.agent.output()


def second_agent_config(env, socket_path, name="other"):
    """Another kvolumed's configuration: its own root-dir (an operator's
    test instance, say), the same [api] socket."""
    root = str(env.tmp_path / f"root-{name}")
    os.makedirs(root, exist_ok=True)
    return write_config(env.tmp_path / f"kvolumed-{name}.conf", root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n'
                        f"[api]\nsocket = {socket_path}\n")


def test_a_live_socket_is_never_taken_over(volume_env, sockdir):
    """Issue 29 item 6: a second kvolumed with another root-dir and the same
    [api] socket is refused (exit 2, naming the socket and its holder)
    instead of taking the socket over and deleting it when it exits."""
    env = volume_env
    sock = start(env, sockdir)
    before = os.stat(sock)
    second = env.start_agent(second_agent_config(env, sock))
    assert second.wait(timeout=60) == 2
    out = second.output()
    assert f"[api] socket {sock} is in use: pid {env.agent.proc.pid}, kvolumed answers on it" in out, out
    after = os.stat(sock)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)
    status, body, _ = api_get(sock, "/volumes")
    assert status == 200 and body["node"] == "test-node"


def test_a_socket_replaced_meanwhile_is_not_removed_at_exit(volume_env, sockdir):
    """kvolumed removes its socket file at exit only if it is still the
    one it bound: another process's in its place stays."""
    env = volume_env
    sock = start(env, sockdir)
    os.unlink(sock)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        other.bind(sock)
        other.listen(1)
        env.agent.stop()
        assert env.agent.proc.returncode == 0
        assert stat.S_ISSOCK(os.stat(sock).st_mode)
        assert f"Not removing {sock}: it is no longer the socket this kvolumed bound" in env.agent.output()
    finally:
        other.close()


def bad_dir(base, case):
    """The [api] socket path of a directory kvolumed must refuse, and the
    directory named in the error."""
    if case == "owned-by-a-user":
        d = os.path.join(base, "run")
        os.mkdir(d, 0o755)
        os.chown(d, 65534, 65534)
        return os.path.join(d, "kvolumed.sock"), d, "owned by uid 65534 (mode 0755)"
    if case == "writable-by-others":
        d = os.path.join(base, "run")
        os.mkdir(d)
        os.chmod(d, 0o1777)  # sticky or not, a user could plant a socket here
        return os.path.join(d, "kvolumed.sock"), d, "writable by everyone (mode 1777"
    if case == "writable-by-a-group":
        d = os.path.join(base, "run")
        os.mkdir(d)
        os.chown(d, 0, 65534)
        os.chmod(d, 0o775)
        return os.path.join(d, "kvolumed.sock"), d, "writable by its group (mode 0775, group 65534)"
    if case == "under-a-writable-parent":
        parent = os.path.join(base, "open")
        os.mkdir(parent)
        os.chmod(parent, 0o777)
        d = os.path.join(parent, "run")
        os.mkdir(d, 0o755)
        return os.path.join(d, "kvolumed.sock"), parent, "writable by everyone (mode 0777"
    if case == "through-a-symlink":
        real = os.path.join(base, "real")
        os.mkdir(real, 0o755)
        link = os.path.join(base, "run")
        os.symlink(real, link)
        return os.path.join(link, "kvolumed.sock"), link, "is a symlink"
    raise AssertionError(case)


BAD_DIRS = ["owned-by-a-user", "writable-by-others", "writable-by-a-group", "under-a-writable-parent",
            "through-a-symlink"]


@pytest.mark.parametrize("case", BAD_DIRS)
def test_a_socket_directory_others_could_write_is_refused(volume_env, sockdir, kvolumed_bin, case):
    """Issue 29 item 7: whoever can write the socket's directory (or
    redirect it) could put their own socket there and tell the runner
    allMounted: true; kvolumed refuses to start (exit 1, a setup error no
    restart fixes) and --check-config says so, naming the directory."""
    env = volume_env
    sock, named, what = bad_dir(sockdir, case)
    config = api_config(env, sock)
    check = subprocess.run([kvolumed_bin, "--check-config", "--config", config], capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 1, check.stderr
    assert f"[api] socket {sock}: " in check.stderr and named in check.stderr and what in check.stderr, check.stderr
    env.agent = env.start_agent(config)
    assert env.agent.wait(timeout=60) == 1
    out = env.agent.output()
    assert f"[api] socket {sock}: " in out and named in out and what in out, out
    assert not os.path.lexists(sock)
    assert "Serving the local volumes API" not in out


def test_the_socket_file_appears_only_once_it_answers(volume_env, sockdir):
    """The socket file is bound under a name of its own, made to listen, and
    renamed into place: a runner connecting as soon as the file appears (or
    a second kvolumed probing it for a live socket) never meets it before it
    answers, when ECONNREFUSED would read as "stale".  strace holds listen()
    for a second so that the window is wide enough to hit every time."""
    env = volume_env
    if not shutil.which("strace"):
        pytest.fail("strace is needed (test/deps lists it)")
    sock = os.path.join(sockdir, "run", "kvolumed.sock")
    env.agent = env.start_agent(api_config(env, sock),
                                wrapper=("strace", "-f", "-qq", "-o", "/dev/null",
                                         "-e", "trace=listen", "-e", "inject=listen:delay_enter=1000000"))
    refused = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(sock):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(sock)
                break
            except ConnectionRefusedError:
                refused.append(time.monotonic())
            except FileNotFoundError:
                pass
            finally:
                probe.close()
        time.sleep(0.01)
    else:
        pytest.fail(f"{sock} never answered:\n{env.agent.output()}")
    assert not refused, f"{sock} existed but refused connections {len(refused)} times before it answered"
    env.agent.wait_for_log("Serving the local volumes API", timeout=30)
    status, body, _ = api_get(sock, "/volumes")
    assert status == 200 and body["node"] == "test-node"
    assert [n for n in os.listdir(os.path.dirname(sock))] == ["kvolumed.sock"]
