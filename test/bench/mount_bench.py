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
each under kvolumed's durability rule (the records in the intent log, one
fdatasync of it before the call), the rule before it (an fdatasync of each
record, an fsync of each changed directory, KVOLUMED_TEST_NO_INTENT_LOG=1)
and the rule before that (one syncfs of root-dir's file system,
KVOLUMED_TEST_SYNCFS=1), in one run, the order alternating between
repeats.

With --trace (a -Dtest-hooks=true build), every single pod's time is also
split into the steps of its path: the fake API server's write of its ADDED
event, kvolumed's read of it (KVOLUMED_TEST_TRACE_FILE, systemd/trace.h),
the JSON parse, the decode, the desired state, the pass's planning, the
record write, the durability wait, the connection to the driver and the
call; "delivery" is the pod's creation → kvolumed's read of its event, in
the same run, and overhead − delivery what kvolumed itself adds.  The idle
window also reports PSS, anonymous and file-backed memory and what each
mapping (library, heap) costs, from /proc/PID/smaps.  And --trace gives
what one STATUS= update's read of the counts costs the loop (its
"status-counting" → "status-counted" lines, at most one a second while the
single pods come and go; issue 31): with --builds, before and after.
"""
import argparse
import gc
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
                      close_bench_node, fresh_ext4, fresh_fs_flag, fresh_workdir, open_bench_node, percentile, pod,
                      request_kind, status_kib, wait, write_report)

# The steps of a pod's path, in order: (name, the trace line that ends it).
# "created" is the bench's clock before the API create; "driver" the mock
# driver's receipt of NodePublishVolume.
STEPS = (("API server writes the ADDED event", "api-wrote"),
         ("socket, TLS, curl to kvolumed", "received"),
         ("loop: to the informer's defer", "dispatched"),
         ("JSON parse (cJSON)", "parsed"),
         ("object decode", "decoded"),
         ("desired state noted", "noted"),
         ("to the reconcile pass", "pass"),
         ("planning", "planned"),
         ("record write", "prepared"),
         ("durability (the intent log, or the files)", "synced"),
         ("operation start → call", "call-start"),
         ("connect to the driver's socket", "call-connected"),
         ("HTTP/2 set-up, request sent", "call-pretransfer"),
         ("to the driver's handler", "driver"))


class Trace:
    """kvolumed's trace file (systemd/trace.h) and the fake API server's
    write times of ADDED pod events, read per pod."""

    def __init__(self, path):
        self.path = path
        self.pos = 0
        self.lines = []
        self.api_wrote = {}  # pod UID → the time its ADDED event was flushed

    def hook_api(self):
        from doubles.fakeapi import apihandler
        orig = apihandler.ApiHandler._chunk
        wrote = self.api_wrote

        def chunk(handler, event):
            orig(handler, event)
            obj = event.get("object") or {}
            if event.get("type") == "ADDED" and obj.get("kind", "Pod") == "Pod":
                uid = (obj.get("metadata") or {}).get("uid")
                if uid and uid not in wrote:
                    wrote[uid] = time.time()
        apihandler.ApiHandler._chunk = chunk

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode().splitlines():
            ts, step, key = line.split(" ", 2)
            self.lines.append((int(ts) / 1e6, step, key))
        self.pos += end

    def mark(self):
        self.poll()
        return len(self.lines)

    def status_costs(self, mark):
        """The durations (ms) of the STATUS= counts' reads since mark."""
        self.poll()
        out, start = [], None
        for ts, step, _ in self.lines[mark:]:
            if step == "status-counting":
                start = ts
            elif step == "status-counted" and start is not None:
                out.append((ts - start) * 1000.0)
                start = None
        return out

    def steps(self, mark, uid, created, driver):
        """{step: time} of one pod, or None when a step is missing.  The
        call's curl times are written when kvolumed has its reply, which may
        come after the driver logged the call: waited for a while."""
        deadline = time.monotonic() + 2.0
        while True:
            t = self._steps(mark, uid, created, driver)
            if t is not None or self.missing != "call-connected" or time.monotonic() > deadline:
                return t
            time.sleep(0.002)

    def _steps(self, mark, uid, created, driver):
        self.poll()
        lines = self.lines[mark:]
        t = {"created": created, "driver": driver, "api-wrote": self.api_wrote.get(uid)}
        idx = 0
        for step in ("received", "dispatched", "parsed", "decoded", "noted"):
            idx = next((k for k in range(len(lines)) if lines[k][1] == step and lines[k][2] == uid), None)
            if idx is None:
                self.missing = step
                return None
            t[step] = lines[idx][0]
        for step in ("pass", "planned", "prepared", "synced"):
            idx = next((k for k in range(idx, len(lines)) if lines[k][1] == step), None)
            if idx is None:
                self.missing = step
                return None
            t[step] = lines[idx][0]
        other = []
        for k in range(idx, len(lines)):
            if lines[k][1] == "call-start":
                if lines[k][2] == "NodePublishVolume":
                    idx = k
                    break
                other.append(lines[k][2])
        else:
            self.missing = "call-start"
            return None
        t["call-start"] = lines[idx][0]
        t["calls-before"] = other
        for step in ("call-connected", "call-pretransfer"):
            k = next((k for k in range(idx, len(lines)) if lines[k][1] == step and lines[k][2] == "NodePublishVolume"),
                     None)
            t[step] = lines[k][0] if k is not None else None
        if t["api-wrote"] is None or t["call-connected"] is None:
            self.missing = "api-wrote" if t["api-wrote"] is None else "call-connected"
            return None
        return t


def smaps_by_mapping(pid):
    """{mapping: (Rss, Pss, Anonymous) kB}: a library's file and its anonymous
    data together, the heap, thread stacks and other anonymous memory."""
    agg = {}
    name = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts[0].endswith(":"):
                path = parts[5] if len(parts) > 5 else ""
                if path:
                    name = os.path.basename(path)
                    # A library's .bss follows its file mappings anonymously.
                    last_lib = name if not path.startswith("[") else None
                else:
                    name = (last_lib + " (bss)") if last_lib else "[anon]"
                    last_lib = None
                continue
            if parts[0] in ("Rss:", "Pss:", "Anonymous:"):
                v = agg.setdefault(name, [0, 0, 0])
                v[("Rss:", "Pss:", "Anonymous:").index(parts[0])] += int(parts[1])
    return agg


def memory(pid):
    roll = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                roll[parts[0][:-1]] = int(parts[1])
    groups = {}
    for name, (rss, pss, anon) in smaps_by_mapping(pid).items():
        key = name.removesuffix(" (bss)")
        key = key.split(".so")[0] if ".so" in key else key
        g = groups.setdefault(key, [0, 0, 0])
        g[0] += rss
        g[1] += pss
        g[2] += anon
    return {"rss_kib": roll.get("Rss"), "pss_kib": roll.get("Pss"), "pss_anon_kib": roll.get("Pss_Anon"),
            "pss_file_kib": roll.get("Pss_File"), "anon_kib": roll.get("Anonymous"),
            "threads": status_kib(pid, "Threads"), "mappings": groups}

HERE = os.path.dirname(os.path.abspath(__file__))

DRIVER_STATE_TEXT = {
    "root-dir": "on root-dir's file system, written through a temporary file, fsync and rename",
    "hostpath": "on root-dir's file system, truncated and written in place, never synced (the CSI hostpath "
                "driver's state.go)",
    "tmpfs": "on a tmpfs of its own"}

SOURCES = ("kernel", "mountinfo")
CONFIG_VALUE = {"kernel": "auto", "mountinfo": "mountinfo"}


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class Node:
    def __init__(self, args):
        self.args = args
        open_bench_node(self, args.workdir, "kvbench-mount.", "kvm.", getattr(args, "driver_state", "root-dir"),
                        getattr(args, "driver", "python"))
        with open(self.config) as f:
            self.config_text = f.read()
        self.agent = None
        self.source = None
        self.rule = None
        self.filled = 0
        self.restarts = []  # (level, source, seconds to READY, calls made meanwhile)
        self.trace = None
        self.traces = []  # per pod: {step: time}
        self.status_costs = {}  # tag → the STATUS= counts' reads (ms) during its single pods
        if args.trace:
            self.trace = Trace(os.path.join(self.work, "trace"))
            self.trace.hook_api()

    def start(self, key, level, rule="intent-log"):
        """key: a mount source, or "source@label" for the build --builds names;
        rule: "intent-log" (kvolumed's), "files" (each record and changed
        directory synced before the call, the rule before the log, a test
        hook) or "syncfs" (the rule before that, a test hook)."""
        source, _, label = key.partition("@")
        binary = os.path.join(self.args.build_dirs[label], "agent", "kvolumed") if label else kvolumed_path()
        self.stop_agent()
        env = dict(os.environ, KVOLUMED_LOG_TARGET="stderr")
        if rule == "syncfs":
            env["KVOLUMED_TEST_SYNCFS"] = "1"
        elif rule == "files":
            env["KVOLUMED_TEST_NO_INTENT_LOG"] = "1"
        with open(self.config, "w") as f:
            f.write(self.config_text.replace("[agent]\n", f"[agent]\nmount-source = {CONFIG_VALUE[source]}\n", 1))
        notify_path = os.path.join(self.sockdir, "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        mark = self.tail.mark()
        t0 = time.monotonic()
        self.agent = subprocess.Popen([binary, "--config", self.config],
                                      env=dict(env, NOTIFY_SOCKET=notify_path,
                                               **({"KVOLUMED_TEST_TRACE_FILE": self.trace.path} if self.trace else {})),
                                      stderr=open(os.path.join(self.work, "kvolumed.log"), "a"))
        # Up to 300 s for READY=1, but no longer than kvolumed lives: one
        # that refuses its configuration exits at once, and says why.
        notify.settimeout(1.0)
        while True:
            try:
                if "READY=1" in notify.recv(65536).decode().split("\n"):
                    break
            except TimeoutError:
                pass
            if self.agent.poll() is not None or time.monotonic() - t0 > 300:
                with open(os.path.join(self.work, "kvolumed.log"), errors="replace") as f:
                    said = f.read()[-2000:]
                raise SystemExit(f"bench: kvolumed ({source}) did not say READY=1 "
                                 f"(exit status {self.agent.poll()}):\n{said}")
        ready = time.monotonic() - t0
        # Keep reading, as systemd does: a full queue would block sd_notify.
        threading.Thread(target=self.drain, args=(notify,), daemon=True).start()
        self.tail.alive = self.agent
        self.source = key
        self.rule = rule
        time.sleep(self.args.settle)
        calls = [c["method"] for c in self.tail.since(mark, code=None)
                 if c["method"] in ("NodePublishVolume", "NodeUnpublishVolume", "NodeStageVolume",
                                    "NodeUnstageVolume")]
        self.restarts.append({"level": level, "source": key, "ready_seconds": ready, "calls": len(calls)})
        # What kvolumed says it uses: the figures must be of that source.
        with urllib.request.urlopen(f"http://{self.listen}/volumes", timeout=60) as r:
            shown = json.load(r)["mount_source"]
        log(f"kvolumed ({key}) READY after {ready:.2f} s beside {level} volumes, {len(calls)} calls, "
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
        # The fake API server runs in this Python process: a full collection
        # over the fill's pods (and the trace's lines) stops its watch
        # delivery for ~60 ms beside 10,000 volumes, a stall of the double
        # that the pod meeting it would count as kvolumed's.
        gc.collect()
        gc.freeze()
        log(f"filled to {level} volumes in {time.monotonic() - t0:.1f} s")

    def wait_quiet(self, window=1.0, cpu_percent=2.0, timeout=300.0):
        """Until kvolumed has been quiet for a whole window (its CPU below
        cpu_percent, no new driver call): what a fill leaves to finish (the
        last records made durable, volumesInUse written, the driver's state)
        is not a new pod's cost.  Returns the seconds waited."""
        pid = self.agent.pid
        t0 = time.monotonic()
        while True:
            cpu0, calls0 = cpu_seconds(pid), len(self.tail.poll())
            time.sleep(window)
            busy = 100.0 * (cpu_seconds(pid) - cpu0) / window
            if busy < cpu_percent and len(self.tail.poll()) == calls0:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                log(f"kvolumed still busy ({busy:.0f} % CPU) {timeout:.0f} s after the fill; measuring anyway")
                return time.monotonic() - t0

    def single_pods(self, tag, n, keep=False):
        """Overheads (ms) of n pods of one inline volume, one at a time; with
        keep, each stays until the last is published (then all go): what the
        driver wrote after a pod's publish is still there when the next pod's
        record is synced, as when pods start one after another on a node."""
        out = []
        kept = []
        smark = self.trace.mark() if self.trace else 0
        for i in range(n):
            name = f"one-{tag}-{i}".replace("@", "-")
            mark = self.tail.mark()
            tmark = self.trace.mark() if self.trace else 0
            t0 = time.time()
            obj = self.api.create(pod(name, ["v"]))
            c = self.tail.wait(mark, "NodePublishVolume", 1, 60, f"publish of {name}")[0]
            out.append((c["time"] - t0) * 1000.0)
            if self.trace:
                st = self.trace.steps(tmark, obj["metadata"]["uid"], t0, c["time"])
                if st is None:
                    log(f"{name}: a step of its trace is missing ({self.trace.missing}), left out of the split")
                else:
                    st["tag"] = tag
                    st["index"] = i
                    self.traces.append(st)
            if keep:
                kept.append((name, obj))
                continue
            self.api.remove("pods", "default", name)
            self.tail.wait(mark, "NodeUnpublishVolume", 1, 60, f"unpublish of {name}")
            pod_dir = os.path.join(self.root, "pods", obj["metadata"]["uid"])
            wait(lambda: not os.path.exists(pod_dir), 60, f"teardown of {name}", interval=0.002)
        if kept:
            mark = self.tail.mark()
            for name, _ in kept:
                self.api.remove("pods", "default", name)
            self.tail.wait(mark, "NodeUnpublishVolume", len(kept), 120, f"unpublish of {len(kept)} pods")
            for name, obj in kept:
                pod_dir = os.path.join(self.root, "pods", obj["metadata"]["uid"])
                wait(lambda: not os.path.exists(pod_dir), 60, f"teardown of {name}", interval=0.01)
        if self.trace:
            self.status_costs[tag] = self.trace.status_costs(smark)
        return out

    def idle(self):
        pid = self.agent.pid
        self.api.clear_requests()
        cpu0, (vol0, _), t0 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        time.sleep(self.args.idle)
        cpu1, (vol1, _), t1 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        requests = [request_kind(r) for r in self.api.requests()]
        return {"cpu_percent": 100.0 * (cpu1 - cpu0) / (t1 - t0), "wakeups_per_second": (vol1 - vol0) / (t1 - t0),
                "rss_mib": status_kib(pid, "VmRSS") / 1024.0, "api_requests": len(requests),
                "api_request_kinds": sorted(set(requests)), "memory": memory(pid),
                "scrape_ms": self.scrape_ms()}

    def scrape_ms(self, n=5):
        """A /metrics scrape's answer time, median of n after the idle
        window (after the measures above: a scrape is a wake-up): kvolumed
        builds it on its loop, so that a new pod waits for it."""
        times = []
        for _ in range(n):
            t0 = time.monotonic()
            with urllib.request.urlopen(f"http://{self.listen}/metrics", timeout=30) as r:
                r.read()
            times.append((time.monotonic() - t0) * 1000.0)
        return statistics.median(times)

    def close(self):
        self.stop_agent()
        close_bench_node(self)


def fmt(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


WRITERS = ("none", "tmpfs", "root-dir")
RULES = ("intent-log", "files", "syncfs")


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
    if args.isolated:
        # An ext4 of root-dir's own, its image on --workdir's disk: other
        # processes' syncs of that disk's file system (a shared machine's
        # builds and tests) do not write this one's dirty pages out.
        fresh_ext4(node.root, node.work)
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
    write_report(args.report, lines, res)


def memory_report(res, levels, source):
    """Per mapping, idle after the single pods, at each level."""
    mem = {lv: res["levels"][lv][source]["idle_after"]["memory"] for lv in levels}
    names = sorted(set().union(*(m["mappings"] for m in mem.values())),
                   key=lambda n: -max(m["mappings"].get(n, [0, 0, 0])[0] for m in mem.values()))
    out = [""]
    for lv in levels:
        m = mem[lv]
        out.append(f"- {lv} volumes: RSS {m['rss_kib']} KiB, PSS {m['pss_kib']} KiB (anon {m['pss_anon_kib']}, "
                   f"file {m['pss_file_kib']}), anonymous {m['anon_kib']} KiB, {m['threads']} threads")
    out += ["", f"Memory by mapping, idle ({source}; KiB; RSS / PSS / anonymous; a library's bss and its "
           "private pages are its anonymous part):", "",
           "| mapping | " + " | ".join(f"{lv} volumes RSS / PSS / anon" for lv in levels) + " |",
           "|---|" + "---:|" * len(levels)]
    shown = 0
    for n in names:
        if max(m["mappings"].get(n, [0, 0, 0])[0] for m in mem.values()) < 64 and shown > 12:
            continue
        shown += 1
        out.append(f"| {n} | " + " | ".join("{} / {} / {}".format(*mem[lv]["mappings"].get(n, [0, 0, 0]))
                                              for lv in levels) + " |")
    return out


def status_report(costs, levels, sources, repeat):
    """One STATUS= update's read of the counts (ms): per level and source,
    the median of the repeats' medians, min–max of them, and how many reads."""
    out = ["", "One STATUS= update's read of the counts, in the loop (ms; median of the repeats' medians, "
           "min–max of them; reads: in all):", "", "| volumes | source | median | min–max | max of all | reads |",
           "|---:|---|---:|---:|---:|---:|"]
    for level in levels:
        for s in sources:
            per = [costs.get(f"{level}-{s}-{r}", []) for r in range(repeat)]
            meds = [statistics.median(p) for p in per if p]
            every = [x for p in per for x in p]
            if meds:
                out.append(f"| {level} | {s} | {statistics.median(meds):.3f} | {min(meds):.3f}–{max(meds):.3f} | "
                           f"{max(every):.3f} | {len(every)} |")
    return out


def trace_report(traces, levels, sources, repeat):
    """Each step's share of a single pod's time: per level and source, the
    median over repeats of each repeat's median (ms)."""
    out = ["", "A single pod's path, step by step (ms; median of the repeats' medians, min–max of them):", ""]
    for level in levels:
        for s in sources:
            rows = []
            for name, end in [("delivery: creation → kvolumed's read", "delivery"),
                              ("overhead − delivery: kvolumed's read → the driver", "driver-after"),
                              ("overhead: creation → the driver", "overhead")] + list(STEPS):
                meds = []
                for r in range(repeat):
                    tag = f"{level}-{s}-{r}"
                    vals = []
                    for t in traces:
                        if t["tag"] != tag:
                            continue
                        if end == "delivery":
                            vals.append(t["received"] - t["created"])
                        elif end == "driver-after":
                            vals.append(t["driver"] - t["received"])
                        elif end == "overhead":
                            vals.append(t["driver"] - t["created"])
                        else:
                            i = [e for _, e in STEPS].index(end)
                            prev = "created" if i == 0 else STEPS[i - 1][1]
                            if t.get(end) is not None and t.get(prev) is not None:
                                vals.append(t[end] - t[prev])
                    if vals:
                        meds.append(statistics.median(vals) * 1000.0)
                if meds:
                    rows.append(f"| {name} | {statistics.median(meds):.3f} | {min(meds):.3f}–{max(meds):.3f} |")
            if not rows:
                continue
            before = sorted({c for t in traces if t["tag"].startswith(f"{level}-{s}-") for c in t["calls-before"]})
            out += [f"{level} volumes, {s}" + (f" (calls before the publish: {', '.join(before)})" if before else "")
                    + ":", "", "| step | median | min–max |", "|---|---:|---:|"] + rows + [""]
    return out


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
    ap.add_argument("--fresh-fs", nargs="?", const="loop", choices=("loop", "zram"),
                    help="the work directory (root-dir, the doubles' files) on a new ext4 with a journal, as a "
                         "node's /var: on a loop device whose image is on --workdir (loop, the default), or on a zram "
                         "device of its own, a disk in memory whose flush is free (zram; benchlib.fresh_workdir)")
    ap.add_argument("--trace", action="store_true",
                    help="split each pod's time into its steps (a -Dtest-hooks=true build)")
    ap.add_argument("--sources", default=",".join(SOURCES), help="mount sources to run (kernel,mountinfo)")
    ap.add_argument("--driver", choices=("python", "go"), default="python",
                    help="the CSI driver: the Python mock (grpcio) or the benchmarks' grpc-go driver "
                         "(test/bench/godriver), whose receive of a call on a new connection is a real driver's")
    ap.add_argument("--driver-state", choices=("root-dir", "hostpath", "tmpfs"), default="root-dir",
                    help="the mock driver's state file, rewritten at each call: on root-dir's file system written "
                         "safely (temp, fsync, rename), there in place and never synced as the CSI hostpath "
                         "driver does, or on a tmpfs")
    ap.add_argument("--keep-pods", action="store_true",
                    help="each repeat's pods stay until its last is published, rather than each going before the "
                         "next: the driver's write after a publish is pending when the next pod's record is synced")
    ap.add_argument("--builds", default="",
                    help="LABEL=BUILD_DIR,LABEL=BUILD_DIR: each source run with each build in turn, before/after "
                         "in one run")
    args = ap.parse_args()
    if args.report is None:
        args.report = "/var/tmp/kvolumed-" + ("durability" if args.dirty else "mount") + "-bench.md"
    if args.dirty:
        return dirty_main(args)
    with fresh_workdir(args):
        return levels_main(args)


def levels_main(args):
    levels = [int(x) for x in args.levels.split(",")]
    sources = tuple(x for x in args.sources.split(",") if x)
    args.build_dirs = dict(b.split("=", 1) for b in args.builds.split(",") if b)
    if args.build_dirs:
        sources = tuple(f"{s}@{label}" for s in sources for label in args.build_dirs)

    node = Node(args)
    started = time.monotonic()
    res = {"machine": machine(node.root), "args": vars(args), "levels": {}}
    try:
        order = list(sources)
        for level in levels:
            if node.agent is None:
                node.start(order[0], level)
            node.fill(level)
            per = {s: {"repeat_medians": [], "all": [], "idle": None} for s in sources}
            for r in range(args.repeat):
                for s in order:
                    if node.source != s:
                        node.start(s, level)
                    if per[s]["idle"] is None:
                        per[s]["idle"] = node.idle()
                    o = node.single_pods(f"{level}-{s}-{r}", args.pods, keep=args.keep_pods)
                    if r == args.repeat - 1:
                        # Idle again after its last pods: what their code paths brought back.
                        per[s]["idle_after"] = node.idle()
                    per[s]["repeat_medians"].append(statistics.median(o))
                    per[s]["all"] += o
                    log(f"{level} volumes, {s}, repeat {r + 1}: median {statistics.median(o):.2f} ms")
                order.reverse()  # the one that ran last runs first: no restart, and no order bias
            res["levels"][level] = per
    finally:
        node.close()
    res["restarts"] = node.restarts
    res["traces"] = node.traces
    res["status_costs"] = node.status_costs
    res["seconds"] = time.monotonic() - started

    lines = ["# kvolumed mount path benchmark (issue 23)", "",
             f"Machine: {json.dumps(res['machine'])}", "",
             f"Command: test/bench/mount.sh --levels {args.levels} --repeat {args.repeat} --pods {args.pods}"
             f"{' --trace' if args.trace else ''} --sources {args.sources}"
             f"{' --builds ' + args.builds if args.builds else ''} --driver-state {args.driver_state}"
             f"{' --keep-pods' if args.keep_pods else ''}{' --driver go' if args.driver == 'go' else ''}"
             f"{fresh_fs_flag(args)}", "",
             ("The driver: the benchmarks' grpc-go driver (test/bench/godriver/driver.go)." if args.driver == "go"
              else "The driver: the Python mock (grpcio)."),
             f"Its state file (rewritten at each call): {DRIVER_STATE_TEXT[args.driver_state]}.", "",
             "A new pod's overhead: its creation in the API → the driver's receipt of NodePublishVolume (ms); "
             f"median of {args.repeat} repeats' medians (min–max of them), p99 over all "
             f"{args.repeat * args.pods} pods; ratio to the empty node on the same source.", "",
             "| volumes | source | median | min–max | p99 | × empty | idle CPU % | wake-ups/s | API requests | RSS MiB |"
             " PSS MiB | anon MiB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        for s in sources:
            d = res["levels"][level][s]
            med = statistics.median(d["repeat_medians"])
            base = statistics.median(res["levels"][levels[0]][s]["repeat_medians"])
            d.update({"median_ms": med, "min_ms": min(d["repeat_medians"]), "max_ms": max(d["repeat_medians"]),
                      "p99_ms": percentile(d["all"], 99), "ratio_to_empty": med / base if base else None})
            lines.append(f"| {level} | {s} | {fmt(med)} | {fmt(d['min_ms'])}–{fmt(d['max_ms'])} | "
                         f"{fmt(d['p99_ms'])} | {fmt(d['ratio_to_empty'])} | {fmt(d['idle']['cpu_percent'])} | "
                         f"{fmt(d['idle']['wakeups_per_second'], 1)} | {d['idle']['api_requests']} | "
                         f"{fmt(d['idle']['rss_mib'], 1)} | {fmt(d['idle']['memory']['pss_kib'] / 1024, 1)} | "
                         f"{fmt(d['idle']['memory']['anon_kib'] / 1024, 1)} |")
    lines += ["", "A /metrics scrape, answered (ms; median of 5 after the idle window, the median of the repeats' "
              "for each level): kvolumed builds it on its loop, a new pod meanwhile waits.", ""]
    for level in levels:
        for s in sources:
            scrapes = [i["scrape_ms"] for i in (res["levels"][level][s].get("idle"),
                                                res["levels"][level][s].get("idle_after")) if i and "scrape_ms" in i]
            if scrapes:
                lines.append(f"- {level} volumes, {s}: {fmt(statistics.median(scrapes))} ms")
    if not args.build_dirs and len(sources) == 2:
        lines += ["", "Kernel path against the mountinfo fallback (median overhead):", ""]
        for level in levels:
            k, m = res["levels"][level]["kernel"]["median_ms"], res["levels"][level]["mountinfo"]["median_ms"]
            lines.append(f"- {level} volumes: {fmt(k)} ms against {fmt(m)} ms ({fmt(m / k if k else None)}× faster)")
    if len(args.build_dirs) == 2:
        a, b = sources[0], sources[1]
        lines += ["", f"{b} against {a}, this run (median overhead; RSS and PSS idle after the pods):", ""]
        for level in levels:
            da, db = res["levels"][level][a], res["levels"][level][b]
            lines.append(f"- {level} volumes: {fmt(db['median_ms'])} ms against {fmt(da['median_ms'])} ms "
                         f"(× {fmt(db['median_ms'] / da['median_ms'] if da['median_ms'] else None)}); RSS "
                         f"{fmt(db['idle_after']['rss_mib'], 1)} against {fmt(da['idle_after']['rss_mib'], 1)} MiB, "
                         f"PSS {fmt(db['idle_after']['memory']['pss_kib'] / 1024, 1)} against "
                         f"{fmt(da['idle_after']['memory']['pss_kib'] / 1024, 1)} MiB")
    lines += ["", "Idle again after each one's last single pods:", ""]
    for level in levels:
        for s in sources:
            a = res["levels"][level][s].get("idle_after")
            if a:
                lines.append(f"- {level} volumes, {s}: RSS {fmt(a['rss_mib'], 1)} MiB, PSS "
                             f"{fmt(a['memory']['pss_kib'] / 1024, 1)} MiB, anon {fmt(a['memory']['anon_kib'] / 1024, 1)}"
                             f" MiB, {fmt(a['wakeups_per_second'], 1)} wake-ups/s, {a['api_requests']} API requests")
    for s in sources:
        lines += memory_report(res, levels, s)
    if node.traces:
        lines += trace_report(node.traces, levels, sources, args.repeat)
    if node.status_costs:
        lines += status_report(node.status_costs, levels, sources, args.repeat)
    lines += ["", "Restarts (kvolumed started again with the other source; no stage/publish call allowed):", ""]
    for r in res["restarts"]:
        lines.append(f"- {r['level']} volumes, {r['source']}: READY in {r['ready_seconds']:.2f} s, "
                     f"{r['calls']} calls")
    lines += ["", f"Run time: {res['seconds']:.0f} s."]
    write_report(args.report, lines, res)


if __name__ == "__main__":
    main()
