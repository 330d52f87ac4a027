"""The pod volumes by state are kept as things change (volume/state/counts.c),
not counted by a walk of the node at each STATUS= update (issue 31): every
change a pod volume's state is judged from marks its pod or volume, and a
read judges again only those.  kvolumed_volumes{state}, STATUS= and
/volumes' "states" read those counts; /volumes' pod_volumes and `kvolumed
status` judge each pod volume (the walk).  One volume driven through every
state — published, pending, failed by a CSI error, failed for its claim,
failed for its driver, tearing down, gone — must read the same in all of
them after each step (issue 34, item 1), and the counts must equal the walk
after every pass (KVOLUMED_TEST_VERIFY_INCREMENTAL: "Incremental pass
missed" otherwise).  A change that forgot to mark its pod or volume leaves
a count behind, and this test fails."""
from integration.agent_fixtures import DRIVER, wait_until
from integration.test_agent_localapi import sockdir  # noqa: F401 (a fixture)
from integration.test_agent_stuck_volume import OTHER_DRIVER, claim, everywhere, start


# After a fault is cleared: the retry comes after the backoff the failures
# earned meanwhile, which doubles up to kubelet's 2 min 2 s on a slow machine.
RETRIED = 180


def settled(env, sock, address, notify, kvolumed_bin, want, what):
    """Waits until every tool counts `want`, then checks the counts kept
    equalled the walk after each pass so far."""
    seen = []

    def agreed():
        got = everywhere(env, sock, address, notify, kvolumed_bin)()
        seen.append(got)
        return got if got and got["metric"] == want else None
    try:
        wait_until(agreed, timeout=60, interval=0.5, what=what)
    except AssertionError as e:
        raise AssertionError(f"{e}; want {want}") from None
    missed = [line for line in env.agent.output().splitlines() if "Incremental pass missed" in line]
    assert not missed, "\n".join(missed[:10])


def test_every_state_counts_the_same_in_every_tool(volume_env, sockdir, notify_socket, kvolumed_bin):  # noqa: F811
    """~45 s: the driver-missing failure comes after the registration grace (20 s)."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    for name in ("a", "b", "c"):
        env.pv(f"pv-{name}", f"h-{name}", claim=f"c-{name}")
        env.pvc(f"c-{name}", f"pv-{name}")
    env.pv("pv-x", "h-x", claim="c-x", driver=OTHER_DRIVER)
    env.pvc("c-x", "pv-x")
    env.pvc("c-late")
    sock, address = start(env, sockdir, notify_socket)

    def want(published=0, pending=0, failed=0, tearing_down=0, what=""):
        settled(env, sock, address, notify_socket, kvolumed_bin,
                {"published": published, "pending": pending, "failed": failed, "tearing-down": tearing_down},
                what)

    # Published.
    a = env.pod("a", [claim("data", "c-a")])
    env.wait_mounted(env.target(a, "pv-a"), timeout=30)
    want(published=1, what="a published")

    # Pending: its NodePublishVolume in flight; then published.
    env.driver.control.hang("NodePublishVolume", count=1)
    b = env.pod("b", [claim("data", "c-b")])
    env.driver.control.wait_hung("NodePublishVolume", timeout=30)
    want(published=1, pending=1, what="b pending while its publish hangs")
    env.driver.control.release("NodePublishVolume")
    env.wait_mounted(env.target(b, "pv-b"), timeout=30)
    want(published=2, what="b published")

    # Failed by the driver (a backoff), then published once it answers.
    env.driver.control.fail_next("NodePublishVolume", "INTERNAL", "backend lost the volume", count=1000)
    c = env.pod("c", [claim("data", "c-c")])
    env.wait_calls("NodePublishVolume", 1, code="INTERNAL", timeout=30)
    want(published=2, failed=1, what="c failed with INTERNAL")
    env.driver.control.clear_faults("NodePublishVolume")
    env.wait_mounted(env.target(c, "pv-c"), timeout=RETRIED)
    want(published=3, what="c published after its retry")

    # Failed for its claim (not bound), then published once it is.
    late = env.pod("late", [claim("data", "c-late")])
    want(published=3, failed=1, what="late failed: its claim is not bound")
    env.pv("pv-late", "h-late", claim="c-late")
    env.bind("c-late", "pv-late")
    env.wait_mounted(env.target(late, "pv-late"), timeout=60)
    want(published=4, what="late published once its claim is bound")

    # An inline volume (one pod wants it: not among the persistent wanters).
    eph = env.pod("eph", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(eph, "scratch"), timeout=30)
    want(published=5, what="the inline volume published")

    # Failed for its driver: no CSIDriver, never registered, after the grace.
    env.pod("nodriver", [claim("data", "c-x")])
    want(published=5, failed=1, what="nodriver failed: its driver is missing")

    # Tearing down: the pod gone while its NodeUnpublishVolume hangs.
    env.driver.control.hang("NodeUnpublishVolume", count=1)
    env.api.remove("pods", "default", "a")
    env.driver.control.wait_hung("NodeUnpublishVolume", timeout=30)
    want(published=4, failed=1, tearing_down=1, what="a tearing down while its unpublish hangs")
    env.driver.control.release("NodeUnpublishVolume")
    env.wait_gone(env.target(a, "pv-a"), timeout=30)
    want(published=4, failed=1, what="a torn down")

    # Torn down while failing: an unpublish that fails is still tearing down.
    env.driver.control.fail_next("NodeUnpublishVolume", "INTERNAL", "busy", count=1000)
    env.api.remove("pods", "default", "eph")
    env.wait_calls("NodeUnpublishVolume", 1, code="INTERNAL", timeout=30)
    want(published=3, failed=1, tearing_down=1, what="eph tearing down, its unpublish failing")
    env.driver.control.clear_faults("NodeUnpublishVolume")
    env.wait_gone(env.target(eph, "scratch"), timeout=RETRIED)
    want(published=3, failed=1, what="eph torn down after its retry")

    # Everything goes.
    for name in ("b", "c", "late", "nodriver"):
        env.api.remove("pods", "default", name)
    for pod, spec in ((b, "pv-b"), (c, "pv-c"), (late, "pv-late")):
        env.wait_gone(env.target(pod, spec), timeout=30)
    want(what="nothing left")
