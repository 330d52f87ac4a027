"""Start, readiness, stop, reload and watchdog of the real daemon."""
import signal
import time

import pytest

from integration.agent_fixtures import wait_until, write_config


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ready_then_prompt_clean_stop(start_agent, agent_config, notify_socket, sig):
    agent = start_agent(agent_config, notify=notify_socket)
    notify_socket.wait_for("READY=1")
    notify_socket.wait_for("STATUS=Running on node test-node: 0 pod volumes published, 0 pending, 0 failed, "
                           "0 tearing-down")
    started = time.monotonic()
    agent.signal(sig)
    notify_socket.wait_for("STOPPING=1", timeout=1.0)
    assert agent.wait(timeout=2) == 0
    assert time.monotonic() - started < 1.0
    out = agent.output()
    assert "info: kvolumed 0." in out and "starting for node test-node" in out
    assert "stopping; volumes stay as they are" in out
    assert "kvolumed stopped" in out
    # A normal stop is quiet: nothing at err level, before or after "kvolumed stopped"
    # (it once ended with "Failed to arm the curl timer: Stale file handle").
    assert not [line for line in out.splitlines() if line.startswith(("err:", "crit:", "alert:", "emerg:"))], out


def test_ready_only_once_listed(start_agent, agent_config, notify_socket, fake_api):
    """READY=1 means reconstructed and synced: while the pods cannot be listed
    yet, the service manager hears STATUS=Starting..., not READY=1."""
    fake_api.set_delay(3.0, path_prefix="/api/v1/pods")
    agent = start_agent(agent_config, notify=notify_socket)
    notify_socket.wait_for("STATUS=Starting: listing pods, CSIDrivers and node test-node")
    # A reload before the first READY=1 must not say READY=1 (nor RELOADING=1).
    agent.signal(signal.SIGHUP)
    agent.wait_for_log("info: Configuration reloaded")
    early = notify_socket.drain(0.5)
    assert not [m for m in early if {"READY=1", "RELOADING=1"} & set(m.split("\n"))], early
    notify_socket.wait_for("READY=1", timeout=10.0)
    agent.wait_for_log("info: Ready: volumes on disk reconstructed, pods, CSIDrivers and node test-node listed")


def test_sighup_reloads_and_applies_log_level(start_agent, tmp_path, notify_socket, agent_config, fake_api):
    root = tmp_path / "root"
    kc = fake_api.kubeconfig_path
    config = write_config(tmp_path / "k.conf", str(root), kc)
    agent = start_agent(config, notify=notify_socket)
    notify_socket.wait_for("READY=1")

    write_config(tmp_path / "k.conf", str(root), kc, "[log]\nlevel = warning\n")
    agent.signal(signal.SIGHUP)
    reloading = notify_socket.wait_for("RELOADING=1")
    assert any(line.startswith("MONOTONIC_USEC=") for line in reloading.split("\n"))
    notify_socket.wait_for("READY=1")
    agent.wait_for_log("info: Configuration reloaded, log level warning")

    # At level warning, the info line of the next reload is no longer written,
    # while a change that needs a restart is named as a warning.
    write_config(tmp_path / "k.conf", str(tmp_path), kc, "[log]\nlevel = warning\n")
    agent.signal(signal.SIGHUP)
    notify_socket.wait_for("READY=1")
    agent.wait_for_log(f'warning: Configuration changed: "agent.root-dir = {tmp_path}" takes effect at the next restart')
    assert agent.output().count("Configuration reloaded") == 1
    # The running value is kept: the next reload names the same change again.
    agent.signal(signal.SIGHUP)
    notify_socket.wait_for("READY=1")
    wait_until(lambda: agent.output().count(f'"agent.root-dir = {tmp_path}" takes effect') == 2,
               what="the restart-only change named again")
    assert agent.proc.poll() is None


def test_sighup_with_bad_config_keeps_running(start_agent, tmp_path, notify_socket, agent_config, fake_api):
    root = tmp_path / "root"
    config = write_config(tmp_path / "k.conf", str(root), fake_api.kubeconfig_path)
    agent = start_agent(config, notify=notify_socket)
    notify_socket.wait_for("READY=1")
    with open(config, "a") as f:
        f.write("bogus = 1\n")
    agent.signal(signal.SIGHUP)
    notify_socket.wait_for("READY=1")
    lines = 10  # write_config writes 9 lines; ours comes next
    agent.wait_for_log(f'err: Keeping the running configuration: {config}:{lines}: unknown key "bogus" in section [metrics]')
    assert agent.proc.poll() is None
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0


def test_watchdog_pings_when_requested(start_agent, agent_config, notify_socket):
    agent = start_agent(agent_config, notify=notify_socket, env={"WATCHDOG_USEC": "200000"})
    notify_socket.wait_for("READY=1")
    messages = notify_socket.drain(1.0)
    pings = [m for m in messages if "WATCHDOG=1" in m.split("\n")]
    # Every 100 ms (half the interval) for one second; allow for a loaded machine.
    assert len(pings) >= 4, messages
    agent.signal(signal.SIGTERM)
    assert agent.wait() == 0


def test_no_watchdog_pings_without_request(start_agent, agent_config, notify_socket):
    start_agent(agent_config, notify=notify_socket)
    notify_socket.wait_for("READY=1")
    messages = notify_socket.drain(0.5)
    assert not [m for m in messages if "WATCHDOG=1" in m.split("\n")]


def test_missing_kubeconfig_exits_1(kvolumed_bin, tmp_path):
    """A kubeconfig that does not exist is a configuration error (exit 1,
    which systemd does not restart), not an unreachable API server: the
    message names the key and the file; nothing under root-dir is touched."""
    import subprocess
    root = tmp_path / "root"
    root.mkdir()
    config = write_config(tmp_path / "k.conf", str(root), str(tmp_path / "missing-kubeconfig"))
    r = subprocess.run([kvolumed_bin, "--config", config], capture_output=True, text=True, timeout=10,
                       env={"KVOLUMED_LOG_TARGET": "stderr", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1
    assert f"{config}:5: [kubernetes] kubeconfig: {tmp_path}/missing-kubeconfig does not exist" in r.stderr
    assert "Cannot reach the API server" not in r.stderr
    assert list(root.iterdir()) == []
