"""ReadWriteOncePod (KEP-2485): a second pod on the node using a volume whose
only access mode is ReadWriteOncePod is refused before any CSI call, with
kubelet's FailedMount Event, and proceeds once the first pod is gone."""
import os

from integration.agent_fixtures import wait_until

REFUSED = ('MountVolume.SetUp failed for volume "pv-rwop" : volume uses the ReadWriteOncePod access mode and is '
           'already in use by another pod')


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def volume(env, name, handle, modes):
    env.pv(name, handle, claim=name)
    pv = env.api.get("persistentvolumes", None, name)
    pv["spec"]["accessModes"] = modes
    env.api.update(pv)
    env.pvc(name, name)


def publishes_to(env, target):
    return [c for c in env.calls("NodePublishVolume") if c["request"]["target_path"] == target]


def wait_publish(env, target):
    """The driver logs a call after answering it: the mount may come first."""
    return wait_until(lambda: publishes_to(env, target), what=f"NodePublishVolume for {target}")


def test_second_pod_is_refused_until_the_first_goes(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False)
    volume(env, "pv-rwop", "vol-rwop", ["ReadWriteOncePod"])
    # With more than one mode kubelet cannot tell which the pod means: not enforced.
    volume(env, "pv-mixed", "vol-mixed", ["ReadWriteOnce", "ReadWriteOncePod"])
    env.start()
    volumes = [claim_volume("data", "pv-rwop"), claim_volume("more", "pv-mixed")]
    a = env.pod("a", volumes)
    env.wait_mounted(env.target(a, "pv-rwop"))
    env.wait_mounted(env.target(a, "pv-mixed"))
    b = env.pod("b", volumes)

    event = env.wait_event("FailedMount", "ReadWriteOncePod")[0]
    assert event["involvedObject"]["name"] == "b"
    assert event["message"] == REFUSED
    env.wait_mounted(env.target(b, "pv-mixed"))
    assert not publishes_to(env, env.target(b, "pv-rwop"))
    assert not os.path.exists(env.target(b, "pv-rwop"))
    # The driver without SINGLE_NODE_MULTI_WRITER is asked for SINGLE_NODE_WRITER.
    stage = [c for c in env.wait_calls("NodeStageVolume", 2) if c["request"]["volume_id"] == "vol-rwop"]
    assert len(stage) == 1
    assert stage[0]["request"]["volume_capability"]["access_mode"]["mode"] == "SINGLE_NODE_WRITER"

    env.api.remove("pods", "default", "a")
    env.wait_mounted(env.target(b, "pv-rwop"))
    env.wait_gone(os.path.dirname(env.target(a, "pv-rwop")))
    # The staged volume is reused: no unstage, no second stage.
    assert len([c for c in env.calls("NodeStageVolume") if c["request"]["volume_id"] == "vol-rwop"]) == 1
    assert not env.calls("NodeUnstageVolume")
    assert len(wait_publish(env, env.target(b, "pv-rwop"))) == 1
    assert not env.driver.violations()


def test_two_new_pods_get_the_volume_one_at_a_time(volume_env):
    """Both pods appear at once: only one is published, the other refused."""
    env = volume_env
    env.csidriver(attachRequired=False)
    volume(env, "pv-rwop", "vol-rwop", ["ReadWriteOncePod"])
    env.start()
    a = env.pod("a", [claim_volume("data", "pv-rwop")])
    b = env.pod("b", [claim_volume("data", "pv-rwop")])
    event = env.wait_event("FailedMount", "ReadWriteOncePod")[0]
    first, second = (a, b) if event["involvedObject"]["name"] == "b" else (b, a)
    env.wait_mounted(env.target(first, "pv-rwop"))
    assert not publishes_to(env, env.target(second, "pv-rwop"))
    env.api.remove("pods", "default", first["metadata"]["name"])
    env.wait_mounted(env.target(second, "pv-rwop"))
    wait_until(lambda: not os.path.lexists(os.path.dirname(env.target(first, "pv-rwop"))), what="first pod's dir gone")
    unpublish = env.wait_calls("NodeUnpublishVolume")[0]
    publish = wait_publish(env, env.target(second, "pv-rwop"))[0]
    # Not while the first pod's publish was there (the driver's log has 6 decimals).
    assert publish["time"] >= unpublish["time"] + unpublish["duration"] - 1e-5
    assert not env.driver.violations()
