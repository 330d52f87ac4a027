"""Fake API server: list and watch semantics (resourceVersions, resume, 410,
bookmarks, field selector transitions, timeouts)."""
import time

import pytest

from doubles.fakeapi.testclient import Client

PODS = "/api/v1/namespaces/default/pods"


def pod(name, node="n1", **extra):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c",
                                                       "image": "busybox"}]},
            **extra}


def drain(watch, n, timeout=3.0):
    return [watch.next(timeout) for _ in range(n)]


def test_list_carries_global_resource_version_and_bare_items(fake_api):
    a = fake_api.create(pod("a"))
    fake_api.create({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": "n1"}})
    r = Client(fake_api).get(PODS)
    assert r.status == 200
    assert r.json["kind"] == "PodList" and r.json["apiVersion"] == "v1"
    assert r.json["metadata"] == {"resourceVersion": str(fake_api.resource_version)}
    assert int(a["metadata"]["resourceVersion"]) == fake_api.resource_version - 1
    [item] = r.json["items"]
    assert "kind" not in item and "apiVersion" not in item
    assert item["metadata"]["uid"] == a["metadata"]["uid"]


def test_watch_from_list_version_resumes_without_replaying_state(fake_api):
    fake_api.create(pod("a"))
    c = Client(fake_api)
    rv = c.get(PODS).json["metadata"]["resourceVersion"]
    b = fake_api.create(pod("b"))
    w = c.watch(PODS, resourceVersion=rv, timeoutSeconds=5)
    ev = w.next()
    assert ev["type"] == "ADDED"
    assert ev["object"]["kind"] == "Pod"          # events carry their kind
    assert ev["object"]["metadata"]["name"] == "b"
    assert ev["object"]["metadata"]["resourceVersion"] == \
        b["metadata"]["resourceVersion"]
    b["metadata"]["labels"] = {"x": "y"}
    fake_api.update(b)
    ev = w.next()
    assert (ev["type"], ev["object"]["metadata"]["labels"]) == ("MODIFIED",
                                                                  {"x": "y"})
    w.close()


@pytest.mark.parametrize("rv", ["0", None])
def test_watch_from_zero_or_unset_starts_with_synthetic_added(fake_api, rv):
    fake_api.create(pod("a"))
    fake_api.create(pod("b"))
    query = {"timeoutSeconds": 5}
    if rv is not None:
        query["resourceVersion"] = rv
    w = Client(fake_api).watch(PODS, **query)
    events = drain(w, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == \
        [("ADDED", "a"), ("ADDED", "b")]
    w.close()


def test_watch_from_compacted_version_gets_410_error_event(fake_api):
    fake_api.create(pod("a"))
    old = str(fake_api.resource_version)
    fake_api.create(pod("b"))
    compacted = fake_api.compact()
    w = Client(fake_api).watch(PODS, resourceVersion=old)
    assert w.status == 200
    assert w.next() == {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {old} ({compacted})",
        "reason": "Expired", "code": 410}}
    assert w.next() is None         # the stream ends after the error
    # The compaction point itself is still a valid place to start.
    w = Client(fake_api).watch(PODS, resourceVersion=compacted, timeoutSeconds=1)
    fake_api.create(pod("c"))
    assert w.next()["object"]["metadata"]["name"] == "c"
    w.close()


def test_bookmarks_carry_current_version_and_nothing_else(fake_api):
    fake_api.bookmark_interval = 0.2
    fake_api.create(pod("a"))
    w = Client(fake_api).watch(PODS, resourceVersion=str(fake_api.resource_version),
                               allowWatchBookmarks="true", timeoutSeconds=5)
    # A change elsewhere moves the version bookmarks report.
    fake_api.create({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": "n1"}})
    ev = w.next()
    assert ev == {"type": "BOOKMARK", "object": {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"resourceVersion": str(fake_api.resource_version)}}}
    w.close()


def test_no_bookmarks_unless_asked(fake_api):
    fake_api.bookmark_interval = 0.1
    w = Client(fake_api).watch(PODS, resourceVersion="0", timeoutSeconds=1)
    assert w.next(3) is None        # the timeout ends the stream, nothing before
    w.close()


def test_watch_ends_at_timeout_seconds(fake_api):
    w = Client(fake_api).watch(PODS, resourceVersion="0", timeoutSeconds=1)
    start = time.monotonic()
    assert w.next(5) is None
    assert 0.9 <= time.monotonic() - start < 2.5


def test_field_selector_transitions_are_added_and_deleted(fake_api):
    c = Client(fake_api)
    rv = c.get(PODS).json["metadata"]["resourceVersion"]
    w = c.watch(PODS, resourceVersion=rv, fieldSelector="spec.nodeName=n1",
                timeoutSeconds=5)
    fake_api.create(pod("elsewhere", node="n2"))
    p = fake_api.create(pod("p", node="n2"))
    p["spec"]["nodeName"] = "n1"                 # moves onto our node
    p = fake_api.update(p)
    ev = w.next()
    assert (ev["type"], ev["object"]["metadata"]["name"]) == ("ADDED", "p")
    assert ev["object"]["metadata"]["resourceVersion"] == \
        p["metadata"]["resourceVersion"]
    before = p["metadata"]["resourceVersion"]
    p["spec"]["nodeName"] = "n3"                 # and away again
    moved = fake_api.update(p)
    ev = w.next()
    # The watcher sees the object leave: DELETED, with the content it last
    # matched but the resourceVersion of the change.
    assert ev["type"] == "DELETED"
    assert ev["object"]["spec"]["nodeName"] == "n1"
    assert ev["object"]["metadata"]["resourceVersion"] == \
        moved["metadata"]["resourceVersion"] != before
    w.close()


def test_replay_applies_selector_transitions_too(fake_api):
    rv = str(fake_api.resource_version)
    p = fake_api.create(pod("p", node="n2"))
    p["spec"]["nodeName"] = "n1"
    fake_api.update(p)
    fake_api.remove("pods", "default", "p")
    w = Client(fake_api).watch(PODS, resourceVersion=rv,
                               fieldSelector="spec.nodeName=n1", timeoutSeconds=5)
    assert [e["type"] for e in drain(w, 2)] == ["ADDED", "DELETED"]
    w.close()


def test_deleted_event_carries_deletion_version(fake_api):
    rv = str(fake_api.resource_version)
    fake_api.create(pod("p", node=""))
    w = Client(fake_api).watch(PODS, resourceVersion=rv, timeoutSeconds=5)
    assert w.next()["type"] == "ADDED"
    r = Client(fake_api).request("DELETE", PODS + "/p")
    assert r.status == 200 and r.json["kind"] == "Pod"   # pods return the object
    ev = w.next()
    assert ev["type"] == "DELETED"
    assert ev["object"]["metadata"]["resourceVersion"] == \
        str(fake_api.resource_version)
    w.close()


def test_unsupported_field_label_is_400(fake_api):
    r = Client(fake_api).get(PODS, fieldSelector="spec.foo=x")
    assert (r.status, r.json["message"]) == (400,
                                              "field label not supported: spec.foo")


def test_cluster_wide_pods_and_node_name_selector(fake_api):
    fake_api.create(pod("a", node="n1"))
    other = pod("b", node="n1")
    other["metadata"]["namespace"] = "kube-system"
    fake_api.create(other)
    fake_api.create(pod("c", node="n2"))
    r = Client(fake_api).get("/api/v1/pods", fieldSelector="spec.nodeName=n1")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"])
            for i in r.json["items"]] == [("default", "a"), ("kube-system", "b")]
    r = Client(fake_api).get("/api/v1/pods",
                             fieldSelector="metadata.name=c,spec.nodeName!=n1")
    assert [i["metadata"]["name"] for i in r.json["items"]] == ["c"]


def test_watch_single_item_path(fake_api):
    fake_api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}})
    fake_api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b"}})
    w = Client(fake_api).watch("/api/v1/nodes/b", resourceVersion="0",
                               timeoutSeconds=1)
    assert [e["object"]["metadata"]["name"] for e in drain(w, 1)] == ["b"]
    assert w.next() is None


def test_send_initial_events_ends_with_marked_bookmark(fake_api):
    fake_api.create(pod("a"))
    rv = str(fake_api.resource_version)
    w = Client(fake_api).watch(PODS, sendInitialEvents="true",
                               allowWatchBookmarks="true",
                               resourceVersionMatch="NotOlderThan",
                               timeoutSeconds=5)
    added, bookmark = drain(w, 2)
    assert added["type"] == "ADDED"
    assert bookmark == {"type": "BOOKMARK", "object": {
        "kind": "Pod", "apiVersion": "v1", "metadata": {
            "resourceVersion": rv,
            "annotations": {"k8s.io/initial-events-end": "true"}}}}
    w.close()


def test_pagination_with_limit_and_continue(fake_api):
    for name in "abc":
        fake_api.create(pod(name))
    c = Client(fake_api)
    first = c.get(PODS, limit=2).json
    assert [i["metadata"]["name"] for i in first["items"]] == ["a", "b"]
    assert first["metadata"]["remainingItemCount"] == 1
    second = c.get(PODS, limit=2, **{"continue": first["metadata"]["continue"]}).json
    assert [i["metadata"]["name"] for i in second["items"]] == ["c"]
    assert "continue" not in second["metadata"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    # resourceVersion=0 is served from the watch cache, which ignores limit.
    assert len(c.get(PODS, limit=2, resourceVersion="0").json["items"]) == 3
    fake_api.compact()
    fake_api.create(pod("d"))
    fake_api.compact()
    r = c.get(PODS, limit=2, **{"continue": first["metadata"]["continue"]})
    assert (r.status, r.json["reason"]) == (410, "Expired")
