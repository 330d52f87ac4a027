"""One truth about a stuck volume (issue 34, item 1): the metric
kvolumed_volumes{state}, sd_notify STATUS=, /volumes (with ?pod= and
?state=), the local API and `kvolumed status` say the same thing in the same
words (published, pending, failed, tearing-down) with the same counts; a pod
is found from its desired state, not only from its publishes.  And the
metrics an operator alerts on (item 6): failed volumes by reason (the
tenant's or the node's) and driver, the age of the oldest unready volume, a
driver's registration, the last successful API request."""
import json
import os
import re
import subprocess
import time

from integration.agent_fixtures import DRIVER, wait_until
from integration.test_agent_localapi import api_config, api_get, sockdir, status  # noqa: F401 (a fixture)
from integration.test_agent_metrics import SERVING, get, samples

OTHER_DRIVER = "unknown.csi.example.com"  # no CSIDriver object, never registered
STATES = ("failed", "pending", "published", "tearing-down")


def claim(name, claim_name):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def start(env, sockdir, notify):
    sock = os.path.join(sockdir, "run", "kvolumed.sock")
    env.agent = env.start_agent(api_config(env, sock, metrics="127.0.0.1:0"), notify=notify)
    env.agent.wait_for_log("Serving the local volumes API", timeout=30)
    return sock, SERVING.search(env.agent.output()).group(1)


def metrics(address):
    return samples(get(address, "/metrics")[2])


def metric_states(address, notify=None):
    """kvolumed_volumes by state.  notify: read STATUS= meanwhile (a notify
    socket nobody reads fills up, and sd_notify then blocks kvolumed)."""
    if notify:
        notify.drain(0.05)
    s = metrics(address)
    return {st: s.get(f'kvolumed_volumes{{state="{st}"}}') for st in STATES}


def newest_status(notify):
    notify.drain(0.2)
    lines = [line for m in notify.messages for line in m.split("\n") if line.startswith("STATUS=")]
    return lines[-1][len("STATUS="):] if lines else ""


def status_counts(text):
    """{state: n} of a STATUS= line: "... N pod volumes published, N pending, N failed, N tearing-down..."."""
    m = re.search(r": (\d+) pod volumes? published, (\d+) pending, (\d+) failed, (\d+) tearing-down", text)
    return dict(zip(("published", "pending", "failed", "tearing-down"), map(int, m.groups()))) if m else None


def table(kvolumed_bin, sock, *args):
    """(exit code, rows as [pod, volume, driver, state, path, reason], stderr) of `kvolumed status`."""
    r = status(kvolumed_bin, "--socket", sock, *args)
    lines = r.stdout.splitlines()
    rows = [re.split(r"  +", line, maxsplit=5) for line in lines[1:]] if lines and lines[0].startswith("POD") else []
    return r.returncode, rows, r.stderr


def everywhere(env, sock, address, notify, kvolumed_bin):
    """The counts by state of each tool, once they agree with the metric
    (each is read from a moment of its own: they settle, then agree)."""
    def read():
        want = metric_states(address, notify)
        doc = api_get(sock, "/volumes")[1]
        from_json = {st: sum(1 for p in doc["pod_volumes"] if p["state"] == st) for st in STATES}
        code, rows, _ = table(kvolumed_bin, sock)
        from_table = {st: sum(1 for r in rows if r[3] == st and r[0] != "-") for st in STATES}
        got = {"metric": want, "STATUS=": status_counts(newest_status(notify)), "/volumes": doc["states"],
               "/volumes pod_volumes": from_json, "status table": from_table}
        return got if all(v == want for v in got.values()) and code == 0 else None
    return read


def test_a_stuck_volume_reads_the_same_in_every_tool(volume_env, sockdir, notify_socket, kvolumed_bin):
    """The four failures of the issue: a pod whose only volume fails its
    NodePublishVolume with INTERNAL, a claim never bound, a PV of a driver
    with no CSIDriver that never registers, beside a published volume.
    Runs ~25 s: the unregistered driver is failed only after its
    registration grace (20 s), which is part of what is under test."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    env.pv("pv-ok", "h-ok", claim="c-ok")
    env.pvc("c-ok", "pv-ok")
    env.pv("pv-stuck", "h-stuck", claim="c-stuck")
    env.pvc("c-stuck", "pv-stuck")
    env.pv("pv-other", "h-other", claim="c-other", driver=OTHER_DRIVER)
    env.pvc("c-other", "pv-other")
    env.pvc("c-unbound")
    sock, address = start(env, sockdir, notify_socket)
    ok = env.pod("ok", [claim("data", "c-ok")])
    env.wait_mounted(env.target(ok, "pv-ok"), timeout=30)
    env.driver.control.fail_next("NodePublishVolume", "INTERNAL", "backend lost the volume", count=1000)
    stuck = env.pod("stuck", [claim("data", "c-stuck")])
    env.pod("tenant", [claim("data", "c-unbound")])
    env.pod("nodriver", [claim("data", "c-other")])
    env.wait_calls("NodePublishVolume", 2, code="INTERNAL", timeout=30)

    final = {"failed": 3, "pending": 0, "published": 1, "tearing-down": 0}
    wait_until(lambda: metric_states(address, notify_socket) == final, timeout=60, interval=0.5,
               what="the metric at rest, the unregistered driver failed after its grace")

    # kvolumed status of the pod: the failure, and exit 0; unknown: exit 1
    # (the pod was taken from its publishes: none, so "No CSI volume", 0).
    code, rows, err = table(kvolumed_bin, sock, "default/stuck")
    assert code == 0, err
    assert len(rows) == 1, (rows, err)
    row = rows[0]
    assert row[:4] == ["default/stuck", "data", DRIVER, "failed"], row
    assert row[5].startswith("csi-error: ") and "backend lost the volume" in row[5], row
    code, rows, err = table(kvolumed_bin, sock, "default/nosuch")
    assert code == 1 and rows == [] and "no pod default/nosuch" in err, (code, rows, err)

    # Each tool, at rest, says the same counts in the same words.
    got = wait_until(lambda: (r := everywhere(env, sock, address, notify_socket, kvolumed_bin)()) and
                     r["metric"] == final and r, timeout=60, interval=0.5,
                     what="the four volumes counted alike by every tool")
    assert got["/volumes"] == final

    # The stuck pod, by name, in /volumes: its pod volume (from its desired
    # state: nothing of it is published) and the volume it wants.
    doc = api_get(sock, "/volumes?pod=default/stuck")[1]
    [pv] = doc["pod_volumes"]
    assert (pv["pod"], pv["volume"], pv["state"], pv["reason"], pv["driver"]) == (
        "default/stuck", "data", "failed", "csi-error", DRIVER), pv
    assert "backend lost the volume" in pv["message"]
    assert [v["unique_name"] for v in doc["volumes"]] == [f"kubernetes.io/csi/{DRIVER}^h-stuck"]
    # ?state=failed: the three failed pod volumes, as the metric counts them.
    doc = api_get(sock, "/volumes?state=failed")[1]
    assert sorted(p["pod"] for p in doc["pod_volumes"]) == ["default/nodriver", "default/stuck", "default/tenant"]
    assert {p["pod"]: p["reason"] for p in doc["pod_volumes"]} == {
        "default/nodriver": "driver-missing", "default/stuck": "csi-error", "default/tenant": "claim-not-bound"}
    assert api_get(sock, "/volumes?state=pending")[1]["pod_volumes"] == []
    # The local API, by UID: the same state.
    body = api_get(sock, f"/v1/pods/{stuck['metadata']['uid']}/volumes")[1]
    assert [(v["name"], v["state"]) for v in body["volumes"]] == [("data", "failed")], body

    # What an operator sees (printed: shown with -s, or when a test fails).
    print("STATUS=" + newest_status(notify_socket))
    print(status(kvolumed_bin, "--socket", sock).stdout)
    print(status(kvolumed_bin, "--socket", sock, "default/stuck").stdout)
    print("\n".join(k + " " + str(v) for k, v in metrics(address).items()
                    if k.startswith(("kvolumed_volumes", "kvolumed_csi_driver_registered", "kvolumed_api_last"))))
    r = status(kvolumed_bin, "--socket", sock, "--json", "default/stuck")
    assert r.returncode == 0, r.stderr
    assert [p["state"] for p in json.loads(r.stdout)["pod_volumes"]] == ["failed"]

    # Whose to fix: the tenant's claim, the node's driver and CSI failure.
    s = metrics(address)
    assert s['kvolumed_volumes_failed{driver_name="",reason="claim-not-bound"}'] == 1
    assert s[f'kvolumed_volumes_failed{{driver_name="{OTHER_DRIVER}",reason="driver-missing"}}'] == 1
    assert s[f'kvolumed_volumes_failed{{driver_name="{DRIVER}",reason="csi-error"}}'] == 1
    assert sum(v for k, v in s.items() if k.startswith("kvolumed_volumes_failed{")) == final["failed"]
    assert s['kvolumed_volumes_oldest_unready_seconds{owner="node"}'] > 0
    assert s['kvolumed_volumes_oldest_unready_seconds{owner="tenant"}'] > 0
    assert s[f'kvolumed_csi_driver_registered{{driver_name="{DRIVER}"}}'] == 1
    assert s[f'kvolumed_csi_driver_registered{{driver_name="{OTHER_DRIVER}"}}'] == 0
    assert time.time() - 120 < s["kvolumed_api_last_success_timestamp_seconds"] <= time.time() + 1

    # Fixed: published everywhere, nothing unready for the node any more.
    env.driver.control.clear_faults("NodePublishVolume")
    env.wait_mounted(env.target(stuck, "pv-stuck"), timeout=60)
    final = {"failed": 2, "pending": 0, "published": 2, "tearing-down": 0}
    wait_until(lambda: (r := everywhere(env, sock, address, notify_socket, kvolumed_bin)()) and
               r["metric"] == final and r, timeout=60, interval=0.5, what="the stuck volume published everywhere")
    for name in ("ok", "stuck", "tenant", "nodriver"):
        env.api.remove("pods", "default", name)
    env.wait_gone(env.target(ok, "pv-ok"), timeout=30)
    env.wait_gone(env.target(stuck, "pv-stuck"), timeout=30)


def test_a_stuck_teardown_is_tearing_down_everywhere(volume_env, sockdir, notify_socket, kvolumed_bin):
    """A pod deleted while its NodeUnpublishVolume hangs: its volume is
    tearing-down in the metric, STATUS=, /volumes and the table, not
    "published"."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    env.pv("pv-a", "h-a", claim="c-a")
    env.pvc("c-a", "pv-a")
    sock, address = start(env, sockdir, notify_socket)
    pod = env.pod("leaving", [claim("data", "c-a")])
    env.wait_mounted(env.target(pod, "pv-a"), timeout=30)
    wait_until(lambda: metric_states(address, notify_socket)["published"] == 1, timeout=30,
               what="the metric: published")

    env.driver.control.hang("NodeUnpublishVolume", count=1)
    env.api.remove("pods", "default", "leaving")
    env.driver.control.wait_hung("NodeUnpublishVolume", timeout=30)
    want = {"failed": 0, "pending": 0, "published": 0, "tearing-down": 1}
    wait_until(lambda: metric_states(address, notify_socket) == want, timeout=30, what="the metric: tearing-down")
    # STATUS= (sent at most once a second: read until it has caught up) says
    # tearing-down too, not "1 volume published".
    seen = []
    try:
        wait_until(lambda: seen.append(newest_status(notify_socket)) or status_counts(seen[-1]) == want,
                   timeout=30, interval=0.5, what="STATUS= counting the stuck teardown as tearing-down")
    except AssertionError as e:
        raise AssertionError(f"{e}; the last STATUS= said {seen[-1]!r}") from None
    assert not re.search(r": 1 (pod )?volumes? published", seen[-1]), seen[-1]
    wait_until(lambda: (r := everywhere(env, sock, address, notify_socket, kvolumed_bin)()) and
               r["metric"] == want and r, timeout=30, interval=0.5, what="tearing-down everywhere")
    assert "0 pod volumes published" in newest_status(notify_socket)
    [pv] = api_get(sock, "/volumes?state=tearing-down")[1]["pod_volumes"]
    assert (pv["pod"], pv["volume"], pv["state"]) == ("default/leaving", "pv-a", "tearing-down"), pv
    code, rows, err = table(kvolumed_bin, sock, "default/leaving")
    assert code == 0 and [r[3] for r in rows] == ["tearing-down"], (rows, err)

    env.driver.control.release("NodeUnpublishVolume")
    env.wait_gone(env.target(pod, "pv-a"), timeout=30)
    want = {"failed": 0, "pending": 0, "published": 0, "tearing-down": 0}
    wait_until(lambda: (r := everywhere(env, sock, address, notify_socket, kvolumed_bin)()) and
               r["metric"] == want and r, timeout=30, interval=0.5, what="nothing left")


def test_failed_volumes_say_whose_they_are_with_a_bounded_driver_label(volume_env, sockdir):
    """An inline volume of a driver only the pod names is refused (no
    CSIDriver allows Ephemeral): the tenant's, counted with driver_name
    "other", so that a pod spec cannot add series; its pod is failed."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    sock, address = start(env, sockdir, None)
    for i in range(3):
        env.pod(f"inline-{i}", [{"name": "v", "csi": {"driver": f"made-up-{i}.example.com"}}])
    s = wait_until(lambda: (s := metrics(address)).get('kvolumed_volumes{state="failed"}') == 3 and s,
                   timeout=30, what="three refused inline volumes")
    failed = {k: v for k, v in s.items() if k.startswith("kvolumed_volumes_failed{")}
    assert failed == {'kvolumed_volumes_failed{driver_name="other",reason="refused"}': 3}, failed
    assert not any(k.startswith("kvolumed_csi_driver_registered{") and "made-up" in k for k in s)
    assert s['kvolumed_volumes_oldest_unready_seconds{owner="node"}'] == 0
    assert s['kvolumed_volumes_oldest_unready_seconds{owner="tenant"}'] > 0
    doc = api_get(sock, "/volumes?state=failed")[1]
    assert sorted(p["pod"] for p in doc["pod_volumes"]) == [f"default/inline-{i}" for i in range(3)]
    assert {p["reason"] for p in doc["pod_volumes"]} == {"refused"}
