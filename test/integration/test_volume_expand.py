"""Online expansion (NodeExpandVolume, KEP-1790): the controller grew a
published volume's PV and set its claim's allocatedResourceStatuses to
NodeResizePending; kvolumed, running as the node, reads the claim by GET, says
NodeResizeInProgress, calls NodeExpandVolume and reports the new capacity in
the claim's status, as kubelet does.  And what the fake API server lets a node
write in a claim's status (NodeRestriction)."""
import base64
import hashlib
import os
import time

from doubles.fakeapi.testclient import Client
from integration.agent_fixtures import answered_requests, wait_until

MI = 1024 * 1024
STATUS_PATH = "/api/v1/namespaces/default/persistentvolumeclaims/{}/status"


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def interval(seconds):
    return f"[volumes]\nexpand-check-interval = {seconds}\n"


def setup_volume(env, name="grow", secret_ref=None):
    """A published 64Mi volume whose claim says so; returns the pod."""
    env.csidriver(attachRequired=False)
    csi = {"nodeExpandSecretRef": secret_ref} if secret_ref else {}
    env.pv(f"pv-{name}", f"vol-{name}", claim=name, fsType="ext4", **csi)
    env.pvc(name, f"pv-{name}")
    claim = env.api.get("persistentvolumeclaims", "default", name)
    claim["status"]["capacity"] = {"storage": "64Mi"}
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)
    return claim


def controller_expands(env, name, size):
    """What the external resizer does, in its order (with
    RecoverVolumeExpansionFailure): the claim says ControllerResizeInProgress
    with the size allocated, the PV grows, then the claim says the node's part
    is pending.  A claim whose PV is larger while its status says nothing is
    the older protocol's request (legacyCallNodeExpandOnPlugin), which a real
    resizer of this protocol never shows between its writes."""
    claim = env.api.get("persistentvolumeclaims", "default", name)
    claim["spec"]["resources"]["requests"]["storage"] = size
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)
    claim = env.api.get("persistentvolumeclaims", "default", name)
    claim["status"]["allocatedResources"] = {"storage": size}
    claim["status"]["allocatedResourceStatuses"] = {"storage": "ControllerResizeInProgress"}
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)
    pv = env.api.get("persistentvolumes", None, f"pv-{name}")
    pv["spec"]["capacity"] = {"storage": size}
    pv["metadata"].pop("resourceVersion", None)
    env.api.update(pv)
    claim = env.api.get("persistentvolumeclaims", "default", name)
    claim["status"]["allocatedResourceStatuses"] = {"storage": "NodeResizePending"}
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)


def claim_status(env, name):
    return env.api.get("persistentvolumeclaims", "default", name)["status"]


def published_failing_next_expansion(env, check_interval, code="OUT_OF_RANGE", message="no room in the pool"):
    """A pod's published volume whose next NodeExpandVolume fails with code
    (OutOfRange: one kubelet takes as infeasible)."""
    setup_volume(env)
    env.start(extra=interval(check_interval))
    pod = env.pod("web", [claim_volume("data", "grow")])
    env.wait_mounted(env.target(pod, "pv-grow"))
    env.driver.control.fail_next("NodeExpandVolume", code, message)


def touch_pod(env):
    """An update of the pod, which has its claims read at once."""
    pod = env.api.get("pods", "default", "web")
    env.api.update({**pod, "metadata": {**pod["metadata"], "annotations": {"touched": "1"}}})


def wait_infeasible(env, name="grow"):
    """The claim's status once it says NodeResizeInfeasible."""
    return wait_until(lambda: (s := claim_status(env, name)).get("allocatedResourceStatuses", {})
                      .get("storage") == "NodeResizeInfeasible" and s,
                      what=lambda: f"NodeResizeInfeasible: the claim's status {claim_status(env, name)}\n"
                      + env.agent.output()[-5000:])


def status_patches(env, name):
    """The claim's status patches, each with its answer."""
    return answered_requests(env.api, lambda r: r["method"] == "PATCH" and r["path"] == STATUS_PATH.format(name))


def test_expansion_reports_in_progress_then_the_new_capacity(volume_env):
    env = volume_env
    env.api.create({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "expand-creds", "namespace": "default"},
                    "data": {"password": base64.b64encode(b"s3cret").decode()}})
    setup_volume(env, secret_ref={"name": "expand-creds", "namespace": "default"})
    env.start(extra=interval("1s"))
    pod = env.pod("web", [claim_volume("data", "grow")])
    target = env.target(pod, "pv-grow")
    env.wait_mounted(target)
    time.sleep(1.5)  # a check with nothing to do
    assert not env.calls("NodeExpandVolume")

    controller_expands(env, "grow", "128Mi")
    call = env.wait_calls("NodeExpandVolume", code="OK")[0]
    req = call["request"]
    assert req["volume_id"] == "vol-grow"
    assert req["volume_path"] == target
    assert req["staging_target_path"] == env.staging("vol-grow")
    assert int(req["capacity_range"]["required_bytes"]) == 128 * MI
    assert req["volume_capability"]["mount"]["fs_type"] == "ext4"
    assert call["secret_digests"] == {"password": hashlib.sha256(b"s3cret").hexdigest()}

    status = wait_until(lambda: (s := claim_status(env, "grow")).get("capacity", {}).get("storage") == "128Mi"
                        and s, what="the claim's new capacity")
    assert "storage" not in (status.get("allocatedResourceStatuses") or {})
    assert status["allocatedResources"] == {"storage": "128Mi"}  # the controller's, untouched
    # NodeResizeInProgress was reported before the call, the capacity after it.
    patches = [p for p in status_patches(env, "grow") if p["status"] == 200]
    assert patches[0]["body"]["status"]["allocatedResourceStatuses"] == {"storage": "NodeResizeInProgress"}
    assert patches[0]["time"] <= call["time"]
    assert patches[-1]["body"]["status"]["capacity"] == {"storage": "128Mi"}
    assert patches[-1]["time"] >= call["time"]
    assert all(p["user"] == "system:node:test-node" for p in patches)
    kinds = wait_until(lambda: (k := {e["involvedObject"]["kind"]: e for e in env.events()
                                      if e.get("reason") == "FileSystemResizeSuccessful"})
                       and len(k) == 2 and k, what="FileSystemResizeSuccessful on the pod and the claim")
    assert set(kinds) == {"Pod", "PersistentVolumeClaim"}
    assert kinds["PersistentVolumeClaim"]["involvedObject"]["name"] == "grow"
    assert kinds["Pod"]["message"] == 'MountVolume.NodeExpandVolume succeeded for volume "pv-grow" test-node'

    # Done: later checks do not call again.
    time.sleep(2.5)
    assert len(env.calls("NodeExpandVolume")) == 1
    assert not env.driver.violations()


def test_final_error_is_not_retried_until_the_size_changes(volume_env):
    env = volume_env
    published_failing_next_expansion(env, "1s")
    controller_expands(env, "grow", "128Mi")

    env.wait_calls("NodeExpandVolume", code="OUT_OF_RANGE")
    status = wait_infeasible(env)
    assert status["capacity"] == {"storage": "64Mi"}
    cond = [c for c in status.get("conditions", []) if c["type"] == "NodeResizeError"]
    assert len(cond) == 1 and cond[0]["status"] == "True"
    assert "no room in the pool" in cond[0]["message"]
    event = env.wait_event("FileSystemResizeFailed", "no room in the pool")[0]
    assert event["message"].startswith('MountVolume.NodeExpandVolume failed for volume "pv-grow" : ')

    # Several checks later: no retry at this size.
    time.sleep(3.5)
    assert len(env.calls("NodeExpandVolume")) == 1
    # The controller asks for another size: tried again, and it works.
    controller_expands(env, "grow", "192Mi")
    call = env.wait_calls("NodeExpandVolume", code="OK")[-1]
    assert int(call["request"]["capacity_range"]["required_bytes"]) == 192 * MI
    status = wait_until(lambda: (s := claim_status(env, "grow")).get("capacity", {}).get("storage") == "192Mi"
                        and s, what="the claim's new capacity")
    assert "storage" not in (status.get("allocatedResourceStatuses") or {})
    assert not [c for c in status.get("conditions", []) if c["type"] == "NodeResizeError"]


def test_non_final_error_is_retried_with_backoff(volume_env):
    env = volume_env
    published_failing_next_expansion(env, "1h", "UNAVAILABLE", "driver restarting")
    controller_expands(env, "grow", "128Mi")
    # The hourly check is far away: the pod's update is what has its claim read.
    touch_pod(env)
    env.wait_calls("NodeExpandVolume", code="UNAVAILABLE")
    ok = env.wait_calls("NodeExpandVolume", code="OK")[-1]
    first = env.calls("NodeExpandVolume")[0]
    assert ok["time"] - first["time"] >= 0.4  # kubelet's first backoff step, 500 ms
    wait_until(lambda: claim_status(env, "grow").get("capacity", {}).get("storage") == "128Mi",
               what="the claim's new capacity")
    assert claim_status(env, "grow").get("allocatedResourceStatuses") in (None, {})


def test_a_volume_grown_before_its_pod_started_is_expanded_once_published(volume_env):
    """kubelet looks at a volume's size when it mounts it: a claim already
    NodeResizePending when its pod starts is expanded right after the
    publish, not at the next periodic check (an hour away here), and without
    any update of the pod."""
    env = volume_env
    setup_volume(env)
    controller_expands(env, "grow", "128Mi")
    env.start(extra=interval("1h"))
    pod = env.pod("web", [claim_volume("data", "grow")])
    env.wait_mounted(env.target(pod, "pv-grow"))
    call = env.wait_calls("NodeExpandVolume", code="OK")[0]
    assert call["time"] >= env.wait_calls("NodePublishVolume")[0]["time"]
    wait_until(lambda: claim_status(env, "grow").get("capacity", {}).get("storage") == "128Mi",
               what="the claim's new capacity")


def test_node_writes_only_the_resize_status_of_its_own_claims(fake_api):
    """The fake's Node authorizer and NodeRestriction for persistentvolumeclaims/status."""
    fake_api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {}})
    for claim, node in (("mine", "n1"), ("theirs", "n2")):
        fake_api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": claim, "namespace": "default"},
                         "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": f"pv-{claim}",
                                  "resources": {"requests": {"storage": "2Gi"}}},
                         "status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                                    "allocatedResourceStatuses": {"storage": "NodeResizePending"}}})
        fake_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{claim}",
                                                                         "namespace": "default"},
                         "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}],
                                  "volumes": [claim_volume("data", claim)]}})
    c = Client(fake_api, token=fake_api.node_token("n1"))
    merge = "application/merge-patch+json"

    r = c.request("PATCH", STATUS_PATH.format("mine"),
                  {"status": {"allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}}},
                  content_type=merge)
    assert r.status == 200, r.json
    assert r.json["status"]["allocatedResourceStatuses"] == {"storage": "NodeResizeInProgress"}
    r = c.request("PATCH", STATUS_PATH.format("mine"),
                  {"status": {"capacity": {"storage": "2Gi"}, "allocatedResourceStatuses": None,
                              "conditions": [{"type": "NodeResizeError", "status": "True"}]}},
                  content_type=merge)
    assert r.status == 200, r.json
    # Anything else of the claim is refused, through status or not.
    for body in ({"status": {"phase": "Lost"}},
                 {"status": {"allocatedResourceStatuses": {"storage": "NodeResizePending"},
                             "accessModes": ["ReadWriteMany"]}},
                 {"metadata": {"labels": {"owned": "by-node"}}}):
        r = c.request("PATCH", STATUS_PATH.format("mine"), body, content_type=merge)
        assert r.status == 403, (body, r.json)
        assert 'is not allowed to update fields other than' in r.json["message"]
    r = c.request("PATCH", "/api/v1/namespaces/default/persistentvolumeclaims/mine",
                  {"spec": {"resources": {"requests": {"storage": "5Gi"}}}}, content_type=merge)
    assert r.status == 403
    # Another node's claim: no relationship in the authorizer's graph.
    r = c.request("PATCH", STATUS_PATH.format("theirs"),
                  {"status": {"allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}}},
                  content_type=merge)
    assert r.status == 403
    assert "no relationship found between node 'n1' and this object" in r.json["message"]
    assert fake_api.get("persistentvolumeclaims", "default", "theirs")["status"][
        "allocatedResourceStatuses"] == {"storage": "NodeResizePending"}


def test_ext4_file_system_grows_online(fake_api, mock_csi_factory, start_agent, tmp_path):
    """With a loop device and ext4 (the driver grows the backing file and runs
    resize2fs), the pod sees the larger file system without a remount."""
    from integration.agent_fixtures import DRIVER, VolumeEnv
    env = VolumeEnv(fake_api, mock_csi_factory(name=DRIVER), start_agent, tmp_path)
    setup_volume(env)
    env.start(extra=interval("1s"))
    pod = env.pod("web", [claim_volume("data", "grow")])
    target = env.target(pod, "pv-grow")
    env.wait_mounted(target)
    st = os.statvfs(target)
    before = st.f_blocks * st.f_frsize
    assert before < 64 * MI
    controller_expands(env, "grow", "256Mi")
    wait_until(lambda: claim_status(env, "grow").get("capacity", {}).get("storage") == "256Mi",
               timeout=20, what="the claim's new capacity")
    assert os.path.ismount(target)
    assert len(env.calls("NodePublishVolume")) == 1  # grown in place, not published again
    assert env.driver.state()["volumes"]["vol-grow"]["size"] == 256 * MI
    st = os.statvfs(target)
    if st.f_blocks * st.f_frsize <= 200 * MI:
        # resize2fs of a mounted ext4 was refused here (no CAP_SYS_RESOURCE in
        # this container): the driver grows it at the next stage instead.
        assert env.driver.state()["volumes"]["vol-grow"]["resize_pending"]
        env.api.remove("pods", "default", "web")
        env.wait_gone(os.path.dirname(env.staging("vol-grow")))
        pod = env.pod("web2", [claim_volume("data", "grow")])
        target = env.target(pod, "pv-grow")
        env.wait_mounted(target)
        st = os.statvfs(target)
    assert st.f_blocks * st.f_frsize > 200 * MI, (before, st.f_blocks * st.f_frsize)


def test_a_claim_read_before_its_resizer_wrote_is_not_the_older_protocol(volume_env):
    """The resizer writes the claim's ControllerResizeInProgress before it
    grows the PV.  A claim read from before that write, with the PV read
    after it, looks like the older protocol's request (no
    allocatedResourceStatuses, a larger PV): expanding on it leaves the
    claim NodeResizePending forever, since the older protocol has no status
    to report a final error in and the size is then not tried again.  The
    PV is read first and the claim only once it has answered, so a larger
    PV always comes with the claim the resizer wrote before growing it.
    Here the PV's GET is held while the resizer writes."""
    env = volume_env
    published_failing_next_expansion(env, "1h")
    pv_path, claim_path = "/api/v1/persistentvolumes/pv-grow", "/api/v1/namespaces/default/persistentvolumeclaims/grow"
    env.api.set_delay(3.0, path_prefix=pv_path, method="GET")
    since = len(env.api.requests())
    touch_pod(env)  # the periodic check is an hour away

    def gets(path, answered):
        return [r for r in env.api.requests()[since:]
                if r["method"] == "GET" and r["path"] == path and (r.get("status") is not None or not answered)]

    wait_until(lambda: gets(pv_path, False), what=lambda: "the PV's GET\n" + env.agent.output()[-3000:])
    # A claim read beside it (none when the claim waits for the PV's answer) is answered by now.
    deadline = time.monotonic() + 0.5
    while not gets(claim_path, True) and time.monotonic() < deadline:
        time.sleep(0.02)
    controller_expands(env, "grow", "128Mi")

    env.wait_calls("NodeExpandVolume", code="OUT_OF_RANGE", timeout=20)
    wait_infeasible(env)
    env.api.set_delay(0)
