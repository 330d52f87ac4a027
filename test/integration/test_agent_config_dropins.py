"""Drop-in configuration (issue 22, Day 1): <config>.d/*.conf read in byte
order after the main file, a later file overriding a key, one [driver "x"]
per file as configuration management writes them; errors name the drop-in
and its line; --check-config says where each setting came from; a reload
reads them again."""
import os
import signal
import subprocess

import pytest

from integration.agent_fixtures import make_node, write_config

TOKEN_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=10)


@pytest.fixture
def main_conf(tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text(TOKEN_KUBECONFIG)
    path = tmp_path / "kvolumed.conf"
    path.write_text(f"[agent]\nnode-name = n1\nroot-dir = {tmp_path}\n[kubernetes]\nkubeconfig = {kc}\n"
                    "[csi]\ncall-timeout = 1m\n[runtime]\nendpoint = /run/x.sock\n")
    (tmp_path / "kvolumed.conf.d").mkdir()
    return path


def dropin(main_conf, name, text):
    p = main_conf.parent / "kvolumed.conf.d" / name
    p.write_text(text)
    return str(p)


def listing(r):
    return dict(line.split(" = ", 1) for line in r.stdout.splitlines())


def test_dropins_override_in_byte_order_and_add_drivers(kvolumed_bin, main_conf):
    d = main_conf.parent / "kvolumed.conf.d"
    b = dropin(main_conf, "20-b.conf", "[csi]\ncall-timeout = 3m\n[log]\nlevel = debug\n")
    a = dropin(main_conf, "10-a.conf", "[csi]\ncall-timeout = 2m\nmax-parallel = 8\n")
    x = dropin(main_conf, "30-driver-x.conf", '[driver "x.example.com"]\nendpoint = unix:///run/x/csi.sock\n')
    y = dropin(main_conf, "31-driver-y.conf", '[driver "y.example.com"]\nendpoint = unix:///run/y/csi.sock\n')
    # Neither a hidden file nor another suffix is read (a broken one would fail).
    dropin(main_conf, ".40-hidden.conf", "broken\n")
    dropin(main_conf, "50-old.conf.dpkg-old", "broken\n")
    dropin(main_conf, "README", "broken\n")
    r = run(kvolumed_bin, "--check-config", "--config", str(main_conf))
    assert r.returncode == 0, r.stderr
    settings = listing(r)
    assert settings["csi.call-timeout"] == f"3m  # {b}:2"
    assert settings["csi.max-parallel"] == f"8  # {a}:3"
    assert settings["log.level"] == f"debug  # {b}:4"
    assert settings["agent.node-name"] == f"n1  # {main_conf}:2"
    assert settings["agent.resync-interval"] == "5m  # default"
    assert settings['driver "x.example.com".endpoint'] == f"unix:///run/x/csi.sock  # {x}:1"
    assert settings['driver "y.example.com".endpoint'] == f"unix:///run/y/csi.sock  # {y}:1"
    # A later file replaces a driver of an earlier one.
    z = dropin(main_conf, "32-driver-x-moved.conf", '[driver "x.example.com"]\nendpoint = unix:///run/x2/csi.sock\n')
    settings = listing(run(kvolumed_bin, "--check-config", "--config", str(main_conf)))
    assert settings['driver "x.example.com".endpoint'] == f"unix:///run/x2/csi.sock  # {z}:1"
    assert sum(1 for k in settings if k.startswith("driver ")) == 2
    assert d.is_dir()


def test_no_dropins_no_sources(kvolumed_bin, main_conf):
    """Without drop-ins the listing stays as it was: one file says it all."""
    r = run(kvolumed_bin, "--check-config", "--config", str(main_conf))
    assert r.returncode == 0, r.stderr
    assert "#" not in r.stdout


@pytest.mark.parametrize("text,line,message", [
    ("[csi]\ncall-timeout = soon\n", 2, 'call-timeout: "soon" is not'),
    ("[csi]\nmax-parallel = 1\nmax-parallel = 2\n", 3, 'key "max-parallel" repeated in section [csi] (first on line 2)'),
    ("[agent]\n[agent]\n", 2, "section [agent] repeated (first on line 1)"),
    ("[kubelet]\n", 1, "unknown section [kubelet]"),
    ('[driver "z.example.com"]\n', 1, '[driver "z.example.com"] has no endpoint'),
    ("[kubernetes]\nserver = https://h:6443\n", 2, "server and kubeconfig are both set ("),
])
def test_errors_name_the_dropin_and_line(kvolumed_bin, main_conf, text, line, message):
    dropin(main_conf, "10-ok.conf", "[csi]\nmax-parallel = 3\n")
    bad = dropin(main_conf, "20-bad.conf", text)
    for args in (["--check-config"], []):
        r = run(kvolumed_bin, *args, "--config", str(main_conf))
        assert r.returncode == 1
        assert r.stderr.startswith(f"{bad}:{line}: {message}"), r.stderr


def test_reload_reads_the_dropins_again(start_agent, fake_api, tmp_path):
    fake_api.create(make_node())
    root = tmp_path / "root"
    root.mkdir()
    conf = write_config(tmp_path / "kvolumed.conf", str(root), fake_api.kubeconfig_path)
    (tmp_path / "kvolumed.conf.d").mkdir()
    agent = start_agent(conf)
    agent.wait_for_log("says kvolumed is", timeout=20)
    (tmp_path / "kvolumed.conf.d" / "50-debug.conf").write_text("[log]\nlevel = debug\n")
    # Lines that only moved (a comment added on top) are no change to warn about.
    text = open(conf).read()
    with open(conf, "w") as f:
        f.write("# managed by configuration management\n" + text)
    agent.signal(signal.SIGHUP)
    agent.wait_for_log("Configuration reloaded, log level debug", timeout=20)
    assert "takes effect at the next restart" not in agent.output()


REFUSING = ("refusing configuration that a user other than root could change; make it root's and writable by "
            "root alone (chown root, chmod go-w)")


def test_dropin_another_user_could_write_is_refused(kvolumed_bin, main_conf):
    """Configuration only root may write (issue 29, safety item 8), as sshd's
    StrictModes: a drop-in of uid 1000, mode 0666, in a 0777 directory, would
    let that user choose the kubeconfig, root-dir, where tokens go; both the
    check and the daemon refuse it, naming the path, its mode and owner."""
    d = main_conf.parent / "kvolumed.conf.d"
    evil = dropin(main_conf, "50-evil.conf", "[agent]\nroot-dir = /srv/evil\n")
    os.chown(evil, 1000, 1000)
    os.chmod(evil, 0o666)
    os.chmod(d, 0o777)
    cases = [
        (d, 0o777, 0, f"{d}: writable by its group and by others (mode 0777, owner uid 0): {REFUSING}"),
        (evil, 0o666, 1000, f"{evil}: not owned by root and writable by its group and by others (mode 0666, "
                            f"owner uid 1000): {REFUSING}"),
        (evil, 0o644, 1000, f"{evil}: not owned by root (mode 0644, owner uid 1000): {REFUSING}"),
        (evil, 0o664, 0, f"{evil}: writable by its group (mode 0664, owner uid 0): {REFUSING}"),
        # A root-owned sticky directory (as /tmp) is no exception for the
        # drop-in directory: anyone could add a drop-in to it.
        (d, 0o1777, 0, f"{d}: writable by its group and by others (mode 1777, owner uid 0): {REFUSING}"),
    ]
    for path, mode, owner, message in cases:
        os.chmod(d, 0o755)
        os.chown(evil, owner, owner)
        os.chmod(path, mode)
        for args in (["--check-config"], []):
            r = run(kvolumed_bin, *args, "--config", str(main_conf))
            assert (r.returncode, r.stderr) == (1, message + "\n"), args
        os.chmod(evil, 0o644)
    os.chmod(d, 0o755)
    os.chown(evil, 0, 0)
    r = run(kvolumed_bin, "--check-config", "--config", str(main_conf))
    assert r.returncode == 0, r.stderr
    assert listing(r)["agent.root-dir"] == f"/srv/evil  # {evil}:2"


def test_dropin_that_is_no_regular_file_is_refused(kvolumed_bin, main_conf):
    """A FIFO would block the reader for ever (on the daemon's loop, at a
    reload): refused without being opened."""
    dropin(main_conf, "10-ok.conf", "[csi]\nmax-parallel = 3\n")
    fifo = main_conf.parent / "kvolumed.conf.d" / "20-fifo.conf"
    os.mkfifo(fifo)
    for args in (["--check-config"], []):
        r = run(kvolumed_bin, *args, "--config", str(main_conf))
        assert r.returncode == 1
        assert r.stderr == (f"{fifo}: cannot read: a FIFO, not a regular file; configuration is read from "
                            "regular files only (remove it, or make it one)\n")


def test_reload_refuses_a_fifo_or_a_dropin_others_may_write_and_keeps_running(start_agent, fake_api, tmp_path):
    fake_api.create(make_node())
    root = tmp_path / "root"
    root.mkdir()
    conf = write_config(tmp_path / "kvolumed.conf", str(root), fake_api.kubeconfig_path)
    d = tmp_path / "kvolumed.conf.d"
    d.mkdir()
    agent = start_agent(conf)
    agent.wait_for_log("says kvolumed is", timeout=20)

    fifo = d / "20-fifo.conf"
    os.mkfifo(fifo)
    agent.signal(signal.SIGHUP)
    agent.wait_for_log(f"err: Keeping the running configuration: {fifo}: cannot read: a FIFO, not a regular "
                       "file", timeout=20)
    fifo.unlink()

    evil = d / "30-evil.conf"
    evil.write_text("[log]\nlevel = debug\n")
    os.chown(evil, 1000, 1000)
    agent.signal(signal.SIGHUP)
    agent.wait_for_log(f"err: Keeping the running configuration: {evil}: not owned by root (mode 0644, owner "
                       f"uid 1000): {REFUSING}", timeout=20)
    assert "Configuration reloaded" not in agent.output()

    # The loop still answers: the drop-in made root's, the next reload takes it.
    os.chown(evil, 0, 0)
    agent.signal(signal.SIGHUP)
    agent.wait_for_log("Configuration reloaded, log level debug", timeout=20)
    assert agent.proc.poll() is None
