"""k8s_informer_new_configmap / _secret / _by_name (k8s/informer.h): one
object followed by name (fieldSelector metadata.name=<n>) under the node's
own identity, as kubelet's watch-based configMap/secret manager does, against
the fake API server's Node authorizer: the object's creation, changes and
deletion arrive, its neighbours' do not, and a 403 while no pod of the node
names the object is retried until one does."""
from .test_k8s_client import NODE, harness, node  # noqa: F401
from .test_fakeapi_pod_volumes import cm_obj


def pod_naming(name, volumes):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "volumes": volumes,
                     "containers": [{"name": "c", "image": "i"}]}}


def secret(name, data):
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": "default"}, "data": data}


def node_token_file(fake_api, tmp_path):
    path = tmp_path / "node-token"
    path.write_text(fake_api.node_token(NODE) + "\n")
    return str(path)


def by_name_requests(fake_api, plural, name):
    return [r for r in fake_api.requests()
            if r["path"] == f"/api/v1/namespaces/default/{plural}"
            and r["query"].get("fieldSelector") == f"metadata.name={name}"]


def test_configmap_followed_by_name(fake_api, harness, tmp_path):  # noqa: F811
    fake_api.create(node())
    fake_api.create(pod_naming("web", [
        {"name": "v", "configMap": {"name": "app"}},
        {"name": "p", "projected": {"sources": [
            {"configMap": {"name": "neighbour"}}]}}]))
    fake_api.create(cm_obj("app", {"app.conf": "listen 80"}))
    fake_api.create(cm_obj("neighbour", {"x": "1"}))
    h = harness(token_file=node_token_file(fake_api, tmp_path), informers="")
    h.send("watch configmap default app")
    added = h.event("add", kind="ConfigMap", key="default/app", timeout=30)
    assert added["data"] == {"app.conf": "listen 80"}
    assert h.event("synced", kind="ConfigMap", timeout=30)["count"] == 1

    n = fake_api.get("configmaps", "default", "neighbour")
    n["data"] = {"x": "2"}
    fake_api.update(n)
    cm = fake_api.get("configmaps", "default", "app")
    cm["data"] = {"app.conf": "listen 8080"}
    cm["binaryData"] = {"blob": "AAEC"}
    fake_api.update(cm)
    updated = h.event("update", kind="ConfigMap", key="default/app", timeout=30)
    assert updated["data"] == {"app.conf": "listen 8080"}
    assert updated["binarySizes"] == {"blob": 3}
    fake_api.delete("configmaps", "default", "app")
    h.event("delete", kind="ConfigMap", key="default/app", timeout=30)
    assert not [e for e in h.seen if e.get("key") == "default/neighbour"]
    # Every list and watch named the one object: nothing else was asked.
    reqs = [r for r in fake_api.requests()
            if r["path"] == "/api/v1/namespaces/default/configmaps"]
    assert reqs and reqs == by_name_requests(fake_api, "configmaps", "app")
    assert all(r["status"] == 200 for r in reqs)


def test_secret_refused_until_a_pod_names_it(fake_api, harness, tmp_path):  # noqa: F811
    fake_api.create(node())
    fake_api.create(secret("tls", {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}))
    h = harness(token_file=node_token_file(fake_api, tmp_path), informers="")
    h.send("watch secret default tls")
    err = h.event("error", kind="Secret", timeout=30)
    assert err["status"] == 403
    assert "no relationship found between node" in err["message"]
    # The informer retries with backoff; a pod that names the secret lets
    # the next attempt through.
    fake_api.create(pod_naming("web", [
        {"name": "t", "secret": {"secretName": "tls"}}]))
    added = h.event("add", kind="Secret", key="default/tls", timeout=60)
    assert added["sizes"] == {"tls.crt": 4, "tls.key": 3}
    s = fake_api.get("secrets", "default", "tls")
    s["data"]["tls.key"] = "bmV3LWtleQ=="
    fake_api.update(s)
    updated = h.event("update", kind="Secret", key="default/tls", timeout=30)
    assert updated["sizes"] == {"tls.crt": 4, "tls.key": 7}
    statuses = [r["status"] for r in by_name_requests(fake_api, "secrets",
                                                      "tls")]
    assert 403 in statuses and 200 in statuses


def test_get_configmap_and_bad_names(fake_api, harness, tmp_path):  # noqa: F811
    fake_api.create(node())
    fake_api.create(pod_naming("web", [
        {"name": "v", "configMap": {"name": "app"}}]))
    fake_api.create(cm_obj("app", {"k": "v"}))
    fake_api.create(cm_obj("other", {"k": "v"}))
    h = harness(token_file=node_token_file(fake_api, tmp_path), informers="")
    h.send("get configmap default app")
    got = h.wait_for(lambda e: e.get("type") == "get", 30, "get")
    assert (got["status"], got["data"]) == (200, {"k": "v"})
    h.send("get configmap default other")
    got = h.wait_for(lambda e: e.get("type") == "get", 30, "get")
    assert got["status"] == 403 and got["error"] < 0
    # Names that are no DNS-1123 names are refused before any request.
    for bad in ("watch configmap default Bad_Name", "watch configmap - app",
                "watch secret NS app"):
        h.send(bad)
        done = h.wait_for(lambda e: e.get("type") == "done", 30, "refusal")
        assert done["message"] == "could not start", bad
