"""A real containerd (Debian's 1.6, with runc) for the tests, kept off the
machine (reference/containerd-here.md):

  * it runs in the test's private mount namespace (refused otherwise), with
    its own root, state, socket and config.toml in a temporary directory;
  * containerd 1.6 puts its shims' sockets and runc's state under
    /run/containerd whatever `state` says: a tmpfs is mounted there, in that
    namespace only, for the harness's life;
  * runc uses cgroupfs under a cgroup parent of the harness's own, removed
    (in every hierarchy) at the end; shims outlive containerd, so the pods
    are removed through containerd first, then whatever is left is killed:
    the processes in that cgroup parent and those whose command line names
    the harness's directory (containerd, its shims);
  * the CRI plugin: restrict_oom_score_adj (processes here may not lower an
    oom_score_adj, which runc asks for the sandbox), no SELinux, empty CNI
    directories (the pods use the host network), the local busybox image as
    the sandbox image.

A test process killed before its clean-up leaves processes and cgroups
(the mounts go with its namespace): the next harness sweeps them
(sweep_stale()), by the cgroup parent and the directory each owns.

`kill()` SIGKILLs containerd (its shims and containers keep running, as on a
node whose containerd crashed) and `start()` brings it back on the same state.
The log runs at trace level: every CRI request is a line of it, which is how
`cri_requests()` counts them exactly, whoever sent them."""
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

RUN_DIR = "/run/containerd"
# Plugins the tests do not need; listed so that they neither log nor make
# directories outside root (the "opt" plugin would make /opt/containerd).
DISABLED = ("io.containerd.internal.v1.opt", "io.containerd.internal.v1.tracing",
            "io.containerd.tracing.processor.v1.otlp", "io.containerd.snapshotter.v1.aufs",
            "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.native")
# containerd's CRI service logs every request it receives at trace level
# (debug or info for the ones that change something) as `msg="<Method> ...`,
# and its answer on another line with "returns" or "failed".
CRI_LINE = re.compile(r' msg="(\w+) ')
CRI_METHODS = {"Version", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PodSandboxStatus",
               "ListPodSandbox", "CreateContainer", "StartContainer", "StopContainer", "RemoveContainer",
               "ListContainers", "ContainerStatus", "ListImages", "ImageStatus", "PullImage", "Status",
               "ListContainerStats", "ContainerStats", "ListPodSandboxStats", "GetContainerEvents"}


def missing():
    """Why a real containerd cannot run here, or None."""
    for b in ("containerd", "containerd-shim-runc-v2", "runc", "ctr"):
        if not shutil.which(b):
            return f"{b} is missing: install Debian's containerd and runc (test/deps/containerd.txt)"
    if os.geteuid() != 0:
        return "containerd needs root"
    try:
        same = os.readlink("/proc/self/ns/mnt") == os.readlink(f"/proc/{os.getppid()}/ns/mnt")
    except OSError:
        same = False
    if same:
        return "not in a mount namespace of its own: run the tests under unshare -m --propagation private"
    if _shared_mount_above(RUN_DIR):
        return "mounts here propagate to the machine: run the tests under unshare -m --propagation private"
    return None


def _shared_mount_above(path):
    """Whether a mount that `path` lies on propagates to a peer (the machine's
    namespace): then the tmpfs on /run/containerd would appear there too."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point, optional = fields[4], fields[6:fields.index("-")]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and \
                    any(o.startswith("shared:") for o in optional):
                return True
    return False


def _config(d, sandbox_image):
    disabled = ", ".join(f'"{p}"' for p in DISABLED)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [{disabled}]

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "trace"
[metrics]
  address = ""

[{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"
"""


class Containerd:
    def __init__(self, sandbox_image):
        why = missing()
        if why:
            raise RuntimeError(why)
        sweep_stale()
        # Short: socket paths must fit in 107 bytes.
        self.dir = tempfile.mkdtemp(prefix="ctrd-", dir="/tmp")
        self.socket = os.path.join(self.dir, "containerd.sock")
        self.endpoint = "unix://" + self.socket
        self.sandbox_image = sandbox_image
        with open(os.path.join(self.dir, "owner"), "w") as f:
            f.write(str(os.getpid()))
        # The cgroup parent the pod runner gives every sandbox.
        self.cgroup_parent = cgroup_parent(self.dir)
        for sub in ("cni/bin", "cni/conf"):
            os.makedirs(os.path.join(self.dir, sub))
        self.config = os.path.join(self.dir, "config.toml")
        with open(self.config, "w") as f:
            f.write(_config(self.dir, sandbox_image))
        self.log_path = os.path.join(self.dir, "containerd.log")
        self._made_run_dir = False
        self._run_mounted = False
        self.proc = None
        self._mount_run()

    # ---- /run/containerd in this namespace only ------------------------------
    def _mount_run(self):
        if not os.path.isdir(RUN_DIR):
            # The directory is made on the machine's /run (a mount point
            # must exist); the marker lets sweep_stale() remove it should
            # this process be killed before its clean-up.
            open(os.path.join(self.dir, "made-run-dir"), "w").close()
            os.makedirs(RUN_DIR)
            self._made_run_dir = True
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0711", "kvolumed-test-run", RUN_DIR], check=True)
        self._run_mounted = True

    def _umount_run(self):
        if self._run_mounted:
            subprocess.run(["umount", "-l", RUN_DIR], check=False)
            self._run_mounted = False
        # Not while another harness lives (another xdist worker, another
        # suite): its tmpfs is mounted there in its own namespace, and the
        # rmdir would detach it.
        if self._made_run_dir and not _other_harness_alive(self.dir):
            try:
                os.rmdir(RUN_DIR)
            except OSError:
                pass
        self._made_run_dir = False

    # ---- the daemon ------------------------------------------------------------
    def start(self, timeout=60.0):
        """Starts containerd and waits until its CRI service answers."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        log = open(self.log_path, "a")
        offset = self.log_size()
        self.proc = subprocess.Popen(["containerd", "--config", self.config], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._serving(offset):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not serve CRI within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)

    def _serving(self, offset):
        # Logged once every plugin is loaded and the socket serves; the CRI
        # plugin may still answer "server is not initialized yet" for a
        # moment (PodRunner.wait_ready() waits for that).
        if not os.path.exists(self.socket):
            return False
        with open(self.log_path) as f:
            f.seek(offset)
            return "containerd successfully booted" in f.read()

    def kill(self):
        """SIGKILL, as a crash: shims and containers keep running."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def ctr(self, *args, check=True):
        return subprocess.run(["ctr", "--address", self.socket, "-n", "k8s.io", *args], check=check,
                              capture_output=True, text=True)

    def import_image(self, archive):
        self.ctr("images", "import", "--no-unpack=false", archive)

    # ---- the log --------------------------------------------------------------
    def log_tail(self, n=4000):
        try:
            with open(self.log_path) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def cri_requests(self, since=0):
        """The CRI requests containerd received after byte offset `since` of
        its log (see log_size()): their methods, in order."""
        out = []
        with open(self.log_path, errors="replace") as f:
            f.seek(since)
            for line in f:
                m = CRI_LINE.search(line)
                if m and m.group(1) in CRI_METHODS and " returns" not in line and " failed" not in line:
                    out.append(m.group(1))
        return out

    # ---- leaving nothing behind -------------------------------------------------
    def cleanup(self, runner=None):
        """Stops every pod (through containerd when it runs), containerd, its
        shims and containers; unmounts and removes everything it made."""
        try:
            if runner is not None and self.running:
                runner.remove_everything()
        finally:
            self.stop()
            leave_nothing(self.dir, self.cgroup_parent)
            self._umount_run()


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _cgroup_dirs(parent):
    """The cgroup directories under `parent` in every hierarchy, deepest first."""
    rel = parent.lstrip("/")
    dirs = []
    for top in glob.glob("/sys/fs/cgroup/*/") + ["/sys/fs/cgroup/"]:
        path = os.path.join(top, rel)
        if os.path.isdir(path):
            dirs += [d for d, _, _ in os.walk(path)]
    return sorted(dirs, key=lambda d: -d.count("/"))


def _kill(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def leave_nothing(directory, cgroup_parent):
    """Whatever a harness left, by what it certainly owns: the processes in
    its cgroup parent (the containers: runc puts every one of them there),
    the processes whose command line names its directory (containerd, and
    the shims, which outlive it), every mount under its directory, its
    cgroups, and the directory."""
    for _ in range(50):
        pids = set()
        for d in _cgroup_dirs(cgroup_parent):
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    pids.update(int(x) for x in f.read().split())
            except OSError:
                pass
        pids.update(int(p) for p in os.listdir("/proc") if p.isdigit() and directory + "/" in _cmdline(p))
        pids.discard(os.getpid())
        if not pids:
            break
        _kill(pids)
        time.sleep(0.1)  # they exit; their cgroups empty
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    for p in sorted((p for p in points if p.startswith(directory + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", p], check=False, capture_output=True)
    for d in _cgroup_dirs(cgroup_parent):
        for _ in range(50):
            try:
                os.rmdir(d)  # a cgroup dir holds only control files, which rmdir ignores
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)  # its last process is still exiting
    shutil.rmtree(directory, ignore_errors=True)


def _harness_owner(directory):
    try:
        with open(os.path.join(directory, "owner")) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _other_harness_alive(own):
    for d in glob.glob("/tmp/ctrd-*"):
        owner = _harness_owner(d)
        if d != own and owner is not None and os.path.exists(f"/proc/{owner}"):
            return True
    return False


def sweep_stale():
    """Leftovers of a harness whose test process was killed before its
    clean-up ran (the mounts went with its namespace; its processes, its
    cgroups and an empty /run/containerd it made did not): each harness
    directory names the process that owns it in `owner`."""
    live, made_run_dir = False, False
    for d in glob.glob("/tmp/ctrd-*"):
        try:
            with open(os.path.join(d, "owner")) as f:
                owner = int(f.read())
        except (OSError, ValueError):
            continue
        if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
            live = True
            continue
        made_run_dir |= os.path.exists(os.path.join(d, "made-run-dir"))
        leave_nothing(d, cgroup_parent(d))
    # Not while another harness lives: its tmpfs is mounted there, in its
    # namespace, and an rmdir here would detach it.
    if made_run_dir and not live:
        try:
            os.rmdir(RUN_DIR)
        except OSError:
            pass  # not empty: someone else's now


def cgroup_parent(directory):
    return "/kvolumed-test-" + os.path.basename(directory)
