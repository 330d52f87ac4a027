"""/volumes: every volume kvolumed tracks, as JSON an operator (or jq) reads:
driver, handle, lifecycle, block or file system, attach, stage and publish
state with their paths, uncertainty, the last error and the next retry, and
the pods' volumes that wait before any volume exists; and the sd_notify
STATUS= line that sums it up."""
import datetime
import hashlib
import json
import time

from integration.agent_fixtures import DRIVER, wait_until
from integration.test_agent_metrics import SERVING, get, metrics_config, samples

UNIQUE = f"kubernetes.io/csi/{DRIVER}^"
BLOCK = "plugins/kubernetes.io/csi/volumeDevices"


def start(env, notify=None):
    env.agent = env.start_agent(metrics_config(env, "127.0.0.1:0"), notify=notify)
    env.agent.wait_for_log("Serving /metrics")
    return SERVING.search(env.agent.output()).group(1)


def volumes(address):
    status, headers, body = get(address, "/volumes")
    assert status == 200 and headers["Content-Type"] == "application/json", body
    return json.loads(body)


def by_name(state):
    return {v["unique_name"]: v for v in state["volumes"]}


def parse_time(text):
    assert text.endswith("Z"), text
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def claim(name, claim_name):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def attachment_name(handle):
    return "csi-" + hashlib.sha256((handle + DRIVER + "test-node").encode()).hexdigest()


def wait_status(notify, text, timeout=10.0):
    """The newest STATUS= line is `text` (STATUS= is rate-limited: the last one counts)."""
    def newest():
        msgs = notify.drain(0.2)
        status = [line for m in msgs for line in m.split("\n") if line.startswith("STATUS=")]
        return status and status[-1] == "STATUS=" + text
    try:
        wait_until(newest, timeout, what=f"STATUS={text}")
    except AssertionError as e:
        raise AssertionError(f"{e}; the last ones: {notify.messages[-3:]}") from None


def test_inline_persistent_and_block_volumes_are_described(volume_env, notify_socket):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-fs", "vol-fs", claim="fs")
    env.pvc("fs", "pv-fs")
    env.pv("pv-blk", "vol-blk", claim="blk", volume_mode="Block")
    env.pvc("blk", "pv-blk")
    address = start(env, notify_socket)
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}, claim("data", "fs"),
                          claim("disk", "blk")], devices=["disk"])
    uid = pod["metadata"]["uid"]
    env.wait_mounted(env.target(pod, "scratch"))
    env.wait_mounted(env.target(pod, "pv-fs"))
    state = wait_until(lambda: (s := volumes(address))["published"] == 3 and s, what="3 publishes in /volumes")

    assert state["node"] == "test-node" and state["synced"] is True
    assert (state["pods"], state["desired"], state["staged"], state["uncertain"]) == (1, 3, 2, 0)
    assert (state["failing"], state["unresponsive"], state["waiting_for_attach"]) == (0, 0, 0)
    assert state["pending"] == []
    vols = by_name(state)
    assert len(vols) == 3

    inline = vols[f"kubernetes.io/csi/{uid}-scratch"]
    handle = "csi-" + hashlib.sha256((uid + "scratch").encode()).hexdigest()
    assert {k: inline[k] for k in ("name", "driver", "handle", "lifecycle", "mode", "wanted", "uncertain")} == {
        "name": "scratch", "driver": DRIVER, "handle": handle, "lifecycle": "ephemeral", "mode": "filesystem",
        "wanted": True, "uncertain": False}
    assert inline["attach"] == {"required": False, "attached": None, "waiting_since": None}
    assert inline["stage"] == {"state": "none", "path": None, "mount": False, "stale": False}
    assert inline["publishes"] == [{"pod_uid": uid, "pod": "default/web", "volume": "scratch", "state": "done",
                                    "path": env.target(pod, "scratch"), "mount": True, "stale": False}]
    for v in vols.values():
        assert v["last_error"] is None and v["retries"] == [] and v["next_retry"] is None
        assert v["unresponsive"] is False and v["unresponsive_since"] is None and v["reconstructed"] is False

    fs = vols[UNIQUE + "vol-fs"]
    assert (fs["name"], fs["handle"], fs["lifecycle"], fs["mode"]) == ("pv-fs", "vol-fs", "persistent", "filesystem")
    assert fs["attach"] == {"required": False, "attached": None, "waiting_since": None}
    assert fs["stage"] == {"state": "done", "path": env.staging("vol-fs"), "mount": True, "stale": False}
    assert [(p["pod_uid"], p["state"], p["path"]) for p in fs["publishes"]] == [
        (uid, "done", env.target(pod, "pv-fs"))]

    blk = vols[UNIQUE + "vol-blk"]
    assert (blk["name"], blk["lifecycle"], blk["mode"]) == ("pv-blk", "persistent", "block")
    assert blk["stage"]["state"] == "done" and blk["stage"]["path"] == f"{env.root}/{BLOCK}/staging/pv-blk"
    assert [(p["pod_uid"], p["volume"], p["state"], p["path"]) for p in blk["publishes"]] == [
        (uid, "pv-blk", "done", f"{env.root}/{BLOCK}/publish/pv-blk/{uid}")]

    wait_status(notify_socket, "Running on node test-node: 3 pod volumes published, 0 pending, 0 failed, 0 tearing-down")

    env.api.remove("pods", "default", "web")
    state = wait_until(lambda: (s := volumes(address))["volumes"] == [] and s, what="no volume left")
    assert (state["published"], state["staged"], state["pods"]) == (0, 0, 0)
    wait_status(notify_socket, "Running on node test-node: 0 pod volumes published, 0 pending, 0 failed, 0 tearing-down")


def test_attach_wait_and_a_claim_wait_are_described(volume_env, notify_socket):
    env = volume_env
    # No CSIDriver object: the volume is attachable, and waits for its attachment.
    env.pv("pv-att", "vol-att", claim="att")
    env.pvc("att", "pv-att")
    env.pvc("lonely")  # never bound
    address = start(env, notify_socket)
    before = time.time()
    env.pod("web", [claim("data", "att")])
    env.pod("other", [claim("data", "lonely")])

    state = wait_until(lambda: (s := volumes(address))["waiting_for_attach"] == 1 and s["waiting"] == 1 and s,
                       what="an attach wait and a claim wait")
    vol = by_name(state)[UNIQUE + "vol-att"]
    assert vol["attach"]["required"] is True and vol["attach"]["attached"] is False
    assert before - 1 <= parse_time(vol["attach"]["waiting_since"]) <= time.time() + 1
    assert vol["stage"]["state"] == "none" and vol["publishes"] == [] and vol["wanted"] is True
    [pending] = state["pending"]
    assert (pending["pod"], pending["volume"], pending["state"]) == ("default/other", "data", "waiting")
    assert "lonely" in pending["message"]
    wait_status(notify_socket, "Running on node test-node: 0 pod volumes published, 1 pending, 1 failed, 0 tearing-down, "
                "1 waiting for attach")

    node = env.node()
    node["status"]["volumesAttached"] = [{"name": UNIQUE + "vol-att", "devicePath": ""}]
    env.api.update(node)
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                    "metadata": {"name": attachment_name("vol-att")},
                    "spec": {"attacher": DRIVER, "nodeName": "test-node", "source": {"persistentVolumeName": "pv-att"}},
                    "status": {"attached": True}})
    state = wait_until(lambda: (s := volumes(address))["published"] == 1 and s, what="published after attach")
    vol = by_name(state)[UNIQUE + "vol-att"]
    assert vol["attach"] == {"required": True, "attached": True, "waiting_since": None}
    assert vol["stage"]["state"] == "done" and vol["publishes"][0]["state"] == "done"
    wait_status(notify_socket, "Running on node test-node: 1 pod volume published, 0 pending, 1 failed, 0 tearing-down")
    env.api.remove("pods", "default", "web")
    env.api.remove("pods", "default", "other")
    wait_until(lambda: volumes(address)["volumes"] == [], what="no volume left")


def test_a_failing_volume_shows_its_last_error_and_next_retry(volume_env, notify_socket):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.driver.control.fail_next("NodePublishVolume", "INVALID_ARGUMENT", "no such pool: gold", count=1000)
    address = start(env, notify_socket)
    before = time.time()
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    uid = pod["metadata"]["uid"]
    unique = f"kubernetes.io/csi/{uid}-scratch"

    # Two failures in: the backoff has doubled, and the retry is after the error.
    env.wait_calls("NodePublishVolume", 2, code="INVALID_ARGUMENT")
    state = wait_until(lambda: (s := volumes(address))["failing"] == 1 and s, what="a failing volume")
    vol = by_name(state)[unique]
    err = vol["last_error"]
    assert err["operation"] == "publish" and err["pod_uid"] == uid
    assert "no such pool: gold" in err["message"] and "InvalidArgument" in err["message"]
    assert before - 1 <= parse_time(err["at"]) <= time.time() + 1
    [retry] = vol["retries"]
    assert retry["operation"] == "publish" and retry["pod_uid"] == uid and retry["backoff_seconds"] >= 0.5
    assert retry["at"] == vol["next_retry"]
    assert parse_time(vol["next_retry"]) > parse_time(err["at"])
    assert vol["publishes"] == [] and vol["uncertain"] is False  # a final code: nothing there
    status, _, body = get(address, "/metrics")
    assert samples(body)['kvolumed_volume_conditions{condition="failing"}'] == 1
    # STATUS= follows the passes at most once a second; while a retry is in
    # flight it ends "; 1 operations in flight", and the rate limit's timer
    # may fall in a retry for a while: the backoff's gaps grow until one holds.
    wait_status(notify_socket, "Running on node test-node: 0 pod volumes published, 0 pending, 1 failed, 0 tearing-down",
                timeout=30)

    env.driver.control.clear_faults("NodePublishVolume")
    env.wait_mounted(env.target(pod, "scratch"), timeout=30)
    state = wait_until(lambda: (s := volumes(address))["failing"] == 0 and s["published"] == 1 and s,
                       what="the volume published")
    vol = by_name(state)[unique]
    assert vol["last_error"] is None and vol["retries"] == [] and vol["next_retry"] is None
    wait_status(notify_socket, "Running on node test-node: 1 pod volume published, 0 pending, 0 failed, 0 tearing-down")
    env.api.remove("pods", "default", "web")
    env.wait_gone(env.target(pod, "scratch"))


def test_an_uncertain_publish_is_described(volume_env, notify_socket):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    # A non-final code: the driver may have mounted it.
    env.driver.control.fail_next("NodePublishVolume", "UNAVAILABLE", "backend busy", count=1000)
    address = start(env, notify_socket)
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    uid = pod["metadata"]["uid"]

    state = wait_until(lambda: (s := volumes(address))["uncertain"] == 1 and s, what="an uncertain publish")
    vol = by_name(state)[f"kubernetes.io/csi/{uid}-scratch"]
    assert vol["uncertain"] is True
    assert vol["publishes"] == [{"pod_uid": uid, "pod": "default/web", "volume": "scratch", "state": "uncertain",
                                 "path": env.target(pod, "scratch"), "mount": True, "stale": False}]
    assert "backend busy" in vol["last_error"]["message"] and vol["next_retry"] is not None
    wait_status(notify_socket, "Running on node test-node: 0 pod volumes published, 0 pending, 1 failed, 0 tearing-down, "
                "1 uncertain")

    env.driver.control.clear_faults("NodePublishVolume")
    env.wait_mounted(env.target(pod, "scratch"), timeout=30)
    state = wait_until(lambda: (s := volumes(address))["published"] == 1 and s, what="published")
    vol = by_name(state)[f"kubernetes.io/csi/{uid}-scratch"]
    assert vol["uncertain"] is False and vol["publishes"][0]["state"] == "done" and vol["last_error"] is None
    env.api.remove("pods", "default", "web")
    env.wait_gone(env.target(pod, "scratch"))


def test_a_pod_gone_after_its_publish_failed_leaves_nothing_failing(volume_env, notify_socket):
    """Two pods share a PV; the second one's publish fails, then it is deleted:
    nothing retries that publish any more, so the volume is not failing (the
    first pod's publish is fine), and its error is no longer shown."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-sh", "vol-sh", claim="sh")
    env.pvc("sh", "pv-sh")
    address = start(env, notify_socket)
    a = env.pod("a", [claim("data", "sh")])
    env.wait_mounted(env.target(a, "pv-sh"))
    env.driver.control.fail_next("NodePublishVolume", "INVALID_ARGUMENT", "quota exceeded", count=1000)
    b = env.pod("b", [claim("data", "sh")])
    state = wait_until(lambda: (s := volumes(address))["failing"] == 1 and s, what="b's publish failing")
    vol = by_name(state)[UNIQUE + "vol-sh"]
    assert vol["last_error"]["pod_uid"] == b["metadata"]["uid"] and "quota exceeded" in vol["last_error"]["message"]
    assert [r["pod_uid"] for r in vol["retries"]] == [b["metadata"]["uid"]]
    wait_status(notify_socket, "Running on node test-node: 1 pod volume published, 0 pending, 1 failed, 0 tearing-down")

    env.api.remove("pods", "default", "b")
    state = wait_until(lambda: (s := volumes(address))["failing"] == 0 and s["pods"] == 1 and s,
                       what="nothing failing once b is gone")
    vol = by_name(state)[UNIQUE + "vol-sh"]
    assert vol["last_error"] is None and vol["retries"] == [] and vol["next_retry"] is None
    assert [p["pod_uid"] for p in vol["publishes"]] == [a["metadata"]["uid"]]
    wait_status(notify_socket, "Running on node test-node: 1 pod volume published, 0 pending, 0 failed, 0 tearing-down")
    env.driver.control.clear_faults("NodePublishVolume")
    env.api.remove("pods", "default", "a")
    env.wait_gone(env.target(a, "pv-sh"))
