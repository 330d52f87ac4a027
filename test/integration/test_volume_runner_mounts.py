"""What the runner passes to CRI (issue 32): GET /v1/pods/{uid}/volumes lists
every volume a container uses with its kind, and per container (init, app,
ephemeral) the runtime.v1 Mount and Device entries kubelet's makeMounts and
makeBlockVolumes would build, in the CRI API's field names; a volume type
kvolumed does not set up is a final error at once (409, one FailedMount
Event) unless [volumes] runner-kinds leaves it to the runner."""
import os
import shutil
import tempfile
import time

import pytest

from integration.agent_fixtures import DRIVER, wait_until, write_config
from integration.test_agent_localapi import api_get, claim, inline

SELINUX = os.path.exists("/sys/fs/selinux/enforce")


@pytest.fixture
def sockdir():
    d = tempfile.mkdtemp(prefix="kvr", dir="/tmp")  # a unix socket path has 107 bytes at most
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start(env, sockdir, extra=""):
    sock = os.path.join(sockdir, "kvolumed.sock")
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n'
                        f"[api]\nsocket = {sock}\n" + extra)
    env.agent = env.start_agent(path)
    env.agent.wait_for_log("Serving the local volumes API", timeout=30)
    return sock


def mount(container_path, host_path, readonly=False, propagation="PROPAGATION_PRIVATE", rro=False,
          relabel=False):
    return {"container_path": container_path, "host_path": host_path, "readonly": readonly,
            "selinux_relabel": relabel, "propagation": propagation, "recursive_read_only": rro}


def test_mounts_and_devices_per_container_as_cri_wants_them(volume_env, sockdir):
    """Read-only from the mount or from the claim, each propagation, a
    recursive read-only mount, a raw block device, init and ephemeral
    containers: each entry as runtime.v1 Mount / Device."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-fs", "vol-fs", claim="fs")
    env.pvc("fs", "pv-fs")
    env.pv("pv-blk", "vol-blk", claim="blk", volume_mode="Block")
    env.pvc("blk", "pv-blk")
    sock = start(env, sockdir)
    pod = env.pod(
        "web", [inline("scratch"), claim("data", "fs", read_only=True), claim("disk", "blk")],
        mounts=[{"name": "scratch", "mountPath": "/s", "readOnly": True, "recursiveReadOnly": "Enabled"},
                {"name": "data", "mountPath": "/d"},
                {"name": "scratch", "mountPath": "/again", "mountPropagation": "None"}],
        devices=["disk"],
        initContainers=[{"name": "prep", "image": "busybox", "securityContext": {"privileged": True},
                         "volumeMounts": [{"name": "scratch", "mountPath": "/work",
                                           "mountPropagation": "Bidirectional"}]}],
        ephemeralContainers=[{"name": "debug", "image": "busybox",
                              "volumeMounts": [{"name": "data", "mountPath": "/dbg",
                                                "mountPropagation": "HostToContainer"}]}])
    uid = pod["metadata"]["uid"]
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s", timeout=90)
    assert status == 200 and body["allMounted"] is True, body
    vols = {v["name"]: v for v in body["volumes"]}
    assert {n: v["kind"] for n, v in vols.items()} == {"scratch": "csi", "data": "csi", "disk": "csi"}
    scratch, data = env.target(pod, "scratch"), env.target(pod, "pv-fs")
    disk = f"{env.root}/pods/{uid}/volumeDevices/kubernetes.io~csi/pv-blk"
    # CSI relabels only where the host has SELinux (GetSELinuxSupport), and
    # a read-only volume is not kubelet's to relabel (Managed false).
    assert body["containers"] == [
        {"name": "prep", "type": "init", "devices": [], "runnerMounts": [],
         "mounts": [mount("/work", scratch, propagation="PROPAGATION_BIDIRECTIONAL", relabel=SELINUX)]},
        {"name": "c", "type": "app", "runnerMounts": [],
         "mounts": [mount("/s", scratch, readonly=True, rro=True, relabel=SELINUX),
                    mount("/d", data, readonly=True),  # the claim's readOnly wins over the mount's
                    mount("/again", scratch, relabel=SELINUX)],
         "devices": [{"container_path": "/dev/xvd-disk", "host_path": disk, "permissions": "mrw"}]},
        {"name": "debug", "type": "ephemeral", "devices": [], "runnerMounts": [],
         "mounts": [mount("/dbg", data, readonly=True, propagation="PROPAGATION_HOST_TO_CONTAINER")]},
    ]
    for c in body["containers"]:
        for m in c["mounts"]:
            assert os.path.ismount(m["host_path"]), m
    env.api.remove("pods", "default", "web")
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=unmounted&timeout=60s", timeout=90)
    assert status == 200, body


def test_a_subpath_mount_is_the_kubelet_bind_and_holds_all_mounted(volume_env, sockdir):
    """A subPath's host path is kubelet's bind
    pods/<uid>/volume-subpaths/<volume>/<container>/<index>, and the pod is
    all mounted only once that bind is in place."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = start(env, sockdir)
    pod = env.pod("sub", [inline("scratch")],
                  mounts=[{"name": "scratch", "mountPath": "/all"},
                          {"name": "scratch", "mountPath": "/part", "subPath": "a/b"}])
    uid = pod["metadata"]["uid"]
    wait_until(lambda: os.path.ismount(env.target(pod, "scratch")), timeout=30, what="the CSI volume")
    bind = f"{env.root}/pods/{uid}/volume-subpaths/scratch/c/1"
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=30s", timeout=60)
    (c,) = body["containers"]
    assert c["mounts"][1]["host_path"] == bind, c
    assert status == 200 and body["allMounted"] is True, body
    assert os.path.ismount(bind)
    assert os.path.isdir(os.path.join(env.target(pod, "scratch"), "a", "b"))
    # The bind goes before the volume, and nothing is left to the fixtures.
    env.api.remove("pods", "default", "sub")
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=unmounted&timeout=60s", timeout=90)
    assert status == 200, body
    assert not os.path.lexists(bind)


def test_an_unsupported_type_fails_at_once_with_one_event(volume_env, sockdir):
    """An nfs volume and an in-tree (nfs) PV: 409 at once with the reason,
    one FailedMount Event each, listed with state failed; the pod's CSI
    volume is set up all the same (nothing else of the pod harmed)."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-nfs"},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                             "claimRef": {"namespace": "default", "name": "share"},
                             "nfs": {"server": "nfs.example", "path": "/export"}},
                    "status": {"phase": "Available"}})
    env.pvc("share", "pv-nfs")
    sock = start(env, sockdir)
    pod = env.pod("legacy", [inline("scratch"), {"name": "home", "nfs": {"server": "nfs.example", "path": "/h"}},
                             claim("share", "share")])
    uid = pod["metadata"]["uid"]
    t0 = time.monotonic()
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=120s", timeout=150)
    took = time.monotonic() - t0
    assert status == 409, body
    assert took < 60, f"answered after {took:.1f}s: a final error is answered at once, not at the timeout"
    assert ("volume home: unsupported volume type nfs: kvolumed does not set up nfs volumes; use a CSI driver, "
            "or set it up in the pod runner and name nfs in [volumes] runner-kinds") in body["error"], body
    # The claim's PV is read after the pod: its error follows once it is.
    def both_failed():
        st, b, _ = api_get(sock, f"/v1/pods/{uid}/volumes")
        return b if 'unsupported volume type nfs (persistentvolume "pv-nfs")' in str(b) else None
    body = wait_until(both_failed, timeout=30, what="the nfs PV's error")
    vols = {v["name"]: v for v in body["volumes"]}
    assert vols["home"]["state"] == "failed" and vols["home"]["kind"] is None, vols
    assert vols["share"]["state"] == "failed", vols
    assert body["allMounted"] is False
    # The CSI volume is set up anyway, as kubelet does each volume on its own.
    wait_until(lambda: os.path.ismount(env.target(pod, "scratch")), timeout=30, what="the CSI volume")
    env.wait_event("FailedMount", "unsupported volume type nfs: kvolumed", timeout=30)
    env.agent.wait_for_log("Volume home of pod default/legacy: unsupported volume type nfs: kvolumed does not "
                           "set up nfs volumes", timeout=10)
    env.wait_event("FailedMount", 'unsupported volume type nfs (persistentvolume "pv-nfs")', timeout=30)
    # A pass over the pod again (a label changed) says nothing twice.
    obj = env.api.get("pods", "default", "legacy")
    obj["metadata"].setdefault("labels", {})["touched"] = "yes"
    obj["metadata"].pop("resourceVersion", None)
    env.api.update(obj)
    env.agent.wait_for_log("legacy", timeout=10)
    status, again, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=30s", timeout=60)
    assert status == 409, again
    unsupported = [e for e in env.events() if e.get("reason") == "FailedMount"
                   and "unsupported volume type" in e.get("message", "")]
    assert len(unsupported) == 2 and all(e.get("count", 1) == 1 for e in unsupported), unsupported


def test_runner_kinds_are_listed_as_the_runners(volume_env, sockdir):
    """[volumes] runner-kinds = nfs: the nfs volume is the runner's (kind and
    state "runner", its mounts under runnerMounts without a host path), it
    does not hold allMounted, and no Event is made of it; an image volume
    not named there still fails."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = start(env, sockdir, extra="[volumes]\nrunner-kinds = nfs\n")
    pod = env.pod("mixed", [inline("scratch"), {"name": "home", "nfs": {"server": "nfs.example", "path": "/h"}}],
                  mounts=[{"name": "scratch", "mountPath": "/s"},
                          {"name": "home", "mountPath": "/home", "readOnly": True}])
    uid = pod["metadata"]["uid"]
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s", timeout=90)
    assert status == 200 and body["allMounted"] is True, body
    vols = {v["name"]: v for v in body["volumes"]}
    assert vols["home"]["kind"] == "runner" and vols["home"]["state"] == "runner", vols
    assert vols["home"]["type"] == "nfs" and vols["home"]["hostPath"] is None
    (c,) = body["containers"]
    assert c["mounts"] == [mount("/s", env.target(pod, "scratch"), relabel=SELINUX)]
    assert c["runnerMounts"] == [{"container_path": "/home", "readonly": True, "selinux_relabel": False,
                                  "propagation": "PROPAGATION_PRIVATE", "recursive_read_only": False,
                                  "volume": "home"}]
    assert not [e for e in env.events() if "nfs" in e.get("message", "")]

    image = env.pod("img", [{"name": "tools", "image": {"reference": "busybox:1.36"}}])
    status, body, _ = api_get(sock, f"/v1/pods/{image['metadata']['uid']}/volumes?wait=mounted&timeout=60s",
                              timeout=90)
    assert status == 409 and "unsupported volume type image" in body["error"], body


def test_a_pod_volume_the_api_would_refuse_is_a_clear_error(volume_env, sockdir):
    """Bidirectional propagation in a container that is not privileged: the
    volume fails with the rule, never mounted half-way."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = start(env, sockdir)
    pod = env.pod("bidi", [inline("scratch")],
                  mounts=[{"name": "scratch", "mountPath": "/s", "mountPropagation": "Bidirectional"}])
    uid = pod["metadata"]["uid"]
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s", timeout=90)
    assert status == 409, body
    assert ('volumeMount /s of volume "scratch" in container "c" is invalid: Bidirectional mount propagation '
            "is available only to privileged containers") in body["error"], body
    env.wait_event("FailedMount", "Bidirectional mount propagation", timeout=30)
    assert not env.calls("NodePublishVolume")
