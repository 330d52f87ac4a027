"""Persistent CSI volumes through PVCs: staging once per node, publishing per
pod, the attach wait and volumesInUse, failures, backoff and fsGroup."""
import hashlib
import os
import stat
import time

import pytest

from integration.agent_fixtures import DRIVER, answered_requests, wait_until

UNIQUE = f"kubernetes.io/csi/{DRIVER}^"


def claim_volume(name, claim, read_only=False):
    v = {"name": name, "persistentVolumeClaim": {"claimName": claim}}
    if read_only:
        v["persistentVolumeClaim"]["readOnly"] = True
    return v


def attachment_name(handle):
    return "csi-" + hashlib.sha256((handle + DRIVER + "test-node").encode()).hexdigest()


def test_two_pods_share_one_pv(staged_volume_env):
    env = staged_volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-shared", "vol-shared", claim="shared", fsType="ext4", volumeAttributes={"tier": "gold"})
    env.api.update({**env.api.get("persistentvolumes", None, "pv-shared"),
                    "spec": {**env.api.get("persistentvolumes", None, "pv-shared")["spec"],
                             "mountOptions": ["noatime"], "accessModes": ["ReadWriteMany"]}})
    env.pvc("shared", "pv-shared")
    env.start()
    a = env.pod("a", [claim_volume("data", "shared")])
    b = env.pod("b", [claim_volume("data", "shared", read_only=True)])
    env.wait_mounted(env.target(a, "pv-shared"))
    env.wait_mounted(env.target(b, "pv-shared"))
    staging = env.staging("vol-shared")

    stages = env.wait_calls("NodeStageVolume")
    env.wait_calls("NodePublishVolume", 2)
    assert len(stages) == 1
    s = stages[0]["request"]
    assert s["volume_id"] == "vol-shared"
    assert s["staging_target_path"] == staging
    assert s["volume_context"] == {"tier": "gold"}
    assert s["volume_capability"]["mount"] == {"fs_type": "ext4", "mount_flags": ["noatime"]}
    assert s["volume_capability"]["access_mode"]["mode"] == "MULTI_NODE_MULTI_WRITER"
    publishes = {c["request"]["target_path"]: c["request"] for c in env.calls("NodePublishVolume")}
    assert set(publishes) == {env.target(a, "pv-shared"), env.target(b, "pv-shared")}
    for req in publishes.values():
        assert req["staging_target_path"] == staging
        assert "csi.storage.k8s.io/pod.name" not in req.get("volume_context", {})  # podInfoOnMount off
    assert publishes[env.target(b, "pv-shared")].get("readonly") is True
    assert not publishes[env.target(a, "pv-shared")].get("readonly")
    # No attach for attachRequired=false: volumesInUse never lists it.
    assert UNIQUE + "vol-shared" not in (env.node().get("status") or {}).get("volumesInUse", [])

    # A file written through one pod is seen through the other.
    with open(os.path.join(env.target(a, "pv-shared"), "hello"), "w") as f:
        f.write("from a")
    assert open(os.path.join(env.target(b, "pv-shared"), "hello")).read() == "from a"

    env.api.remove("pods", "default", "a")
    env.wait_gone(os.path.dirname(env.target(a, "pv-shared")))
    time.sleep(0.5)
    assert not env.calls("NodeUnstageVolume"), "unstaged while pod b still uses the volume"
    assert os.path.ismount(staging) == env.stage_mounts

    env.api.remove("pods", "default", "b")
    env.wait_gone(os.path.dirname(staging))
    env.wait_calls("NodeUnstageVolume")
    calls = env.calls()
    order = [c["method"] for c in calls if c["method"] in ("NodeUnpublishVolume", "NodeUnstageVolume")]
    assert order == ["NodeUnpublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume"]
    assert not env.driver.violations()


def test_attach_required_waits_for_attachment(staged_volume_env):
    env = staged_volume_env
    env.csidriver(attachRequired=True)
    env.pv("pv-att", "vol-att", claim="att")
    env.pvc("att", "pv-att")
    env.start()
    pod = env.pod("web", [claim_volume("data", "att")])
    unique = UNIQUE + "vol-att"

    # Reported in use first, then nothing until the attachment is confirmed.
    wait_until(lambda: unique in (env.node().get("status") or {}).get("volumesInUse", []), what="volumesInUse")
    time.sleep(0.5)
    assert not env.calls("NodeStageVolume")
    node = env.node()
    node["status"]["volumesAttached"] = [{"name": unique, "devicePath": ""}]
    env.api.update(node)
    time.sleep(0.5)
    assert not env.calls("NodeStageVolume"), "staged before the VolumeAttachment said attached"
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                    "metadata": {"name": attachment_name("vol-att")},
                    "spec": {"attacher": DRIVER, "nodeName": "test-node", "source": {"persistentVolumeName": "pv-att"}},
                    "status": {"attached": True, "attachmentMetadata": {"lun": "3"}}})
    env.wait_mounted(env.target(pod, "pv-att"))
    assert env.wait_calls("NodeStageVolume")[0]["request"]["publish_context"] == {"lun": "3"}
    assert env.wait_calls("NodePublishVolume")[0]["request"]["publish_context"] == {"lun": "3"}

    # Teardown: volumesInUse is cleared only after NodeUnstageVolume succeeded.
    env.api.remove("pods", "default", "web")
    wait_until(lambda: unique not in (env.node().get("status") or {}).get("volumesInUse", []),
               what="volumesInUse cleared")
    unstage = [c for c in env.calls("NodeUnstageVolume") if c["code"] == "OK"]
    assert unstage
    patches = answered_requests(env.api, lambda r: r["method"] == "PATCH" and r["path"].endswith("/status")
                                and "volumesInUse" in str(r["body"]) and unique not in str(r["body"])
                                and r["time"] > unstage[0]["time"] - 5)
    clearing = [r for r in patches if r["status"] == 200]
    assert clearing and clearing[-1]["time"] >= unstage[0]["time"]


def test_attach_error_is_reported_and_nothing_is_staged(volume_env):
    env = volume_env
    env.csidriver(attachRequired=True)
    env.pv("pv-bad", "vol-bad", claim="bad")
    env.pvc("bad", "pv-bad")
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                    "metadata": {"name": attachment_name("vol-bad")},
                    "spec": {"attacher": DRIVER, "nodeName": "test-node", "source": {"persistentVolumeName": "pv-bad"}},
                    "status": {"attached": False,
                               "attachError": {"time": "2026-11-22T01:00:00Z", "message": "LUN limit reached"}}})
    env.start()
    pod = env.pod("web", [claim_volume("data", "bad")])
    event = env.wait_event("FailedAttachVolume", "LUN limit reached")[0]
    assert event["message"] == 'AttachVolume.Attach failed for volume "pv-bad" : LUN limit reached'
    assert event["involvedObject"]["name"] == "web"
    assert not env.calls("NodeStageVolume")
    assert not os.path.exists(env.target(pod, "pv-bad"))


def test_no_csidriver_then_non_attachable_driver_ends_the_wait(staged_volume_env):
    env = staged_volume_env
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    env.start()
    pod = env.pod("web", [claim_volume("data", "c1")])
    # Without a CSIDriver object the volume is treated as attachable and waits.
    wait_until(lambda: UNIQUE + "vol-1" in (env.node().get("status") or {}).get("volumesInUse", []),
               what="volumesInUse")
    time.sleep(0.3)
    assert not env.calls("NodeStageVolume")
    env.csidriver(attachRequired=False)
    env.wait_mounted(env.target(pod, "pv-1"))
    # Reported once, it stays in volumesInUse while staged, whatever the
    # CSIDriver says now, and leaves it once unstaged.
    assert UNIQUE + "vol-1" in (env.node().get("status") or {}).get("volumesInUse", [])
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume")
    wait_until(lambda: UNIQUE + "vol-1" not in (env.node().get("status") or {}).get("volumesInUse", []),
               what="volumesInUse without the volume")


def test_pvc_bound_late(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False)
    env.start()
    pod = env.pod("web", [claim_volume("data", "late")])
    env.wait_event("FailedMount", 'persistentvolumeclaim "late" not found')
    env.pvc("late")
    env.wait_event("FailedMount", "error processing PVC default/late: PVC is not bound")
    env.pv("pv-late", "vol-late", claim="late")
    started = time.monotonic()
    env.bind("late", "pv-late")
    env.wait_mounted(env.target(pod, "pv-late"))
    # Event-driven: no polling interval between the bind and the mount.
    assert time.monotonic() - started < 3.0


def test_publish_failing_then_succeeding_backs_off_and_aggregates_events(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.driver.control.fail_next("NodePublishVolume", "INTERNAL", "disk on fire", count=2)
    env.start()
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(pod, "scratch"))
    publishes = env.wait_calls("NodePublishVolume", 3)
    assert [c["code"] for c in publishes] == ["INTERNAL", "INTERNAL", "OK"]
    # kubelet's backoff: 500 ms, then 1 s.
    gaps = [publishes[i + 1]["time"] - publishes[i]["time"] for i in range(2)]
    assert 0.45 <= gaps[0] < 1.5, gaps
    assert 0.95 <= gaps[1] < 2.5, gaps
    # A final failure leaves nothing behind, then the retry starts clean.
    events = env.wait_event("FailedMount", "disk on fire")
    assert len(events) == 1, "repeats must be aggregated into one Event"
    wait_until(lambda: env.wait_event("FailedMount", "disk on fire")[0].get("count") == 2, what="count 2")
    assert "MountVolume.SetUp failed for volume \"scratch\"" in events[0]["message"]


def test_publish_timeout_then_pod_deleted_still_unpublishes(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    env.start(csi="call-timeout = 1s\n")
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "scratch")
    env.agent.wait_for_log("DeadlineExceeded", timeout=10)
    # The driver did mount (it hangs after the work): kvolumed must not forget it.
    assert os.path.ismount(target)
    env.api.remove("pods", "default", "web")
    env.driver.control.release("NodePublishVolume")
    env.wait_gone(os.path.dirname(target))
    ok = env.wait_calls("NodeUnpublishVolume", code="OK")
    assert ok and ok[-1]["request"]["target_path"] == target
    assert not os.path.ismount(target)


def test_fs_group_applied_per_policy(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, fsGroupPolicy="File", volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}], security_context={"fsGroup": 4242})
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    # The walk changes the group, then the mode, of each entry: a look between
    # the two sees the group alone.  Wait for the whole of the entry's change.
    st = wait_until(lambda: (s := os.stat(target)).st_gid == 4242 and s.st_mode & stat.S_ISGID and s,
                    what="group 4242 with its setgid bit")
    assert st.st_mode & 0o070 == 0o070
    assert "volume_mount_group" not in env.wait_calls("NodePublishVolume")[-1]["request"]["volume_capability"]["mount"]


def test_fs_group_default_policy_needs_fs_type(volume_env):
    """Without fsGroupPolicy the default ReadWriteOnceWithFSType applies: an
    inline volume without fsType keeps its group, one with an fsType gets it."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [{"name": "plain", "csi": {"driver": DRIVER}},
                          {"name": "typed", "csi": {"driver": DRIVER, "fsType": "ext4"}}],
                  security_context={"fsGroup": 4343})
    plain, typed = env.target(pod, "plain"), env.target(pod, "typed")
    env.wait_mounted(plain)
    env.wait_mounted(typed)
    wait_until(lambda: os.stat(typed).st_gid == 4343, what="group 4343 on the volume with an fsType")
    assert os.stat(plain).st_gid != 4343


def test_fs_group_policy_none_changes_nothing(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, fsGroupPolicy="None", volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}], security_context={"fsGroup": 4242})
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    time.sleep(0.5)
    assert os.stat(target).st_gid != 4242


def test_fs_group_passed_as_volume_mount_group(volume_env, mock_csi_factory):
    env = volume_env
    env.driver.control.set_caps("STAGE_UNSTAGE_VOLUME", "VOLUME_MOUNT_GROUP")
    env.csidriver(attachRequired=False, fsGroupPolicy="File", volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [{"name": "scratch", "csi": {"driver": DRIVER}}], security_context={"fsGroup": 4242})
    env.wait_mounted(env.target(pod, "scratch"))
    mount = env.wait_calls("NodePublishVolume")[-1]["request"]["volume_capability"]["mount"]
    assert mount.get("volume_mount_group") == "4242"


def test_staged_volume_stays_while_another_pod_wants_it(staged_volume_env):
    """Pod b wants the volume but a CSIDriver edit holds it back; when pod a
    leaves, the volume must stay staged: the desired state still wants it."""
    env = staged_volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    env.start()
    a = env.pod("a", [claim_volume("data", "c1")])
    env.wait_mounted(env.target(a, "pv-1"))
    driver = env.api.get("csidrivers", None, DRIVER)
    driver["spec"]["volumeLifecycleModes"] = ["Ephemeral"]
    env.api.update(driver)
    time.sleep(1.5)  # the edit reaches kvolumed through its CSIDriver watch first
    b = env.pod("b", [claim_volume("data", "c1")])
    env.wait_event("FailedMount", 'volume mode "Persistent" not supported')
    env.api.remove("pods", "default", "a")
    env.wait_gone(os.path.dirname(env.target(a, "pv-1")))
    time.sleep(1.0)
    assert not env.calls("NodeUnstageVolume"), "unstaged a volume pod b still wants"
    assert os.path.ismount(env.staging("vol-1")) == env.stage_mounts
    assert env.driver.state()["volumes"]["vol-1"]["staged"]
    assert not os.path.exists(env.target(b, "pv-1"))
    env.api.remove("pods", "default", "b")
    env.wait_gone(os.path.dirname(env.staging("vol-1")))
    assert env.wait_calls("NodeUnstageVolume", code="OK")


def test_volumes_in_use_at_start_stay_until_unstaged(volume_env):
    """A restarted kvolumed finds the staged volumes on disk (vol_data.json as
    kubelet or kvolumed leave it): the ones the Node lists in use stay listed
    until NodeUnstageVolume of each succeeded, so nothing is detached under a
    mount; an entry with nothing on disk is dropped."""
    env = volume_env
    env.csidriver(attachRequired=True)
    listed = [UNIQUE + "vol-a", UNIQUE + "vol-b", UNIQUE + "vol-gone"]
    node = env.node()
    node["status"]["volumesInUse"] = listed
    env.api.update(node)
    for handle in ("vol-a", "vol-b"):
        os.makedirs(env.staging(handle))
        with open(os.path.join(os.path.dirname(env.staging(handle)), "vol_data.json"), "w") as f:
            f.write('{"driverName":"%s","volumeHandle":"%s"}\n' % (DRIVER, handle))
    env.start()
    wait_until(lambda: not (env.node().get("status") or {}).get("volumesInUse"), what="volumesInUse emptied")
    unstaged = {c["request"]["volume_id"]: c["time"] for c in env.calls("NodeUnstageVolume") if c["code"] == "OK"}
    assert sorted(unstaged) == ["vol-a", "vol-b"]
    patches = [r for r in answered_requests(env.api, lambda r: r["method"] == "PATCH" and "volumesInUse" in str(r["body"]))
               if r["status"] == 200]
    assert patches
    for r in patches:
        for handle, when in unstaged.items():
            if r["time"] < when:
                assert UNIQUE + handle in str(r["body"]), f"{handle} dropped before it was unstaged"


def test_a_broad_identity_works_too(fake_api, mock_csi_factory, start_agent, tmp_path):
    """The suite runs kvolumed as the node; with a cluster-wide identity (the
    RBAC fallback of conf/rbac.yaml) the same flows work."""
    from integration.agent_fixtures import VolumeEnv
    env = VolumeEnv(fake_api, mock_csi_factory(name=DRIVER, tmpfs=True), start_agent, tmp_path, broad=True)
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-b", "vol-b", claim="cb")
    env.pvc("cb", "pv-b")
    env.start()
    pod = env.pod("web", [claim_volume("data", "cb"), {"name": "s", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(pod, "pv-b"))
    env.wait_mounted(env.target(pod, "s"))
    assert {r["user"] if isinstance(r["user"], str) else str(r["user"]) for r in env.api.requests()
            if r["method"] == "GET" and "/persistentvolumeclaims/" in r["path"]}
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(env.target(pod, "pv-b")))


# --- issue 20: drivers whose calls mount nothing --------------------------------------


def settled(env, method, made_no_mount):
    """kvolumed reads the mount table after a call: wait until it has (its
    debug line), or until it called again (the defect)."""
    wait_until(lambda: made_no_mount in env.agent.output() or len(env.calls(method)) > 1, timeout=15,
               what=lambda: f"kvolumed to read the mount table after {method}\n" + env.agent.output()[-3000:])


def test_a_stage_that_mounts_nothing_is_made_once(fake_api, mock_csi_factory, start_agent, tmp_path):
    """Item 1: the CSI hostpath driver's NodeStageVolume mounts nothing at
    globalmount.  A successful stage after which no mount appears made none:
    no warning, no second NodeStageVolume, for this pod or the next."""
    from integration.agent_fixtures import VolumeEnv
    env = VolumeEnv(fake_api, mock_csi_factory(name=DRIVER, tmpfs=True, stage_mount=False), start_agent, tmp_path)
    env.csidriver(attachRequired=False)
    env.pv("pv-hp", "vol-hp", claim="hp")
    env.pvc("hp", "pv-hp")
    env.start()
    a = env.pod("a", [claim_volume("data", "hp")])
    env.wait_mounted(env.target(a, "pv-hp"))
    settled(env, "NodeStageVolume", "NodeStageVolume made no mount")
    b = env.pod("b", [claim_volume("data", "hp")])
    env.wait_mounted(env.target(b, "pv-hp"))
    env.wait_calls("NodePublishVolume", 2)
    assert [c["code"] for c in env.calls("NodeStageVolume")] == ["OK"], "staged twice"
    assert "no longer mounted" not in env.agent.output()
    assert not os.path.ismount(env.staging("vol-hp"))
    with open(os.path.join(env.target(a, "pv-hp"), "f"), "w") as f:
        f.write("a")
    assert open(os.path.join(env.target(b, "pv-hp"), "f")).read() == "a"
    env.api.remove("pods", "default", "a")
    env.api.remove("pods", "default", "b")
    env.wait_gone(os.path.dirname(env.staging("vol-hp")))
    assert [c["code"] for c in env.wait_calls("NodeUnstageVolume")] == ["OK"]
    assert [c["code"] for c in env.calls("NodeStageVolume")] == ["OK"]
    assert not env.driver.violations()


def test_a_publish_that_mounts_nothing_is_made_once(fake_api, mock_csi_factory, start_agent, tmp_path):
    """Item 1, the publish side: a NodePublishVolume that makes the target a
    plain directory is not taken for a lost mount and not called again."""
    from integration.agent_fixtures import VolumeEnv
    env = VolumeEnv(fake_api, mock_csi_factory(name=DRIVER, tmpfs=True, publish_mount=False), start_agent,
                    tmp_path)
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [{"name": "dir", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "dir")
    env.wait_calls("NodePublishVolume")
    settled(env, "NodePublishVolume", "NodePublishVolume made no mount")
    assert os.path.isdir(target) and not os.path.ismount(target), \
        f"{target}: calls {env.calls('NodePublishVolume')}\n{env.agent.output()[-4000:]}"
    assert [c["code"] for c in env.calls("NodePublishVolume")] == ["OK"], "published twice"
    assert "no longer mounted" not in env.agent.output()
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(target))
    assert [c["code"] for c in env.calls("NodeUnpublishVolume")] == ["OK"]
    assert len(env.calls("NodePublishVolume")) == 1


# --- issue 20: teardown answers that leave something behind ------------------------------


def teardown_env(env, persistent):
    """A pod with one volume, set up; returns (pod, its target, staging or None)."""
    if persistent:
        env.csidriver(attachRequired=False)
        env.pv("pv-t", "vol-t", claim="t")
        env.pvc("t", "pv-t")
        volume, name = claim_volume("data", "t"), "pv-t"
    else:
        env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
        volume, name = {"name": "scratch", "csi": {"driver": DRIVER}}, "scratch"
    env.start()
    pod = env.pod("web", [volume])
    target = env.target(pod, name)
    env.wait_mounted(target)
    env.wait_calls("NodePublishVolume")
    return pod, target, env.staging("vol-t") if persistent else None


@pytest.mark.parametrize("persistent", [False, True], ids=["inline", "persistent"])
def test_unpublish_not_found_of_an_unmounted_target_is_done(volume_env, persistent):
    """Item 8: NodeUnpublishVolume answered NotFound, and nothing is mounted at
    the target (the driver unmounted it and lost the volume): done, not a
    retry for ever as kubelet does (kubernetes/kubernetes#90752)."""
    env = volume_env
    pod, target, staging = teardown_env(env, persistent)
    # "after": the driver unmounts, then answers NotFound, each time.
    env.driver.control.fail_next("NodeUnpublishVolume", "NOT_FOUND", "volume gone", count=50, when="after")
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(target))
    assert [c["code"] for c in env.calls("NodeUnpublishVolume")] == ["NOT_FOUND"]
    env.agent.wait_for_log("not a mount point: taken as done")
    if persistent:
        env.wait_gone(os.path.dirname(staging))
        assert [c["code"] for c in env.wait_calls("NodeUnstageVolume")] == ["OK"]
    assert not env.driver.violations()


@pytest.mark.parametrize("persistent", [False, True], ids=["inline", "persistent"])
def test_unpublish_not_found_of_a_mounted_target_is_retried(volume_env, persistent):
    """Item 8, the other half: NotFound while the target is still a mount
    point is no success: the publish is kept and unpublished again, with
    backoff, and nothing is unstaged under it."""
    env = volume_env
    pod, target, staging = teardown_env(env, persistent)
    env.driver.control.fail_next("NodeUnpublishVolume", "NOT_FOUND", "volume gone", count=2, when="before")
    env.api.remove("pods", "default", "web")
    calls = env.wait_calls("NodeUnpublishVolume", 3, timeout=15)
    assert [c["code"] for c in calls] == ["NOT_FOUND", "NOT_FOUND", "OK"]
    assert calls[1]["time"] - calls[0]["time"] >= 0.4, "retried without backoff"
    env.wait_gone(os.path.dirname(target))
    if persistent:
        unstage = env.wait_calls("NodeUnstageVolume", code="OK")
        assert unstage[0]["time"] >= calls[2]["time"]
    assert not env.driver.violations()


@pytest.mark.parametrize("method", ["NodeUnpublishVolume", "NodeUnstageVolume"])
def test_teardown_answered_ok_but_still_mounted_backs_off(volume_env, method):
    """Item 11: the driver answers OK and leaves the target mounted (the
    hostpath driver after it forgot a publish: "not published, nothing to
    do").  kvolumed called again at once, hundreds of times a second; now
    each retry waits for the operation's backoff (500 ms, doubling), and
    the pod gets one Event for it."""
    env = volume_env
    # A staging that is a mount point, whatever mode the suite runs in: the
    # unstage must be seen leaving it mounted.
    env.driver.control.set_config(stage_mount=True)
    pod, target, staging = teardown_env(env, persistent=True)
    env.driver.control.inject(method, noop=-1)
    env.api.remove("pods", "default", "web")
    calls = env.wait_calls(method, 3, timeout=15)
    gaps = [calls[i + 1]["time"] - calls[i]["time"] for i in range(2)]
    assert 0.4 <= gaps[0] and 0.9 <= gaps[1], f"no backoff between the calls: {gaps}"
    assert all(c["code"] == "OK" for c in calls)
    assert os.path.ismount(staging if method == "NodeUnstageVolume" else target)
    if method == "NodeUnpublishVolume":
        event = env.wait_event("FailedUnMount", "is still a mount point")
        assert len(event) == 1, "one Event, its count raised"
        assert event[0]["message"].startswith('UnmountVolume.TearDown failed for volume "pv-t" : ')
        assert not env.calls("NodeUnstageVolume"), "unstaged under a publish"
    env.driver.control.clear_faults(method)
    env.wait_gone(os.path.dirname(staging), timeout=20)
    assert not env.driver.violations()
