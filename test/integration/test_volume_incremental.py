"""Work per event follows what changed: a pod's event plans that pod's
volumes, an operation's end plans its volume, and the full pass is left to
what may concern any volume and to the resync.  Every agent of the suite runs
with KVOLUMED_TEST_VERIFY_INCREMENTAL, which follows each scoped pass with a
full one that must find nothing more to do (agent_fixtures fails a test on
"Incremental pass missed"); the churn below gives that check a workout."""
import os
import random
import re

from integration.agent_fixtures import wait_until


def inline_volume(name, size="1Mi"):
    return {"name": name, "csi": {"driver": "mock.csi.kvolumed.io", "volumeAttributes": {"size": size}}}


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def scoped_starts(output):
    return [int(n) for n in re.findall(r"Reconcile pass \(scoped\) started (\d+) operations", output)]


def test_a_new_pod_beside_many_volumes_is_planned_by_a_scoped_pass(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral", "Persistent"])
    env.start()
    pods = [env.pod(f"busy{i}", [inline_volume(f"v{j}") for j in range(10)]) for i in range(10)]
    for p in pods:
        for j in range(10):
            env.wait_mounted(env.target(p, f"v{j}"), timeout=60)
    before = len(scoped_starts(env.agent.output()))
    new = env.pod("new", [inline_volume("data")])
    env.wait_mounted(env.target(new, "data"))
    # The publish of the new pod's one volume was started by a pass that
    # looked at that pod alone.
    wait_until(lambda: 1 in scoped_starts(env.agent.output())[before:], 10, what="a scoped pass starting 1 op")


def test_churn_with_failures_converges_and_scoped_passes_miss_nothing(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral", "Persistent"])
    for i in range(4):
        env.pv(f"pv{i}", f"vol{i}", claim=f"claim{i}")
        pv = env.api.get("persistentvolumes", None, f"pv{i}")
        pv["spec"]["accessModes"] = ["ReadWriteMany"]
        env.api.update(pv)
        env.pvc(f"claim{i}", f"pv{i}")
    env.driver.control.set_config(op_lock="target")
    env.start()
    rng = random.Random(7)
    live = {}
    for round_ in range(6):
        # Some calls fail, finally or not: retries and uncertain states.
        env.driver.control.fail_next("NodePublishVolume", "UNAVAILABLE", "busy", count=2)
        env.driver.control.fail_next("NodeStageVolume", "INTERNAL", "flaky", count=1)
        env.driver.control.fail_next("NodeUnpublishVolume", "DEADLINE_EXCEEDED", "slow", count=1)
        for i in range(5):
            name = f"r{round_}p{i}"
            vols = [inline_volume("scratch"), claim_volume("data", f"claim{rng.randrange(4)}")]
            live[name] = env.pod(name, vols)
        for name in rng.sample(sorted(live), k=min(3, len(live))):
            env.api.remove("pods", "default", name)
            del live[name]

    def converged():
        for p in live.values():
            claim = next(v["persistentVolumeClaim"]["claimName"] for v in p["spec"]["volumes"]
                         if "persistentVolumeClaim" in v)
            pv = "pv" + claim[len("claim"):]
            if not (os.path.ismount(env.target(p, "scratch")) and os.path.ismount(env.target(p, pv))):
                return False
        pods_dir = os.path.join(env.root, "pods")
        uids = {p["metadata"]["uid"] for p in live.values()}
        return set(os.listdir(pods_dir)) <= uids
    wait_until(converged, 90, what="every live pod's volumes mounted and every deleted pod's gone")
    for name in list(live):
        env.api.remove("pods", "default", name)
    for i in range(4):
        env.wait_gone(os.path.dirname(env.staging(f"vol{i}")), timeout=60)
    assert scoped_starts(env.agent.output()), "no scoped pass started anything"
    assert "Incremental pass missed" not in env.agent.output()
