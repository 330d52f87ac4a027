"""The k8s/ module (informers, auth, writers) against the fake API server,
driven through test/tools/k8s-harness, which prints one JSON line per
informer event, sync and error and performs writes on command."""
import json
import os
import queue
import shutil
import subprocess
import threading
import time

import pytest

from doubles.fakeapi import FakeApiServer

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE = "node-1"


def harness_path():
    build = os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO_DIR, "build"))
    path = os.path.join(build, "test", "tools", "k8s-harness")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built")
    return path


class Harness:
    def __init__(self, args):
        self.proc = subprocess.Popen([harness_path()] + args, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.lines = queue.Queue()
        self.seen = []
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for(self, pred, timeout=10.0, what="line"):
        """The first line (seen before or arriving) that pred accepts."""
        for e in self.seen:
            if pred(e):
                self.seen.remove(e)
                return e
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout}s; seen: {self.seen[-20:]}; "
                                     f"stderr: {''.join(self.stderr[-20:])}")
            try:
                e = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if e is None:
                raise AssertionError(f"harness exited before {what}; seen: {self.seen[-20:]}; "
                                     f"stderr: {''.join(self.stderr[-20:])}")
            if pred(e):
                return e
            self.seen.append(e)

    def event(self, type_, kind="Pod", key=None, timeout=10.0):
        return self.wait_for(lambda e: e.get("type") == type_ and e.get("kind") == kind
                             and (key is None or e.get("key") == key), timeout,
                             f"{type_} {kind} {key}")

    def drain(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                e = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if e is None:
                break
            self.seen.append(e)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=5)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def harness(fake_api):
    started = []

    def start(*extra, token_file=None, ca=None, informers="pods,csidrivers,node"):
        args = ["--server", fake_api.server_url,
                "--token-file", token_file or fake_api.token_path,
                "--ca", ca or fake_api.ca_path, "--node", NODE,
                "--informers", informers] + list(extra)
        h = Harness(args)
        started.append(h)
        return h

    yield start
    for h in started:
        rc = h.stop()
        assert rc == 0, f"harness exited {rc}: {''.join(h.stderr[-20:])}"


def node(name=NODE):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def pod(name, node_name=NODE, namespace="default"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "i"}],
                     "volumes": [{"name": "data", "csi": {"driver": "hostpath.csi.k8s.io"}}]}}


def pod_requests(api, watch=None):
    return [r for r in api.requests() if r["method"] == "GET" and r["path"] == "/api/v1/pods"
            and (watch is None or (r["query"].get("watch") in ("1", "true")) == watch)]


def test_k8s_list_and_watch_with_field_selector(fake_api, harness):
    fake_api.create(node())
    fake_api.create(pod("a"))
    fake_api.create(pod("other", node_name="node-2"))
    h = harness()
    assert h.event("add", key="default/a")
    assert h.event("synced")["count"] == 1
    h.event("synced", kind="Node")
    h.event("synced", kind="CSIDriver")
    fake_api.create(pod("b"))
    assert h.event("add", key="default/b")
    fake_api.create(pod("c", node_name="node-2"))
    fake_api.delete("pods", "default", "b", grace_period_seconds=0)
    assert h.event("delete", key="default/b")
    assert not [e for e in h.seen if e.get("key") == "default/c"]
    lists = pod_requests(fake_api, watch=False)
    assert lists and all(r["query"].get("fieldSelector") == f"spec.nodeName={NODE}" for r in lists)
    assert lists[0]["query"].get("limit") == "500"
    watches = pod_requests(fake_api, watch=True)
    assert watches[0]["query"]["allowWatchBookmarks"] == "true"
    assert 300 <= int(watches[0]["query"]["timeoutSeconds"]) < 600
    assert watches[0]["headers"]["authorization"] == f"Bearer {fake_api.token}"


def test_k8s_paged_list(fake_api, harness):
    fake_api.create(node())
    for i in range(1203):
        fake_api.create(pod(f"p{i:04d}"))
    h = harness(informers="pods")
    assert h.event("synced", timeout=30)["count"] == 1203
    lists = pod_requests(fake_api, watch=False)
    assert len(lists) == 3
    assert "continue" in lists[1]["query"] and "continue" in lists[2]["query"]


def test_k8s_watch_resumes_without_relist(fake_api, harness):
    fake_api.create(node())
    fake_api.create(pod("a"))
    h = harness(informers="pods")
    synced = h.event("synced")
    fake_api.create(pod("b"))
    added = h.event("add", key="default/b")
    # Drop the connection mid-stream, then change things while away.
    assert fake_api.close_watches(abrupt=True) >= 1
    fake_api.create(pod("c"))
    h.event("add", key="default/c")
    # And a clean end of the watch (as at timeoutSeconds).
    fake_api.close_watches(abrupt=False)
    fake_api.create(pod("d"))
    h.event("add", key="default/d")
    assert len(pod_requests(fake_api, watch=False)) == 1, "resumed by a relist"
    watches = pod_requests(fake_api, watch=True)
    assert len(watches) >= 3
    assert watches[0]["query"]["resourceVersion"] == synced["rv"]
    # Each resumption starts from a version at least as new as the last event seen.
    assert int(watches[1]["query"]["resourceVersion"]) >= int(added["rv"])
    assert len([e for e in h.seen if e.get("type") == "add" and e.get("key") == "default/a"]) <= 1


def test_k8s_bookmarks_advance_resource_version(fake_api, harness):
    fake_api.create(node())
    h = harness(informers="pods")
    synced = h.event("synced")
    # Unrelated writes move the store's resourceVersion; bookmarks carry it.
    for i in range(5):
        fake_api.create(pod(f"elsewhere{i}", node_name="node-2"))
    time.sleep(2.5)     # bookmark interval 1 s
    fake_api.close_watches(abrupt=True)
    h.drain(1.5)
    watches = pod_requests(fake_api, watch=True)
    assert len(watches) >= 2
    assert int(watches[-1]["query"]["resourceVersion"]) > int(synced["rv"])


def test_k8s_gone_relists_and_reports_deleted_while_away(fake_api, harness):
    fake_api.create(node())
    for n in ("a", "b", "c"):
        fake_api.create(pod(n))
    h = harness(informers="pods")
    h.event("synced")
    # While the agent cannot connect: delete one pod, change another, add
    # one, and compact the history so the resumed watch gets 410.
    fake_api.refuse_connections(2.0)
    fake_api.delete("pods", "default", "b", grace_period_seconds=0)
    p = fake_api.get("pods", "default", "c")
    p["metadata"].setdefault("labels", {})["changed"] = "yes"
    fake_api.update(p)
    fake_api.create(pod("e"))
    fake_api.compact()
    assert h.event("delete", key="default/b", timeout=20)
    assert h.event("update", key="default/c", timeout=5)
    assert h.event("add", key="default/e", timeout=5)
    h.send("stats")
    stats = h.event("stats")
    assert stats["relistsGone"] == 1
    assert stats["size"] == 3
    assert len(pod_requests(fake_api, watch=False)) == 2
    assert not [e for e in h.seen if e.get("type") == "delete" and e.get("key") != "default/b"]


def test_k8s_server_errors_back_off_and_recover(fake_api, harness):
    fake_api.create(node())
    fake_api.create(pod("a"))
    fake_api.fail_next(1000, status=500, path_prefix="/api/v1/pods")
    h = harness(informers="pods")
    e = h.event("error")
    assert e["status"] == 500 and fake_api.server_url in e["message"]
    time.sleep(6)
    n = len(pod_requests(fake_api))
    # 800 ms doubling (with up to 100 % jitter): at most 1 + 0.8, 2.4, 5.6 s → 4 tries.
    assert 2 <= n <= 5, n
    fake_api.clear_faults()
    assert h.event("synced", timeout=40)["count"] == 1


def test_k8s_too_many_requests_honours_retry_after(fake_api, harness):
    fake_api.create(node())
    fake_api.fail_next(1, status=429, retry_after=3, path_prefix="/api/v1/pods")
    h = harness(informers="pods")
    assert h.event("error")["status"] == 429
    h.event("synced", timeout=15)
    reqs = pod_requests(fake_api, watch=False)
    assert len(reqs) == 2
    assert reqs[1]["time"] - reqs[0]["time"] >= 2.9


def test_k8s_retry_after_holds_every_request_for_the_path(fake_api, harness):
    """A Retry-After is the server's word about the path, not about one
    request: a GET another part of kvolumed makes meanwhile (the expansion
    check reading a claim its lookup was just refused) is not sent but
    answered 429 with the time left; other paths are not held."""
    fake_api.create(node())
    for name in ("claim", "other"):
        fake_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": name, "namespace": "default"},
                         "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                                  "resources": {"requests": {"storage": "1Gi"}}}})
    path = "/api/v1/namespaces/default/persistentvolumeclaims/claim"
    fake_api.fail_next(1, status=429, retry_after=5, path_prefix=path)
    h = harness(informers="node")
    h.send("get pvc default claim")
    assert h.wait_for(lambda e: e["type"] == "get")["status"] == 429
    answered = time.monotonic()
    h.send("get pvc default claim")
    held = h.wait_for(lambda e: e["type"] == "get", timeout=5)
    assert held["status"] == 429 and "not sent" in held["message"] and "Retry-After" in held["message"]
    h.send("get pvc default other")
    assert h.wait_for(lambda e: e["type"] == "get", timeout=5)["key"] == "default/other"
    assert time.monotonic() - answered < 4.5, "too slow to tell: the hold may have passed"
    assert len([r for r in fake_api.requests() if r["path"] == path]) == 1
    # Once the time has passed, the path is asked for again.
    time.sleep(max(0.0, answered + 5.2 - time.monotonic()))
    h.send("get pvc default claim")
    again = h.wait_for(lambda e: e["type"] == "get", timeout=5)
    assert again["status"] == 200 and again["key"] == "default/claim"
    assert [r["status"] for r in fake_api.requests() if r["path"] == path] == [429, 200]


def test_k8s_watch_error_storm_is_bounded(fake_api, harness):
    fake_api.create(node())
    h = harness(informers="pods")
    h.event("synced")
    fake_api.clear_requests()
    fake_api.fail_next(1000, status=503, path_prefix="/api/v1/pods")
    fake_api.close_watches(abrupt=True)
    time.sleep(6)
    n = len(pod_requests(fake_api, watch=True))
    assert 2 <= n <= 6, n
    fake_api.clear_faults()
    fake_api.create(pod("late"))
    h.event("add", key="default/late", timeout=40)
    assert len(pod_requests(fake_api, watch=False)) == 0


def test_k8s_wrong_ca_names_the_server(fake_api, harness, tmp_path):
    other = FakeApiServer(tmp_path / "other", control_port=None).start()
    try:
        h = harness(ca=other.ca_path, informers="pods")
        e = h.event("error")
        assert fake_api.server_url in e["message"]
        # A configuration error, named so: which CA file does not sign it.
        assert f"the server's certificate is not signed by {other.ca_path}" in e["message"], e["message"]
        assert e["status"] == 0
    finally:
        other.stop()
    assert not [r for r in fake_api.requests() if r["path"].startswith("/api")]


def test_k8s_bad_token_gives_401_error(fake_api, harness, tmp_path):
    bad = tmp_path / "bad-token"
    bad.write_text("not-the-token\n")
    h = harness(token_file=str(bad), informers="pods")
    e = h.event("error")
    assert e["status"] == 401
    assert "401 Unauthorized" in e["message"] and fake_api.server_url in e["message"]
    assert str(bad) in e["message"]


def test_k8s_missing_token_gives_401_error(fake_api, harness, tmp_path):
    empty = tmp_path / "empty-token"
    empty.write_text("")
    h = harness(token_file=str(empty), informers="pods")
    e = h.event("error")
    assert e["status"] == 401 and "missing" in e["message"]


def test_k8s_token_rotation_is_picked_up(fake_api, harness, tmp_path):
    fake_api.create(node())
    token_file = tmp_path / "token"
    shutil.copy(fake_api.token_path, token_file)
    h = harness(token_file=str(token_file), informers="pods")
    h.event("synced")
    new = fake_api.rotate_token(revoke_old=True)
    # Projected tokens are replaced by a rename: write the new one that way.
    tmp = tmp_path / "token.tmp"
    tmp.write_text(new + "\n")
    os.rename(tmp, token_file)
    fake_api.close_watches(abrupt=True)
    fake_api.create(pod("after-rotation"))
    h.event("add", key="default/after-rotation", timeout=20)
    watches = pod_requests(fake_api, watch=True)
    assert watches[-1]["headers"]["authorization"] == f"Bearer {new}"
    assert watches[-1]["status"] == 200


def test_k8s_token_rotation_recovers_after_401(fake_api, harness, tmp_path):
    """A 401 forces a re-read even if the file's metadata looks unchanged."""
    fake_api.create(node())
    token_file = tmp_path / "token"
    shutil.copy(fake_api.token_path, token_file)
    h = harness(token_file=str(token_file), informers="pods")
    h.event("synced")
    st = os.stat(token_file)
    new = fake_api.rotate_token(revoke_old=True)
    with open(token_file, "r+") as f:     # same inode, same size
        f.write(new + "\n")
    os.utime(token_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    fake_api.close_watches(abrupt=True)
    fake_api.create(pod("x"))
    h.event("add", key="default/x", timeout=20)


def test_k8s_kubeconfig_and_client_certificate(fake_api, tmp_path):
    fake_api.create(node())
    fake_api.create(pod("a"))
    kc = tmp_path / "kubeconfig"
    text = open(fake_api.kubeconfig_path).read().replace(
        "current-context: fakeapi", "current-context: fakeapi-cert")
    kc.write_text(text)
    h = Harness(["--kubeconfig", str(kc), "--node", NODE, "--informers", "pods"])
    try:
        h.event("add", key="default/a")
        assert [r for r in fake_api.requests()
                if r["path"] == "/api/v1/pods" and "authorization" not in r["headers"]]
    finally:
        assert h.stop() == 0


def test_k8s_exec_user_is_refused(tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    h = Harness(["--kubeconfig", str(kc), "--node", NODE])
    e = h.wait_for(lambda e: e["type"] == "fatal")
    assert "exec" in e["message"] and "not supported" in e["message"]
    h.proc.wait(timeout=5)
    assert h.proc.returncode == 2


def test_k8s_in_cluster_service_account(fake_api, tmp_path, monkeypatch):
    fake_api.create(node())
    sa = tmp_path / "sa"
    sa.mkdir()
    shutil.copy(fake_api.token_path, sa / "token")
    shutil.copy(fake_api.ca_path, sa / "ca.crt")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(fake_api.port))
    h = Harness(["--sa-dir", str(sa), "--node", NODE, "--informers", "node"])
    try:
        h.event("add", kind="Node", key=NODE)
    finally:
        assert h.stop() == 0


def test_k8s_undecodable_object_is_skipped(fake_api, harness):
    fake_api.create(node())
    bad = pod("bad")
    bad["spec"]["volumes"] = [{"name": "data", "csi": {"driver": 42}}]
    fake_api.create(bad)
    fake_api.create(pod("good"))
    h = harness(informers="pods")
    assert h.event("synced")["count"] == 1
    h.event("add", key="default/good")
    assert any("default/bad" in l and "spec.volumes[0].csi.driver" in l for l in h.stderr) or \
        (time.sleep(0.5) or any("spec.volumes[0].csi.driver" in l for l in h.stderr))


def test_k8s_node_status_and_annotations(fake_api, harness):
    fake_api.create(node())
    h = harness(informers="node")
    h.event("synced", kind="Node")
    h.send("volumes-in-use kubernetes.io/csi/d^h1 kubernetes.io/csi/d^h2")
    assert h.wait_for(lambda e: e.get("cmd") == "volumes-in-use")["error"] == 0
    n = fake_api.get("nodes", None, NODE)
    assert n["status"]["volumesInUse"] == ["kubernetes.io/csi/d^h1", "kubernetes.io/csi/d^h2"]
    upd = h.event("update", kind="Node", key=NODE)
    assert upd["volumesInUse"] == n["status"]["volumesInUse"]
    patch = [r for r in fake_api.requests() if r["method"] == "PATCH"][-1]
    assert patch["path"] == f"/api/v1/nodes/{NODE}/status"
    assert patch["headers"]["content-type"] == "application/merge-patch+json"

    h.send("node-id hostpath.csi.k8s.io id-1")
    assert h.wait_for(lambda e: e.get("cmd") == "node-id")["error"] == 0
    h.send("node-id other.csi.example.com id-2")
    assert h.wait_for(lambda e: e.get("cmd") == "node-id")["error"] == 0
    ann = fake_api.get("nodes", None, NODE)["metadata"]["annotations"]
    assert json.loads(ann["csi.volume.kubernetes.io/nodeid"]) == {
        "hostpath.csi.k8s.io": "id-1", "other.csi.example.com": "id-2"}
    assert ann["volumes.kubernetes.io/controller-managed-attach-detach"] == "true"
    h.send("node-id hostpath.csi.k8s.io")
    assert h.wait_for(lambda e: e.get("cmd") == "node-id")["error"] == 0
    ann = fake_api.get("nodes", None, NODE)["metadata"]["annotations"]
    assert json.loads(ann["csi.volume.kubernetes.io/nodeid"]) == {"other.csi.example.com": "id-2"}
    # Nothing to change: no PATCH at all.
    n_patches = len([r for r in fake_api.requests() if r["method"] == "PATCH"])
    h.send("node-id other.csi.example.com id-2")
    assert h.wait_for(lambda e: e.get("cmd") == "node-id")["error"] == 0
    assert len([r for r in fake_api.requests() if r["method"] == "PATCH"]) == n_patches


def test_k8s_csinode_entries(fake_api, harness):
    fake_api.create(node())
    h = harness(informers="node")
    h.event("synced", kind="Node")
    h.send("csinode hostpath.csi.k8s.io id-1 zone,rack 10")
    assert h.wait_for(lambda e: e.get("cmd") == "csinode")["error"] == 0
    c = fake_api.get("csinodes", None, NODE)
    n = fake_api.get("nodes", None, NODE)
    assert c["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": n["metadata"]["uid"]}]
    assert c["spec"]["drivers"] == [{"name": "hostpath.csi.k8s.io", "nodeID": "id-1",
                                     "topologyKeys": ["rack", "zone"], "allocatable": {"count": 10}}]
    h.send("csinode other.csi.example.com id-2")
    assert h.wait_for(lambda e: e.get("cmd") == "csinode")["error"] == 0
    h.send("csinode hostpath.csi.k8s.io id-9")
    assert h.wait_for(lambda e: e.get("cmd") == "csinode")["error"] == 0
    drivers = fake_api.get("csinodes", None, NODE)["spec"]["drivers"]
    assert [(d["name"], d["nodeID"]) for d in drivers] == [
        ("hostpath.csi.k8s.io", "id-9"), ("other.csi.example.com", "id-2")]
    h.send("csinode hostpath.csi.k8s.io")
    assert h.wait_for(lambda e: e.get("cmd") == "csinode")["error"] == 0
    drivers = fake_api.get("csinodes", None, NODE)["spec"]["drivers"]
    assert [d["name"] for d in drivers] == ["other.csi.example.com"]


def test_k8s_csinode_conflict_is_retried(fake_api, harness):
    fake_api.create(node())
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                     "metadata": {"name": NODE}, "spec": {"drivers": []}})
    fake_api.fail_next(1, status=409, path_prefix="/apis/storage.k8s.io/v1/csinodes",
                       method="PUT")
    h = harness(informers="node")
    h.send("csinode hostpath.csi.k8s.io id-1")
    assert h.wait_for(lambda e: e.get("cmd") == "csinode")["error"] == 0
    gets = [r for r in fake_api.requests()
            if r["method"] == "GET" and r["path"].endswith(f"/csinodes/{NODE}")]
    assert len(gets) == 2
    assert fake_api.get("csinodes", None, NODE)["spec"]["drivers"][0]["nodeID"] == "id-1"


def test_k8s_events_are_aggregated(fake_api, harness):
    fake_api.create(node())
    p = fake_api.create(pod("web"))
    uid = p["metadata"]["uid"]
    h = harness(informers="node")
    for _ in range(3):
        h.send(f"event default web {uid} Warning FailedMount MountVolume.SetUp failed for volume \"data\" : boom")
    for _ in range(3):
        assert h.wait_for(lambda e: e.get("cmd") == "event")["error"] == 0
    items, _ = fake_api.list("events", "default")
    assert len(items) == 1
    ev = items[0]
    assert ev["count"] == 3
    assert ev["reason"] == "FailedMount" and ev["type"] == "Warning"
    assert ev["message"] == 'MountVolume.SetUp failed for volume "data" : boom'
    assert ev["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "namespace": "default",
                                    "name": "web", "uid": uid}
    assert ev["source"] == {"component": "kvolumed", "host": NODE}
    assert ev["reportingComponent"] == "kvolumed" and ev["reportingInstance"] == NODE
    assert ev["firstTimestamp"] and ev["lastTimestamp"]
    h.send(f"event default web {uid} Warning FailedMount another message")
    assert h.wait_for(lambda e: e.get("cmd") == "event")["error"] == 0
    assert len(fake_api.list("events", "default")[0]) == 2


def test_k8s_event_spam_filter(fake_api, harness):
    fake_api.create(node())
    h = harness(informers="node")
    for i in range(30):
        h.send(f"event default web 1 Warning FailedMount message {i}")
    results = [h.wait_for(lambda e: e.get("cmd") == "event") for _ in range(30)]
    assert sum(1 for r in results if r.get("dropped")) == 5
    assert len(fake_api.list("events", "default")[0]) == 25


def test_k8s_get_objects_and_volume_attachment_informer(fake_api, harness):
    fake_api.create(node())
    fake_api.create({"apiVersion": "v1", "kind": "Secret",
                     "metadata": {"name": "s", "namespace": "default"},
                     "data": {"a": "aGVsbG8=", "b": "d29ybGQ="}})
    fake_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "claim", "namespace": "default"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1",
                              "resources": {"requests": {"storage": "1Gi"}}}})
    h = harness(informers="node")
    h.send("get secret default s")
    g = h.wait_for(lambda e: e["type"] == "get")
    assert g["status"] == 200 and g["keys"] == 2
    h.send("get pvc default claim")
    g = h.wait_for(lambda e: e["type"] == "get")
    assert g["volumeName"] == "pv-1"
    h.send("get pv - missing")
    g = h.wait_for(lambda e: e["type"] == "get")
    assert g["status"] == 404
    h.send("va-watch csi-abc")
    h.event("synced", kind="VolumeAttachment")
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                     "metadata": {"name": "csi-abc"},
                     "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": NODE,
                              "source": {"persistentVolumeName": "pv-1"}}})
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                     "metadata": {"name": "csi-other"},
                     "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": NODE,
                              "source": {"persistentVolumeName": "pv-2"}}})
    assert h.event("add", kind="VolumeAttachment", key="csi-abc")["attached"] is False
    va = fake_api.get("volumeattachments", None, "csi-abc")
    va["status"] = {"attached": True, "attachmentMetadata": {"k": "v"}}
    fake_api.update(va)
    assert h.event("update", kind="VolumeAttachment", key="csi-abc")["attached"] is True
    assert not [e for e in h.seen if e.get("key") == "csi-other"]
    h.send("va-stop csi-abc")
    h.drain(0.5)
    assert fake_api.state()["watches"] >= 1
