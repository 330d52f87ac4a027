"""Attach limits (KEP-4876): CSINode allocatable.count from NodeGetInfo's
max_volumes_per_node, read again periodically and after RESOURCE_EXHAUSTED,
and a pod whose new attachable volume would exceed the limit held back with
a VolumeAttachmentLimitExceeded event and no CSI call."""
import hashlib
import time

import pytest

from integration.agent_fixtures import DRIVER, VolumeEnv, wait_until

UNIQUE = f"kubernetes.io/csi/{DRIVER}^"


@pytest.fixture
def limited_env(fake_api, mock_csi_factory, start_agent, tmp_path):
    def make(max_volumes):
        driver = mock_csi_factory(name=DRIVER, tmpfs=True, max_volumes=max_volumes)
        return VolumeEnv(fake_api, driver, start_agent, tmp_path)
    return make


def allocatable(env):
    try:
        csinode = env.api.get("csinodes", None, "test-node")
    except Exception:
        return None
    for d in (csinode.get("spec") or {}).get("drivers") or []:
        if d["name"] == DRIVER:
            return (d.get("allocatable") or {}).get("count")
    return None


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def attached_volume(env, name):
    """A PV and claim "name", attached to the node as the attach/detach
    controller and the external attacher would have it."""
    env.pv(f"pv-{name}", f"vol-{name}", claim=name)
    env.pvc(name, f"pv-{name}")
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                    "metadata": {"name": "csi-" + hashlib.sha256(
                        (f"vol-{name}" + DRIVER + "test-node").encode()).hexdigest()},
                    "spec": {"attacher": DRIVER, "nodeName": "test-node",
                             "source": {"persistentVolumeName": f"pv-{name}"}},
                    "status": {"attached": True}})
    node = env.node()
    node.setdefault("status", {}).setdefault("volumesAttached", []).append(
        {"name": UNIQUE + f"vol-{name}", "devicePath": ""})
    node["metadata"].pop("resourceVersion", None)
    env.api.update(node)


def test_csinode_count_follows_the_driver(limited_env):
    env = limited_env(2)
    env.start(csi="attach-limit-refresh-interval = 1s\n")
    wait_until(lambda: allocatable(env) == 2, what="CSINode allocatable.count 2")
    env.driver.control.set_config(max_volumes_per_node=5)
    wait_until(lambda: allocatable(env) == 5, timeout=10, what="CSINode allocatable.count 5")
    assert len(env.calls("NodeGetInfo")) >= 2


def test_resource_exhausted_reads_the_limit_again(limited_env):
    env = limited_env(4)
    env.csidriver(attachRequired=True)
    attached_volume(env, "a")
    env.start()  # no periodic refresh: only RESOURCE_EXHAUSTED asks again
    wait_until(lambda: allocatable(env) == 4, what="CSINode allocatable.count 4")
    infos = len(env.calls("NodeGetInfo"))
    env.driver.control.set_config(max_volumes_per_node=1)
    time.sleep(1.0)
    assert allocatable(env) == 4 and len(env.calls("NodeGetInfo")) == infos
    env.driver.control.fail_next("NodeStageVolume", "RESOURCE_EXHAUSTED", "no free LUN")
    pod = env.pod("web", [claim_volume("data", "a")])
    env.wait_calls("NodeStageVolume", code="RESOURCE_EXHAUSTED")
    wait_until(lambda: allocatable(env) == 1, what="CSINode allocatable.count 1")
    assert len(env.calls("NodeGetInfo")) == infos + 1
    env.wait_mounted(env.target(pod, "pv-a"))  # retried after the backoff: one volume fits


def test_pod_over_the_limit_waits_without_a_call(limited_env):
    env = limited_env(1)
    env.csidriver(attachRequired=True)
    attached_volume(env, "a")
    attached_volume(env, "b")
    env.start()
    wait_until(lambda: allocatable(env) == 1, what="CSINode allocatable.count 1")
    a = env.pod("a", [claim_volume("data", "a")])
    env.wait_mounted(env.target(a, "pv-a"))

    b = env.pod("b", [claim_volume("data", "b")])
    event = env.wait_event("VolumeAttachmentLimitExceeded")[0]
    assert event["involvedObject"]["name"] == "b"
    assert event["type"] == "Warning"
    assert "volume attachment limit" in event["message"] and '"pv-b"' in event["message"]
    time.sleep(1.0)
    assert [c["request"]["volume_id"] for c in env.calls("NodeStageVolume")] == ["vol-a"]
    assert not [c for c in env.calls("NodePublishVolume") if c["request"]["volume_id"] == "vol-b"]

    # Pod a goes: once its volume is off the node, b's is set up.
    env.api.remove("pods", "default", "a")
    env.wait_mounted(env.target(b, "pv-b"), timeout=20)
    unstage = env.wait_calls("NodeUnstageVolume", code="OK")[0]
    stage_b = [c for c in env.calls("NodeStageVolume") if c["request"]["volume_id"] == "vol-b"][0]
    assert stage_b["time"] >= unstage["time"]
    assert len([e for e in env.events() if e.get("reason") == "VolumeAttachmentLimitExceeded"]) == 1
