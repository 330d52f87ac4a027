"""One persistent volume shared by many pods: after its single NodeStageVolume,
the publishes and unpublishes of different pods run side by side (kubelet runs
them one at a time, kubernetes/kubernetes#113553), while a stage or unstage
still excludes every publish of the volume."""
import os

from integration.agent_fixtures import wait_until

PODS = 50
CALL_SECONDS = 0.3


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def intervals(calls):
    return [(c["time"], c["time"] + c["duration"]) for c in calls]


def most_at_once(spans):
    """The largest number of calls in progress at one instant."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    now = best = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


def shared_volume(env):
    env.csidriver(attachRequired=False)
    env.pv("pv-shared", "vol-shared", claim="shared")
    pv = env.api.get("persistentvolumes", None, "pv-shared")
    pv["spec"]["accessModes"] = ["ReadWriteMany"]
    env.api.update(pv)
    env.pvc("shared", "pv-shared")


def test_fifty_pods_on_one_pv_publish_in_parallel_and_unstage_last(volume_env):
    env = volume_env
    shared_volume(env)
    # Like AWS EBS: calls keyed by volume and target path.
    env.driver.control.set_config(op_lock="target")
    env.driver.control.delay("NodeStageVolume", CALL_SECONDS)
    env.driver.control.delay("NodePublishVolume", CALL_SECONDS)
    env.driver.control.delay("NodeUnpublishVolume", CALL_SECONDS)
    env.start()
    pods = [env.pod(f"p{i}", [claim_volume("data", "shared")]) for i in range(PODS)]
    for p in pods:
        env.wait_mounted(env.target(p, "pv-shared"), timeout=60)
    publishes = env.wait_calls("NodePublishVolume", PODS)
    stages = env.calls("NodeStageVolume")
    assert len(stages) == 1
    stage_end = stages[0]["time"] + stages[0]["duration"]
    # No publish starts before the volume is staged ...
    assert min(c["time"] for c in publishes) >= stage_end
    # ... and then they overlap: one at a time, 50 of them would be one
    # after another.
    assert most_at_once(intervals(publishes)) >= 10, intervals(publishes)
    assert len({c["request"]["target_path"] for c in publishes}) == PODS

    for p in pods:
        env.api.remove("pods", "default", p["metadata"]["name"])
    unstage = env.wait_calls("NodeUnstageVolume", timeout=60)[0]
    unpublishes = env.wait_calls("NodeUnpublishVolume", PODS)
    assert most_at_once(intervals(unpublishes)) >= 10, intervals(unpublishes)
    # The unstage only after the last unpublish has answered.
    assert unstage["time"] >= max(end for _, end in intervals(unpublishes))
    assert len(env.calls("NodeUnstageVolume")) == 1
    env.wait_gone(os.path.dirname(env.staging("vol-shared")))
    assert not env.driver.violations()


def test_a_driver_that_takes_one_call_per_volume_gets_them_one_at_a_time(volume_env):
    """Like GCE PD or the hostpath driver: a second call on a volume with one
    in flight is refused with ABORTED (the CSI spec allows it).  kvolumed
    learns it from the first refusal and publishes the rest one at a time,
    without a backoff and without a FailedMount event."""
    env = volume_env
    shared_volume(env)
    env.driver.control.delay("NodePublishVolume", 0.1)
    env.start()
    pods = [env.pod(f"p{i}", [claim_volume("data", "shared")]) for i in range(10)]
    for p in pods:
        env.wait_mounted(env.target(p, "pv-shared"), timeout=30)
    env.agent.wait_for_log("refuses concurrent calls on one volume")
    assert env.agent.output().count("refuses concurrent calls on one volume") == 1
    # The driver logs a call after its answer: the last mount may be seen first.
    ok = env.wait_calls("NodePublishVolume", 10, code="OK")
    refused = [c for c in env.calls("NodePublishVolume") if c["code"] == "ABORTED"]
    assert len(ok) == 10 and refused
    # Once learnt, no call overlaps another: refused ones came before.
    last_refusal = max(c["time"] for c in refused)
    assert most_at_once([(t0, t1) for t0, t1 in intervals(ok) if t0 > last_refusal]) == 1
    assert not [e for e in env.events() if e.get("reason") == "FailedMount"]
    assert "No retries permitted" not in env.agent.output()


def test_unstage_waits_for_a_publish_in_flight_of_a_deleted_pod(volume_env):
    """A pod deleted while its publish hangs: the other pod's volume is torn
    down beside it, but the unstage waits until the hung publish has ended
    and been unpublished."""
    env = volume_env
    shared_volume(env)
    env.driver.control.set_config(op_lock="target")
    env.start()
    a = env.pod("a", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(a, "pv-shared"))
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    b = env.pod("b", [claim_volume("data", "shared")])
    env.driver.control.wait_hung("NodePublishVolume")
    # a's unpublish is not held up by b's publish in flight.
    env.api.remove("pods", "default", "a")
    env.api.remove("pods", "default", "b")
    env.wait_calls("NodeUnpublishVolume")
    env.wait_gone(os.path.dirname(env.target(a, "pv-shared")))
    assert not env.calls("NodeUnstageVolume"), "unstaged under a publish in flight"
    assert os.path.ismount(env.staging("vol-shared"))

    env.driver.control.release("NodePublishVolume")
    env.wait_calls("NodeUnstageVolume")
    calls = [c for c in env.calls() if c["method"] in ("NodeUnpublishVolume", "NodeUnstageVolume")]
    targets = [c["request"].get("target_path") for c in calls if c["method"] == "NodeUnpublishVolume"]
    assert env.target(b, "pv-shared") in targets, "b's publish made a mount: it must be unpublished"
    assert calls[-1]["method"] == "NodeUnstageVolume"
    env.wait_gone(os.path.dirname(env.staging("vol-shared")))
    wait_until(lambda: not os.path.lexists(os.path.dirname(env.target(b, "pv-shared"))), 15,
               what="b's volume dir gone")
    assert not env.driver.violations()
