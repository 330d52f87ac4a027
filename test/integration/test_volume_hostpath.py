"""hostPath volumes (kubelet pkg/volume/hostpath), a pod's own and a PV's:
the type checked (and for DirectoryOrCreate made) off the loop, a failure
reported on the volume alone, nothing of them under root-dir."""
import os
import socket
import stat

from integration.agent_fixtures import wait_until
from integration.test_agent_localapi import api_get


def host_path(name, path, type_=None):
    spec = {"path": str(path)}
    if type_ is not None:
        spec["type"] = type_
    return {"name": name, "hostPath": spec}


def published(env, name, pod="default/web"):
    return f"Volume {name} published for pod {pod}" in env.agent.output()


def wait_published(env, name, pod="default/web"):
    wait_until(lambda: published(env, name, pod), 30, what=lambda: f"{name} published\n" + env.agent.output()[-3000:])


def test_directory_or_create_makes_0755_and_teardown_leaves_it(volume_env, tmp_path):
    env = volume_env
    env.start()
    made = tmp_path / "host" / "made"
    pod = env.pod("web", [host_path("data", made, "DirectoryOrCreate")])
    wait_until(lambda: made.is_dir(), 30, what=lambda: f"{made} made\n" + env.agent.output()[-3000:])
    assert stat.S_IMODE(made.stat().st_mode) == 0o755
    wait_published(env, "data")
    uid = pod["metadata"]["uid"]
    # The runtime is given the spec's path.
    status, body, _ = api_get("/run/kvolumed/kvolumed.sock", f"/v1/pods/{uid}/volumes")
    assert status == 200, body
    vol = {v["name"]: v for v in body["volumes"]}["data"]
    assert (vol["state"], vol["hostPath"]) == ("published", str(made)), vol
    assert not os.path.exists(f"{env.root}/pods/{uid}/volumes/kubernetes.io~host-path")
    (made / "file").write_text("the host's")
    env.api.remove("pods", "default", "web")
    wait_until(lambda: "Volume data unpublished" in env.agent.output(), 30, what="data unpublished")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
    assert (made / "file").read_text() == "the host's"


def test_wrong_type_fails_the_volume_alone_with_an_event(volume_env, tmp_path):
    env = volume_env
    env.start()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    pod = env.pod("web", [host_path("dir", a_file, "Directory"), {"name": "scratch", "emptyDir": {}}])
    event = env.wait_event("FailedMount", f"hostPath type check failed: {a_file} is not a directory",
                           timeout=30)[0]
    assert event["type"] == "Warning"
    assert 'volume "dir"' in event["message"]
    # The pod's other volume is set up all the same.
    wait_published(env, "scratch")
    assert os.path.isdir(f"{env.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~empty-dir/scratch")
    assert not published(env, "dir")


def test_socket_and_char_device_types(volume_env, tmp_path):
    env = volume_env
    env.start()
    sock_path = tmp_path / "s.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock_path))
    try:
        plain = tmp_path / "plain"
        plain.write_text("x")
        env.pod("web", [host_path("sock", sock_path, "Socket"), host_path("null", "/dev/null", "CharDevice"),
                        host_path("notsock", plain, "Socket"), host_path("notchar", tmp_path, "CharDevice")])
        wait_published(env, "sock")
        wait_published(env, "null")
        env.wait_event("FailedMount", f"hostPath type check failed: {plain} is not a socket file", timeout=30)
        env.wait_event("FailedMount", f"hostPath type check failed: {tmp_path} is not a character device",
                       timeout=30)
        assert not published(env, "notsock") and not published(env, "notchar")
    finally:
        s.close()


def test_host_path_pv(volume_env, tmp_path):
    env = volume_env
    env.start()
    made = tmp_path / "pv-dir"
    env.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-host"},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "hostPath": {"path": str(made), "type": "DirectoryOrCreate"},
                             "claimRef": {"namespace": "default", "name": "claim"}},
                    "status": {"phase": "Available"}})
    env.pvc("claim", "pv-host")
    env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}])
    wait_until(lambda: made.is_dir(), 30, what=lambda: f"{made} made\n" + env.agent.output()[-3000:])
    wait_published(env, "pv-host")


def test_restart_checks_again_harmlessly(volume_env, tmp_path):
    import glob
    import signal
    env = volume_env
    env.start()
    made = tmp_path / "made"
    pod = env.pod("web", [host_path("data", made, "DirectoryOrCreate")])
    wait_published(env, "data")
    (made / "file").write_text("kept")
    env.agent.proc.send_signal(signal.SIGKILL)
    env.agent.proc.wait()
    env.start()
    wait_published(env, "data")
    assert (made / "file").read_text() == "kept"
    uid = pod["metadata"]["uid"]
    assert not os.path.exists(f"{env.root}/pods/{uid}/volumes/kubernetes.io~host-path")
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
    wait_until(lambda: not glob.glob(f"{env.root}/kvolumed/pods/*"), 30, what="no records left")
    assert (made / "file").read_text() == "kept"
