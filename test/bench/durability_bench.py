#!/usr/bin/env python3
"""What making one operation's records durable costs (issues 23 and 31): the
records kvolumed writes before a CSI call (a pod volume's directories,
vol_data.json and the intent, each written to a temporary file and renamed,
and the mirror of the directories where the intent is kept), then either one
syncfs(2) of the file system (the rule before issue 31) or what kvolumed does
now (volume/host/rootdir.c): an fdatasync(2) of each file, then an fsync(2) of each
directory whose entries changed, each phase's calls in flight together.  On a
quiet file system, beside a steady writer (dirty_writer.py, --rate MiB/s,
about --window MiB kept dirty, never synced) to a tmpfs (/dev/shm: the same
CPU load, nothing dirty on disk; the control) and beside the same writer to
the same file system: syncfs waits for that writer's pages, the per-file
syncs do not.  "intent log": kvolumed's rule since (volume/host/intentlog.h):
the records copied into slots of a preallocated, written log, one
fdatasync(2) of it before the call, the per-file syncs after the call (not
timed: nothing waits for them).  Prints medians, p90 and max in ms, and the
ratio to the control under the same rule."""
import argparse
import ctypes
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import fresh_ext4  # noqa: E402

LIBC = ctypes.CDLL(None, use_errno=True)
HERE = os.path.dirname(os.path.abspath(__file__))
WRITERS = ("quiet", "tmpfs writer", "root-dir writer")
HOWS = ("syncfs", "fsync each", "intent log")
RECORD = b'{"driverName":"mock.csi","volumeHandle":"h"}' * 4


def now_ms():
    return time.perf_counter() * 1000.0


def write_renamed(path, data):
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def records(base, name):
    """One publish's records; returns what a per-file sync must fsync."""
    files, dirs = [], set()
    for top in ("", "kvolumed"):
        volume = os.path.join(base, top, "pods", name, "volumes", "kubernetes.io~csi", "v")
        os.makedirs(os.path.join(volume, "mount") if not top else volume)
        f = os.path.join(volume, "kvolumed.json" if top else "vol_data.json")
        write_renamed(f, RECORD)
        files.append(f)
        d = volume if top else os.path.join(volume, "mount")
        while d != base:
            d = os.path.dirname(d)
            dirs.add(d)
        dirs.add(volume)
    return files, sorted(dirs)


def fsync_path(path, directory):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        (os.fsync if directory else os.fdatasync)(fd)
    finally:
        os.close(fd)


def start_writer(where, args):
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "dirty_writer.py"), where,
                             "--rate", str(args.rate), "--window", str(args.window)])
    time.sleep(args.window / args.rate)  # until the window is full
    return proc


def stop_writer(proc):
    if proc:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="/var/tmp", help="a directory on root-dir's file system")
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--rate", type=float, default=512.0, help="MiB/s the steady writer writes")
    ap.add_argument("--interval", type=float, default=50.0,
                    help="ms between two syncs, as between two passes: the writer dirties pages meanwhile")
    ap.add_argument("--window", type=int, default=512, help="MiB the steady writer keeps (dirty)")
    ap.add_argument("--hows", default="syncfs,fsync each,intent log", help=argparse.SUPPRESS)
    ap.add_argument("--isolated", action="store_true",
                    help="on an ext4 image of its own on --workdir (root: a loop device, a private mount "
                    "namespace), so that other processes' syncs of --workdir's file system do not write the "
                    "writer's pages out")
    args = ap.parse_args()
    if args.isolated and not os.environ.get("KVBENCH_UNSHARED"):
        os.execvpe("unshare", ["unshare", "-m", "--propagation", "private", sys.executable, *sys.argv],
                   dict(os.environ, KVBENCH_UNSHARED="1"))
    base = tempfile.mkdtemp(prefix="kvbench-durability.", dir=args.workdir)
    if args.isolated:
        outer, base = base, os.path.join(base, "fs")
        os.mkdir(base)
        fresh_ext4(base, outer)
    pool = ThreadPoolExecutor(8)
    results = {}
    try:
        root_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
        # The log as kvolumed makes it: zeros written, durable, then only overwritten.
        log_fd = os.open(os.path.join(base, "intent-log"), os.O_RDWR | os.O_CREAT, 0o600)
        os.write(log_fd, bytes(256 * 4096))
        os.fsync(log_fd)
        fsync_path(base, True)
        for writer in WRITERS:
            where = {"quiet": None, "tmpfs writer": tempfile.mkdtemp(prefix="kvbench-writer.", dir="/dev/shm"),
                     "root-dir writer": os.path.join(base, "writer")}[writer]
            proc = start_writer(where, args) if where else None
            try:
                order = [h for h in HOWS if h in args.hows.split(",")]
                for i in range(args.repeat):
                    for how in order:
                        key = f"{how}, {writer}"
                        time.sleep(args.interval / 1000.0)
                        files, dirs = records(base, f"{how.split()[0]}-{writer.split()[0]}-{i}")
                        t0 = now_ms()
                        if how == "syncfs":
                            if LIBC.syncfs(root_fd) != 0:
                                raise OSError(ctypes.get_errno(), "syncfs")
                        elif how == "intent log":
                            # The bytes the pass just wrote, as kvolumed has them in memory.
                            for slot, f in enumerate(files):
                                os.pwrite(log_fd, f.encode() + RECORD, slot * 4096)
                            os.fdatasync(log_fd)
                            results.setdefault(key, []).append(now_ms() - t0)
                            # Then the files by themselves, as kvolumed's later thread does.
                            list(pool.map(lambda f: fsync_path(f, False), files))
                            list(pool.map(lambda d: fsync_path(d, True), dirs))
                            continue
                        else:
                            list(pool.map(lambda f: fsync_path(f, False), files))
                            list(pool.map(lambda d: fsync_path(d, True), dirs))
                        results.setdefault(key, []).append(now_ms() - t0)
                    order.reverse()
            finally:
                stop_writer(proc)
                if writer == "tmpfs writer":
                    shutil.rmtree(where, ignore_errors=True)
        os.close(root_fd)
        os.close(log_fd)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if args.isolated:
            subprocess.run(["umount", base])  # the loop device clears itself (fresh_ext4)
            shutil.rmtree(outer, ignore_errors=True)
    print(f"Durable records of one publish on {args.workdir}{' (an ext4 image of its own)' if args.isolated else ''}, "
          f"{args.repeat} times each (ms); the writer: "
          f"{args.rate:g} MiB/s, about {args.window} MiB dirty; load average {os.getloadavg()[0]:.1f}:")
    for how in [h for h in HOWS if h in args.hows.split(",")]:
        ctl = sorted(results[f"{how}, tmpfs writer"])
        for writer in WRITERS:
            xs = sorted(results[f"{how}, {writer}"])
            med, p90 = statistics.median(xs), xs[int(0.9 * len(xs))]
            print(f"  {how + ', ' + writer:28s} median {med:7.2f}  p90 {p90:7.2f}  max {xs[-1]:7.2f}  "
                  f"(× control: median {med / statistics.median(ctl):5.2f}, p90 {p90 / ctl[int(0.9 * len(ctl))]:5.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
