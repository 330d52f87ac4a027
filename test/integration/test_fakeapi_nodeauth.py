"""Fake API server: the Node authorizer and NodeRestriction admission for
requests authenticated as a node (user system:node:<name>, group
system:nodes), as kube-apiserver with --authorization-mode=Node,RBAC
--enable-admission-plugins=NodeRestriction (kubelet-facts §14)."""
import json
import os
import subprocess
import time
import urllib.request

import pytest

from doubles.fakeapi.testclient import Client

NODE = "n1"
USER = f"system:node:{NODE}"
CORE = "/api/v1"
NS = f"{CORE}/namespaces/default"
STORAGE = "/apis/storage.k8s.io/v1"
KUBECTL = "/usr/bin/kubectl"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"


def node_obj(name=NODE, labels=None, taints=None):
    obj = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": labels or {}}, "spec": {}}
    if taints is not None:
        obj["spec"]["taints"] = taints
    return obj


def pod_obj(name, node=NODE, volumes=(), namespace="default", **spec):
    body = {"nodeName": node,
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": list(volumes)}
    if node is None:
        del body["nodeName"]
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


def pvc_obj(name, volume_name=None, namespace="default"):
    obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}
    if volume_name:
        obj["spec"]["volumeName"] = volume_name
    return obj


def pv_obj(name, claim=None, csi=None):
    spec = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": name,
                    **(csi or {})}}
    if claim:
        spec["claimRef"] = {"namespace": "default", "name": claim}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name}, "spec": spec}


def secret_obj(name, namespace="default"):
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"k": "dg=="}}


def va_obj(name, node=NODE):
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": name},
            "spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": node,
                     "source": {"persistentVolumeName": "pv1"}}}


def forbidden(message_tail, resource, name=None, group=""):
    """The 403 Status body kube-apiserver sends."""
    gr = f"{resource}.{group}" if group else resource
    head = f'{gr} "{name}" is forbidden: ' if name else f"{gr} is forbidden: "
    details = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = resource
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": head + message_tail,
            "reason": "Forbidden", "details": details, "code": 403}


def authz(verb, resource, namespace="default", group="", reason=None):
    """The authorizer's part of a 403 message."""
    where = f'in the namespace "{namespace}"' if namespace \
        else "at the cluster scope"
    text = f'User "{USER}" cannot {verb} resource "{resource}" in API group ' \
           f'"{group}" {where}'
    return text + (f": {reason}" if reason is not None else "")


NO_RELATIONSHIP = f"no relationship found between node '{NODE}' and this object"
ONLY_GET = "can only get individual resources of this type"


@pytest.fixture
def node_client(fake_api):
    """A client authenticated as node n1 by bearer token."""
    fake_api.create(node_obj())
    return Client(fake_api, token=fake_api.node_token(NODE))


def refused(r, body):
    assert (r.status, r.json) == (403, body), r.json
    return True


# -- identities --------------------------------------------------------------

def test_token_and_certificate_map_to_the_node_identity(fake_api, tmp_path):
    fake_api.create(node_obj())
    token_client = Client(fake_api, token=fake_api.node_token(NODE))
    assert fake_api.node_token(NODE) == fake_api.node_token(NODE)
    assert token_client.get(f"{CORE}/nodes/{NODE}").status == 200
    entry = fake_api.requests()[-1]
    assert (entry["user"], entry["groups"]) == \
        (USER, ["system:nodes", "system:authenticated"])
    assert token_client.get(f"{CORE}/namespaces").status == 403

    cert, key = fake_api.node_client_cert(NODE)
    cert_client = Client(fake_api, token=None, cert=(cert, key))
    assert cert_client.get(f"{CORE}/nodes/{NODE}").status == 200
    entry = fake_api.requests()[-1]
    assert (entry["user"], entry["groups"]) == \
        (USER, ["system:nodes", "system:authenticated"])
    assert cert_client.get(f"{CORE}/namespaces").status == 403

    # One PEM with certificate and key, as kubelet-client-current.pem.
    pem = str(tmp_path / "kubelet-client-current.pem")
    assert fake_api.node_client_cert(NODE, pem, pem) == (pem, pem)
    text = open(pem).read()
    assert "BEGIN CERTIFICATE" in text and "PRIVATE KEY" in text
    pem_client = Client(fake_api, token=None, cert=(pem, pem))
    assert pem_client.get(f"{CORE}/nodes/{NODE}").status == 200
    assert fake_api.requests()[-1]["user"] == USER

    # The server's own token and certificate stay broad identities.
    assert Client(fake_api).get(f"{CORE}/namespaces").status == 200
    broad_cert = Client(fake_api, token=None, cert=(fake_api.client_cert_path,
                                                    fake_api.client_key_path))
    assert broad_cert.get(f"{CORE}/namespaces").status == 200
    assert fake_api.requests()[-1]["user"] == "fakeapi-client"


def test_registered_token_identity(fake_api):
    fake_api.add_identity_token("tok-n2", "system:node:n2", ["system:nodes"])
    fake_api.add_identity_token("tok-nogroup", "system:node:n2")
    fake_api.add_identity_token("tok-empty", "system:node:", ["system:nodes"])
    r = Client(fake_api, token="tok-n2").get(f"{NS}/secrets")
    assert r.status == 403 and 'User "system:node:n2"' in r.json["message"]
    # Without the group it is not a node: not restricted (no RBAC here).
    assert Client(fake_api, token="tok-nogroup").get(f"{NS}/secrets").status \
        == 200
    r = Client(fake_api, token="tok-empty").get(f"{CORE}/nodes")
    assert refused(r, forbidden(
        'User "system:node:" cannot list resource "nodes" in API group "" at '
        'the cluster scope: unknown node for user "system:node:"', "nodes"))


def test_node_kubeconfig_files(fake_api):
    token_path = fake_api.node_kubeconfig(NODE)
    text = open(token_path).read()
    assert f'token: "{fake_api.node_token(NODE)}"' in text
    assert f'server: "{fake_api.server_url}"' in text
    assert "current-context: fakeapi-node" in text
    cert_path = fake_api.node_kubeconfig(NODE, auth="cert")
    text = open(cert_path).read()
    assert "client-certificate: " in text and "client-key: " in text
    assert cert_path != token_path
    with pytest.raises(ValueError):
        fake_api.node_kubeconfig(NODE, auth="password")


# -- pods, nodes, events, csidrivers: the static rules ----------------------

def test_pods(fake_api, node_client):
    fake_api.create(pod_obj("mine"))
    fake_api.create(pod_obj("theirs", node="n2"))
    c = node_client
    assert c.get(f"{NS}/pods/theirs").status == 200
    assert c.get(f"{CORE}/pods", fieldSelector=f"spec.nodeName={NODE}").status \
        == 200
    w = c.watch(f"{NS}/pods", fieldSelector=f"spec.nodeName={NODE}")
    try:
        assert w.status == 200
        assert w.next()["object"]["metadata"]["name"] == "mine"
    finally:
        w.close()
    r = c.request("PATCH", f"{NS}/pods/mine/status",
                  {"status": {"phase": "Running"}}, content_type=MERGE)
    assert (r.status, r.json["status"]["phase"]) == (200, "Running")
    r = c.request("PATCH", f"{NS}/pods/theirs/status",
                  {"status": {"phase": "Running"}}, content_type=MERGE)
    assert refused(r, forbidden(
        f'node "{NODE}" can only update pod status for pods with '
        f'spec.nodeName set to itself', "pods", "theirs"))
    r = c.request("PATCH", f"{NS}/pods/mine/status",
                  {"metadata": {"labels": {"a": "b"}}}, content_type=MERGE)
    assert refused(r, forbidden(
        f'node "{NODE}" cannot update labels through pod status', "pods",
        "mine"))
    r = c.request("PATCH", f"{NS}/pods/mine", {"metadata": {"labels": {"a": "b"}}},
                  content_type=MERGE)
    assert refused(r, forbidden(authz("patch", "pods"), "pods", "mine"))
    r = c.request("DELETE", f"{NS}/pods/theirs")
    assert refused(r, forbidden(
        f'node "{NODE}" can only delete pods with spec.nodeName set to itself',
        "pods", "theirs"))
    assert c.request("DELETE", f"{NS}/pods/mine").status == 200
    r = c.request("POST", f"{NS}/pods", pod_obj("new"))
    assert refused(r, forbidden(
        f'pod does not have "kubernetes.io/config.mirror" annotation, node '
        f'"{NODE}" can only create mirror pods', "pods", "new"))


def test_nodes(fake_api, node_client):
    fake_api.create(node_obj("n2"))
    c = node_client
    assert c.get(f"{CORE}/nodes/n2").status == 200
    assert c.get(f"{CORE}/nodes").status == 200
    r = c.request("PATCH", f"{CORE}/nodes/{NODE}",
                  {"metadata": {"annotations": {"a": "b"}}}, content_type=MERGE)
    assert r.status == 200
    r = c.request("PATCH", f"{CORE}/nodes/{NODE}/status",
                  {"status": {"volumesInUse": ["x"]}}, content_type=MERGE)
    assert r.status == 200
    r = c.request("PATCH", f"{CORE}/nodes/n2",
                  {"metadata": {"annotations": {"a": "b"}}}, content_type=MERGE)
    assert refused(r, forbidden(
        f'node "{NODE}" is not allowed to modify node "n2"', "nodes", "n2"))
    r = c.request("PATCH", f"{CORE}/nodes/n2/status",
                  {"status": {"volumesInUse": ["x"]}}, content_type=MERGE)
    assert refused(r, forbidden(
        f'node "{NODE}" is not allowed to modify node "n2"', "nodes", "n2"))
    r = c.request("DELETE", f"{CORE}/nodes/{NODE}")
    assert refused(r, forbidden(authz("delete", "nodes", None), "nodes", NODE))
    r = c.get(f"{CORE}/nodes/{NODE}/status")
    assert refused(r, forbidden(authz("get", "nodes/status", None), "nodes",
                                NODE))
    fake_api.remove("nodes", None, NODE)
    r = c.request("POST", f"{CORE}/nodes", node_obj("n3"))
    assert refused(r, forbidden(
        f'node "{NODE}" is not allowed to modify node "n3"', "nodes", "n3"))
    r = c.request("POST", f"{CORE}/nodes",
                  node_obj(labels={"node-role.kubernetes.io/master": ""}))
    assert refused(r, forbidden(
        f'node "{NODE}" is not allowed to set the following labels: '
        f'node-role.kubernetes.io/master', "nodes", NODE))
    r = c.request("POST", f"{CORE}/nodes",
                  node_obj(labels={"kubernetes.io/hostname": NODE}))
    assert r.status == 201


def test_events_and_csidrivers(fake_api, node_client):
    c = node_client
    event = {"apiVersion": "v1", "kind": "Event",
             "metadata": {"name": "e1", "namespace": "default"},
             "involvedObject": {"kind": "Pod", "name": "p", "namespace":
                                "default"},
             "reason": "FailedMount", "message": "m", "type": "Warning"}
    assert c.request("POST", f"{NS}/events", event).status == 201
    assert c.request("PATCH", f"{NS}/events/e1", {"count": 2},
                     content_type=MERGE).status == 200
    assert refused(c.get(f"{NS}/events"),
                   forbidden(authz("list", "events"), "events"))
    assert refused(c.request("DELETE", f"{NS}/events/e1"),
                   forbidden(authz("delete", "events"), "events", "e1"))

    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                     "metadata": {"name": "d1"}, "spec": {}})
    assert c.get(f"{STORAGE}/csidrivers").status == 200
    assert c.get(f"{STORAGE}/csidrivers/d1").status == 200
    w = c.watch(f"{STORAGE}/csidrivers")
    try:
        assert w.status == 200
        assert w.next()["object"]["metadata"]["name"] == "d1"
    finally:
        w.close()
    r = c.request("POST", f"{STORAGE}/csidrivers",
                  {"metadata": {"name": "d2"}, "spec": {}})
    assert refused(r, forbidden(
        authz("create", "csidrivers", None, "storage.k8s.io"), "csidrivers",
        group="storage.k8s.io"))


def test_csinodes(fake_api, node_client):
    c = node_client
    g = "storage.k8s.io"
    csinode = {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
               "metadata": {"name": NODE}, "spec": {"drivers": []}}
    assert c.get(f"{STORAGE}/csinodes/{NODE}").status == 404
    assert c.request("POST", f"{STORAGE}/csinodes", csinode).status == 201
    assert c.get(f"{STORAGE}/csinodes/{NODE}").status == 200
    r = c.request("PATCH", f"{STORAGE}/csinodes/{NODE}",
                  {"spec": {"drivers": [{"name": "d", "nodeID": "x"}]}},
                  content_type=STRATEGIC)
    assert r.status == 200
    other = dict(csinode, metadata={"name": "n2"})
    r = c.request("POST", f"{STORAGE}/csinodes", other)
    assert refused(r, forbidden(
        "can only access CSINode with the same name as the requesting node",
        "csinodes", "n2", g))
    fake_api.create(other)
    r = c.get(f"{STORAGE}/csinodes/n2")
    assert refused(r, forbidden(authz(
        "get", "csinodes", None, g, "can only access CSINode with the same "
        "name as the requesting node"), "csinodes", "n2", g))
    r = c.get(f"{STORAGE}/csinodes")
    assert refused(r, forbidden(authz(
        "list", "csinodes", None, g, "can only get, create, update, patch, "
        "or delete a CSINode"), "csinodes", group=g))
    r = c.get(f"{STORAGE}/csinodes", fieldSelector=f"metadata.name={NODE}",
              watch="1")
    assert r.status == 403
    assert c.request("DELETE", f"{STORAGE}/csinodes/{NODE}").status == 200


# -- the graph: secrets, configmaps, PVCs, PVs, VolumeAttachments ------------

def test_secrets_and_configmaps_referenced_by_the_nodes_pods(fake_api,
                                                             node_client):
    volumes = [
        {"name": "s", "secret": {"secretName": "vol-secret"}},
        {"name": "p", "projected": {"sources": [
            {"secret": {"name": "projected-secret"}},
            {"configMap": {"name": "projected-cm"}}]}},
        {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef":
                                {"name": "inline-csi-secret"}}},
        {"name": "cm", "configMap": {"name": "vol-cm"}},
    ]
    container = {"name": "c", "image": "busybox",
                 "envFrom": [{"secretRef": {"name": "envfrom-secret"}},
                             {"configMapRef": {"name": "envfrom-cm"}}],
                 "env": [{"name": "A", "valueFrom": {"secretKeyRef": {
                     "name": "env-secret", "key": "k"}}}]}
    fake_api.create(pod_obj("p", volumes=volumes, containers=[container],
                            imagePullSecrets=[{"name": "pull-secret"}]))
    fake_api.create(pod_obj("other", node="n2", volumes=[
        {"name": "s", "secret": {"secretName": "other-secret"}}]))
    names = ["vol-secret", "projected-secret", "inline-csi-secret",
             "envfrom-secret", "env-secret", "pull-secret", "other-secret"]
    for name in names:
        fake_api.create(secret_obj(name))
        fake_api.create(secret_obj(name, namespace="elsewhere"))
    for name in ("vol-cm", "projected-cm", "envfrom-cm", "unused-cm"):
        fake_api.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": name, "namespace": "default"},
                         "data": {"a": "b"}})
    c = node_client
    for name in names[:-1]:
        assert c.get(f"{NS}/secrets/{name}").status == 200, name
        r = c.get(f"{CORE}/namespaces/elsewhere/secrets/{name}")
        assert refused(r, forbidden(authz("get", "secrets", "elsewhere",
                                          reason=NO_RELATIONSHIP),
                                    "secrets", name))
    for name in ("vol-cm", "projected-cm", "envfrom-cm"):
        assert c.get(f"{NS}/configmaps/{name}").status == 200, name
    assert refused(c.get(f"{NS}/configmaps/unused-cm"), forbidden(
        authz("get", "configmaps", reason=NO_RELATIONSHIP), "configmaps",
        "unused-cm"))
    assert refused(c.get(f"{NS}/secrets/other-secret"), forbidden(
        authz("get", "secrets", reason=NO_RELATIONSHIP), "secrets",
        "other-secret"))

    # list and watch: only of one named object, in a namespace.
    r = c.get(f"{NS}/secrets", fieldSelector="metadata.name=vol-secret")
    assert r.status == 200
    assert [i["metadata"]["name"] for i in r.json["items"]] == ["vol-secret"]
    w = c.watch(f"{NS}/secrets", fieldSelector="metadata.name=vol-secret")
    try:
        assert w.status == 200
        assert w.next()["object"]["metadata"]["name"] == "vol-secret"
    finally:
        w.close()
    assert refused(c.get(f"{NS}/secrets"), forbidden(
        authz("list", "secrets", reason="No Object name found"), "secrets"))
    r = c.get(f"{CORE}/secrets", fieldSelector="metadata.name=vol-secret")
    assert refused(r, forbidden(authz(
        "list", "secrets", None, reason="can only read namespaced object of "
        "this type"), "secrets", "vol-secret"))
    r = c.get(f"{NS}/secrets", fieldSelector="metadata.name=other-secret")
    assert refused(r, forbidden(authz("list", "secrets",
                                      reason=NO_RELATIONSHIP),
                                "secrets", "other-secret"))
    r = c.request("PATCH", f"{NS}/secrets/vol-secret", {"data": {}},
                  content_type=MERGE)
    assert refused(r, forbidden(authz(
        "patch", "secrets", reason="can only read resources of this type"),
        "secrets", "vol-secret"))


def test_pvcs_pvs_and_their_secrets(fake_api, node_client):
    csi_refs = {"nodeStageSecretRef": {"name": "stage", "namespace": "default"},
                "nodePublishSecretRef": {"name": "publish",
                                         "namespace": "default"},
                "nodeExpandSecretRef": {"name": "expand",
                                        "namespace": "default"},
                "controllerPublishSecretRef": {"name": "controller",
                                               "namespace": "default"}}
    fake_api.create(pod_obj("p", volumes=[
        {"name": "data", "persistentVolumeClaim": {"claimName": "claim"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
            "spec": {"accessModes": ["ReadWriteOnce"]}}}}]))
    fake_api.create(pod_obj("q", node="n2", volumes=[
        {"name": "data", "persistentVolumeClaim": {"claimName": "theirs"}}]))
    fake_api.create(pvc_obj("claim", "pv1"))
    fake_api.create(pvc_obj("p-scratch", "pv2"))
    fake_api.create(pvc_obj("theirs", "pv3"))
    fake_api.create(pv_obj("pv1", "claim", csi_refs))
    fake_api.create(pv_obj("pv2", "p-scratch"))
    fake_api.create(pv_obj("pv3", "theirs", {"nodeStageSecretRef": {
        "name": "their-stage", "namespace": "default"}}))
    for name in ("stage", "publish", "expand", "controller", "their-stage"):
        fake_api.create(secret_obj(name))
    c = node_client
    assert c.get(f"{NS}/persistentvolumeclaims/claim").status == 200
    assert c.get(f"{NS}/persistentvolumeclaims/p-scratch").status == 200
    assert c.get(f"{CORE}/persistentvolumes/pv1").status == 200
    assert c.get(f"{CORE}/persistentvolumes/pv2").status == 200
    for name in ("stage", "publish", "expand"):
        assert c.get(f"{NS}/secrets/{name}").status == 200, name
    for name in ("controller", "their-stage"):
        assert refused(c.get(f"{NS}/secrets/{name}"), forbidden(
            authz("get", "secrets", reason=NO_RELATIONSHIP), "secrets", name))
    assert refused(c.get(f"{NS}/persistentvolumeclaims/theirs"), forbidden(
        authz("get", "persistentvolumeclaims", reason=NO_RELATIONSHIP),
        "persistentvolumeclaims", "theirs"))
    assert refused(c.get(f"{CORE}/persistentvolumes/pv3"), forbidden(
        authz("get", "persistentvolumes", None, reason=NO_RELATIONSHIP),
        "persistentvolumes", "pv3"))
    # Never a list or a watch, not even of one object.
    assert refused(c.get(f"{NS}/persistentvolumeclaims"), forbidden(
        authz("list", "persistentvolumeclaims", reason=ONLY_GET),
        "persistentvolumeclaims"))
    r = c.get(f"{NS}/persistentvolumeclaims", fieldSelector="metadata.name=claim")
    assert refused(r, forbidden(
        authz("list", "persistentvolumeclaims", reason=ONLY_GET),
        "persistentvolumeclaims", "claim"))
    r = c.get(f"{NS}/persistentvolumeclaims", watch="1",
              fieldSelector="metadata.name=claim")
    assert refused(r, forbidden(
        authz("watch", "persistentvolumeclaims", reason=ONLY_GET),
        "persistentvolumeclaims", "claim"))
    assert refused(c.get(f"{CORE}/persistentvolumes"), forbidden(
        authz("list", "persistentvolumes", None, reason=ONLY_GET),
        "persistentvolumes"))
    assert refused(c.get(f"{CORE}/persistentvolumes/pv1/status"), forbidden(
        authz("get", "persistentvolumes/status", None,
              reason="cannot get subresource"), "persistentvolumes", "pv1"))

    # persistentvolumeclaims/status: update and patch, status only.
    r = c.request("PATCH", f"{NS}/persistentvolumeclaims/claim/status",
                  {"status": {"capacity": {"storage": "2Gi"}, "conditions": [
                      {"type": "FileSystemResizePending", "status": "True"}]}},
                  content_type=MERGE)
    assert (r.status, r.json["status"]["capacity"]) == (200, {"storage": "2Gi"})
    r = c.request("PATCH", f"{NS}/persistentvolumeclaims/claim/status",
                  {"status": {"phase": "Lost"}}, content_type=MERGE)
    assert r.status == 403
    assert r.json["message"].startswith(
        f'persistentvolumeclaims "claim" is forbidden: node "{NODE}" is not '
        f'allowed to update fields other than status.capacity and '
        f'status.conditions: ')
    r = c.request("PATCH", f"{NS}/persistentvolumeclaims/theirs/status",
                  {"status": {"capacity": {"storage": "2Gi"}}},
                  content_type=MERGE)
    assert refused(r, forbidden(
        authz("patch", "persistentvolumeclaims/status", reason=NO_RELATIONSHIP),
        "persistentvolumeclaims", "theirs"))
    # The Node authorizer lets a node write, not read, PVC status (1.25
    # authorizeStatusUpdate).
    r = c.get(f"{NS}/persistentvolumeclaims/claim/status")
    assert refused(r, forbidden(
        authz("get", "persistentvolumeclaims/status",
              reason="can only get/update/patch this type"),
        "persistentvolumeclaims", "claim"))


def test_volumeattachments(fake_api, node_client):
    fake_api.create(va_obj("va-mine"))
    fake_api.create(va_obj("va-theirs", node="n2"))
    c = node_client
    g = "storage.k8s.io"
    assert c.get(f"{STORAGE}/volumeattachments/va-mine").status == 200
    assert refused(c.get(f"{STORAGE}/volumeattachments/va-theirs"), forbidden(
        authz("get", "volumeattachments", None, g, NO_RELATIONSHIP),
        "volumeattachments", "va-theirs", g))
    assert refused(c.get(f"{STORAGE}/volumeattachments"), forbidden(
        authz("list", "volumeattachments", None, g, ONLY_GET),
        "volumeattachments", group=g))
    r = c.get(f"{STORAGE}/volumeattachments/va-mine/status")
    assert refused(r, forbidden(
        authz("get", "volumeattachments/status", None, g,
              "cannot get subresource"), "volumeattachments", "va-mine", g))


def test_service_account_token_requests(fake_api, node_client):
    for sa in ("sa1", "unused"):
        fake_api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": sa, "namespace": "default"}})
    mine = fake_api.create(pod_obj("mine", serviceAccountName="sa1"))
    theirs = fake_api.create(pod_obj("theirs", node="n2",
                                     serviceAccountName="sa1"))
    c = node_client
    path = f"{NS}/serviceaccounts/sa1/token"

    def request(pod=None, **ref):
        spec = {"audiences": ["api"], "expirationSeconds": 600}
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod",
                                      "name": pod["metadata"]["name"],
                                      "uid": pod["metadata"]["uid"], **ref}
        return {"apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest", "spec": spec}

    r = c.request("POST", path, request(mine))
    assert r.status == 201
    assert r.json["kind"] == "TokenRequest" and r.json["status"]["token"]
    assert r.json["status"]["expirationTimestamp"]

    def refused_token(body, why, name="sa1"):
        r = c.request("POST", f"{NS}/serviceaccounts/{name}/token", body)
        return refused(r, forbidden(why, "serviceaccounts", name))
    assert refused_token(request(), "node requested token not bound to a pod")
    assert refused_token(request(mine, kind="Secret"),
                         "node requested token not bound to a pod")
    assert refused_token(request(mine, uid=""), "node requested token with a "
                         "pod binding without a uid")
    assert refused_token(request(mine, uid="1234"), "the UID in the bound "
                         "object reference (1234) does not match the UID in "
                         "record. The object might have been deleted and then "
                         "recreated")
    assert refused_token(request(theirs), "node requested token bound to a "
                         "pod scheduled on a different node")
    r = c.request("POST", f"{NS}/serviceaccounts/unused/token", request(mine))
    assert refused(r, forbidden(authz("create", "serviceaccounts/token",
                                      reason=NO_RELATIONSHIP),
                                "serviceaccounts", "unused"))
    assert refused(c.get(f"{NS}/serviceaccounts/sa1"), forbidden(authz(
        "get", "serviceaccounts", reason="can only create tokens for "
        "individual service accounts"), "serviceaccounts", "sa1"))
    # The broad identity needs no binding.
    assert Client(fake_api).request("POST", path, request()).status == 201


# -- NodeRestriction on the node's own Node -----------------------------------

ALLOWED_LABELS = ["kubernetes.io/hostname", "kubernetes.io/arch",
                  "kubernetes.io/os", "beta.kubernetes.io/arch",
                  "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type",
                  "node.kubernetes.io/instance-type",
                  "failure-domain.beta.kubernetes.io/zone",
                  "failure-domain.beta.kubernetes.io/region",
                  "topology.kubernetes.io/zone",
                  "topology.kubernetes.io/region",
                  "kubelet.kubernetes.io/x", "foo.kubelet.kubernetes.io/x",
                  "node.kubernetes.io/x", "foo.node.kubernetes.io/x",
                  "topology.hostpath.csi/node", "example.com/anything", "plain"]
FORBIDDEN_LABELS = ["node-role.kubernetes.io/master", "kubernetes.io/other",
                    "beta.kubernetes.io/other", "example.k8s.io/x", "k8s.io/x",
                    "node-restriction.kubernetes.io/x",
                    "foo.node-restriction.kubernetes.io/x"]


def _label_change(kind, key, value):
    """(content type, body) adding or (value None) removing label key."""
    if kind == "json":
        path = "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")
        op = {"op": "remove", "path": path} if value is None else \
            {"op": "add", "path": path, "value": value}
        return JSONPATCH, [op]
    return (MERGE if kind == "merge" else STRATEGIC), \
        {"metadata": {"labels": {key: value}}}


def _write_node(c, api, kind, subresource, key, value):
    path = f"{CORE}/nodes/{NODE}" + ("/status" if subresource else "")
    if kind == "put":
        obj = api.get("nodes", None, NODE)
        labels = obj["metadata"].setdefault("labels", {})
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
        return c.request("PUT", path, obj)
    content_type, body = _label_change(kind, key, value)
    return c.request("PATCH", path, body, content_type=content_type)


@pytest.mark.parametrize("kind", ["merge", "strategic", "json", "put"])
def test_node_labels(fake_api, node_client, kind):
    c = node_client
    # A node always has labels (kubelet's own): a JSON patch "add" into a
    # labels map the server omits as empty would fail on a real one too.
    node = fake_api.get("nodes", None, NODE)
    node["metadata"]["labels"] = {"example.com/base": "y"}
    fake_api.update(node)
    for key in ALLOWED_LABELS:
        r = _write_node(c, fake_api, kind, False, key, "v")
        assert r.status == 200, (key, r.json)
        assert r.json["metadata"]["labels"][key] == "v"
        r = _write_node(c, fake_api, kind, False, key, None)
        assert r.status == 200, (key, r.json)
        assert key not in r.json["metadata"].get("labels", {})
    for key in FORBIDDEN_LABELS:
        r = _write_node(c, fake_api, kind, False, key, "v")
        assert refused(r, forbidden(f"is not allowed to modify labels: {key}",
                                    "nodes", NODE))
        r = _write_node(c, fake_api, kind, True, key, "v")
        assert refused(r, forbidden(f"is not allowed to modify labels: {key}",
                                    "nodes", NODE))
    # Labels someone else set may not be changed or removed by the node.
    fake_api.update(node_obj(labels={"node-role.kubernetes.io/worker": "",
                                     "example.k8s.io/x": "1"}))
    r = _write_node(c, fake_api, kind, False, "node-role.kubernetes.io/worker",
                    None)
    assert refused(r, forbidden("is not allowed to modify labels: "
                                "node-role.kubernetes.io/worker", "nodes",
                                NODE))
    r = _write_node(c, fake_api, kind, False, "example.k8s.io/x", "2")
    assert refused(r, forbidden("is not allowed to modify labels: "
                                "example.k8s.io/x", "nodes", NODE))
    assert fake_api.get("nodes", None, NODE)["metadata"]["labels"] == \
        {"node-role.kubernetes.io/worker": "", "example.k8s.io/x": "1"}


def test_node_labels_all_forbidden_keys_listed(fake_api, node_client):
    r = node_client.request("PATCH", f"{CORE}/nodes/{NODE}", {"metadata": {
        "labels": {"k8s.io/b": "1", "a.kubernetes.io/a": "1", "ok": "1"}}},
        content_type=MERGE)
    assert refused(r, forbidden("is not allowed to modify labels: "
                                "a.kubernetes.io/a, k8s.io/b", "nodes", NODE))


TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@pytest.mark.parametrize("kind", ["merge", "strategic", "json", "put"])
def test_node_taints(fake_api, node_client, kind):
    c = node_client
    fake_api.update(node_obj(taints=[TAINT]))
    for taints in ([], [TAINT, {"key": "x", "effect": "NoExecute"}]):
        if kind == "put":
            obj = fake_api.get("nodes", None, NODE)
            obj["spec"]["taints"] = taints
            r = c.request("PUT", f"{CORE}/nodes/{NODE}", obj)
        elif kind == "json":
            r = c.request("PATCH", f"{CORE}/nodes/{NODE}", [
                {"op": "replace", "path": "/spec/taints", "value": taints}],
                content_type=JSONPATCH)
        else:
            r = c.request("PATCH", f"{CORE}/nodes/{NODE}",
                          {"spec": {"taints": taints}},
                          content_type=MERGE if kind == "merge" else STRATEGIC)
        assert refused(r, forbidden(f'node "{NODE}" is not allowed to modify '
                                    f'taints', "nodes", NODE))
    assert fake_api.get("nodes", None, NODE)["spec"]["taints"] == [TAINT]
    # A write that leaves the taints alone passes.
    r = c.request("PATCH", f"{CORE}/nodes/{NODE}",
                  {"metadata": {"annotations": {"a": "b"}}}, content_type=MERGE)
    assert r.status == 200


# -- the exact 403 body ------------------------------------------------------

def test_forbidden_body_and_headers(fake_api, node_client):
    r = node_client.get(f"{NS}/persistentvolumeclaims",
                        fieldSelector="metadata.name=x")
    assert r.status == 403
    assert r.headers["Content-Type"] == "application/json"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.json == {
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure",
        "message": 'persistentvolumeclaims "x" is forbidden: User '
                   '"system:node:n1" cannot list resource '
                   '"persistentvolumeclaims" in API group "" in the namespace '
                   '"default": can only get individual resources of this type',
        "reason": "Forbidden",
        "details": {"name": "x", "kind": "persistentvolumeclaims"},
        "code": 403}
    r = node_client.get(f"{STORAGE}/volumeattachments/va")
    assert r.json == {
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure",
        "message": 'volumeattachments.storage.k8s.io "va" is forbidden: User '
                   '"system:node:n1" cannot get resource "volumeattachments" '
                   'in API group "storage.k8s.io" at the cluster scope: no '
                   "relationship found between node 'n1' and this object",
        "reason": "Forbidden",
        "details": {"name": "va", "group": "storage.k8s.io",
                    "kind": "volumeattachments"},
        "code": 403}
    assert fake_api.requests()[-1]["status"] == 403


# -- graph lag -----------------------------------------------------------------

def wait_for(predicate, timeout=15.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def test_graph_lag_refuses_then_allows(fake_api, node_client):
    c = node_client
    lag = 2.0
    # Created long enough before it is bound, see below.
    fake_api.create(secret_obj("late"))
    fake_api.create(pod_obj("unbound", node=None, volumes=[
        {"name": "s", "secret": {"secretName": "late"}}]))
    fake_api.set_graph_lag(lag)
    start = time.monotonic()
    fake_api.create(secret_obj("s"))
    fake_api.create(pvc_obj("claim", "pv1"))
    fake_api.create(pod_obj("p", volumes=[
        {"name": "s", "secret": {"secretName": "s"}},
        {"name": "d", "persistentVolumeClaim": {"claimName": "claim"}}]))
    fake_api.create(va_obj("va"))
    for path, resource, ns in (
            (f"{NS}/secrets/s", "secrets", "default"),
            (f"{NS}/persistentvolumeclaims/claim", "persistentvolumeclaims",
             "default"),
            (f"{STORAGE}/volumeattachments/va", "volumeattachments", None)):
        name = path.rsplit("/", 1)[1]
        group = "storage.k8s.io" if ns is None else ""
        assert refused(c.get(path), forbidden(
            authz("get", resource, ns, group, NO_RELATIONSHIP), resource, name,
            group))
    assert fake_api.node_graph(NODE)["secrets"] == []
    assert wait_for(lambda: c.get(f"{NS}/secrets/s").status == 200)
    assert time.monotonic() - start >= lag - 0.1
    assert c.get(f"{NS}/persistentvolumeclaims/claim").status == 200
    assert c.get(f"{STORAGE}/volumeattachments/va").status == 200

    # A PV bound to the claim now lags on its own; the pod's edges stay.
    fake_api.create(pv_obj("pv1", "claim"))
    assert c.get(f"{CORE}/persistentvolumes/pv1").status == 403
    assert c.get(f"{NS}/secrets/s").status == 200
    assert wait_for(lambda: c.get(f"{CORE}/persistentvolumes/pv1").status
                    == 200)

    # A pod bound later lags from its binding, not its creation (which is
    # more than the lag ago by now).
    assert time.monotonic() - start >= lag
    pod = fake_api.get("pods", "default", "unbound")
    pod["spec"]["nodeName"] = NODE
    fake_api.update(pod)
    assert c.get(f"{NS}/secrets/late").status == 403
    assert wait_for(lambda: c.get(f"{NS}/secrets/late").status == 200)

    fake_api.create(secret_obj("cleared"))
    fake_api.create(pod_obj("p2", volumes=[
        {"name": "s", "secret": {"secretName": "cleared"}}]))
    assert c.get(f"{NS}/secrets/cleared").status == 403
    fake_api.clear_faults()
    assert c.get(f"{NS}/secrets/cleared").status == 200


def control(api, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api.control_url + path, data=data,
                                 method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_control_port(fake_api):
    fake_api.create(node_obj())
    path = control(fake_api, "POST", f"/nodes/{NODE}/kubeconfig", {})["kubeconfig"]
    assert path == fake_api.node_kubeconfig(NODE)
    token = control(fake_api, "POST", f"/nodes/{NODE}/token")["token"]
    assert token == fake_api.node_token(NODE)
    files = control(fake_api, "POST", f"/nodes/{NODE}/certificate", {})
    assert os.path.exists(files["clientCert"])
    c = Client(fake_api, token=None, cert=(files["clientCert"],
                                           files["clientKey"]))
    assert c.get(f"{CORE}/nodes/{NODE}").status == 200
    cert_kubeconfig = control(fake_api, "POST", f"/nodes/{NODE}/kubeconfig",
                              {"auth": "cert", **files})["kubeconfig"]
    assert files["clientCert"] in open(cert_kubeconfig).read()
    control(fake_api, "POST", "/tokens/identities",
            {"token": "t2", "user": "system:node:n2",
             "groups": ["system:nodes"]})
    assert control(fake_api, "GET", "/tokens/identities")["tokens"]["t2"] == \
        {"user": "system:node:n2",
         "groups": ["system:nodes", "system:authenticated"]}
    assert control(fake_api, "GET", "/tokens") == {"tokens": [fake_api.token]}

    control(fake_api, "POST", "/faults/graphlag", {"seconds": 60})
    fake_api.create(pod_obj("p", volumes=[
        {"name": "s", "secret": {"secretName": "s"}}]))
    assert control(fake_api, "GET", f"/nodes/{NODE}/graph")["pods"] == []
    control(fake_api, "POST", "/faults/graphlag", {"seconds": 0})
    graph = control(fake_api, "GET", f"/nodes/{NODE}/graph")
    assert (graph["pods"], graph["secrets"]) == (["default/p"], ["default/s"])


# -- the broad identity ------------------------------------------------------

def test_broad_identity_still_does_everything(fake_api):
    fake_api.create(node_obj())
    fake_api.create(node_obj("n2", taints=[TAINT]))
    fake_api.create(secret_obj("s"))
    fake_api.create(pvc_obj("claim"))
    fake_api.create(va_obj("va", node="n2"))
    fake_api.set_graph_lag(60)
    for c in (Client(fake_api),
              Client(fake_api, token=None, cert=(fake_api.client_cert_path,
                                                 fake_api.client_key_path))):
        assert c.get(f"{NS}/secrets").status == 200
        assert c.get(f"{CORE}/secrets").status == 200
        assert c.get(f"{NS}/secrets/s").status == 200
        assert c.get(f"{NS}/persistentvolumeclaims").status == 200
        assert c.get(f"{CORE}/persistentvolumes").status == 200
        assert c.get(f"{STORAGE}/volumeattachments").status == 200
        assert c.get(f"{STORAGE}/volumeattachments/va").status == 200
        assert c.get(f"{STORAGE}/csinodes").status == 200
        assert c.get(f"{CORE}/namespaces").status == 200
        assert c.request("PATCH", f"{CORE}/nodes/n2", {"metadata": {"labels": {
            "node-role.kubernetes.io/master": ""}}, "spec": {"taints": []}},
            content_type=MERGE).status == 200
        assert c.request("POST", f"{NS}/pods", pod_obj("x", node="n2")).status \
            == 201
        assert c.request("DELETE", f"{NS}/pods/x",
                         query={"gracePeriodSeconds": "0"}).status == 200
    assert Client(fake_api).request("DELETE", f"{CORE}/nodes/n2").status == 200


# -- a real client -----------------------------------------------------------

@pytest.mark.skipif(not os.path.exists(KUBECTL),
                    reason="kubectl is not installed")
@pytest.mark.parametrize("auth", ["token", "cert"])
def test_kubectl_under_a_node_identity(fake_api, tmp_path, auth):
    fake_api.create(node_obj())
    kubeconfig = fake_api.node_kubeconfig(NODE, auth=auth)

    def kubectl(*args):
        env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(tmp_path))
        return subprocess.run([KUBECTL, "--cache-dir", str(tmp_path / "kc"),
                               "--request-timeout", "10s", *args],
                              capture_output=True, text=True, env=env,
                              timeout=60)
    p = kubectl("get", "node", NODE, "-o", "name")
    assert (p.returncode, p.stdout) == (0, f"node/{NODE}\n"), p.stderr
    p = kubectl("get", "pvc")
    assert p.returncode == 1
    assert p.stderr.strip().endswith(
        'Error from server (Forbidden): persistentvolumeclaims is forbidden: '
        'User "system:node:n1" cannot list resource "persistentvolumeclaims" '
        'in API group "" in the namespace "default": can only get individual '
        'resources of this type'), p.stderr
    p = kubectl("get", "secret", "s")
    assert p.returncode == 1
    assert p.stderr.strip().endswith(
        'Error from server (Forbidden): secrets "s" is forbidden: User '
        '"system:node:n1" cannot get resource "secrets" in API group "" in '
        "the namespace \"default\": no relationship found between node 'n1' "
        "and this object"), p.stderr
    p = kubectl("label", "node", NODE, "node-role.kubernetes.io/master=")
    assert p.returncode == 1
    assert p.stderr.strip().endswith(
        'Error from server (Forbidden): nodes "n1" is forbidden: is not '
        'allowed to modify labels: node-role.kubernetes.io/master'), p.stderr
