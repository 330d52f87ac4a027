#!/usr/bin/python3
"""kvolumed's memory at rest beside published volumes (issue 31: "RSS ≤ 16 MiB
beside 1,000 volumes, idle, 0 API requests and ≤ 1 wake-up per second; PSS
too, and what each library costs"), run by test/bench/memory.sh as root in a
private mount namespace.

The node of mount_bench.py (the fake API server, the mock CSI driver, root-dir
on --workdir) is filled to --level published inline volumes once; then,
--repeat times, each build of --builds in turn (the order alternating between
repeats, so that a drift of the machine hits each alike) is started beside
them, runs --pods single pods one after the other (so that the paths of a new
pod, its API requests, TLS, the CSI calls, have run, as on a node that has
been up for a while), waits until kvolumed is quiet and its trim timer has
run, and is measured over an --idle window: CPU, wake-ups (voluntary context
switches of every thread), API requests, and its memory from
/proc/PID/smaps_rollup (RSS, PSS, anonymous, file-backed) and /proc/PID/smaps
per mapping (a library's file pages and its private/bss pages together).
Figures: the median of the repeats, with their min–max.

Memory of a process depends on what it shares: PSS divides a shared page
among its users (the libc of every process, a library page cache another
process also maps), RSS does not.  Both are reported; the target is RSS.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import machine, write_report  # noqa: E402
from mount_bench import Node, log, memory  # noqa: E402

# glibc's trim timer of agent.c (TRIM_QUIET_USEC) plus its slack.
TRIM_WAIT = 3.5


def smaps_segments(pid):
    """[(mapping path, perms, Rss kB, Pss kB)] of every mapping, for the
    detail of the last run."""
    out = []
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts[0].endswith(":"):
                cur = [parts[5] if len(parts) > 5 else "[anon]", parts[1], 0, 0]
                out.append(cur)
            elif parts[0] == "Rss:":
                cur[2] = int(parts[1])
            elif parts[0] == "Pss:":
                cur[3] = int(parts[1])
    return out


def measure(node, args):
    node.single_pods(f"{node.source}-{len(node.samples)}", args.pods)
    node.wait_quiet()
    time.sleep(TRIM_WAIT)
    idle = node.idle()
    idle["segments"] = smaps_segments(node.agent.pid)
    return idle


FLOOR_PACKAGES = "libsystemd libcurl libcrypto libmicrohttpd mount libudev libcjson yaml-0.1 inih libprotobuf-c"


def library_floor(node, repeat):
    """RSS, anonymous and file-backed KiB of test/bench/libfloor.c, median
    of `repeat` runs: a process linked with kvolumed's libraries, each
    initialised, after one HTTPS request to the fake API server.  None when
    it cannot be built (reported so)."""
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    binary = os.path.join(node.work, "libfloor")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", *FLOOR_PACKAGES.split()], capture_output=True,
                           text=True)
    if flags.returncode != 0:
        log(f"the libraries' floor not measured: pkg-config: {flags.stderr.strip()}")
        return None
    cc = subprocess.run(["gcc", "-std=gnu17", "-O2", "-Wall", "-Werror", os.path.join(here, "libfloor.c"), "-o",
                         binary, *flags.stdout.split()], capture_output=True, text=True)
    if cc.returncode != 0:
        log(f"the libraries' floor not measured: {cc.stderr.strip()[-500:]}")
        return None
    runs = []
    for _ in range(repeat):
        p = subprocess.run([binary, node.api.server_url + "/version"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            log(f"the libraries' floor not measured: {p.stderr.strip()}")
            return None
        runs.append({k.rstrip(":"): int(v) for k, v, _ in (line.split() for line in p.stdout.splitlines())})
    return {k: statistics.median(r[k] for r in runs) for k in ("VmRSS", "RssAnon", "RssFile")}


def med(values):
    return statistics.median(values), min(values), max(values)


def fmt3(values, scale=1.0, digits=1):
    m, lo, hi = med([v * scale for v in values])
    return f"{m:.{digits}f} ({lo:.{digits}f}–{hi:.{digits}f})"


def hold(node, args):
    """Interactive: commands read from --hold's file, for a look at the
    process with other tools (perf, gdb, /proc)."""
    path = args.hold
    log(f"holding: write 'start LABEL[=BUILD_DIR]', 'pods N', 'measure', 'quit' to {path}")
    done = 0
    while True:
        try:
            with open(path) as f:
                cmds = f.read().splitlines()
        except FileNotFoundError:
            cmds = []
        for cmd in cmds[done:]:
            done += 1
            word, _, arg = cmd.partition(" ")
            if word == "start":
                if "=" in arg:  # a build not named in --builds
                    arg, _, build = arg.partition("=")
                    args.build_dirs[arg] = build
                try:
                    node.start(f"kernel@{arg}", args.level)
                except SystemExit as e:  # another mount source (valgrind): still worth a look
                    log(str(e))
                log(f"kvolumed ({arg}) pid {node.agent.pid}")
            elif word == "pods":
                node.single_pods(f"hold-{done}", int(arg))
                node.wait_quiet()
                log("pods done")
            elif word == "measure":
                m = measure(node, args)
                log(f"RSS {m['memory']['rss_kib']} PSS {m['memory']['pss_kib']} anon {m['memory']['anon_kib']} "
                    f"wakeups/s {m['wakeups_per_second']:.2f} requests {m['api_requests']}")
            elif word == "quit":
                return
        time.sleep(0.5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", required=True, help="LABEL=BUILD_DIR[,LABEL=BUILD_DIR...]")
    ap.add_argument("--level", type=int, default=1000, help="published volumes beside kvolumed")
    ap.add_argument("--volumes", type=int, default=10, help="inline volumes per filling pod")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pods", type=int, default=3, help="single pods per run before the idle window")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds after READY")
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of the idle window")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--report", default="/var/tmp/kvolumed-memory-bench.md")
    ap.add_argument("--hold", default=None, help="a command file: stay for a look instead of measuring")
    args = ap.parse_args()
    args.build_dirs = dict(b.split("=", 1) for b in args.builds.split(",") if b)
    args.trace = False
    args.driver_state = "root-dir"
    labels = list(args.build_dirs)

    node = Node(args)
    node.samples = []
    started = time.monotonic()
    res = {"machine": machine(node.root), "args": vars(args), "runs": {lb: [] for lb in labels}}
    try:
        node.start(f"kernel@{labels[0]}", 0)
        node.fill(args.level)
        node.wait_quiet()
        if args.hold:
            return hold(node, args)
        order = list(labels)
        for r in range(args.repeat):
            for lb in order:
                node.start(f"kernel@{lb}", args.level)
                m = measure(node, args)
                node.samples.append(m)
                res["runs"][lb].append(m)
                log(f"{lb}, repeat {r + 1}: RSS {m['memory']['rss_kib']} KiB, PSS {m['memory']['pss_kib']} KiB, "
                    f"anon {m['memory']['anon_kib']} KiB, {m['wakeups_per_second']:.2f} wake-ups/s, "
                    f"{m['api_requests']} API requests")
            order.reverse()
        res["library_floor_kib"] = library_floor(node, args.repeat)
    finally:
        node.close()
    res["seconds"] = time.monotonic() - started

    lines = ["# kvolumed memory at rest (issue 31)", "",
             f"Machine: {json.dumps(res['machine'])}", "",
             f"Command: test/bench/memory.sh --builds {args.builds} --level {args.level} --repeat {args.repeat} "
             f"--pods {args.pods} --idle {args.idle:g}", "",
             f"Beside {args.level} published volumes, after {args.pods} single pods, quiet and trimmed, over a "
             f"{args.idle:g} s idle window; median of {args.repeat} runs (min–max). MiB.", "",
             "| build | RSS | PSS | anonymous | PSS file | PSS anon | wake-ups/s | API requests | threads |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    k = 1 / 1024
    for lb in labels:
        runs = res["runs"][lb]
        mm = [x["memory"] for x in runs]
        lines.append(f"| {lb} | {fmt3([m['rss_kib'] for m in mm], k)} | {fmt3([m['pss_kib'] for m in mm], k)} | "
                     f"{fmt3([m['anon_kib'] for m in mm], k)} | {fmt3([m['pss_file_kib'] for m in mm], k)} | "
                     f"{fmt3([m['pss_anon_kib'] for m in mm], k)} | "
                     f"{fmt3([x['wakeups_per_second'] for x in runs], 1, 2)} | "
                     f"{max(x['api_requests'] for x in runs)} (max) | {max(m['threads'] for m in mm)} |")
    floor = res.get("library_floor_kib")
    if floor:
        lines += ["", f"The libraries' floor (test/bench/libfloor.c: kvolumed's libraries linked and initialised, "
                  f"one HTTPS request to the fake API server, one SHA-256; median of {args.repeat}): RSS "
                  f"{floor['VmRSS'] / 1024:.1f} MiB ({floor['RssFile'] / 1024:.1f} file-backed, "
                  f"{floor['RssAnon'] / 1024:.1f} anonymous). Above it, kvolumed's own (its binary, heap and "
                  "stacks, with the volumes' state): " + ", ".join(f"{lb} {own:.1f} MiB" for lb, own in (
                      (lb, (statistics.median(x["memory"]["rss_kib"] for x in res["runs"][lb]) - floor["VmRSS"])
                       / 1024) for lb in labels)) + "."]
    names = sorted(set().union(*(m["memory"]["mappings"] for lb in labels for m in res["runs"][lb])),
                   key=lambda n: -max(statistics.median(m["memory"]["mappings"].get(n, [0, 0, 0])[0]
                                                        for m in res["runs"][lb]) for lb in labels))
    lines += ["", "Per mapping (a library's file pages and its private/bss pages; median KiB, RSS / PSS / "
              "anonymous):", "",
              "| mapping | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    rest = {lb: [0, 0, 0] for lb in labels}
    for n in names:
        cells = {}
        for lb in labels:
            vals = [m["memory"]["mappings"].get(n, [0, 0, 0]) for m in res["runs"][lb]]
            cells[lb] = [statistics.median(v[i] for v in vals) for i in range(3)]
        if max(c[0] for c in cells.values()) < 48:
            for lb in labels:
                rest[lb] = [a + b for a, b in zip(rest[lb], cells[lb])]
            continue
        lines.append(f"| {n} | " + " | ".join("{:.0f} / {:.0f} / {:.0f}".format(*cells[lb]) for lb in labels) + " |")
    lines.append("| (the others, each < 48 KiB RSS) | "
                 + " | ".join("{:.0f} / {:.0f} / {:.0f}".format(*rest[lb]) for lb in labels) + " |")
    lines += ["", f"Run time: {res['seconds']:.0f} s."]
    write_report(args.report, lines, res)


if __name__ == "__main__":
    main()
