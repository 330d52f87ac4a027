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

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "test"))

from doubles.fakeapi import FakeApiServer  # noqa: E402

DRIVER = "mock.csi.kvolumed.io"
NODE = "bench-node"


def mounts_under(root):
    n = 0
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if line.split()[4].startswith(root + "/"):
                n += 1
    return n


def wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.005)


def pod(name, volumes):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE,
                     "volumes": [{"name": v, "csi": {"driver": DRIVER}} for v in volumes],
                     "containers": [{"name": "c", "image": "x",
                                     "volumeMounts": [{"name": v, "mountPath": "/" + v} for v in volumes]}]},
            "status": {"phase": "Running"}}


def cpu_seconds(pid):
    """user + system CPU time of a process, from /proc."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values, p):
    values = sorted(values)
    k = (len(values) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def read_calls(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def start_node(api, work, sockdir, root, listen=""):
    """The node both benchmarks use: its Node and an Ephemeral-only CSIDriver
    in the fake API server, the mock driver in tmpfs mode, and kvolumed's
    configuration (log level warning).  Returns (driver process, its state
    dir, the configuration path)."""
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "status": {}})
    api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                "spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    driver_state = os.path.join(work, "driver")
    driver = subprocess.Popen(
        ["/usr/bin/python3", "-m", "doubles.mockcsi", "--endpoint", f"unix://{sockdir}/csi.sock",
         "--name", DRIVER, "--state-dir", driver_state, "--tmpfs"],
        env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "test")), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    driver.stdout.readline()
    config = os.path.join(work, "kvolumed.conf")
    with open(config, "w") as f:
        f.write(f"[agent]\nnode-name = {NODE}\nroot-dir = {root}\n"
                f"[kubernetes]\nkubeconfig = {api.kubeconfig_path}\n"
                f"[csi]\nregistration-dir =\n"
                f'[driver "{DRIVER}"]\nendpoint = unix://{sockdir}/csi.sock\n'
                f"[metrics]\nlisten = {listen}\n[log]\nlevel = warning\n")
    return driver, driver_state, config


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
        build = os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO, "build"))
        agent = subprocess.Popen([os.path.join(build, "agent", "kvolumed"), "--config", config],
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
