"""A dead API server sees a bounded reconnect rate from kvolumed as a whole,
whatever the number of objects being looked up (k8s/ratelimit.h: one
connection attempt at a time once the server stops answering, 200 ms
doubling to 5 s apart).  Found by the fault storm (test/storm, api-outage):
every lookup retried on its own backoff, so the attempts grew with the
objects in flight (38 a second on a 500-volume node)."""
import re
import time

import pytest

from doubles.fakeapi import certs
from integration.agent_fixtures import DRIVER, wait_until, write_config
from integration.api_outage import ApiOutage
from integration.test_volume_lookups import PVC_PATH, claim_volume, start_as_node

PODS = 24
OUTAGE = 6.0
# k8s/ratelimit.h: K8S_HOST_BACKOFF_BASE_USEC, K8S_HOST_BACKOFF_MAX_USEC.
BASE, MAX = 0.2, 5.0


def attempts_allowed(seconds):
    """Connection attempts the host backoff allows in `seconds` of outage:
    the requests already on their way when the server went (at most one
    connection each, all failing together) count once, then one attempt per
    backoff step."""
    n, t, step = 1, 0.0, BASE
    while t + step <= seconds:
        t += step
        n += 1
        step = min(MAX, step * 2)
    return n


def test_connection_attempts_bounded_whatever_the_lookups(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False)
    pods = []
    for i in range(PODS):
        env.pv(f"pv-{i}", f"vol-{i}", claim=f"c{i}")
        env.pvc(f"c{i}", f"pv-{i}")
    # Every claim's GET fails (500): each lookup retries on its own backoff,
    # so PODS requesters knock independently when the server goes.
    env.api.fail_next(10 ** 6, status=500, path_prefix=PVC_PATH, method="GET")
    start_as_node(env)
    for i in range(PODS):
        pods.append(env.pod(f"p{i}", [claim_volume("data", f"c{i}")]))

    def all_asked():
        asked = {r["path"] for r in env.api.requests() if r["path"].startswith(PVC_PATH)}
        return len(asked) >= PODS
    wait_until(all_asked, 20, what="every claim asked for")

    r0 = env.api.state()["connectionsReset"]
    t0 = time.monotonic()
    env.api.refuse_connections(OUTAGE, mode="reset")
    # Measurement windows, not waits for an event: the outage lasts OUTAGE.
    wait_until(lambda: time.monotonic() - t0 >= 1.0, 3, interval=0.02, what="1 s of outage")
    r1 = env.api.state()["connectionsReset"]
    wait_until(lambda: time.monotonic() - t0 >= OUTAGE - 0.3, OUTAGE + 1, interval=0.05, what="the outage")
    attempts = env.api.state()["connectionsReset"] - r0
    later = env.api.state()["connectionsReset"] - r1
    took = time.monotonic() - t0
    # The requests that set out before the first failure came back all try
    # (the lookups back off in step, so up to PODS at once, as many as the
    # token bucket let out); after that one attempt per backoff step.  Seen:
    # 2 to 24 at once, then +1 at 0.2, 0.6, 1.4, 3.0 s.  Before the host
    # backoff: 131 in 5.7 s, about 23 a second throughout.
    assert attempts <= PODS + attempts_allowed(took) + 2, (attempts, round(took, 2))
    assert later <= attempts_allowed(took) + 1, (later, attempts, round(took, 2))

    # Back: everything mounts, the backoff reset by the first answer.
    env.api.clear_faults()
    wait_until(lambda: time.monotonic() - t0 >= OUTAGE + 0.1, OUTAGE + 2, what="the server back")
    for p in pods:
        env.wait_mounted(env.target(p, "pv-" + p["metadata"]["name"][1:]), timeout=30)


def test_a_watch_that_probes_the_server_back_holds_nothing(volume_env):
    """When the server comes back, the first request let through (the probe)
    is as often as not an informer's watch, whose transfer lasts minutes.
    Were the backoff to end only when the probe's transfer ends, every other
    request would wait for the watch's timeout: the storm's api-outage phase
    saw nothing converge in 120 s after the outage.  The probe ends at the
    first header of its answer."""
    env = volume_env
    env.csidriver(attachRequired=False)
    start_as_node(env)
    env.pv("pv-before", "vol-before", claim="c-before")
    env.pvc("c-before", "pv-before")
    before = env.pod("before", [claim_volume("data", "c-before")])
    env.wait_mounted(env.target(before, "pv-before"), timeout=30)

    t0, wall0 = time.monotonic(), time.time()  # the fake's request log has wall times
    env.api.refuse_connections(1.5, mode="reset")
    wait_until(lambda: time.monotonic() - t0 >= 1.6, 4, interval=0.05, what="the outage")
    # Nothing but the informers' watches asks after the outage: one of them
    # (or a relist) is the probe.  Wait until the watches are back.
    wait_until(lambda: any(r.get("watch") and r["time"] >= wall0 + 1.5
                           for r in env.api.requests()), 30, what="a watch after the outage")
    env.pv("pv-after", "vol-after", claim="c-after")
    env.pvc("c-after", "pv-after")
    after = env.pod("after", [claim_volume("data", "c-after")])
    # The claim's GET must go out at once, not after the watch's timeout.
    env.wait_mounted(env.target(after, "pv-after"), timeout=20)


# --- the API server away at start (agent/agent.c: START_READY_GRACE_USEC) -------

# READY=1 comes at the first sync or, without the API server's lists, this
# long after the start; the waiting reports come 5 s after start, then every
# 30 s (agent/waiting.h).
READY_GRACE = 10
REG_DRIVER = "reg.csi.example.com"


@pytest.fixture
def outage(fake_api):
    o = ApiOutage(fake_api)
    yield o
    o.close()


def start_through(env, outage, notify=None, csi="", kubeconfig=None):
    """kvolumed as the node, reaching the API server through the relay."""
    config = write_config(env.tmp_path / "kvolumed.conf", env.root, kubeconfig or outage.kubeconfig(),
                          f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n')
    if csi:
        text = open(config).read()
        assert "registration-dir =\n" in text
        with open(config, "w") as f:
            f.write(text.replace("registration-dir =\n", csi))
    env.agent = env.start_agent(config, notify=notify)
    return env.agent


def statuses(notify):
    return [line[len("STATUS="):] for m in notify.messages for line in m.split("\n") if line.startswith("STATUS=")]


def wait_status(notify, predicate, timeout, what):
    """The first STATUS= text for which predicate holds, reading datagrams as they come."""
    import socket
    deadline = time.monotonic() + timeout
    while True:
        for text in statuses(notify):
            if predicate(text):
                return text
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no STATUS= {what} within {timeout} s; got {statuses(notify)}")
        notify.sock.settimeout(left)
        try:
            notify.messages.append(notify.sock.recv(65536).decode())
        except socket.timeout:
            pass


def test_unreachable_at_start_is_ready_after_the_grace_and_status_counts_the_whole_outage(
        volume_env, outage, notify_socket):
    """An API server away at start never holds the start back: READY=1 comes
    READY_GRACE s after the start (systemd's TimeoutStartSec= stops counting,
    so it neither kills nor restarts kvolumed), STATUS= saying what it waits
    for and since when.  The outage's length runs on from the first failed
    request, across READY=1 and the reports; the journal repeats the report
    at 5 s and 35 s, then less and less often.  Once the server answers, the
    lists are read and STATUS= counts the volumes.  Before: READY=1 only at
    the first sync, so systemd killed kvolumed at TimeoutStartSec=120s and
    restarted it, the outage said "unreachable for 5 s" after each restart."""
    env = volume_env
    outage.down()
    agent = start_through(env, outage, notify=notify_socket)
    ready = notify_socket.wait_for("READY=1", timeout=READY_GRACE + 50)
    agent.wait_for_log(f"Up without the API server's lists after {READY_GRACE} s: READY=1 sent", timeout=10)
    assert agent.proc.poll() is None
    server = outage.server_url
    prefix = f"Waiting for the first pod list: API server {server} unreachable for "

    def seconds(text):
        m = re.match(re.escape(prefix) + r"(\d+) s \(", text)
        return int(m.group(1)) if m else None
    # The STATUS= sent with READY=1 counts from the first failure, at start.
    first = wait_status(notify_socket, lambda t: seconds(t) is not None and seconds(t) >= READY_GRACE - 1,
                        timeout=20, what="the outage's length at READY=1")
    # The next report (every 30 s) still counts the same outage.
    # In the socket's words, not libcurl's "Couldn't connect to server" alone.
    assert "failed: connect: Connection refused (" in first, first
    later = wait_status(notify_socket, lambda t: seconds(t) is not None and seconds(t) >= 30, timeout=60,
                        what="the outage's length 30 s on")
    assert seconds(later) >= seconds(first) + 20, (first, later)
    # STATUS= every 30 s; the journal at 5 s and 35 s, then 60 s apart
    # (doubling to 10 min): not at the 65 s report.
    wait_status(notify_socket, lambda t: seconds(t) is not None and seconds(t) >= 60, timeout=60,
                what="the outage's length 60 s on")
    assert agent.output().count("notice: Waiting for the first pod list") == 2, agent.output()[-3000:]
    assert not [t for t in statuses(notify_socket) if t.startswith("Running")], statuses(notify_socket)

    outage.up()
    wait_status(notify_socket, lambda t: t.startswith("Running on node test-node: 0 pod volumes published"),
                timeout=60, what="the volume counts once the lists are read")
    agent.wait_for_log("Ready: volumes on disk reconstructed, pods, CSIDrivers and node test-node listed")
    # One READY=1 for the whole start: none again at the sync.
    notify_socket.drain(0.5)
    assert not [m for m in notify_socket.messages if "READY=1" in m.split("\n")], (ready, notify_socket.messages)
    assert agent.proc.poll() is None


def test_deferred_registration_handshake_backs_off_while_the_node_is_unknown(
        volume_env, outage, mock_csi_factory):
    """A registered driver whose Node kvolumed cannot read yet (the API
    server away at start) waits for it: the handshake (GetInfo,
    GetPluginInfo, NodeGetInfo) is repeated with backoff (1 s doubling to
    30 s, csi/internal.h), and at once when the Node is listed.  Before: once
    a second for the whole outage."""
    env = volume_env
    drv = mock_csi_factory(name=REG_DRIVER, tmpfs=True, registration_dir=True, node_id="reg-node")
    outage.down()
    agent = start_through(env, outage, csi=f"registration-dir = {drv.registration_dir}\n")
    wait_until(lambda: drv.calls("NodeGetInfo"), timeout=30, what="the first handshake")
    t0 = time.monotonic()
    # A measurement window, not a wait for an event.
    window = 20.0
    wait_until(lambda: time.monotonic() - t0 >= window, window + 5, interval=0.1, what="the window")
    asked = len(drv.calls("NodeGetInfo"))
    # Backoff from the first: 1, 2, 4, 8 s → at most 5 handshakes in 20 s.
    assert asked <= 6, (asked, agent.output()[-3000:])
    assert "Registration of " + REG_DRIVER + " deferred" in agent.output()

    outage.up()

    def recorded():
        try:
            c = env.api.get("csinodes", None, "test-node")
        except Exception:
            return False
        return any(d.get("name") == REG_DRIVER for d in ((c or {}).get("spec") or {}).get("drivers") or [])
    # Asked again once the Node is listed, not after the backoff (up to 30 s).
    wait_until(recorded, timeout=25, what=lambda: f"{REG_DRIVER} in CSINode\n" + agent.output()[-3000:])


def test_a_wrong_ca_is_a_configuration_error_not_an_outage(volume_env, fake_api, tmp_path_factory,
                                                             notify_socket):
    """A kubeconfig naming another cluster's CA: the warning says which file
    does not sign the server's certificate and what to check, not "check
    DNS, routes, firewall".  Retried still (the server's certificate may be
    what is fixed), and the start is not held back."""
    env = volume_env
    other = certs.write_pki(str(tmp_path_factory.mktemp("other-ca")))
    kc = fake_api.node_kubeconfig("test-node")
    bad = env.tmp_path / "bad-ca.kubeconfig"
    bad.write_text(open(kc).read().replace(fake_api.ca_path, other["ca.crt"]))
    agent = start_through(env, None, notify=notify_socket, kubeconfig=str(bad))
    agent.wait_for_log(f"the server's certificate is not signed by {other['ca.crt']}", timeout=30)
    lines = [line for line in agent.output().splitlines() if " warning: " in line and "certificate" in line]
    assert len(lines) == 1, agent.output()[-4000:]
    line = lines[0]
    assert f"API server {fake_api.server_url}: the server's certificate is not signed by {other['ca.crt']}" in line
    assert "check that certificate-authority in the kubeconfig" in line and "configuration error" in line, line
    assert "DNS" not in line and "firewall" not in line, line
    notify_socket.wait_for("READY=1", timeout=READY_GRACE + 50)
    assert agent.proc.poll() is None
