"""Secrets-style CSI drivers (KEP-596 users such as the Secrets Store CSI
driver): CSIDriver.spec.tokenRequests, requiresRepublish and
serviceAccountTokenInSecrets, end to end with the real kvolumed running as
the node, the fake API server (which answers TokenRequests under
NodeRestriction and records what it issued) and the mock driver."""
import hashlib
import json
import os
import re
import statistics
import time
import urllib.request

import pytest

from integration.agent_fixtures import DRIVER, wait_until, write_config

TOKENS_KEY = "csi.storage.k8s.io/serviceAccount.tokens"
SERVING = re.compile(r"Serving /metrics, /healthz, /volumes on (\S+)")
# Two audiences; the second needs Go's HTML-safe escapes in the JSON.
AUDIENCES = [{"audience": "vault", "expirationSeconds": 3600},
             {"audience": "https://sts.example.com/?a=1&b=<2>"}]


def inline(name, **csi):
    return {"name": name, "csi": {"driver": DRIVER, **csi}}


def start(env, interval="2s", metrics=False, conf="kvolumed.conf", agent_env=None):
    """kvolumed as the node, at debug level, with [csi] republish-interval;
    its log is <conf>.log."""
    path = write_config(env.tmp_path / conf, env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n',
                        csi=f"republish-interval = {interval}\n")
    if metrics:
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n"))
    env.agent = env.start_agent(path, env=agent_env)
    if metrics:
        env.agent.wait_for_log("Serving /metrics")
        return SERVING.search(env.agent.output()).group(1)
    return None


def make_driver(env, requests=AUDIENCES, republish=True, in_secrets=None, sa="builder"):
    env.api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": "default"}})
    spec = {"attachRequired": False, "podInfoOnMount": True, "volumeLifecycleModes": ["Ephemeral"],
            "requiresRepublish": republish}
    if requests:
        spec["tokenRequests"] = requests
    if in_secrets is not None:
        spec["serviceAccountTokenInSecrets"] = in_secrets
    env.csidriver(**spec)


def go_string(s):
    """A string as Go's encoding/json writes it (HTML-safe escapes)."""
    return json.dumps(s).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def expected_json(issued):
    """kubelet's value: json.Marshal(map[audience]TokenRequestStatus)."""
    return "{" + ",".join(
        f'{go_string(aud)}:{{"token":{go_string(t["token"])},"expirationTimestamp":'
        f'{go_string(t["expirationTimestamp"])}}}'
        for aud, t in sorted(issued.items())) + "}"


def audience_of(request):
    """The CSIDriver audience a recorded TokenRequest was for ("" for none)."""
    asked = request["spec"].get("audiences") or []
    return asked[0] if asked else ""


def issued_for(env, value):
    """The fake's records of the tokens found in a tokens JSON value."""
    tokens = json.loads(value)
    by_token = {r["token"]: r for r in env.api.token_requests()}
    return {aud: by_token[t["token"]] for aud, t in tokens.items()}


def publishes(env, target):
    return [c for c in env.calls("NodePublishVolume") if c["request"]["target_path"] == target]


def wait_publishes(env, target, count, timeout=20.0, code="OK"):
    return wait_until(lambda: (lambda p: p if len(p) >= count else None)(
        [c for c in publishes(env, target) if code is None or c["code"] == code]),
        timeout, what=lambda: f"{count} NodePublishVolume of {target}\n" + env.agent.output()[-3000:])


def tokens_seen(env):
    return {r["token"] for r in env.api.token_requests()}


def assert_no_token_leaked(env, metrics_address=None):
    """No token value in any log line (debug level), Event, request kvolumed
    sent, metric, or file under root-dir."""
    tokens = tokens_seen(env)
    assert tokens
    places = {"kvolumed's log": env.agent.output(),
              "events": json.dumps(env.api.list("events", None)[0]),
              "requests to the API": json.dumps([r["body"] for r in env.api.requests()])}
    if metrics_address:
        for path in ("/metrics", "/volumes"):
            with urllib.request.urlopen(f"http://{metrics_address}{path}", timeout=5) as r:
                places[path] = r.read().decode()
    for dirpath, _, files in os.walk(env.root):
        for name in files:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    places[path] = f.read().decode("utf-8", "replace")
    for where, text in places.items():
        for token in tokens:
            assert token not in text, f"a token in {where}"
            # Nor the part that makes it unique.
            assert token.rsplit(":", 1)[1] not in text, f"a token's nonce in {where}"


def test_tokens_in_context_at_publish_and_each_republish(volume_env):
    env = volume_env
    make_driver(env)
    metrics = start(env, interval="2s", metrics=True)
    pod = env.pod("web", [inline("secrets", volumeAttributes={TOKENS_KEY: "overridden"})],
                  serviceAccountName="builder")
    target = env.target(pod, "secrets")
    env.wait_mounted(target)
    calls = wait_publishes(env, target, 3)

    expirations = {}
    seen = set()
    for n, call in enumerate(calls):
        value = call["request"]["volume_context"][TOKENS_KEY]
        issued = issued_for(env, value)
        assert set(issued) == {"vault", AUDIENCES[1]["audience"]}
        # Exactly kubelet's JSON: keys sorted, token then expirationTimestamp, Go escapes.
        assert value == expected_json(issued)
        for aud, r in issued.items():
            assert audience_of(r) == aud
            assert r["spec"]["boundObjectRef"] == {"apiVersion": "v1", "kind": "Pod", "name": "web",
                                                   "uid": pod["metadata"]["uid"]}
            assert r["serviceAccount"] == "builder" and r["namespace"] == "default"
            # Fresh tokens each time, with a new expiry.
            assert r["token"] not in seen
            seen.add(r["token"])
            if n > 0:
                assert r["expirationTimestamp"] > expirations[aud], (n, aud)
            expirations[aud] = r["expirationTimestamp"]
        assert "secrets" not in call["request"]
    vault = [r for r in env.api.token_requests() if audience_of(r) == "vault"][0]
    assert vault["spec"]["expirationSeconds"] == 3600
    other = [r for r in env.api.token_requests() if audience_of(r) != "vault"][0]
    assert other["spec"]["audiences"] == [AUDIENCES[1]["audience"]]
    assert "expirationSeconds" not in other["spec"]
    # As the node, as NodeRestriction requires.
    token_posts = [r for r in env.api.requests() if r["path"].endswith("/serviceaccounts/builder/token")]
    assert token_posts and all(r["user"] == "system:node:test-node" and r["status"] == 201 for r in token_posts)

    # Routine, so at debug level, once the first publish was logged.
    log = env.agent.output()
    assert log.count("info: Volume secrets published for pod default/web") == 1
    assert "debug: Volume secrets republished for pod default/web" in log
    # Republishing never unmounted anything.
    assert os.path.ismount(target)
    assert not env.calls("NodeUnpublishVolume")
    assert_no_token_leaked(env, metrics)
    # The CSI request kvolumed logged at debug level shows the key, redacted.
    assert f'"{TOKENS_KEY}":"<redacted>"' in env.agent.output()


def test_tokens_in_secrets_only(volume_env):
    env = volume_env
    make_driver(env, republish=False, in_secrets=True)
    env.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "default"},
                    "data": {"password": "aHVudGVyMg=="}})
    start(env)
    pod = env.pod("web", [inline("secrets", nodePublishSecretRef={"name": "creds"})], serviceAccountName="builder")
    target = env.target(pod, "secrets")
    env.wait_mounted(target)
    call = wait_publishes(env, target, 1)[0]
    assert TOKENS_KEY not in call["request"]["volume_context"]
    assert call["request"]["volume_context"]["csi.storage.k8s.io/serviceAccount.name"] == "builder"
    # The call log holds keys for the values of secrets, and their digests.
    assert call["request"]["secrets"] == {"password": "password", TOKENS_KEY: TOKENS_KEY}
    assert call["secret_digests"]["password"] == hashlib.sha256(b"hunter2").hexdigest()
    requests = env.api.token_requests()
    assert len(requests) == 2
    issued = {audience_of(r): r for r in requests}
    assert call["secret_digests"][TOKENS_KEY] == hashlib.sha256(expected_json(issued).encode()).hexdigest()
    assert_no_token_leaked(env)
    # Without requiresRepublish, tokens are asked for once.
    assert len(publishes(env, target)) == 1


def test_persistent_volume_gets_tokens_and_republishes_without_staging_again(volume_env):
    env = volume_env
    env.api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "db", "namespace": "default"}})
    env.csidriver(attachRequired=False, requiresRepublish=True, tokenRequests=[{"audience": "vault"}],
                  serviceAccountTokenInSecrets=True)
    env.pv("pv-data", "vol-data", claim="data", fsType="ext4")
    env.pvc("data", "pv-data")
    start(env, interval="1s")
    pod = env.pod("db", [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}], serviceAccountName="db")
    target = env.target(pod, "pv-data")
    env.wait_mounted(target)
    calls = wait_publishes(env, target, 3)
    digests = set()
    for call in calls:
        assert call["request"]["staging_target_path"] == env.staging("vol-data")
        assert TOKENS_KEY not in call["request"].get("volume_context", {})
        digests.add(call["secret_digests"][TOKENS_KEY])
    assert len(digests) == len(calls)  # fresh tokens each time
    issued = {r["token"]: r for r in env.api.token_requests()}
    assert all(r["spec"]["boundObjectRef"]["name"] == "db" for r in issued.values())
    assert any(hashlib.sha256(expected_json({"vault": r}).encode()).hexdigest() == calls[-1]["secret_digests"][
        TOKENS_KEY] for r in issued.values())
    assert len(env.calls("NodeStageVolume")) == 1
    assert os.path.ismount(target) and os.path.ismount(env.staging("vol-data"))
    assert_no_token_leaked(env)
    env.api.remove("pods", "default", "db")
    env.wait_gone(os.path.dirname(target))
    env.wait_calls("NodeUnstageVolume")


def test_republish_comes_before_a_short_lived_token_expires(volume_env):
    env = volume_env
    make_driver(env, requests=[{"audience": "vault", "expirationSeconds": 3600}])
    # The server issues 10 s tokens whatever was asked: the expiry kvolumed
    # must follow is the one it got, not the one it asked for.
    env.api.configure(tokenMaxExpiration=10)
    start(env, interval="1m")
    pod = env.pod("web", [inline("secrets")], serviceAccountName="builder")
    target = env.target(pod, "secrets")
    env.wait_mounted(target)
    first, second = wait_publishes(env, target, 2, timeout=15)[:2]
    issued = issued_for(env, first["request"]["volume_context"][TOKENS_KEY])["vault"]
    expiry = time.mktime(time.strptime(issued["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    # Republished within the last 20-25 % of the token's life, well before it expired.
    assert second["time"] < expiry - 1.0, (second["time"], expiry)
    assert second["time"] - first["time"] >= 5.0
    again = issued_for(env, second["request"]["volume_context"][TOKENS_KEY])["vault"]
    assert again["expirationTimestamp"] > issued["expirationTimestamp"]


def test_failed_republish_keeps_the_volume_and_raises_an_event(volume_env):
    env = volume_env
    make_driver(env, requests=[{"audience": "vault"}])
    metrics = start(env, interval="2s", metrics=True)
    pod = env.pod("web", [inline("secrets")], serviceAccountName="builder")
    target = env.target(pod, "secrets")
    env.wait_mounted(target)
    wait_publishes(env, target, 1)

    def volumes():
        with urllib.request.urlopen(f"http://{metrics}/volumes", timeout=5) as r:
            return json.loads(r.read())

    # A non-final code: a first publish would be uncertain; a republish is not.
    env.driver.control.fail_next("NodePublishVolume", "UNAVAILABLE", "vault sealed", count=3)
    wait_publishes(env, target, 1, code="UNAVAILABLE")
    # Through the failures and the backoffs between them, the volume stays published.
    while len([c for c in publishes(env, target) if c["code"] == "UNAVAILABLE"]) < 3:
        state = volumes()
        assert state["published"] == 1 and state["uncertain"] == 0, state
        time.sleep(0.05)
    event = env.wait_event("FailedMount", "vault sealed", timeout=15)[0]
    assert event["type"] == "Warning" and event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert event["message"].startswith('MountVolume.SetUp failed for volume "secrets"')
    assert "(volume uncertain)" not in env.agent.output()
    # Retried with backoff, then republished again.
    failed = [c for c in publishes(env, target) if c["code"] == "UNAVAILABLE"]
    assert failed[1]["time"] - failed[0]["time"] >= 0.4
    ok_before = len([c for c in publishes(env, target) if c["code"] == "OK"])
    wait_publishes(env, target, ok_before + 1)
    assert os.path.ismount(target)

    # A TokenRequest that fails: no call, an Event, still mounted.
    calls_before = len(publishes(env, target))
    env.api.fail_next(2, 500, path_prefix="/api/v1/namespaces/default/serviceaccounts/builder/token",
                      method="POST")
    env.wait_event("FailedMount", 'failed to fetch token for audience "vault"', timeout=15)
    assert volumes()["published"] == 1
    wait_publishes(env, target, calls_before + 1)
    assert os.path.ismount(target)
    assert not env.calls("NodeUnpublishVolume")
    assert os.path.isdir(os.path.dirname(target))
    assert_no_token_leaked(env, metrics)


def test_republish_stops_when_the_pod_goes(volume_env):
    env = volume_env
    make_driver(env, requests=[{"audience": "vault"}])
    start(env, interval="1s")
    pods = {name: env.pod(name, [inline("secrets")], serviceAccountName="builder")
            for name in ("deleted", "finished", "clock")}
    targets = {name: env.target(p, "secrets") for name, p in pods.items()}
    for name in pods:
        wait_publishes(env, targets[name], 2)

    env.api.remove("pods", "default", "deleted")
    finished = env.api.get("pods", "default", "finished")
    finished["status"]["phase"] = "Succeeded"
    env.api.update(finished)
    for name in ("deleted", "finished"):
        env.wait_gone(os.path.dirname(targets[name]))
    gone_at = max(c["time"] for c in env.wait_calls("NodeUnpublishVolume", 2))
    # The running pod keeps republishing: two more of its republishes are
    # the clock that says the others had their chance.
    clock = len(publishes(env, targets["clock"]))
    wait_publishes(env, targets["clock"], clock + 2)
    for name in ("deleted", "finished"):
        unpublished = [c["time"] for c in env.calls("NodeUnpublishVolume")
                       if c["request"]["target_path"] == targets[name]][0]
        assert all(c["time"] < unpublished for c in publishes(env, targets[name])), name
    assert all(r["time"] < gone_at or r["spec"]["boundObjectRef"]["name"] == "clock"
               for r in env.api.token_requests())


def test_restart_republishes_promptly(volume_env):
    env = volume_env
    make_driver(env, requests=[{"audience": "vault"}])
    start(env, interval="20s")
    pod = env.pod("web", [inline("secrets")], serviceAccountName="builder")
    target = env.target(pod, "secrets")
    env.wait_mounted(target)
    wait_publishes(env, target, 1)
    env.agent.stop()
    tokens_before = tokens_seen(env)

    with open(env.agent.log_path) as f:
        first_log = f.read()
    restarted = time.time()
    start(env, interval="20s", conf="restarted.conf")
    # Tokens are never on disk: the reconstructed publish is republished
    # within min(interval/4, 15 s) = 5 s, not 15-20 s later.
    second = wait_publishes(env, target, 2, timeout=15)[1]
    assert second["time"] - restarted < 10.0
    assert os.path.ismount(target)
    assert not env.calls("NodeUnpublishVolume")
    fresh = issued_for(env, second["request"]["volume_context"][TOKENS_KEY])["vault"]
    assert fresh["token"] not in tokens_before
    assert_no_token_leaked(env)
    assert not any(t in first_log for t in tokens_seen(env))


def schedules(path):
    """{pod UID: [(scheduled, due), ...]} in the order kvolumed drew them:
    the wall-clock times of its "republish-scheduled" and "republish-due"
    trace lines (KVOLUMED_TEST_TRACE_FILE, volume/kinds/csi/republish.c)."""
    drawn, out = {}, {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        usec, step, uid = line.split()
        if step == "republish-scheduled":
            drawn[uid] = int(usec) / 1e6
        elif step == "republish-due":
            out.setdefault(uid, []).append((drawn.pop(uid), int(usec) / 1e6))
    return out


# It reads the delays kvolumed drew for the first republishes (the trace of
# volume/kinds/csi/republish.c), not when the calls reached the driver: other work's
# CPU (CI6 and CI7, beside a loop of builds) delays the loop and delivers
# what was due in a burst, which says nothing of the jitter.  Serial all
# the same: 100 pods' republishes every 4 s is load of its own.
@pytest.mark.serial
def test_hundred_pods_spread_their_republishes(volume_env):
    env = volume_env
    make_driver(env, requests=[])
    interval = 4.0
    trace = str(env.tmp_path / "trace")
    start(env, interval="4s", agent_env={"KVOLUMED_TEST_TRACE_FILE": trace})
    pods = [env.pod(f"p{i:03d}", [inline("v")]) for i in range(100)]
    uids = {env.target(p, "v"): p["metadata"]["uid"] for p in pods}

    def republished():
        by_target = {}
        for c in env.calls("NodePublishVolume"):
            if c["code"] == "OK":
                by_target.setdefault(c["request"]["target_path"], []).append(c["time"])
        return by_target if all(len(by_target.get(t, [])) >= 2 for t in uids) else None
    by_target = wait_until(republished, 90, interval=0.2, what="every pod republished")
    drawn = schedules(trace)
    first = {t: drawn[uid][0] for t, uid in uids.items()}
    delays = [due - scheduled for scheduled, due in first.values()]
    # The first republish falls over the second half of the interval, at
    # random (kvolumed's own draw: exact, whatever the machine's load).
    assert min(delays) >= interval * 0.5 - 0.001, min(delays)
    assert max(delays) <= interval + 0.001, max(delays)
    assert max(delays) - min(delays) >= interval * 0.25, delays
    assert statistics.pstdev(delays) >= interval * 0.08, delays
    # Not in lockstep: no 100 ms of the times they were due holds a quarter.
    times = sorted(due for _, due in first.values())
    busiest = max(sum(1 for u in times if t <= u < t + 0.1) for t in times)
    assert busiest < 25, busiest
    # And the schedule is the one followed: no republish reached the driver
    # before it was due (a busy machine only makes them later).
    for t, (_, due) in first.items():
        assert by_target[t][1] >= due - 0.01, (t, by_target[t][1], due)
    for p in pods:
        env.api.remove("pods", "default", p["metadata"]["name"])
    wait_until(lambda: not os.listdir(f"{env.root}/pods"), 60, interval=0.2, what="every pod torn down")