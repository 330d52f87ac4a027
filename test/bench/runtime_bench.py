#!/usr/bin/python3
"""The runtime gate's latency (issues 21, 29): kvolumed's own time from "the
container runtime says the pod's sandbox stopped" (StopPodSandbox, after
which no container of the pod can run) to NodeUnpublishVolume arriving at
the CSI driver, for a pod force-deleted from the API while its container
ran.  Run by test/bench/runtime.sh as root in a
private mount namespace, root-dir on a disk-backed file system.

One run measures both ways the gate learns of the stop, each on a kvolumed
of its own against the mock CRI runtime of test/doubles/mockcri (in this
process) and the mock CSI driver in tmpfs mode:
  events    the runtime serves GetContainerEvents (containerd >= 1.7): the
            stop event makes the gate ask again at once;
  polling   it answers UNIMPLEMENTED (Debian 12's containerd 1.6): the gate
            asks again with its backoff (100 ms doubling to 1 s).
For each: --pods pods with an inline volume, all published and running in
the runtime, all force-deleted from the API (so all wait for teardown, as
after a node drain); then every container exits, the sandboxes stay READY
(CrashLoopBackOff, or a runner between StopContainer and StopPodSandbox),
and no volume may go; then one pod at a time has its sandbox stopped in the
runtime (StopPodSandbox, as kubelet's killPod ends), a random 0-1 s after
the previous one's unpublish (so that a stop falls anywhere in the polling
period), and the time from the mock runtime's timestamp of the stop (taken
before the change is visible to a List or an event) to the driver's
timestamp of the NodeUnpublishVolume request is recorded.  Both are wall-clock stamps on this machine.  Prints median, p90,
p99 and max per mode, and writes them as JSON (--json)."""
import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import (CallLogTail, kvolumed_path, machine, mounts_under, percentile, pod,  # noqa: E402
                      start_node, wait)
from doubles.fakeapi import FakeApiServer  # noqa: E402
from doubles.mockcri import MockRuntime  # noqa: E402


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run_mode(mode, api, config, root, work, sockdir, tail, n_pods, rng, log_level):
    rt = MockRuntime(os.path.join(sockdir, f"cri-{mode}.sock"),
                     events="stream" if mode == "events" else "unimplemented")
    rt.start()
    conf = os.path.join(work, f"kvolumed-{mode}.conf")
    with open(config) as f, open(conf, "w") as g:
        g.write(f.read().replace("level = warning", f"level = {log_level}") + f"[runtime]\nendpoint = {rt.endpoint}\n")
    agent = subprocess.Popen([kvolumed_path(), "--config", conf],
                             env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"),
                             stderr=open(os.path.join(work, f"kvolumed-{mode}.log"), "w"))
    try:
        if mode == "events":
            wait(lambda: rt.open_streams() == 1, 30, "the event stream", alive=agent)
        names = [f"{mode}-{i}" for i in range(n_pods)]
        before = mounts_under(root)
        uids = []
        for name in names:
            uids.append(api.create(pod(name, ["v"]))["metadata"]["uid"])
        wait(lambda: mounts_under(root) >= before + n_pods, 600, f"{n_pods} volumes published", alive=agent)
        for name, uid in zip(names, uids):
            rt.add_pod(uid, name=name)
        # Force-deleted, all at once; each waits for its container.
        t_removed = time.monotonic()
        for name in names:
            api.remove("pods", "default", name)
        wait(lambda: any(m == "ListPodSandbox" for _, m in rt.requests(t_removed)), 60,
             "the gate's first round", alive=agent)
        time.sleep(1.5)  # every pod's teardown reaches the gate; the polling backoff reaches its 1 s cap
        assert mounts_under(root) >= before + n_pods, "a volume went while its container ran"
        # The containers exit; the READY sandboxes hold the volumes.
        t_exited = time.monotonic()
        for uid in uids:
            rt.exit_containers(uid)
        wait(lambda: any(m == "ListPodSandbox" for t, m in rt.requests(t_exited)), 60,
             "a round after the containers exited", alive=agent)
        time.sleep(1.5)  # rounds see the exits (the event, or the polling's 1 s cap) and hold on
        assert mounts_under(root) >= before + n_pods, "a volume went while its pod's sandbox was READY"

        latencies = []
        for i, (name, uid) in enumerate(zip(names, uids)):
            time.sleep(rng.uniform(0.0, 1.0))
            mark = tail.mark()
            rt.stop_pod(uid)
            stopped = rt.changes("stop")[-1][3]

            def unpublished():
                return [c for c in tail.since(mark, "NodeUnpublishVolume", code=None)
                        if f"/pods/{uid}/" in c["request"].get("target_path", "")]
            wait(lambda: unpublished(), 30, f"NodeUnpublishVolume of {name}", alive=agent)
            latencies.append(unpublished()[0]["time"] - stopped)
            if (i + 1) % 25 == 0:
                log(f"{mode}: {i + 1}/{n_pods}, median so far {statistics.median(latencies) * 1000:.1f} ms")
        unary = [m for _, m in rt.requests() if m != "GetContainerEvents"]
        # A round's first call, as the runtime sees it: from its ListContainers
        # to its ListPodSandbox.
        lists = [r for r in rt.requests() if r[1] in ("ListContainers", "ListPodSandbox")]
        gaps = [b[0] - a[0] for a, b in zip(lists, lists[1:])
                if a[1] == "ListContainers" and b[1] == "ListPodSandbox"]
        return {"pods": n_pods,
                "median_ms": round(statistics.median(latencies) * 1000, 2),
                "p90_ms": round(percentile(latencies, 90) * 1000, 2),
                "p99_ms": round(percentile(latencies, 99) * 1000, 2),
                "max_ms": round(max(latencies) * 1000, 2),
                "min_ms": round(min(latencies) * 1000, 2),
                "cri_unary_calls": len(unary),
                "list_containers_to_list_sandboxes_median_ms": round(statistics.median(gaps) * 1000, 2) if gaps else None,
                "subscriptions": sum(1 for _, m in rt.requests() if m == "GetContainerEvents")}
    finally:
        agent.terminate()
        agent.wait()
        rt.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--modes", default="events,polling")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--json", default="/var/tmp/kvolumed-runtime-bench.json")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--log-level", default="warning", help="kvolumed's; its logs stay in the work directory")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (kvolumed's logs)")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="kvruntime.", dir=args.workdir)
    sockdir = tempfile.mkdtemp(prefix="kvrt.", dir="/tmp")  # socket paths fit in 107 bytes
    root = os.path.join(work, "root")
    os.makedirs(root)
    api = FakeApiServer(os.path.join(work, "api"), control_port=None, bookmark_interval=60).start()
    driver = None
    result = {"machine": machine(root), "kernel": platform.release(), "modes": {}}
    try:
        driver, driver_state, config = start_node(api, work, sockdir, root)
        tail = CallLogTail(os.path.join(driver_state, "calls.jsonl"), alive=driver)
        rng = random.Random(args.seed)
        for mode in args.modes.split(","):
            log(f"{mode}: {args.pods} pods")
            result["modes"][mode] = run_mode(mode, api, config, root, work, sockdir, tail, args.pods, rng,
                                             args.log_level)
            log(f"{mode}: {result['modes'][mode]}")
    finally:
        if driver:
            driver.terminate()
            driver.wait()
        api.stop()
        subprocess.run(["umount", "-R", "-l", root], stderr=subprocess.DEVNULL)
        if args.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(sockdir, ignore_errors=True)

    print("runtime gate: the runtime's sandbox stop → NodeUnpublishVolume at the driver")
    print(f"{'mode':<10} {'pods':>5} {'median':>10} {'p90':>10} {'p99':>10} {'max':>10} {'CRI calls':>10}")
    for mode, r in result["modes"].items():
        print(f"{mode:<10} {r['pods']:>5} {r['median_ms']:>8.1f}ms {r['p90_ms']:>8.1f}ms {r['p99_ms']:>8.1f}ms "
              f"{r['max_ms']:>8.1f}ms {r['cri_unary_calls']:>10}")
    m = result["machine"]
    print(f"machine: {m['cpus']} x {m['cpu']}, kernel {m['kernel']}, Debian {m['debian']}, "
          f"root-dir on {m['root_dir_fs']}, load {' '.join(m['loadavg'])}")
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
