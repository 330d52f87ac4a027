#!/usr/bin/python3
"""The benchmark suite of issue 15, run by test/bench/run as root inside a
private mount namespace: the real kvolumed against the fake API server (in
this process) and the mock CSI driver in tmpfs mode with `--op-lock target`
(calls refused only per volume and target path), root-dir on a
disk-backed file system (never tmpfs: there durability is free and the
figures lie).  Writes a Markdown report (and the raw figures as JSON next
to it).

Each repeat runs, on one node set up once:
  idle, empty node      CPU, wake-ups, RSS over --idle seconds with no volume;
  single pods, empty    one pod with one inline volume at a time: creation in
                        the API to the NodePublishVolume reply (driver's call
                        log), and that minus the driver's own time;
  shared PV             P pods sharing one PV (50 ms per NodePublish and
                        NodeUnpublish in the driver): all published, all torn
                        down; then the floor (below) for the same calls;
  burst                 N pods x V inline volumes created at once: until the
                        last NodePublishVolume reply;
  single pods, beside   as above, beside the burst's N x V published volumes;
  idle, N x V volumes   CPU, wake-ups, RSS; API requests in the window (a watch
                        opened before it is not counted);
  burst teardown        every burst pod deleted: until the last
                        NodeUnpublishVolume reply; then the floor.
The floor: kvolumed stopped (SIGSTOP), the same successful CSI calls it
made, taken from the driver's call log (paths moved to another directory,
whose parents are made beforehand as kubelet does), replayed by a minimal
Python grpcio client on one channel, stage before publish and unpublish
before unstage, at several concurrencies; the first repeat tries them all,
later ones the best of the first.  A concurrency at which the driver
refused a call does not count."""
import argparse
import collections
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import (DRIVER, REPO, CallLogTail, context_switches, cpu_seconds,  # noqa: E402
                      kvolumed_path, machine, mounts_under, percentile, pod, request_kind, start_node,
                      status_kib, wait)
from doubles.fakeapi import FakeApiServer  # noqa: E402
from doubles.mockcsi import ControlClient  # noqa: E402

SIZES = {
    "full": {"burst_pods": 100, "burst_volumes": 10, "shared_pods": 50, "sequential": 100, "idle": 30.0,
             "settle": 3.0, "repeat": 5},
    "quick": {"burst_pods": 20, "burst_volumes": 5, "shared_pods": 10, "sequential": 20, "idle": 5.0,
              "settle": 1.0, "repeat": 1},
}
FLOOR_CONCURRENCY = (1, 4, 16, 64)  # the mock driver serves 64 calls at once
SHARED_DELAY = 0.05  # seconds the driver takes per NodePublish/NodeUnpublish of the shared PV
SHARED_PV, SHARED_HANDLE, SHARED_CLAIM = "pv-shared", "vol-shared", "shared"

# Issue 15's figures for kubelet 1.25 (containerd, the real hostpath CSI
# driver, a real kube-apiserver) on this kind of machine, and its targets.
KUBELET = {
    "burst": "20 pods × 5 inline volumes: all NodePublish calls issued 570–640 ms after the pods were created",
    "shared": "kubernetes/kubernetes#113553: 50 pods sharing a volume took 5–10 min to start; with parallel "
              "publishes (PR #109011, never merged) an EFS mount averaged 0.6 s instead of 23 s",
    "single": "pod created → volume mounted ≈ the driver's own time + 230 ms (100 ms reconciler and "
              "populator loops, the pod's 300 ms wait poll)",
}
FLAT_CPU_PERCENT = 0.1  # idle CPU "flat with volume count": within this many % of one CPU


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "values": values}


class Floor:
    """A minimal CSI client: one grpcio channel, calls as futures, at most
    `concurrency` in flight."""

    def __init__(self, socket_path):
        import grpc
        from google.protobuf import json_format
        from doubles.mockcsi import stubs
        self.grpc, self.json_format = grpc, json_format
        self.pb, pb_grpc, _, _ = stubs.load()
        self.channel = grpc.insecure_channel("unix:" + socket_path)
        self.stub = pb_grpc.NodeStub(self.channel)
        self.stub.NodeGetCapabilities(self.pb.NodeGetCapabilitiesRequest(), timeout=10)  # connected

    def messages(self, phase):
        return [(getattr(self.stub, m).future, self.json_format.ParseDict(r, getattr(self.pb, m + "Request")()))
                for m, r in phase]

    def run(self, phases, concurrency):
        """Phases one after the other, the calls of one concurrently.
        Returns (seconds, [error codes])."""
        prepared = [self.messages(p) for p in phases]
        errors = []
        lock = threading.Lock()
        t0 = time.monotonic()
        for calls in prepared:
            slots = threading.Semaphore(concurrency)
            done = threading.Event()
            left = [len(calls)]

            def finished(fut):
                if fut.exception() is not None:
                    with lock:
                        errors.append(fut.code().name)
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()
                slots.release()
            for call, msg in calls:
                slots.acquire()
                call(msg, timeout=120).add_done_callback(finished)
            done.wait()
        return time.monotonic() - t0, errors

    def close(self):
        self.channel.close()


class Suite:
    def __init__(self, args, sizes):
        self.args, self.sz = args, sizes
        self.work = tempfile.mkdtemp(prefix="kvbench-suite.", dir=args.workdir)
        self.sockdir = tempfile.mkdtemp(prefix="kvs.", dir="/tmp")
        self.root = os.path.join(self.work, "root")
        self.floor_root = os.path.join(self.work, "floor")
        os.makedirs(self.root)
        self.api = self.driver = self.agent = self.floor = None
        self.notify = None
        self.best = {}  # (scenario, direction) -> concurrency, from the first repeat
        self.driver_errors = collections.Counter()

    # ---- the node ----------------------------------------------------------
    def start(self):
        self.api = FakeApiServer(os.path.join(self.work, "api"), control_port=None, bookmark_interval=60).start()
        self.driver, driver_state, self.config = start_node(self.api, self.work, self.sockdir, self.root,
                                                            lifecycle_modes=("Persistent", "Ephemeral"),
                                                            driver_args=("--op-lock", "target"))
        self.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": SHARED_PV},
                         "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteMany"],
                                  "claimRef": {"namespace": "default", "name": SHARED_CLAIM},
                                  "csi": {"driver": DRIVER, "volumeHandle": SHARED_HANDLE}}})
        self.api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "metadata": {"name": SHARED_CLAIM, "namespace": "default"},
                         "spec": {"accessModes": ["ReadWriteMany"], "volumeName": SHARED_PV,
                                  "resources": {"requests": {"storage": "64Mi"}}},
                         "status": {"phase": "Bound"}})
        self.api.bind_claim("default", SHARED_CLAIM, SHARED_PV)  # the PV's claimRef gets the claim's uid
        self.tail = CallLogTail(os.path.join(driver_state, "calls.jsonl"))
        self.control = ControlClient(os.path.join(driver_state, "control.sock"))
        notify_path = os.path.join(self.sockdir, "notify.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(notify_path)
        self.agent = subprocess.Popen([kvolumed_path(), "--config", self.config],
                                      env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr", NOTIFY_SOCKET=notify_path),
                                      stderr=open(os.path.join(self.work, "kvolumed.log"), "w"))
        self.notify.settimeout(60)
        while "READY=1" not in self.notify.recv(4096).decode().split("\n"):
            pass
        # Keep reading as systemd does: STATUS= updates follow, and a full
        # datagram queue would block kvolumed's sd_notify (and its loop).
        self.notify.settimeout(None)
        threading.Thread(target=self.drain_notify, daemon=True).start()
        self.tail.alive = self.agent
        self.floor = Floor(os.path.join(self.sockdir, "csi.sock"))

    def drain_notify(self):
        try:
            while True:
                self.notify.recv(4096)
        except OSError:  # closed by stop()
            pass

    def stop(self):
        if self.floor:
            self.floor.close()
        for p in (self.agent, self.driver):
            if p and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.api:
            self.api.stop()
        if self.notify:
            self.notify.close()
        # kvolumed leaves volumes mounted when it stops (by design): unmount
        # what the driver did not before removing the directories.
        with open("/proc/self/mountinfo") as f:
            left = [line.split()[4] for line in f if line.split()[4].startswith(self.work + "/")]
        for m in sorted(left, key=len, reverse=True):
            subprocess.run(["umount", "-l", m], stderr=subprocess.DEVNULL)
        # kvolumed's warnings and errors outlive the work directory, next to the report.
        shutil.copyfile(os.path.join(self.work, "kvolumed.log"), re.sub(r"\.md$", "", self.args.report) + ".log")
        subprocess.run(["rm", "-rf", "--one-file-system", self.work, self.sockdir])

    def settle(self):
        time.sleep(self.sz["settle"])

    def count_errors(self, mark):
        for c in self.tail.since(mark, code=None):
            if c["code"] != "OK":
                self.driver_errors[f"{c['method']} {c['code']}"] += 1

    def wait_clean(self, what):
        pods_dir = os.path.join(self.root, "pods")
        wait(lambda: mounts_under(self.root) == 0 and not (os.path.isdir(pods_dir) and os.listdir(pods_dir)),
             300, what, interval=0.05)

    # ---- figures -------------------------------------------------------------
    def idle(self, volumes):
        """CPU, wake-ups, RSS and API requests over the idle window."""
        self.settle()
        pid = self.agent.pid
        requests_before = len(self.api.requests())
        cpu0, (vol0, invol0), t0 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        time.sleep(self.sz["idle"])
        cpu1, (vol1, invol1), t1 = cpu_seconds(pid), context_switches(pid), time.monotonic()
        elapsed = t1 - t0
        requests = self.api.requests()[requests_before:]
        return {"volumes": volumes, "seconds": round(elapsed, 2),
                "cpu_percent": 100.0 * (cpu1 - cpu0) / elapsed,
                "wakeups_per_second": (vol1 - vol0) / elapsed,
                "involuntary_switches_per_second": (invol1 - invol0) / elapsed,
                "rss_mib": status_kib(pid, "VmRSS") / 1024.0,
                "rss_anon_mib": (status_kib(pid, "RssAnon") or 0) / 1024.0,
                "api_requests_per_minute": len(requests) * 60.0 / elapsed,
                "api_requests": dict(collections.Counter(request_kind(r) for r in requests))}

    def single_pods(self, tag):
        """Latency of one pod's inline volume, one pod at a time (ms)."""
        latency, overhead, driver = [], [], []
        for i in range(self.sz["sequential"]):
            mark = self.tail.mark()
            t0 = time.time()
            obj = self.api.create(pod(f"seq-{tag}-{i}", ["v"]))
            c = self.tail.wait(mark, "NodePublishVolume", 1, 60, f"publish of seq-{tag}-{i}")[0]
            latency.append((c["time"] + c["duration"] - t0) * 1000.0)
            overhead.append((c["time"] - t0) * 1000.0)  # the reply minus the driver's own time
            driver.append(c["duration"] * 1000.0)
            self.api.remove("pods", "default", f"seq-{tag}-{i}")
            self.tail.wait(mark, "NodeUnpublishVolume", 1, 60, f"unpublish of seq-{tag}-{i}")
            pod_dir = os.path.join(self.root, "pods", obj["metadata"]["uid"])
            wait(lambda: not os.path.exists(pod_dir), 60, f"teardown of seq-{tag}-{i}", interval=0.002)
            self.count_errors(mark)
        return {"n": len(latency),
                "latency_median_ms": statistics.median(latency), "latency_p99_ms": percentile(latency, 99),
                "overhead_median_ms": statistics.median(overhead), "overhead_p99_ms": percentile(overhead, 99),
                "driver_median_ms": statistics.median(driver)}

    def create_pods(self, names, volumes=(), claims=()):
        t0 = time.time()
        for n in names:
            self.api.create(pod(n, volumes, claims))
        return t0

    def last_reply(self, calls):
        return max(c["time"] + c["duration"] for c in calls)

    def publish_phases(self, calls):
        stages = [("NodeStageVolume", c["request"]) for c in calls if c["method"] == "NodeStageVolume"]
        publishes = [("NodePublishVolume", c["request"]) for c in calls if c["method"] == "NodePublishVolume"]
        return [p for p in (stages, publishes) if p]

    def teardown_phases(self, calls):
        unpub = [("NodeUnpublishVolume", c["request"]) for c in calls if c["method"] == "NodeUnpublishVolume"]
        unstage = [("NodeUnstageVolume", c["request"]) for c in calls if c["method"] == "NodeUnstageVolume"]
        return [p for p in (unpub, unstage) if p]

    def floor_for(self, scenario, setup_calls, teardown_calls, first_repeat):
        """The same calls, replayed directly, kvolumed stopped meanwhile.
        Returns {direction: (seconds, concurrency)} at the best concurrency,
        and every concurrency tried."""
        def moved(phases):
            out = []
            for phase in phases:
                out.append([(m, json.loads(json.dumps(r).replace(self.root + "/", self.floor_root + "/")))
                            for m, r in phase])
            return out
        setup, teardown = moved(self.publish_phases(setup_calls)), moved(self.teardown_phases(teardown_calls))
        tried = {"setup": {}, "teardown": {}}
        if first_repeat:
            candidates = {"setup": FLOOR_CONCURRENCY, "teardown": FLOOR_CONCURRENCY}
        else:
            candidates = {d: (self.best[(scenario, d)],) for d in ("setup", "teardown")}
        self.agent.send_signal(signal.SIGSTOP)
        try:
            for c in sorted(set(candidates["setup"]) | set(candidates["teardown"])):
                for method, req in (x for phase in setup for x in phase):
                    path = req.get("staging_target_path") if method == "NodeStageVolume" else \
                        os.path.dirname(req["target_path"])
                    os.makedirs(path, exist_ok=True)
                t_up, err_up = self.floor.run(setup, c)
                t_down, err_down = self.floor.run(teardown, c)
                if err_up or err_down:
                    # Clean up one call at a time (all idempotent), then try the next.
                    self.floor.run(teardown, 1)
                for direction, t, err in (("setup", t_up, err_up), ("teardown", t_down, err_down)):
                    if c in candidates[direction]:
                        tried[direction][c] = {"seconds": t, "errors": dict(collections.Counter(err))}
                if mounts_under(self.floor_root):
                    raise SystemExit(f"bench: the floor's replay left mounts under {self.floor_root}")
                shutil.rmtree(self.floor_root, ignore_errors=True)
        finally:
            self.agent.send_signal(signal.SIGCONT)
        best = {}
        for direction, results in tried.items():
            valid = {c: r["seconds"] for c, r in results.items() if not r["errors"]}
            if not valid:
                best[direction] = (None, None)
                continue
            c = min(valid, key=valid.get)
            best[direction] = (valid[c], c)
            if first_repeat:
                self.best[(scenario, direction)] = c
        return best, tried

    def shared(self, first_repeat):
        n = self.sz["shared_pods"]
        for m in ("NodePublishVolume", "NodeUnpublishVolume"):
            self.control.delay(m, SHARED_DELAY)
        try:
            mark = self.tail.mark()
            names = [f"shared-{i}" for i in range(n)]
            t0 = self.create_pods(names, claims=[SHARED_CLAIM])
            up_calls = self.tail.wait(mark, "NodePublishVolume", n, 600)
            up = self.last_reply(up_calls) - t0
            up_calls = self.tail.since(mark)
            mark2 = self.tail.mark()
            t0 = time.time()
            for name in names:
                self.api.remove("pods", "default", name)
            self.tail.wait(mark2, "NodeUnstageVolume", 1, 600)
            down_calls = self.tail.since(mark2)
            down = self.last_reply(down_calls) - t0
            self.wait_clean("the shared PV's teardown")
            self.count_errors(mark)
            floor, tried = self.floor_for("shared", up_calls, down_calls, first_repeat)
        finally:
            self.control.clear_faults()
        return self.with_floor({"setup_seconds": up, "teardown_seconds": down,
                                "stages": sum(c["method"] == "NodeStageVolume" for c in up_calls),
                                "overlap": max_overlap([c for c in up_calls if c["method"] == "NodePublishVolume"])},
                               floor, tried)

    @staticmethod
    def with_floor(result, floor, tried):
        for d in ("setup", "teardown"):
            seconds, c = floor[d]
            result[f"floor_{d}_seconds"] = seconds
            result[f"floor_{d}_concurrency"] = c
            result[f"{d}_ratio"] = result[f"{d}_seconds"] / seconds if seconds else None
        result["floor_tried"] = tried
        return result

    def repeat(self, r):
        first = r == 0
        res = {}
        log(f"repeat {r + 1}: idle, empty node ({self.sz['idle']:.0f} s)")
        res["idle_empty"] = self.idle(0)
        log(f"repeat {r + 1}: single pods, empty node")
        res["single_empty"] = self.single_pods(f"e{r}")
        log(f"repeat {r + 1}: {self.sz['shared_pods']} pods sharing one PV, and the floor")
        res["shared"] = self.shared(first)

        pods, vols = self.sz["burst_pods"], self.sz["burst_volumes"]
        total = pods * vols
        log(f"repeat {r + 1}: burst of {pods} pods × {vols} inline volumes")
        names = [f"burst-{r}-{i}" for i in range(pods)]
        mark = self.tail.mark()
        t0 = self.create_pods(names, volumes=[f"v{j}" for j in range(vols)])
        created = time.time() - t0
        up_calls = self.tail.wait(mark, "NodePublishVolume", total, 600)
        burst = {"setup_seconds": self.last_reply(up_calls) - t0, "create_pods_seconds": created}
        up_calls = self.tail.since(mark)
        wait(lambda: mounts_under(self.root) >= total, 300, f"{total} mounts", interval=0.05)

        # Beside published volumes, not in the burst's tail: since the intent
        # log, the burst's records are made durable after its calls, and a pod
        # meeting that tail waits behind its journal commits for the one
        # flush before its own call (the mount benchmark waits the same way
        # after its fill).
        self.settle()
        log(f"repeat {r + 1}: single pods beside {total} published volumes")
        res["single_beside"] = self.single_pods(f"b{r}")
        log(f"repeat {r + 1}: idle with {total} volumes ({self.sz['idle']:.0f} s)")
        res["idle_full"] = self.idle(total)

        log(f"repeat {r + 1}: burst teardown, and the floor")
        mark2 = self.tail.mark()
        t0 = time.time()
        for name in names:
            self.api.remove("pods", "default", name)
        self.tail.wait(mark2, "NodeUnpublishVolume", total, 600)
        down_calls = self.tail.since(mark2)
        burst["teardown_seconds"] = self.last_reply(down_calls) - t0
        self.wait_clean("the burst's teardown")
        burst["clean_seconds"] = time.time() - t0
        self.count_errors(mark)
        floor, tried = self.floor_for("burst", up_calls, down_calls, first)
        res["burst"] = self.with_floor(burst, floor, tried)
        return res


def max_overlap(calls):
    """The most calls in the driver at one moment (from start and duration)."""
    edges = sorted([(c["time"], 1) for c in calls] + [(c["time"] + c["duration"], -1) for c in calls],
                   key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def build_description():
    build = os.path.dirname(os.path.dirname(kvolumed_path()))
    buildtype = "?"
    try:
        opts = json.loads(subprocess.run(["meson", "introspect", "--buildoptions", build], capture_output=True,
                                         text=True).stdout)
        buildtype = next(o["value"] for o in opts if o["name"] == "buildtype")
    except (ValueError, StopIteration):
        pass
    git = lambda *a: subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True).stdout.strip()  # noqa
    commit = git("rev-parse", "--short", "HEAD") or "?"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    return {"build_dir": build, "buildtype": buildtype, "commit": commit}


# ---- the report ----------------------------------------------------------------


def fmt(s, digits=2, unit=""):
    if s is None:
        return "n/a", "n/a"
    med = f"{s['median']:.{digits}f}{unit}"
    spread = f"{s['min']:.{digits}f}–{s['max']:.{digits}f}{unit}" if s["n"] > 1 else "(1 run)"
    return med, spread


def standing(ok):
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def render(result):
    m, c, sz, fig = result["machine"], result["conditions"], result["sizes"], result["figures"]
    total = sz["burst_pods"] * sz["burst_volumes"]
    lines = [
        "# kvolumed benchmark report", "",
        f"Run {result['started']} to {result['finished']} by `test/bench/run"
        f"{' --quick' if result['quick'] else ''} --repeat {result['repeat']}`"
        f"{' (quick: reduced sizes, not comparable with the targets)' if result['quick'] else ''}.", "",
        "## Machine", "",
        f"- CPU: {m['cpu']}, {m['cpus']} cores; {m['memory_gib']} GiB memory",
        f"- kernel {m['kernel']}, Debian {m['debian']}",
        f"- root-dir's file system: {m['root_dir_fs']} on {m['root_dir_source']}"
        + (" — **tmpfs: durability is free there, the figures are too good**" if m["root_dir_fs"] == "tmpfs" else ""),
        f"- load average at the start: {' '.join(m['loadavg'])} (other work on the machine shares its cores)",
        "", "## Conditions", "",
        f"- kvolumed {c['commit']}, meson buildtype `{c['buildtype']}` ({c['build_dir']}); log level warning; "
        "default `csi.max-parallel` (64); the fake API server's full-power identity (not the Node authorizer)",
        "- the fake API server (test/doubles/fakeapi) runs in the benchmark's Python process; the mock CSI "
        "driver (test/doubles/mockcsi, Python grpcio, 64 worker threads) in tmpfs mode, doing real mounts with "
        "mount(8); no attach (`attachRequired: false`); `--op-lock target`: like AWS EBS's driver, it refuses "
        "(ABORTED) a second call only for the same volume *and* target path, so the publishes of pods sharing a "
        "volume can run side by side (with the default, per-volume lock, as GCE PD's, they cannot)",
        f"- each scenario repeated {result['repeat']} times on one kvolumed process; figures are the median "
        "over the repeats, with min–max; a percentile is taken within a repeat",
        f"- burst: {sz['burst_pods']} pods × {sz['burst_volumes']} inline volumes, created at once; time from "
        "the first pod's creation to the last NodePublishVolume reply (driver's call log), and from the first "
        "deletion to the last NodeUnpublishVolume reply",
        f"- shared PV: {sz['shared_pods']} pods using one PV (stage once, publish per pod), the driver taking "
        f"{SHARED_DELAY * 1000:.0f} ms per NodePublishVolume and NodeUnpublishVolume; until the last publish "
        "reply, and from the first deletion to the NodeUnstageVolume reply",
        f"- single pods: {sz['sequential']} pods per repeat, one at a time, one inline volume each: from just "
        "before the create in the fake API server to the NodePublishVolume reply; *overhead* = that minus "
        "the driver's own time (its call log's duration), i.e. everything but the driver's work; beside "
        f"{total} published volumes: the same with the burst's pods in place",
        f"- the floor: kvolumed stopped (SIGSTOP), the same successful CSI calls taken from the driver's call "
        "log replayed by a minimal Python grpcio client (one channel, futures) at concurrency "
        f"{', '.join(map(str, FLOOR_CONCURRENCY))} (first repeat; later repeats at the best of the first), "
        "stage before publish, unpublish before unstage; a concurrency at which the driver refused a call is "
        "not counted",
        f"- idle: {sz['idle']:.0f} s after {sz['settle']:.0f} s of rest; CPU = utime+stime from /proc/PID/stat; "
        "wake-ups = voluntary context switches of all threads (/proc/PID/task/*/status); RSS = VmRSS at the "
        "end; API requests = every request the fake API server received in the window (a watch opened "
        "before it is not counted)",
        "", "## Figures", "",
        "| # | figure | kvolumed (median) | spread (min–max) | target | standing |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def row(n, name, s, target="", ok=None, digits=2, unit=""):
        med, spread = fmt(s, digits, unit)
        lines.append(f"| {n} | {name} | {med} | {spread} | {target} | {standing(ok) if target else ''} |")

    def le(s, limit):
        return None if s is None else s["median"] <= limit

    b, sh = "burst", "shared"
    row(1, f"burst {total} volumes: all published (s)", fig[f"{b}.setup_seconds"], digits=3)
    row(1, "burst: all torn down (s)", fig[f"{b}.teardown_seconds"], digits=3)
    row(1, "burst: ÷ floor, set-up", fig[f"{b}.setup_ratio"], "≤ 1.3×", le(fig[f"{b}.setup_ratio"], 1.3),
        unit="×")
    row(1, "burst: ÷ floor, teardown", fig[f"{b}.teardown_ratio"], "≤ 1.3×",
        le(fig[f"{b}.teardown_ratio"], 1.3), unit="×")
    row(2, f"shared PV, {sz['shared_pods']} pods: all published (s)", fig[f"{sh}.setup_seconds"], digits=3)
    row(2, "shared PV: all torn down (s)", fig[f"{sh}.teardown_seconds"], digits=3)
    row(2, "shared PV: ÷ floor, set-up", fig[f"{sh}.setup_ratio"], "≤ 1.3×", le(fig[f"{sh}.setup_ratio"], 1.3),
        unit="×")
    row(2, "shared PV: ÷ floor, teardown", fig[f"{sh}.teardown_ratio"], "≤ 1.3×",
        le(fig[f"{sh}.teardown_ratio"], 1.3), unit="×")
    row(2, "shared PV: most publishes in the driver at once", fig[f"{sh}.overlap"], digits=0)
    row(3, "single pod, empty node: creation → publish reply (ms)", fig["single_empty.latency_median_ms"])
    row(3, "single pod, empty node: p99 (ms)", fig["single_empty.latency_p99_ms"])
    row(3, "single pod, empty node: overhead median (ms)", fig["single_empty.overhead_median_ms"], "≤ 5 ms",
        le(fig["single_empty.overhead_median_ms"], 5))
    row(3, "single pod, empty node: overhead p99 (ms)", fig["single_empty.overhead_p99_ms"], "≤ 10 ms",
        le(fig["single_empty.overhead_p99_ms"], 10))
    row(3, f"single pod beside {total}: overhead median (ms)", fig["single_beside.overhead_median_ms"],
        "≤ 5 ms", le(fig["single_beside.overhead_median_ms"], 5))
    row(3, f"single pod beside {total}: overhead p99 (ms)", fig["single_beside.overhead_p99_ms"], "≤ 10 ms",
        le(fig["single_beside.overhead_p99_ms"], 10))
    row(3, f"single pod beside {total} ÷ empty node, overhead median", fig["single_ratio"], "≤ 1.5×",
        le(fig["single_ratio"], 1.5), unit="×")
    row(3, "the driver's own time per NodePublishVolume (ms)", fig["single_empty.driver_median_ms"])
    row(4, "floor: burst set-up (s)", fig[f"{b}.floor_setup_seconds"], digits=3)
    row(4, "floor: burst teardown (s)", fig[f"{b}.floor_teardown_seconds"], digits=3)
    row(4, "floor: shared PV set-up (s)", fig[f"{sh}.floor_setup_seconds"], digits=3)
    row(4, "floor: shared PV teardown (s)", fig[f"{sh}.floor_teardown_seconds"], digits=3)
    row(5, "idle, empty node: CPU (% of one core)", fig["idle_empty.cpu_percent"], digits=3)
    row(5, f"idle, {total} volumes: CPU (% of one core)", fig["idle_full.cpu_percent"],
        f"flat (within {FLAT_CPU_PERCENT} % of the empty node's)", fig["cpu_flat"], digits=3)
    row(5, "idle, empty node: wake-ups/s", fig["idle_empty.wakeups_per_second"])
    row(5, f"idle, {total} volumes: wake-ups/s", fig["idle_full.wakeups_per_second"])
    row(5, "idle, empty node: RSS (MiB)", fig["idle_empty.rss_mib"], digits=1)
    row(5, f"idle, {total} volumes: RSS (MiB)", fig["idle_full.rss_mib"], "≤ 16 MiB",
        le(fig["idle_full.rss_mib"], 16), digits=1)
    row(6, f"API requests per minute, idle with {total} volumes", fig["idle_full.api_requests_per_minute"],
        "0", le(fig["idle_full.api_requests_per_minute"], 0), digits=1)
    row(6, "API requests per minute, idle empty node", fig["idle_empty.api_requests_per_minute"], "0",
        le(fig["idle_empty.api_requests_per_minute"], 0), digits=1)
    if result["quick"]:
        lines += ["", "Quick run: the sizes are reduced, so the standings say little about the targets."]

    lines += ["", "## kubelet, as issue 15 measured it", "",
              "| scenario | kubelet 1.25 (issue 15) | kvolumed here |", "| --- | --- | --- |"]
    med = lambda key, d=3: "n/a" if fig[key] is None else f"{fig[key]['median']:.{d}f}"  # noqa: E731
    lines.append(f"| 1 burst | {KUBELET['burst']} | {total} volumes ({sz['burst_pods']} pods × "
                 f"{sz['burst_volumes']}): all published {med(b + '.setup_seconds')} s after the first pod's "
                 "creation |")
    lines.append(f"| 2 shared PV | {KUBELET['shared']} | {sz['shared_pods']} pods at {SHARED_DELAY * 1000:.0f} ms "
                 f"per publish: all published in {med(sh + '.setup_seconds')} s |")
    lines.append(f"| 3 single pod | {KUBELET['single']} | the driver's own time + "
                 f"{med('single_empty.overhead_median_ms', 2)} ms (median), "
                 f"+ {med('single_beside.overhead_median_ms', 2)} ms beside {total} volumes |")

    lines += ["", "## Details", ""]
    for key, title in (("burst", "burst"), ("shared", "shared PV")):
        tried = result["floor_tried"].get(key) or {}
        for direction in ("setup", "teardown"):
            parts = []
            for conc, r in sorted(tried.get(direction, {}).items(), key=lambda x: int(x[0])):
                e = f", driver refused {r['errors']}" if r["errors"] else ""
                parts.append(f"{conc}: {r['seconds']:.3f} s{e}")
            if parts:
                lines.append(f"- floor, {title} {direction}, first repeat, by concurrency: {'; '.join(parts)}")
    lines.append(f"- burst: creating the pods in the fake API server took "
                 f"{med(b + '.create_pods_seconds')} s (median); every mount and directory gone "
                 f"{med(b + '.clean_seconds')} s after the first deletion")
    lines.append(f"- shared PV: NodeStageVolume calls per repeat: {med(sh + '.stages', 0)}")
    reqs = result.get("idle_api_requests") or {}
    lines.append(f"- API requests in the idle windows, by kind: {reqs or 'none'}"
                 + (" (a WATCH there is a watch opened again after its timeoutSeconds ran out)"
                    if any(k.startswith("WATCH") for k in reqs) else ""))
    errs = result.get("driver_errors") or {}
    lines.append(f"- calls the driver answered with an error during kvolumed's runs: {errs or 'none'}"
                 + (" (the mock driver answers ABORTED to a second call on a volume with one in flight)"
                    if any("ABORTED" in k for k in errs) else ""))
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description="kvolumed's benchmark suite (see test/bench/run)")
    ap.add_argument("--repeat", type=int, default=None, help="runs of every scenario (default 5; --quick: 1)")
    ap.add_argument("--quick", action="store_true", help="every scenario once at reduced size")
    ap.add_argument("--report", default="/var/tmp/kvolumed-bench.md", help="the Markdown report to write")
    ap.add_argument("--workdir", default="/var/tmp", help="disk-backed directory for root-dir")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench: run as root (test/bench/run)")
    sz = dict(SIZES["quick" if args.quick else "full"])
    if args.repeat is not None:
        sz["repeat"] = args.repeat
    if not os.access(kvolumed_path(), os.X_OK):
        raise SystemExit(f"bench: no {kvolumed_path()}: build first (test/bench/run does)")

    suite = Suite(args, sz)
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    runs = []
    try:
        result = {"machine": machine(suite.root), "conditions": build_description(), "sizes": sz,
                  "quick": args.quick, "repeat": sz["repeat"], "started": started}
        suite.start()
        for r in range(sz["repeat"]):
            runs.append(suite.repeat(r))
    finally:
        suite.stop()
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    result["runs"] = runs
    fig = {}
    for section in ("idle_empty", "idle_full", "single_empty", "single_beside", "burst", "shared"):
        for key, value in runs[0][section].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                fig[f"{section}.{key}"] = summary([run[section][key] for run in runs])
    for key in ("burst.setup_ratio", "burst.teardown_ratio", "shared.setup_ratio", "shared.teardown_ratio",
                "burst.floor_setup_seconds", "burst.floor_teardown_seconds",
                "shared.floor_setup_seconds", "shared.floor_teardown_seconds"):
        fig.setdefault(key, summary([run[key.split(".")[0]][key.split(".")[1]] for run in runs]))
    fig["single_ratio"] = summary([run["single_beside"]["overhead_median_ms"] /
                                   run["single_empty"]["overhead_median_ms"] for run in runs])
    cpu_empty, cpu_full = fig["idle_empty.cpu_percent"], fig["idle_full.cpu_percent"]
    fig["cpu_flat"] = cpu_full["median"] - cpu_empty["median"] <= FLAT_CPU_PERCENT
    result["figures"] = fig
    result["floor_tried"] = {k: runs[0][k]["floor_tried"] for k in ("burst", "shared")}
    idle_requests = collections.Counter()
    for run in runs:
        for section in ("idle_empty", "idle_full"):
            idle_requests.update(run[section]["api_requests"])
    result["idle_api_requests"] = dict(idle_requests)
    result["driver_errors"] = dict(suite.driver_errors)
    report = render(result)
    with open(args.report, "w") as f:
        f.write(report)
    json_path = re.sub(r"\.md$", "", args.report) + ".json"
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(report)
    log(f"report: {args.report}; raw figures: {json_path}")


if __name__ == "__main__":
    main()
