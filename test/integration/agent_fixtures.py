"""Fixtures to run the real kvolumed binary: its path, a configuration writer,
and a NOTIFY_SOCKET the test binds to receive sd_notify messages."""
import json
import os
import re
import signal
import socket
import subprocess
import time

import pytest

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_DIR = os.environ.get("KVOLUMED_SHARED_DIR", os.path.join(os.path.dirname(REPO_DIR), "shared"))


def build_dir():
    return os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO_DIR, "build"))


def kvolumed_path():
    path = os.path.join(build_dir(), "agent", "kvolumed")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} is not built; run test/check or ninja -C build")
    # The suite's fault and check switches (KVOLUMED_TEST_*) are compiled in
    # only with -Dtest-hooks=true (test/lib/common.sh's builds): without them
    # tests would fail far from the cause.
    with open(os.path.join(build_dir(), "meson-info", "intro-buildoptions.json")) as f:
        if not any(o["name"] == "test-hooks" and o["value"] is True for o in json.load(f)):
            raise RuntimeError(f"{build_dir()} is configured without the test hooks: "
                               f"meson configure {build_dir()} -Dtest-hooks=true")
    return path


@pytest.fixture
def kvolumed_bin():
    return kvolumed_path()


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notify socket."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.messages = []

    def wait_for(self, line, timeout=5.0):
        """Returns the first message holding `line` (e.g. "READY=1"), reading
        further datagrams as needed; raises on timeout."""
        deadline = time.monotonic() + timeout
        for m in self.messages:
            if line in m.split("\n"):
                self.messages.remove(m)
                return m
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {line!r} within {timeout}s; got {self.messages}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536).decode()
            except socket.timeout:
                continue
            if line in data.split("\n"):
                return data
            self.messages.append(data)

    def drain(self, duration):
        """Collects every message for `duration` seconds."""
        deadline = time.monotonic() + duration
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                self.messages.append(self.sock.recv(65536).decode())
            except socket.timeout:
                break
        return self.messages

    def close(self):
        self.sock.close()


@pytest.fixture
def notify_socket(tmp_path):
    s = NotifySocket(str(tmp_path / "notify.sock"))
    yield s
    s.close()


# KVOLUMED_TEST_MOUNT_SOURCE=mountinfo: every kvolumed a test starts reads
# /proc/self/mountinfo ([agent] mount-source), not the kernel's mount events,
# unless the test chose a source itself: test/check runs the restart and
# crash-matrix tests again so, the fallback of kernels older than 6.15.
MOUNT_SOURCE = os.environ.get("KVOLUMED_TEST_MOUNT_SOURCE", "")


def write_config(path, root_dir, kubeconfig, extra="", node="test-node", csi="", agent=""):
    """A configuration for tests: a private root-dir, the fake API server's
    kubeconfig, no metrics port, no registration dir unless asked; `extra`
    is appended verbatim."""
    if MOUNT_SOURCE and "mount-source" not in agent:
        agent += f"mount-source = {MOUNT_SOURCE}\n"
    text = (
        "[agent]\n"
        f"node-name = {node}\n"
        f"root-dir = {root_dir}\n"
        + agent +
        "[kubernetes]\n"
        f"kubeconfig = {kubeconfig}\n"
        "[csi]\n"
        "registration-dir =\n"
        + csi +
        "[metrics]\n"
        "listen =\n"
    ) + extra
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def make_node(name="test-node"):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}


@pytest.fixture
def agent_config(tmp_path, fake_api):
    """A configuration against a running fake API server that knows the node."""
    fake_api.create(make_node())
    root = tmp_path / "root"
    root.mkdir()
    return write_config(tmp_path / "kvolumed.conf", str(root), fake_api.kubeconfig_path)


class Agent:
    """A running kvolumed; stderr is collected in a file."""

    def __init__(self, binary, config, env=None, notify=None, wrapper=()):
        self.config = str(config)
        self.log_path = config + ".log"
        self.log = open(self.log_path, "w")
        full_env = dict(os.environ)
        full_env.pop("NOTIFY_SOCKET", None)
        full_env.pop("WATCHDOG_USEC", None)
        full_env.pop("JOURNAL_STREAM", None)
        full_env["KVOLUMED_LOG_TARGET"] = "stderr"
        # Every scoped reconcile pass is checked against a full one: a miss
        # is logged as "Incremental pass missed" and fails the test.
        full_env["KVOLUMED_TEST_VERIFY_INCREMENTAL"] = "1"
        # Rounds every second (stats, republish, resync), below the bounds
        # that protect a real API server and real drivers.
        full_env["KVOLUMED_TEST_SHORT_INTERVALS"] = "1"
        # root-dir is left private, as `unshare --propagation private` made
        # it: kvolumed would make it a shared mount (as kubelet), under which
        # the kernel refuses the mount moves the suite's tests make.  A test
        # of the shared root-dir passes {"KVOLUMED_TEST_ROOT_DIR_PRIVATE": None}.
        full_env["KVOLUMED_TEST_ROOT_DIR_PRIVATE"] = "1"
        if notify:
            full_env["NOTIFY_SOCKET"] = notify.path
        full_env.update(env or {})
        full_env = {k: v for k, v in full_env.items() if v is not None}
        self.wrapper = tuple(wrapper)
        self.proc = subprocess.Popen([*wrapper, binary, "--config", config], stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=full_env)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=5.0):
        return self.proc.wait(timeout=timeout)

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait_for_log(self, text, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not logged within {timeout}s:\n{self.output()}")

    def traced_children(self):
        """The kvolumed that a strace wrapper runs: strace detaches on
        SIGTERM and would leave it running, so it is stopped itself."""
        if not self.wrapper or os.path.basename(self.wrapper[0]) != "strace" or self.proc.poll() is not None:
            return []
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                return [int(pid) for pid in f.read().split()]
        except OSError:
            return []

    def stop(self):
        if self.proc.poll() is None:
            for pid in self.traced_children():
                os.kill(pid, signal.SIGTERM)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def root_dir_binds(root):
    """The binds of root-dir onto itself that kvolumed makes at start to
    make it a shared mount (rootshared.h), as mountinfo lists them: the
    mount point is root-dir and the mount's root is a directory of its file
    system, not the root of one mounted there."""
    real = os.path.realpath(root)
    with open("/proc/self/mountinfo") as f:
        return [line.split()[0] for line in f
                if line.split()[4] == real and line.split()[3] != "/"]


def unmount_root_dir_bind(config):
    """After kvolumed stopped: its root-dir bind, which a real node keeps
    until reboot, would be a leak in the mock driver's mount table check.
    Not lazily: something still mounted below is a leak to report."""
    try:
        text = open(config).read()
    except OSError:
        return
    found = re.search(r"^root-dir = (.+)$", text, re.M)
    if not found:
        return
    for _ in root_dir_binds(found.group(1)):
        if subprocess.run(["umount", os.path.realpath(found.group(1))], capture_output=True).returncode != 0:
            break


@pytest.fixture
def start_agent(kvolumed_bin):
    agents = []

    def start(config, env=None, notify=None, wrapper=()):
        a = Agent(kvolumed_bin, config, env=env, notify=notify, wrapper=wrapper)
        agents.append(a)
        return a

    yield start
    missed = []
    for a in agents:
        a.stop()
        missed += [line for line in a.output().splitlines() if "Incremental pass missed" in line]
    for a in agents:
        unmount_root_dir_bind(a.config)
    assert not missed, "the scoped reconcile passes missed what a full pass does:\n" + "\n".join(missed[:20])


# --- a node with kvolumed, the fake API server and a mock CSI driver -----------

DRIVER = "mock.csi.kvolumed.io"


def wait_until(predicate, timeout=10.0, interval=0.05, what="condition"):
    """Polls predicate() until it returns something truthy; returns that value.
    what: the condition's name, or a callable giving it at the timeout (what
    the agent logged by then, rather than when the wait began)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def loops_under(root):
    """The loop devices backed by a file under `root`.  Loop devices are the
    machine's: another test (another worker) detaches its own while we read,
    and a device gone between the listing and the read is not ours."""
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                if f.read().startswith(root.rstrip("/") + "/"):
                    found.append(name)
        except OSError:
            pass
    return found


def answered_requests(api, match, timeout=10.0):
    """The requests in the fake API server's log that match(request), once
    every one of them has been answered.  A request's effect is in the store
    before its answer is logged, so a test that waited for the effect must
    wait for this too before it reads statuses."""
    def settled():
        entries = [r for r in api.requests() if match(r)]
        return (entries,) if all(r["status"] is not None for r in entries) else None
    return wait_until(settled, timeout=timeout, interval=0.02, what="the API requests answered")[0]


class VolumeEnv:
    """kvolumed on node "test-node" with a private root-dir, against the fake
    API server and one mock CSI driver configured statically.  kvolumed runs
    as the node itself (system:node:test-node), as on a real cluster: the
    fake enforces the Node authorizer and NodeRestriction for it, so a request
    a real cluster refuses fails the test.  broad=True gives it the fake's
    all-powerful identity instead."""

    def __init__(self, fake_api, driver, start_agent, tmp_path, broad=False):
        self.api = fake_api
        self.driver = driver
        self.start_agent = start_agent
        self.tmp_path = tmp_path
        self.root = str(tmp_path / "root")
        os.makedirs(self.root, exist_ok=True)
        self.agent = None
        self.broad = broad
        # Whether the driver's NodeStageVolume mounts something at globalmount.
        self.stage_mounts = driver.opts.get("stage_mount", True)
        fake_api.create(make_node())

    def start(self, extra="", csi="", agent="", wrapper=(), env=None):
        """wrapper: a command kvolumed runs under (valgrind, say); env: more
        environment for it."""
        kubeconfig = self.api.kubeconfig_path if self.broad else self.api.node_kubeconfig("test-node")
        config = write_config(self.tmp_path / "kvolumed.conf", self.root, kubeconfig,
                              f'[driver "{DRIVER}"]\nendpoint = {self.driver.endpoint}\n'
                              "[log]\nlevel = debug\n" + extra, csi=csi, agent=agent)
        self.agent = self.start_agent(config, wrapper=wrapper, env=env)
        return self.agent

    # objects

    def csidriver(self, **spec):
        return self.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                                "metadata": {"name": DRIVER}, "spec": spec})

    def pod(self, name, volumes, namespace="default", mounts=None, security_context=None, devices=None, **spec):
        """devices: names of the volumes the container uses through
        volumeDevices (raw block); the others it mounts unless `mounts` says."""
        devices = devices or []
        mounts = mounts if mounts is not None else [{"name": v["name"], "mountPath": "/v/" + v["name"]}
                                                    for v in volumes if v["name"] not in devices]
        container = {"name": "c", "image": "busybox", "volumeMounts": mounts}
        if devices:
            container["volumeDevices"] = [{"name": d, "devicePath": "/dev/xvd-" + d} for d in devices]
        body = {"nodeName": "test-node", "volumes": volumes, "containers": [container], **spec}
        if security_context:
            body["securityContext"] = security_context
        return self.api.create({"apiVersion": "v1", "kind": "Pod",
                                "metadata": {"name": name, "namespace": namespace}, "spec": body,
                                "status": {"phase": "Running"}})

    def pv(self, name, handle, claim=None, volume_mode=None, **csi):
        spec = {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": DRIVER, "volumeHandle": handle, **csi}}
        if volume_mode:
            spec["volumeMode"] = volume_mode
        if claim:
            # Reserved for the claim (claimRef without uid), or bound to it
            # (with its uid) when the claim already names this PV, as the
            # PV controller leaves them.
            spec["claimRef"] = {"namespace": "default", "name": claim}
            existing = self._claim(claim)
            if existing and existing["spec"].get("volumeName") == name:
                spec["claimRef"]["uid"] = existing["metadata"]["uid"]
        return self.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                                "spec": spec, "status": {"phase": "Bound" if claim else "Available"}})

    def _claim(self, name, namespace="default"):
        items, _ = self.api.list("persistentvolumeclaims", namespace)
        return next((c for c in items if c["metadata"]["name"] == name), None)

    def pvc(self, name, volume_name=None, namespace="default"):
        """A claim, bound to `volume_name` as the PV controller binds (the
        PV's claimRef gets the claim's uid) when that is given."""
        obj = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
               "status": {"phase": "Pending"}}
        created = self.api.create(obj)
        return self.bind(name, volume_name, namespace) if volume_name else created

    def bind(self, claim, volume_name, namespace="default", state="Bound"):
        """Binds as the PV controller does, up to `state` (see the fake's
        binding.py); a PV that does not exist yet gets the claim's uid when
        it is made with env.pv(claim=...)."""
        pvs, _ = self.api.list("persistentvolumes")
        if any(v["metadata"]["name"] == volume_name for v in pvs):
            return self.api.bind_claim(namespace, claim, volume_name, state)[0]
        obj = self.api.get("persistentvolumeclaims", namespace, claim)
        obj["spec"]["volumeName"] = volume_name
        obj["status"] = {"phase": "Bound" if state == "Bound" else "Pending"}
        obj["metadata"].pop("resourceVersion", None)
        return self.api.update(obj)

    # paths and state

    def target(self, pod, spec_name):
        return f"{self.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~csi/{spec_name}/mount"

    def staging(self, handle):
        import hashlib
        return (f"{self.root}/plugins/kubernetes.io/csi/{DRIVER}/"
                f"{hashlib.sha256(handle.encode()).hexdigest()}/globalmount")

    def calls(self, method=None):
        return [c for c in self.driver.calls() if method is None or c["method"] == method]

    def wait_calls(self, method, count=1, code=None, timeout=10.0):
        """The driver logs a call after answering it, so a mount can be seen
        before its call is in the log: wait for it."""
        def enough():
            calls = [c for c in self.calls(method) if code is None or c["code"] == code]
            return calls if len(calls) >= count else None
        return wait_until(enough, timeout, what=f"{count} {method} calls" + (f" with {code}" if code else ""))

    def events(self, namespace="default"):
        items, _ = self.api.list("events", namespace)
        return items

    def node(self):
        return self.api.get("nodes", None, "test-node")

    def wait_mounted(self, path, timeout=15.0):
        return wait_until(lambda: os.path.ismount(path), timeout, what=f"{path} mounted\n"
                          + (self.agent.output()[-4000:] if self.agent else ""))

    def wait_gone(self, path, timeout=15.0):
        return wait_until(lambda: not os.path.lexists(path), timeout, what=f"{path} gone\n"
                          + (self.agent.output()[-4000:] if self.agent else ""))

    def wait_event(self, reason, contains="", namespace="default", timeout=10.0):
        def find():
            return [e for e in self.events(namespace) if e.get("reason") == reason
                    and contains in e.get("message", "")]
        return wait_until(find, timeout, what=f"event {reason} containing {contains!r}")


# KVOLUMED_TEST_STAGE_MOUNT=0: every volume_env's driver stages without a
# mount (the CSI hostpath driver), so whole suites run in that mode too
# (test/check runs the persistent and block suites so).
STAGE_MOUNT_DEFAULT = os.environ.get("KVOLUMED_TEST_STAGE_MOUNT", "1") != "0"


def _mounts_under(root):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(root + "/")]


def _tear_down_after_failure(request, env):
    """A test that failed half-way leaves pods whose volumes kvolumed keeps
    set up: mounts and loop devices the mock driver's teardown would report
    as leaks on top of the failure (and sweep away itself).  While kvolumed
    runs, its own teardown goes first: every pod removed, then a while for
    the mounts to go.  What it cannot take away is still reported."""
    report = getattr(request.node, "rep_call", None)
    if not report or not report.failed or not env.agent or env.agent.proc.poll() is not None:
        return
    items, _ = env.api.list("pods")
    for pod in items:
        env.api.remove("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    deadline = time.monotonic() + 30
    while _mounts_under(env.root) and time.monotonic() < deadline and env.agent.proc.poll() is None:
        time.sleep(0.1)


@pytest.fixture
def volume_env(request, fake_api, mock_csi_factory, start_agent, tmp_path):
    """The node; the mock driver runs in tmpfs mode unless a test starts its own."""
    driver = mock_csi_factory(name=DRIVER, tmpfs=True, stage_mount=STAGE_MOUNT_DEFAULT)
    env = VolumeEnv(fake_api, driver, start_agent, tmp_path)
    yield env
    _tear_down_after_failure(request, env)


STAGE_MODES = [True, False]
STAGE_MODE_IDS = ["stage-mounts", "stage-mounts-nothing"]


@pytest.fixture(params=STAGE_MODES, ids=STAGE_MODE_IDS)
def staged_volume_env(request, fake_api, mock_csi_factory, start_agent, tmp_path):
    """volume_env twice: with a driver whose NodeStageVolume mounts the volume
    at globalmount, and with one whose stage mounts nothing there (the CSI
    hostpath driver; drivers whose stage prepares a device or a session),
    each publish then mounting the volume itself.  env.stage_mounts says which."""
    driver = mock_csi_factory(name=DRIVER, tmpfs=True, stage_mount=request.param)
    env = VolumeEnv(fake_api, driver, start_agent, tmp_path)
    yield env
    _tear_down_after_failure(request, env)


def trace_lines(path):
    """(seconds, step, key) of each line kvolumed's test trace wrote
    (KVOLUMED_TEST_TRACE_FILE, systemd/trace.h), none while it has none."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    return [(int(p[0]) / 1e6, p[1], p[2]) for p in (line.split() for line in lines) if len(p) == 3]
