"""Thin wrappers over mount(8), umount(8), losetup(8) and mkfs, plus readers of
/proc/self/mountinfo and /sys/block/loop*/loop/backing_file.

The driver shells out to the util-linux tools (as most Go CSI drivers do via
k8s mount-utils) so that what it does is exactly what a real driver does and
shows up in the mount table the same way.
"""
import ctypes
import errno
import glob
import os
import re
import subprocess
import threading
import time


class CommandError(Exception):
    def __init__(self, argv, rc, out):
        super().__init__("%s failed (rc=%d): %s" % (" ".join(argv), rc, out.strip()))
        self.rc = rc
        self.output = out


def run(argv, check=True):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and p.returncode != 0:
        raise CommandError(argv, p.returncode, p.stdout)
    return p


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(s):
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), s)


def _parse(line):
    left, _, right = line.rstrip("\n").partition(" - ")
    l = left.split(" ")
    r = right.split(" ")
    return {"root": _unescape(l[3]), "mount_point": _unescape(l[4]),
            "options": l[5], "fstype": r[0], "source": _unescape(r[1]),
            "super_options": r[2] if len(r) > 2 else ""}


def mountinfo():
    """List of dicts {mount_point, source, fstype, options, root} for this namespace."""
    with open("/proc/self/mountinfo") as f:
        return [_parse(line) for line in f]


def _escape(path):
    return "".join("\\%03o" % ord(c) if c in " \t\n\\" else c for c in path)


def _entries_at(path):
    """The mountinfo entries mounted at path, bottom to top.  Only lines
    holding the escaped path as a field are parsed: a node of 10,000 volumes
    (the benchmarks) made parsing every line the driver's main cost per
    call, quadratic over a warm-up; the answer is the same."""
    path = os.path.normpath(path)
    needle = " %s " % _escape(path)
    with open("/proc/self/mountinfo") as f:
        return [m for m in (_parse(line) for line in f if needle in line) if m["mount_point"] == path]


class _Statx(ctypes.Structure):
    # The head of struct statx (linux/stat.h); the kernel writes 256 bytes.
    _fields_ = [("mask", ctypes.c_uint32), ("blksize", ctypes.c_uint32), ("attributes", ctypes.c_uint64),
                ("nlink", ctypes.c_uint32), ("uid", ctypes.c_uint32), ("gid", ctypes.c_uint32),
                ("mode", ctypes.c_uint16), ("spare0", ctypes.c_uint16), ("ino", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("blocks", ctypes.c_uint64), ("attributes_mask", ctypes.c_uint64),
                ("rest", ctypes.c_uint8 * 192)]


_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_AT_STATX_DONT_SYNC = 0x4000
_STATX_ATTR_MOUNT_ROOT = 0x2000
_libc = ctypes.CDLL(None, use_errno=True)
_statx = getattr(_libc, "statx", None)


def _mount_root(path):
    """Whether path is the root of a mount (statx's STATX_ATTR_MOUNT_ROOT,
    Linux 5.8): True, False, or None when statx cannot say.  The kernel
    answers from the path walk alone, where reading mountinfo makes it
    write the whole table (~10 ms per 1,000 mounts on a loaded machine),
    several times a call: at 10,000 volumes that made the driver the
    benchmarks' bottleneck.  AT_STATX_DONT_SYNC: a network or FUSE file
    system answers from its cache, so a hung one (a test's dead FUSE)
    does not hang the driver."""
    if _statx is None:
        return None
    parent = os.path.dirname(path)
    # mountinfo names a mount by its path without symlinks; so must we.
    if os.path.realpath(parent) != parent:
        return None
    buf = _Statx()
    if _statx(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW | _AT_STATX_DONT_SYNC, 0, ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        return False if err in (errno.ENOENT, errno.ENOTDIR) else None
    if not buf.attributes_mask & _STATX_ATTR_MOUNT_ROOT:
        return None
    return bool(buf.attributes & _STATX_ATTR_MOUNT_ROOT)


def is_mount_point(path):
    path = os.path.normpath(path)
    root = _mount_root(path)
    return bool(_entries_at(path)) if root is None else root


def mount_entry(path):
    """Topmost mountinfo entry at path, or None."""
    found = _entries_at(path)
    return found[-1] if found else None


def mount(source, target, fstype=None, options=()):
    argv = ["mount"]
    if fstype:
        argv += ["-t", fstype]
    opts = [o for o in options if o]
    if opts:
        argv += ["-o", ",".join(opts)]
    run(argv + [source, target])


def bind(source, target, readonly=False, flags=()):
    """Bind mount; read-only and VFS flags need a second remount (kernel rule)."""
    run(["mount", "--bind", source, target])
    extra = [f for f in flags if f and f not in ("bind", "rw")]
    if readonly and "ro" not in extra:
        extra.append("ro")
    if extra:
        try:
            run(["mount", "-o", ",".join(["remount", "bind"] + extra), target])
        except CommandError:
            run(["umount", target], check=False)
            raise


_umount2 = _libc.umount2
_umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)


def umount(path):
    """Unmount every mount stacked at path; no-op if nothing is mounted.
    umount(2) first, as umount(8) does without its user-mount bookkeeping
    (the mount table ends the same): a driver's clean stop unmounts every
    volume of a test, and 200 volumes of umount(8) processes took over 30 s
    on 2 cores under a load of 25 (parallel test workers)."""
    while is_mount_point(path):
        if _umount2(os.fsencode(path), 0) == 0:
            continue
        p = run(["umount", path], check=False)
        if p.returncode != 0:
            # Busy (e.g. an open file in a test): detach lazily so the mount
            # leaves the table anyway, as kubelet's mount-utils does not, but
            # a leak in the table would poison every later test.
            run(["umount", "-l", path])


# losetup picks "the first free device" with a race between processes; serialise
# within this process at least.
_loop_lock = threading.Lock()


def loop_attach(backing):
    with _loop_lock:
        # One this driver attached before (a restart) is taken again; one it
        # detached while another process held it open is going away and not.
        existing = live_loops_for(backing)
        if existing:
            return existing[0]
        return run(["losetup", "-f", "--show", backing]).stdout.strip()


def loop_detach(dev):
    # Missing device is fine: the aim is that it is gone.  If it is still
    # open (mounted elsewhere, or only read for a moment by udev's blkid, a
    # `losetup -a`, a neighbour's `losetup -f` that raced for it) the kernel
    # marks it autoclear and frees it when the last user goes, which is
    # what a real detach does too: the device may outlive the call.
    run(["losetup", "-d", dev], check=False)


def loop_detaching(dev):
    """Whether dev was detached and waits for its last user to go (the
    kernel's autoclear: this driver never attaches with it).  A device gone
    meanwhile is detaching too."""
    try:
        with open("/sys/block/%s/loop/autoclear" % os.path.basename(dev)) as f:
            return f.read().strip() == "1"
    except OSError:
        return True


def loop_refresh(dev):
    run(["losetup", "-c", dev])


def loop_backing_files():
    """Map /dev/loopN -> backing file for every attached loop device."""
    out = {}
    for p in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(p) as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.endswith(" (deleted)"):
            backing = backing[: -len(" (deleted)")]
        out["/dev/" + p.split("/")[3]] = backing
    return out


def loops_for(backing):
    real = os.path.realpath(backing)
    return sorted(d for d, b in loop_backing_files().items() if b in (backing, real))


def live_loops_for(backing):
    """loops_for() without the devices that are only waiting for their
    last user to go (loop_detaching())."""
    return [d for d in loops_for(backing) if not loop_detaching(d)]


def assert_loops_released(find, timeout=120):
    """For the tests: the loop devices find() lists (loops_for or
    loops_under of what a driver let go) are all detached at once, and gone
    once the processes that had them open close them.  The kernel frees a
    detached device at its last close: on a loaded machine a blkid or
    `losetup -a` may hold it for a while, and a mount namespace that a
    neighbouring test made (unshare -m) while the volume was mounted holds
    its copy of the mount, and so the device, until its last process ends
    (journal_capture's runs up to 90 s)."""
    live = [d for d in find() if not loop_detaching(d)]
    assert live == [], "loop devices still attached, not detached: %s" % live
    deadline = time.monotonic() + timeout
    while find():
        assert time.monotonic() < deadline, "detached loop devices not freed within %ss: %s" % (timeout, find())
        time.sleep(0.02)


def loops_under(directory):
    d = os.path.realpath(directory).rstrip("/") + "/"
    return sorted(dev for dev, b in loop_backing_files().items() if b.startswith(d))


def blkid_type(dev):
    p = run(["blkid", "-p", "-o", "value", "-s", "TYPE", dev], check=False)
    return p.stdout.strip() if p.returncode == 0 else ""


def mkfs(dev, fstype):
    argv = ["mkfs." + fstype]
    if fstype.startswith("ext"):
        argv += ["-q", "-F"]
    elif fstype == "xfs":
        argv += ["-q", "-f"]
    run(argv + [dev])


def mkfs_available(fstype):
    return any(os.access(os.path.join(d, "mkfs." + fstype), os.X_OK)
               for d in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"))
