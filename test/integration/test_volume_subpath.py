"""subPath and subPathExpr volumeMounts, for every kind (kubelet_pods.go
makeMounts, pkg/volume/util/subpath): bound at
pods/<uid>/volume-subpaths/<volume>/<container>/<index> before the publish
counts as done, refused through a symlink out of the volume, removed before
the volume's unpublish."""
import os

from integration.agent_fixtures import DRIVER, wait_until
from integration.test_agent_localapi import api_get

API_SOCKET = "/run/kvolumed/kvolumed.sock"


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def subpath_pod(env, volumes, mounts, env_vars=()):
    container = {"name": "c", "image": "busybox", "volumeMounts": mounts, "env": list(env_vars)}
    return env.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                           "spec": {"nodeName": "test-node", "volumes": volumes, "containers": [container]},
                           "status": {"phase": "Running"}})


def test_subpath_and_subpath_expr_of_an_emptydir_and_a_csi_volume(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = subpath_pod(env, [{"name": "scratch", "emptyDir": {}}, {"name": "inline", "csi": {"driver": DRIVER}}],
                      [{"name": "scratch", "mountPath": "/a", "subPath": "sub/dir"},
                       {"name": "scratch", "mountPath": "/b", "subPathExpr": "$(POD_NAME)/logs"},
                       {"name": "inline", "mountPath": "/c", "subPath": "data"},
                       {"name": "scratch", "mountPath": "/whole"}],
                      env_vars=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
    uid = pod["metadata"]["uid"]
    subpaths = f"{env.root}/pods/{uid}/volume-subpaths"
    volume = f"{env.root}/pods/{uid}/volumes/kubernetes.io~empty-dir/scratch"
    for bind in (f"{subpaths}/scratch/c/0", f"{subpaths}/scratch/c/1", f"{subpaths}/inline/c/2"):
        wait_until(lambda: mounted(bind), 30, what=lambda: f"{bind} bound\n" + env.agent.output()[-3000:])
    assert not os.path.exists(f"{subpaths}/scratch/c/3")
    # Each bind shows its place in the volume.
    with open(f"{subpaths}/scratch/c/0/written", "w") as f:
        f.write("through the subPath")
    assert open(f"{volume}/sub/dir/written").read() == "through the subPath"
    assert os.path.isdir(f"{volume}/web/logs")
    with open(f"{subpaths}/inline/c/2/x", "w") as f:
        f.write("csi")
    assert open(f"{env.target(pod, 'inline')}/data/x").read() == "csi"

    # The binds go before the volumes: the unpublish finds nothing holding them.
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
    env.wait_calls("NodeUnpublishVolume", 1)
    assert "volume-subpaths" not in open("/proc/self/mountinfo").read()


def test_subpath_through_a_symlink_out_of_the_volume_is_refused(volume_env, tmp_path):
    env = volume_env
    env.start()
    host = tmp_path / "host"
    host.mkdir()
    os.symlink("/etc", host / "evil")
    (host / "fine").mkdir()
    pod = subpath_pod(env, [{"name": "data", "hostPath": {"path": str(host), "type": "Directory"}},
                            {"name": "scratch", "emptyDir": {}}],
                      [{"name": "data", "mountPath": "/a", "subPath": "evil"},
                       {"name": "scratch", "mountPath": "/b", "subPath": "ok"}])
    uid = pod["metadata"]["uid"]
    event = env.wait_event("FailedMount", 'failed to prepare subPath for volumeMount "data" of container "c"',
                           timeout=30)[0]
    assert event["type"] == "Warning"
    # The local API says why the pod waits, as the Event does.
    def reason():
        status, body, _ = api_get(API_SOCKET, f"/v1/pods/{uid}/volumes")
        vols = {v["name"]: v for v in body.get("volumes", [])} if status == 200 else {}
        return "failed to prepare subPath for volumeMount" in (vols.get("data") or {}).get("reason", "")
    wait_until(reason, 30, what="the reason in /v1/pods/<uid>/volumes")
    # The reason, with the host's layout, is the journal's.
    wait_until(lambda: "resolves outside the volume" in env.agent.output(), 30, what="the reason logged")
    assert not mounted(f"{env.root}/pods/{uid}/volume-subpaths/data/c/0")
    # The pod's other volume and its subPath are set up all the same.
    wait_until(lambda: mounted(f"{env.root}/pods/{uid}/volume-subpaths/scratch/c/1"), 30, what="scratch subPath")
    assert sorted(os.listdir("/etc")) == sorted(os.listdir(host / "evil"))
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)


def test_subpath_binds_of_a_csi_pv_go_before_its_unpublish_and_unstage(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-1", "vol-1", claim="c1")
    env.pvc("c1", "pv-1")
    env.start()
    pod = subpath_pod(env, [{"name": "data", "persistentVolumeClaim": {"claimName": "c1"}}],
                      [{"name": "data", "mountPath": "/a", "subPath": "inner"}])
    uid = pod["metadata"]["uid"]
    bind = f"{env.root}/pods/{uid}/volume-subpaths/data/c/0"
    wait_until(lambda: mounted(bind), 30, what=lambda: f"{bind} bound\n" + env.agent.output()[-3000:])
    with open(f"{bind}/f", "w") as f:
        f.write("pv")
    assert open(f"{env.target(pod, 'pv-1')}/inner/f").read() == "pv"
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume", 1, timeout=30)
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
    # The driver's log has the call before kvolumed has its answer.
    wait_until(lambda: "Volume pv-1 unstaged" in env.agent.output(), 30, what="the unstage logged")
    out = env.agent.output()
    unbound = out.index(f"Unmounted subPath bind {env.root}/pods/{uid}/volume-subpaths/data/c/0")
    unpublished = out.index("Volume pv-1 unpublished")
    unstaged = out.index("Volume pv-1 unstaged")
    assert unbound < unpublished < unstaged
    # The driver was asked to unpublish once the bind was gone: its target held nothing of ours.
    assert [c["code"] for c in env.calls("NodeUnpublishVolume")] == ["OK"]
    assert [c["code"] for c in env.calls("NodeUnstageVolume")] == ["OK"]
