#!/usr/bin/python3
"""The safety-net resync's benchmark (issue 31), run by test/bench/resync.sh
as root inside a private mount namespace: beside --level published inline
volumes (mount_bench's fill), --pods single pods created one after the
other across several resyncs ([agent] resync-interval = --resync), and the
spread of their overheads: median, p99, max and max/median.  Before the
rolling resync, the pod that met the resync's full pass waited for it (~70
ms beside 10,000 volumes); the goal is max ≤ 2 × median.  A pod's overhead
is mount_bench's: its creation in the API → the driver's receipt of its
NodePublishVolume.  The machine's load (os.getloadavg) is reported before
and after, as other work may share it.  Prints a Markdown report and writes
it (and JSON) to --report."""
import argparse
import ctypes
import gc
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import fresh_fs_flag, fresh_workdir, kvolumed_path, machine, percentile, write_report  # noqa: E402
from mount_bench import Node  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--level", type=int, default=10000, help="published volumes beside the new pods")
    ap.add_argument("--volumes", type=int, default=10, help="inline volumes per filling pod")
    ap.add_argument("--pods", type=int, default=1000, help="single pods, one after the other")
    ap.add_argument("--resync", default="30s", help="[agent] resync-interval")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after READY before measuring")
    ap.add_argument("--idle", type=float, default=0.0)
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--label", default="", help="what build this is, for the report")
    ap.add_argument("--trace", action="store_true", help="mount_bench's: each pod's steps (test-hooks build)")
    ap.add_argument("--driver", choices=("python", "go"), default="python", help="mount_bench's")
    ap.add_argument("--log-level", default="warning", help="kvolumed's; its log is kept beside the report")
    ap.add_argument("--report", default="/var/tmp/kvolumed-resync-bench.md")
    ap.add_argument("--fresh-fs", nargs="?", const="loop", choices=("loop", "zram"), help="mount_bench's")
    args = ap.parse_args()
    with fresh_workdir(args):
        return run(args)


def run(args):
    node = Node(args)
    node.config_text = node.config_text.replace("[agent]\n", f"[agent]\nresync-interval = {args.resync}\n", 1)
    node.config_text = node.config_text.replace("[log]\nlevel = warning\n", f"[log]\nlevel = {args.log_level}\n")
    res = {"machine": machine(node.root), "args": vars(args), "binary": kvolumed_path(),
           "load_before": os.getloadavg()}
    try:
        node.start("kernel", args.level)
        node.fill(args.level)
        # The fill's tail (its last records made durable, volumesInUse, the
        # driver's state) is not the resync's doing: the first pod measured
        # it before (16 ms of a 3 ms median at 10,000 volumes).
        # What the fill left dirty on root-dir's file system (the doubles'
        # logs and state, written without fsync) is written out first, or the
        # first pods' record sync waits for it in ext4's journal commit.
        t_sync = time.monotonic()
        fd = os.open(node.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
                raise OSError(ctypes.get_errno(), "syncfs")
        finally:
            os.close(fd)
        res["syncfs_after_fill_seconds"] = time.monotonic() - t_sync
        res["quiet_after_fill_seconds"] = node.wait_quiet()
        time.sleep(args.settle)
        # One pod first, not counted: its first intent-log flush and the
        # driver's first call after the fill are not the resync's doing.
        node.single_pods(f"warmup-{args.level}", 1)
        traces_before = len(node.traces)
        # The fake API server runs in this process, beside the trace's reader:
        # its collections during the pods are counted, so that a stall of the
        # double can be told from kvolumed's.  (Turned off, the collector
        # changed nothing: the slowest pods met the disk, the scheduler, the
        # mock driver's answer, not a collection.)
        gc.collect()
        gc.freeze()
        collections = []  # (generation, start, ms) of this process's collections during the pods
        started = {}

        def on_gc(phase, info):
            if phase == "start":
                started["t"] = time.monotonic()
            elif "t" in started:
                t = started.pop("t")
                collections.append((info["generation"], t, (time.monotonic() - t) * 1000.0))
        gc.callbacks.append(on_gc)
        try:
            t0 = time.monotonic()
            o = node.single_pods(f"resync-{args.level}", args.pods)
            res["pods_seconds"] = time.monotonic() - t0
        finally:
            gc.callbacks.remove(on_gc)
        del node.traces[:traces_before]
    finally:
        node.stop_agent()
        shutil.copyfile(os.path.join(node.work, "kvolumed.log"), args.report.removesuffix(".md") + ".kvolumed.log")
        node.close()
    res["load_after"] = os.getloadavg()
    res["python_collections"] = collections
    med, p99, mx = statistics.median(o), percentile(o, 99), max(o)
    res.update({"median_ms": med, "p99_ms": p99, "max_ms": mx, "max_over_median": mx / med, "all_ms": o})
    slowest = sorted(range(len(o)), key=lambda i: o[i])[-5:]
    lines = [f"# kvolumed resync benchmark (issue 31) {args.label}", "",
             f"Machine: {json.dumps(res['machine'])}", "",
             f"Command: test/bench/resync.sh --level {args.level} --pods {args.pods} --resync {args.resync}"
             f"{' --trace' if args.trace else ''} --driver {args.driver}{fresh_fs_flag(args)}", "",
             f"Load (1, 5, 15 min) before {res['load_before']}, after {res['load_after']}.", "",
             f"{args.pods} pods one after the other over {res['pods_seconds']:.0f} s "
             f"(resync-interval {args.resync}) beside {args.level} volumes: overhead (ms), creation → "
             "NodePublishVolume.", "",
             "| median | p99 | max | max/median |", "|---:|---:|---:|---:|",
             f"| {med:.2f} | {p99:.2f} | {mx:.2f} | {mx / med:.2f} |", "",
             "Slowest five (pod index: ms): " + ", ".join(f"{i}: {o[i]:.1f}" for i in slowest), "",
             f"The pods started after a syncfs of root-dir's file system ({res['syncfs_after_fill_seconds']:.1f} s: "
             "what the fill left dirty), once kvolumed was quiet "
             f"({res['quiet_after_fill_seconds']:.1f} s: no driver call, under 2 % CPU for 1 s) and --settle "
             f"{args.settle:g} s more, and one pod not counted.",
             "",
             "This Python process (the fake API server, the trace's reader) made "
             f"{len(collections)} collections during the pods"
             + (f", {sum(1 for g, _, _ in collections if g == 2)} of them full, the longest "
                f"{max(ms for _, _, ms in collections):.1f} ms." if collections else ".")]
    if node.traces:
        # The slowest pods against the median pod, step by step (mount_bench's STEPS).
        from mount_bench import STEPS
        names = ["created"] + [e for _, e in STEPS]

        def split(t):
            return {names[i]: (t[names[i]] - t[names[i - 1]]) * 1000.0 for i in range(1, len(names))
                    if t.get(names[i]) is not None and t.get(names[i - 1]) is not None}
        by_name = {}
        for t in node.traces:
            for k, v in split(t).items():
                by_name.setdefault(k, []).append(v)
        lines += ["", "Steps of the slowest pods against the median of every pod (ms):", "",
                  "| step | median | " + " | ".join(f"pod {i}" for i in reversed(slowest)) + " |",
                  "|---|---:|" + "---:|" * len(slowest)]
        by_index = {t["index"]: t for t in node.traces}
        for label, end in STEPS:
            row = [statistics.median(by_name[end]) if by_name.get(end) else None]
            for i in reversed(slowest):
                st = split(by_index[i]) if i in by_index else {}
                row.append(st.get(end))
            lines.append(f"| {label} | " + " | ".join("–" if v is None else f"{v:.2f}" for v in row) + " |")
        res["traces"] = node.traces
        lines += shares_of_the_slowest(node.traces)
        lines += pods_that_met_a_slice(node, o)
        lines += flushes_that_met_the_later_thread(node)
        res["resync_slices"] = node.slices
    write_report(args.report, lines, res)


def pods_span(traces):
    """(the first pod's creation, the last pod's NodePublishVolume)."""
    return (min((t["created"] for t in traces), default=0), max((t["driver"] for t in traces), default=0))


# A slice's pass runs after the slice, on the loop: a pod created this long
# after a slice may still wait for it.
SLICE_REACH = 0.010


def pods_that_met_a_slice(node, overheads):
    """The pods whose path (creation → the driver, or SLICE_REACH before
    it) met a resync slice (kvolumed's trace step "resync-slice"), against
    every pod: the rolling resync's cost to a new pod, told from the
    machine's noise."""
    node.trace.poll()
    first, last = pods_span(node.traces)
    first -= SLICE_REACH
    slices = [ts for ts, step, _ in node.trace.lines if step == "resync-slice" and first <= ts <= last]
    node.slices = slices
    met = [overheads[t["index"]] for t in node.traces
           if any(t["created"] - SLICE_REACH <= s <= t["driver"] for s in slices)]
    med = statistics.median(overheads)
    out = ["", f"Resync slices during the pods: {len(slices)}. Pods whose path met one (a slice from "
           f"{SLICE_REACH * 1000:.0f} ms before the pod's creation to its NodePublishVolume): {len(met)}."]
    if met:
        out += ["", "| pods | median | max | max / median of every pod |", "|---|---:|---:|---:|",
                f"| met a slice | {statistics.median(met):.2f} | {max(met):.2f} | {max(met) / med:.2f} |",
                f"| every pod | {med:.2f} | {max(overheads):.2f} | {max(overheads) / med:.2f} |"]
    return out


def flushes_that_met_the_later_thread(node):
    """The pods whose record's flush (prepared → synced) overlapped the
    later thread's work on earlier takes (kvolumed's trace steps
    "later-begin", "later-end": their files and directories made durable
    after their calls, rootsync.c), against the others: whether a slow
    flush waited behind kvolumed's own syncs or behind the machine."""
    node.trace.poll()
    spans, begin = [], None
    for ts, step, _ in node.trace.lines:
        if step == "later-begin":
            begin = ts
        elif step == "later-end" and begin is not None:
            spans.append((begin, ts))
            begin = None
    first, last = pods_span(node.traces)
    spans = [(b, e) for b, e in spans if e >= first and b <= last]  # the fill's are not the pods'
    met, alone = [], []
    for t in node.traces:
        if t.get("prepared") is None or t.get("synced") is None:
            continue
        flush = (t["synced"] - t["prepared"]) * 1000.0
        (met if any(b < t["synced"] and e > t["prepared"] for b, e in spans) else alone).append(flush)
    out = ["", f"The later thread's takes during the pods: {len(spans)}. Pods whose record's flush overlapped "
           f"one: {len(met)} of {len(met) + len(alone)}."]
    rows = [(name, v) for name, v in (("overlapped a take", met), ("alone", alone)) if v]
    if rows:
        out += ["", "| the record's flush (ms) | pods | median | p99 | max |", "|---|---:|---:|---:|---:|"]
        out += [f"| {name} | {len(v)} | {statistics.median(v):.2f} | {percentile(v, 99):.2f} | {max(v):.2f} |"
                for name, v in rows]
    return out


def shares_of_the_slowest(traces):
    """The overhead split into whose time it is, each over every pod: the
    doubles' (the fake API server's write of the ADDED event, the mock
    driver from its socket to its handler: both Python), the disk's (the
    record's flush), and kvolumed's own work (from the event reaching it to
    the request sent, without that flush).  The slowest pod of a run is most
    often a double's or the disk's stall; kvolumed's column says whether a
    pass of kvolumed grew with the node."""
    def part(t, a, b):
        return (t[b] - t[a]) * 1000.0 if t.get(a) is not None and t.get(b) is not None else None

    series = {"the fake API server writes the ADDED event": [], "the mock driver's answer path": [],
              "the record's flush (disk)": [], "kvolumed's own work": []}
    for t in traces:
        api, drv = part(t, "created", "api-wrote"), part(t, "call-pretransfer", "driver")
        flush, own = part(t, "prepared", "synced"), part(t, "received", "call-pretransfer")
        if None in (api, drv, flush, own):
            continue
        series["the fake API server writes the ADDED event"].append(api)
        series["the mock driver's answer path"].append(drv)
        series["the record's flush (disk)"].append(flush)
        series["kvolumed's own work"].append(own - flush)
    lines = ["", "Whose time it is, over every pod (ms; kvolumed's own work: from the event reaching it to the "
             "request sent, without the record's flush):", "",
             "| part | median | p99 | max | max/median |", "|---|---:|---:|---:|---:|"]
    for name, v in series.items():
        if not v:
            continue
        med = statistics.median(v)
        lines.append(f"| {name} | {med:.2f} | {percentile(v, 99):.2f} | {max(v):.2f} | "
                     f"{max(v) / med if med > 0 else float('nan'):.2f} |")
    return lines


if __name__ == "__main__":
    main()
