"""Thin wrappers over mount(8), umount(8), losetup(8) and mkfs, plus readers of
/proc/self/mountinfo and /sys/block/loop*/loop/backing_file.

The driver shells out to the util-linux tools (as most Go CSI drivers do via
k8s mount-utils) so that what it does is exactly what a real driver does and
shows up in the mount table the same way.
"""
import glob
import os
import re
import subprocess
import threading


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


def mountinfo():
    """List of dicts {mount_point, source, fstype, options, root} for this namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            l = left.split(" ")
            r = right.split(" ")
            out.append({"root": _unescape(l[3]), "mount_point": _unescape(l[4]),
                        "options": l[5], "fstype": r[0], "source": _unescape(r[1]),
                        "super_options": r[2] if len(r) > 2 else ""})
    return out


def is_mount_point(path):
    path = os.path.normpath(path)
    return any(m["mount_point"] == path for m in mountinfo())


def mount_entry(path):
    """Topmost mountinfo entry at path, or None."""
    path = os.path.normpath(path)
    found = None
    for m in mountinfo():
        if m["mount_point"] == path:
            found = m
    return found


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


def umount(path):
    """Unmount every mount stacked at path; no-op if nothing is mounted."""
    while is_mount_point(path):
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
        existing = loops_for(backing)
        if existing:
            return existing[0]
        return run(["losetup", "-f", "--show", backing]).stdout.strip()


def loop_detach(dev):
    # Missing device is fine: the aim is that it is gone.  If it is still
    # busy (mounted elsewhere) the kernel marks it autoclear and frees it
    # when the last user goes, which is what a real detach does too.
    run(["losetup", "-d", dev], check=False)


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
