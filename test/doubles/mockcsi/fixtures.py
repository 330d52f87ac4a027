"""pytest fixtures for the mock CSI driver.

  mock_csi           one driver with default options (loop+ext4, STAGE_UNSTAGE,
                     GET_VOLUME_STATS, EXPAND_VOLUME), started in tmp_path
  mock_csi_factory   callable(**options) -> started MockCSI; any number of them

Teardown of both: every driver still running is stopped with SIGTERM (and
must exit 0); a driver that is dead (SIGKILL, injected crash) is swept with
cleanup(); then the fixture FAILS the test if the mount table
(/proc/self/mountinfo) has any entry it did not have when the fixture
started, or if a loop device backed by a file in a driver's state dir is
still attached, or (unless allow_violations=True) if a driver recorded a
CO protocol violation.  Leftovers are removed before failing, so one bad
test does not poison the next.
"""
import collections
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from . import mounts, state
from .client import CSIClient
from .control import ControlClient
from .faults import read_call_log
from .sweep import cleanup
from .volumes import read_violations

TEST_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = "/usr/bin/python3"  # Debian's, which has python3-grpcio
START_TIMEOUT = 30


class MockCSI:
    """One mock driver process; restartable with the same options and state.

    Options (all keyword):
      name, node_id, vendor_version   identity
      stage=True                      advertise STAGE_UNSTAGE_VOLUME
      caps=None                       full list of node capabilities (overrides the default set;
                                      `stage` still removes STAGE_UNSTAGE_VOLUME when False)
      tmpfs=False                     tmpfs disks instead of loop+ext4
      state_write="safe"              or "hostpath": state.json written in place, never synced
      max_volumes=0, topology={}      NodeGetInfo
      volume_size="64Mi"              size of volumes created on first use
      auto_create=True                unknown volume ids become new disks (else NOT_FOUND)
      registration_dir=None           path, or True for a short dir under /tmp
      registration_versions=None, registration_type=None, registration_endpoint=None
      endpoint=None                   CSI socket path (default: a short dir under /tmp)
      allow_violations=False          do not fail teardown on recorded CO violations
      op_lock="volume"                concurrent calls refused per volume, or per volume and target
      boot_sessions=False             state per stage/publish that a reboot keeps (VolumeManager.session_open)
      stage_mount=True                False: NodeStageVolume mounts nothing (CSI hostpath driver)
      publish_mount=True              False: NodePublishVolume mounts nothing (a plain directory)
      extra_args=()                   more CLI arguments
    """

    def __init__(self, base, index, **opts):
        self.base = base
        self.opts = opts
        self.allow_violations = opts.pop("allow_violations", False)
        self.name = opts.get("name", "mock.csi.kvolumed.io")
        self.state_dir = os.path.join(base, "state")
        # unix socket paths are limited to 107 bytes; pytest's tmp_path can be
        # longer, so sockets live in a short private dir unless told otherwise.
        self.sock_dir = tempfile.mkdtemp(prefix="mcsi%d-" % index, dir="/tmp")
        self.socket_path = opts.get("endpoint") or os.path.join(self.sock_dir, "csi.sock")
        self.endpoint = "unix://" + self.socket_path
        self.control_socket = os.path.join(self.sock_dir, "control.sock")
        reg = opts.get("registration_dir")
        self.registration_dir = os.path.join(self.sock_dir, "plugins_registry") if reg is True else reg
        self.registration_socket = (os.path.join(self.registration_dir, self.name + "-reg.sock")
                                    if self.registration_dir else None)
        self.call_log_path = os.path.join(self.state_dir, "calls.jsonl")
        self.proc = None
        self.control = ControlClient(self.control_socket)
        self.csi = CSIClient(self.endpoint)
        self.starts = 0

    def argv(self):
        o = self.opts
        a = [PYTHON, "-m", "doubles.mockcsi", "--endpoint", self.endpoint, "--name", self.name,
             "--state-dir", self.state_dir, "--control-socket", self.control_socket,
             "--node-id", o.get("node_id", "node-1")]
        if "vendor_version" in o:
            a += ["--vendor-version", o["vendor_version"]]
        if o.get("caps") is not None:
            a += ["--caps", ",".join(o["caps"]) or "none"]
        if not o.get("stage", True):
            a += ["--no-stage"]
        if o.get("tmpfs"):
            a += ["--tmpfs"]
        if o.get("op_lock"):
            a += ["--op-lock", o["op_lock"]]
        if o.get("boot_sessions"):
            a += ["--boot-sessions"]
        if o.get("state_write"):
            a += ["--state-write", o["state_write"]]
        if not o.get("stage_mount", True):
            a += ["--stage-no-mount"]
        if not o.get("publish_mount", True):
            a += ["--publish-no-mount"]
        if o.get("max_volumes"):
            a += ["--max-volumes", str(o["max_volumes"])]
        if o.get("topology"):
            a += ["--topology", ",".join("%s=%s" % kv for kv in o["topology"].items())]
        if "volume_size" in o:
            a += ["--volume-size", str(o["volume_size"])]
        if not o.get("auto_create", True):
            a += ["--no-auto-create"]
        if self.registration_dir:
            a += ["--registration-dir", self.registration_dir]
        if o.get("registration_versions") is not None:
            a += ["--registration-versions", ",".join(o["registration_versions"])]
        if o.get("registration_type") is not None:
            a += ["--registration-type", o["registration_type"]]
        if o.get("registration_endpoint") is not None:
            a += ["--registration-endpoint", o["registration_endpoint"]]
        return a + list(o.get("extra_args", ()))

    def start(self):
        assert not self.alive(), "driver already running"
        os.makedirs(self.base, exist_ok=True)
        self.starts += 1
        self.stdout_path = os.path.join(self.base, "stdout.%d" % self.starts)
        self.stderr_path = os.path.join(self.base, "stderr.%d" % self.starts)
        env = dict(os.environ, PYTHONPATH=TEST_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=err, env=env,
                                         stdin=subprocess.DEVNULL)
        end = time.time() + START_TIMEOUT
        while time.time() < end:
            with open(self.stdout_path) as f:
                if "MOCKCSI READY" in f.read():
                    return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.kill()
        raise RuntimeError("mock CSI driver did not start (rc=%s): %s" % (
            self.proc.returncode, self.stderr()[-3000:]))

    def stderr(self):
        try:
            with open(self.stderr_path) as f:
                return f.read()
        except (OSError, AttributeError):
            return ""

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signal the driver and wait; returns its exit code."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("mock CSI driver did not stop within %s s on signal %d; its stderr ends:\n%s"
                               % (timeout, sig, self.stderr()[-6000:])) from None

    def kill(self):
        return self.stop(signal.SIGKILL)

    def wait_exit(self, timeout=10):
        return self.proc.wait(timeout)

    def restart(self):
        if self.alive():
            self.stop()
        return self.start()

    # Readable with the driver alive or dead: straight from the state dir.
    def calls(self, method=None):
        return read_call_log(self.call_log_path, method)

    def state(self):
        return state.load(self.state_dir)

    def violations(self):
        return read_violations(self.state_dir)

    def cleanup(self, under=None, remove_volumes=False):
        return cleanup(self.state_dir, under=under, remove_volumes=remove_volumes)


def _mount_points():
    return collections.Counter(m["mount_point"] for m in mounts.mountinfo())


class _Factory:
    def __init__(self, tmp_path):
        self.tmp_path = str(tmp_path)
        self.drivers = []
        self.mounts_before = _mount_points()

    def __call__(self, start=True, **opts):
        drv = MockCSI(os.path.join(self.tmp_path, "mockcsi%d" % len(self.drivers)), len(self.drivers), **opts)
        self.drivers.append(drv)
        return drv.start() if start else drv

    def _loops(self):
        return [(d, b) for drv in self.drivers for d, b in mounts.loop_backing_files().items()
                if b.startswith(drv.state_dir + "/")]

    def teardown(self):
        problems = []
        for drv in reversed(self.drivers):
            if drv.alive():
                rc = drv.stop()
                if rc != 0:
                    problems.append("driver %s exited %s on SIGTERM: %s" % (drv.base, rc, drv.stderr()[-2000:]))
            else:
                drv.cleanup()  # dead (killed/crashed): the sweep is the clean stop
            drv.csi.close()
        leaked_mounts = sorted((_mount_points() - self.mounts_before).elements())
        leaked_loops = self._loops()
        # A device detached while another process had it open (udev's
        # blkid, a `losetup -a`, a neighbour's `losetup -f`, a mount
        # namespace copied while it was mounted: mounts.assert_loops_released)
        # goes when that one closes it: a wait, not a leak.
        deadline = time.monotonic() + 120
        while leaked_loops and all(mounts.loop_detaching(d) for d, _ in leaked_loops) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
            leaked_loops = self._loops()
        if leaked_mounts:
            problems.append("mounts left behind: %s" % leaked_mounts)
        if leaked_loops:
            problems.append("loop devices left attached: %s" % leaked_loops)
        for drv in self.drivers:
            if not drv.allow_violations and drv.violations():
                problems.append("CO protocol violations seen by %s: %s" % (
                    drv.name, [v["message"] for v in drv.violations()]))
        if leaked_mounts or leaked_loops:
            for drv in self.drivers:
                drv.cleanup(under=self.tmp_path)
            for mp in sorted(set(leaked_mounts), key=lambda p: p.count("/"), reverse=True):
                if mounts.is_mount_point(mp):
                    mounts.umount(mp)
        for drv in self.drivers:
            shutil.rmtree(drv.sock_dir, ignore_errors=True)
        return problems


def _require_root():
    if os.geteuid() != 0:
        pytest.skip("the mock CSI driver mounts and attaches loop devices: needs root")


@pytest.fixture
def mock_csi_factory(tmp_path):
    """factory(**options) -> started MockCSI (see MockCSI for the options)."""
    _require_root()
    fac = _Factory(tmp_path)
    yield fac
    problems = fac.teardown()
    if problems:
        pytest.fail("mock CSI teardown:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture
def mock_csi(mock_csi_factory):
    """One running mock driver with default options."""
    return mock_csi_factory()


@pytest.fixture
def csi_dirs(tmp_path):
    """(staging dir, publish target) as kubelet lays them out: the staging
    directory exists, the target's parent exists, the target does not."""
    staging = tmp_path / "globalmount"
    staging.mkdir()
    (tmp_path / "pod").mkdir()
    return str(staging), str(tmp_path / "pod" / "mount")
