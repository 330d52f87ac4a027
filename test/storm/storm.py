#!/usr/bin/python3
"""Fault storms under load, run by test/storm/run inside a private mount
namespace (as root): the real kvolumed against the fake API server and the
mock CSI driver (tmpfs mode), while pods with inline and PVC volumes are
created and deleted continuously, with one fault after another:

  baseline      churn, no fault (the reference figures)
  watch-drops   every watch dropped every 3 s (cleanly and abruptly in turn)
  api-500       every API request answered 500
  api-429       every API request answered 429 with Retry-After
  api-outage    the API server gone: first half every connection closed
                unanswered (the attempts are counted), second half nothing
                listening (ECONNREFUSED); then back with the same objects
  csi-hang      a share of the node calls hang (until kvolumed gives up)
  csi-crash     the driver crashes during a call and restarts, again and again
  csi-errors    20 % of the node calls fail UNAVAILABLE, ABORTED or
                DEADLINE_EXCEEDED, before or after doing the work

After each fault the churn stops and the node must converge (see converged()
and audit.py for the checks); the report says, per phase, the load held, the
faults injected, the convergence time, kvolumed's RSS, the API requests, the
CSI calls in flight and the result of every check.  Exit status 1 when a
check failed."""
import argparse
import collections
import hashlib
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "test"))
sys.path.insert(0, HERE)

import audit  # noqa: E402
from doubles.mockcsi.control import ControlClient  # noqa: E402
from doubles.mockcsi.faults import read_call_log  # noqa: E402
from doubles.mockcsi.sweep import cleanup as driver_cleanup  # noqa: E402

PYTHON = "/usr/bin/python3"
DRIVER = "mock.csi.kvolumed.io"
NODE = "storm-node"
VOLUMES_PER_POD = 5
SHARED_CLAIMS = 4
PHASES = ("baseline", "watch-drops", "api-500", "api-429", "api-outage", "csi-hang", "csi-crash", "csi-errors")
NODE_OPS = audit.NODE_OPS
RETRY_AFTER = 5


CHECKS_EXPLAINED = (
    "converged: within --converge-timeout of the fault's end (churn stopped), every pod that exists has "
    "each volume published (the driver's state, and exactly one mount at its target), every PV in use is "
    "staged, nothing else is mounted under root-dir, no pods/<uid> directory of a gone pod and no "
    "staging directory of an unused PV is left, and kvolumed's /volumes shows nothing uncertain or running",
    "duplicate publish / unpublish / stage / unstage, unstage while published, driver refusal: from the "
    "driver's call log, see test/storm/audit.py (a repeated call is a duplicate only when kvolumed had seen "
    "the previous one succeed: OK, answered before the client gave up, more than 2 s before its deadline, "
    "not just before a driver crash); every NodeStage is therefore matched by at most one NodeUnstage",
    "/healthz answered: every probe (every 0.5 s, 2 s timeout) of the phase and its convergence got 200",
    "CSI volume operations in flight <= max-parallel: the most Node{Stage,Unstage,Publish,Unpublish}Volume "
    "calls the driver served at once whose client still waited (not cancelled, deadline not passed), "
    "counted at every call's start (NodeGetVolumeStats has a limit of its own in kvolumed; all calls are "
    "reported too)",
    "API requests within the backoff (500 and 429 storms, every request failed): per informer no more "
    "list/watch requests than client-go's reflector backoff allows (800 ms doubling to 30 s), per object "
    "no more GETs than the lookup backoff allows (100 ms doubling to 3.2 s), and in the 429 storm no "
    "request to the same object or collection sooner than Retry-After after a 429; within the client's "
    "rate limit: no more requests than its token bucket allows (burst 100, 50/s)",
    "connection attempts bounded during the outage: connections to the API port, counted while they are "
    "closed unanswered (first half of the outage), at most 10 a second",
    "RSS: kvolumed's VmRSS sampled every second; at the end at most twice the RSS after the warm-up plus "
    "16 MiB, and never above 256 MiB",
)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sha(s):
    return hashlib.sha256(s.encode()).hexdigest()


class FakeApi:
    """The fake API server as a process of its own (its threads must not
    share a GIL with the harness), driven through its control port."""

    def __init__(self, work):
        self.dir = os.path.join(work, "api")
        self.proc = subprocess.Popen([PYTHON, "-m", "doubles.fakeapi", "--dir", self.dir, "--bookmark-interval", "5"],
                                     env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "test")),
                                     stdout=subprocess.PIPE, stderr=open(os.path.join(work, "fakeapi.log"), "w"),
                                     text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("storm: the fake API server did not start (see fakeapi.log)")
        self.endpoints = json.loads(line)
        self.control = self.endpoints["control"]

    def call(self, method, path, body=None, timeout=30):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.control + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"fakeapi control {method} {path}: {e.code} {e.read()[:300]!r}") from None

    def create(self, obj):
        return self.call("POST", "/objects", obj)

    def remove(self, resource, name, namespace="default"):
        return self.call("DELETE", f"/objects/{resource}/{name}?force=1&namespace={namespace}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Driver:
    """The mock CSI driver; restarted with the same state after a crash."""

    def __init__(self, work, sockdir, state_dir):
        self.endpoint = f"unix://{sockdir}/csi.sock"
        self.state_dir = state_dir
        self.stderr = open(os.path.join(work, "mockcsi.log"), "a")
        self.control = ControlClient(os.path.join(state_dir, "control.sock"), timeout=10)
        self.proc = None
        self.starts = 0
        self.start()

    def start(self):
        self.proc = subprocess.Popen([PYTHON, "-m", "doubles.mockcsi", "--endpoint", self.endpoint, "--name", DRIVER,
                                      "--node-id", NODE, "--state-dir", self.state_dir, "--tmpfs"],
                                     env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "test")),
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        if "MOCKCSI READY" not in line:
            raise SystemExit(f"storm: the mock CSI driver did not start: {line!r}")
        self.starts += 1

    def alive(self):
        return self.proc.poll() is None

    def calls(self):
        return read_call_log(os.path.join(self.state_dir, "calls.jsonl"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout):
    t = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read(), time.monotonic() - t
    except urllib.error.HTTPError as e:
        return e.code, b"", time.monotonic() - t
    except OSError:
        return None, b"", time.monotonic() - t


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Samplers:
    """Background probes: /healthz every 0.5 s (2 s timeout), and every
    second kvolumed's VmRSS, its /volumes counters, the driver's calls in
    flight, the API server's unanswered connections."""

    def __init__(self, storm):
        self.s = storm
        self.stop = threading.Event()
        self.health = []       # (time, status, seconds)
        self.samples = []      # (time, rss KiB, /volumes dict, in flight now, connections reset)
        self.inflight_max = []  # (time, most since the last sample: volume operations, all calls, stats)
        self.threads = [threading.Thread(target=self._health, daemon=True),
                        threading.Thread(target=self._sample, daemon=True)]
        for t in self.threads:
            t.start()

    def _health(self):
        url = f"http://{self.s.listen}/healthz"
        while not self.stop.wait(0.5):
            status, _, took = http_get(url, 2.0)
            self.health.append((time.time(), status, took))

    def _sample(self):
        url = f"http://{self.s.listen}/volumes"
        while not self.stop.wait(1.0):
            rss = rss_kib(self.s.agent.pid)
            status, body, _ = http_get(url, 2.0)
            vols = json.loads(body) if status == 200 else None
            inflight = None
            try:
                if self.s.driver.alive():
                    r = self.s.driver.control.in_flight(reset_max=True)
                    inflight = r["now"]
                    self.inflight_max.append((time.time(), r["volume_ops_max"], r["max"],
                                              r["by_method_max"].get("NodeGetVolumeStats", 0)))
            except Exception:
                pass
            try:
                resets = self.s.api.call("GET", "/state", timeout=5)["connectionsReset"]
            except Exception:
                resets = None
            self.samples.append((time.time(), rss, vols, inflight, resets))

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(5)


class Churn:
    """Keeps `pods` pods of 5 volumes on the node and replaces `rate` of them
    a second: half of the pods have only inline volumes, 40 % a claim of their
    own (PV + PVC made with the pod, removed 10 s after it) and 10 % one of
    SHARED_CLAIMS claims shared by several pods."""

    def __init__(self, storm, pods, rate):
        self.s = storm
        self.target_pods = pods
        self.rate = rate
        self.seq = 0
        self.pods = {}            # name -> {"uid", "volumes": [(name, kind, pv, handle)]}
        self.pending_claims = []  # (remove after, seq)
        self.running = threading.Event()
        self.quit = threading.Event()
        self.created = []         # times
        self.deleted = []
        self.errors = collections.Counter()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def make_shared(self):
        for k in range(SHARED_CLAIMS):
            self._pv_pvc(f"shared-{k}", f"h-shared-{k}", "ReadWriteMany")

    def _pv_pvc(self, name, handle, mode="ReadWriteOnce"):
        api = self.s.api
        # The claim first: the PV is bound to its uid, as the PV controller
        # binds (kvolumed, as kubelet, mounts no PV whose claimRef.uid is not
        # the claim's).
        claim = api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "metadata": {"name": "pvc-" + name, "namespace": "default"},
                            "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "64Mi"}},
                                     "volumeName": "pv-" + name},
                            "status": {"phase": "Bound", "accessModes": [mode], "capacity": {"storage": "64Mi"}}})
        api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-" + name},
                    "spec": {"capacity": {"storage": "64Mi"}, "accessModes": [mode],
                             "persistentVolumeReclaimPolicy": "Delete",
                             "claimRef": {"namespace": "default", "name": "pvc-" + name,
                                          "uid": claim["metadata"]["uid"]},
                             "csi": {"driver": DRIVER, "volumeHandle": handle}},
                    "status": {"phase": "Bound"}})

    def add_pod(self):
        seq = self.seq
        self.seq += 1
        name = f"storm-{seq}"
        kind = seq % 10
        volumes, specs = [], []
        for j in range(VOLUMES_PER_POD):
            vname = f"v{j}"
            if j == 0 and 5 <= kind <= 8:
                self._pv_pvc(f"storm-{seq}", f"h-storm-{seq}")
                specs.append({"name": vname, "persistentVolumeClaim": {"claimName": f"pvc-storm-{seq}"}})
                volumes.append((vname, "pvc", f"pv-storm-{seq}", f"h-storm-{seq}"))
            elif j == 0 and kind == 9:
                k = (seq // 10) % SHARED_CLAIMS
                specs.append({"name": vname, "persistentVolumeClaim": {"claimName": f"pvc-shared-{k}"}})
                volumes.append((vname, "pvc", f"pv-shared-{k}", f"h-shared-{k}"))
            else:
                specs.append({"name": vname, "csi": {"driver": DRIVER}})
                volumes.append((vname, "inline", None, None))
        pod = self.s.api.create({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "volumes": specs,
                     "containers": [{"name": "c", "image": "x",
                                     "volumeMounts": [{"name": v["name"], "mountPath": "/" + v["name"]}
                                                      for v in specs]}]},
            "status": {"phase": "Running"}})
        uid = pod["metadata"]["uid"]
        volumes = [(v, k, pv, h if h else "csi-" + sha(uid + v)) for v, k, pv, h in volumes]
        with self.lock:
            self.pods[name] = {"uid": uid, "volumes": volumes, "seq": seq}
        self.created.append(time.time())

    def remove_pod(self, name):
        with self.lock:
            p = self.pods.pop(name)
        self.s.api.remove("pods", name)
        self.deleted.append(time.time())
        if 5 <= p["seq"] % 10 <= 8:
            self.pending_claims.append((time.time() + 10, p["seq"]))

    def remove_claims(self, everything=False):
        now = time.time()
        keep = []
        for when, seq in self.pending_claims:
            if everything or when <= now:
                self.s.api.remove("persistentvolumeclaims", f"pvc-storm-{seq}")
                self.s.api.remove("persistentvolumes", f"pv-storm-{seq}", namespace="")
            else:
                keep.append((when, seq))
        self.pending_claims = keep

    def fill(self):
        while len(self.pods) < self.target_pods:
            self.add_pod()

    def _loop(self):
        carry = 0.0
        next_tick = time.monotonic()
        while not self.quit.is_set():
            next_tick += 1.0
            if self.running.is_set():
                try:
                    carry += self.rate
                    n, carry = int(carry), carry - int(carry)
                    with self.lock:
                        victims = random.sample(sorted(self.pods), min(n, len(self.pods)))
                    for name in victims:
                        self.remove_pod(name)
                    self.fill()
                    self.remove_claims()
                except Exception as e:  # noqa: BLE001 - reported, the run goes on
                    self.errors[repr(e)[:120]] += 1
            self.quit.wait(max(0.0, next_tick - time.monotonic()))

    def snapshot(self):
        with self.lock:
            return {n: dict(p) for n, p in self.pods.items()}


def mounts_under(root):
    """Mount points under root, with their multiplicity."""
    c = collections.Counter()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp.startswith(root + "/"):
                c[mp] += 1
    return c


class Storm:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="kvstorm.", dir=args.workdir)
        self.sockdir = tempfile.mkdtemp(prefix="kvs.", dir="/tmp")
        self.root = os.path.join(self.work, "root")
        os.makedirs(self.root)
        # The driver's state (its JSON file is fsynced on every call) on a
        # tmpfs: the driver is not what is measured.  root-dir stays on disk.
        self.driver_state = os.path.join(self.work, "driver")
        os.makedirs(self.driver_state)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "kvstorm-driver", self.driver_state], check=True)
        self.listen = f"127.0.0.1:{free_port()}"
        self.api = self.driver = self.agent = self.samplers = self.churn = None
        self.results = []
        self.failed = []
        self.audit = audit.CallAudit()
        self.calls_seen = 0
        self.killed = []   # (driver pid, time) of SIGKILLs

    # --- set-up ------------------------------------------------------------

    def start(self):
        a = self.args
        self.api = FakeApi(self.work)
        self.api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "status": {}})
        self.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                         "spec": {"attachRequired": False, "volumeLifecycleModes": ["Persistent", "Ephemeral"]}})
        kubeconfig = self.api.call("POST", f"/nodes/{NODE}/kubeconfig", {"auth": "token"})["kubeconfig"]
        self.driver = Driver(self.work, self.sockdir, self.driver_state)
        config = os.path.join(self.work, "kvolumed.conf")
        with open(config, "w") as f:
            f.write(f"[agent]\nnode-name = {NODE}\nroot-dir = {self.root}\n"
                    f"[kubernetes]\nkubeconfig = {kubeconfig}\n"
                    f"[csi]\nregistration-dir =\ncall-timeout = {a.call_timeout}s\nmax-parallel = {a.max_parallel}\n"
                    f'[driver "{DRIVER}"]\nendpoint = {self.driver.endpoint}\n'
                    # The local API in the work directory, not the machine's /run.
                    f"[api]\nsocket = {self.work}/kvolumed.sock\n"
                    f"[metrics]\nlisten = {self.listen}\n[log]\nlevel = {a.log_level}\n")
        build = os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO, "build"))
        binary = os.path.join(build, "agent", "kvolumed")
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"storm: {binary} is not built")
        self.agent_log = os.path.join(self.work, "kvolumed.log")
        self.agent = subprocess.Popen([binary, "--config", config],
                                      env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"),
                                      stdout=subprocess.DEVNULL, stderr=open(self.agent_log, "w"))
        deadline = time.monotonic() + 30
        while http_get(f"http://{self.listen}/healthz", 1.0)[0] != 200:
            if self.agent.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("storm: kvolumed did not come up:\n" + open(self.agent_log).read()[-3000:])
            time.sleep(0.1)
        pods = max(1, a.volumes // VOLUMES_PER_POD)
        self.churn = Churn(self, pods, a.churn if a.churn is not None else max(1.0, pods / 25.0))
        self.churn.make_shared()
        self.samplers = Samplers(self)
        self.churn.thread.start()

    def stop(self):
        if self.churn:
            self.churn.quit.set()
        if self.samplers:
            self.samplers.close()
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
        if self.driver:
            try:
                self.driver.control.clear_faults()
            except Exception:
                pass
            self.driver.stop()
        if self.api:
            self.api.stop()
        # Whatever is left (a failed run) goes with the mount namespace, but
        # unmount it anyway so that the directories can be removed.
        if self.args.keep:
            subprocess.run(["cp", "-a", os.path.join(self.driver_state, "calls.jsonl"), self.work],
                           stderr=subprocess.DEVNULL)
        driver_cleanup(self.driver_state, under=self.root)
        for mp in sorted(mounts_under(self.root), key=len, reverse=True):
            subprocess.run(["umount", "-l", mp], stderr=subprocess.DEVNULL)
        subprocess.run(["umount", "-l", self.driver_state], stderr=subprocess.DEVNULL)
        if not self.args.keep:
            subprocess.run(["rm", "-rf", "--one-file-system", self.work, self.sockdir])

    # --- the state the node must reach -------------------------------------

    def converged(self):
        """[] when the node matches the pods that exist, else what differs."""
        pods = self.churn.snapshot()
        csi_dir = f"{self.root}/plugins/kubernetes.io/csi/{DRIVER}"
        want_eph, want_pub, want_staged = {}, collections.defaultdict(set), set()
        want_mounts = set()
        for p in pods.values():
            for vname, kind, pv, handle in p["volumes"]:
                if kind == "inline":
                    t = f"{self.root}/pods/{p['uid']}/volumes/kubernetes.io~csi/{vname}/mount"
                    want_eph[handle] = t
                else:
                    t = f"{self.root}/pods/{p['uid']}/volumes/kubernetes.io~csi/{pv}/mount"
                    want_pub[handle].add(t)
                    want_staged.add(handle)
                    want_mounts.add(f"{csi_dir}/{sha(handle)}/globalmount")
                want_mounts.add(t)
        problems = []
        have = mounts_under(self.root)
        missing = want_mounts - set(have)
        extra = set(have) - want_mounts
        doubled = [m for m, n in have.items() if n > 1]
        if missing:
            problems.append(f"{len(missing)} mounts missing, e.g. {sorted(missing)[0]}")
        if extra:
            problems.append(f"{len(extra)} mounts left over, e.g. {sorted(extra)[0]}")
        if doubled:
            problems.append(f"{len(doubled)} mount points mounted more than once, e.g. {doubled[0]}")
        pod_dirs = set(os.listdir(f"{self.root}/pods")) if os.path.isdir(f"{self.root}/pods") else set()
        uids = {p["uid"] for p in pods.values()}
        if pod_dirs - uids:
            problems.append(f"{len(pod_dirs - uids)} directories of gone pods under pods/, "
                            f"e.g. {sorted(pod_dirs - uids)[0]}")
        staging_dirs = set(os.listdir(csi_dir)) if os.path.isdir(csi_dir) else set()
        if staging_dirs - {sha(h) for h in want_staged}:
            problems.append(f"{len(staging_dirs - {sha(h) for h in want_staged})} staging directories of "
                            "unused volumes left")
        try:
            st = self.driver.control.state()
        except Exception as e:  # noqa: BLE001
            return problems + [f"driver state unreadable: {e}"]
        eph = {vid: e["target"] for vid, e in st["ephemeral"].items()}
        if eph != want_eph:
            lost = set(want_eph) - set(eph)
            left = set(eph) - set(want_eph)
            problems.append(f"driver's ephemeral volumes: {len(lost)} not published, {len(left)} not unpublished")
        pub = {vid: set(v["published"]) for vid, v in st["volumes"].items() if v["published"]}
        if pub != dict(want_pub):
            problems.append(f"driver's published persistent volumes differ: "
                            f"{sum(len(t) for t in want_pub.values())} wanted, "
                            f"{sum(len(t) for t in pub.values())} published")
        staged = {vid for vid, v in st["volumes"].items() if v["staged"]}
        if staged != want_staged:
            problems.append(f"driver's staged volumes: {len(want_staged - staged)} not staged, "
                            f"{len(staged - want_staged)} not unstaged")
        status, body, _ = http_get(f"http://{self.listen}/volumes", 2.0)
        if status != 200:
            problems.append("/volumes unanswered")
        else:
            v = json.loads(body)
            if v.get("uncertain") or v.get("running"):
                problems.append(f"kvolumed: {v.get('uncertain')} uncertain, {v.get('running')} running")
        return problems

    def wait_converged(self, timeout):
        t0 = time.time()
        last = None
        while True:
            last = self.converged()
            if not last:
                return time.time() - t0, []
            if time.time() - t0 > timeout:
                return None, last
            time.sleep(0.5)

    # --- faults ------------------------------------------------------------

    def inject(self, phase, seconds, counts):
        """Runs the fault of `phase` for `seconds`; fills counts."""
        a, d = self.api, self.driver
        end = time.time() + seconds
        if phase == "baseline":
            time.sleep(seconds)
        elif phase == "watch-drops":
            abrupt = False
            while time.time() < end:
                counts["watches dropped"] += a.call("POST", "/watches/close", {"abrupt": abrupt})["closed"]
                counts["drop rounds"] += 1
                abrupt = not abrupt
                time.sleep(max(0.0, min(3.0, end - time.time())))
        elif phase in ("api-500", "api-429"):
            status = 500 if phase == "api-500" else 429
            a.call("POST", "/faults/fail", {"count": 10 ** 9, "status": status,
                                            "retryAfter": RETRY_AFTER if status == 429 else None})
            if status == 500:
                # A server that fails everything (etcd gone, say) has cut its
                # watches too: every informer must list and watch again into
                # the storm.  The 429 storm keeps them, as the API priority
                # and fairness rejecting new requests does: pod events go on
                # arriving while every request fails.
                counts["watches dropped"] += a.call("POST", "/watches/close", {"abrupt": True})["closed"]
            time.sleep(seconds / 2)
            if status == 429:
                # Half-way, the watches end: the informers meet 429s too.
                counts["watches dropped"] += a.call("POST", "/watches/close", {"abrupt": True})["closed"]
            time.sleep(seconds / 2)
            a.call("POST", "/faults/clear")
        elif phase == "api-outage":
            first = seconds / 2
            r0 = a.call("GET", "/state")["connectionsReset"]
            a.call("POST", "/faults/refuse", {"seconds": first, "mode": "reset"})
            time.sleep(max(0.0, first - 0.05))
            counts["connections closed unanswered (first half)"] = a.call("GET", "/state")["connectionsReset"] - r0
            a.call("POST", "/faults/refuse", {"seconds": seconds - first + 0.05, "mode": "refuse"})
            time.sleep(seconds - first + 0.05)
            # Back with the same objects: wait until it listens again.
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", int(a.endpoints["server"].rsplit(":", 1)[1])), 1).close()
                    break
                except OSError:
                    time.sleep(0.05)
        elif phase == "csi-hang":
            for m in NODE_OPS:
                d.control.inject(m, hang_rate=self.args.hang_rate)
            time.sleep(seconds)
            d.control.clear_faults()
        elif phase == "csi-errors":
            for m in NODE_OPS:
                d.control.inject(m, error_rate={"rate": self.args.error_rate, "when": "either",
                                                "codes": ["UNAVAILABLE", "ABORTED", "DEADLINE_EXCEEDED"],
                                                "message": "injected by the storm"})
            time.sleep(seconds)
            d.control.clear_faults()
        elif phase == "csi-crash":
            k = 0
            while time.time() < end:
                method = ("NodePublishVolume", "NodeUnpublishVolume", "NodeStageVolume")[k % 3]
                when = ("before", "after")[(k // 3) % 2]
                k += 1
                d.control.inject(method, crash=when)
                t = time.time()
                while d.alive() and time.time() < min(end, t + 10):
                    time.sleep(0.02)
                if d.alive():
                    d.control.clear_faults()
                    if time.time() >= end:
                        break
                    # No such call came in 10 s: crash it from outside.
                    d.proc.kill()
                    d.proc.wait()
                    self.killed.append((d.proc.pid, time.time()))
                    counts["driver killed (SIGKILL)"] += 1
                else:
                    counts[f"driver crashed in {method} ({when} the work)"] += 1
                time.sleep(1.0)   # down for a second, as a container restart
                d.start()
                counts["driver restarts"] += 1
                time.sleep(max(0.0, min(self.args.crash_interval, end - time.time())))
        else:
            raise ValueError(phase)

    # --- one phase ---------------------------------------------------------

    def run_phase(self, phase, seconds):
        log(f"phase {phase}: {seconds:.0f} s of churn with the fault")
        counts = collections.Counter()
        self.api.call("DELETE", "/requests")
        self.churn.running.set()
        t0 = time.time()
        created0, deleted0 = len(self.churn.created), len(self.churn.deleted)
        self.inject(phase, seconds, counts)
        t1 = time.time()
        self.churn.running.clear()
        time.sleep(1.1)   # a churn tick in progress ends
        created, deleted = len(self.churn.created) - created0, len(self.churn.deleted) - deleted0
        self.churn.remove_claims(everything=True)
        tc = time.time()
        took, problems = self.wait_converged(self.args.converge_timeout)
        if took is not None:
            took += tc - t1   # from the end of the fault
        t2 = time.time()
        log(f"phase {phase}: " + (f"converged {took:.1f} s after the fault" if took is not None
                                   else f"NOT converged after {self.args.converge_timeout} s: {problems}"))
        requests = self.api.call("GET", "/requests", timeout=120)
        entries = self.driver.calls()
        new, self.calls_seen = entries[self.calls_seen:], len(entries)
        before = dict(self.audit.counts)
        examples_before = {r: len(self.audit.problems[r]) for r in audit.CallAudit.RULES}
        self.audit.feed(new, self.killed)
        audit_new = {r: self.audit.counts[r] - before.get(r, 0) for r in audit.CallAudit.RULES}
        self.examples = {r: self.audit.problems[r][examples_before[r]:] for r in audit.CallAudit.RULES}
        result = self.figures(phase, t0, t1, tc, t2, took, problems, counts, created, deleted, requests, new,
                              audit_new)
        self.results.append(result)
        return result

    def timeline(self, t0, t2, buckets=12):
        """The phase over time, from its start to its convergence (or the
        give-up), in up to `buckets` windows of at least 5 s: the slowest
        /healthz and its failed probes, the operations kvolumed has started
        and not finished and those it holds back (/volumes), and its RSS."""
        s = self.samplers
        width = max(5.0, (t2 - t0) / buckets)
        rows, start = [], t0
        while start < t2:
            end = min(t2, start + width)
            health = [(st, took) for (t, st, took) in s.health if start <= t < end]
            samples = [(r, v) for (t, r, v, _, _) in s.samples if start <= t < end]
            rows.append({
                "from s": round(start - t0, 1), "to s": round(end - t0, 1),
                "healthz slowest ms": round(1000 * max((x for _, x in health), default=0), 1),
                "healthz failed": sum(1 for st, _ in health if st != 200),
                "running max": max((v["running"] for _, v in samples if v), default=None),
                "held back max": max((v.get("heldBack", 0) for _, v in samples if v), default=None),
                "rss KiB max": max((r for r, _ in samples if r), default=None),
            })
            start = end
        return rows

    def figures(self, phase, t0, t1, tc, t2, took, problems, counts, created, deleted, requests, calls, audit_new):
        span = t1 - t0
        cf = audit.call_figures(calls, t0, t1)
        s = self.samplers
        rss = [r for (t, r, _, _, _) in s.samples if t0 <= t <= t2 and r]
        running = [v["running"] for (t, _, v, _, _) in s.samples if t0 <= t <= t2 and v]
        inflight = [m for (t, m, _, _) in s.inflight_max if t0 <= t <= t2 + 1]
        inflight_all = [m for (t, _, m, _) in s.inflight_max if t0 <= t <= t2 + 1]
        inflight_stats = [m for (t, _, _, m) in s.inflight_max if t0 <= t <= t2 + 1]
        health = [(st, took_) for (t, st, took_) in s.health if t0 <= t <= t2]
        checks = collections.OrderedDict()
        checks["converged"] = took is not None
        for rule, n in audit_new.items():
            checks["no " + rule] = n == 0
        checks["/healthz answered"] = bool(health) and all(st == 200 for st, _ in health)
        checks[f"CSI volume operations in flight <= max-parallel ({self.args.max_parallel})"] = \
            max(inflight, default=0) <= self.args.max_parallel
        api_fault = audit.api_figures(requests, t0, t1)
        api_after = audit.api_figures(requests, t1, min(t1 + 10, t2 + 0.001))
        api_detail = {}
        if phase in ("api-500", "api-429"):
            bad, api_detail = audit.check_backoff(requests, t0 + 0.5, t1 - 0.2,
                                                  RETRY_AFTER if phase == "api-429" else None)
            checks["API requests within the backoff"] = not bad
            api_detail["problems"] = bad[:5]
            counts[f"{'500' if phase == 'api-500' else '429'} answers"] = \
                api_fault["by_status"].get("500" if phase == "api-500" else "429", 0)
            bucket = 100 + 50 * span
            checks["API requests within the client's rate limit"] = api_fault["requests"] <= bucket
        if phase == "api-outage":
            half = counts["connections closed unanswered (first half)"]
            counts["outage seconds"] = round(span, 1)
            api_detail["connection attempts per second (first half)"] = round(half / (span / 2), 2)
            # 3 informers at the reflector's backoff plus a few object reads:
            # far below one attempt per volume; a fixed generous bound.
            checks["connection attempts bounded during the outage"] = half / (span / 2) <= 10
        for k, v in cf.items():
            if k in ("errors injected", "hangs injected", "crashes", "answers after the client gave up",
                     "answers near the deadline"):
                counts["CSI " + k] += v
        result = {
            "phase": phase, "seconds": round(span, 1),
            "load": {"pods": len(self.churn.pods), "pods created/s": round(created / span, 2),
                     "pods deleted/s": round(deleted / span, 2),
                     "volumes published/s": round((cf["NodePublishVolume ok"]) / span, 2),
                     "volumes unpublished/s": round((cf["NodeUnpublishVolume ok"]) / span, 2),
                     "stages": cf["NodeStageVolume ok"], "unstages": cf["NodeUnstageVolume ok"]},
            "faults": dict(counts),
            "convergence seconds": None if took is None else round(took, 1),
            "not converged": problems,
            "rss KiB": {"max": max(rss, default=None), "end": rss[-1] if rss else None},
            "api": {"during": api_fault, "10 s after": api_after, **api_detail},
            "csi in flight max": max(inflight, default=None),
            "csi calls in flight max": {"all": max(inflight_all, default=None),
                                        "NodeGetVolumeStats": max(inflight_stats, default=None)},
            "operations running max": max(running, default=None),
            "healthz": {"probes": len(health), "failed": sum(1 for st, _ in health if st != 200),
                        "slowest ms": round(1000 * max((x for _, x in health), default=0), 1)},
            "timeline": self.timeline(t0, t2),
            "checks": checks,
            "audit examples": {r: self.examples[r] for r in audit_new if audit_new[r]},
            "load average": open("/proc/loadavg").read().split()[:3],
        }
        for name, ok in checks.items():
            if not ok:
                self.failed.append(f"{phase}: {name}")
        return result

    def run(self):
        a = self.args
        phases = [p for p in PHASES if p in a.phases]
        seconds = max(3.0, a.minutes * 60.0 / max(1, len(phases)))
        log(f"warm-up: {self.churn.target_pods} pods x {VOLUMES_PER_POD} volumes")
        t0 = time.time()
        self.churn.fill()
        took, problems = self.wait_converged(a.converge_timeout)
        if took is None:
            self.failed.append("warm-up: not converged")
            log(f"warm-up: NOT converged: {problems}")
        self.warmup = {"seconds": round(time.time() - t0, 1), "converged": took is not None,
                       "rss KiB": rss_kib(self.agent.pid)}
        entries = self.driver.calls()
        self.audit.feed(entries)
        self.calls_seen = len(entries)
        log(f"warm-up: converged in {self.warmup['seconds']} s, RSS {self.warmup['rss KiB']} KiB")
        for p in phases:
            if self.agent.poll() is not None:
                self.failed.append(f"{p}: kvolumed exited with {self.agent.returncode}")
                break
            self.run_phase(p, seconds)
        self.final_checks()

    def final_checks(self):
        s = self.samplers
        rss = [r for (_, r, _, _, _) in s.samples if r]
        self.overall = {"rss KiB max": max(rss, default=None), "rss KiB end": rss_kib(self.agent.pid),
                        "rss KiB after warm-up": self.warmup["rss KiB"],
                        "healthz probes": len(s.health),
                        "healthz failed": sum(1 for _, st, _ in s.health if st != 200),
                        "driver starts": self.driver.starts}
        try:
            violations = self.driver.control.violations()
        except Exception as e:  # noqa: BLE001
            violations = [{"message": f"unreadable: {e}"}]
        self.overall["driver violations"] = [v["message"] for v in violations][:5]
        checks = collections.OrderedDict()
        checks["kvolumed still running"] = self.agent.poll() is None
        checks["no CO violation recorded by the driver"] = not violations
        warm = self.warmup["rss KiB"] or 0
        end = self.overall["rss KiB end"] or 0
        # Bounded: no growth with the faults or the churn beyond what the
        # allocator keeps after the peak.
        checks["RSS at the end <= 2 x after warm-up + 16 MiB"] = end <= 2 * warm + 16384
        checks["RSS max <= 256 MiB"] = (self.overall["rss KiB max"] or 0) <= 256 * 1024
        checks["churn driver had no errors"] = not self.churn.errors
        if self.churn.errors:
            self.overall["churn errors"] = dict(self.churn.errors)
        self.overall["checks"] = checks
        for name, ok in checks.items():
            if not ok:
                self.failed.append(f"overall: {name}")

    # --- the report --------------------------------------------------------

    def report(self):
        a = self.args
        out = []
        w = out.append
        w("# kvolumed fault storm")
        w("")
        w(f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; machine: {os.cpu_count()} CPUs, kernel "
          f"{platform.release()}; root-dir on {subprocess.run(['stat', '-f', '-c', '%T', self.root], capture_output=True, text=True).stdout.strip()}")
        w(f"- load: {self.churn.target_pods} pods x {VOLUMES_PER_POD} volumes = "
          f"{self.churn.target_pods * VOLUMES_PER_POD} volumes (50 % of pods all inline, 40 % with a claim of "
          f"their own, 10 % with one of {SHARED_CLAIMS} shared claims), {self.churn.rate:g} pods replaced a second")
        w(f"- kvolumed: call-timeout {a.call_timeout} s, max-parallel {a.max_parallel}, log level {a.log_level}; "
          f"mock driver in tmpfs mode")
        w(f"- warm-up: {self.warmup['seconds']} s to publish the first {self.churn.target_pods * VOLUMES_PER_POD} "
          f"volumes; RSS then {self.warmup['rss KiB']} KiB")
        w("")
        w("| phase | s | pods | published/s | unpublished/s | faults | converged after s | RSS max/end KiB "
          "| API req/s (during; max in 1 s) | CSI volume ops in flight max | checks |")
        w("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in self.results:
            faults = "; ".join(f"{k}: {v}" for k, v in r["faults"].items()) or "-"
            failed = [k for k, ok in r["checks"].items() if not ok]
            w(f"| {r['phase']} | {r['seconds']} | {r['load']['pods']} | {r['load']['volumes published/s']} | "
              f"{r['load']['volumes unpublished/s']} | {faults} | {r['convergence seconds']} | "
              f"{r['rss KiB']['max']}/{r['rss KiB']['end']} | {r['api']['during']['per_second']}; "
              f"{r['api']['during']['max_in_one_second']} | {r['csi in flight max']} | "
              f"{'PASS' if not failed else 'FAIL: ' + ', '.join(failed)} |")
        w("")
        for r in self.results:
            w(f"## {r['phase']}")
            w("")
            w(f"- load: {json.dumps(r['load'])}")
            w(f"- faults: {json.dumps(r['faults'])}")
            w(f"- converged {r['convergence seconds']} s after the fault stopped"
              + (f"; NOT converged: {r['not converged']}" if r["not converged"] else ""))
            w(f"- API requests during the fault: {json.dumps(r['api']['during'])}; in the 10 s after: "
              f"{json.dumps(r['api']['10 s after'])}")
            extra = {k: v for k, v in r["api"].items() if k not in ("during", "10 s after")}
            if extra:
                w(f"- backoff: {json.dumps(extra)}")
            w(f"- kvolumed RSS KiB: {json.dumps(r['rss KiB'])}; CSI volume operations in flight (driver side) "
              f"max {r['csi in flight max']}, all calls {json.dumps(r['csi calls in flight max'])}; "
              f"operations started and not finished (queued included) max {r['operations running max']}")
            w(f"- /healthz: {json.dumps(r['healthz'])}; machine load average at the end: "
              f"{' '.join(r['load average'])}")
            w("")
            w("| from s | to s | /healthz slowest ms | /healthz failed | running max | held back max | RSS KiB max |")
            w("|---|---|---|---|---|---|---|")
            for row in r["timeline"]:
                w(f"| {row['from s']} | {row['to s']} | {row['healthz slowest ms']} | {row['healthz failed']} | "
                  f"{row['running max']} | {row['held back max']} | {row['rss KiB max']} |")
            w("")
            for name, ok in r["checks"].items():
                w(f"- [{'x' if ok else ' '}] {name}")
            for rule, ex in r["audit examples"].items():
                w(f"  - {rule}: {ex}")
            w("")
        w("## overall")
        w("")
        for k, v in self.overall.items():
            if k != "checks":
                w(f"- {k}: {v}")
        for name, ok in self.overall["checks"].items():
            w(f"- [{'x' if ok else ' '}] {name}")
        w("")
        w("## what the checks mean")
        w("")
        for line in CHECKS_EXPLAINED:
            w(f"- {line}")
        w("")
        n_checks = sum(len(r["checks"]) for r in self.results) + len(self.overall["checks"])
        w(f"{n_checks - len(self.failed)} checks passed, {len(self.failed)} failed"
          + (": " + "; ".join(self.failed) if self.failed else ""))
        return "\n".join(out) + "\n"


def write_junit(path, storm, report):
    """One test case per check ("phase: check"); a run that ended without a
    report is one failed case."""
    from xml.sax.saxutils import quoteattr
    cases = []
    for r in storm.results:
        for name, ok in r["checks"].items():
            cases.append((r["phase"], name, ok))
    for name, ok in (getattr(storm, "overall", None) or {}).get("checks", {}).items():
        cases.append(("overall", name, ok))
    for f in storm.failed:
        if not any(f == f"{c}: {n}" for c, n, _ in cases):
            cases.append(("storm", f, False))
    if report is None:
        cases.append(("storm", "run", False))
    with open(path, "w") as f:
        f.write('<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="storm">\n')
        for cls, name, ok in cases:
            f.write(f"<testcase classname={quoteattr('storm.' + cls)} name={quoteattr(name)}>"
                    + ("" if ok else "<failure message=\"check failed\"/>") + "</testcase>\n")
        f.write("</testsuite>\n")


def main():
    ap = argparse.ArgumentParser(prog="test/storm/run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=8.0,
                    help="time under faults, shared by the phases (default 8: one minute each)")
    ap.add_argument("--volumes", type=int, default=500, help="volumes kept on the node (5 per pod)")
    ap.add_argument("--churn", type=float, help="pods replaced a second (default: pods / 25)")
    ap.add_argument("--report", help="write the report (Markdown) here too")
    ap.add_argument("--json", help="write the figures as JSON here")
    ap.add_argument("--junit", help="write every check as a JUnit test case here (for test/check)")
    ap.add_argument("--phases", default=",".join(PHASES), help="comma list, default all: " + ",".join(PHASES))
    ap.add_argument("--call-timeout", type=int, default=10, help="kvolumed's csi.call-timeout, seconds")
    ap.add_argument("--max-parallel", type=int, default=16, help="kvolumed's csi.max-parallel")
    ap.add_argument("--hang-rate", type=float, default=0.3, help="share of node calls that hang in csi-hang")
    ap.add_argument("--error-rate", type=float, default=0.2, help="share of node calls failing in csi-errors")
    ap.add_argument("--crash-interval", type=float, default=4.0, help="seconds between driver crashes")
    ap.add_argument("--converge-timeout", type=float, default=300.0)
    ap.add_argument("--log-level", default="notice")
    ap.add_argument("--workdir", default="/var/tmp", help="root-dir's parent (a disk, not tmpfs)")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    args.phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(args.phases) - set(PHASES)
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}")
    if args.seed is not None:
        random.seed(args.seed)
    if os.geteuid() != 0:
        raise SystemExit("storm: run as root, in a private mount namespace (test/storm/run does both)")

    storm = Storm(args)
    report = None
    try:
        storm.start()
        storm.run()
        report = storm.report()
    except KeyboardInterrupt:
        storm.failed.append("interrupted")
    finally:
        if report is None and storm.results:
            try:
                storm.overall = getattr(storm, "overall", {"checks": {}})
                report = storm.report()
            except Exception:  # noqa: BLE001
                report = None
        if report is None:
            log(f"storm: no report; work dir {storm.work}")
        elif args.keep:
            log(f"work dir kept: {storm.work}")
        storm.stop()
    if report:
        print(report)
        if args.report:
            with open(args.report, "w") as f:
                f.write(report)
    if args.junit:
        write_junit(args.junit, storm, report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"warm-up": getattr(storm, "warmup", None), "phases": storm.results,
                       "overall": getattr(storm, "overall", None), "failed": storm.failed}, f, indent=1)
    return 1 if storm.failed or report is None else 0


if __name__ == "__main__":
    sys.exit(main())
