#!/usr/bin/env python3
"""What making one operation's records durable costs (issue 23): the records
kvolumed writes before a CSI call (a pod volume's directories, vol_data.json
and the intent, each written to a temporary file and renamed), then either one
syncfs(2) of the file system (what kvolumed does, volume/rootsync.c) or an
fsync(2) of each file and of each directory whose entries changed.  Both on a
quiet file system and with --others MiB written by another process just before
(a container writing to the same disk as root-dir): syncfs waits for those
pages, per-file fsyncs do not.  Prints medians, p90 and max in ms."""
import argparse
import ctypes
import os
import shutil
import statistics
import sys
import tempfile
import time

LIBC = ctypes.CDLL(None, use_errno=True)


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
    volume = os.path.join(base, "pods", name, "volumes", "kubernetes.io~csi", "v")
    mount = os.path.join(volume, "mount")
    os.makedirs(mount)
    write_renamed(os.path.join(volume, "vol_data.json"), b'{"driverName":"mock.csi","volumeHandle":"h"}' * 4)
    write_renamed(os.path.join(volume, "intent"), b'{"operation":"publish","done":false}')
    files = [os.path.join(volume, "vol_data.json"), os.path.join(volume, "intent")]
    dirs, d = [], mount
    while d != base:
        d = os.path.dirname(d)
        dirs.append(d)
    return files, dirs


def fsync_path(path, directory):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dirty_others(base, mib, name):
    """A new file each time: truncating one in place would make ext4 write
    it out at close (auto_da_alloc), which is not another writer's usual way."""
    if mib:
        with open(os.path.join(base, f"others-{name}"), "xb") as f:
            f.write(os.urandom(mib << 20))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", default="/var/tmp", help="a directory on root-dir's file system")
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--others", type=int, default=8, help="MiB another writer leaves dirty before a sync")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="kvbench-durability.", dir=args.workdir)
    results = {}
    try:
        root_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
        for others in (0, args.others):
            for how in ("syncfs", "fsync each"):
                key = f"{how}, {others} MiB of others' writes"
                results[key] = []
                for i in range(args.repeat):
                    name = f"{how.split()[0]}-{others}-{i}"
                    dirty_others(base, others, name)
                    files, dirs = records(base, name)
                    t0 = now_ms()
                    if how == "syncfs":
                        if LIBC.syncfs(root_fd) != 0:
                            raise OSError(ctypes.get_errno(), "syncfs")
                    else:
                        for f in files:
                            fsync_path(f, False)
                        for d in dirs:
                            fsync_path(d, True)
                    results[key].append(now_ms() - t0)
                    if others:  # 100 of them would hold GiBs of the disk until the end
                        os.unlink(os.path.join(base, f"others-{name}"))
        os.close(root_fd)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"Durable records of one publish on {args.workdir}, {args.repeat} times each (ms):")
    for key, xs in results.items():
        xs.sort()
        print(f"  {key:36s} median {statistics.median(xs):6.2f}  p90 {xs[int(0.9 * len(xs))]:6.2f}  "
              f"max {xs[-1]:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
