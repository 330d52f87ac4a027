#!/usr/bin/python3
"""Benchmark of a restart, run by test/bench/restart.sh inside a private
mount namespace: the real kvolumed against the fake API server and the mock
CSI driver in tmpfs mode, root-dir on a disk-backed file system.

N pods x V inline volumes are published; then, per run, kvolumed is killed
with SIGKILL and started again, and this measures:
  ready:     from the start of the process to READY=1 (sd_notify);
  converged: to the first /metrics answer showing every volume published,
             none uncertain and no operation in flight;
  the API requests it made (by verb and resource) and the CSI calls it made
  (by method) from its start until converged.
Goal of issue 9: converged in <= 2 s with 1,000 volumes, no NodeUnpublish,
one list per informer.  Prints one JSON object and a readable summary."""
import argparse
import collections
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import (free_port, kvolumed_path, mounts_under, pod, read_calls,  # noqa: E402
                      request_kind, start_node, wait)
from doubles.fakeapi import FakeApiServer  # noqa: E402


def gauge(text, state):
    m = re.search(r'^kvolumed_volumes\{state="%s"\} (\d+)$' % state, text, re.M)
    return int(m.group(1)) if m else -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--volumes", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", default="/var/tmp")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="kvrestart.", dir=args.workdir)
    sockdir = tempfile.mkdtemp(prefix="kvr.", dir="/tmp")
    root = os.path.join(work, "root")
    os.makedirs(root)
    fs = subprocess.run(["stat", "-f", "-c", "%T", root], capture_output=True, text=True).stdout.strip()
    api = FakeApiServer(os.path.join(work, "api"), control_port=None, bookmark_interval=60).start()
    port = free_port()
    total = args.pods * args.volumes
    procs = []
    result = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "root_dir_fs": fs},
              "volumes": total, "runs": []}
    notify_path = os.path.join(sockdir, "notify.sock")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    agent = None
    try:
        driver, driver_state, config = start_node(api, work, sockdir, root, listen=f"127.0.0.1:{port}")
        procs.append(driver)

        def start():
            return subprocess.Popen([kvolumed_path(), "--config", config],
                                    env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr", NOTIFY_SOCKET=notify_path),
                                    stderr=open(os.path.join(work, "kvolumed.log"), "a"))

        agent = start()
        for i in range(args.pods):
            api.create(pod(f"p-{i}", [f"v{j}" for j in range(args.volumes)]))
        def drained():
            # systemd reads every notification; a reader that does not
            # leaves kvolumed blocked in sd_notify once the socket's queue
            # (net.unix.max_dgram_qlen, 10) is full: a 10,000-volume warm-up
            # sends more STATUS= lines than that.
            notify.settimeout(0)
            try:
                while True:
                    notify.recv(4096)
            except (BlockingIOError, socket.timeout):
                pass
            return True

        wait(lambda: drained() and mounts_under(root) >= total, 900, f"{total} mounts", interval=0.5)
        time.sleep(1.0)

        calls_path = os.path.join(driver_state, "calls.jsonl")
        for run in range(args.runs):
            agent.send_signal(signal.SIGKILL)
            agent.wait()
            while True:  # drop what the last run said
                notify.settimeout(0.01)
                try:
                    notify.recv(4096)
                except (socket.timeout, BlockingIOError):
                    break
            api.clear_requests()
            calls_before = len(read_calls(calls_path))
            t0 = time.monotonic()
            agent = start()
            notify.settimeout(30)
            while "READY=1" not in notify.recv(4096).decode().split("\n"):
                pass
            ready = time.monotonic() - t0

            def converged():
                try:
                    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                except OSError:
                    return False
                return (gauge(text, "published") == total and gauge(text, "uncertain") == 0
                        and "kvolumed_reconcile_seconds_count" in text
                        and not re.search(r"^kvolumed_reconcile_seconds_count 0$", text, re.M))
            wait(converged, 120, "convergence")
            done = time.monotonic() - t0
            time.sleep(0.5)  # anything it would still do after converging is counted too
            calls = collections.Counter(c["method"] for c in read_calls(calls_path)[calls_before:])
            reqs = collections.Counter(request_kind(r) for r in api.requests())
            result["runs"].append({"ready_seconds": round(ready, 3), "converged_seconds": round(done, 3),
                                   "csi_calls": dict(calls), "api_requests": dict(reqs)})
        result["median_ready_seconds"] = statistics.median(r["ready_seconds"] for r in result["runs"])
        result["median_converged_seconds"] = statistics.median(r["converged_seconds"] for r in result["runs"])
    finally:
        for p in [agent] + list(reversed(procs)):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
        api.stop()
        notify.close()
        subprocess.run(["rm", "-rf", work, sockdir])
    print(json.dumps(result))
    print(f"\nrestart with {total} published inline volumes, {args.runs} runs: READY after "
          f"{result['median_ready_seconds']} s, converged after {result['median_converged_seconds']} s (medians)",
          file=sys.stderr)
    for r in result["runs"]:
        print(f"  run: ready {r['ready_seconds']} s, converged {r['converged_seconds']} s, CSI calls "
              f"{r['csi_calls'] or 'none'}, API requests {r['api_requests']}", file=sys.stderr)
    print(f"root-dir file system: {fs}; {os.cpu_count()} CPUs", file=sys.stderr)


if __name__ == "__main__":
    main()
