#!/usr/bin/env python3
"""A busy neighbour for the durability benchmarks (issue 31): a process that
keeps a file system dirty without ever syncing, as containers' logs and
databases and a runtime unpacking image layers keep /var.  It writes --rate
MiB/s into new files under DIR, 16 MiB each, and removes the oldest once
more than --window MiB are kept: about --window MiB stay dirty (the kernel
writes a page back 30 s after it was dirtied, or when dirty pages pass 10 %
of memory; a file removed before then is never written).  Pointed at a
tmpfs it costs the same CPU and dirties nothing on disk: the control.
Runs until killed; removes its files on SIGTERM."""
import argparse
import os
import signal
import sys
import time

CHUNK = 1 << 20
FILE_MIB = 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--rate", type=float, default=32.0, help="MiB written per second")
    ap.add_argument("--window", type=int, default=512, help="MiB kept (dirty) at a time")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    data = os.urandom(CHUNK)
    kept = []
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    t0, written = time.monotonic(), 0
    try:
        n = 0
        while not stop:
            path = os.path.join(args.dir, f"dirty-{n}")
            n += 1
            with open(path, "wb") as f:
                for _ in range(FILE_MIB):
                    f.write(data)
                    written += 1
                    # Steady: sleep while ahead of the rate.
                    ahead = written / args.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
                    if stop:
                        break
            kept.append(path)
            while len(kept) * FILE_MIB > args.window:
                os.unlink(kept.pop(0))
    finally:
        for p in kept:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
