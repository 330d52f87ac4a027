"""Fake API server against real clients: kubectl and python3-kubernetes.
Where a real client disagrees with the fake, the fake is wrong."""
import copy
import json
import os
import subprocess

import pytest

from doubles.fakeapi.testclient import Client

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                        "reference", "k8s-api-fixtures")
KUBECTL = "/usr/bin/kubectl"

needs_kubectl = pytest.mark.skipif(not os.path.exists(KUBECTL),
                                   reason="kubectl is not installed")


@pytest.fixture
def kubectl(fake_api, tmp_path):
    def run(*args, check=True, stdin=None):
        env = dict(os.environ, KUBECONFIG=fake_api.kubeconfig_path,
                   HOME=str(tmp_path))
        p = subprocess.run([KUBECTL, "--cache-dir", str(tmp_path / "kcache"),
                            "--request-timeout", "10s", *args],
                           input=stdin, capture_output=True, text=True, env=env,
                           timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {args} failed: {p.stderr}")
        return p
    return run


@pytest.fixture
def core_v1(fake_api):
    kubernetes = pytest.importorskip("kubernetes")
    cfg = kubernetes.client.Configuration()
    cfg.host = fake_api.server_url
    cfg.ssl_ca_cert = fake_api.ca_path
    cfg.api_key = {"authorization": fake_api.token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    with kubernetes.client.ApiClient(cfg) as api_client:
        yield kubernetes.client.CoreV1Api(api_client)


def node(name):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"volumesInUse": []}}


def pod(name, node_name="n1"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "c", "image": "busybox"}]}}


# -- kubectl ------------------------------------------------------------------

@needs_kubectl
def test_kubectl_get(fake_api, kubectl):
    fake_api.create(node("n1"))
    fake_api.create(pod("a", "n1"))
    fake_api.create(pod("b", "n2"))
    assert kubectl("get", "nodes", "-o", "name").stdout == "node/n1\n"
    listed = json.loads(kubectl("get", "pods", "-o", "json").stdout)
    assert [(i["kind"], i["metadata"]["name"]) for i in listed["items"]] == \
        [("Pod", "a"), ("Pod", "b")]
    out = kubectl("get", "pods", "--field-selector", "spec.nodeName=n2",
                  "-o", "name").stdout
    assert out == "pod/b\n"
    p = kubectl("get", "pod", "nope", check=False)
    assert p.returncode == 1
    assert 'Error from server (NotFound): pods "nope" not found' in p.stderr


@needs_kubectl
def test_kubectl_create_pod_and_csidriver(fake_api, kubectl):
    manifest = """apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  nodeName: n1
  containers:
  - name: c
    image: busybox
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: hostpath.csi.k8s.io
spec:
  attachRequired: false
  podInfoOnMount: true
  volumeLifecycleModes: [Persistent, Ephemeral]
"""
    out = kubectl("create", "-f", "-", stdin=manifest).stdout
    assert out == ("pod/web created\n"
                   "csidriver.storage.k8s.io/hostpath.csi.k8s.io created\n")
    assert fake_api.get("pods", "default", "web")["spec"]["nodeName"] == "n1"
    drv = fake_api.get("csidrivers", None, "hostpath.csi.k8s.io")
    assert drv["spec"]["volumeLifecycleModes"] == ["Persistent", "Ephemeral"]
    p = kubectl("create", "-f", "-", stdin=manifest, check=False)
    assert "AlreadyExists" in p.stderr and "already exists" in p.stderr


@needs_kubectl
def test_kubectl_patch_node_status_and_annotations(fake_api, kubectl):
    fake_api.create(node("n1"))
    out = kubectl("patch", "node", "n1", "--subresource=status", "--type=merge",
                  "-p", '{"status":{"volumesInUse":["kubernetes.io/csi/d^v"]}}')
    assert out.stdout == "node/n1 patched\n"
    kubectl("patch", "node", "n1", "-p", json.dumps({"metadata": {"annotations": {
        "volumes.kubernetes.io/controller-managed-attach-detach": "true"}}}))
    n = fake_api.get("nodes", None, "n1")
    assert n["status"]["volumesInUse"] == ["kubernetes.io/csi/d^v"]
    assert n["metadata"]["annotations"] == {
        "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
    patches = [r for r in fake_api.requests() if r["method"] == "PATCH"]
    assert [(r["path"], r["headers"]["content-type"]) for r in patches] == [
        ("/api/v1/nodes/n1/status", "application/merge-patch+json"),
        ("/api/v1/nodes/n1", "application/strategic-merge-patch+json")]


@needs_kubectl
def test_kubectl_delete_waits_through_watch(fake_api, kubectl):
    fake_api.create(pod("gone", node_name=""))
    assert kubectl("delete", "pod", "gone").stdout == 'pod "gone" deleted\n'
    assert fake_api.list("pods")[0] == []


@needs_kubectl
def test_kubectl_auth(fake_api, kubectl):
    fake_api.create(node("n1"))
    assert kubectl("--context", "fakeapi-cert", "get", "nodes",
                   "-o", "name").stdout == "node/n1\n"
    fake_api.set_tokens([])
    p = kubectl("get", "nodes", check=False)
    assert p.returncode == 1
    assert "Unauthorized" in p.stderr


# -- python3-kubernetes --------------------------------------------------------

def test_python_client_list_then_watch_with_bookmarks(fake_api, core_v1):
    import kubernetes
    fake_api.bookmark_interval = 0.2
    fake_api.create(pod("a"))
    lst = core_v1.list_namespaced_pod("default", field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in lst.items] == ["a"]
    rv = lst.metadata.resource_version
    fake_api.create(pod("b"))
    fake_api.create(pod("elsewhere", node_name="n2"))
    w = kubernetes.watch.Watch()
    seen = []
    for ev in w.stream(core_v1.list_namespaced_pod, "default",
                       field_selector="spec.nodeName=n1", resource_version=rv,
                       allow_watch_bookmarks=True, timeout_seconds=5):
        seen.append(ev)
        if ev["type"] == "BOOKMARK":
            w.stop()
    assert [e["type"] for e in seen] == ["ADDED", "BOOKMARK"]
    assert seen[0]["object"].metadata.name == "b"
    assert seen[1]["raw_object"]["metadata"]["resourceVersion"] == \
        str(fake_api.resource_version)


def test_python_client_watch_across_compaction(fake_api, core_v1):
    import kubernetes
    fake_api.create(pod("a"))
    rv = core_v1.list_namespaced_pod(
        "default", field_selector="spec.nodeName=n1").metadata.resource_version
    fake_api.create(pod("b"))
    fake_api.compact()
    # Without timeout_seconds the client retries once on 410 from its last
    # resourceVersion, gets 410 again and raises.
    with pytest.raises(kubernetes.client.exceptions.ApiException) as exc:
        for _ in kubernetes.watch.Watch().stream(
                core_v1.list_namespaced_pod, "default",
                field_selector="spec.nodeName=n1", resource_version=rv):
            pass
    assert exc.value.status == 410
    assert "too old resource version" in exc.value.reason
    # Relist and continue from there.
    relist = core_v1.list_namespaced_pod("default", field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in relist.items] == ["a", "b"]
    fake_api.create(pod("c"))
    w = kubernetes.watch.Watch()
    for ev in w.stream(core_v1.list_namespaced_pod, "default",
                       field_selector="spec.nodeName=n1",
                       resource_version=relist.metadata.resource_version,
                       timeout_seconds=5):
        assert (ev["type"], ev["object"].metadata.name) == ("ADDED", "c")
        w.stop()
        break
    else:
        pytest.fail("no event after the relist")


def test_python_client_patch_node_status(fake_api, core_v1):
    fake_api.create(node("n1"))
    core_v1.patch_node_status("n1", {"status": {"volumesAttached": [
        {"name": "kubernetes.io/csi/d^v", "devicePath": ""}]}})
    n = core_v1.read_node("n1")
    assert [(v.name, v.device_path) for v in n.status.volumes_attached] == \
        [("kubernetes.io/csi/d^v", "")]


# -- the reference fixtures round-trip ----------------------------------------

_FIXTURE_PATHS = {
    "core.v1.Pod.json": "/api/v1/namespaces/default/pods",
    "core.v1.Node.json": "/api/v1/nodes",
    "core.v1.PersistentVolume.json": "/api/v1/persistentvolumes",
    "core.v1.PersistentVolumeClaim.json":
        "/api/v1/namespaces/default/persistentvolumeclaims",
    "core.v1.Secret.json": "/api/v1/namespaces/default/secrets",
    "core.v1.Event.json": "/api/v1/namespaces/default/events",
    "storage.k8s.io.v1.CSIDriver.json": "/apis/storage.k8s.io/v1/csidrivers",
    "storage.k8s.io.v1.CSINode.json": "/apis/storage.k8s.io/v1/csinodes",
    "storage.k8s.io.v1.VolumeAttachment.json":
        "/apis/storage.k8s.io/v1/volumeattachments",
}


@pytest.mark.parametrize("fixture", sorted(_FIXTURE_PATHS))
def test_reference_fixture_round_trips(fake_api, fixture):
    path = os.path.join(FIXTURES, fixture)
    if not os.path.exists(path):
        pytest.skip("reference fixtures not present")
    with open(path) as f:
        obj = json.load(f)
    # The fixture's names are not valid object names ("nameValue").
    obj["metadata"]["name"] = "fixture"
    if "/namespaces/" in _FIXTURE_PATHS[fixture]:
        obj["metadata"]["namespace"] = "default"
    else:
        del obj["metadata"]["namespace"]
    if obj["kind"] == "VolumeAttachment":
        # It fills both sources; the API server takes exactly one
        # (test_volume_migration's validation test refuses both).
        del obj["spec"]["source"]["inlineVolumeSpec"]
    c = Client(fake_api)
    r = c.request("POST", _FIXTURE_PATHS[fixture], obj)
    assert r.status == 201, r.json
    got = c.get(_FIXTURE_PATHS[fixture] + "/fixture").json
    expected = copy.deepcopy(obj)
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                "managedFields"):
        del expected["metadata"][key]
    m = got["metadata"]
    expected["metadata"].update(uid=m["uid"], resourceVersion=m["resourceVersion"],
                                creationTimestamp=m["creationTimestamp"],
                                generation=1)
    assert m["uid"] != obj["metadata"]["uid"]
    assert got == expected
