#!/usr/bin/python3
"""Benchmark of the volume manager, run by test/bench/volume.sh inside a
private mount namespace: the real kvolumed against the fake API server and
the mock CSI driver in tmpfs mode.  Root-dir is on a disk-backed file system
(never tmpfs: there durability is free and the figure lies).

  burst:   N pods x V inline volumes created at once: time until every
           volume is published and the mount table shows it; then all pods
           deleted at once: time until every mount and directory is gone.
  latency: one pod at a time, M times: from the pod's creation in the fake
           API server to the NodePublishVolume reply (from the driver's call
           log), median and p99.
Prints one JSON object and a readable summary."""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import (cpu_seconds, kvolumed_path, mounts_under, percentile, pod,  # noqa: E402
                      read_calls, start_node, wait)
from doubles.fakeapi import FakeApiServer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--volumes", type=int, default=5)
    ap.add_argument("--sequential", type=int, default=200)
    ap.add_argument("--workdir", default="/var/tmp")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="kvbench.", dir=args.workdir)
    sockdir = tempfile.mkdtemp(prefix="kvb.", dir="/tmp")
    root = os.path.join(work, "root")
    os.makedirs(root)
    fs = subprocess.run(["stat", "-f", "-c", "%T", root], capture_output=True, text=True).stdout.strip()
    api = FakeApiServer(os.path.join(work, "api"), control_port=None, bookmark_interval=60).start()
    procs = []
    result = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "root_dir_fs": fs},
              "pods": args.pods, "volumes_per_pod": args.volumes}
    try:
        driver, driver_state, config = start_node(api, work, sockdir, root)
        procs.append(driver)
        agent = subprocess.Popen([kvolumed_path(), "--config", config],
                                 env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"),
                                 stderr=open(os.path.join(work, "kvolumed.log"), "w"))
        procs.append(agent)
        time.sleep(1.0)

        # --- burst ---------------------------------------------------------
        total = args.pods * args.volumes
        cpu = {"kvolumed": cpu_seconds(agent.pid), "driver": cpu_seconds(driver.pid)}
        start = time.monotonic()
        for i in range(args.pods):
            api.create(pod(f"burst-{i}", [f"v{j}" for j in range(args.volumes)]))
        created = time.monotonic()
        wait(lambda: mounts_under(root) >= total, 300, f"{total} mounts")
        up = time.monotonic() - start
        result["burst_setup_seconds"] = round(up, 3)
        result["burst_setup_volumes_per_second"] = round(total / up, 1)
        result["burst_create_pods_seconds"] = round(created - start, 3)
        result["burst_setup_cpu_seconds"] = {k: round(cpu_seconds(p.pid) - cpu[k], 2)
                                             for k, p in (("kvolumed", agent), ("driver", driver))}
        cpu = {"kvolumed": cpu_seconds(agent.pid), "driver": cpu_seconds(driver.pid)}

        start = time.monotonic()
        for i in range(args.pods):
            api.remove("pods", "default", f"burst-{i}")
        pods_dir = os.path.join(root, "pods")
        wait(lambda: mounts_under(root) == 0 and not os.listdir(pods_dir), 300, "teardown")
        down = time.monotonic() - start
        result["burst_teardown_seconds"] = round(down, 3)
        result["burst_teardown_volumes_per_second"] = round(total / down, 1)
        result["burst_teardown_cpu_seconds"] = {k: round(cpu_seconds(p.pid) - cpu[k], 2)
                                                for k, p in (("kvolumed", agent), ("driver", driver))}

        # --- one pod at a time ---------------------------------------------
        calls_path = os.path.join(driver_state, "calls.jsonl")
        latencies = []
        for i in range(args.sequential):
            before = len(read_calls(calls_path))
            t0 = time.time()
            api.create(pod(f"seq-{i}", ["v"]))

            def replied():
                calls = read_calls(calls_path)[before:]
                return [c for c in calls if c["method"] == "NodePublishVolume" and c["code"] == "OK"]
            wait(lambda: replied(), 30, f"publish of seq-{i}")
            c = replied()[0]
            latencies.append((c["time"] + c["duration"] - t0) * 1000.0)
            api.remove("pods", "default", f"seq-{i}")
            wait(lambda: mounts_under(root) == 0, 30, f"teardown of seq-{i}")
        result["single_pod_publish_ms"] = {
            "n": len(latencies), "median": round(statistics.median(latencies), 2),
            "p99": round(percentile(latencies, 99), 2), "min": round(min(latencies), 2),
            "max": round(max(latencies), 2)}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        api.stop()
        subprocess.run(["rm", "-rf", work, sockdir])
    print(json.dumps(result))
    print(f"\nburst: {total} inline volumes ({args.pods} pods x {args.volumes}) published and in the mount table "
          f"in {result['burst_setup_seconds']} s ({result['burst_setup_volumes_per_second']} volumes/s); "
          f"torn down in {result['burst_teardown_seconds']} s ({result['burst_teardown_volumes_per_second']} "
          f"volumes/s)", file=sys.stderr)
    s = result["single_pod_publish_ms"]
    print(f"single pods: creation -> NodePublishVolume reply over {s['n']} pods: median {s['median']} ms, "
          f"p99 {s['p99']} ms", file=sys.stderr)
    print(f"CPU seconds during the burst set-up: {result['burst_setup_cpu_seconds']}, teardown: "
          f"{result['burst_teardown_cpu_seconds']} (the mock driver's children, mount(8) and umount(8), "
          "not counted)", file=sys.stderr)
    print(f"root-dir file system: {fs}; {os.cpu_count()} CPUs", file=sys.stderr)


if __name__ == "__main__":
    main()
