"""An ordinary pod on the real containerd (issue 32, "Done when"): the test
runner takes each container's `mounts` from kvolumed's local API and passes
them unchanged to CreateContainer; a busybox container reads every kind of
volume kvolumed sets up, and sees configMap and label changes while it runs.

Written against issue 32's contract and kubelet's paths.  The kinds are built
on other branches at the same time: until they are merged the asserts on
them fail, on purpose; none is skipped.  Which asserts wait for which branch
is said at each."""
import base64
import os
import shutil
import tempfile

import pytest

from integration.agent_fixtures import DRIVER, wait_until
from integration.containerd_node import node  # noqa: F401  (fixture)
from integration.test_runtime_containerd_api import start

pytestmark = pytest.mark.xdist_group("containerd")

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CA = "-----BEGIN CERTIFICATE-----\nMIIB-test-ca\n-----END CERTIFICATE-----\n"

# Copies what it reads into /out (an inline CSI volume the test reads on the
# host), then keeps copying the configMap's key and the labels file, so that
# the test sees the container's view of their updates.
READER = f"""
cp {SA_DIR}/token /out/token; cp {SA_DIR}/ca.crt /out/ca.crt; cp {SA_DIR}/namespace /out/namespace
cat /sec/password > /out/secret
df -k /mem | tail -n 1 > /out/df
echo from-container > /host/made-here
echo sub > /data-sub/f
touch /out/ready
while :; do
  cat /cfg/key > /out/.cfg && mv /out/.cfg /out/cfg
  cat /info/labels > /out/.labels && mv /out/.labels /out/labels
  sleep 0.2
done
"""


@pytest.fixture
def api_socket():
    d = tempfile.mkdtemp(prefix="kvpv-", dir="/tmp")  # socket paths fit in 107 bytes
    yield os.path.join(d, "run", "kvolumed.sock")
    shutil.rmtree(d, ignore_errors=True)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def kube_api_access():
    """The volume the ServiceAccount admission plugin adds to every pod."""
    return {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}


def test_the_apis_mounts_run_a_csi_pod_unchanged(node, api_socket):
    """Works with CSI alone: an inline volume and a read-only claim, their
    mounts from the API as they are; the container writes into one and
    cannot into the other."""
    api = start(node, api_socket)
    env = node.env
    env.pv("pv-ro", "vol-ro", claim="ro")
    env.pvc("ro", "pv-ro")
    pod = env.pod("csi", [{"name": "out", "csi": {"driver": DRIVER}},
                          {"name": "ro", "persistentVolumeClaim": {"claimName": "ro", "readOnly": True}}])
    uid = pod["metadata"]["uid"]
    status, body = api.volumes(uid, "mounted", "60s")
    assert status == 200 and body["allMounted"] is True, body
    (c,) = body["containers"]
    assert [m["container_path"] for m in c["mounts"]] == ["/v/out", "/v/ro"]
    assert c["mounts"][1]["readonly"] is True
    sandbox = node.runner.run_pod(uid, "csi")
    cid = node.runner.run_container(sandbox, "c", "echo hi > /v/out/f; touch /v/ro/f 2>/v/out/err; "
                                    "touch /v/out/done; sleep 600", cri_mounts=c["mounts"])
    out = env.target(pod, "out")
    wait_until(lambda: os.path.exists(os.path.join(out, "done")), timeout=60, what="the container")
    assert read(os.path.join(out, "f")) == "hi\n"
    assert "Read-only file system" in read(os.path.join(out, "err"))
    node.runner.stop_container(cid, timeout=1)
    node.runner.stop_pod(node.sandbox(pod))
    env.api.remove("pods", "default", "csi")
    status, body = api.volumes(uid, "unmounted", "60s")
    assert status == 200, body


def test_a_busybox_pod_reads_every_kind_through_the_apis_mounts(node, api_socket, tmp_path):
    api = start(node, api_socket)
    env = node.env
    api_server = env.api
    api_server.create({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default", "namespace": "default"}})
    api_server.create({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "kube-root-ca.crt", "namespace": "default"}, "data": {"ca.crt": CA}})
    api_server.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": "default"},
                       "data": {"key": "one"}})
    api_server.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "default"},
                       "type": "Opaque", "data": {"password": base64.b64encode(b"s3cret").decode()}})
    env.pv("pv-data", "vol-data", claim="data")
    env.pvc("data", "pv-data")
    host_dir = str(tmp_path / "host" / "made")  # DirectoryOrCreate: not there yet
    volumes = [{"name": "out", "csi": {"driver": DRIVER}},
               kube_api_access(),
               {"name": "cfg", "configMap": {"name": "app"}},
               {"name": "sec", "secret": {"secretName": "creds"}},
               {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
               {"name": "info", "downwardAPI": {"items": [{"path": "labels",
                                                           "fieldRef": {"fieldPath": "metadata.labels"}}]}},
               {"name": "host", "hostPath": {"path": host_dir, "type": "DirectoryOrCreate"}},
               {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    mounts = [{"name": "out", "mountPath": "/out"},
              {"name": "kube-api-access-x7k2p", "mountPath": SA_DIR, "readOnly": True},
              {"name": "cfg", "mountPath": "/cfg"},
              {"name": "sec", "mountPath": "/sec"},
              {"name": "mem", "mountPath": "/mem"},
              {"name": "info", "mountPath": "/info"},
              {"name": "host", "mountPath": "/host"},
              {"name": "data", "mountPath": "/data-sub", "subPath": "sub/dir"}]
    pod = env.pod("full", volumes, mounts=mounts, serviceAccountName="default")
    obj = api_server.get("pods", "default", "full")
    obj["metadata"]["labels"] = {"app": "one"}
    obj["metadata"].pop("resourceVersion", None)
    pod = api_server.update(obj)
    uid = pod["metadata"]["uid"]

    # Works on this branch: the CSI volumes, the API's kinds and mounts.
    # allMounted needs every kind: kind-files (configMap, secret),
    # kind-projected (projected, downwardAPI), kind-dirs (emptyDir,
    # hostPath, the subPath bind).
    status, body = api.volumes(uid, "mounted", "80s")
    assert status == 200 and body["allMounted"] is True, body
    kinds = {v["name"]: v["kind"] for v in body["volumes"]}
    assert kinds == {"out": "csi", "kube-api-access-x7k2p": "projected", "cfg": "configmap", "sec": "secret",
                     "mem": "empty-dir", "info": "downward-api", "host": "host-path", "data": "csi"}, kinds
    (c,) = body["containers"]
    by_path = {m["container_path"]: m for m in c["mounts"]}
    assert by_path["/host"]["host_path"] == host_dir  # hostPath: the spec's path, no copy under root-dir
    assert by_path["/data-sub"]["host_path"] == f"{env.root}/pods/{uid}/volume-subpaths/data/c/7"
    assert by_path[SA_DIR]["readonly"] is True and by_path["/cfg"]["readonly"] is True
    assert by_path[SA_DIR]["host_path"] == \
        f"{env.root}/pods/{uid}/volumes/kubernetes.io~projected/kube-api-access-x7k2p"

    # The runner's part: the API's mounts, unchanged, to CreateContainer.
    sandbox = node.runner.run_pod(uid, "full")
    cid = node.runner.run_container(sandbox, "c", READER, cri_mounts=c["mounts"])
    out = env.target(pod, "out")
    wait_until(lambda: os.path.exists(os.path.join(out, "ready")), timeout=60, what="the container's reads")

    token = read(os.path.join(out, "token"))
    review = api_server.review_token({"spec": {"token": token}})
    assert review["status"].get("authenticated") is True, review
    extra = review["status"]["user"]["extra"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [uid], review
    assert read(os.path.join(out, "ca.crt")) == CA
    assert read(os.path.join(out, "namespace")) == "default"
    assert read(os.path.join(out, "secret")) == "s3cret"
    assert read(os.path.join(out, "df")).split()[1] == "16384", read(os.path.join(out, "df"))  # 16Mi in 1K blocks
    assert read(os.path.join(host_dir, "made-here")) == "from-container\n"
    # Into the volume (the driver's mount at the publish target: the mock
    # keeps a tmpfs volume there while it is in use), not under it.
    data_target = env.target(pod, "pv-data")  # a PV's dir is named after the PV
    assert os.path.ismount(data_target)
    assert read(os.path.join(data_target, "sub", "dir", "f")) == "sub\n"

    # Changes while it runs reach the container's view.
    wait_until(lambda: read(os.path.join(out, "cfg")) == "one", timeout=30, what="the configMap's first value")
    cm = api_server.get("configmaps", "default", "app")
    cm["data"] = {"key": "two"}
    cm["metadata"].pop("resourceVersion", None)
    api_server.update(cm)
    wait_until(lambda: read(os.path.join(out, "cfg")) == "two", timeout=120, what="the configMap's new value")
    wait_until(lambda: 'app="one"' in (read(os.path.join(out, "labels")) or ""), timeout=30, what="the labels")
    obj = api_server.get("pods", "default", "full")
    obj["metadata"]["labels"] = {"app": "two"}
    obj["metadata"].pop("resourceVersion", None)
    api_server.update(obj)
    wait_until(lambda: 'app="two"' in (read(os.path.join(out, "labels")) or ""), timeout=120,
               what="the new label in the container")

    # Teardown after the runtime's word, as for CSI.
    node.runner.stop_container(cid)
    node.runner.stop_pod(node.sandbox(pod))
    api_server.remove("pods", "default", "full")
    status, body = api.volumes(uid, "unmounted", "80s")
    assert status == 200, body


def test_a_subpath_through_a_symlink_out_of_its_volume_is_refused(node, api_socket):
    """A subPath that resolves outside its volume (CVE-2017-1002101) is never
    bound: 409 with a clear error and an Event.  Waits for kind-dirs (the
    subPath pass)."""
    api = start(node, api_socket)
    env = node.env
    pod, target, _ = node.persistent_pod("esc")
    os.symlink("/etc", os.path.join(target, "escape"))
    evil = env.pod("escaper", [{"name": "data", "persistentVolumeClaim": {"claimName": "esc"}}],
                   mounts=[{"name": "data", "mountPath": "/x", "subPath": "escape"}])
    uid = evil["metadata"]["uid"]
    status, body = api.volumes(uid, "mounted", "80s")
    assert status == 409, body
    assert "subPath" in body["error"], body
    assert not os.path.ismount(f"{env.root}/pods/{uid}/volume-subpaths/data/c/0")
    wait_until(lambda: [e for e in env.events() if "subPath" in e.get("message", "")
                        and e.get("involvedObject", {}).get("name") == "escaper"],
               timeout=30, what="an Event of the refused subPath")
    for name in ("escaper", "esc"):
        env.api.remove("pods", "default", name)
    for p in (evil, pod):
        status, body = api.volumes(p["metadata"]["uid"], "unmounted", "60s")
        assert status in (200, 404), body
