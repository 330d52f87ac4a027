"""kvolumed under a real systemd: a minimal Debian 12 root file system
(debootstrapped once, cached by test/tools/nspawn-rootfs.sh) with kvolumed
installed by `meson install --destdir`, booted with systemd-nspawn.  The fake
API server and the mock CSI driver run on the host: the API server's
127.0.0.1 port is reachable because the container shares the host's network;
its directory (kubeconfig, certificates), the driver's socket directory and
kvolumed's root-dir are bound in at the same paths, so that the paths the
driver is given mean the same on both sides.  root-dir is a shared mount on
the host side: the driver's mounts propagate into the container.  Everything
is checked from the outside through nsenter into the container's PID 1."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from integration.agent_fixtures import DRIVER, REPO_DIR, build_dir, make_node, wait_until
from integration.api_outage import ApiOutage

# One container at a time (pytest-xdist --dist loadgroup): systemd-nspawn
# without a systemd on the host makes fixed cgroups (payload, supervisor)
# and /run/systemd/nspawn, which close() removes.
pytestmark = pytest.mark.xdist_group("nspawn")

ROOTFS_SCRIPT = os.path.join(REPO_DIR, "test", "tools", "nspawn-rootfs.sh")
STALL_FILE = "/run/kvolumed-test-stall"
MSG_PUBLISHED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a51"
MSG_UNPUBLISHED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a52"
MSG_DRIVER_REGISTERED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a54"
MSG_BLOCKED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a55"


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 60)
    return subprocess.run(cmd, **kw)


class Container:
    """A booted systemd-nspawn container on an overlay of the cached rootfs."""

    def __init__(self, binds):
        r = run([ROOTFS_SCRIPT], timeout=600)
        if r.returncode != 0:
            pytest.fail(f"cannot build the Debian root file system for systemd-nspawn: {r.stderr.strip()}")
        lower = r.stdout.strip()
        self.dir = tempfile.mkdtemp(prefix="kvolumed-nspawn-run-", dir="/var/tmp")
        self.root = os.path.join(self.dir, "merged")
        for d in ("upper", "work", "merged"):
            os.mkdir(os.path.join(self.dir, d))
        r = run(["mount", "-t", "overlay", "overlay", "-o",
                 f"lowerdir={lower},upperdir={self.dir}/upper,workdir={self.dir}/work", self.root])
        assert r.returncode == 0, r.stderr
        self.nspawn = None
        self.leader = None
        self.machine = f"kvolumed-test-{os.getpid()}"
        # root-dir: the same path inside and out, shared so that the driver's
        # mounts on the host side reach the container.
        self.kubelet_dir = os.path.join(self.dir, "kubelet")
        os.mkdir(self.kubelet_dir)
        for cmd in (["mount", "--bind", self.kubelet_dir, self.kubelet_dir],
                    ["mount", "--make-shared", self.kubelet_dir]):
            r = run(cmd)
            assert r.returncode == 0, r.stderr
        self.binds = list(binds) + [self.kubelet_dir]

    def install(self, kubeconfig, driver_endpoint):
        r = run(["meson", "install", "-C", build_dir(), "--no-rebuild", "--quiet", "--destdir", self.root],
                timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        with open(os.path.join(self.root, "etc/kvolumed/kvolumed.conf"), "w") as f:
            f.write(f"[agent]\nnode-name = test-node\nroot-dir = {self.kubelet_dir}\n"
                    f"[kubernetes]\nkubeconfig = {kubeconfig}\n"
                    "[csi]\nregistration-dir =\n"
                    f'[driver "{DRIVER}"]\nendpoint = {driver_endpoint}\n'
                    "[metrics]\nlisten =\n[log]\nlevel = info\n")
        # Test-only settings: the watchdog fault switch, and a short watchdog
        # period so that the stall is caught in seconds, not 30 s.
        dropin = os.path.join(self.root, "etc/systemd/system/kvolumed.service.d")
        os.makedirs(dropin, exist_ok=True)
        with open(os.path.join(dropin, "test.conf"), "w") as f:
            f.write(f"[Service]\nEnvironment=KVOLUMED_TEST_STALL_FILE={STALL_FILE}\nWatchdogSec=3s\n")

    def boot(self):
        self.nspawn = subprocess.Popen(
            ["setsid", "systemd-nspawn", "-q", "-D", self.root, "-b", "--register=no", "--keep-unit",
             "--console=passive", f"--machine={self.machine}"] + [f"--bind={b}" for b in self.binds],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def leader():
            r = run(["pgrep", "-P", str(self.nspawn.pid), "-x", "systemd"])
            return r.stdout.split()[0] if r.returncode == 0 else None
        self.leader = wait_until(leader, timeout=30, what="the container's systemd")
        wait_until(lambda: self.sh("systemctl is-system-running --wait").stdout.strip() in ("running", "degraded"),
                   timeout=60, what="the container's boot")

    def sh(self, command, timeout=60):
        return run(["nsenter", "-t", self.leader, "-a", "/bin/sh", "-c", command], timeout=timeout)

    def show(self, prop):
        return self.sh(f"systemctl show -P {prop} kvolumed").stdout.strip()

    def journal(self, *args):
        r = self.sh("journalctl --no-pager -u kvolumed " + " ".join(args))
        return r.stdout

    def close(self):
        if self.nspawn and self.nspawn.poll() is None:
            if self.leader:
                self.sh("systemctl poweroff", timeout=10)
            try:
                self.nspawn.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.nspawn.send_signal(signal.SIGTERM)
                try:
                    self.nspawn.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(self.nspawn.pid, signal.SIGKILL)
                    self.nspawn.wait()
        run(["umount", "-l", self.root])
        # The volume kvolumed left published (as it must on stop), and the bind.
        run(["umount", "-R", self.kubelet_dir])
        shutil.rmtree(self.dir, ignore_errors=True)
        # What nspawn leaves behind without a systemd on the host.
        for hierarchy in ("/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"):
            for d in ("payload/init.scope", "payload", "supervisor"):
                try:
                    os.rmdir(os.path.join(hierarchy, d))
                except OSError:
                    pass
        shutil.rmtree("/run/systemd/nspawn", ignore_errors=True)


@pytest.fixture
def driver(mock_csi_factory):
    return mock_csi_factory(name=DRIVER, tmpfs=True)


@pytest.fixture
def container(fake_api, driver):
    c = Container([fake_api.workdir, driver.sock_dir])
    try:
        yield c
    finally:
        c.close()


def pod(name, volume):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "test-node", "volumes": [{"name": volume, "csi": {"driver": DRIVER}}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "volumeMounts": [{"name": volume, "mountPath": "/v"}]}]},
            "status": {"phase": "Running"}}


# Named so that test/check's ASan pass (-k "volume or agent") leaves it out:
# the ASan binary would need libasan inside the container.
def test_unit_under_real_systemd(container, fake_api, driver):
    started = time.monotonic()
    fake_api.create(make_node())
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                     "spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    container.install(fake_api.kubeconfig_path, driver.endpoint)
    container.boot()

    # The unit as installed is what systemd-analyze accepts (man: the rootfs has no man).
    r = container.sh("systemd-analyze verify --man=no kvolumed.service")
    assert r.returncode == 0 and r.stdout + r.stderr == "", r.stdout + r.stderr
    # Not ordered against the container runtime: neither holds the other back at boot.
    for prop in ("Before", "After", "Requires", "Wants", "BindsTo"):
        value = container.show(prop)
        assert "containerd" not in value and "crio" not in value, f"{prop}={value}"
    # What a package's trigger does after installing the catalog.
    assert container.sh("journalctl --update-catalog").returncode == 0

    # start returns only after READY=1: the unit is active at once, and the
    # journal has the "Ready" line before systemd's "Started".
    r = container.sh("systemctl start kvolumed", timeout=150)
    assert r.returncode == 0, r.stderr + container.journal()
    assert container.show("ActiveState") == "active"
    main_pid = container.show("MainPID")
    # It runs in the mount namespace of PID 1: mounts under root-dir are shared.
    assert container.sh(f"readlink /proc/{main_pid}/ns/mnt").stdout == container.sh("readlink /proc/1/ns/mnt").stdout
    log = container.journal("-o cat")
    assert "Ready: volumes on disk reconstructed" in log, log
    assert log.index("Ready: volumes on disk reconstructed") < log.index("Started kvolumed"), log
    # Debian 12's systemd (252) and libseccomp (2.5.4) cannot name statmount
    # and listmount in SystemCallFilter=: the unit refuses them and kvolumed
    # says so, on the mountinfo fallback.  A newer systemd may let it through.
    source = [line for line in log.splitlines() if "Mount table: " in line]
    assert len(source) == 1, log
    assert "from the kernel" in source[0] or "SystemCallFilter=" in source[0], source

    # systemctl status shows the STATUS= text with the counts.
    status = container.sh("systemctl status --no-pager kvolumed").stdout
    assert "Status: \"Running on node test-node: 0 pod volumes published, 0 pending, 0 failed, 0 tearing-down" in status, status

    def entry(message_id):
        def find():
            for line in container.journal(f"-o json MESSAGE_ID={message_id}").splitlines():
                return json.loads(line)
        return wait_until(find, timeout=20, what=f"a journal entry with MESSAGE_ID={message_id}\n"
                          + container.journal("-o cat")[-3000:])

    # The statically configured driver answered NodeGetInfo.
    registered = entry(MSG_DRIVER_REGISTERED)
    assert registered["DRIVER"] == DRIVER, registered
    explained = container.journal(f"-x MESSAGE_ID={MSG_DRIVER_REGISTERED}")
    assert f"CSI driver {DRIVER} registered on this node" in explained, explained

    # Volumes published and unpublished by the driver on the host: entries with
    # the fields of DESIGN.md §2 and their MESSAGE_IDs.
    gone = fake_api.create(pod("gone", "scratch"))
    keep = fake_api.create(pod("keep", "data"))
    published = entry(MSG_PUBLISHED)
    assert published["_SYSTEMD_UNIT"] == "kvolumed.service" and published["PRIORITY"] == "6"
    assert published["DRIVER"] == DRIVER and published["VOLUME_HANDLE"].startswith("csi-"), published
    assert published["POD"] in ("default/gone", "default/keep") and published["POD_UID"], published
    keep_target = (f"{container.kubelet_dir}/pods/{keep['metadata']['uid']}"
                   "/volumes/kubernetes.io~csi/data/mount")
    wait_until(lambda: os.path.ismount(keep_target), timeout=20, what="the kept pod's volume mounted")
    wait_until(lambda: "2 pod volumes published" in container.show("StatusText"), timeout=10,
               what="STATUS= counting the published volumes")
    fake_api.delete("pods", "default", "gone")
    unpublished = entry(MSG_UNPUBLISHED)
    assert unpublished["POD"] == "default/gone" and unpublished["VOLUME"] == "scratch"
    assert unpublished["POD_UID"] == gone["metadata"]["uid"]

    # A pod with an invalid volume: a failure found outside any CSI call,
    # and journalctl -x explains it from the installed catalog, no field
    # left unfilled.
    bad = fake_api.create(pod("evil", ".."))
    failed = entry(MSG_BLOCKED)
    assert failed["POD_UID"] == bad["metadata"]["uid"] and failed["PRIORITY"] == "4"
    assert failed["POD"] == "default/evil", failed
    explained = container.journal(f"-x MESSAGE_ID={MSG_BLOCKED}")
    assert "no CSI call involved" in explained and "Support: man:kvolumed(8)" in explained, explained
    assert not re.search(r"@[A-Z_]+@", explained), explained
    explained = container.journal(f"-x MESSAGE_ID={MSG_PUBLISHED}")
    assert f"CSI volume {published['VOLUME']} published for pod {published['POD']}" in explained, explained

    # reload changes the log level live: at info nothing was logged at debug
    # level; after the reload to debug, the next volume brings debug entries.
    def debug_entries():
        return container.journal("-p debug..debug -o cat").replace("-- No entries --", "").strip()
    assert debug_entries() == ""
    container.sh("sed -i 's/^level = info/level = debug/' /etc/kvolumed/kvolumed.conf")
    assert container.sh("systemctl reload kvolumed").returncode == 0
    wait_until(lambda: "Configuration reloaded, log level debug" in container.journal("-o cat"),
               timeout=10, what="the reload")
    wait_until(lambda: container.show("ActiveState") == "active", timeout=10, what="active after the reload")
    assert container.show("MainPID") == main_pid
    # A reload with a broken file fails visibly (the unit runs the check
    # first, as ssh.service does) and the daemon keeps running, not signalled.
    reloads = container.journal("-o cat").count("Reloading the configuration from")
    container.sh("cp /etc/kvolumed/kvolumed.conf /root/good.conf && "
                 "printf '[csi]\\ncall-timeout = soon\\n' >> /etc/kvolumed/kvolumed.conf")
    r = container.sh("systemctl reload kvolumed")
    assert r.returncode != 0, r.stdout + r.stderr
    log = container.journal("-o cat")
    assert '/etc/kvolumed/kvolumed.conf:14: section [csi] repeated (first on line 6)' in log, log[-3000:]
    assert log.count("Reloading the configuration from") == reloads
    assert container.show("ActiveState") == "active" and container.show("MainPID") == main_pid
    container.sh("cp /root/good.conf /etc/kvolumed/kvolumed.conf")
    late = fake_api.create(pod("late", "more"))
    wait_until(debug_entries, timeout=20, what="debug entries after the reload")
    late_target = f"{container.kubelet_dir}/pods/{late['metadata']['uid']}/volumes/kubernetes.io~csi/more/mount"
    wait_until(lambda: os.path.ismount(late_target), timeout=20, what="the late pod's volume mounted")

    # The test-only fault switch stalls the loop: the watchdog kills it (SIGABRT)
    # and Restart=on-failure starts it again, READY once more.
    container.sh(f"touch {STALL_FILE}")
    wait_until(lambda: "Watchdog timeout" in container.sh("journalctl --no-pager -o cat").stdout,
               timeout=30, what="the watchdog timeout")
    wait_until(lambda: container.show("ActiveState") == "active" and container.show("MainPID") not in ("0", main_pid),
               timeout=30, what="the restart after the watchdog")
    assert container.show("NRestarts") == "1"
    main_pid = container.show("MainPID")

    # stop is clean: exit 0, and nothing at err level in the journal during the stop.
    since = container.sh("date +%s.%N").stdout.strip()
    r = container.sh("systemctl stop kvolumed", timeout=180)
    assert r.returncode == 0
    assert container.show("ActiveState") == "inactive"
    assert container.show("ExecMainStatus") == "0" and container.show("Result") == "success"
    stop_log = container.sh(f"journalctl --no-pager -u kvolumed -o cat -p err --since @{since}").stdout
    assert stop_log.strip() in ("", "-- No entries --"), stop_log
    assert "kvolumed stopped" in container.journal(f"--since @{since} -o cat")
    # Nothing was torn down by the stop (nor by the watchdog's kill): the kept
    # pod's volume is still mounted, on the host and in the container.
    for target in (keep_target, late_target):
        assert os.path.ismount(target)
        assert container.sh(f"mountpoint -q {target}").returncode == 0
    unpublishes = [c["request"]["target_path"] for c in driver.calls("NodeUnpublishVolume")]
    assert all("/scratch/" in t for t in unpublishes), unpublishes
    print(f"real-systemd test body took {time.monotonic() - started:.1f} s")


def test_api_server_away_at_start_leaves_the_unit_active_never_restarted(container, fake_api, driver):
    """An API server unreachable at start, under a real systemd, with the
    start timeout cut to 20 s (120 s in the unit, which a test cannot wait
    out): "systemctl start" returns, the unit is active and stays so past
    the timeout, never restarted, STATUS= counting the outage from its
    first failed request; once the server answers, the lists are read and
    the volumes counted.  Before: start blocked until the timeout, then
    "start operation timed out. Terminating." and a restart every 22 s."""
    fake_api.create(make_node())
    outage = ApiOutage(fake_api)
    try:
        outage.down()
        container.install(outage.kubeconfig(), driver.endpoint)
        dropin = os.path.join(container.root, "etc/systemd/system/kvolumed.service.d/timeout.conf")
        with open(dropin, "w") as f:
            f.write("[Service]\nTimeoutStartSec=20s\n")
        container.boot()

        r = container.sh("systemctl start kvolumed", timeout=150)
        assert r.returncode == 0, r.stderr + container.journal("-o cat")
        assert container.show("ActiveState") == "active"
        main_pid = container.show("MainPID")
        prefix = f"Waiting for the first pod list: API server {outage.server_url} unreachable for "

        def outage_seconds():
            text = container.show("StatusText")
            return int(text[len(prefix):].split(" ", 1)[0]) if text.startswith(prefix) else None
        # Past the start timeout (and the 5 s and 10 s reports): still the
        # same process, the outage counted from the start.
        wait_until(lambda: (outage_seconds() or 0) >= 30, timeout=90, interval=1,
                   what="STATUS= counting 30 s of outage\n" + container.journal("-o cat")[-3000:])
        assert container.show("ActiveState") == "active" and container.show("MainPID") == main_pid
        assert container.show("NRestarts") == "0"
        log = container.journal("-o cat")
        assert "timed out" not in log and "Up without the API server's lists after 10 s" in log, log[-3000:]

        outage.up()
        wait_until(lambda: container.show("StatusText").startswith("Running on node test-node: 0 pod volumes published"),
                   timeout=60, interval=0.5, what="the counts once the server answers\n"
                   + container.journal("-o cat")[-3000:])
        assert "Ready: volumes on disk reconstructed" in container.journal("-o cat")
        assert container.show("MainPID") == main_pid and container.show("NRestarts") == "0"
    finally:
        outage.close()
