"""The CSI requests kvolumed sends, field by field, against kubelet's
(pkg/volume/csi: csi_mounter.go, csi_attacher.go, csi_block.go,
csi_client.go; operation_generator.go): real drivers are written against
kubelet's exact requests.  Each test checks what the mock driver received
(its call log) or what the fake API server was asked."""
import os
import time

from integration.agent_fixtures import DRIVER, answered_requests, wait_until
from integration.test_volume_persistent import attachment_name
from integration.test_volume_selinux import CTX1, LEVEL1, MOUNT_ALL, context, publish_flags, selinuxfs, \
    stage_flags

UNIQUE = f"kubernetes.io/csi/{DRIVER}^"
BLOCK = "plugins/kubernetes.io/csi/volumeDevices"
MI = 1024 * 1024


def claim_volume(name, claim, read_only=False):
    v = {"name": name, "persistentVolumeClaim": {"claimName": claim}}
    if read_only:
        v["persistentVolumeClaim"]["readOnly"] = True
    return v


def volume(env, name, handle, modes, volume_mode=None, **csi):
    """A PV with these access modes and its bound claim (named like the PV)."""
    env.pv(name, handle, claim=name, volume_mode=volume_mode, **csi)
    pv = env.api.get("persistentvolumes", None, name)
    pv["spec"]["accessModes"] = modes
    pv["metadata"].pop("resourceVersion", None)
    env.api.update(pv)
    env.pvc(name, name)


def calls_for(env, method, key, value):
    return wait_until(lambda: [c for c in env.calls(method) if c["request"].get(key) == value],
                      what=f"{method} with {key}={value}")


# ---- volume_mount_group -----------------------------------------------------------

def test_volume_mount_group_is_the_pods_fs_group_whenever_the_driver_has_the_capability(volume_env):
    """kubelet (csi_attacher.go MountDevice, csi_mounter.go SetUpAt) passes
    the pod's fsGroup as volume_mount_group whenever the driver has
    VOLUME_MOUNT_GROUP, whatever fsGroupPolicy, access modes, fsType or
    readOnly say: azurefile and smb make it the SMB gid= option."""
    env = volume_env
    env.driver.control.set_caps("STAGE_UNSTAGE_VOLUME", "VOLUME_MOUNT_GROUP")
    env.csidriver(attachRequired=False)  # fsGroupPolicy ReadWriteOnceWithFSType (the default)
    volume(env, "pv-rwx", "vol-rwx", ["ReadWriteMany"])  # no fsType
    volume(env, "pv-ro", "vol-ro", ["ReadWriteOnce"], fsType="ext4")
    volume(env, "pv-nogroup", "vol-nogroup", ["ReadWriteMany"])
    env.start()
    a = env.pod("a", [claim_volume("data", "pv-rwx")], security_context={"fsGroup": 4242})
    b = env.pod("b", [claim_volume("data", "pv-ro", read_only=True)], security_context={"fsGroup": 4343})
    c = env.pod("c", [claim_volume("data", "pv-nogroup")])
    for p, pv in ((a, "pv-rwx"), (b, "pv-ro"), (c, "pv-nogroup")):
        env.wait_mounted(env.target(p, pv))

    def group(call):
        return call["request"]["volume_capability"]["mount"].get("volume_mount_group")
    assert group(calls_for(env, "NodeStageVolume", "volume_id", "vol-rwx")[-1]) == "4242"
    assert group(calls_for(env, "NodePublishVolume", "volume_id", "vol-rwx")[-1]) == "4242"
    assert group(calls_for(env, "NodeStageVolume", "volume_id", "vol-ro")[-1]) == "4343"
    assert group(calls_for(env, "NodePublishVolume", "volume_id", "vol-ro")[-1]) == "4343"
    # No fsGroup in the pod: none in the request.
    assert group(calls_for(env, "NodeStageVolume", "volume_id", "vol-nogroup")[-1]) is None
    assert group(calls_for(env, "NodePublishVolume", "volume_id", "vol-nogroup")[-1]) is None
    assert not env.driver.violations()


# ---- fsGroup: ReadWriteOnce anywhere in the list ---------------------------------------

def test_fs_group_applies_with_read_write_once_anywhere_in_the_access_modes(volume_env):
    """kubelet's supportsFSGroup (csi_mounter.go) asks hasReadWriteOnce(the
    PV's accessModes): RWO second in the list counts."""
    env = volume_env
    env.driver.control.set_caps("STAGE_UNSTAGE_VOLUME")
    env.csidriver(attachRequired=False)
    volume(env, "pv-two", "vol-two", ["ReadOnlyMany", "ReadWriteOnce"], fsType="ext4")
    volume(env, "pv-rox", "vol-rox", ["ReadOnlyMany"], fsType="ext4")
    env.start()
    a = env.pod("a", [claim_volume("data", "pv-two")], security_context={"fsGroup": 4545})
    b = env.pod("b", [claim_volume("data", "pv-rox")], security_context={"fsGroup": 4545})
    two, rox = env.target(a, "pv-two"), env.target(b, "pv-rox")
    env.wait_mounted(two)
    env.wait_mounted(rox)
    wait_until(lambda: os.stat(two).st_gid == 4545, what="group 4545 on the volume whose modes hold RWO")
    assert os.stat(rox).st_gid != 4545


# ---- NodeExpandVolume: the older protocol -------------------------------------------------

def test_expansion_without_allocated_resource_statuses(volume_env):
    """An API server or external-resizer that does not set
    allocatedResourceStatuses: the claim's status.capacity below the PV's is
    the request (kubelet's legacyCallNodeExpandOnPlugin,
    operation_generator.go).  The file system is grown, the claim's capacity
    set and its resize conditions dropped; no allocatedResourceStatuses is
    written that the resizer does not know."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-grow", "vol-grow", claim="grow", fsType="ext4")
    env.pvc("grow", "pv-grow")
    claim = env.api.get("persistentvolumeclaims", "default", "grow")
    claim["status"]["capacity"] = {"storage": "64Mi"}
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)
    env.start(extra="[volumes]\nexpand-check-interval = 1s\n")
    pod = env.pod("web", [claim_volume("data", "grow")])
    env.wait_mounted(env.target(pod, "pv-grow"))

    pv = env.api.get("persistentvolumes", None, "pv-grow")
    pv["spec"]["capacity"] = {"storage": "128Mi"}
    pv["metadata"].pop("resourceVersion", None)
    env.api.update(pv)
    claim = env.api.get("persistentvolumeclaims", "default", "grow")
    claim["spec"]["resources"]["requests"]["storage"] = "128Mi"
    claim["status"]["conditions"] = [{"type": "FileSystemResizePending", "status": "True"}]
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)

    call = env.wait_calls("NodeExpandVolume", code="OK", timeout=15)[0]
    assert int(call["request"]["capacity_range"]["required_bytes"]) == 128 * MI
    status = wait_until(lambda: (s := env.api.get("persistentvolumeclaims", "default", "grow")["status"])
                        .get("capacity", {}).get("storage") == "128Mi" and s, what="the claim's new capacity")
    assert not [c for c in status.get("conditions", []) if c["type"] == "FileSystemResizePending"]
    assert "allocatedResourceStatuses" not in status


def grown_pv(env):
    """A claim "grow" bound to a PV the controller grew to 128Mi while no pod used it."""
    env.pv("pv-grow", "vol-grow", claim="grow", fsType="ext4")
    pv = env.api.get("persistentvolumes", None, "pv-grow")
    pv["spec"]["capacity"] = {"storage": "128Mi"}
    pv["metadata"].pop("resourceVersion", None)
    env.api.update(pv)
    env.pvc("grow", "pv-grow")


def test_expansion_happens_before_the_publish_counts_as_done(volume_env):
    """kubelet expands inside MountVolume, after SetUp and before the volume
    counts as mounted (operation_generator.go expandVolumeDuringMount): the
    pod's containers see the new size from their start.  The PV grew while no
    pod used it; the pod's publish is followed by NodeExpandVolume before the
    publish is reported done."""
    from integration.test_agent_volumes_json import by_name, start, volumes
    env = volume_env
    env.csidriver(attachRequired=False)
    grown_pv(env)
    claim = env.api.get("persistentvolumeclaims", "default", "grow")
    claim["spec"]["resources"]["requests"]["storage"] = "128Mi"
    claim["status"]["capacity"] = {"storage": "64Mi"}
    claim["status"]["allocatedResources"] = {"storage": "128Mi"}
    claim["status"]["allocatedResourceStatuses"] = {"storage": "NodeResizePending"}
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)
    address = start(env)
    env.driver.control.hang("NodeExpandVolume", count=1)
    pod = env.pod("web", [claim_volume("data", "grow")])
    env.driver.control.wait_hung("NodeExpandVolume", timeout=15)
    # The expansion holds the publish: not done while it runs.
    vol = by_name(volumes(address)).get(UNIQUE + "vol-grow")
    assert vol is not None
    assert not [p for p in vol["publishes"] if p["state"] == "done"], vol["publishes"]
    env.driver.control.release("NodeExpandVolume")
    wait_until(lambda: [p for p in by_name(volumes(address))[UNIQUE + "vol-grow"]["publishes"]
                        if p["state"] == "done"], what="the publish done after the expansion")
    publish = env.wait_calls("NodePublishVolume", code="OK")[0]
    expand = env.wait_calls("NodeExpandVolume", code="OK")[0]
    assert publish["time"] <= expand["time"]
    assert expand["request"]["volume_path"] == env.target(pod, "pv-grow")
    assert int(expand["request"]["capacity_range"]["required_bytes"]) == 128 * MI
    status = wait_until(lambda: (s := env.api.get("persistentvolumeclaims", "default", "grow")["status"])
                        .get("capacity", {}).get("storage") == "128Mi" and s, what="the claim's new capacity")
    assert "storage" not in (status.get("allocatedResourceStatuses") or {})
    # Once: the check after the publish finds nothing more to do.
    time.sleep(1.0)
    assert len(env.calls("NodeExpandVolume")) == 1
    assert not env.driver.violations()


def test_expansion_failing_inside_the_publish_holds_it_and_is_retried(volume_env):
    """A non-final NodeExpandVolume error inside the mount fails the mount
    (kubelet: "MountVolume.Setup failed while expanding volume", the volume
    uncertain); the retry grows it, resuming after the NodePublishVolume
    that answered OK rather than calling it again (issue 29 item 9: a retry
    never repeats a CSI call kvolumed saw succeed)."""
    env = volume_env
    env.csidriver(attachRequired=False)
    grown_pv(env)
    claim = env.api.get("persistentvolumeclaims", "default", "grow")
    claim["status"]["capacity"] = {"storage": "64Mi"}  # the older protocol: no allocatedResourceStatuses
    claim["metadata"].pop("resourceVersion", None)
    env.api.update(claim)
    env.start(extra="[volumes]\nexpand-check-interval = 1h\n")
    env.driver.control.fail_next("NodeExpandVolume", "UNAVAILABLE", "resizer busy")
    env.pod("web", [claim_volume("data", "grow")])
    event = env.wait_event("FailedMount", "while expanding volume")[0]
    assert "resizer busy" in event["message"]
    env.wait_calls("NodeExpandVolume", code="OK", timeout=15)
    wait_until(lambda: env.api.get("persistentvolumeclaims", "default", "grow")["status"]
               .get("capacity", {}).get("storage") == "128Mi", what="the claim's new capacity")
    publishes = env.calls("NodePublishVolume")
    expands = env.calls("NodeExpandVolume")
    assert [c["code"] for c in expands[:2]] == ["UNAVAILABLE", "OK"], expands
    assert len(publishes) == 1 and publishes[0]["code"] == "OK", publishes
    assert publishes[0]["time"] <= expands[0]["time"]
    assert "resuming after the call" in env.agent.output()


# ---- staging_target_path ----------------------------------------------------------------

def test_block_publish_always_gets_the_staging_path(volume_env):
    """csi_block.go publishVolumeForBlock passes m.GetStagingPath() whatever
    the driver's capabilities."""
    env = volume_env
    env.driver.control.set_caps()  # no STAGE_UNSTAGE_VOLUME
    env.csidriver(attachRequired=False)
    env.pv("pv-blk", "vol-blk", claim="blk", volume_mode="Block")
    env.pvc("blk", "pv-blk")
    env.start()
    pod = env.pod("web", [claim_volume("disk", "blk")], devices=["disk"])
    pub = env.wait_calls("NodePublishVolume", code="OK", timeout=15)[0]["request"]
    assert pub["target_path"] == f"{env.root}/{BLOCK}/publish/pv-blk/{pod['metadata']['uid']}"
    assert pub["staging_target_path"] == f"{env.root}/{BLOCK}/staging/pv-blk"
    assert not env.calls("NodeStageVolume")
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnpublishVolume", code="OK")
    wait_until(lambda: not os.path.exists(f"{env.root}/{BLOCK}/pv-blk"), what="block dirs gone")
    assert not env.driver.violations()


# ---- the stage secret -----------------------------------------------------------------

def test_stage_secret_is_not_read_for_a_driver_without_stage_unstage(volume_env):
    """csi_attacher.go MountDevice reads nodeStageSecretRef only when the
    driver stages: a stale reference fails nothing kubelet would mount."""
    env = volume_env
    env.driver.control.set_caps()  # no STAGE_UNSTAGE_VOLUME
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1", nodeStageSecretRef={"name": "gone", "namespace": "default"})
    env.pvc("c1", "pv-1")
    env.start()
    pod = env.pod("web", [claim_volume("data", "c1")])
    env.wait_mounted(env.target(pod, "pv-1"))
    assert not [r for r in env.api.requests() if "/secrets/gone" in r["path"]]


# ---- publish_context read at every stage and publish --------------------------------------

def test_publish_context_is_read_again_for_each_publish(volume_env):
    """kubelet's getPublishContext GETs the VolumeAttachment at every
    MountDevice and SetUp: after a re-attach the next publish carries the
    attachment's new metadata (azuredisk's LUN, aws-ebs's device path)."""
    env = volume_env
    env.csidriver(attachRequired=True)
    env.pv("pv-att", "vol-att", claim="att")
    env.pvc("att", "pv-att")
    node = env.node()
    node["status"]["volumesAttached"] = [{"name": UNIQUE + "vol-att", "devicePath": ""}]
    env.api.update(node)
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                    "metadata": {"name": attachment_name("vol-att")},
                    "spec": {"attacher": DRIVER, "nodeName": "test-node",
                             "source": {"persistentVolumeName": "pv-att"}},
                    "status": {"attached": True, "attachmentMetadata": {"lun": "3"}}})
    env.start()
    a = env.pod("a", [claim_volume("data", "att")])
    env.wait_mounted(env.target(a, "pv-att"))
    assert env.wait_calls("NodePublishVolume")[0]["request"]["publish_context"] == {"lun": "3"}

    va = env.api.get("volumeattachments", None, attachment_name("vol-att"))
    va["status"]["attachmentMetadata"] = {"lun": "7"}
    va["metadata"].pop("resourceVersion", None)
    env.api.update(va)
    b = env.pod("b", [claim_volume("data", "att")])
    env.wait_mounted(env.target(b, "pv-att"))
    pub = calls_for(env, "NodePublishVolume", "target_path", env.target(b, "pv-att"))[-1]
    assert pub["request"]["publish_context"] == {"lun": "7"}
    gets = [r for r in env.api.requests() if r["method"] == "GET"
            and r["path"].endswith("/volumeattachments/" + attachment_name("vol-att"))]
    assert len(gets) >= 3  # the stage and both publishes


# ---- SELinux -------------------------------------------------------------------------------

def test_selinux_context_from_the_containers_options(volume_env, tmp_path, monkeypatch):
    """kubelet takes each container's effective seLinuxOptions (the
    container's over the pod's, DetermineEffectiveSecurityContext) for the
    volumes it mounts (volume_manager.go GetPodVolumeNames)."""
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-rwop", "vol-rwop", ["ReadWriteOncePod"])
    env.start()
    pod = env.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                          "spec": {"nodeName": "test-node", "volumes": [claim_volume("data", "pv-rwop")],
                                   "securityContext": {"seLinuxOptions": {"level": "s0:c9,c10"}},
                                   "containers": [{"name": "c", "image": "busybox",
                                                   "volumeMounts": [{"name": "data", "mountPath": "/d"}],
                                                   "securityContext": {"seLinuxOptions": {"level": LEVEL1}}}]},
                          "status": {"phase": "Running"}})
    target = env.target(pod, "pv-rwop")
    env.wait_mounted(target)
    assert stage_flags(env, "vol-rwop") == [context(CTX1)]
    assert publish_flags(env, target) == [context(CTX1)]


def test_selinux_mount_all_needs_exactly_one_access_mode(volume_env, tmp_path, monkeypatch):
    """kubelet's VolumeSupportsSELinuxMount (pkg/volume/util/selinux.go):
    a PV with more than one access mode is never mounted with context=."""
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-two", "vol-two", ["ReadWriteOnce", "ReadOnlyMany"])
    env.start(extra=MOUNT_ALL)
    pod = env.pod("web", [claim_volume("data", "pv-two")],
                  security_context={"seLinuxOptions": {"level": LEVEL1}, "seLinuxChangePolicy": "MountOption"})
    target = env.target(pod, "pv-two")
    env.wait_mounted(target)
    assert stage_flags(env, "vol-two") == []
    assert publish_flags(env, target) == []


def test_selinux_two_labels_for_one_volume_in_a_pod_fail_it(volume_env, tmp_path, monkeypatch):
    """Two containers mounting one volume with different effective labels:
    one mount cannot carry both, and kubelet's desired state refuses the
    volume (when it would be mounted with context= at all)."""
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-rwop", "vol-rwop", ["ReadWriteOncePod"])
    env.start()
    mount = [{"name": "data", "mountPath": "/d"}]
    env.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"nodeName": "test-node", "volumes": [claim_volume("data", "pv-rwop")],
                             "securityContext": {"seLinuxOptions": {"level": LEVEL1}},
                             "containers": [{"name": "a", "image": "busybox", "volumeMounts": mount},
                                            {"name": "b", "image": "busybox", "volumeMounts": mount,
                                             "securityContext": {"seLinuxOptions": {"level": "s0:c5,c6"}}}]},
                    "status": {"phase": "Running"}})
    event = env.wait_event("FailedMount", "two different SELinux contexts")[0]
    assert CTX1 in event["message"] and "s0:c5,c6" in event["message"]
    time.sleep(0.5)
    assert not env.calls("NodeStageVolume") and not env.calls("NodePublishVolume")
