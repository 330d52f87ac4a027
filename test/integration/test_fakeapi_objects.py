"""Fake API server: verbs, errors as kube-apiserver words them, patches,
finalizers and graceful deletion."""
from doubles.fakeapi.testclient import Client

PODS = "/api/v1/namespaces/default/pods"
NODES = "/api/v1/nodes"
MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"


def node(name="n1", **status):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {}, "status": status}


def pod(name, node_name="n1"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "c", "image": "busybox"}]}}


def test_create_sets_server_fields_and_201(fake_api):
    r = Client(fake_api).request("POST", PODS, pod("a"))
    assert r.status == 201
    m = r.json["metadata"]
    assert (m["name"], m["namespace"], m["generation"]) == ("a", "default", 1)
    assert len(m["uid"]) == 36 and m["creationTimestamp"].endswith("Z")
    assert m["resourceVersion"] == str(fake_api.resource_version)
    assert r.headers["Content-Type"] == "application/json"


def test_create_with_generate_name(fake_api):
    body = pod("")
    body["metadata"] = {"generateName": "web-"}
    r = Client(fake_api).request("POST", PODS, body)
    assert r.status == 201
    name = r.json["metadata"]["name"]
    assert name.startswith("web-") and len(name) == len("web-") + 5


def test_not_found_status(fake_api):
    r = Client(fake_api).get(PODS + "/x")
    assert r.status == 404
    assert r.json == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Failure", "message": 'pods "x" not found',
                      "reason": "NotFound",
                      "details": {"name": "x", "kind": "pods"}, "code": 404}
    r = Client(fake_api).get("/apis/storage.k8s.io/v1/csidrivers/d")
    assert r.json["message"] == 'csidrivers.storage.k8s.io "d" not found'
    assert r.json["details"] == {"name": "d", "group": "storage.k8s.io",
                                 "kind": "csidrivers"}


def test_already_exists(fake_api):
    c = Client(fake_api)
    assert c.request("POST", PODS, pod("a")).status == 201
    r = c.request("POST", PODS, pod("a"))
    assert (r.status, r.json["reason"], r.json["message"]) == \
        (409, "AlreadyExists", 'pods "a" already exists')


def test_conflict_on_stale_resource_version(fake_api):
    c = Client(fake_api)
    stale = c.request("POST", NODES, node()).json
    fresh = dict(stale, metadata=dict(stale["metadata"], labels={"a": "b"}))
    assert c.request("PUT", NODES + "/n1", fresh).status == 200
    stale["metadata"]["labels"] = {"a": "c"}
    r = c.request("PUT", NODES + "/n1", stale)
    assert (r.status, r.json["reason"]) == (409, "Conflict")
    assert r.json["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been '
        'modified; please apply your changes to the latest version and try again')
    # A merge patch carrying the stale version is refused the same way.
    r = c.request("PATCH", NODES + "/n1", {"metadata": {
        "resourceVersion": stale["metadata"]["resourceVersion"],
        "labels": {"a": "d"}}}, content_type=MERGE)
    assert r.status == 409


def test_noop_update_keeps_resource_version(fake_api):
    c = Client(fake_api)
    created = c.request("POST", NODES, node()).json
    r = c.request("PUT", NODES + "/n1", created)
    assert r.json["metadata"]["resourceVersion"] == \
        created["metadata"]["resourceVersion"]
    assert fake_api.resource_version == int(created["metadata"]["resourceVersion"])


def test_invalid_and_bad_requests(fake_api):
    c = Client(fake_api)
    body = pod("a")
    del body["metadata"]["name"]
    r = c.request("POST", PODS, body)
    assert (r.status, r.json["reason"]) == (422, "Invalid")
    assert r.json["message"] == \
        'Pod "" is invalid: metadata.name: Required value: name or ' \
        'generateName is required'
    assert r.json["details"]["causes"] == [{
        "reason": "FieldValueRequired",
        "message": "Required value: name or generateName is required",
        "field": "metadata.name"}]
    r = c.request("POST", PODS, pod("Upper"))
    assert (r.status, r.json["details"]["causes"][0]["reason"]) == \
        (422, "FieldValueInvalid")
    wrong_ns = pod("a")
    wrong_ns["metadata"]["namespace"] = "other"
    r = c.request("POST", PODS, wrong_ns)
    assert (r.status, r.json["message"]) == (
        400, "the namespace of the provided object does not match the "
             "namespace sent on the request")
    r = c.request("POST", PODS, b"{not json")
    assert (r.status, r.json["reason"]) == (400, "BadRequest")
    r = c.request("POST", PODS, node("x"))
    assert r.status == 400


def test_unsupported_patch_type_and_method(fake_api):
    fake_api.create(node())
    c = Client(fake_api)
    r = c.request("PATCH", NODES + "/n1", {"metadata": {}},
                  content_type="application/json")
    assert (r.status, r.json["reason"]) == (415, "UnsupportedMediaType")
    r = c.request("POST", NODES + "/n1", node())
    assert (r.status, r.json["reason"]) == (405, "MethodNotAllowed")
    r = c.request("POST", "/api/v1/pods", pod("a"))
    assert r.status == 405
    r = c.request("DELETE", NODES + "/n1/status")
    assert r.status == 405
    assert c.get("/api/v1/secrets/s/status").status == 404


def test_node_status_strategic_merge_patch(fake_api):
    fake_api.create(node(
        volumesInUse=["kubernetes.io/csi/d^v1"],
        volumesAttached=[{"name": "kubernetes.io/csi/d^v1", "devicePath": ""},
                         {"name": "kubernetes.io/csi/d^v2", "devicePath": ""}],
        conditions=[{"type": "Ready", "status": "True"}]))
    patch = {"status": {
        "volumesInUse": ["kubernetes.io/csi/d^v3"],
        "volumesAttached": [{"name": "kubernetes.io/csi/d^v2", "devicePath": "/x"},
                            {"name": "kubernetes.io/csi/d^v1", "$patch": "delete"},
                            {"name": "kubernetes.io/csi/d^v4", "devicePath": ""}],
        "conditions": [{"type": "MemoryPressure", "status": "False"}],
        "$setElementOrder/conditions": [{"type": "MemoryPressure"},
                                        {"type": "Ready"}]},
        "metadata": {"annotations": {"csi.volume.kubernetes.io/nodeid":
                                     '{"d":"n1"}'}}}
    r = Client(fake_api).request("PATCH", NODES + "/n1/status", patch,
                                 content_type=SMP)
    assert r.status == 200
    st = r.json["status"]
    assert st["volumesInUse"] == ["kubernetes.io/csi/d^v3"]     # replaced
    assert st["volumesAttached"] == [
        {"name": "kubernetes.io/csi/d^v2", "devicePath": "/x"},
        {"name": "kubernetes.io/csi/d^v4", "devicePath": ""}]
    assert [c["type"] for c in st["conditions"]] == ["MemoryPressure", "Ready"]
    # Node status updates may carry metadata (kubelet's PatchNodeStatus).
    assert r.json["metadata"]["annotations"] == {
        "csi.volume.kubernetes.io/nodeid": '{"d":"n1"}'}


def test_status_and_main_resource_are_split(fake_api):
    fake_api.create(node(volumesInUse=["a"]))
    c = Client(fake_api)
    r = c.request("PATCH", NODES + "/n1", {"status": {"volumesInUse": ["b"]},
                                           "spec": {"unschedulable": True}},
                  content_type=MERGE)
    assert r.json["status"]["volumesInUse"] == ["a"]        # ignored here
    assert r.json["spec"]["unschedulable"] is True
    assert r.json["metadata"]["generation"] == 2            # spec changed
    r = c.request("PATCH", NODES + "/n1/status",
                  {"status": {"volumesInUse": None}, "spec": {"unschedulable": None}},
                  content_type=MERGE)
    assert "volumesInUse" not in r.json["status"]
    assert r.json["spec"]["unschedulable"] is True           # ignored there


def test_json_patch_and_finalizer_list_merge(fake_api):
    fake_api.create(node())
    c = Client(fake_api)
    r = c.request("PATCH", NODES + "/n1",
                  [{"op": "add", "path": "/metadata/labels", "value": {"a": "1"}},
                   {"op": "test", "path": "/metadata/name", "value": "n1"}],
                  content_type="application/json-patch+json")
    assert r.json["metadata"]["labels"] == {"a": "1"}
    r = c.request("PATCH", NODES + "/n1",
                  [{"op": "test", "path": "/metadata/name", "value": "zz"}],
                  content_type="application/json-patch+json")
    assert r.status == 422
    c.request("PATCH", NODES + "/n1", {"metadata": {"finalizers": ["a"]}},
              content_type=SMP)
    r = c.request("PATCH", NODES + "/n1", {"metadata": {"finalizers": ["b"]}},
                  content_type=SMP)
    assert r.json["metadata"]["finalizers"] == ["a", "b"]
    r = c.request("PATCH", NODES + "/n1",
                  {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
                  content_type=SMP)
    assert r.json["metadata"]["finalizers"] == ["b"]


def test_finalizers_hold_deletion_until_removed(fake_api):
    c = Client(fake_api)
    body = {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": "va", "finalizers": ["external-attacher/d"]},
            "spec": {"attacher": "d", "nodeName": "n1",
                     "source": {"persistentVolumeName": "pv"}}}
    path = "/apis/storage.k8s.io/v1/volumeattachments"
    created = c.request("POST", path, body).json
    r = c.request("DELETE", path + "/va")
    assert r.status == 200
    m = r.json["metadata"]
    assert m["deletionTimestamp"] and m["deletionGracePeriodSeconds"] == 0
    assert c.get(path + "/va").status == 200                   # still there
    w = c.watch(path, resourceVersion=m["resourceVersion"], timeoutSeconds=5)
    obj = r.json
    obj["metadata"]["finalizers"] = []
    r = c.request("PUT", path + "/va", obj)
    assert r.status == 200
    ev = w.next()
    assert ev["type"] == "DELETED"
    assert ev["object"]["metadata"]["uid"] == created["metadata"]["uid"]
    assert c.get(path + "/va").status == 404
    w.close()


def test_delete_returns_status_for_most_resources(fake_api):
    created = fake_api.create({"apiVersion": "storage.k8s.io/v1",
                               "kind": "CSIDriver", "metadata": {"name": "d"},
                               "spec": {"attachRequired": False}})
    r = Client(fake_api).request("DELETE", "/apis/storage.k8s.io/v1/csidrivers/d")
    assert r.json == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                      "status": "Success",
                      "details": {"name": "d", "group": "storage.k8s.io",
                                  "kind": "csidrivers",
                                  "uid": created["metadata"]["uid"]}}


def test_bound_pod_deletion_is_graceful(fake_api):
    fake_api.create(pod("bound"))
    c = Client(fake_api)
    r = c.request("DELETE", PODS + "/bound")
    m = r.json["metadata"]
    assert (r.status, m["deletionGracePeriodSeconds"]) == (200, 30)
    assert c.get(PODS + "/bound").status == 200
    # The kubelet's final delete with grace 0 removes it.
    r = c.request("DELETE", PODS + "/bound", {"gracePeriodSeconds": 0})
    assert r.status == 200
    assert c.get(PODS + "/bound").status == 404
    # Unscheduled pods go at once; so does everything with the switch off.
    fake_api.create(pod("pending", node_name=""))
    c.request("DELETE", PODS + "/pending")
    assert c.get(PODS + "/pending").status == 404
    fake_api.configure(podGracefulDelete=False)
    fake_api.create(pod("bound2"))
    c.request("DELETE", PODS + "/bound2")
    assert c.get(PODS + "/bound2").status == 404


def test_delete_precondition_uid(fake_api):
    fake_api.create(pod("p", node_name=""))
    r = Client(fake_api).request("DELETE", PODS + "/p",
                                 {"preconditions": {"uid": "nope"}})
    assert (r.status, r.json["reason"]) == (409, "Conflict")


def test_control_remove_for_good_despite_finalizers(fake_api):
    p = pod("p")
    p["metadata"]["finalizers"] = ["x"]
    fake_api.create(p)
    obj, removed = fake_api.delete("pods", "default", "p")
    assert removed is False and obj["metadata"]["deletionTimestamp"]
    fake_api.remove("pods", "default", "p")
    assert Client(fake_api).get(PODS + "/p").status == 404


def test_csinode_put_and_events_create_patch(fake_api):
    c = Client(fake_api)
    path = "/apis/storage.k8s.io/v1/csinodes"
    created = c.request("POST", path, {
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "n1"}, "spec": {"drivers": []}}).json
    created["spec"]["drivers"] = [{"name": "d", "nodeID": "n1",
                                   "topologyKeys": None}]
    r = c.request("PUT", path + "/n1", created)
    assert r.status == 200 and r.json["spec"]["drivers"][0]["nodeID"] == "n1"
    ev = {"apiVersion": "v1", "kind": "Event",
          "metadata": {"name": "p.17a", "namespace": "default"},
          "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
          "reason": "FailedMount", "type": "Warning", "count": 1}
    epath = "/api/v1/namespaces/default/events"
    assert c.request("POST", epath, ev).status == 201
    r = c.request("PATCH", epath + "/p.17a", {"count": 2}, content_type=SMP)
    assert r.json["count"] == 2
    r = c.get(epath, fieldSelector="involvedObject.name=p,reason=FailedMount")
    assert [e["metadata"]["name"] for e in r.json["items"]] == ["p.17a"]


def test_bind_claim_holds_every_binding_state(fake_api):
    """The PV controller's steps: claim names the PV; PV reserved (claimRef
    without uid); PV bound to the claim's uid; claim Bound."""
    fake_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "data", "namespace": "ns1"},
                     "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                     "status": {"phase": "Pending"}})
    fake_api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
                     "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                              "csi": {"driver": "d.example.com", "volumeHandle": "h"}},
                     "status": {"phase": "Available"}})
    uid = fake_api.get("persistentvolumeclaims", "ns1", "data")["metadata"]["uid"]
    seen = {}
    for state in ("Pending", "PVReserved", "PVBound", "Bound"):
        c, v = fake_api.bind_claim("ns1", "data", "pv-1", state)
        assert c == fake_api.get("persistentvolumeclaims", "ns1", "data")
        assert v == fake_api.get("persistentvolumes", None, "pv-1")
        ref = v["spec"].get("claimRef")
        seen[state] = (c["spec"]["volumeName"], c["status"]["phase"], ref and (ref["namespace"], ref["name"]),
                       ref and ref.get("uid"), v["status"]["phase"])
    assert seen == {"Pending": ("pv-1", "Pending", None, None, "Available"),
                    "PVReserved": ("pv-1", "Pending", ("ns1", "data"), None, "Available"),
                    "PVBound": ("pv-1", "Pending", ("ns1", "data"), uid, "Bound"),
                    "Bound": ("pv-1", "Bound", ("ns1", "data"), uid, "Bound")}


def test_csinode_annotations_kept_and_encoded_as_the_server_does(fake_api):
    """kubelet's storage.alpha.kubernetes.io/migrated-plugins lives in a
    CSINode's annotations: kept on create and PUT, a null value decoded as
    "", another type refused (map[string]string), and an empty map not
    returned (omitempty), so that "no key" and "" stay different."""
    c = Client(fake_api)
    path = "/apis/storage.k8s.io/v1/csinodes"
    key = "storage.alpha.kubernetes.io/migrated-plugins"
    r = c.request("POST", path, {
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "n1", "annotations": {key: "kubernetes.io/aws-ebs"}},
        "spec": {"drivers": []}})
    assert r.status == 201
    assert r.json["metadata"]["annotations"] == {key: "kubernetes.io/aws-ebs"}
    got = c.get(path + "/n1").json
    assert got["metadata"]["annotations"] == {key: "kubernetes.io/aws-ebs"}

    got["metadata"]["annotations"] = {key: "kubernetes.io/aws-ebs,kubernetes.io/gce-pd", "other": None}
    r = c.request("PUT", path + "/n1", got)
    assert r.status == 200
    assert r.json["metadata"]["annotations"] == {
        key: "kubernetes.io/aws-ebs,kubernetes.io/gce-pd", "other": ""}

    got = r.json
    got["metadata"]["annotations"] = {}
    r = c.request("PUT", path + "/n1", got)
    assert r.status == 200 and "annotations" not in r.json["metadata"]
    assert "annotations" not in c.get(path + "/n1").json["metadata"]

    got = r.json
    got["metadata"]["annotations"] = {key: 1}
    r = c.request("PUT", path + "/n1", got)
    assert r.status == 400
    assert "cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations of type string" \
        in r.json["message"]
