"""Every kind of container counts: init containers, app containers and the
ephemeral containers `kubectl debug` adds, for wanting a volume (their
volumeMounts) and for keeping it (their statuses), as kubelet's
GetPodVolumeNames and its pod workers do."""
import os

from integration.agent_fixtures import wait_until

STARTED = "2026-11-22T00:00:00Z"


def running(name):
    return {"name": name, "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
            "state": {"running": {"startedAt": STARTED}}}


def terminated(name):
    return {"name": name, "ready": False, "restartCount": 0, "image": "busybox", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "startedAt": STARTED, "finishedAt": "2026-11-22T00:01:00Z"}}}


def inline(name):
    return {"name": name, "csi": {"driver": "mock.csi.kvolumed.io"}}


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def debug(env, name, mounts):
    """What `kubectl debug` does: an ephemeral container in the spec, soon running."""
    pod = env.api.get("pods", "default", name)
    pod["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox", "targetContainerName": "c",
                                           "volumeMounts": [{"name": m, "mountPath": "/d/" + m} for m in mounts]}]
    pod["status"]["ephemeralContainerStatuses"] = [running("debugger")]
    return env.api.update(pod)


def set_statuses(env, name, **statuses):
    pod = env.api.get("pods", "default", name)
    for key, value in statuses.items():
        pod["status"][key] = value
    return env.api.update(pod)


def settled(env, probe_name):
    """Waits until kvolumed has handled every pod change made so far: pod
    events come in order on one watch, so once a pod created now has its
    volume mounted, the changes before it were seen and a pass ran after them."""
    probe = env.pod(probe_name, [inline("p")])
    env.wait_mounted(env.target(probe, "p"))
    env.wait_calls("NodePublishVolume", code="OK")
    wait_until(lambda: any(c["request"]["target_path"] == env.target(probe, "p")
                           for c in env.calls("NodePublishVolume")), what="the probe's publish logged")


def unpublished(env, target):
    return [c for c in env.calls("NodeUnpublishVolume") if c["request"]["target_path"] == target]


def test_ephemeral_container_wants_and_keeps_the_volumes(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-data", "vol-data", claim="data")
    env.pvc("data", "pv-data")
    env.start()
    pod = env.pod("web", [claim_volume("data", "data"), inline("scratch")],
                  mounts=[{"name": "data", "mountPath": "/data"}])
    set_statuses(env, "web", containerStatuses=[running("c")])
    data, scratch = env.target(pod, "pv-data"), env.target(pod, "scratch")
    env.wait_mounted(data)
    assert not os.path.exists(scratch), "a volume no container mounts was set up"

    # kubectl debug with a mount of the volume no app container uses: wanted now.
    debug(env, "web", ["data", "scratch"])
    env.wait_mounted(scratch)

    # The pod is deleted; its app container has stopped, the debugger runs on.
    set_statuses(env, "web", containerStatuses=[terminated("c")])
    env.api.delete("pods", "default", "web", grace_period_seconds=30)
    settled(env, "probe-1")
    assert os.path.ismount(data) and os.path.ismount(scratch)
    assert not unpublished(env, data) and not unpublished(env, scratch), \
        "unpublished while the ephemeral container still runs"
    assert not env.calls("NodeUnstageVolume")

    # The debugger exits: now nothing runs and the volumes go.
    set_statuses(env, "web", ephemeralContainerStatuses=[terminated("debugger")])
    env.wait_gone(os.path.dirname(data))
    env.wait_gone(os.path.dirname(scratch))
    env.wait_calls("NodeUnstageVolume")
    assert not env.driver.violations()


def test_finished_pod_keeps_volumes_while_a_container_runs(volume_env):
    """Phase Failed, but the status still shows the debugger running (the
    phase says the restartPolicy-governed containers are done, not that every
    container is): the volumes stay until none runs."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("job", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    debug(env, "job", ["scratch"])
    pod = env.api.get("pods", "default", "job")
    pod["status"]["phase"] = "Failed"
    pod["status"]["containerStatuses"] = [terminated("c")]
    env.api.update(pod)
    settled(env, "probe-1")
    assert os.path.ismount(target)
    assert not unpublished(env, target), "unpublished while the ephemeral container still runs"

    set_statuses(env, "job", ephemeralContainerStatuses=[terminated("debugger")])
    env.wait_gone(os.path.dirname(target))
    assert env.api.get("pods", "default", "job") is not None


def test_running_init_container_keeps_the_volumes_of_a_deleted_pod(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod = env.pod("web", [inline("scratch")], mounts=[],
                  initContainers=[{"name": "init", "image": "busybox",
                                   "volumeMounts": [{"name": "scratch", "mountPath": "/s"}]}])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    pod = env.api.get("pods", "default", "web")
    pod["status"]["phase"] = "Pending"
    pod["status"]["initContainerStatuses"] = [running("init")]
    env.api.update(pod)
    env.api.delete("pods", "default", "web", grace_period_seconds=30)
    settled(env, "probe-1")
    assert os.path.ismount(target) and not unpublished(env, target)
    set_statuses(env, "web", initContainerStatuses=[terminated("init")])
    env.wait_gone(os.path.dirname(target))
