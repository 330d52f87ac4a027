"""A claim whose GETs the API server fails is asked again on the lookup's
backoff and never sooner than a 429's Retry-After, however many pod events
arrive meanwhile (found by the fault storm, test/storm: every pod event used
to fetch every failing object again at once)."""
import threading
import time

from integration.agent_fixtures import wait_until
from integration.test_volume_lookups import PVC_PATH, claim_volume, gets, start_as_node

RETRY_AFTER = 3


def touch_pod_until(env, name, stop):
    """Pod events for kvolumed: an annotation changed every 0.2 s."""
    n = 0
    while not stop.is_set():
        obj = env.api.get("pods", "default", name)
        obj["metadata"].setdefault("annotations", {})["storm/touch"] = str(n)
        obj["metadata"].pop("resourceVersion", None)
        env.api.update(obj)
        n += 1
        stop.wait(0.2)


def run_storm(env, status, seconds):
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    start_as_node(env)
    env.api.fail_next(10 ** 6, status=status, retry_after=RETRY_AFTER if status == 429 else None,
                      path_prefix=PVC_PATH + "c1", method="GET")
    pod = env.pod("web", [claim_volume("data", "c1")])
    stop = threading.Event()
    toucher = threading.Thread(target=touch_pod_until, args=(env, "web", stop))
    toucher.start()
    try:
        wait_until(lambda: gets(env, PVC_PATH + "c1"), 10, what="the first GET of the claim")
        time.sleep(seconds)
    finally:
        stop.set()
        toucher.join(10)
    env.api.clear_faults()
    env.wait_mounted(env.target(pod, "pv-1"), timeout=20)
    return [r for r in gets(env, PVC_PATH + "c1") if r["status"] == status]


def test_retry_after_of_a_429_is_honoured_whatever_the_pod_events(volume_env):
    failed = run_storm(volume_env, 429, 7)
    assert len(failed) >= 2
    gaps = [b["time"] - a["time"] for a, b in zip(failed, failed[1:])]
    assert min(gaps) >= RETRY_AFTER - 0.05, gaps


def test_failed_gets_follow_the_backoff_whatever_the_pod_events(volume_env):
    failed = run_storm(volume_env, 500, 6)
    # volume/state/watches.h: 100 ms doubling to 3.2 s: at most 7 GETs in 6 s (and
    # the one before the window), where 35 pod events came.
    assert 3 <= len(failed) <= 8, [round(r["time"] - failed[0]["time"], 2) for r in failed]
