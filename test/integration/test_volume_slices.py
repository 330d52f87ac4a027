"""Recovery in slices: however many operations a restart or a relist makes
due at once, the reconciler starts at most a slice of them per pass and
keeps at most 4 x max-parallel per driver started and unfinished
(volume/passes/reconciler.c), so the loop keeps answering and memory stays bounded.
Found by the fault storm (test/storm, api-500 for 4 minutes): the relist
after the outage started 3,553 operations in one pass, and a /healthz probe
went unanswered for over 2 s."""
import json
import os
import re
import subprocess
import sys
import threading

import pytest

from integration.agent_fixtures import DRIVER, wait_until, write_config

# Counts what kvolumed does on its own: alone, not beside the
# parallel workers (test/check runs the serial tests after them).
pytestmark = pytest.mark.serial

PODS = 40
VOLUMES = 5
MAX_PARALLEL = 8
# volume/passes/reconciler.c: pending operations per driver <= 4 x max-parallel.
MAX_PENDING = 4 * MAX_PARALLEL


# The prober runs in a process of its own: a thread of the test's would
# share the GIL with the fake API server's threads, which serve kvolumed at
# the same time.  It prints one JSON line per probe.
PROBER = r"""
import json, os, select, sys, time, urllib.error, urllib.request

address = sys.argv[1]
os.setpriority(os.PRIO_PROCESS, 0, -10)   # ahead of the machine's other work, as kvolumed is


def get(path, timeout=2.0):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as r:
        return r.status, r.read()


next_sample = 0.0
while not select.select([sys.stdin], [], [], 0.02)[0]:
    out = {}
    try:
        try:
            out["status"], _ = get("/healthz")
        except urllib.error.HTTPError as e:
            out["status"] = e.code
        if out["status"] == 200 and time.monotonic() >= next_sample:
            _, body = get("/volumes")
            out["running"] = json.loads(body).get("running", 0)
            next_sample = time.monotonic() + 0.25
    except OSError as e:
        out["error"] = repr(e)
    print(json.dumps(out), flush=True)
"""


class Prober:
    """/healthz every 20 ms and /volumes every 0.25 s, until stopped: every
    probe answered (503 "not synced" only before the first 200), and the
    most operations running."""

    def __init__(self, address):
        self.probes = 0
        self.failed = []
        self.running_max = 0
        self.proc = subprocess.Popen([sys.executable, "-c", PROBER, address], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            p = json.loads(line)
            if "error" in p:
                self.failed.append(p["error"])
                continue
            # 503 "not synced" until the informers have listed.
            if p["status"] == 503 and not self.probes:
                continue
            self.probes += 1
            if p["status"] != 200:
                self.failed.append(p["status"])
                continue
            self.running_max = max(self.running_max, p.get("running", 0))

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)
        self.thread.join(5)


PASS = re.compile(r"Reconcile pass \((full|scoped)\) started (\d+) operations(, held back more)?:")


def start_in_slices(env, per_pass, agent_env=None):
    """PODS pods of VOLUMES inline volumes, all due when kvolumed starts:
    no pass starts more than per_pass of them (kvolumed's debug line for
    each pass that started any), the rest are held back for later passes,
    at most MAX_PENDING run at once, and /healthz, probed every 20 ms
    meanwhile, answers every time.  Counts, not times: how long a pass or a
    probe took is the machine's to decide as much as kvolumed's (CI7,
    beside a loop of builds, load 14 to 20 on 2 cores)."""
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    pods = [env.pod(f"p{i}", [{"name": f"v{j}", "csi": {"driver": DRIVER}} for j in range(VOLUMES)])
            for i in range(PODS)]
    config = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                          f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n',
                          csi=f"max-parallel = {MAX_PARALLEL}\n")
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n"))
    # kvolumed and the prober run ahead of the rest, as a node agent runs
    # ahead of the pods: the probes' 2 s timeout is the machine's too.  The
    # first CSIDriver lists fail (the informer retries after 0.8 s, then
    # 1.6 s): the first pass waits for them, with the prober running.
    env.api.fail_next(2, status=500, path_prefix="/apis/storage.k8s.io/v1/csidrivers")
    env.agent = env.start_agent(config, env=agent_env, wrapper=("nice", "-n", "-10"))
    env.agent.wait_for_log("Serving /metrics")
    address = env.agent.output().split("Serving /metrics, /healthz, /volumes on ", 1)[1].split()[0]
    prober = Prober(address)
    try:
        targets = [env.target(p, f"v{j}") for p in pods for j in range(VOLUMES)]
        wait_until(lambda: sum(1 for t in targets if os.path.ismount(t)) == len(targets), 90,
                   interval=0.2, what="every volume published")
        wait_until(lambda: prober.probes >= 10, 30, what="10 probes answered")
    finally:
        prober.close()
    assert not prober.failed, prober.failed[:5]
    assert prober.running_max <= MAX_PENDING, prober.running_max
    passes = [(int(m.group(2)), bool(m.group(3))) for m in PASS.finditer(env.agent.output())]
    started = [n for n, _ in passes]
    # Every publish was started by one pass or another, none by a pass of
    # more than its slice; the first held back what was beyond it.
    assert sum(started) >= len(targets), started
    assert max(started) <= per_pass, started
    assert passes[0][1], passes[:3]
    return started


def test_many_volumes_due_at_once_start_in_slices(volume_env):
    # 200 due, at most MAX_PENDING started and unfinished per driver.
    start_in_slices(volume_env, MAX_PENDING)


def test_a_slow_root_dir_makes_the_slices_smaller(volume_env):
    """Each operation writes its records under root-dir before its call (a
    few file system calls, milliseconds each on a slow or busy disk): a
    slice is bounded by the time those take too, not only by its count
    (volume/passes/reconciler.c, RECONCILE_PREPARE_BUDGET_USEC).  Before, a slice
    of MAX_PENDING operations at 10 ms each held the loop for 320 ms; the
    fault storm saw 174 ms after an API outage."""
    # 10 ms each: the first RECONCILE_SLICE_MIN (4) alone take the whole 20
    # ms budget, however fast or slow the machine, so no pass starts more.
    start_in_slices(volume_env, 4, agent_env={"KVOLUMED_TEST_PREPARE_DELAY_MS": "10"})
