"""A claim gets only the PV bound to it.  kubelet (desired_state_of_world_
populator.go, getPVCExtractPV and getPVSpec) mounts a claim's PV only when
the claim is Bound and the PV's claimRef.uid is the claim's uid: anyone may
write spec.volumeName of their claim, naming another tenant's PV.  Until then
the pod waits, with kubelet's words, as binding may be in progress."""
import os
import time

import pytest

from integration.agent_fixtures import DRIVER, VolumeEnv, answered_requests, wait_until


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def claim(env, name, namespace="default", volume_name=None, phase="Pending"):
    obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": namespace},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
           "status": {"phase": phase}}
    if volume_name:
        obj["spec"]["volumeName"] = volume_name
    return env.api.create(obj)


def never_set_up(env, handle):
    assert not [c for c in env.calls("NodeStageVolume") if c["request"]["volume_id"] == handle], \
        f"{handle} was staged for a claim it is not bound to"
    assert not [c for c in env.calls("NodePublishVolume") if c["request"]["volume_id"] == handle], \
        f"{handle} was published for a claim it is not bound to"


@pytest.fixture
def broad_env(fake_api, mock_csi_factory, start_agent, tmp_path):
    """kvolumed with an identity that may read every PV (the in-cluster mode
    with a wider service account): the Node authorizer no longer keeps other
    tenants' PVs from it, only its own checks do."""
    driver = mock_csi_factory(name=DRIVER, tmpfs=True)
    return VolumeEnv(fake_api, driver, start_agent, tmp_path, broad=True)


def test_claim_waits_through_every_binding_step(volume_env):
    """An admin pre-bound the PV to the claim (claimRef without uid); the
    claim names it too but is Pending.  Each step of the PV controller's
    binding is a wait, the last one mounts."""
    env = volume_env
    env.csidriver(attachRequired=False)
    claim(env, "data")
    env.pv("pv-data", "vol-data")
    env.api.bind_claim("default", "data", "pv-data", "PVReserved")
    env.start()
    pod = env.pod("web", [claim_volume("data", "data")])
    event = env.wait_event("FailedMount", "error processing PVC default/data: PVC is not bound")[0]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "web"
    never_set_up(env, "vol-data")

    # The PV is bound to the claim's uid, the claim not yet: still a wait.
    env.api.bind_claim("default", "data", "pv-data", "PVBound")
    since = time.time()
    assert env.api.get("persistentvolumeclaims", "default", "data")["status"]["phase"] == "Pending"
    # The claim is not final, so kvolumed reads it again (with backoff):
    # once it has had this state's answer and a moment to act on it, nothing
    # may have been set up.
    wait_until(lambda: answered_requests(env.api, lambda r: r["method"] == "GET" and r["time"] > since
                                         and r["path"].endswith("/persistentvolumeclaims/data")),
               what="kvolumed reading the claim again")
    time.sleep(0.5)
    never_set_up(env, "vol-data")

    env.api.bind_claim("default", "data", "pv-data", "Bound")
    env.wait_mounted(env.target(pod, "pv-data"))
    # The driver logs a call once it answered: the mount can be seen first.
    assert [c["request"]["volume_id"] for c in env.wait_calls("NodePublishVolume")] == ["vol-data"]


def test_pending_claim_never_gets_another_namespace_reserved_pv(broad_env):
    """Tenant A's claim names tenant B's PV, which is reserved for B's claim
    (claimRef without uid yet).  Pending, it waits; even if it said Bound,
    the PV's claimRef.uid is not its uid."""
    env = broad_env
    env.csidriver(attachRequired=False)
    claim(env, "theirs", namespace="tenant-b")
    env.pv("pv-b", "vol-b")
    env.api.bind_claim("tenant-b", "theirs", "pv-b", "PVReserved")
    mine = claim(env, "mine", namespace="tenant-a", volume_name="pv-b")
    env.start()
    env.pod("web", [claim_volume("data", "mine")], namespace="tenant-a")
    env.wait_event("FailedMount", "error processing PVC tenant-a/mine: PVC is not bound", namespace="tenant-a")
    never_set_up(env, "vol-b")

    mine["status"]["phase"] = "Bound"
    mine["metadata"].pop("resourceVersion")
    env.api.update(mine)
    env.wait_event("FailedMount", "error processing PVC tenant-a/mine: found PV object pv-b but its "
                   f"pv.Spec.ClaimRef.UID  does not point to claim.UID {mine['metadata']['uid']}",
                   namespace="tenant-a")
    never_set_up(env, "vol-b")


def test_pv_bound_to_another_claim_of_the_same_name_is_not_mounted(volume_env):
    """The claim was deleted and made again under its name: the PV still
    carries the first one's uid (it is Released, its data the old claim's)."""
    env = volume_env
    env.csidriver(attachRequired=False)
    old = claim(env, "data")
    env.pv("pv-old", "vol-old")
    env.api.bind_claim("default", "data", "pv-old", "Bound")
    env.api.remove("persistentvolumeclaims", "default", "data")
    new = claim(env, "data", volume_name="pv-old", phase="Bound")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    env.start()
    env.pod("web", [claim_volume("data", "data")])
    env.wait_event("FailedMount", "error processing PVC default/data: found PV object pv-old but its "
                   f"pv.Spec.ClaimRef.UID {old['metadata']['uid']} does not point to claim.UID "
                   f"{new['metadata']['uid']}")
    never_set_up(env, "vol-old")


def test_pv_without_claim_ref_waits_until_bound(broad_env):
    """A claim that says Bound and names an Available PV, bound to no claim:
    kubelet's "not yet bound to the claim" — a wait, and once the PV
    controller writes the claimRef, the volume is mounted."""
    env = broad_env
    env.csidriver(attachRequired=False)
    claim(env, "data", volume_name="pv-free", phase="Bound")
    env.pv("pv-free", "vol-free")
    env.start()
    pod = env.pod("web", [claim_volume("data", "data")])
    env.wait_event("FailedMount", "error processing PVC default/data: found PV object pv-free but it has a nil "
                   "pv.Spec.ClaimRef indicating it is not yet bound to the claim")
    never_set_up(env, "vol-free")
    assert not os.path.exists(env.target(pod, "pv-free"))

    env.api.bind_claim("default", "data", "pv-free", "Bound")
    env.wait_mounted(env.target(pod, "pv-free"))
    wait_until(lambda: env.calls("NodePublishVolume"), what="the publish logged")
