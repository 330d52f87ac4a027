#!/usr/bin/python3
"""The mount path's benchmark (issue 23), run by test/bench/mount.sh as root
inside a private mount namespace: a new pod's overhead beside 0, 1,000 and
10,000 published inline volumes, on the kernel path (fanotify mount events,
statmount, listmount) and on the /proc/self/mountinfo fallback, in ONE run
on one node, so that the gain is a ratio from the same conditions.

The real kvolumed against the fake API server (in this process) and the mock
CSI driver in tmpfs mode, root-dir on a disk-backed file system.  For each
level the node is filled (pods of --volumes inline volumes each) and then,
--repeat times, each source in turn (their order alternating, so that a
drift of the machine's load hits both alike) runs --pods single pods one
after the other: kvolumed is restarted with [agent] mount-source set when
the source changes (the volumes stay: a restart makes no call, which is
checked).  A pod's overhead is the time from its creation in the API to the
driver's receipt of its NodePublishVolume (the driver's own time left out),
as suite.py measures it.  Figures: the median of each repeat's median, the
min–max of those, the p99 over every pod; idle CPU and wake-ups per source
and level.  Prints a Markdown report and writes it (and JSON) to --report.

--dirty (issue 31): instead, a new pod's overhead on an empty node beside a
busy neighbour (dirty_writer.py): none, a writer to a tmpfs (the CPU
control) and the same writer to root-dir's file system, never syncing;
each under kvolumed's durability rule (an fdatasync of each record, an
fsync of each changed directory) and under the rule before it (one syncfs
of root-dir's file system, KVOLUMED_TEST_SYNCFS=1), in one run, the order
alternating between repeats."""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import (context_switches, cpu_seconds, kvolumed_path, machine, mounts_under,  # noqa: E402
                      close_bench_node, open_bench_node, percentile, pod, status_kib, wait)

HERE = os.path.dirname(os.path.abspath(__file__))

SOURCES = ("kernel", "mountinfo")
CONFIG_VALUE = {"kernel": "auto", "mountinfo": "mountinfo"}


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class Node:
    def __init__(self, args):
        self.args = args
        open_bench_node(self, args.workdir, "kvbench-mount.", "kvm.")
        with open(self.config) as f:
            self.config_text = f.read()
        self.agent = None
        self.source = None
        self.rule = None
        self.filled = 0
        self.restarts = []  # (level, source, seconds to READY, calls made meanwhile)

    def start(self, source, level, rule="fsync"):
        """rule: "fsync" (kvolumed's) or "syncfs" (the rule before it, a test hook)."""
        self.stop_agent()
        env = dict(os.environ, KVOLUMED_LOG_TARGET="stderr")
        if rule == "syncfs":
            env["KVOLUMED_TEST_SYNCFS"] = "1"
        with open(self.config, "w") as f:
            f.write(self.config_text.replace("[agent]\n", f"[agent]\nmount-source = {CONFIG_VALUE[source]}\n", 1))
        notify_path = os.path.join(self.sockdir, "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        mark = self.tail.mark()
        t0 = time.monotonic()
        self.agent = subprocess.Popen([kvolumed_path(), "--config", self.config],
                                      env=dict(env, NOTIFY_SOCKET=notify_path),
                                      stderr=open(os.path.join(self.work, "kvolumed.log"), "a"))
        notify.settimeout(300)
        while "READY=1" not in notify.recv(65536).decode().split("\n"):
            pass
        ready = time.monotonic() - t0
        # Keep reading, as systemd does: a full queue would block sd_notify.
        threading.Thread(target=self.drain, args=(notify,), daemon=True).start()
        self.tail.alive = self.agent
        self.source = source
        self.rule = rule
        time.sleep(self.args.settle)
        calls = [c["method"] for c in self.tail.since(mark, code=None)
                 if c["method"] in ("NodePublishVolume", "NodeUnpublishVolume", "NodeStageVolume",
                                    "NodeUnstageVolume")]
        self.restarts.append({"level": level, "source": source, "ready_seconds": ready, "calls": len(calls)})
        # What kvolumed says it uses: the figures must be of that source.
        with urllib.request.urlopen(f"http://{self.listen}/volumes", timeout=60) as r:
            shown = json.load(r)["mount_source"]
        log(f"kvolumed ({source}) READY after {ready:.2f} s beside {level} volumes, {len(calls)} calls, "
            f"mount_source {shown}")
        if shown != source:
            raise SystemExit(f"bench: kvolumed uses {shown}, not {source} (a kernel older than 6.15?)")
        if len(calls):
            raise SystemExit(f"bench: the restart beside {level} volumes made {len(calls)} stage/publish calls")

    @staticmethod
    def drain(sock):
        try:
            while True:
                sock.recv(65536)
        except OSError:
            pass

    def stop_agent(self):
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            self.agent.wait(timeout=120)
        self.agent = None

    def fill(self, level):
        """Pods of --volumes inline volumes until `level` are published."""
        v = self.args.volumes
        names = []
        for i in range(self.filled // v, level // v):
            names.append(f"fill-{i}")
        t0 = time.monotonic()
        for start in range(0, len(names), 100):
            for n in names[start:start + 100]:
                self.api.create(pod(n, [f"v{j}" for j in range(v)]))
            # In batches: the fake API server and the driver are Python.
            wait(lambda: mounts_under(self.root) >= self.filled + (start + len(names[start:start + 100])) * v,
                 1200, f"{level} mounts", interval=0.2, alive=self.agent)
        self.filled = level
        log(f"filled to {level} volumes in {time.monotonic() - t0:.1f} s")

    def single_pods(self, tag, n):
        """Overheads (ms) of n pods of one inline volume, one at a time."""
        out = []
        for i in range(n):
            name = f"one-{tag}-{i}"
            mark = self.tail.mark()
            t0 = time.time()
            obj = self.api.create(pod(name, ["v"]))
            c = self.tail.wait(mark, "NodePublishVolume", 1, 60, f"publish of {name}")[0]
            out.append((c["time"] - t0) * 1000.0)
            self.api.remove("pods", "default", name)
            self.tail.wait(mark, "NodeUnpublishVolume", 1, 60, f"unpublish of {name}")
            pod_dir = os.path.join(self.root, "pods", obj["metadata"]["uid"])
            wait(lambda: not os.path.exists(pod_dir), 60, f"teardown of {name}", interval=0.002)
        return out

    def idle(self):
        pid = self.agent.pid
        cpu0, (vol0, _), t0 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        time.sleep(self.args.idle)
        cpu1, (vol1, _), t1 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        return {"cpu_percent": 100.0 * (cpu1 - cpu0) / (t1 - t0), "wakeups_per_second": (vol1 - vol0) / (t1 - t0),
                "rss_mib": status_kib(pid, "VmRSS") / 1024.0}

    def close(self):
        self.stop_agent()
        close_bench_node(self)


def fmt(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


WRITERS = ("none", "tmpfs", "root-dir")
RULES = ("fsync", "syncfs")


def start_writer(node, writer, args):
    if writer == "none":
        return None
    # Beside root-dir, on its file system (root-dir itself under --isolated).
    where = os.path.join(node.root if args.isolated else node.work, "bench-writer")
    if writer == "tmpfs":
        where = os.path.join(node.work, "writer-tmpfs")
        os.makedirs(where, exist_ok=True)
        if not os.path.ismount(where):
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.dirty_window * 2}m", "tmpfs", where],
                           check=True)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "dirty_writer.py"), where,
                             "--rate", str(args.dirty_rate), "--window", str(args.dirty_window)])
    # Until the window is full: from then on about --dirty-window MiB are dirty.
    time.sleep(args.dirty_window / args.dirty_rate)
    log(f"writer to {writer} running, {dirty_mib():.0f} MiB dirty on the machine")
    return proc


def stop_writer(proc):
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def dirty_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def dirty_main(args):
    with open(kvolumed_path(), "rb") as f:
        if b"KVOLUMED_TEST_" not in f.read():
            raise SystemExit("bench: --dirty needs a build with -Dtest-hooks=true (the syncfs rule is a test hook)")
    node = Node(args)
    loop = None
    if args.isolated:
        # An ext4 of root-dir's own, its image on --workdir's disk: other
        # processes' syncs of that disk's file system (a shared machine's
        # builds and tests) do not write this one's dirty pages out.
        image = os.path.join(node.work, "root.img")
        with open(image, "wb") as f:
            f.truncate(4 << 30)
        subprocess.run(["mkfs.ext4", "-q", "-F", image], check=True)
        loop = subprocess.run(["losetup", "--find", "--show", image], check=True, capture_output=True,
                              text=True).stdout.strip()
        subprocess.run(["mount", loop, node.root], check=True)
    started = time.monotonic()
    res = {"machine": machine(node.root), "args": vars(args), "loadavg_start": os.getloadavg(), "runs": {}}
    per = {(w, r): {"repeat_medians": [], "all": [], "dirty_mib": []} for w in WRITERS for r in RULES}
    try:
        writers, rules = list(WRITERS), list(RULES)
        for rep in range(args.repeat):
            for w in writers:
                proc = start_writer(node, w, args)
                try:
                    for rule in rules:
                        if node.rule != rule or node.agent is None:
                            node.start("kernel", 0, rule)
                        before = dirty_mib()
                        o = node.single_pods(f"{w}-{rule}-{rep}", args.pods)
                        d = per[(w, rule)]
                        d["repeat_medians"].append(statistics.median(o))
                        d["all"] += o
                        d["dirty_mib"].append((before + dirty_mib()) / 2)
                        log(f"writer {w}, {rule}, repeat {rep + 1}: median {statistics.median(o):.2f} ms, "
                            f"p90 {percentile(o, 90):.2f} ms, {d['dirty_mib'][-1]:.0f} MiB dirty")
                    rules.reverse()
                finally:
                    stop_writer(proc)
            writers.reverse()
    finally:
        node.close()
        if loop:
            subprocess.run(["losetup", "-d", loop])
    res["seconds"] = time.monotonic() - started
    res["loadavg_end"] = os.getloadavg()

    lines = ["# kvolumed durability beside a busy neighbour (issue 31)", "",
             f"Machine: {json.dumps(res['machine'])}", "",
             f"Load average at start {res['loadavg_start'][0]:.1f}, at end {res['loadavg_end'][0]:.1f}.", "",
             f"Command: test/bench/mount.sh --dirty --repeat {args.repeat} --pods {args.pods} "
             f"--dirty-rate {args.dirty_rate:g} --dirty-window {args.dirty_window}"
             + (" --isolated" if args.isolated else ""), "",
             "A new pod's overhead (its creation in the API → the driver's receipt of NodePublishVolume, ms) on an "
             "empty node, beside no writer, a writer to a tmpfs (the CPU control) and the same writer to root-dir's "
             f"file system ({args.dirty_rate:g} MiB/s, about {args.dirty_window} MiB kept dirty, never synced). "
             f"Median of {args.repeat} repeats' medians, p90 and max over all {args.repeat * args.pods} pods; "
             "ratios to the tmpfs writer under the same rule.", "",
             "| rule | writer | median | p90 | max | median × control | p90 × control p90 | MiB dirty |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for rule in RULES:
        ctl = per[("tmpfs", rule)]
        ctl_med, ctl_p90 = statistics.median(ctl["repeat_medians"]), percentile(ctl["all"], 90)
        for w in WRITERS:
            d = per[(w, rule)]
            med, p90 = statistics.median(d["repeat_medians"]), percentile(d["all"], 90)
            d.update({"median_ms": med, "p90_ms": p90, "max_ms": max(d["all"]),
                      "median_ratio": med / ctl_med if ctl_med else None,
                      "p90_ratio": p90 / ctl_p90 if ctl_p90 else None})
            lines.append(f"| {rule} | {w} | {fmt(med)} | {fmt(p90)} | {fmt(d['max_ms'])} | {fmt(d['median_ratio'])} | "
                         f"{fmt(d['p90_ratio'])} | {statistics.median(d['dirty_mib']):.0f} |")
    lines += ["", f"Run time: {res['seconds']:.0f} s."]
    res["results"] = {f"{w}/{r}": v for (w, r), v in per.items()}
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.report, "w") as f:
        f.write(text)
    with open(args.report.removesuffix(".md") + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="0,1000,10000", help="published volumes beside the new pods")
    ap.add_argument("--volumes", type=int, default=10, help="inline volumes per filling pod")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pods", type=int, default=20, help="single pods per repeat and source")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after READY before measuring")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of the idle window per level and source")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--report", default=None)
    ap.add_argument("--dirty", action="store_true", help="beside a busy writer instead (issue 31; see above)")
    ap.add_argument("--dirty-rate", type=float, default=512.0, help="MiB/s the busy writer writes")
    ap.add_argument("--dirty-window", type=int, default=512, help="MiB the busy writer keeps (dirty)")
    ap.add_argument("--isolated", action="store_true",
                    help="--dirty: root-dir on an ext4 image of its own on --workdir (a loop device)")
    args = ap.parse_args()
    if args.report is None:
        args.report = "/var/tmp/kvolumed-" + ("durability" if args.dirty else "mount") + "-bench.md"
    if args.dirty:
        return dirty_main(args)
    levels = [int(x) for x in args.levels.split(",")]

    node = Node(args)
    started = time.monotonic()
    res = {"machine": machine(node.root), "args": vars(args), "levels": {}}
    try:
        order = list(SOURCES)
        for level in levels:
            if node.agent is None:
                node.start(order[0], level)
            node.fill(level)
            per = {s: {"repeat_medians": [], "all": [], "idle": None} for s in SOURCES}
            for r in range(args.repeat):
                for s in order:
                    if node.source != s:
                        node.start(s, level)
                    if per[s]["idle"] is None:
                        per[s]["idle"] = node.idle()
                    o = node.single_pods(f"{level}-{s}-{r}", args.pods)
                    per[s]["repeat_medians"].append(statistics.median(o))
                    per[s]["all"] += o
                    log(f"{level} volumes, {s}, repeat {r + 1}: median {statistics.median(o):.2f} ms")
                order.reverse()  # the one that ran last runs first: no restart, and no order bias
            res["levels"][level] = per
    finally:
        node.close()
    res["restarts"] = node.restarts
    res["seconds"] = time.monotonic() - started

    lines = ["# kvolumed mount path benchmark (issue 23)", "",
             f"Machine: {json.dumps(res['machine'])}", "",
             f"Command: test/bench/mount.sh --levels {args.levels} --repeat {args.repeat} --pods {args.pods}", "",
             "A new pod's overhead: its creation in the API → the driver's receipt of NodePublishVolume (ms); "
             f"median of {args.repeat} repeats' medians (min–max of them), p99 over all "
             f"{args.repeat * args.pods} pods; ratio to the empty node on the same source.", "",
             "| volumes | source | median | min–max | p99 | × empty | idle CPU % | wake-ups/s | RSS MiB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        for s in SOURCES:
            d = res["levels"][level][s]
            med = statistics.median(d["repeat_medians"])
            base = statistics.median(res["levels"][levels[0]][s]["repeat_medians"])
            d.update({"median_ms": med, "min_ms": min(d["repeat_medians"]), "max_ms": max(d["repeat_medians"]),
                      "p99_ms": percentile(d["all"], 99), "ratio_to_empty": med / base if base else None})
            lines.append(f"| {level} | {s} | {fmt(med)} | {fmt(d['min_ms'])}–{fmt(d['max_ms'])} | "
                         f"{fmt(d['p99_ms'])} | {fmt(d['ratio_to_empty'])} | {fmt(d['idle']['cpu_percent'])} | "
                         f"{fmt(d['idle']['wakeups_per_second'], 1)} | {fmt(d['idle']['rss_mib'], 1)} |")
    lines += ["", "Kernel path against the mountinfo fallback (median overhead):", ""]
    for level in levels:
        k, m = res["levels"][level]["kernel"]["median_ms"], res["levels"][level]["mountinfo"]["median_ms"]
        lines.append(f"- {level} volumes: {fmt(k)} ms against {fmt(m)} ms ({fmt(m / k if k else None)}× faster)")
    lines += ["", "Restarts (kvolumed started again with the other source; no stage/publish call allowed):", ""]
    for r in res["restarts"]:
        lines.append(f"- {r['level']} volumes, {r['source']}: READY in {r['ready_seconds']:.2f} s, "
                     f"{r['calls']} calls")
    lines += ["", f"Run time: {res['seconds']:.0f} s."]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.report, "w") as f:
        f.write(text)
    with open(args.report.removesuffix(".md") + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
