"""Under systemd (JOURNAL_STREAM names stderr) entries go to the journal as
structured records; tested against a stand-in journald socket in a nested
private mount namespace, so the machine's /run is untouched."""
import json
import os
import re
import socket
import subprocess
import time

from integration.agent_fixtures import DRIVER, REPO_DIR, VolumeEnv, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))


def test_entries_are_structured_journal_records(kvolumed_bin, agent_config):
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "/usr/bin/python3",
         os.path.join(HERE, "journal_capture.py"), "--seconds", "0.3", "--",
         kvolumed_bin, "--config", agent_config],
        capture_output=True, text=True, timeout=30, check=True)
    result = json.loads(out.stdout)
    assert result["exit"] == 0
    # Nothing is duplicated as text on stderr when the journal takes the entries.
    assert result["stderr"] == ""
    starting = [e for e in result["entries"] if "starting for node test-node" in e.get("MESSAGE", "")]
    assert len(starting) == 1
    e = starting[0]
    assert e["PRIORITY"] == "6"
    assert e["SYSLOG_IDENTIFIER"] == "kvolumed"
    assert e["CODE_FUNC"] == "agent_run"
    assert e["CODE_FILE"].endswith("agent.c")
    assert any("stopping; volumes stay as they are" in x.get("MESSAGE", "") for x in result["entries"])


# --- what the journal says of volumes and drivers (issue 34, item 7) -----------------

CATALOG = os.path.join(REPO_DIR, "systemd", "kvolumed.catalog")
MSG_FAILED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a53"
MSG_BLOCKED = "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a55"


def catalog_fields():
    """MESSAGE_ID → the fields its catalog entry names (@FIELD@)."""
    entries, current = {}, None
    with open(CATALOG) as f:
        for line in f:
            m = re.match(r"^-- ([0-9a-f]{32})\s*$", line)
            if m:
                current = entries.setdefault(m.group(1), set())
            elif current is not None:
                current.update(re.findall(r"@([A-Z_]+)@", line))
    return entries


def read_entries(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def captured(env, tmp_path):
    """kvolumed of env under a stand-in journald; returns the file its
    entries are appended to as they come."""
    entries = tmp_path / "entries.jsonl"
    wrapper = ["unshare", "-m", "--propagation", "private", "/usr/bin/python3",
               os.path.join(HERE, "journal_capture.py"), "--seconds", "600", "--entries", str(entries), "--"]
    env.start(wrapper=wrapper)
    return entries


def test_catalog_entries_never_show_unfilled_fields(volume_env, tmp_path):
    """journalctl -x fills a catalog entry's @FIELD@ from the entry: every
    entry with a catalogued MESSAGE_ID carries every field its text names.
    A failure found before any CSI call (an invalid pod, a driver that never
    registers) has its own MESSAGE_ID, whose text needs no CSI_METHOD=; a
    failed call's entry carries CSI_METHOD= and CSI_CODE=.  Before: one
    MESSAGE_ID for both, and "A CSI operation (@CSI_METHOD@) ..." shown
    unfilled; the failed call's entry had no CSI_METHOD= either; the driver
    not registered had no DRIVER=."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    entries = captured(env, tmp_path)
    env.driver.control.fail_next("NodePublishVolume", "INTERNAL", "backend down", count=1)
    env.pod("flaky", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    env.pod("evil", [{"name": "..", "csi": {"driver": DRIVER}}])
    env.pod("orphan", [{"name": "data", "csi": {"driver": "absent.csi.example.com"}}])

    def has(message_id, pod, **fields):
        return [e for e in read_entries(entries) if e.get("MESSAGE_ID") == message_id and e.get("POD") == pod
                and all(e.get(k) == v for k, v in fields.items())]
    wait_until(lambda: has(MSG_FAILED, "default/flaky", CSI_METHOD="NodePublishVolume", CSI_CODE="Internal"),
               timeout=30, what="the failed NodePublishVolume's entry")
    wait_until(lambda: has(MSG_BLOCKED, "default/evil"), timeout=30, what="the invalid pod's entry")
    # After the driver's 20 s grace.
    wait_until(lambda: has(MSG_BLOCKED, "default/orphan", DRIVER="absent.csi.example.com"), timeout=60,
               interval=0.5, what="the unregistered driver's entry, with DRIVER=")
    # The retry publishes: the published entry, then the unpublished one.
    wait_until(lambda: has("5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a51", "default/flaky"), timeout=30,
               what="the published entry")
    env.api.delete("pods", "default", "flaky")
    wait_until(lambda: has("5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a52", "default/flaky"), timeout=30,
               what="the unpublished entry")

    wanted = catalog_fields()
    assert MSG_BLOCKED in wanted and "CSI_METHOD" not in wanted[MSG_BLOCKED], wanted
    seen = set()
    for e in read_entries(entries):
        fields = wanted.get(e.get("MESSAGE_ID"))
        if fields is None:
            continue
        seen.add(e["MESSAGE_ID"])
        missing = sorted(f for f in fields if not e.get(f))
        assert not missing, f"{e['MESSAGE_ID']} lacks {missing}: {e.get('MESSAGE')}"
    assert {MSG_FAILED, MSG_BLOCKED} <= seen, seen


def socket_path(endpoint):
    return endpoint[len("unix://"):] if endpoint.startswith("unix://") else endpoint


def driver_lines(text):
    """The notices and warnings about the driver (its name in the text or DRIVER=)."""
    return [line for line in text.splitlines()
            if (" notice: " in line or " warning: " in line) and DRIVER in line]


def test_static_driver_without_its_socket_is_one_line_gone_and_one_back(fake_api, mock_csi_factory,
                                                                          start_agent, tmp_path):
    """A configured driver whose socket is not there: one line when it is
    missing, in the socket's words (its path, "No such file or directory"),
    nothing while it stays so (the directory's inotify watch says when it is
    created), one line when it is there.  Before: a notice and the failed
    call's warning ("Failed to connect to localhost port 80") at each retry,
    every 30 s for ever."""
    driver = mock_csi_factory(name=DRIVER, tmpfs=True, start=False)
    env = VolumeEnv(fake_api, driver, start_agent, tmp_path)
    agent = env.start()
    path = socket_path(driver.endpoint)
    agent.wait_for_log(f"Socket {path} of statically configured CSI driver {DRIVER}: No such file or directory",
                       timeout=20)
    # A measurement window, not a wait for an event: the old backoff (0.5 s
    # doubling) asked 4 times in 8 s, two lines each.
    t0 = time.monotonic()
    wait_until(lambda: time.monotonic() - t0 >= 8, timeout=12, interval=0.1, what="the window")
    out = agent.output()
    assert len(driver_lines(out)) == 1, "\n".join(driver_lines(out))
    assert "DRIVER=" + DRIVER in driver_lines(out)[0]
    assert "localhost port 80" not in out
    assert not driver.calls("NodeGetInfo")

    driver.start()
    agent.wait_for_log(f"Socket {path} of CSI driver {DRIVER} is there now", timeout=20)
    agent.wait_for_log(f"Statically configured CSI driver {DRIVER} is ready", timeout=20)

    # Gone again (the driver stopped and removed its socket): one line.
    mark = len(agent.output())
    driver.stop()
    if os.path.exists(path):
        os.unlink(path)
    wait_until(lambda: driver_lines(agent.output()[mark:]), timeout=20, what="the socket gone, said")
    t0 = time.monotonic()
    wait_until(lambda: time.monotonic() - t0 >= 4, timeout=8, interval=0.1, what="the window")
    lines = driver_lines(agent.output()[mark:])
    assert len(lines) == 1 and "No such file or directory" in lines[0], "\n".join(lines)

    # A socket left by a driver that died (bound, nobody listening): there,
    # but refusing; said once, in the socket's words, the retries quiet.
    mark = len(agent.output())
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    agent.wait_for_log(f"connection error on {path}: connect: Connection refused", timeout=20)
    t0 = time.monotonic()
    wait_until(lambda: time.monotonic() - t0 >= 4, timeout=8, interval=0.1, what="the window")
    lines = [line for line in driver_lines(agent.output()[mark:]) if "is there now" not in line]
    assert len(lines) == 1 and "Connection refused" in lines[0], "\n".join(lines)
    assert "localhost port 80" not in agent.output()
    os.unlink(path)


def test_a_hung_unpublish_is_said_after_a_quarter_of_its_timeout_with_its_pod(volume_env):
    """A CSI call that changes a mount and has not answered after a quarter
    of its timeout says so once, with its pod (csi/client.c,
    CSI_CALL_SLOW_FRACTION): 2 s of an 8 s call-timeout here, 30 s of the
    default 2 min.  Before: nothing until the call returned or timed out.
    The calls' lines carry POD= (before: DRIVER= and VOLUME_HANDLE= only)."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    agent = env.start(csi="call-timeout = 8s\n")
    pod = env.pod("stuck", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "scratch")
    env.wait_mounted(target, timeout=30)
    # The driver mounts before it answers; the line follows the answer.
    published = wait_until(lambda: [line for line in agent.output().splitlines()
                                    if "NodePublishVolume of " in line and ": OK (" in line],
                           timeout=30, what="the NodePublishVolume's line")
    assert published and "for pod default/stuck" in published[0], published
    assert " POD=default/stuck" in published[0] and f" POD_UID={pod['metadata']['uid']}" in published[0]

    env.driver.control.hang("NodeUnpublishVolume")
    env.api.delete("pods", "default", "stuck")
    env.driver.control.wait_hung("NodeUnpublishVolume", 1, timeout=30)
    agent.wait_for_log("for pod default/stuck on " + DRIVER + " has been in flight for ", timeout=20)
    slow = [line for line in agent.output().splitlines() if "has been in flight" in line]
    assert len(slow) == 1, slow
    assert slow[0].split(" ", 2)[1] == "warning:" and "NodeUnpublishVolume of " in slow[0], slow[0]
    assert "(it times out after 8 s)" in slow[0] and " CSI_METHOD=NodeUnpublishVolume" in slow[0], slow[0]
    assert " POD=default/stuck" in slow[0], slow[0]
    env.driver.control.release()
    env.wait_gone(target, timeout=30)
    assert len([line for line in agent.output().splitlines() if "has been in flight" in line]) == 1
