"""What the benchmarks in test/bench/ share: the node they set up (the fake
API server in process, the mock CSI driver in tmpfs mode, kvolumed's
configuration), pod objects, waiting, the driver's call log read as it
grows, /proc figures of a process, percentiles and the machine's
description.  Imported by volume_bench.py, restart_bench.py and suite.py."""
import contextlib
import fcntl
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "test"))

DRIVER = "mock.csi.kvolumed.io"
NODE = "bench-node"


def mounts_under(root):
    n = 0
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4].startswith(root + "/"):
                n += 1
    return n


def wait(predicate, timeout, what, interval=0.005, alive=None):
    """alive: a process that must not exit meanwhile (kvolumed)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if alive is not None and alive.poll() is not None:
            raise SystemExit(f"bench: kvolumed exited ({alive.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(interval)


def pod(name, volumes, claims=()):
    """A running pod on the bench node with an inline CSI volume per name in
    `volumes` and a PVC volume per claim name in `claims`."""
    vols = [{"name": v, "csi": {"driver": DRIVER}} for v in volumes]
    vols += [{"name": f"claim-{c}", "persistentVolumeClaim": {"claimName": c}} for c in claims]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "volumes": vols,
                     "containers": [{"name": "c", "image": "x",
                                     "volumeMounts": [{"name": v["name"], "mountPath": "/" + v["name"]}
                                                      for v in vols]}]},
            "status": {"phase": "Running"}}


def cpu_seconds(pid):
    """user + system CPU time of a process (all its threads), from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def context_switches(pid):
    """(voluntary, involuntary) context switches summed over every thread:
    a voluntary one is a sleep, so their rate is the process's wake-ups."""
    vol = invol = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        invol += int(line.split()[1])
        except FileNotFoundError:  # a thread that just ended
            pass
    return vol, invol


def status_kib(pid, key):
    """A "kB" line of /proc/PID/status (VmRSS, VmHWM, RssAnon...)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def percentile(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def read_calls(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class CallLogTail:
    """The mock driver's call log, read incrementally: polling it costs the
    new lines only, not the whole file (which grows to thousands of lines and
    would take the CPU the figures are about).  `calls` holds every call read
    so far; a call is logged after its reply, with "time" (start) and
    "duration" in seconds."""

    def __init__(self, path, alive=None):
        self.path = path
        self.alive = alive  # wait() fails at once when this process exits
        self.pos = 0
        self.calls = []

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return self.calls
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        for line in data[:end].splitlines():
            if line.strip():
                self.calls.append(json.loads(line))
        self.pos += end
        return self.calls

    def mark(self):
        return len(self.poll())

    def since(self, mark, method=None, code="OK"):
        return [c for c in self.poll()[mark:]
                if (method is None or c["method"] == method) and (code is None or c["code"] == code)]

    def wait(self, mark, method, count, timeout, what=None):
        """Waits for `count` OK calls of `method` after `mark`; returns them."""
        found = []

        def enough():
            found[:] = self.since(mark, method)
            return len(found) >= count
        wait(enough, timeout, what or f"{count} {method} replies", alive=self.alive)
        return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_kind(r):
    """"VERB resource[/subresource]" of a fake API server request log entry,
    with LIST and WATCH told from GET."""
    parts = [p for p in r["path"].split("/") if p]
    resource = parts[-1]
    for i, p in enumerate(parts):
        if p in ("pods", "nodes", "csidrivers", "csinodes", "events", "persistentvolumeclaims",
                 "persistentvolumes", "volumeattachments", "secrets"):
            resource = p + ("/" + parts[i + 2] if len(parts) > i + 2 else "")
            break
    verb = r["method"]
    query = r.get("query") or {}
    if verb == "GET" and (r.get("watch") or "watch" in query):
        verb = "WATCH"
    elif verb == "GET" and parts[-1] in ("pods", "nodes", "csidrivers"):
        verb = "LIST"
    return f"{verb} {resource}"


GO_PACKAGES = ["golang-1.19-go", "golang-google-grpc-dev", "golang-goprotobuf-dev", "protobuf-compiler"]
GO_DRIVER_CACHE = "/var/tmp/kvolumed-bench-go"


def go_driver_binary():
    """The Go driver (test/bench/godriver/driver.go), built offline from
    Debian's Go packages (installed when missing) by the interop tests'
    build.sh, with the reference csi.proto as they find it, once for its
    sources: kept in GO_DRIVER_CACHE by digest."""
    import hashlib
    import shutil
    reference = os.environ.get("KVOLUMED_REFERENCE_DIR", os.path.join(os.path.dirname(REPO), "shared", "reference"))
    build = os.path.join(REPO, "test", "interop", "go", "build.sh")
    source = os.path.join(REPO, "test", "bench", "godriver", "driver.go")
    digest = hashlib.sha256()
    for path in (build, source, os.path.join(reference, "csi.proto")):
        with open(path, "rb") as f:
            digest.update(f.read())
    d = os.path.join(GO_DRIVER_CACHE, digest.hexdigest()[:16])
    binary = os.path.join(d, "csi-go-bench-driver")
    os.makedirs(GO_DRIVER_CACHE, exist_ok=True)
    # One builder at a time (the suite's workers, a benchmark): the others
    # wait for its binary; a directory is made whole under a temporary name.
    with open(os.path.join(GO_DRIVER_CACHE, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(binary, os.X_OK):
            return binary
        if not os.path.exists("/usr/lib/go-1.19/bin/go") or not os.path.exists("/usr/bin/protoc-gen-go"):
            print(f"bench: installing {' '.join(GO_PACKAGES)}", file=sys.stderr, flush=True)
            subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq",
                            "--no-install-recommends", *GO_PACKAGES], check=True, stdout=subprocess.DEVNULL,
                           timeout=900)
        work = tempfile.mkdtemp(prefix=".build-", dir=GO_DRIVER_CACHE)
        try:
            subprocess.run([build, reference, work, source, "csi-go-bench-driver"], check=True,
                           stdout=subprocess.DEVNULL, timeout=900)
            os.rename(work, d)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return binary


def start_node(api, work, sockdir, root, listen="", lifecycle_modes=("Ephemeral",), driver_args=(),
               driver_kind="python"):
    """The node the benchmarks use: its Node and a CSIDriver (no attach) in
    the fake API server, the driver, and kvolumed's configuration (log level
    warning).  driver_kind: "python", the mock driver in tmpfs mode (plus
    driver_args), or "go", the benchmarks' grpc-go driver doing the same
    for ephemeral inline volumes (driver_args: its -state-write only).
    Returns (driver process, its state dir, the configuration path)."""
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "status": {}})
    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                "spec": {"attachRequired": False, "volumeLifecycleModes": list(lifecycle_modes)}})
    driver_state = os.path.join(work, "driver")
    if driver_kind == "go":
        state_write = driver_args[driver_args.index("--state-write") + 1] if "--state-write" in driver_args \
            else "safe"
        argv = [go_driver_binary(), "-endpoint", f"{sockdir}/csi.sock", "-name", DRIVER,
                "-state-dir", driver_state, "-state-write", state_write]
    elif driver_kind == "python":
        argv = ["/usr/bin/python3", "-m", "doubles.mockcsi", "--endpoint", f"unix://{sockdir}/csi.sock",
                "--name", DRIVER, "--state-dir", driver_state, "--tmpfs", *driver_args]
    else:
        raise ValueError(f"driver_kind {driver_kind!r}")
    driver = subprocess.Popen(argv, env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "test")),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if not driver.stdout.readline():
        raise SystemExit(f"bench: the {driver_kind} driver did not start")
    config = os.path.join(work, "kvolumed.conf")
    with open(config, "w") as f:
        f.write(f"[agent]\nnode-name = {NODE}\nroot-dir = {root}\n"
                f"[kubernetes]\nkubeconfig = {api.kubeconfig_path}\n"
                f"[csi]\nregistration-dir =\n"
                f'[driver "{DRIVER}"]\nendpoint = unix://{sockdir}/csi.sock\n'
                # The local API in the work directory, not the machine's /run.
                f"[api]\nsocket = {work}/kvolumed.sock\n"
                f"[metrics]\nlisten = {listen}\n[log]\nlevel = warning\n")
    return driver, driver_state, config


def open_bench_node(node, workdir, work_prefix, sock_prefix, driver_state="root-dir", driver_kind="python"):
    """What the mount and the restart benchmarks start from, set on `node`:
    a work directory (.work, .root), a short socket directory (.sockdir),
    the fake API server (.api), the metrics address (.listen), the mock
    driver (.driver) with its call log (.tail) and kvolumed's configuration
    (.config), kvolumed not started.  driver_state: where and how the mock
    driver keeps its state file, rewritten at each call: "root-dir" (on
    root-dir's file system, written safely: temp, fsync, rename), "hostpath"
    (there, written in place and never synced, as the CSI hostpath driver)
    or "tmpfs" (on a tmpfs of its own).  driver_kind: start_node()'s."""
    from doubles.fakeapi import FakeApiServer

    node.work = tempfile.mkdtemp(prefix=work_prefix, dir=workdir)
    node.sockdir = tempfile.mkdtemp(prefix=sock_prefix, dir="/tmp")  # a socket path has 107 bytes at most
    node.root = os.path.join(node.work, "root")
    os.makedirs(node.root)
    node.api = FakeApiServer(os.path.join(node.work, "api"), control_port=None, bookmark_interval=60).start()
    node.listen = f"127.0.0.1:{free_port()}"
    driver_args = ()
    if driver_state == "tmpfs":
        os.makedirs(os.path.join(node.work, "driver"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", os.path.join(node.work, "driver")],
                       check=True)
    elif driver_state == "hostpath":
        driver_args = ("--state-write", "hostpath")
    elif driver_state != "root-dir":
        raise ValueError(f"driver_state {driver_state!r}")
    # --gc-freeze: the driver is Python; see mockcsi's option.
    if driver_kind == "python":
        driver_args += ("--gc-freeze",)
    node.driver, state, node.config = start_node(node.api, node.work, node.sockdir, node.root, listen=node.listen,
                                                 driver_args=driver_args, driver_kind=driver_kind)
    node.tail = CallLogTail(os.path.join(state, "calls.jsonl"))


def stop_process(proc, sig=signal.SIGTERM, timeout=60):
    """Stops a child the bench started (kvolumed, the driver), killing it
    when it does not exit within the timeout."""
    if proc and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def close_bench_node(node):
    """Undoes open_bench_node() once kvolumed is stopped: the driver, the
    fake API server, the mounts left under the work directory (thousands:
    umount2() here, not a process per mount) and the directories."""
    import ctypes

    stop_process(node.driver)
    node.api.stop()
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/self/mountinfo") as f:
        left = [line.split()[4] for line in f if line.split()[4].startswith(node.work + "/")]
    for m in sorted(left, key=len, reverse=True):
        libc.umount2(m.encode(), 2)  # MNT_DETACH
    subprocess.run(["rm", "-rf", "--one-file-system", node.work, node.sockdir])


def kvolumed_path():
    build = os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO, "build"))
    return os.path.join(build, "agent", "kvolumed")


def file_system_of(path):
    """(type, source) of the file system holding path."""
    out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", path],
                         capture_output=True, text=True).stdout.split()
    return (out[0], out[1]) if len(out) >= 2 else ("?", "?")


def ext4_journal(source):
    """Whether the ext4 on the block device `source` has a journal; None
    when it is not an ext4 on a block device, or cannot be told.  It matters
    to every figure of a file written under root-dir: without a journal,
    ext4 does not reuse an inode freed in the last minute (five while its
    inode table block is dirty), and each file or directory created scans
    past every such one of its block group (find_inode_bit and
    recently_deleted, fs/ext4/ialloc.c), so what earlier runs created and
    removed there slows the next run's creations (see fresh_ext4)."""
    name = os.path.basename(os.path.realpath(source))
    task = f"/sys/fs/ext4/{name}/journal_task"
    try:
        with open(task) as f:
            return f.read().strip() != "<none>"
    except OSError:
        return True if os.path.isdir(f"/proc/fs/jbd2/{name}-8") else None


def mkfs_ext4(target):
    """An ext4 with a journal on target (an image or a device), written
    whole by mkfs: no lazy initialisation writing behind the bench's back."""
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "has_journal",
                    "-E", "lazy_itable_init=0,lazy_journal_init=0", target], check=True)


def fresh_fs_flag(args):
    """--fresh-fs as the report's command line gives it back ("" without)."""
    return f" --fresh-fs {args.fresh_fs}" if getattr(args, "fresh_fs", None) else ""


def fresh_ext4(mountpoint, image_dir, size_gib=8):
    """Mounts a new ext4 with a journal, as a node's /var is, on mountpoint:
    its image a sparse file in image_dir (mkfs_ext4).  The image is unlinked
    once mounted, and the loop device clears itself at the unmount (mount -o
    loop), which the bench's private mount namespace does when it ends:
    nothing of it outlives the run.  Root and a private mount namespace."""
    fd, image = tempfile.mkstemp(prefix=".kvbench-ext4.", suffix=".img", dir=image_dir)
    try:
        os.ftruncate(fd, size_gib << 30)
        os.close(fd)
        mkfs_ext4(image)
        subprocess.run(["mount", "-o", "loop", image, mountpoint], check=True)
    finally:
        os.unlink(image)


def fresh_zram_ext4(mountpoint, size_gib=4):
    """fresh_ext4() on a zram device of its own instead of a loop device: a
    disk in memory whose writes complete in the submitting thread and whose
    flush costs nothing (its cache is write-through), where the loop device
    hands each write and flush to a kernel thread, then to its image's file
    system.  What is left of a record's durability is then the file system's
    own work, as on a disk with power-loss protection.  Returns the device's
    number, for zram_remove().  Needs the zram driver (zram-control)."""
    with open("/sys/class/zram-control/hot_add") as f:
        number = int(f.read().strip())
    try:
        with open(f"/sys/block/zram{number}/disksize", "w") as f:
            f.write(f"{size_gib}G")
        mkfs_ext4(f"/dev/zram{number}")
        subprocess.run(["mount", f"/dev/zram{number}", mountpoint], check=True)
    except BaseException:
        zram_remove(number)
        raise
    return number


def zram_remove(number):
    """Gives a device of fresh_zram_ext4() back, once unmounted."""
    try:
        with open("/sys/class/zram-control/hot_remove", "w") as f:
            f.write(str(number))
    except OSError as e:
        print(f"bench: zram{number} not removed: {e}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def fresh_workdir(args):
    """--fresh-fs [loop|zram]: args.workdir (root-dir, the driver's state,
    the doubles' files) moved onto a new ext4 with a journal for the run:
    figures that do not depend on what ran before on --workdir's file
    system, nor on whether it has a journal (this machine's has none:
    ext4_journal).  loop: fresh_ext4(), its image on --workdir's disk;
    zram: fresh_zram_ext4(), in memory, a disk whose flush is free."""
    backing = getattr(args, "fresh_fs", None)
    if not backing:
        yield
        return
    outer = args.workdir
    args.workdir = tempfile.mkdtemp(prefix="kvbench-ext4.", dir=outer)
    zram = None
    try:
        if backing == "zram":
            zram = fresh_zram_ext4(args.workdir)
        else:
            fresh_ext4(args.workdir, outer)
        yield
    finally:
        subprocess.run(["umount", "--lazy", args.workdir], stderr=subprocess.DEVNULL)
        if zram is not None:
            zram_remove(zram)
        os.rmdir(args.workdir)
        args.workdir = outer


def machine(root):
    """The machine a figure was measured on."""
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        debian = open("/etc/debian_version").read().strip()
    except OSError:
        debian = "?"
    fstype, source = file_system_of(root)
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {"cpu": model, "cpus": os.cpu_count(), "kernel": platform.release(), "debian": debian,
            "memory_gib": round(mem_kib / 2**20, 1), "root_dir_fs": fstype, "root_dir_source": source,
            "root_dir_journal": ext4_journal(source) if fstype == "ext4" else None,
            "loadavg": open("/proc/loadavg").read().split()[:3]}


def write_report(path, lines, res):
    """Prints the Markdown report and writes it to `path`, with its figures
    as JSON beside it (`.md` → `.json`)."""
    text = "\n".join(lines) + "\n"
    print(text)
    with open(path, "w") as f:
        f.write(text)
    with open(path.removesuffix(".md") + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
