"""Day-2 signals of the real kvolumed, as an operator alerts on them: the API
client's requests by code and verb with client-go's names, labels and
buckets (also while the API server is unreachable), kvolumed_build_info and
the standard process_* families."""
import os
import re
import resource
import subprocess
import time

import pytest

from integration.agent_fixtures import DRIVER, REPO_DIR, kvolumed_path, wait_until, write_config
from integration.api_outage import ApiOutage
from integration.test_agent_metrics import SERVING, get
from integration.test_agent_metrics_prom import scrape, value

# client-go's (k8s.io/component-base/metrics/prometheus/restclient/metrics.go).
REST_BUCKETS = ["0.005", "0.025", "0.1", "0.25", "0.5", "1", "2", "4", "8", "15", "30", "60", "+Inf"]


@pytest.fixture
def relay(fake_api):
    r = ApiOutage(fake_api)
    yield r
    r.close()


def start_relayed(env, relay, extra="", notify=None):
    """kvolumed as the node, reaching the API server through the relay, with
    /metrics on a free port; returns the metrics address."""
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, relay.kubeconfig(),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n' + extra)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n"))
    env.agent = env.start_agent(path, notify=notify)
    env.agent.wait_for_log("Serving /metrics")
    return SERVING.search(env.agent.output()).group(1)


def healthy(address):
    return get(address, "/healthz")[0] == 200


def requests_total(families, host, code):
    """The sum over methods of rest_client_requests_total{code,host}."""
    fam = families.get("rest_client_requests")  # the parser names a counter without _total
    return sum(s.value for s in fam.samples
               if s.labels.get("host") == host and s.labels.get("code") == code) if fam else 0


def test_api_request_metrics_while_unreachable(volume_env, relay):
    address = start_relayed(volume_env, relay)
    host = f"127.0.0.1:{relay.port}"
    wait_until(lambda: healthy(address), timeout=20, what="the first listing")
    families = scrape(address)

    # The lists were GETs answered 200, counted with client-go's labels.
    fam = families["rest_client_requests"]  # the parser names a counter without _total
    assert fam.type == "counter"
    assert fam.documentation == "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host."
    assert {tuple(sorted(s.labels)) for s in fam.samples} == {("code", "host", "method")}
    assert value(families, "rest_client_requests", code="200", method="GET", host=host) >= 3
    dur = families["rest_client_request_duration_seconds"]
    assert dur.type == "histogram"
    gets = [s for s in dur.samples if s.labels.get("verb") == "GET" and s.labels.get("host") == host]
    assert [s.labels["le"] for s in gets if s.name.endswith("_bucket")] == REST_BUCKETS
    assert {tuple(sorted(s.labels)) for s in dur.samples if not s.name.endswith("_bucket")} == {("host", "verb")}

    # The API server goes away: requests fail with no HTTP answer, which
    # client-go counts as code="<error>", and the count keeps growing.
    relay.down()
    first = wait_until(lambda: requests_total(scrape(address), host, "<error>"), timeout=20,
                       what='a request counted with code="<error>"')
    wait_until(lambda: requests_total(scrape(address), host, "<error>") > first, timeout=30,
               what='rest_client_requests_total{code="<error>"} growing')
    # Back: answered requests are counted again.
    ok = requests_total(scrape(address), host, "200")
    relay.up()
    wait_until(lambda: requests_total(scrape(address), host, "200") > ok, timeout=30,
               what="requests answered after the API server is back")


def test_build_info_and_process_metrics(volume_env, relay):
    address = start_relayed(volume_env, relay)
    families = scrape(address)
    info = families["kvolumed_build_info"]
    assert info.type == "gauge"
    [sample] = info.samples
    assert sample.value == 1
    # The version and the commit are --version's (agent/version.sh): in a
    # checkout, the commit the binary was built from ("-dirty" when the tree
    # had changes) and the version that orders, which names it.
    version = subprocess.run([kvolumed_path(), "--version"], capture_output=True, text=True).stdout
    assert f"kvolumed {sample.labels['version']}\ncommit: {sample.labels['commit']}\n" in version, (sample, version)
    commit = sample.labels["commit"].removesuffix("-dirty")
    head = subprocess.run(["git", "-C", REPO_DIR, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert len(commit) == 12 and head.stdout.startswith(commit), (commit, head.stdout)
        assert re.fullmatch(r"\d+\.\d+\.\d+\+git\d{8}\.\d{6}\." + commit, sample.labels["version"]), sample

    pid = volume_env.agent.proc.pid
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    started = btime + int(fields[19]) / ticks
    assert families["process_start_time_seconds"].samples[0].value == pytest.approx(started, abs=0.02)
    assert abs(started - time.time()) < 120
    assert families["process_cpu_seconds"].type == "counter"
    assert 0 <= families["process_cpu_seconds"].samples[0].value < 120
    rss = families["process_resident_memory_bytes"].samples[0].value
    assert 1 << 20 < rss < families["process_virtual_memory_bytes"].samples[0].value
    open_fds = families["process_open_fds"].samples[0].value
    assert 3 <= open_fds <= len(os.listdir(f"/proc/{pid}/fd")) + 5
    with open(f"/proc/{pid}/limits") as f:
        soft = next(line.split()[3] for line in f if line.startswith("Max open files"))
    assert families["process_max_fds"].samples[0].value == int(soft)
    assert families["process_virtual_memory_max_bytes"].samples[0].value in (
        float(2**64 - 1), float(resource.getrlimit(resource.RLIMIT_AS)[0]))


# --- every desired volume in exactly one state; failures share a MESSAGE_ID ----

HERE = os.path.dirname(os.path.abspath(__file__))
VOLUME_FAILED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a53"  # a CSI call's failure
VOLUME_BLOCKED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a55"  # one found outside any call
OTHER_DRIVER = "unknown.csi.example.com"
STATES = ("failed", "pending", "published", "tearing-down")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def volume_states(address):
    from integration.test_agent_metrics import samples
    s = samples(get(address, "/metrics")[2])
    return {st: s.get(f'kvolumed_volumes{{state="{st}"}}') for st in STATES}, s.get("kvolumed_volumes_desired")


def claim(name, claim_name):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def test_every_desired_volume_in_one_state_and_every_failure_has_the_message_id(volume_env, tmp_path):
    """One pod with a published volume, one with a volume of each class of
    failure: a claim not bound, a driver that never registers, a lifecycle
    mode the CSIDriver refuses, a CSI call that fails.  At every scrape the
    states add up to the desired volumes, and each failure ends counted as
    failed with a journal entry carrying the failure MESSAGE_ID.  Runs ~25 s:
    the unregistered driver is reported only after its registration grace
    (DRIVER_WAIT_GRACE_USEC, 20 s), which is the behaviour under test."""
    import json
    import subprocess

    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    env.pv("pv-ok", "h-ok", claim="c-ok")
    env.pvc("c-ok", "pv-ok")
    env.pv("pv-other", "h-other", claim="c-other", driver=OTHER_DRIVER)
    env.pvc("c-other", "pv-other")
    env.pv("pv-fail", "h-fail", claim="c-fail")
    env.pvc("c-fail", "pv-fail")
    env.pvc("c-unbound")

    port = free_port()
    config = write_config(tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                          f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n')
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace("\nlisten =\n", f"\nlisten = 127.0.0.1:{port}\n"))
    stop = tmp_path / "stop"
    # kvolumed logs to a stand-in journald; it runs until the test has seen
    # what it waits for (the 90 s are only a bound).
    capture = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "/usr/bin/python3",
         os.path.join(HERE, "journal_capture.py"), "--seconds", "90", "--stop-file", str(stop), "--",
         kvolumed_path(), "--config", config],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    address = f"127.0.0.1:{port}"
    try:
        def consistent():
            try:
                states, desired = volume_states(address)
            except OSError:
                return None
            if desired is None:
                return None
            assert sum(states.values()) - states["tearing-down"] == desired, (states, desired)
            return states, desired

        env.pod("a", [claim("v", "c-ok")])
        wait_until(lambda: (r := consistent()) and r[0]["published"] == 1 and r, timeout=20,
                   what="pod a's volume published")
        env.driver.control.fail_next("NodeStageVolume", "INVALID_ARGUMENT", "no such pool: gold", count=1000)
        env.pod("b", [claim("unbound", "c-unbound"), claim("other", "c-other"), claim("failing", "c-fail"),
                      {"name": "inline", "csi": {"driver": DRIVER}}])
        states, desired = wait_until(lambda: (r := consistent()) and r[1] == 5 and r, timeout=20,
                                     what="pod b's volumes desired")
        # All of b's volumes but the one whose driver is in its grace have failed.
        wait_until(lambda: (r := consistent()) and r[0]["failed"] == 3 and r, timeout=20,
                   what="three failures counted")
        # The unregistered driver is a failure once its grace has passed.
        states, desired = wait_until(lambda: (r := consistent()) and r[0]["failed"] == 4 and r, timeout=40,
                                     interval=0.2, what="the unregistered driver counted as failed")
        assert states == {"failed": 4, "pending": 0, "published": 1, "tearing-down": 0} and desired == 5
    finally:
        stop.touch()
        out, err = capture.communicate(timeout=60)
        print(err)  # shown when the test fails
    result = json.loads(out)
    failed = [e for e in result["entries"] if e.get("MESSAGE_ID") in (VOLUME_FAILED, VOLUME_BLOCKED)]
    text = "\n".join(e["MESSAGE"] for e in failed)
    for volume, what in (("unbound", "c-unbound"), ("other", f"driver name {OTHER_DRIVER} not found"),
                         ("inline", 'volume mode "Ephemeral" not supported'), ("failing", "no such pool: gold")):
        assert any(e.get("VOLUME") in (volume, "pv-fail") and what in e["MESSAGE"] for e in failed), \
            f"no MESSAGE_ID={VOLUME_FAILED} entry for {volume} ({what}) in:\n{text}"


# --- one line per change of state, not per retry --------------------------------

WARNING_LINE = re.compile(r"^\S+ (warning|err|crit|alert|emerg): ", re.M)


def warnings(text, host):
    """The warnings (and worse) about the API server at host."""
    lines = [m.group(0) + text[m.end():].split("\n", 1)[0] for m in WARNING_LINE.finditer(text)]
    return [line for line in lines if host in line]


def back_lines(text, server):
    """The lines telling the operator that the API server at server answers
    again: not the host backoff's debug lines, nor the warning's "... until
    it answers again"."""
    return re.findall(r"^\S+ info: API server " + re.escape(server) + r" answers again, after .*$", text, re.M)


def wait_status(notify, prefix, timeout):
    """The first STATUS= line starting with prefix, reading datagrams as they come."""
    import socket
    deadline = time.monotonic() + timeout
    while True:
        for m in notify.messages:
            for line in m.split("\n"):
                if line.startswith("STATUS=" + prefix):
                    return line
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no STATUS={prefix}... within {timeout}s; got {notify.messages}")
        notify.sock.settimeout(left)
        try:
            notify.messages.append(notify.sock.recv(65536).decode())
        except socket.timeout:
            pass


def error_requests(address, host):
    try:
        return requests_total(scrape(address), host, "<error>")
    except OSError:
        return 0


def test_unreachable_api_server_is_one_line_then_one_when_back(volume_env, relay, notify_socket):
    """kvolumed starts while the API server is unreachable: one warning says
    so with what to check, however many requests fail; every 30 s (the first
    after 5 s) a notice and STATUS= say what READY=1 waits for and for how
    long; one line when the server answers again.  A second outage while
    running is again one line each way.  Runs ~10 s: the first periodic
    report is due 5 s after start, which is the behaviour under test."""
    env = volume_env
    relay.down()
    address = start_relayed(env, relay, notify=notify_socket)
    host = f"127.0.0.1:{relay.port}"
    server = relay.server_url

    # Several rounds of retries of the three informers fail...
    wait_until(lambda: error_requests(address, host) >= 6, timeout=30, interval=0.2,
               what="the informers' requests failing")
    # ... and the periodic report comes, in the log and in STATUS=.
    env.agent.wait_for_log("Waiting for the first pod list: API server " + server + " unreachable for ",
                           timeout=25)
    status = wait_status(notify_socket, "Waiting for the first pod list: API server " + server + " unreachable for ",
                         timeout=30)
    assert "Couldn't connect" in status or "Connection refused" in status or "connect" in status, status
    out = env.agent.output()
    lines = warnings(out, host)
    assert len(lines) == 1, "\n".join(lines)
    assert f"API server {server} is unreachable" in lines[0] and "Check that" in lines[0], lines[0]
    assert out.count("Waiting for the first pod list") == 1

    relay.up()
    notify_socket.wait_for("READY=1", timeout=30)
    # The operator's line, not the host backoff's debug line that comes
    # before it (a mark between the two saw this line in the second outage).
    wait_until(lambda: back_lines(env.agent.output(), server), timeout=30, what="the line back")
    assert len(warnings(env.agent.output(), host)) == 1

    # A second outage while running: one line down, one line back.
    mark = len(env.agent.output())
    before = error_requests(address, host)
    relay.down()
    wait_until(lambda: error_requests(address, host) >= before + 4, timeout=30, interval=0.2,
               what="requests failing in the second outage")
    relay.up()
    # The line back, not the warning's "until it answers again": waiting for
    # that text ended at once, and the test passed only if kvolumed had not
    # yet told the server back (under load it had: three "answers again").
    wait_until(lambda: back_lines(env.agent.output()[mark:], server), timeout=30,
               what="the API server answering again")
    # Said once each way, whatever order the loop reads the requests cut by
    # the outage and the answers that came before it in.
    out = env.agent.output()[mark:]
    told = "\n".join(line for line in out.splitlines() if "is unreachable" in line or "answers again" in line)
    lines = warnings(out, host)
    assert len(lines) == 1 and "is unreachable" in lines[0], told
    assert len(back_lines(out, server)) == 1, told


def test_outage_met_by_watches_alone_is_one_line_back(volume_env, relay):
    """The API server goes away once kvolumed runs with every informer
    watching and the start's writes done: the informers resume their
    watches, so the first answers after the outage are watches', which
    stream for minutes.  The line back comes when the server answers, not
    when the first watch ends 5 to 10 min later."""
    env = volume_env
    start_relayed(env, relay)
    host = f"127.0.0.1:{relay.port}"
    server = relay.server_url
    env.agent.wait_for_log("Ready: ", timeout=30)
    for done in ("Wrote the controller-managed attach/detach annotation", "Wrote the CSINode entry",
                 "Wrote the nodeid annotation"):
        env.agent.wait_for_log(done, timeout=30)

    mark = len(env.agent.output())
    relay.down()
    wait_until(lambda: warnings(env.agent.output()[mark:], host), timeout=30, what="the outage told")
    relay.up()
    wait_until(lambda: back_lines(env.agent.output()[mark:], server), timeout=45,
               what="the API server answering again")
    out = env.agent.output()[mark:]
    told = "\n".join(line for line in out.splitlines() if "is unreachable" in line or "answers again" in line)
    assert len(warnings(out, host)) == 1 and len(back_lines(out, server)) == 1, told
