#!/usr/bin/python3
"""Benchmark of a restart and of the node at rest (issue 23), run by
test/bench/restart.sh as root inside a private mount namespace: the real
kvolumed against the fake API server (in this process) and the mock CSI
driver in tmpfs mode, root-dir on a disk-backed file system.

For each level of --levels (published inline volumes, ascending) the node is
filled (pods of --volumes volumes each, created with at most --window
volumes outstanding: the fake API server and the driver are Python, and
10,000 volumes must warm up in minutes), then measured at rest once on the
process that did the warm-up, then --repeat times: kvolumed is killed with
SIGKILL and started again, and this measures
  ready:     from the start of the process to READY=1 (sd_notify);
  converged: to the first /metrics answer showing every wanted volume
             published, none pending, failed, tearing down or uncertain, no
             CSI call in flight or queued, and a reconcile pass done;
  the CSI calls it made from its start to the end of the window below (by
             method: NodeUnpublish/NodeUnstage and NodeStage/NodePublish
             must be 0: the volumes are there), the API requests it made until
             converged, and its CPU time until converged;
and then, after --settle seconds, a quiet window of --idle seconds:
  idle CPU:  (utime+stime) delta / wall, from /proc/PID/stat (every thread;
             in clock ticks of 10 ms: 0.1 % over the default 10 s window);
  wake-ups:  voluntary + nonvoluntary context switches per second, summed
             over /proc/PID/task/*/status (voluntary alone in the JSON);
  VmRSS and RssAnon (its heap, in practice) at the end of the window, and
             per volume ((level - level 0) / volumes);
  the API requests and CSI calls made in the window (at rest: 0).
Figures are medians over the repeats with their min-max.  Writes JSON and a
Markdown table to --report (and prints the table).

kubelet, for comparison (reference/kubelet-facts.md §8): after a restart it
marks every reconstructed volume uncertain and calls NodeStage/NodePublish
again for each volume a running pod still wants: 10,000 calls here."""
import argparse
import collections
import json
import os
import re
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
                      close_bench_node, open_bench_node, pod, request_kind, status_kib, wait)

TEARDOWN = ("NodeUnpublishVolume", "NodeUnstageVolume")
SETUP = ("NodeStageVolume", "NodePublishVolume")


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def metric(text, name, labels=None):
    """The value of one sample of /metrics; None when it is absent."""
    sel = "" if labels is None else "{" + labels + "}"
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(sel)), text, re.M)
    return float(m.group(1)) if m else None


def metric_sum(text, name):
    """The sum of every sample of a family (e.g. per-driver gauges)."""
    return sum(float(v) for v in re.findall(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text, re.M))


class Node:
    def __init__(self, args):
        self.args = args
        open_bench_node(self, args.workdir, "kvrestart.", "kvr.")
        if args.mount_source != "auto":
            # The mountinfo fallback (what a kernel older than 6.15 gets).
            with open(self.config) as f:
                text = f.read()
            with open(self.config, "w") as f:
                f.write(text.replace("[agent]\n", f"[agent]\nmount-source = {args.mount_source}\n", 1))
        self.agent = None
        self.notify = None
        self.ready_at = None
        self.ready_event = threading.Event()
        self.filled = 0  # volumes of the filling pods created so far

    def start(self):
        """Starts kvolumed; returns its start time (monotonic).  A fresh
        notification socket per process: nothing the killed one sent can be
        taken for the new one's READY=1."""
        notify_path = os.path.join(self.sockdir, "notify.sock")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(notify_path)
        self.ready_event.clear()
        self.ready_at = None
        t0 = time.monotonic()
        self.agent = subprocess.Popen([kvolumed_path(), "--config", self.config],
                                      env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr", NOTIFY_SOCKET=notify_path),
                                      stderr=open(os.path.join(self.work, "kvolumed.log"), "a"))
        # Read every notification as systemd does: a reader that does not
        # leaves kvolumed blocked in sd_notify once the socket's queue
        # (net.unix.max_dgram_qlen, 10) is full, and a warm-up sends more
        # STATUS= lines than that.
        threading.Thread(target=self.read_notify, args=(self.notify,), daemon=True).start()
        self.tail.alive = self.agent
        return t0

    def read_notify(self, sock):
        try:
            while True:
                msg = sock.recv(65536).decode(errors="replace")
                if "READY=1" in msg.split("\n") and not self.ready_event.is_set():
                    self.ready_at = time.monotonic()
                    self.ready_event.set()
        except OSError:  # closed at the next start
            pass

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while not self.ready_event.wait(0.1):
            if self.agent.poll() is not None:
                raise SystemExit(f"bench: kvolumed exited ({self.agent.returncode}) before READY=1")
            if time.monotonic() > deadline:
                raise SystemExit("bench: timed out waiting for READY=1")
        return self.ready_at

    def kill(self):
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait()
        self.notify.close()

    def scrape(self):
        try:
            with urllib.request.urlopen(f"http://{self.listen}/metrics", timeout=10) as r:
                return r.read().decode()
        except OSError:
            return None

    def converged(self, total):
        text = self.scrape()
        if text is None:
            return False
        state = lambda s: metric(text, "kvolumed_volumes", f'state="{s}"')  # noqa: E731
        return (state("published") == total and metric(text, "kvolumed_volumes_desired") == total
                and state("pending") == 0 and state("failed") == 0 and state("tearing-down") == 0
                and metric(text, "kvolumed_volume_conditions", 'condition="uncertain"') == 0
                and metric_sum(text, "kvolumed_csi_calls_in_flight") == 0
                and metric_sum(text, "kvolumed_csi_calls_queued") == 0
                and (metric(text, "kvolumed_reconcile_seconds_count") or 0) > 0)

    def fill(self, level):
        """Pods of --volumes inline volumes until `level` volumes are
        published, at most --window volumes created and not yet mounted:
        enough to keep kvolumed and the driver busy, not so many that the
        in-process API server's watch fan-out and the driver's queue make
        the warm-up slower."""
        v = self.args.volumes
        t0 = time.monotonic()
        # Where the warm-up's time goes: CPU of kvolumed, of the driver and
        # of this process (the fake API server, and the bench's polling).
        cpu0 = self.cpu_split()
        last_log = t0
        # Progress from the driver's call log, read as it grows: re-reading
        # mountinfo makes the kernel write the whole table (50 ms at 5,000
        # mounts here), which took the CPU the warm-up needs.
        mark = self.tail.mark()
        done0 = have = self.filled
        while have < level:
            while self.filled < level and self.filled - have < self.args.window:
                i = self.filled // v
                self.api.create(pod(f"fill-{i}", [f"v{j}" for j in range(v)]))
                self.filled += v
            time.sleep(0.2)
            if self.agent.poll() is not None:
                raise SystemExit(f"bench: kvolumed exited ({self.agent.returncode}) during the warm-up")
            have = done0 + len(self.tail.since(mark, "NodePublishVolume"))
            if time.monotonic() - last_log > 30:
                last_log = time.monotonic()
                log(f"  warm-up: {have} of {level} mounted after {last_log - t0:.0f} s")
            if time.monotonic() - t0 > self.args.fill_timeout:
                raise SystemExit(f"bench: warm-up stopped at {have} of {level} volumes after "
                                 f"{self.args.fill_timeout} s")
        # The mount table has the final word: one read.
        wait(lambda: mounts_under(self.root) >= level, 120, f"{level} mounts", interval=2, alive=self.agent)
        mounted = mounts_under(self.root)
        if mounted != level:
            raise SystemExit(f"bench: {mounted} mounts under root-dir, not {level}")
        seconds = time.monotonic() - t0
        cpu = {k: v1 - cpu0[k] for k, v1 in self.cpu_split().items()}
        log(f"filled to {level} volumes in {seconds:.1f} s; CPU s: " +
            ", ".join(f"{k} {x:.1f}" for k, x in cpu.items()))
        return {"seconds": seconds, "cpu_seconds": cpu, "loadavg": open("/proc/loadavg").read().split()[:3]}

    def cpu_split(self):
        me = os.times()
        return {"kvolumed": cpu_seconds(self.agent.pid), "driver": cpu_seconds(self.driver.pid),
                "fake API + bench": me.user + me.system}

    def at_rest(self):
        """The quiet window: figures of the kvolumed process, and what it
        asked of the API server and the driver meanwhile."""
        time.sleep(self.args.settle)
        pid = self.agent.pid
        self.api.clear_requests()
        mark = self.tail.mark()
        cpu0, (vol0, inv0), t0 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        time.sleep(self.args.idle)
        cpu1, (vol1, inv1), t1 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        wall = t1 - t0
        return {"cpu_percent": 100.0 * (cpu1 - cpu0) / wall,
                "wakeups_per_second": (vol1 - vol0 + inv1 - inv0) / wall,
                "voluntary_per_second": (vol1 - vol0) / wall,
                "rss_kib": status_kib(pid, "VmRSS"), "anon_kib": status_kib(pid, "RssAnon"),
                "hwm_kib": status_kib(pid, "VmHWM"),
                "api_requests": dict(collections.Counter(request_kind(r) for r in self.api.requests())),
                "csi_calls": dict(collections.Counter(c["method"] for c in self.tail.since(mark, code=None)))}

    def restart(self, total):
        mark = self.tail.mark()
        self.kill()
        self.api.clear_requests()
        t0 = self.start()
        ready = self.wait_ready(self.args.timeout) - t0
        wait(lambda: self.converged(total), self.args.timeout, f"convergence at {total} volumes",
             interval=0.02, alive=self.agent)
        done = time.monotonic() - t0
        cpu = cpu_seconds(self.agent.pid)
        reqs = dict(collections.Counter(request_kind(r) for r in self.api.requests()))
        rest = self.at_rest()
        # Every call from the start to the end of the quiet window: anything
        # it would still do after converging is counted too.
        calls = dict(collections.Counter(c["method"] for c in self.tail.since(mark, code=None)))
        return {"ready_seconds": ready, "converged_seconds": done, "cpu_seconds_to_converge": cpu,
                "teardown_calls": sum(calls.get(m, 0) for m in TEARDOWN),
                "setup_calls": sum(calls.get(m, 0) for m in SETUP),
                "csi_calls": calls, "api_requests": reqs, "api_requests_count": sum(reqs.values()),
                "rest": rest, "loadavg": open("/proc/loadavg").read().split()[:3]}

    def mount_source(self):
        with urllib.request.urlopen(f"http://{self.listen}/volumes", timeout=60) as r:
            return json.load(r).get("mount_source")

    def close(self):
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.agent.kill()
        close_bench_node(self)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fmt(s, digits=2, scale=1.0):
    if s is None:
        return "–"
    if isinstance(s, dict):
        med, lo, hi = (s[k] * scale for k in ("median", "min", "max"))
        if len({round(med, digits), round(lo, digits), round(hi, digits)}) == 1:
            return f"{med:.{digits}f}"
        return f"{med:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"
    return f"{s * scale:.{digits}f}"


def report(res, args):
    # The levels measured: all of them, or those done before a failure.
    levels = [int(x) for x in args.levels.split(",") if x in res["levels"]]
    lines = ["# kvolumed restart and rest benchmark (issue 23)", "",
             f"Machine: {json.dumps(res['machine'])}", "",
             f"Command: test/bench/restart.sh {' '.join(res['argv'])}", "",
             f"kvolumed's mount source: {res.get('mount_source')}. Inline volumes, {args.volumes} per pod, mock "
             "driver in tmpfs mode. Each restart: SIGKILL, start again. Medians of "
             f"{args.repeat} restarts (min–max). At rest: a {args.idle:g} s window {args.settle:g} s after "
             "convergence. Per volume: (level − level 0) / volumes. Load: the 1-minute load average at each "
             "restart (other engineers' builds and tests ran meanwhile).", "",
             "| volumes | warm-up s | ready s | converged s | CPU s to converge | unpublish+unstage | "
             "stage+publish | API requests | idle CPU % | wake-ups/s | VmRSS MiB | RssAnon MiB | "
             "RSS KiB/vol | anon KiB/vol | load |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        d = res["levels"][str(level)]
        s = d["summary"]
        lines.append(
            f"| {level} | {d['fill']['seconds']:.0f} | {fmt(s['ready_seconds'])} | {fmt(s['converged_seconds'])} | "
            f"{fmt(s['cpu_seconds_to_converge'])} | {fmt(s['teardown_calls'], 0)} | {fmt(s['setup_calls'], 0)} | "
            f"{fmt(s['api_requests_count'], 0)} | {fmt(s['cpu_percent'])} | {fmt(s['wakeups_per_second'], 1)} | "
            f"{fmt(s['rss_kib'], 1, 1 / 1024)} | {fmt(s['anon_kib'], 1, 1 / 1024)} | "
            f"{fmt(s.get('rss_kib_per_volume'), 2)} | {fmt(s.get('anon_kib_per_volume'), 2)} | "
            f"{fmt(s['load1'])} |")
    lines += ["", "The process that did the warm-up (no restart), at rest:", "",
              "| volumes | idle CPU % | wake-ups/s | VmRSS MiB | RssAnon MiB | VmHWM MiB |",
              "|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        w = res["levels"][str(level)]["warm"]
        lines.append(f"| {level} | {w['cpu_percent']:.2f} | {w['wakeups_per_second']:.1f} | "
                     f"{w['rss_kib'] / 1024:.1f} | {w['anon_kib'] / 1024:.1f} | {w['hwm_kib'] / 1024:.1f} |")
    lines += ["", "Warm-up (pods of volumes created with a bounded window): CPU seconds spent by each process:", ""]
    for level in levels:
        f = res["levels"][str(level)]["fill"]
        if f["seconds"] > 0:
            lines.append(f"- to {level} volumes: {f['seconds']:.0f} s wall; " +
                         ", ".join(f"{k} {x:.1f} s" for k, x in f["cpu_seconds"].items()) +
                         f"; load {' '.join(f['loadavg'])}")
    lines += ["", "Per restart (API requests until converged; CSI calls until the end of the quiet window; "
              "API requests and CSI calls in the quiet window):", ""]
    for level in levels:
        for i, r in enumerate(res["levels"][str(level)]["runs"]):
            lines.append(f"- {level} volumes, restart {i + 1}: ready {r['ready_seconds']:.3f} s, converged "
                         f"{r['converged_seconds']:.3f} s, CSI calls {r['csi_calls'] or 'none'}, API requests "
                         f"{r['api_requests']}; at rest: API {r['rest']['api_requests'] or 'none'}, CSI "
                         f"{r['rest']['csi_calls'] or 'none'}; load {' '.join(r['loadavg'])}")
    if res.get("error"):
        lines += ["", f"STOPPED: {res['error']}"]
    lines += ["", f"Run time: {res['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", default="0,1000,10000", help="published volumes, ascending")
    ap.add_argument("--volumes", type=int, default=10, help="inline volumes per pod")
    ap.add_argument("--repeat", type=int, default=3, help="restarts per level")
    ap.add_argument("--window", type=int, default=1000, help="volumes created and not yet mounted, at most")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after convergence before the window")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the quiet window")
    ap.add_argument("--timeout", type=float, default=600.0, help="for READY and for convergence")
    ap.add_argument("--fill-timeout", type=float, default=3600.0)
    ap.add_argument("--mount-source", choices=("auto", "mountinfo"), default="auto",
                    help="kvolumed's [agent] mount-source: mountinfo forces the fallback")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--report", default="/var/tmp/kvolumed-restart-bench.md")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if levels != sorted(levels) or any(x % args.volumes for x in levels):
        raise SystemExit(f"bench: --levels must ascend, each a multiple of --volumes ({args.volumes})")

    # SIGTERM (or SIGINT, ignored in a background job) ends the run with its
    # clean-up and the report of the levels done.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench: SIGTERM"))
    node = Node(args)
    started = time.monotonic()
    res = {"machine": machine(node.root), "argv": sys.argv[1:], "args": vars(args), "levels": {}}
    failed = None
    try:
        node.start()
        node.wait_ready(args.timeout)
        res["mount_source"] = node.mount_source()
        if args.mount_source == "mountinfo" and res["mount_source"] != "mountinfo":
            raise SystemExit(f"bench: kvolumed uses {res['mount_source']}, not the mountinfo fallback")
        for level in levels:
            fill = node.fill(level)
            wait(lambda: node.converged(level), args.timeout, f"convergence of the warm-up at {level}",
                 interval=0.2, alive=node.agent)
            warm = node.at_rest()
            log(f"{level} volumes, warm: idle CPU {warm['cpu_percent']:.2f} %, "
                f"{warm['wakeups_per_second']:.1f} wake-ups/s, RSS {warm['rss_kib'] / 1024:.1f} MiB")
            runs = []
            for i in range(args.repeat):
                r = node.restart(level)
                runs.append(r)
                log(f"{level} volumes, restart {i + 1}: ready {r['ready_seconds']:.3f} s, converged "
                    f"{r['converged_seconds']:.3f} s, {r['teardown_calls']} teardown and {r['setup_calls']} "
                    f"setup calls, {r['api_requests_count']} API requests; idle CPU "
                    f"{r['rest']['cpu_percent']:.2f} %, {r['rest']['wakeups_per_second']:.1f} wake-ups/s, "
                    f"RSS {r['rest']['rss_kib'] / 1024:.1f} MiB, anon {r['rest']['anon_kib'] / 1024:.1f} MiB")
            s = {k: summary([r[k] for r in runs]) for k in
                 ("ready_seconds", "converged_seconds", "cpu_seconds_to_converge", "teardown_calls",
                  "setup_calls", "api_requests_count")}
            s.update({k: summary([r["rest"][k] for r in runs]) for k in
                      ("cpu_percent", "wakeups_per_second", "voluntary_per_second", "rss_kib", "anon_kib")})
            s["load1"] = summary([float(r["loadavg"][0]) for r in runs])
            if level > 0 and "0" in res["levels"]:
                base = res["levels"]["0"]["summary"]
                for k in ("rss_kib", "anon_kib"):
                    # Per volume: each restart against the empty node's median.
                    s[k + "_per_volume"] = summary([(r["rest"][k] - base[k]["median"]) / level for r in runs])
            res["levels"][str(level)] = {"fill": fill, "warm": warm, "runs": runs, "summary": s}
    except (SystemExit, KeyboardInterrupt, Exception) as e:  # report what was measured, then fail
        failed = e
        res["error"] = str(e)
        log(f"stopped: {e}")
    finally:
        node.close()
    res["seconds"] = time.monotonic() - started
    text = report(res, args)
    print(text)
    with open(args.report, "w") as f:
        f.write(text)
    with open(args.report.removesuffix(".md") + ".json", "w") as f:
        json.dump(res, f, indent=1)
    if failed is not None:
        sys.exit(2)
    bad = [lv for lv in levels
           if res["levels"][str(lv)]["summary"]["teardown_calls"]["max"]
           or res["levels"][str(lv)]["summary"]["setup_calls"]["max"]]
    if bad:
        log(f"a restart made stage/publish or unpublish/unstage calls at {bad} volumes")
        sys.exit(1)


if __name__ == "__main__":
    main()
