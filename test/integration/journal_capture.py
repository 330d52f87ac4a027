"""Runs a command with a stand-in journald and prints what it received.

Run as `unshare -m --propagation private python3 journal_capture.py -- CMD...`:
it mounts a tmpfs over /run in that (nested, private) mount namespace, binds
/run/systemd/journal/socket, runs CMD with JOURNAL_STREAM naming CMD's stderr,
stops CMD with SIGTERM after --seconds (or, with --stop-file, as soon as that
file exists, --seconds being the most it waits), and prints each received entry as one
JSON object per line (journald's native protocol, decoded).  With --entries FILE
each entry is also appended to FILE as it comes (one JSON object a line), for a
test that waits for one; a SIGTERM to this script stops CMD as --seconds would."""
import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time


def parse_native(data):
    """Decodes one datagram of journald's native protocol into a dict."""
    entry = {}
    i = 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            entry[k.decode()] = v.decode()
            i = nl + 1
        else:  # binary-safe form: NAME\n <le64 size> <data> \n
            size = struct.unpack("<Q", data[nl + 1 : nl + 9])[0]
            entry[line.decode()] = data[nl + 9 : nl + 9 + size].decode()
            i = nl + 9 + size + 1
    return entry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--stop-file")
    ap.add_argument("--entries")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd

    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
    os.makedirs("/run/systemd/journal")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("/run/systemd/journal/socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)

    # stderr of the child is a pipe; JOURNAL_STREAM names exactly that pipe,
    # as systemd does for a service whose StandardError= is the journal.
    r, w = os.pipe()
    st = os.fstat(w)
    env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
    env.pop("KVOLUMED_LOG_TARGET", None)
    proc = subprocess.Popen(cmd, stderr=w, env=env)
    os.close(w)
    # Entries are read as they come, as journald does: a datagram socket
    # holds only net.unix.max_dgram_qlen of them, and a sender facing a full
    # queue blocks.  stderr is drained too, for the same reason.
    entries = []
    stderr_chunks = []
    done = threading.Event()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    live = open(args.entries, "a") if args.entries else None
    sock.settimeout(0.1)

    def read_entries():
        while True:
            try:
                data, anc, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 4))
            except socket.timeout:
                if done.is_set():
                    return
                continue
            if not data:  # large entries arrive as a memfd
                for level, typ, payload in anc:
                    if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                        fd = struct.unpack("i", payload[:4])[0]
                        data = os.pread(fd, 1 << 24, 0)
                        os.close(fd)
            entries.append(parse_native(data))
            if live:
                live.write(json.dumps(entries[-1]) + "\n")
                live.flush()

    def read_stderr():
        while chunk := os.read(r, 65536):
            stderr_chunks.append(chunk)

    readers = [threading.Thread(target=read_entries), threading.Thread(target=read_stderr)]
    for t in readers:
        t.start()
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline and not stop.is_set() and proc.poll() is None:
        if args.stop_file and os.path.exists(args.stop_file):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=10)
    readers[1].join()  # stderr ends with the process
    done.set()  # what it sent is queued: read until the socket is idle
    readers[0].join()
    stderr_text = b"".join(stderr_chunks).decode()
    print(json.dumps({"exit": code, "stderr": stderr_text, "entries": entries}))


if __name__ == "__main__":
    sys.exit(main())
