"""Inline ephemeral CSI volumes (KEP-596) end to end: the real kvolumed, the
fake API server and the mock driver, with real mounts."""
import hashlib
import json
import os

from integration.agent_fixtures import DRIVER, wait_until


def inline(name, **csi):
    return {"name": name, "csi": {"driver": DRIVER, **csi}}


def test_inline_flow(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, podInfoOnMount=True, volumeLifecycleModes=["Ephemeral"])
    env.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "team"},
                    "data": {"password": "aHVudGVyMg=="}})  # "hunter2"
    env.start()
    pod = env.pod("web", [inline("scratch", volumeAttributes={"size": "8Mi", "color": "blue"},
                                 nodePublishSecretRef={"name": "creds"}),
                          inline("ro", readOnly=True)],
                  namespace="team", serviceAccountName="builder")
    uid = pod["metadata"]["uid"]
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    env.wait_mounted(env.target(pod, "ro"))

    env.wait_calls("NodePublishVolume", 2)
    publish = [c for c in env.calls("NodePublishVolume") if c["request"]["target_path"] == target][-1]
    req = publish["request"]
    handle = "csi-" + hashlib.sha256((uid + "scratch").encode()).hexdigest()
    assert req["volume_id"] == handle
    assert "staging_target_path" not in req
    assert req["volume_context"] == {
        "size": "8Mi", "color": "blue",
        "csi.storage.k8s.io/pod.name": "web", "csi.storage.k8s.io/pod.namespace": "team",
        "csi.storage.k8s.io/pod.uid": uid, "csi.storage.k8s.io/serviceAccount.name": "builder",
        "csi.storage.k8s.io/ephemeral": "true"}
    # The secret came from the pod's own namespace; the log holds keys, never values.
    assert req["secrets"] == {"password": "password"}
    assert "hunter2" not in open(env.driver.call_log_path).read()
    assert "hunter2" not in env.agent.output()
    assert req["volume_capability"]["access_mode"]["mode"] == "SINGLE_NODE_WRITER"
    assert not env.calls("NodeStageVolume")

    # kubelet-compatible metadata next to the volume, as Go's encoder writes it.
    vol_data = open(os.path.join(os.path.dirname(target), "vol_data.json")).read()
    attachment = "csi-" + hashlib.sha256((handle + DRIVER + "test-node").encode()).hexdigest()
    assert vol_data == json.dumps({"attachmentID": attachment, "driverName": DRIVER, "nodeName": "test-node",
                                   "specVolID": "scratch", "volumeHandle": handle,
                                   "volumeLifecycleMode": "Ephemeral"}, separators=(",", ":")) + "\n"

    # readOnly reaches the driver, and the mount refuses writes.
    ro = [c for c in env.calls("NodePublishVolume") if c["request"]["target_path"] == env.target(pod, "ro")][-1]
    assert ro["request"]["readonly"] is True
    try:
        open(os.path.join(env.target(pod, "ro"), "x"), "w").close()
        raise AssertionError("wrote to a read-only volume")
    except OSError:
        pass
    with open(os.path.join(target, "data"), "w") as f:
        f.write("written by the pod")

    # Teardown: NodeUnpublishVolume for both, and no directory left behind.
    env.api.remove("pods", "team", "web")
    env.wait_gone(f"{env.root}/pods/{uid}")
    unpublished = {c["request"]["target_path"] for c in env.wait_calls("NodeUnpublishVolume", 2)}
    assert unpublished == {target, env.target(pod, "ro")}
    # kvolumed's own tree keeps its intent log alone (empty once synced).
    assert sorted(set(os.listdir(env.root)) - {"pods", "plugins"}) == ["kvolumed"]
    assert os.listdir(f"{env.root}/kvolumed") == ["intent-log"]
    assert os.listdir(f"{env.root}/pods") == []


def test_lifecycle_mode_mismatch_makes_no_call(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    env.start()
    pod = env.pod("web", [inline("scratch")])
    event = env.wait_event("FailedMount", 'volume mode "Ephemeral" not supported by driver')[0]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert event["source"]["component"] == "kvolumed"
    assert f'(only supports ["Persistent"])' in event["message"]
    assert not env.calls("NodePublishVolume")
    assert not os.path.exists(env.target(pod, "scratch"))


def test_inline_without_csidriver_is_refused(volume_env):
    env = volume_env
    env.start()
    env.pod("web", [inline("scratch")])
    env.wait_event("FailedMount", f"not supported by driver {DRIVER} (no CSIDriver object)")
    assert not env.calls("NodePublishVolume")


def test_malicious_names_touch_nothing_while_a_normal_pod_works(volume_env, tmp_path):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    before = sorted(os.listdir(tmp_path))
    # The fake API server, like a real one with a permissive admission, stores it.
    bad = env.pod("evil", [inline("..")], mounts=[{"name": "..", "mountPath": "/x"}])
    good = env.pod("good", [inline("scratch")])
    env.wait_mounted(env.target(good, "scratch"))
    env.wait_event("FailedMount", "invalid spec.volumes[].name")
    assert not os.path.exists(f"{env.root}/pods/{bad['metadata']['uid']}")
    published = [c["request"]["target_path"] for c in env.wait_calls("NodePublishVolume")]
    assert published == [env.target(good, "scratch")]
    # Nothing appeared beside root-dir, nor in it but the good pod's directory.
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(f"{env.root}/pods") == [good["metadata"]["uid"]]


def test_pod_succeeded_tears_down_while_the_object_exists(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("job", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    pod = env.api.get("pods", "default", "job")
    pod["status"]["phase"] = "Succeeded"
    env.api.update(pod)
    env.wait_gone(os.path.dirname(target))
    assert env.api.get("pods", "default", "job") is not None
    assert [c["request"]["target_path"] for c in env.wait_calls("NodeUnpublishVolume")] == [target]


def test_deleted_pod_keeps_volumes_while_containers_run(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    pod = env.api.get("pods", "default", "web")
    pod["status"]["containerStatuses"] = [{"name": "c", "ready": True, "restartCount": 0, "image": "busybox",
                                           "imageID": "", "state": {"running": {"startedAt": "2026-11-22T00:00:00Z"}}}]
    env.api.update(pod)
    env.api.delete("pods", "default", "web", grace_period_seconds=30)  # sets deletionTimestamp only
    import time
    time.sleep(1.0)
    assert os.path.ismount(target)
    assert not env.calls("NodeUnpublishVolume")
    pod = env.api.get("pods", "default", "web")
    assert pod["metadata"].get("deletionTimestamp")
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0, "startedAt": "2026-11-22T00:00:00Z",
                                                                    "finishedAt": "2026-11-22T00:01:00Z"}}
    env.api.update(pod)
    env.wait_gone(os.path.dirname(target))


def test_lost_mount_is_published_again(volume_env):
    """A target unmounted behind kvolumed's back (by hand, or by a driver
    restart) is noticed through the mount table and published again."""
    import subprocess
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    assert len(env.wait_calls("NodePublishVolume")) == 1
    # Whether the publish made a mount, kvolumed learns from the mount table
    # read after the call: a mount gone before that read was never seen.
    env.agent.wait_for_log("/mount is a mount point: watched for its loss", timeout=15)
    subprocess.run(["umount", target], check=True)
    wait_until(lambda: len([c for c in env.calls("NodePublishVolume") if c["code"] == "OK"]) == 2,
               what="a second NodePublishVolume")
    env.wait_mounted(target)
    env.agent.wait_for_log("is no longer mounted; publishing it again")
    # At debug level a Normal event records each successful mount.
    assert env.wait_event("SuccessfulMountVolume", 'volume "scratch"')[0]["type"] == "Normal"


def test_csidriver_edited_under_a_running_pod_keeps_its_volume(volume_env):
    """Never tear down what the desired state still wants: dropping Ephemeral
    from the driver's lifecycle modes stops new inline mounts, not this one."""
    import time
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    driver = env.api.get("csidrivers", None, DRIVER)
    driver["spec"]["volumeLifecycleModes"] = ["Persistent"]
    env.api.update(driver)
    env.wait_event("FailedMount", "volume mode \"Ephemeral\" not supported")
    time.sleep(0.5)
    assert os.path.ismount(target)
    assert not env.calls("NodeUnpublishVolume")
    other = env.pod("other", [inline("scratch")])
    time.sleep(0.5)
    assert not os.path.exists(env.target(other, "scratch"))
    # The pod goes: now, and only now, its volume is torn down.
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(target))


def test_unreadable_pod_object_keeps_its_volume_across_a_relist(volume_env):
    """A pod whose object gains a malformed field is still running: neither
    its watch update nor a relist after 410 Gone may read it as deleted.
    When it is deleted for real, its volume goes."""
    import time
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    bad = env.api.get("pods", "default", "web")
    bad["spec"]["securityContext"] = {"fsGroup": "not a number"}
    env.api.update(bad)
    env.agent.wait_for_log("Skipping Pod default/web: field spec.securityContext.fsGroup")
    # The watch falls behind the compaction point and must relist: a change it
    # does not see (a pod of another node; no bookmark tells it), then compaction.
    env.api.configure(bookmarkInterval=3600)
    env.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "elsewhere", "namespace": "default"},
                    "spec": {"nodeName": "other-node", "containers": [{"name": "c", "image": "x"}]}})
    env.api.compact()
    env.api.close_watches()
    wait_until(lambda: env.agent.output().count("Pod informer: listed") >= 2, what="a relist of the pods")
    time.sleep(0.5)
    assert os.path.ismount(target)
    assert not env.calls("NodeUnpublishVolume")
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(target))
