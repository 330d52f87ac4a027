"""--check-config loads what the daemon loads (issue 22, Day 1): the
kubeconfig, the CA, the client certificate and key, the token file, each
opened and parsed; a missing or broken one fails the check with the key and
the file named, and fails the start the same way, with exit 1 (a
configuration error, which systemd does not restart), never 2."""
import os
import shutil
import subprocess

import pytest

from doubles.fakeapi import certs
from integration.agent_fixtures import write_config


def run(binary, *args, env=None):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=20,
                          env=env or {"PATH": "/usr/bin:/bin", "KVOLUMED_LOG_TARGET": "stderr"})


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a client certificate and key signed by it, a second client key
    (not the certificate's), a token file: generated once for the module."""
    d = tmp_path_factory.mktemp("pki")
    paths = certs.write_pki(str(d))
    other = certs.write_pki(str(tmp_path_factory.mktemp("other")))
    paths["other.key"] = other["client.key"]
    paths["other-ca.crt"] = other["ca.crt"]
    token = d / "token"
    token.write_text("abc.def\n")
    paths["token"] = str(token)
    return paths


def kubeconfig(path, ca=None, cert=None, key=None, token_file=None):
    lines = ["apiVersion: v1", "kind: Config", "clusters:", "- name: c", "  cluster:",
             '    server: "https://127.0.0.1:1"']
    if ca:
        lines.append(f'    certificate-authority: "{ca}"')
    lines += ["users:", "- name: u", "  user:"]
    if cert:
        lines += [f'    client-certificate: "{cert}"', f'    client-key: "{key}"']
    if token_file:
        lines.append(f'    tokenFile: "{token_file}"')
    lines += ["contexts:", "- name: x", "  context: {cluster: c, user: u}", "current-context: x", ""]
    path.write_text("\n".join(lines))
    return str(path)


def config(tmp_path, kc, extra=""):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return write_config(tmp_path / "k.conf", str(root), kc, extra=extra)


def test_missing_default_kubeconfig_fails_the_check_and_says_what_it_is(kvolumed_bin, tmp_path):
    """The shipped default /etc/kvolumed/kubeconfig, which nothing installs:
    the check names the key, the file, what the file is and how to get one."""
    if os.path.exists("/etc/kvolumed/kubeconfig"):
        pytest.skip("this machine has an /etc/kvolumed/kubeconfig")
    conf = tmp_path / "k.conf"
    conf.write_text("[agent]\nnode-name = n1\n")
    for args in (["--check-config", "--config", str(conf)], ["--config", str(conf)]):
        r = run(kvolumed_bin, *args)
        assert r.returncode == 1, r.stderr
        assert (f"{conf}: [kubernetes] kubeconfig: /etc/kvolumed/kubeconfig does not exist. It is the kubeconfig "
                "kvolumed uses to reach the API server as this node (user system:node:n1)") in r.stderr
        assert "/etc/kubernetes/kubelet.conf" in r.stderr
        assert r.stdout == ""


@pytest.mark.parametrize("case", ["ca-missing", "ca-not-pem", "cert-missing", "key-missing", "key-mismatch",
                                  "cert-not-pem", "token-missing", "token-empty", "kubeconfig-missing",
                                  "kubeconfig-broken"])
def test_broken_credential_fails_check_and_start_with_exit_1(kvolumed_bin, tmp_path, pki, case):
    """Each broken file fails --check-config and the start alike: exit 1, the
    line of kvolumed.conf that names it, the kubeconfig field and the file;
    nothing under root-dir is touched."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    empty = tmp_path / "empty-token"
    empty.write_text(" \n")
    missing = str(tmp_path / "missing")
    kc_args = {"ca": pki["ca.crt"], "cert": pki["client.crt"], "key": pki["client.key"]}
    expect = {
        "ca-missing": ({"ca": missing}, f"certificate-authority {missing}: cannot read: No such file or directory"),
        "ca-not-pem": ({"ca": str(junk)}, f"certificate-authority {junk}: no PEM certificate in it"),
        "cert-missing": ({"cert": missing}, f"client-certificate {missing}: cannot read: No such file"),
        "cert-not-pem": ({"cert": str(junk)}, f"client-certificate {junk}: no PEM certificate in it"),
        "key-missing": ({"key": missing}, f"client-key {missing}: cannot read: No such file"),
        "key-mismatch": ({"key": pki["other.key"]},
                         f"client-key {pki['other.key']} is not the key of the certificate in client-certificate "
                         f"{pki['client.crt']}"),
        "token-missing": ({"cert": None, "token_file": missing}, f"tokenFile {missing}: cannot read: No such file"),
        "token-empty": ({"cert": None, "token_file": str(empty)}, f"tokenFile {empty}: the file is empty"),
    }
    if case == "kubeconfig-missing":
        kc, message = missing, f"[kubernetes] kubeconfig: {missing} does not exist"
    elif case == "kubeconfig-broken":
        kc = str(junk)
        message = f"[kubernetes] kubeconfig: {junk}: kubeconfig: not a YAML mapping"
    else:
        kc_args.update(expect[case][0])
        kc = kubeconfig(tmp_path / "kubeconfig", **kc_args)
        message = f"[kubernetes] kubeconfig {kc}: {expect[case][1]}"
    conf = config(tmp_path, kc)
    r = run(kvolumed_bin, "--check-config", "--config", conf)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout == ""
    # write_config puts kubeconfig on line 5.
    assert r.stderr.startswith(f"{conf}:5: {message}"), r.stderr
    r = run(kvolumed_bin, "--config", conf)
    assert r.returncode == 1, r.stderr
    assert f"{conf}:5: {message}" in r.stderr
    assert "Cannot reach the API server" not in r.stderr
    assert list((tmp_path / "root").iterdir()) == []


def test_server_settings_name_their_key(kvolumed_bin, tmp_path, pki):
    """With server= and its own keys, the error names that key's line."""
    missing = str(tmp_path / "missing.crt")
    root = tmp_path / "root"
    root.mkdir()
    conf = tmp_path / "k.conf"
    conf.write_text(f"[agent]\nnode-name = n1\nroot-dir = {root}\n[kubernetes]\nserver = https://127.0.0.1:1\n"
                    f"token-file = {pki['token']}\ncertificate-authority = {missing}\n")
    r = run(kvolumed_bin, "--check-config", "--config", str(conf))
    assert r.returncode == 1
    assert r.stderr == (f"{conf}:7: [kubernetes] certificate-authority {missing}: cannot read: "
                        "No such file or directory\n")
    conf.write_text(f"[agent]\nnode-name = n1\nroot-dir = {root}\n[kubernetes]\nserver = https://127.0.0.1:1\n"
                    f"client-certificate = {pki['client.crt']}\nclient-key = {pki['other.key']}\n")
    r = run(kvolumed_bin, "--check-config", "--config", str(conf))
    assert r.returncode == 1
    assert r.stderr.startswith(f"{conf}:7: [kubernetes] client-key {pki['other.key']} is not the key of the "
                               f"certificate in client-certificate {pki['client.crt']}")


def test_good_credentials_pass_with_warnings_for_root_dir_and_sockets(kvolumed_bin, tmp_path, pki):
    """Good files pass.  A missing root-dir and a static driver's missing
    socket are warnings, not errors: both may appear after kvolumed starts."""
    kc = kubeconfig(tmp_path / "kubeconfig", ca=pki["ca.crt"], cert=pki["client.crt"], key=pki["client.key"])
    sock = tmp_path / "csi.sock"
    conf = write_config(tmp_path / "k.conf", str(tmp_path / "no-root"), kc,
                        extra=f'[driver "a.b"]\nendpoint = unix://{sock}\n[runtime]\nendpoint = /run/x.sock\n')
    r = run(kvolumed_bin, "--check-config", "--config", conf)
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [
        f"warning: [agent] root-dir {tmp_path}/no-root: No such file or directory; kvolumed creates it at start "
        "(its parent must exist), but a root-dir shared with a kubelet is normally there already",
        f'warning: [driver "a.b"] endpoint {sock}: No such file or directory; kvolumed waits for the driver to '
        "create its socket",
    ]
    # Cert and key in one file (kubelet-client-current.pem) and a token file pass too.
    both = tmp_path / "current.pem"
    both.write_bytes(open(pki["client.crt"], "rb").read() + open(pki["client.key"], "rb").read())
    kc = kubeconfig(tmp_path / "kubeconfig", ca=pki["ca.crt"], cert=str(both), key=str(both),
                    token_file=pki["token"])
    (tmp_path / "no-root").mkdir()
    r = run(kvolumed_bin, "--check-config", "--config", write_config(tmp_path / "k.conf", str(tmp_path / "no-root"),
                                                                      kc, extra="[runtime]\nendpoint = /run/x\n"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_unit_reload_runs_the_check_before_the_signal(kvolumed_bin, tmp_path, pki):
    """ExecReload= runs the check first, then signals the daemon: with a
    broken file the check fails, so systemd stops there and "systemctl
    reload" fails (the real-systemd test runs it); it is quiet when the file
    is good, so that every reload does not put the listing in the journal."""
    from integration.agent_fixtures import build_dir
    unit = open(os.path.join(build_dir(), "systemd", "kvolumed.service")).read()
    reloads = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecReload=")]
    assert len(reloads) == 2 and reloads[1] == "/bin/kill -HUP $MAINPID", reloads
    check = reloads[0].split()
    assert os.path.basename(check[0]) == "kvolumed" and check[1:] == ["--check-config", "--quiet"]
    broken = tmp_path / "broken.conf"
    broken.write_text("[csi]\ncall-timeout = soon\n")
    r = run(kvolumed_bin, *check[1:], "--config", str(broken))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(f'{broken}:2: call-timeout: "soon" is not')
    good = write_config(tmp_path / "good.conf", str(tmp_path), kubeconfig(tmp_path / "kc", token_file=pki["token"]))
    r = run(kvolumed_bin, *check[1:], "--config", good)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_root_dir_whose_parent_is_missing_exits_1(kvolumed_bin, tmp_path, pki):
    """root-dir is created at start, but not its parents: a missing parent is
    a typo in the configuration (exit 1, the key and its line), not a failure
    that a restart every 2 s could fix."""
    kc = kubeconfig(tmp_path / "kubeconfig", ca=pki["ca.crt"], token_file=pki["token"])
    root = tmp_path / "no-such-parent" / "root"
    conf = write_config(tmp_path / "k.conf", str(root), kc, extra="[runtime]\nendpoint = /run/x.sock\n")
    r = run(kvolumed_bin, "--config", conf)
    assert r.returncode == 1, r.stderr
    assert f"{conf}:3: [agent] root-dir {root} cannot be created: its parent directory does not exist" in r.stderr
    assert not (tmp_path / "no-such-parent").exists()


def test_kubeconfig_another_user_could_write_is_refused(kvolumed_bin, tmp_path, pki):
    """The kubeconfig names the API server to believe and the credential to
    send it: configuration only root may write, as kvolumed.conf (issue 29,
    safety item 8); a FIFO in its place is refused without blocking."""
    kc = tmp_path / "kubeconfig"
    kubeconfig(kc, ca=pki["ca.crt"], token_file=pki["token"])
    conf = config(tmp_path, str(kc))
    refusing = ("refusing configuration that a user other than root could change; make it root's and writable "
                "by root alone (chown root, chmod go-w)")
    for mode, owner, problem in [(0o646, 0, "writable by others"), (0o600, 1000, "not owned by root")]:
        os.chown(kc, owner, owner)
        os.chmod(kc, mode)
        for args in (["--check-config"], []):
            r = run(kvolumed_bin, *args, "--config", conf)
            assert r.returncode == 1, args
            assert (f"{conf}:5: [kubernetes] kubeconfig: {kc}: {problem} (mode {mode:04o}, owner uid {owner}): "
                    f"{refusing}") in r.stderr, args
    # A directory above it.
    os.chown(kc, 0, 0)
    os.chmod(kc, 0o600)
    sub = tmp_path / "open"
    sub.mkdir(mode=0o700)
    os.chmod(sub, 0o777)
    shutil.move(kc, sub / "kubeconfig")
    conf = config(tmp_path, str(sub / "kubeconfig"))
    r = run(kvolumed_bin, "--check-config", "--config", conf)
    assert r.returncode == 1
    assert (f"{conf}:5: [kubernetes] kubeconfig: {sub}: writable by its group and by others (mode 0777, owner "
            f"uid 0), above {sub}/kubeconfig: {refusing}") in r.stderr
    os.chmod(sub, 0o755)
    r = run(kvolumed_bin, "--check-config", "--config", conf)
    assert r.returncode == 0, r.stderr
    # Not a regular file.
    fifo = tmp_path / "fifo-kubeconfig"
    os.mkfifo(fifo)
    conf = config(tmp_path, str(fifo))
    r = run(kvolumed_bin, "--check-config", "--config", conf)
    assert r.returncode == 1
    assert f"{conf}:5: [kubernetes] kubeconfig: {fifo}: cannot read: a FIFO, not a regular file" in r.stderr
