#!/usr/bin/python3
"""Benchmark of the runtime gate against a real containerd (Debian 12's 1.6),
run by test/bench/containerd.sh inside a private mount namespace: kvolumed with
[runtime] endpoint = the containerd of test/doubles/containerd, the fake API
server and the mock CSI driver in tmpfs mode, root-dir on disk.

For each of N pods, one at a time: an inline volume published, a sandbox
and a container mounting it, the pod force-deleted, the volume held for
--hold seconds (long enough for the gate's backoff to reach its cap, as on
a node where a container takes a while to stop), then StopContainer; the
READY sandbox holds the volume on for a random fraction of the gate's 1 s
cap (so that the sandbox's stop falls anywhere between two of its rounds),
then StopPodSandbox, as kubelet's killPod ends.
Two figures per pod:

  own:   kvolumed's own time, from containerd's first answer to kvolumed's
         ListPodSandbox that shows the sandbox NOTREADY (the line containerd
         logs as it answers, at trace level) to NodeUnpublishVolume (the
         driver's call log);
  total: from StopPodSandbox's answer (the sandbox is stopped) to
         NodeUnpublishVolume: `own` plus the wait for the gate's next round.

Prints one JSON object and a readable summary."""
import argparse
import datetime
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import CallLogTail, kvolumed_path, percentile, pod, start_node, wait  # noqa: E402
from doubles.containerd import IMAGE, Containerd, PodRunner, build_image  # noqa: E402
from doubles.fakeapi import FakeApiServer  # noqa: E402

GATE_CAP = 1.0  # volume/runtime.c GATE_BACKOFF_MAX_USEC
SLEEPER = "trap 'exit 0' TERM; while :; do sleep 0.05; done"


def log_time(line):
    """The wall time of a containerd log line (time="2026-...Z")."""
    stamp = line.split('time="', 1)[1].split('"', 1)[0]
    whole, frac = stamp.rstrip("Z").split(".")
    t = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + float("0." + frac)


def first_answer_stopped(ctrd, since, sid):
    """The time containerd answered a ListPodSandbox, after byte `since` of
    its log, in which sandbox `sid` is NOTREADY (or absent)."""
    with open(ctrd.log_path, errors="replace") as f:
        f.seek(since)
        for line in f:
            if 'msg="ListPodSandbox' not in line or " returns pod sandboxes" not in line:
                continue
            mine = [c for c in line.split("&PodSandbox{")[1:] if c.startswith("Id:" + sid)]
            if not mine or "State:SANDBOX_NOTREADY" in mine[0]:
                return log_time(line)
    return None


def stats(values):
    return {"n": len(values), "median": round(statistics.median(values), 1), "p99": round(percentile(values, 99), 1),
            "min": round(min(values), 1), "max": round(max(values), 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=20)
    ap.add_argument("--hold", type=float, default=2.0, help="seconds a deleted pod's container runs on")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    work = tempfile.mkdtemp(prefix="kvbench.", dir=args.workdir)
    sockdir = tempfile.mkdtemp(prefix="kvb.", dir="/tmp")
    root = os.path.join(work, "root")
    os.makedirs(root)
    fs = subprocess.run(["stat", "-f", "-c", "%T", root], capture_output=True, text=True).stdout.strip()
    api = FakeApiServer(os.path.join(work, "api"), control_port=None, bookmark_interval=60).start()
    ctrd = Containerd(IMAGE)
    runner = PodRunner(ctrd)
    procs = []
    own, total = [], []
    result = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "root_dir_fs": fs},
              "pods": args.pods, "hold_seconds": args.hold}
    try:
        ctrd.start()
        version = runner.wait_ready()
        result["runtime"] = f"{version.runtime_name} {version.runtime_version}"
        ctrd.import_image(build_image(os.path.join(ctrd.dir, "busybox.tar")))
        driver, driver_state, config = start_node(api, work, sockdir, root)
        procs.append(driver)
        with open(config, "a") as f:
            f.write(f"[runtime]\nendpoint = {ctrd.endpoint}\n")
        agent = subprocess.Popen([kvolumed_path(), "--config", config],
                                 env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"),
                                 stderr=open(os.path.join(work, "kvolumed.log"), "w"))
        procs.append(agent)
        calls = CallLogTail(os.path.join(driver_state, "calls.jsonl"), alive=agent)
        for i in range(args.pods):
            name = f"held-{i}"
            mark = calls.mark()
            obj = api.create(pod(name, ["v"]))
            uid = obj["metadata"]["uid"]
            target = f"{root}/pods/{uid}/volumes/kubernetes.io~csi/v/mount"
            calls.wait(mark, "NodePublishVolume", 1, 60, f"publish of {name}")
            sandbox = runner.run_pod(uid, name)
            cid = runner.run_container(sandbox, "c", SLEEPER, [(target, "/data", False)])
            mark = calls.mark()
            api.remove("pods", "default", name)
            time.sleep(args.hold)  # the container runs on: the gate holds
            if calls.since(mark, "NodeUnpublishVolume", code=None):
                raise SystemExit(f"bench: {name}'s volume unpublished under its running container")
            runner.stop_container(cid)
            time.sleep(rng.uniform(0, GATE_CAP))  # the sandbox is READY: the gate holds
            if calls.since(mark, "NodeUnpublishVolume", code=None):
                raise SystemExit(f"bench: {name}'s volume unpublished while its sandbox was READY")
            since = ctrd.log_size()
            runner.stop_pod(sandbox)
            stopped = time.time()
            (call,) = calls.wait(mark, "NodeUnpublishVolume", 1, 30, f"unpublish of {name}")
            answered = first_answer_stopped(ctrd, since, sandbox.sandbox_id)
            if answered is None:
                raise SystemExit(f"bench: no ListPodSandbox answer showed {name}'s sandbox stopped")
            own.append((call["time"] - answered) * 1000.0)
            total.append((call["time"] - stopped) * 1000.0)
            runner.remove_pod(sandbox)
            wait(lambda: not os.path.exists(os.path.dirname(target)), 30, f"teardown of {name}")
        result["own_ms"] = stats(own)
        result["stop_to_unpublish_ms"] = stats(total)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        ctrd.cleanup(runner)
        runner.close()
        api.stop()
        subprocess.run(["rm", "-rf", work, sockdir])
    print(json.dumps(result))
    o, t = result["own_ms"], result["stop_to_unpublish_ms"]
    print(f"\n{result['runtime']}, {args.pods} pods held {args.hold}-{args.hold + GATE_CAP} s each:\n"
          f"  kvolumed's own time, containerd's answer that the sandbox stopped -> NodeUnpublishVolume: "
          f"median {o['median']} ms, p99 {o['p99']} ms (min {o['min']}, max {o['max']})\n"
          f"  StopPodSandbox answered -> NodeUnpublishVolume (with the wait for the gate's next round): "
          f"median {t['median']} ms, p99 {t['p99']} ms (min {t['min']}, max {t['max']})", file=sys.stderr)


if __name__ == "__main__":
    main()
