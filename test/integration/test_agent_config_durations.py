"""Durations (issue 22, Day 1): compound values (1m30s, 1h5m) are accepted,
and bounds refuse values that would hammer the API server or a driver, or
make a timeout meaningless; the error names the key and the range."""
import os
import subprocess

import pytest

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def check(binary, tmp_path, section, key, value, env=None):
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG)
    conf = tmp_path / "k.conf"
    # The key under test is always on line 9.
    agent = f"\n{key} = {value}\n" if section == "agent" else ""
    other = f"[{section}]\n{key} = {value}\n" if section != "agent" else ""
    conf.write_text(f"[kubernetes]\nkubeconfig = {kc}\n[runtime]\nendpoint = /run/x.sock\n"
                    f"[agent]\nnode-name = n\nroot-dir = {tmp_path}\n" + agent + other)
    full_env = {"PATH": "/usr/bin:/bin", **(env or {})}
    r = subprocess.run([binary, "--check-config", "--config", str(conf)], capture_output=True, text=True,
                       timeout=10, env=full_env)
    return r, str(conf)


@pytest.mark.parametrize("value,listed", [("1m30s", "90s"), ("1h5m", "65m"), ("2m500ms", "120500ms"),
                                          ("1h", "1h"), ("45s", "45s")])
def test_compound_durations(kvolumed_bin, tmp_path, value, listed):
    r, _ = check(kvolumed_bin, tmp_path, "agent", "resync-interval", value)
    assert r.returncode == 0, r.stderr
    assert f"agent.resync-interval = {listed}" in r.stdout.splitlines()


@pytest.mark.parametrize("value", ["30s1m", "1m1m", "1m30", "1m 30s", "1.5m", "m", "1d"])
def test_malformed_durations(kvolumed_bin, tmp_path, value):
    r, conf = check(kvolumed_bin, tmp_path, "agent", "resync-interval", value)
    assert r.returncode == 1
    assert r.stderr == (f'{conf}:9: resync-interval: "{value}" is not a positive duration (integers with h, m, '
                        "s or ms, largest first, e.g. 90s or 1m30s)\n")


BOUNDS = [
    ("agent", "resync-interval", "10s", "from 30s to 24h (each round re-reads every pod's objects from the API "
                                        "server)"),
    ("agent", "resync-interval", "25h", "from 30s to 24h"),
    ("csi", "call-timeout", "500ms", "from 1s to 30m (shorter gives up on a working driver; longer holds a volume "
                                     "on a hung one)"),
    ("csi", "call-timeout", "1h", "from 1s to 30m"),
    ("csi", "republish-interval", "5s", "from 10s to 24h (each round calls NodePublishVolume for every such "
                                        "volume)"),
    ("csi", "stats-interval", "1s", "from 10s to 24h, or 0 for off (each round calls NodeGetVolumeStats for every "
                                    "volume)"),
    ("csi", "attach-limit-refresh-interval", "2s", "from 10s to 24h, or 0 for off"),
    ("volumes", "expand-check-interval", "1s", "from 10s to 24h (each round GETs the claim of every published "
                                               "volume)"),
]


@pytest.mark.parametrize("section,key,value,message", BOUNDS)
def test_bounds_name_the_key_and_the_range(kvolumed_bin, tmp_path, section, key, value, message):
    r, conf = check(kvolumed_bin, tmp_path, section, key, value)
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith(f"{conf}:9: {key}: {value} is out of range: {message}"), r.stderr


def test_bounds_at_the_limits_and_off(kvolumed_bin, tmp_path):
    for section, key, value in [("agent", "resync-interval", "30s"), ("agent", "resync-interval", "24h"),
                                ("csi", "call-timeout", "1s"), ("csi", "call-timeout", "30m"),
                                ("csi", "stats-interval", "0"), ("csi", "stats-interval", "10s"),
                                ("csi", "republish-interval", "10s")]:
        r, _ = check(kvolumed_bin, tmp_path, section, key, value)
        assert r.returncode == 0, (key, value, r.stderr)


def test_the_suites_switch_lowers_only_the_minimum(kvolumed_bin, tmp_path):
    """The integration suite runs rounds every second (KVOLUMED_TEST_SHORT_INTERVALS);
    the maximum still holds."""
    env = {"KVOLUMED_TEST_SHORT_INTERVALS": "1"}
    r, _ = check(kvolumed_bin, tmp_path, "csi", "stats-interval", "1s", env)
    assert r.returncode == 0, r.stderr
    r, _ = check(kvolumed_bin, tmp_path, "csi", "call-timeout", "31m", env)
    assert r.returncode == 1
