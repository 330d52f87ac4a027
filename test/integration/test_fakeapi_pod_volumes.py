"""Fake API server: what the pod volume kinds of issue 32 read and ask for,
under a node's own identity, as a real kube-apiserver with
--authorization-mode=Node,RBAC and NodeRestriction answers it
(kubelet-facts §14, §15): configMaps and secrets by name only and only when
a pod bound to the node names them, watches of one object that deliver its
updates and deletion, pod-bound TokenRequests whose binding a TokenReview
tells, and clusterTrustBundles served or 404 by a mode of the server."""
import time

import pytest

from doubles.fakeapi.errors import ApiError
from doubles.fakeapi.testclient import Client
from .test_fakeapi_nodeauth import (CORE, NO_RELATIONSHIP, NODE, NS, authz,
                                   forbidden, node_client, node_obj,  # noqa: F401
                                   pod_obj, refused, secret_obj)

AUTHN = "/apis/authentication.k8s.io/v1"
CERTS = "/apis/certificates.k8s.io"


def cm_obj(name, data=None, namespace="default"):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": data or {"a": "b"}}


def kube_api_access(sa_token_path="token"):
    """The volume the ServiceAccount admission plugin adds to a pod."""
    return {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607,
                                         "path": sa_token_path}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}


def wait_until(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _gone(fake_api, pod):
    """The pod deleted for good, as kubelet finishing its deletion."""
    fake_api.delete("pods", "default", pod, grace_period_seconds=0)
    try:
        fake_api.remove("pods", "default", pod)
    except ApiError:
        pass        # already removed: no grace period to wait for


# -- configMaps and secrets ---------------------------------------------------

def test_configmaps_of_every_pod_volume_kind_by_name_only(fake_api,
                                                          node_client):
    volumes = [kube_api_access(),
               {"name": "cm", "configMap": {"name": "app", "optional": True}},
               {"name": "p", "projected": {"sources": [
                   {"configMap": {"name": "proj-cm"}},
                   {"secret": {"name": "proj-secret"}}]}},
               {"name": "d", "downwardAPI": {"items": [{"path": "l",
                "fieldRef": {"fieldPath": "metadata.labels"}}]}},
               {"name": "e", "emptyDir": {"medium": "Memory"}}]
    container = {"name": "c", "image": "busybox", "env": [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "env-cm",
                                                        "key": "x"}}}]}
    fake_api.create(pod_obj("web", volumes=volumes, containers=[container]))
    fake_api.create(pod_obj("elsewhere", node="n2", volumes=[
        {"name": "cm", "configMap": {"name": "theirs"}}]))
    for name in ("kube-root-ca.crt", "app", "proj-cm", "env-cm", "theirs",
                 "unused"):
        fake_api.create(cm_obj(name))
    fake_api.create(secret_obj("proj-secret"))
    c = node_client

    for name in ("kube-root-ca.crt", "app", "proj-cm", "env-cm"):
        assert c.get(f"{NS}/configmaps/{name}").status == 200, name
        r = c.get(f"{NS}/configmaps", fieldSelector=f"metadata.name={name}")
        assert r.status == 200, name
        assert [i["metadata"]["name"] for i in r.json["items"]] == [name]
    assert c.get(f"{NS}/secrets/proj-secret").status == 200
    for name in ("theirs", "unused"):
        assert refused(c.get(f"{NS}/configmaps/{name}"), forbidden(
            authz("get", "configmaps", reason=NO_RELATIONSHIP), "configmaps",
            name))
        r = c.get(f"{NS}/configmaps", fieldSelector=f"metadata.name={name}")
        assert refused(r, forbidden(authz("list", "configmaps",
                                          reason=NO_RELATIONSHIP),
                                    "configmaps", name))
    # A list or watch that names no single object is refused, whatever
    # else it selects; so is one across namespaces.
    assert refused(c.get(f"{NS}/configmaps"), forbidden(
        authz("list", "configmaps", reason="No Object name found"),
        "configmaps"))
    w = c.watch(f"{NS}/configmaps")
    try:
        assert w.status == 403
    finally:
        w.close()
    r = c.get(f"{NS}/configmaps", labelSelector="app=web")
    assert r.status == 403
    r = c.get(f"{CORE}/configmaps", fieldSelector="metadata.name=app")
    assert refused(r, forbidden(authz(
        "list", "configmaps", None, reason="can only read namespaced object "
        "of this type"), "configmaps", "app"))
    # A node does not create or change them.
    r = c.request("POST", f"{NS}/configmaps", cm_obj("mine"))
    assert r.status == 403
    # Once the pod is gone, so is the right.
    _gone(fake_api, "web")
    assert refused(c.get(f"{NS}/configmaps/app"), forbidden(
        authz("get", "configmaps", reason=NO_RELATIONSHIP), "configmaps",
        "app"))


@pytest.mark.parametrize("kind", ["configmaps", "secrets"])
def test_watch_by_name_delivers_that_objects_changes(fake_api, node_client,
                                                     kind):
    def obj(name, value):
        if kind == "secrets":
            o = secret_obj(name)
            o["data"] = {"k": value}
            return o
        return cm_obj(name, {"k": value})

    ref = ({"secret": {"secretName": "watched"}} if kind == "secrets"
           else {"configMap": {"name": "watched"}})
    fake_api.create(pod_obj("web", volumes=[{"name": "v", **ref}]))
    fake_api.create(obj("watched", "djE="))
    fake_api.create(obj("neighbour", "djE="))
    c = node_client
    r = c.get(f"{NS}/{kind}", fieldSelector="metadata.name=watched")
    assert r.status == 200
    rv = r.json["metadata"]["resourceVersion"]
    w = c.watch(f"{NS}/{kind}", fieldSelector="metadata.name=watched",
                resourceVersion=rv, allowWatchBookmarks="false")
    try:
        assert w.status == 200
        neighbour = fake_api.get(kind, "default", "neighbour")
        neighbour.setdefault("data", {})["k"] = "bmVpZ2hib3Vy"
        fake_api.update(neighbour)
        current = fake_api.get(kind, "default", "watched")
        current["data"]["k"] = "djI="
        fake_api.update(current)
        e = w.next(timeout=30)
        assert (e["type"], e["object"]["metadata"]["name"]) == \
            ("MODIFIED", "watched")
        assert e["object"]["data"]["k"] == "djI="
        fake_api.delete(kind, "default", "neighbour")
        fake_api.delete(kind, "default", "watched")
        e = w.next(timeout=30)
        assert (e["type"], e["object"]["metadata"]["name"]) == \
            ("DELETED", "watched")
    finally:
        w.close()


# -- TokenRequest and TokenReview ---------------------------------------------

def _token_request(pod, audiences=("vault",), seconds=3600):
    spec = {"audiences": list(audiences), "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                               "name": pod["metadata"]["name"],
                               "uid": pod["metadata"]["uid"]}}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": spec}


def _review(c, token, audiences=None):
    spec = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    r = c.request("POST", f"{AUTHN}/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": spec})
    assert r.status == 201, r.json
    assert r.json["kind"] == "TokenReview"
    return r.json["status"]


@pytest.fixture
def token_pod(fake_api, node_client):
    fake_api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "sa1", "namespace": "default"}})
    return fake_api.create(pod_obj("web", serviceAccountName="sa1",
                                   volumes=[kube_api_access()]))


def test_token_is_bound_to_the_pod(fake_api, node_client, token_pod):
    c = node_client
    r = c.request("POST", f"{NS}/serviceaccounts/sa1/token",
                  _token_request(token_pod))
    assert r.status == 201, r.json
    token = r.json["status"]["token"]
    assert r.json["status"]["expirationTimestamp"]
    assert r.json["spec"]["boundObjectRef"]["uid"] == \
        token_pod["metadata"]["uid"]

    status = _review(c, token, ["vault"])
    assert status["authenticated"] is True
    assert status["audiences"] == ["vault"]
    user = status["user"]
    assert user["username"] == "system:serviceaccount:default:sa1"
    assert user["uid"] == fake_api.get("serviceaccounts", "default",
                                       "sa1")["metadata"]["uid"]
    assert set(user["groups"]) == {"system:serviceaccounts",
                                   "system:serviceaccounts:default",
                                   "system:authenticated"}
    extra = user["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["web"]
    assert extra["authentication.kubernetes.io/pod-uid"] == \
        [token_pod["metadata"]["uid"]]
    assert extra["authentication.kubernetes.io/node-name"] == [NODE]
    assert extra["authentication.kubernetes.io/node-uid"] == \
        [fake_api.get("nodes", None, NODE)["metadata"]["uid"]]
    assert extra["authentication.kubernetes.io/credential-id"][0]. \
        startswith("JTI=")

    # Not for another audience, nor (asked for "vault") the API server's.
    status = _review(c, token, ["other"])
    assert status.get("authenticated") is not True
    assert "is invalid for the target audiences" in status["error"]
    assert _review(c, token).get("authenticated") is not True
    # A token nobody issued.
    assert _review(c, "fake-token:forged").get("authenticated") is not True
    # A review needs a token.
    r = c.request("POST", f"{AUTHN}/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {}})
    assert r.status == 400
    assert r.json["message"] == \
        "token is required for TokenReview in authentication"

    # The pod deleted and recreated under its name: the token is void.
    _gone(fake_api, "web")
    fake_api.create(pod_obj("web", serviceAccountName="sa1"))
    status = _review(c, token, ["vault"])
    assert status.get("authenticated") is not True
    assert status["error"] == "[invalid bearer token, service account token " \
                              "has been invalidated]"


def test_token_for_the_api_server_and_its_expiry(fake_api, node_client,
                                                 token_pod):
    c = node_client
    r = c.request("POST", f"{NS}/serviceaccounts/sa1/token",
                  _token_request(token_pod, audiences=()))
    assert r.status == 201
    token = r.json["status"]["token"]
    status = _review(c, token)
    assert status["authenticated"] is True
    assert status["audiences"] == ["https://kubernetes.default.svc"]

    fake_api.configure(tokenMaxExpiration=1)
    r = c.request("POST", f"{NS}/serviceaccounts/sa1/token",
                  _token_request(token_pod, seconds=600))
    assert r.status == 201
    short = r.json["status"]["token"]
    status = wait_until(lambda: (lambda s: s if not s.get("authenticated")
                                 else None)(_review(c, short, ["vault"])),
                        what="the 1 s token to expire")
    assert status["error"] == "[invalid bearer token, service account token " \
                              "has expired]"


@pytest.mark.parametrize("seconds", [599, 1 << 32 | 1, "3600"])
def test_token_request_duration_validated(fake_api, node_client, token_pod,
                                          seconds):
    r = node_client.request("POST", f"{NS}/serviceaccounts/sa1/token",
                            _token_request(token_pod, seconds=seconds))
    assert r.status == 422, r.json
    assert r.json["message"].startswith(
        'TokenRequest.authentication.k8s.io "sa1" is invalid: '
        'spec.expirationSeconds: Invalid value: ')
    assert r.json["details"]["causes"][0]["field"] == "spec.expirationSeconds"
    for ok in (600, 1 << 32):
        r = node_client.request("POST", f"{NS}/serviceaccounts/sa1/token",
                                _token_request(token_pod, seconds=ok))
        assert r.status == 201, r.json


def test_token_request_binding_checked_for_every_identity(fake_api,
                                                          token_pod):
    """The TokenRequest handler itself (not the Node authorizer) checks that
    the bound pod exists with that UID."""
    c = Client(fake_api)
    req = _token_request(token_pod)
    req["spec"]["boundObjectRef"]["name"] = "gone"
    r = c.request("POST", f"{NS}/serviceaccounts/sa1/token", req)
    assert r.status == 404
    req = _token_request(token_pod)
    req["spec"]["boundObjectRef"]["uid"] = "0000"
    r = c.request("POST", f"{NS}/serviceaccounts/sa1/token", req)
    assert r.status == 409
    assert "does not match the UID in record" in r.json["message"]


# -- clusterTrustBundles -----------------------------------------------------

def _bundle(name, signer=None, labels=None, version="v1beta1"):
    spec = {"trustBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n"
                           "-----END CERTIFICATE-----\n"}
    if signer:
        spec["signerName"] = signer
    return {"apiVersion": f"certificates.k8s.io/{version}",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def test_cluster_trust_bundles_off_by_default(fake_api, node_client):
    c = Client(fake_api)
    groups = [g["name"] for g in c.get("/apis").json["groups"]]
    assert "certificates.k8s.io" not in groups
    for version in ("v1beta1", "v1alpha1"):
        assert c.get(f"{CERTS}/{version}/clustertrustbundles").status == 404
        assert node_client.get(f"{CERTS}/{version}/clustertrustbundles"). \
            status == 404
    assert c.get(f"{CERTS}/v1beta1").status == 404
    assert not [p for p in c.get("/openapi/v3").json["paths"]
                if "certificates.k8s.io" in p]
    assert fake_api.state()["clusterTrustBundles"] == "none"
    with pytest.raises(ValueError):
        fake_api.configure(clusterTrustBundles="v1")


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha1"])
def test_cluster_trust_bundles_served(fake_api, node_client, version):
    fake_api.configure(clusterTrustBundles=version)
    other = "v1alpha1" if version == "v1beta1" else "v1beta1"
    c = Client(fake_api)
    base = f"{CERTS}/{version}/clustertrustbundles"
    for b in (_bundle("example.com:s:one", "example.com/s", {"tier": "root"},
                      version),
              _bundle("example.com:s:two", "example.com/s", {}, version),
              _bundle("plain", None, {}, version)):
        assert c.request("POST", base, b).status == 201
    # Named for their signer, as ValidateClusterTrustBundleName has it.
    for b in (_bundle("other:one", "example.com/s", {}, version),
              _bundle("has:colon", None, {}, version)):
        r = c.request("POST", base, b)
        assert r.status == 422, b
        assert "ClusterTrustBundle" in r.json["message"]
    assert c.get(f"{CERTS}/{other}/clustertrustbundles").status == 404
    doc = c.get(f"{CERTS}/{version}").json
    assert [r["name"] for r in doc["resources"]] == ["clustertrustbundles"]
    assert [p for p in c.get("/openapi/v3").json["paths"]
            if "certificates.k8s.io" in p] == \
        [f"apis/certificates.k8s.io/{version}"]

    # A node reads them all (they are public), by name or by signer.
    n = node_client
    assert n.get(f"{base}/plain").status == 200
    r = n.get(base, fieldSelector="spec.signerName=example.com/s",
              labelSelector="tier=root")
    assert r.status == 200
    assert [i["metadata"]["name"] for i in r.json["items"]] == \
        ["example.com:s:one"]
    r = n.get(base, fieldSelector="spec.signerName=example.com/s")
    assert sorted(i["metadata"]["name"] for i in r.json["items"]) == \
        ["example.com:s:one", "example.com:s:two"]
    w = n.watch(base, fieldSelector="spec.signerName=example.com/s")
    try:
        assert w.status == 200
    finally:
        w.close()
    # ... but writes none.
    r = n.request("POST", base, _bundle("mine", None, {}, version))
    assert refused(r, forbidden(authz("create", "clustertrustbundles", None,
                                      group="certificates.k8s.io"),
                                "clustertrustbundles", None,
                                group="certificates.k8s.io"))
