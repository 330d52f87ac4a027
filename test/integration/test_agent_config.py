"""The configuration contract of DESIGN.md §2 as the binary exposes it."""
import os
import re
import shutil
import subprocess

import pytest

from integration.agent_fixtures import REPO_DIR, SHARED_DIR

DEFAULT_LISTING = """\
agent.node-name = {node}
agent.root-dir = /var/lib/kubelet
agent.resync-interval = 5m
agent.mount-source = auto
kubernetes.kubeconfig = /etc/kvolumed/kubeconfig
kubernetes.server = 
kubernetes.token-file = 
kubernetes.certificate-authority = 
kubernetes.client-certificate = 
kubernetes.client-key = 
csi.registration-dir = /var/lib/kubelet/plugins_registry
csi.call-timeout = 2m
csi.max-parallel = 64
csi.republish-interval = 1m
csi.stats-interval = 1m
csi.attach-limit-refresh-interval = 0
volumes.selinux-mount-all = false
volumes.expand-check-interval = 1m
volumes.runner-kinds = 
runtime.endpoint = unix:///run/containerd/containerd.sock
api.socket = /run/kvolumed/kvolumed.sock
api.group = 
metrics.listen = 127.0.0.1:10284
log.level = info
"""


# A kubeconfig that --check-config can load without any other file.
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=10)


def run_with_etc_kubeconfig(binary, tmp_path, *args):
    """kvolumed with the shipped default /etc/kvolumed/kubeconfig present: in
    a mount namespace of its own, /etc gets an overlay that adds it, so the
    machine's /etc is never written."""
    work = tmp_path / "etc-overlay"
    work.mkdir()
    kc = tmp_path / "default-kubeconfig"
    kc.write_text(KUBECONFIG)
    script = (f"mount -t tmpfs tmpfs {work} && mkdir -p {work}/u/kvolumed {work}/w && "
              f"cp {kc} {work}/u/kvolumed/kubeconfig && "
              f"mount -t overlay overlay -o lowerdir=/etc,upperdir={work}/u,workdir={work}/w /etc && "
              'exec "$@"')
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", binary, *args],
                          capture_output=True, text=True, timeout=10)


def with_kubeconfig(tmp_path, text):
    """text with a [kubernetes] kubeconfig that loads, instead of the default."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG)
    return text + f"[kubernetes]\nkubeconfig = {kc}\n"


def write(tmp_path, text, name="k.conf"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_version_and_help(kvolumed_bin):
    """--version says what runs: the version that orders
    (<base>+git<YYYYMMDD>.<HHMMSS>.<commit>, agent/version.sh), the commit it
    was built from ("-dirty" with uncommitted changes) and the build type."""
    r = run(kvolumed_bin, "--version")
    assert r.returncode == 0
    m = re.fullmatch(r"kvolumed (\d+\.\d+\.\d+(?:\+git(\d{8}\.\d{6})\.([0-9a-f]{12}))?)\n"
                     r"commit: ([0-9a-f]{12}(?:-dirty)?|unknown)\n"
                     r"build type: (plain|debug|debugoptimized|release|minsize|custom)\n", r.stdout)
    assert m, r.stdout
    head = subprocess.run(["git", "-C", REPO_DIR, "log", "-1", "--format=%H %cd", "--date=format-local:%Y%m%d.%H%M%S"],
                          capture_output=True, text=True, env=dict(os.environ, TZ="UTC0"))
    if head.returncode == 0:
        # Built from this checkout (ninja regenerates both at every build):
        # the commit and its date (UTC) in the version, as in the package's.
        sha, stamp = head.stdout.split()
        assert sha.startswith(m.group(4)[:12]), (m.group(4), sha)
        assert (m.group(2), m.group(3)) == (stamp, sha[:12]), (r.stdout, head.stdout)
    r = run(kvolumed_bin, "--help")
    assert r.returncode == 0
    assert "--check-config" in r.stdout and "--config PATH" in r.stdout


def test_version_outside_git_is_unknown(tmp_path):
    """From a tree without git (a release tarball) the commit is "unknown"
    and the version meson.build's, not an error, unless the tree carries
    .kvolumed-version: only the header vcs_tag() makes is generated here (meson
    setup and one target take a few seconds)."""
    src = tmp_path / "src"
    shutil.copytree(REPO_DIR, src, ignore=shutil.ignore_patterns(".git", "build*", "__pycache__"))
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tmp_path))
    r = subprocess.run(["meson", "setup", str(tmp_path / "b"), str(src)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:]
    r = subprocess.run(["ninja", "-C", str(tmp_path / "b"), "agent/version.h"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:]
    assert '#define KVOLUMED_COMMIT "unknown"' in (tmp_path / "b" / "agent" / "version.h").read_text()
    r = subprocess.run(["ninja", "-C", str(tmp_path / "b"), "agent/version-string.h"], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:]
    assert '#define KVOLUMED_BUILD_VERSION "0.1.0"' in (tmp_path / "b" / "agent" / "version-string.h").read_text()
    # A copy that says what it was copied from (test/package writes
    # .kvolumed-version): the binary says the same, not "unknown".
    (src / ".kvolumed-version").write_text("version=0.1.0+git20261128.010203.0123456789ab\n"
                                           "commit=0123456789ab\n")
    r = subprocess.run(["ninja", "-C", str(tmp_path / "b"), "agent/version.h", "agent/version-string.h"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:]
    assert '#define KVOLUMED_COMMIT "0123456789ab"' in (tmp_path / "b" / "agent" / "version.h").read_text()
    assert '#define KVOLUMED_BUILD_VERSION "0.1.0+git20261128.010203.0123456789ab"' in \
        (tmp_path / "b" / "agent" / "version-string.h").read_text()


def test_bad_option_exits_1(kvolumed_bin):
    r = run(kvolumed_bin, "--no-such-option")
    assert r.returncode == 1
    r = run(kvolumed_bin, "stray-argument")
    assert r.returncode == 1
    assert 'unexpected argument "stray-argument"' in r.stderr


def test_example_file_passes_check_config(kvolumed_bin, tmp_path):
    r = run_with_etc_kubeconfig(kvolumed_bin, tmp_path, "--check-config", "--config",
                                os.path.join(REPO_DIR, "conf", "kvolumed.conf"))
    assert r.returncode == 0, r.stderr
    node = r.stdout.splitlines()[0].split(" = ")[1]
    assert r.stdout == DEFAULT_LISTING.format(node=node)


def test_design_example_block_is_accepted(kvolumed_bin, tmp_path):
    """Every key of DESIGN.md §2's INI block is accepted as written there."""
    design = open(os.path.join(SHARED_DIR, "DESIGN.md")).read()
    block = re.search(r"```ini\n(.*?)```", design, re.S).group(1)
    assert "[driver " in block and "republish-interval" in block
    r = run_with_etc_kubeconfig(kvolumed_bin, tmp_path, "--check-config", "--config", write(tmp_path, block))
    assert r.returncode == 0, r.stderr
    assert 'driver "hostpath.csi.k8s.io".endpoint = unix:///var/lib/kubelet/plugins/csi-hostpath/csi.sock' in r.stdout
    assert "kubernetes.kubeconfig = /etc/kvolumed/kubeconfig" in r.stdout


def test_readme_reference_matches_check_config(kvolumed_bin, tmp_path):
    """The README's configuration reference is the --check-config listing of
    the example file, so the two cannot drift apart."""
    readme = open(os.path.join(REPO_DIR, "README.md")).read()
    block = re.search(r"<!-- check-config -->\n```\n(.*?)```", readme, re.S).group(1)
    r = run_with_etc_kubeconfig(kvolumed_bin, tmp_path, "--check-config", "--config",
                                os.path.join(REPO_DIR, "conf", "kvolumed.conf"))
    node = r.stdout.splitlines()[0].split(" = ")[1]
    assert block == r.stdout.replace(f"agent.node-name = {node}\n", "agent.node-name = <host name>\n")


@pytest.mark.parametrize(
    "text,message",
    [
        ("[agent]\nnode-name = n\n\nfoo = 1\n", 'k.conf:4: unknown key "foo" in section [agent]'),
        ("[agent]\nnode-name = n\n[kubelet]\n",
         'k.conf:3: unknown section [kubelet] (known: agent, kubernetes, csi, driver "NAME", volumes, runtime, api, metrics, log)'),
        ("[agent]\nnode-name = n\n[runtime]\nendpoint = tcp://h:1\n",
         'k.conf:4: endpoint: "tcp://h:1" is neither a unix:// endpoint nor an absolute socket path '
         "(shorter than 108 bytes)"),
        ("[agent]\nnode-name = n\n[runtime]\nendpoint = run/crio.sock\n",
         'k.conf:4: endpoint: "run/crio.sock" is neither a unix:// endpoint nor an absolute socket path '
         "(shorter than 108 bytes)"),
        ("[agent]\nnode-name = n\n[log]\n[agent]\n", "k.conf:4: section [agent] repeated (first on line 1)"),
        ("[agent]\nnode-name = n\n[csi]\ncall-timeout = soon\n",
         'k.conf:4: call-timeout: "soon" is not a positive duration (integers with h, m, s or ms, largest '
         "first, e.g. 90s or 1m30s)"),
        ("[agent]\nnode-name = n\n[metrics]\nlisten = *:80\n",
         'k.conf:4: listen: "*:80" is not a listen address (IPV4:PORT, [IPV6]:PORT or localhost:PORT)'),
        ('[agent]\nnode-name = n\n[driver "x.y"]\nendpoint = unix://rel/sock\n',
         'k.conf:4: endpoint: "unix://rel/sock" is not a unix:// endpoint with an absolute socket path '
         "(shorter than 108 bytes)"),
        ("[agent]\nnode-name = UPPER\n",
         "k.conf:2: node-name: \"UPPER\" is not a valid node name (a DNS-1123 subdomain: lowercase letters, "
         "digits, '-' and '.')"),
        ("[agent]\nroot-dir = relative\n", 'k.conf:2: root-dir: "relative" is not an absolute, normalised path'),
    ],
)
def test_config_errors_name_file_and_line(kvolumed_bin, tmp_path, text, message):
    path = write(tmp_path, text)
    for args in (["--check-config", "--config", path], ["--config", path]):
        r = run(kvolumed_bin, *args)
        assert r.returncode == 1
        assert r.stderr == f"{tmp_path}/{message}\n"
        assert r.stdout == ""


def test_unreadable_file(kvolumed_bin, tmp_path):
    r = run(kvolumed_bin, "--check-config", "--config", str(tmp_path / "missing.conf"))
    assert r.returncode == 1
    assert r.stderr == f"{tmp_path}/missing.conf: cannot read: No such file or directory\n"
    d = tmp_path / "dir.conf"
    d.mkdir()
    r = run(kvolumed_bin, "--check-config", "--config", str(d))
    assert r.returncode == 1
    assert r.stderr.startswith(f"{d}: cannot read: ")


def test_effective_settings_include_defaults(kvolumed_bin, tmp_path):
    path = write(tmp_path, with_kubeconfig(tmp_path, "[agent]\nnode-name = n1\n[csi]\nmax-parallel = 3\n"
                                                     "[log]\nlevel = debug\n"))
    r = run(kvolumed_bin, "--check-config", "--config", path)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "agent.node-name = n1"
    assert "csi.max-parallel = 3" in lines
    assert "log.level = debug" in lines
    assert "agent.resync-interval = 5m" in lines
    assert len(lines) == len(DEFAULT_LISTING.splitlines())  # every key, set or not
    assert "runtime.endpoint = " in lines  # absent: off


def test_runtime_endpoint_forms_and_warning(kvolumed_bin, tmp_path):
    """[runtime] endpoint takes a unix:// URL or an absolute path (listed as a
    URL); empty, --check-config still passes but says on stderr what it risks."""
    for value in ("unix:///run/crio/crio.sock", "/run/crio/crio.sock"):
        r = run(kvolumed_bin, "--check-config", "--config",
                write(tmp_path, with_kubeconfig(tmp_path, f"[agent]\nnode-name = n\nroot-dir = {tmp_path}\n"
                                                          f"[runtime]\nendpoint = {value}\n")))
        assert r.returncode == 0, r.stderr
        assert "runtime.endpoint = unix:///run/crio/crio.sock" in r.stdout.splitlines()
        assert r.stderr == ""
    for text in ("[agent]\nnode-name = n\n", "[agent]\nnode-name = n\n[runtime]\nendpoint =\n"):
        r = run(kvolumed_bin, "--check-config", "--config", write(tmp_path, with_kubeconfig(tmp_path, text)))
        assert r.returncode == 0
        assert "runtime.endpoint = " in r.stdout.splitlines()
        assert r.stderr.startswith("warning: [runtime] endpoint is empty")
        assert "force-deleted while its containers still run has its volumes unpublished" in r.stderr
