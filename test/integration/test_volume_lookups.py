"""How kvolumed reads the PVCs, PVs and VolumeAttachments its pods need: by
GET only, as a node may (the Node authorizer refuses it any list or watch of
them, kubelet-facts §14), one cached answer per object shared by every pod,
fetched again with a short backoff while it is not final, on the Node's and
pods' events, and with 403s (the authorizer's lag) retried before they are
reported."""
import hashlib
import time

from integration.agent_fixtures import DRIVER, answered_requests, wait_until, write_config

UNIQUE = f"kubernetes.io/csi/{DRIVER}^"
PLURALS = ("persistentvolumeclaims", "persistentvolumes", "volumeattachments")
PVC_PATH = "/api/v1/namespaces/default/persistentvolumeclaims/"
PV_PATH = "/api/v1/persistentvolumes/"
VA_PATH = "/apis/storage.k8s.io/v1/volumeattachments/"
# volume/state/watches.h: the backoff's cap, and when a refusal gets reported.
RETRY_MAX = 3.2
FORBIDDEN_ATTEMPTS = 5
FORBIDDEN_SECONDS = 3.0


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def attachment_name(handle):
    return "csi-" + hashlib.sha256((handle + DRIVER + "test-node").encode()).hexdigest()


def start_as_node(env):
    """kvolumed with the node's own identity (system:node:test-node): the
    fake's Node authorizer refuses it whatever a real one would."""
    config = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                          f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n')
    env.agent = env.start_agent(config)
    return env.agent


def refused(env, since=0.0, until=float("inf")):
    return [(r["method"], r["path"]) for r in env.api.requests()
            if r["status"] in (401, 403) and since <= r["time"] < until]


def gets(env, path, since=0.0):
    """The GETs of exactly one object, in order."""
    return [r for r in env.api.requests() if r["method"] == "GET" and r["path"] == path and r["time"] >= since]


def lists_or_watches(env):
    """Every request for these kinds that is not a GET of one named object."""
    bad = []
    for r in env.api.requests():
        parts = [p for p in r["path"].split("/") if p]
        kinds = [i for i, p in enumerate(parts) if p in PLURALS]
        if not kinds:
            continue
        named = kinds[-1] == len(parts) - 2
        if r["method"] != "GET" or not named or r["watch"] or "watch" in r["query"]:
            bad.append((r["method"], r["path"], r["query"]))
    return bad


def test_pvc_volume_mounted_by_get_only(volume_env):
    """(a) under the node's identity: no list or watch of PVCs, PVs or
    VolumeAttachments, ever, nothing refused; once mounted, nothing is
    fetched again: the objects are in their final state."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    start_as_node(env)
    pod = env.pod("web", [claim_volume("data", "c1")])
    env.wait_mounted(env.target(pod, "pv-1"))
    # The mount is there before the publish is done: the publish still reads
    # the claim for its size (kubelet's expandVolumeDuringMount).
    env.agent.wait_for_log("Volume pv-1 published for pod default/web", timeout=10)

    assert lists_or_watches(env) == []
    assert refused(env) == []
    answered = answered_requests(env.api, lambda r: r["method"] == "GET")
    assert [r["status"] for r in answered if r["path"] == PVC_PATH + "c1"][-1] == 200
    assert [r["status"] for r in answered if r["path"] == PV_PATH + "pv-1"][-1] == 200

    # Steady state: nothing about the volume is read again.
    mounted = time.time()
    time.sleep(RETRY_MAX + 1)
    later = [r["path"] for r in env.api.requests() if r["time"] > mounted and any(p in r["path"] for p in PLURALS)]
    assert later == []
    assert lists_or_watches(env) == []
    assert refused(env) == []


def test_claim_bound_late_is_mounted_by_backoff_gets(volume_env):
    """(b) nothing tells a node that its claim was bound: GETs with a short
    backoff find it, well before any resync would."""
    env = volume_env
    env.csidriver(attachRequired=False)
    start_as_node(env)
    pod = env.pod("web", [claim_volume("data", "late")])
    env.wait_event("FailedMount", 'persistentvolumeclaim "late" not found')
    env.pvc("late")
    env.wait_event("FailedMount", "error processing PVC default/late: PVC is not bound")
    env.pv("pv-late", "vol-late", claim="late")
    bound = time.time()
    env.bind("late", "pv-late")
    env.wait_mounted(env.target(pod, "pv-late"))
    elapsed = time.time() - bound
    assert elapsed < 2.0, f"mounted {elapsed:.2f}s after the claim was bound"

    # The GETs of the claim were spaced by the backoff, never a hot loop.
    # (The expansion check reads the claim once more when the volume is
    # published, as kubelet looks at a volume's size when it mounts it.)
    published = env.wait_calls("NodePublishVolume")[0]["time"]
    times = [r["time"] for r in gets(env, PVC_PATH + "late") if r["time"] < published]
    assert len(times) >= 3
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert min(gaps) >= 0.08, gaps
    assert max(gaps) <= RETRY_MAX + 1.0, gaps
    assert lists_or_watches(env) == []
    assert refused(env) == []


def test_pods_sharing_a_claim_cost_one_get(volume_env):
    """(c) 20 pods on one claim: the claim and its PV are each fetched once
    (twice when pods arrive while the first GET is in flight), not per pod."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-shared", "vol-shared", claim="shared")
    env.pvc("shared", "pv-shared")
    start_as_node(env)
    pods = [env.pod(f"p{i}", [claim_volume("data", "shared")]) for i in range(20)]
    for pod in pods:
        env.wait_mounted(env.target(pod, "pv-shared"), timeout=30)

    pvc_gets, pv_gets = gets(env, PVC_PATH + "shared"), gets(env, PV_PATH + "pv-shared")
    assert 1 <= len(pvc_gets) <= 2, [r["time"] for r in pvc_gets]
    assert 1 <= len(pv_gets) <= 2, [r["time"] for r in pv_gets]
    assert lists_or_watches(env) == []
    assert refused(env) == []


def test_attach_wait_ends_on_node_update(volume_env):
    """(d) the attach wait: the VolumeAttachment is fetched with the backoff
    while not attached, and again at once when the Node's
    status.volumesAttached changes, as the attach/detach controller writes it
    after the VolumeAttachment is attached."""
    env = volume_env
    env.csidriver(attachRequired=True)
    env.pv("pv-att", "vol-att", claim="att")
    env.pvc("att", "pv-att")
    va_name = attachment_name("vol-att")
    va_path = VA_PATH + va_name
    start_as_node(env)
    pod = env.pod("web", [claim_volume("data", "att")])
    unique = UNIQUE + "vol-att"
    wait_until(lambda: unique in (env.node().get("status") or {}).get("volumesInUse", []), what="volumesInUse")

    # The attach/detach controller creates the VolumeAttachment; the attacher
    # has not attached it yet.
    va_created = time.time()
    va = env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                         "metadata": {"name": va_name},
                         "spec": {"attacher": DRIVER, "nodeName": "test-node",
                                  "source": {"persistentVolumeName": "pv-att"}},
                         "status": {"attached": False}})
    # Let the backoff reach its cap, and act just after a GET: the next one
    # by the backoff is RETRY_MAX away.
    def at_cap():
        t = [r["time"] for r in gets(env, va_path)]
        return len(t) >= 2 and t[-1] - t[-2] >= RETRY_MAX - 0.3
    wait_until(at_cap, timeout=20, interval=0.01, what="the VolumeAttachment's GETs at the backoff's cap")
    assert not env.calls("NodeStageVolume")

    va["status"] = {"attached": True, "attachmentMetadata": {"lun": "7"}}
    va["metadata"].pop("resourceVersion", None)
    env.api.update(va)
    node = env.node()
    node["status"]["volumesAttached"] = [{"name": unique, "devicePath": ""}]
    env.api.update(node)
    updated = time.time()

    refetch = wait_until(lambda: gets(env, va_path, since=updated), timeout=RETRY_MAX, what="a GET after the update")
    assert refetch[0]["time"] - updated < 1.0, "not fetched on the Node update"
    env.wait_mounted(env.target(pod, "pv-att"))
    assert time.time() - updated < RETRY_MAX
    assert env.wait_calls("NodeStageVolume")[0]["request"]["publish_context"] == {"lun": "7"}

    # While it waited: GETs spaced by the backoff (and one per Node update),
    # no list or watch.
    times = [r["time"] for r in gets(env, va_path)]
    assert len(times) <= 14, times
    assert lists_or_watches(env) == []
    # The Node authorizer refuses a VolumeAttachment that does not exist yet
    # (it is in no graph); nothing else is refused.
    assert [r for r in refused(env, until=va_created) if r[1] != va_path] == []
    assert refused(env, since=va_created) == []


def test_refused_get_is_retried(volume_env):
    """(e) with a broad identity, three 403s injected on the claim's GETs:
    retried with the backoff, mounted, nothing reported."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    env.api.fail_next(3, status=403, path_prefix=PVC_PATH + "c1", method="GET")
    env.start()
    pod = env.pod("web", [claim_volume("data", "c1")])
    env.wait_mounted(env.target(pod, "pv-1"))

    assert [r["status"] for r in gets(env, PVC_PATH + "c1")][:4] == [403, 403, 403, 200]
    assert not [e for e in env.events() if e.get("reason") == "FailedMount"]


def test_authorizer_lag_is_retried(volume_env):
    """(e) as a real API server does it: the Node authorizer's graph does not
    have the new pod for a moment, so its claim is refused (403) to the node;
    the GETs are retried and the volume mounts, nothing reported."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    start_as_node(env)
    env.api.set_graph_lag(2.0)
    pod = env.pod("web", [claim_volume("data", "c1")])
    env.wait_mounted(env.target(pod, "pv-1"))

    # A request's effect comes before its answer is logged: wait for the answers.
    statuses = [r["status"] for r in answered_requests(
        env.api, lambda r: r["method"] == "GET" and r["path"] == PVC_PATH + "c1")]
    assert statuses[0] == 403 and statuses[-1] == 200, statuses
    assert not [e for e in env.events() if e.get("reason") == "FailedMount"]
    assert lists_or_watches(env) == []


def test_persistent_refusal_is_reported_without_hot_retries(volume_env):
    """(f) a claim refused for as long as the Node authorizer does not relate
    the pod to the node: a FailedMount Event with the server's message once
    the refusal persisted, GETs at the backoff's cap, and the volume mounts
    as soon as the server allows it."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    start_as_node(env)
    env.api.set_graph_lag(3600)
    created = time.time()
    pod = env.pod("web", [claim_volume("data", "c1")])

    event = env.wait_event("FailedMount", "is forbidden", timeout=15)[0]
    assert event["message"].startswith('Waiting for volume "data": persistentvolumeclaims "c1" is forbidden: '
                                       'User "system:node:test-node" cannot get resource'), event["message"]
    # Reported only after the refusal persisted.
    denied = gets(env, PVC_PATH + "c1")
    assert len(denied) >= FORBIDDEN_ATTEMPTS and all(r["status"] == 403 for r in denied)
    assert denied[-1]["time"] - denied[0]["time"] >= FORBIDDEN_SECONDS - 0.2
    assert denied[0]["time"] - created < 2.0

    # No hot loop: over a few seconds, the GETs come at the cap.
    window_start = time.time()
    time.sleep(2 * RETRY_MAX)
    window = gets(env, PVC_PATH + "c1", since=window_start)
    assert 1 <= len(window) <= 3, [r["time"] - window_start for r in window]
    assert not env.calls("NodePublishVolume")
    events = [e for e in env.events() if e.get("reason") == "FailedMount"]
    assert len(events) == 1 and events[0].get("count", 1) == 1, events

    # Not failed for good: allowed, it mounts.
    env.api.set_graph_lag(0)
    env.wait_mounted(env.target(pod, "pv-1"), timeout=RETRY_MAX + 5)
    assert lists_or_watches(env) == []


def test_a_deleted_pods_claim_is_not_read_again(volume_env):
    """A pod waits for its claim to be bound, and kvolumed GETs the claim
    with the lookup backoff.  Once the pod is deleted the Node authorizer no
    longer lets the node read that claim: kvolumed must stop asking (before,
    the lookup lived until the next full pass, minutes away: a 403 every
    3.2 s, and after five of them a warning about a pod that is gone; the
    storm's 403s after an API outage were these)."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pvc("never")
    agent = start_as_node(env)
    env.pod("web", [claim_volume("data", "never")])
    wait_until(lambda: len(gets(env, PVC_PATH + "never")) >= 3, 10, what="three GETs of the pending claim")
    env.api.delete("pods", "default", "web", grace_period_seconds=0)
    time.sleep(0.5)  # the deletion's watch event reaches kvolumed (a GET then in flight ends)
    deleted = time.time()
    # Two backoff steps at their cap, and the 3 s of refusals that make the warning.
    time.sleep(2 * RETRY_MAX)
    after = [round(r["time"] - deleted, 2) for r in gets(env, PVC_PATH + "never", since=deleted)]
    assert after == [], f"GETs of the deleted pod's claim, s after its deletion: {after}"
    assert "refused" not in agent.output()
    assert "No longer looking up PersistentVolumeClaim/default/never" in agent.output()
