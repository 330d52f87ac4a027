#!/usr/bin/python3
"""Benchmark of the projected token renewals (issue 32), run by
test/bench/tokens.sh as root inside a private mount namespace: the real
kvolumed against the fake API server (in this process), --pods pods each
with the kube-api-access volume the ServiceAccount admission plugin adds
(a 3,607 s token), on a clock scaled --scale times
(KVOLUMED_TEST_TOKEN_CLOCK_SCALE: a token's renewal comes that many times
sooner), for one hour of node time after the first tokens were issued.

It reports the TokenRequests of the renewals (the first issue of every
token, a burst by construction, is left out) per second of node time (a
wall-clock second times --scale): the maximum over the hour's seconds and
the median over the seconds from the first renewal to the last, and the same
for the renewal times kvolumed drew (its trace), and, for comparison, for kubelet's rule on the same issue times (renewal at 80 %
of the lifetime less up to 10 s of jitter: token_manager.go)."""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import NODE, close_bench_node, kvolumed_path, machine, open_bench_node, stop_process, wait  # noqa: E402

LIFETIME = 3607


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def kube_api_access_pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "serviceAccountName": "default",
                     "volumes": [{"name": "kube-api-access-bench", "projected": {"defaultMode": 0o644, "sources": [
                         {"serviceAccountToken": {"expirationSeconds": LIFETIME, "path": "token"}},
                         {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                         {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                             "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
                     "containers": [{"name": "c", "image": "x", "volumeMounts": [
                         {"name": "kube-api-access-bench", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}]},
            "status": {"phase": "Running"}}


def per_second(times, start, hour):
    """Counts per second of node time over [start, start + hour)."""
    bins = [0] * int(hour)
    for t in times:
        if start <= t < start + hour:
            bins[int(t - start)] += 1
    return bins


def summary(name, bins):
    """The maximum over the hour; the median over the seconds from the
    first renewal to the last (the hour's other seconds hold none)."""
    used = [i for i, n in enumerate(bins) if n]
    window = bins[used[0]:used[-1] + 1] if used else [0]
    return f"{name:<34} max {max(bins):>3}/s   median {statistics.median(window):>4}/s " \
           f"mean {statistics.mean(window):.2f}/s over {len(window):>4} s   " \
           f"busiest 10 s: {max(sum(bins[i:i + 10]) for i in range(len(bins) - 9)):>4}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--workdir", default="/var/tmp")
    args = ap.parse_args()

    class Node:
        pass
    node = Node()
    open_bench_node(node, args.workdir, "kvtokens.", "kvt.")
    agent = None
    try:
        api = node.api
        api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": "default"},
                    "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}})
        trace = os.path.join(node.work, "trace")
        agent = subprocess.Popen([kvolumed_path(), "--config", node.config],
                                 env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr",
                                          KVOLUMED_TEST_TOKEN_CLOCK_SCALE=str(args.scale),
                                          KVOLUMED_TEST_TRACE_FILE=trace),
                                 stderr=subprocess.DEVNULL)
        log(f"{args.pods} pods with kube-api-access, clock scaled {args.scale} times")
        for i in range(args.pods):
            api.create(kube_api_access_pod(f"p{i:05d}"))

        def first_tokens():
            return len({r["spec"]["boundObjectRef"]["uid"] for r in api.token_requests()}) >= args.pods
        wait(first_tokens, 900, "every pod's first token")
        first = sorted(r["time"] for r in api.token_requests())
        start = first[0]
        hour_wall = 3600 / args.scale
        log(f"first tokens issued over {first[-1] - start:.1f} s; waiting one node-time hour ({hour_wall:.0f} s)")
        end = start + hour_wall
        while time.time() < end:
            if agent.poll() is not None:
                raise SystemExit("kvolumed exited")
            time.sleep(1)
        reqs = api.token_requests()
        seen, renewals = set(), []
        for r in sorted(reqs, key=lambda r: r["time"]):
            uid = r["spec"]["boundObjectRef"]["uid"]
            if uid in seen:
                renewals.append(r["time"])
            seen.add(uid)
        # node time: wall seconds since the start times the scale
        node_times = [(t - start) * args.scale for t in renewals]
        drawn, issued = [], {}
        with open(trace) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[1] == "token-issued":
                    issued.setdefault(parts[2], int(parts[0]) / 1e6)
                elif len(parts) == 3 and parts[1] == "token-refresh-due":
                    drawn.append(int(parts[0]) / 1e6)
        drawn_node = [(t - start) * args.scale for t in drawn]
        rng = random.Random(1)
        kubelet = [(t - start) * args.scale + 0.8 * LIFETIME - rng.random() * 10 for t in issued.values()]
        print(f"machine: {machine(node.root)}")
        print(f"{args.pods} kube-api-access tokens ({LIFETIME} s), one hour of node time at clock scale {args.scale}")
        print(f"renewal TokenRequests answered in the hour: {len(node_times)}")
        print(summary("kvolumed, requests answered", per_second(node_times, 0, 3600)))
        print(summary("kvolumed, renewal times drawn", per_second(drawn_node, 0, 3600)))
        print(summary("kubelet's rule, same issue times", per_second(kubelet, 0, 3600)))
    finally:
        stop_process(agent)
        close_bench_node(node)


if __name__ == "__main__":
    main()
