"""The safety-net resync rolls over the node in slices (issue 31): each
round looks at every pod and volume once, a few at a time, spread over
resync-interval, instead of one full pass that grew with the node.  What
the full pass guaranteed, the round still does: every lookup read again
(final answers too), the lookups no pod uses any more swept, retries kept
at their backoff.  Each slice is a scoped pass, which the suite's
KVOLUMED_TEST_VERIFY_INCREMENTAL checks against a full one like any other.
Here resync-interval is 1 s and a slice two pods and two volumes."""
import os
import re
import time

from integration.agent_fixtures import DRIVER, trace_lines, wait_until

PVC_PATH = "/api/v1/namespaces/default/persistentvolumeclaims/"
PV_PATH = "/api/v1/persistentvolumes/"
ROLLING = {"agent": "resync-interval = 1s\n", "env": {"KVOLUMED_TEST_RESYNC_SLICE_ITEMS": "2"}}


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def gets(env, path, since=0.0):
    return [r for r in env.api.requests() if r["method"] == "GET" and r["path"] == path and r["time"] >= since]


def claims(env, n):
    env.csidriver(attachRequired=False)
    for i in range(n):
        env.pv(f"pv-{i}", f"vol-{i}", claim=f"c{i}")
        env.pvc(f"c{i}", f"pv-{i}")


def mounted_pods(env, n):
    pods = [env.pod(f"p{i}", [claim_volume("data", f"c{i}")]) for i in range(n)]
    for i, p in enumerate(pods):
        env.wait_mounted(env.target(p, f"pv-{i}"), timeout=60)
    return pods


def test_a_round_takes_every_pod_and_volume_in_slices(volume_env, tmp_path):
    env = volume_env
    claims(env, 5)
    trace = str(tmp_path / "trace")
    env.start(agent=ROLLING["agent"], env={**ROLLING["env"], "KVOLUMED_TEST_TRACE_FILE": trace})
    mounted_pods(env, 5)
    # Five pods and five volumes: three slices of at most two of each.
    env.agent.wait_for_log("Resync: a round over 5 pods and 5 volumes, in 3 slices", timeout=60)
    slices = [(int(p), int(v)) for p, v in
              re.findall(r"Resync: a slice of (\d+) pods and (\d+) volumes", env.agent.output())]
    assert slices and all(p <= 2 and v <= 2 for p, v in slices), slices
    # Each slice is in the trace too, where test/bench/resync.sh tells the
    # pods that met one from the others.
    def traced():
        return [tuple(int(n) for n in key.split("+")) for _, step, key in trace_lines(trace)
                if step == "resync-slice"]
    wait_until(lambda: len(traced()) >= len(slices), 10, what="the slices in the trace")
    assert traced()[:len(slices)] == slices
    # A bound claim's PV is a final answer, read again only by its pod's
    # slice: one re-created by hand under the same name is noticed (and the
    # running pod keeps what it resolved).
    env.api.remove("persistentvolumes", None, "pv-3")
    env.pv("pv-3", "vol-other", claim="c3")
    env.wait_event("VolumeSourceChanged", "vol-other", timeout=60)


def test_the_round_sweeps_the_lookups_of_a_deleted_pod(volume_env):
    """A deleted pod's claim and PV have final answers: kept for pods that
    may still want them, until a sweep finds that no pass looked them up
    since its round began.  The round's end sweeps them (once, the full
    pass of the resync did); then nothing reads them again."""
    env = volume_env
    claims(env, 3)
    env.start(**ROLLING)
    mounted_pods(env, 3)
    env.api.remove("pods", "default", "p1")
    env.agent.wait_for_log("No longer looking up PersistentVolumeClaim/default/c1", timeout=60)
    env.agent.wait_for_log("No longer looking up PersistentVolume//pv-1", timeout=60)
    swept = time.time()
    # Rounds go on (their slices read the other pods' claims), without these.
    wait_until(lambda: gets(env, PVC_PATH + "c0", since=swept) and gets(env, PVC_PATH + "c2", since=swept), 60,
               what="a later round reading the other claims")
    assert not gets(env, PVC_PATH + "c1", since=swept + 0.5)
    assert "No longer looking up PersistentVolumeClaim/default/c0" not in env.agent.output()


def test_a_failing_publish_keeps_its_backoff_across_slices(volume_env):
    """A publish that fails is retried at its backoff (500 ms, doubling),
    whatever slices plan its volume meanwhile: a slice neither retries it
    early nor loses its retry."""
    env = volume_env
    claims(env, 3)
    env.start(**ROLLING)
    env.driver.control.fail_next("NodePublishVolume", "INTERNAL", "disk on fire", count=1000)
    pods = [env.pod(f"p{i}", [claim_volume("data", f"c{i}")]) for i in range(3)]
    env.wait_calls("NodePublishVolume", 3, timeout=60)
    seen = len(env.agent.output())
    # Two rounds of slices over the failing volumes, then the driver heals.
    wait_until(lambda: env.agent.output()[seen:].count("Resync: a round over") >= 2, 60,
               what="two resync rounds while the publishes fail")
    env.driver.control.clear_faults("NodePublishVolume")
    for i, p in enumerate(pods):
        env.wait_mounted(env.target(p, f"pv-{i}"), timeout=60)
    env.wait_calls("NodePublishVolume", 1, code="OK", timeout=60)
    by_volume = {}
    for c in env.calls("NodePublishVolume"):
        by_volume.setdefault(c["request"]["volume_id"], []).append(c["time"])
    for volume, times in by_volume.items():
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert gaps, (volume, times)
        # 500 ms, then doubling: never earlier, however many slices came between.
        assert all(g >= 0.45 * 2 ** i for i, g in enumerate(gaps)), (volume, gaps)


def test_pods_come_and_go_while_rounds_roll(volume_env):
    """Pods created and deleted in bursts while rounds roll (a round a
    second, two items a slice): whatever a burst's events land on (the pod
    or volume under a round's cursor, a slice's pass, the pass that ends a
    round and sweeps its lookups), every deleted pod's volumes are
    unpublished and every new pod's published, and a pod that shares a
    claim with a deleted one keeps its mount.  The suite's
    KVOLUMED_TEST_VERIFY_INCREMENTAL makes kvolumed abort should any pass
    have missed what a full one plans.  A wave waits for a round to begin
    after its burst, so that bursts meet rounds at ever other points.
    Not timing-sensitive: it waits for what must happen, whenever."""
    env = volume_env
    n = 6
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    for i in range(n):
        env.pv(f"pv-{i}", f"vol-{i}", claim=f"c{i}")
        env.pvc(f"c{i}", f"pv-{i}")
    env.start(**ROLLING)

    def volumes(w, i):
        # Waves rotate which claim a pod has, so a claim a deleted pod
        # looked up (kept, final, until a round's end sweeps it) is wanted
        # again by a later wave's pod; every pod shares c0 with the keeper.
        return [claim_volume("data", f"c{data(w, i)}"), claim_volume("shared", "c0"),
                {"name": "scratch", "csi": {"driver": DRIVER}}]

    def data(w, i):
        return 1 + (i + w) % (n - 1)

    def targets(name, p):
        # A PV's target is named after the PV, an inline volume's after the pod's volume.
        w, i = (int(x) for x in name[1:].split("-p"))
        return [env.target(p, f"pv-{data(w, i)}"), env.target(p, "pv-0"), env.target(p, "scratch")]

    keeper = env.pod("keeper", [claim_volume("shared", "c0")])
    env.wait_mounted(env.target(keeper, "pv-0"), timeout=60)
    live = {}
    for w in range(10):
        seen = len(env.agent.output())
        burst = {f"w{w}-p{i}": env.pod(f"w{w}-p{i}", volumes(w, i)) for i in range(4)}
        gone = dict(list(live.items())[: len(live) // 2 + 1]) if live else {}
        for name in gone:
            env.api.remove("pods", "default", name)
        live = {k: v for k, v in live.items() if k not in gone}
        live.update(burst)
        for name, p in burst.items():
            for t in targets(name, p):
                env.wait_mounted(t, timeout=90)
        for name, p in gone.items():
            for t in targets(name, p):
                env.wait_gone(t, timeout=90)
        assert os.path.ismount(env.target(keeper, "pv-0"))
        wait_until(lambda: env.agent.output()[seen:].count("Resync: a round over") >= 1, 60,
                   what="a resync round after the burst")
    for name in list(live):
        env.api.remove("pods", "default", name)
    for name, p in live.items():
        for t in targets(name, p):
            env.wait_gone(t, timeout=90)
    assert os.path.ismount(env.target(keeper, "pv-0"))
    assert env.agent.proc.poll() is None
