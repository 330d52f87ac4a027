"""Hostile claims and names: what cluster users write must never make
kvolumed mount what is not the pod's."""

import os


def ephemeral_volume(name):
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}}}


def test_generic_ephemeral_claim_not_controlled_by_the_pod_is_refused(volume_env):
    """A user creates the claim <pod>-<volume> before the pod (bound to a PV
    of their choosing): kubelet refuses it, and so does kvolumed."""
    env = volume_env
    env.csidriver(attachRequired=False)
    env.pv("pv-planted", "vol-planted", claim="web-scratch")
    env.pvc("web-scratch", "pv-planted")
    env.start()
    env.pod("web", [ephemeral_volume("scratch")])
    event = env.wait_event("FailedMount", "was not created for pod default/web (pod is not owner)")[0]
    assert event["involvedObject"]["name"] == "web"
    assert not env.calls("NodeStageVolume") and not env.calls("NodePublishVolume")


def test_generic_ephemeral_claim_controlled_by_the_pod_is_mounted(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False)
    env.start()
    pod = env.pod("web", [ephemeral_volume("scratch")])
    env.pv("pv-eph", "vol-eph", claim="web-scratch")
    env.api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "web-scratch", "namespace": "default",
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web",
                                                      "uid": pod["metadata"]["uid"], "controller": True,
                                                      "blockOwnerDeletion": True}]},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}},
                             "volumeName": "pv-eph"},
                    "status": {"phase": "Bound"}})
    env.wait_mounted(env.target(pod, "pv-eph"))
    env.api.remove("pods", "default", "web")
    env.wait_gone(env.target(pod, "pv-eph"))
    assert [c["request"]["volume_id"] for c in env.calls("NodePublishVolume")] == ["vol-eph"]


def test_healthz_answers_through_a_flood_of_idle_and_slow_clients(volume_env):
    """Any local process can connect to the metrics port: hundreds of idle
    connections and slow-drip ones (a byte of a request every half second)
    must not shut a probe out, nor grow kvolumed's descriptors unbounded."""
    import os
    import socket
    import time
    from integration.test_agent_metrics import get, start_with_metrics
    env = volume_env
    address = start_with_metrics(env)
    host, port = address.rsplit(":", 1)
    idle, drip = [], []
    try:
        for _ in range(400):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        for _ in range(100):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"G")
            drip.append(s)
        deadline = time.monotonic() + 12  # past the request deadline and MHD's idle timeout
        answered = 0
        while time.monotonic() < deadline:
            for s in drip:
                try:
                    s.sendall(b"E")
                except OSError:
                    pass
            started = time.monotonic()
            status, _, body = get(address, "/healthz")
            assert status == 200, body
            assert time.monotonic() - started < 2.5, "a probe waited behind the flood"
            answered += 1
            time.sleep(0.5)
        assert answered >= 10
        fds = len(os.listdir(f"/proc/{env.agent.proc.pid}/fd"))
        assert fds < 600, f"{fds} descriptors open"
        assert env.agent.proc.poll() is None
    finally:
        for s in idle + drip:
            s.close()


def test_secret_values_appear_nowhere(volume_env):
    """Every flow that carries secrets (stage and publish secrets of a PV, an
    inline volume's publish secret), with a failing call on the way, at debug
    level: no secret value in any log line, Event or file under root-dir."""
    import base64
    import glob
    import json
    from integration.agent_fixtures import DRIVER
    env = volume_env
    values = {"stage": "st4ge-S3CRET-v4lue", "publish": "publ1sh-S3CRET-v4lue", "inline": "inl1ne-S3CRET-v4lue"}
    for name, value in values.items():
        env.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "default"},
                        "data": {"key": base64.b64encode(value.encode()).decode()}})
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-s", "vol-s", claim="cs", nodeStageSecretRef={"name": "stage", "namespace": "default"},
           nodePublishSecretRef={"name": "publish", "namespace": "default"})
    env.pvc("cs", "pv-s")
    env.driver.control.fail_next("NodePublishVolume", "INTERNAL", "try again", count=1)
    env.start()
    pod = env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "cs"}},
                          {"name": "scratch", "csi": {"driver": DRIVER, "nodePublishSecretRef": {"name": "inline"}}}])
    env.wait_mounted(env.target(pod, "pv-s"))
    env.wait_mounted(env.target(pod, "scratch"))
    stage = env.wait_calls("NodeStageVolume")[0]["request"]
    assert stage["secrets"] == {"key": "key"}  # the driver got them (its log keeps keys only)
    texts = {}
    for path in glob.glob(f"{env.root}/**/*", recursive=True):  # while everything is set up
        if os.path.isfile(path) and not os.path.ismount(os.path.dirname(path)):
            texts[path] = open(path, errors="replace").read()
    assert any(p.endswith("vol_data.json") for p in texts) and any(p.endswith("kvolumed.json") for p in texts)
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume")
    texts.update({"log": env.agent.output(), "events": json.dumps(env.events())})
    assert "debug:" in texts["log"]
    for where, text in texts.items():
        for value in values.values():
            assert value not in text, f"secret value in {where}"
            assert base64.b64encode(value.encode()).decode() not in text, f"encoded secret in {where}"


class DeadFuse:
    """A FUSE file system whose daemon never answers (a hung FUSE daemon, or
    in effect a hard NFS mount of a dead server): every access to it blocks
    until the /dev/fuse descriptor is closed."""

    def __init__(self, path):
        import ctypes
        self.path = path
        self.fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(None, use_errno=True)
        opts = f"fd={self.fd},rootmode=40000,user_id=0,group_id=0".encode()
        if libc.mount(b"deadfuse", path.encode(), b"fuse", 0, opts) != 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), "mount fuse")

    def close(self):
        import subprocess
        if self.fd is not None:
            os.close(self.fd)  # aborts the connection: blocked accesses fail with ENOTCONN
            self.fd = None
            subprocess.run(["umount", "-l", self.path], check=False)


def test_a_hung_file_system_does_not_hold_up_the_agent(volume_env):
    """A volume whose file system stops answering right as its publish
    completes: kvolumed must not touch it on its event loop, so /healthz and
    other pods' volumes keep working."""
    import time
    from integration.agent_fixtures import DRIVER
    from integration.test_agent_metrics import get, start_with_metrics
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    address = start_with_metrics(env)
    stuck = env.pod("stuck", [{"name": "v", "csi": {"driver": DRIVER}}])
    env.driver.control.wait_hung("NodePublishVolume", timeout=15)
    fuse = DeadFuse(env.target(stuck, "v"))
    try:
        env.driver.control.release("NodePublishVolume")
        time.sleep(0.5)  # the publish's answer reaches kvolumed
        fine = env.pod("fine", [{"name": "v", "csi": {"driver": DRIVER}}])
        env.wait_mounted(env.target(fine, "v"))
        for _ in range(5):
            started = time.monotonic()
            status, _, _ = get(address, "/healthz")
            assert status == 200 and time.monotonic() - started < 2
            time.sleep(0.2)
        assert env.agent.proc.poll() is None
    finally:
        fuse.close()


def test_a_slow_service_manager_does_not_stall_the_agent(volume_env, tmp_path):
    """sd_notify() blocks once the notify socket's queue is full: a service
    manager that reads late (here: never) must not freeze the event loop.
    STATUS= is sent at most once a second."""
    import socket
    from integration.agent_fixtures import DRIVER, write_config
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    path = str(tmp_path / "notify.sock")
    deaf = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    deaf.bind(path)
    try:
        config = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                              f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n')
        env.agent = env.start_agent(config, env={"NOTIFY_SOCKET": path})
        pods = [env.pod(f"p{i}", [{"name": "v", "csi": {"driver": DRIVER}}]) for i in range(100)]
        for pod in pods:
            env.wait_mounted(env.target(pod, "v"), timeout=30)
    finally:
        deaf.close()
