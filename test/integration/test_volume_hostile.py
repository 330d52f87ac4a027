"""Hostile claims and names: what cluster users write must never make
kvolumed mount what is not the pod's."""

import os
from integration.agent_fixtures import wait_until


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
    env.bind("web-scratch", "pv-eph")  # the PV's claimRef gets the claim's uid
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
    wait_until(lambda: get(address, "/healthz")[0] == 200, timeout=10, what="/healthz ok (synced)")
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


def start_with_stall(env, stall_ms, csi=""):
    """kvolumed (as the node) with /metrics and /volumes on a free port, and
    the fsGroup walk's stall deadline lowered from 2 min to stall_ms."""
    from integration.agent_fixtures import DRIVER, write_config
    from integration.test_agent_metrics import SERVING
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n', csi=csi)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n"))
    env.agent = env.start_agent(path, env={"KVOLUMED_TEST_FSGROUP_STALL_MS": str(stall_ms)})
    env.agent.wait_for_log("Serving /metrics")
    return SERVING.search(env.agent.output()).group(1)


def described(address, unique):
    import json
    from integration.test_agent_metrics import get
    status, _, body = get(address, "/volumes")
    assert status == 200, body
    state = json.loads(body)
    return state, next((v for v in state["volumes"] if v["unique_name"] == unique), None)


def children_of(pid):
    """(pid, state) of the processes whose parent is pid."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    fields = dict(line.split(":\t", 1) for line in f.read().splitlines() if ":\t" in line)
            except OSError:
                continue
            if fields.get("PPid", "").strip() == str(pid):
                found.append((int(entry), fields.get("State", "?").split()[0]))
    return found


def assert_pods_come_and_go(env, address, names):
    """Other pods' volumes are set up and torn down, and /healthz answers
    promptly, whatever the hung volume does meanwhile."""
    import time
    from integration.agent_fixtures import DRIVER
    from integration.test_agent_metrics import get
    for name in names:
        pod = env.pod(name, [{"name": "v", "csi": {"driver": DRIVER}}], security_context={"fsGroup": 3000})
        env.wait_mounted(env.target(pod, "v"))
        # Its own fsGroup walk is not held up by the hung one.
        wait_until(lambda: os.stat(env.target(pod, "v")).st_gid == 3000, what=f"fsGroup applied to {name}")
        started = time.monotonic()
        status, _, _ = get(address, "/healthz")
        assert status == 200 and time.monotonic() - started < 2
        env.api.remove("pods", "default", name)
        env.wait_gone(env.target(pod, "v"))


def test_a_hung_file_system_does_not_hold_up_the_agent(volume_env):
    """A volume whose file system stops answering right as its publish
    completes, with an fsGroup to apply: kvolumed never touches it on its
    event loop (the walk runs in a child, with a deadline), so /healthz and
    other pods' volumes keep working; the volume is reported unresponsive
    (an Event, kvolumed_volume_conditions{condition="unresponsive"}, /volumes) and retried
    with backoff until its file system answers again."""
    from integration.agent_fixtures import DRIVER
    from integration.test_agent_metrics import get, samples
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"], fsGroupPolicy="File")
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    address = start_with_stall(env, 1500)
    stuck = env.pod("stuck", [{"name": "v", "csi": {"driver": DRIVER}}], security_context={"fsGroup": 2000})
    unique = f"kubernetes.io/csi/{stuck['metadata']['uid']}-v"
    env.driver.control.wait_hung("NodePublishVolume", timeout=15)
    fuse = DeadFuse(env.target(stuck, "v"))
    try:
        env.driver.control.release("NodePublishVolume")
        assert_pods_come_and_go(env, address, ["fine0"])
        event = env.wait_event("VolumeUnresponsive", 'volume "v" does not answer', timeout=15)[0]
        assert event["type"] == "Warning" and event["involvedObject"]["uid"] == stuck["metadata"]["uid"]

        def reported():
            state, vol = described(address, unique)
            return state["unresponsive"] == 1 and vol and vol["unresponsive"] and (state, vol)
        state, vol = wait_until(reported, what="the volume reported unresponsive in /volumes")
        assert vol["unresponsive_since"] is not None and vol["next_retry"] is not None
        assert "does not answer" in vol["last_error"]["message"]
        assert vol["last_error"]["operation"] == "publish"
        assert vol["publishes"][0]["state"] == "uncertain"  # mounted, not as the pod asked
        _, _, body = get(address, "/metrics")
        assert samples(body)['kvolumed_volume_conditions{condition="unresponsive"}'] == 1

        # Retried with backoff (a second stalled walk doubled it), while
        # other pods' volumes keep coming and going.
        assert_pods_come_and_go(env, address, ["fine1", "fine2"])
        wait_until(lambda: described(address, unique)[1]["retries"][0]["backoff_seconds"] >= 1.0, timeout=20,
                   what="a second failed attempt")
        assert env.agent.proc.poll() is None
    finally:
        fuse.close()
    # It answers again: the next retry publishes it and the report clears.
    wait_until(lambda: (v := described(address, unique)[1]) and not v["unresponsive"]
               and v["publishes"][0]["state"] == "done", timeout=30, what="the volume published once it answers")
    assert os.stat(env.target(stuck, "v")).st_gid == 2000
    _, _, body = get(address, "/metrics")
    assert samples(body)['kvolumed_volume_conditions{condition="unresponsive"}'] == 0
    env.api.remove("pods", "default", "stuck")
    env.wait_gone(env.target(stuck, "v"))


def test_an_fsgroup_walk_that_hangs_fails_at_its_deadline(volume_env):
    """The fsGroup walk into a file system that does not answer is stopped
    when it made no progress for the deadline (2 min by default, 3 s here):
    the publish fails with a VolumeUnresponsive and a FailedMount Event, not
    before the deadline; the walking child is killed and reaped, so retries
    do not pile up children stuck in the file system; other pods' walks and
    volumes are unaffected."""
    import time
    from integration.agent_fixtures import DRIVER
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"], fsGroupPolicy="File")
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    address = start_with_stall(env, 3000)
    stuck = env.pod("stuck", [{"name": "v", "csi": {"driver": DRIVER}}], security_context={"fsGroup": 2000})
    unique = f"kubernetes.io/csi/{stuck['metadata']['uid']}-v"
    env.driver.control.wait_hung("NodePublishVolume", timeout=15)
    fuse = DeadFuse(env.target(stuck, "v"))
    try:
        released = time.monotonic()
        env.driver.control.release("NodePublishVolume")
        assert_pods_come_and_go(env, address, ["fine"])
        # The walk cannot have been given up before its deadline.
        if time.monotonic() - released < 2.5:
            assert not [e for e in env.events() if e.get("reason") == "VolumeUnresponsive"]
        event = env.wait_event("VolumeUnresponsive", "made no progress for 3.0 s", timeout=15)[0]
        assert time.monotonic() - released >= 3.0
        assert event["involvedObject"]["name"] == "stuck"
        failed = env.wait_event("FailedMount", "its file system does not answer")[0]
        assert failed["message"].startswith('MountVolume.SetUp failed for volume "v"')
        # Three stalled walks: each child was killed and reaped, none piles up.
        wait_until(lambda: described(address, unique)[1]["retries"][0]["backoff_seconds"] >= 2.0, timeout=30,
                   what="a third failed attempt")
        # A killed child is a zombie until the loop handles its SIGCHLD: wait
        # for the reaping, which a pile-up of children would never reach.
        wait_until(lambda: (c := children_of(env.agent.proc.pid), len(c) <= 1 and not [x for x in c if x[1] == "Z"])[1],
                   timeout=30, what="at most one walking child and no zombie")
        assert env.agent.proc.poll() is None
    finally:
        fuse.close()
    env.wait_mounted(env.target(stuck, "v"))
    wait_until(lambda: (v := described(address, unique)[1]) and v["publishes"][0]["state"] == "done"
               and v["last_error"] is None, timeout=30, what="published once the file system answers")
    env.api.remove("pods", "default", "stuck")
    env.wait_gone(env.target(stuck, "v"))


def test_staging_again_over_a_hung_file_system_does_not_hold_up_the_agent(volume_env):
    """A NodeStageVolume that times out after the driver mounted leaves the
    volume uncertain, its staging path a mount point whose file system may no
    longer answer.  Staging it again makes the path's directories first: that
    must ask the file system mounted there nothing on the event loop (it
    once opened the mount point for reading, and the loop hung in FUSE's
    OPENDIR).  The retry reaches the driver, other pods' volumes come and go."""
    from integration.agent_fixtures import wait_until
    from integration.test_agent_metrics import get
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"], fsGroupPolicy="File")
    env.pv("pv-hung", "vol-hung", claim="hung")
    env.pvc("hung", "pv-hung")
    env.driver.control.hang("NodeStageVolume", count=1, when="after")
    address = start_with_stall(env, 120000, csi="call-timeout = 2s\n")
    env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "hung"}}])
    env.driver.control.wait_hung("NodeStageVolume", timeout=15)
    fuse = DeadFuse(env.staging("vol-hung"))
    try:
        # The call times out (uncertain), and the stage is retried after its
        # backoff; /healthz answers all along (a loop stuck in the file
        # system would leave it unanswered: urllib's 5 s timeout).
        def retried():
            status, _, _ = get(address, "/healthz")
            assert status == 200
            return len(env.calls("NodeStageVolume")) >= 2
        wait_until(retried, timeout=20, what="the stage tried again")
        assert "timed out" in env.agent.output() or "DeadlineExceeded" in env.agent.output()
        assert_pods_come_and_go(env, address, ["fine0", "fine1"])
        assert env.agent.proc.poll() is None
    finally:
        fuse.close()
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(env.staging("vol-hung")), timeout=30)


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
        # Generous: 100 publishes of kvolumed under ASan beside parallel
        # test workers on 2 cores took over 2 minutes (5.8 s each); a frozen
        # loop never ends them.
        targets = [env.target(pod, "v") for pod in pods]
        wait_until(lambda: all(os.path.ismount(t) for t in targets), timeout=600, interval=0.5,
                   what=lambda: "100 volumes mounted\n" + env.agent.output()[-3000:])
    finally:
        deaf.close()
