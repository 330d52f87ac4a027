"""kvolumed's Debian package under a real systemd: the .deb that test/package
builds with Debian's own tooling (debian/) is installed with dpkg into the
systemd-nspawn container of test_systemd_unit.py (same cached Debian 12 root
file system, same Container), started there against the fake API server and
the mock CSI driver on the host, and purged; what the container holds before
the install and after the purge is compared file by file.

The .deb is built once per session (DEB_BUILD_OPTIONS=nocheck: the unit
tests run elsewhere in the suite).  That build is most of this file's time,
and more than the suite's 20 s per test because it is the package's real
build (dpkg-buildpackage compiles the whole tree with Debian's flags, in a
copy): 24 s of CPU, 60-80 s on this 2-core machine at a load of 10; the
container part takes about 10 s.  KVOLUMED_DEB=PATH uses a .deb built before
from the same tree instead."""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

from integration.agent_fixtures import DRIVER, REPO_DIR, make_node, wait_until
from integration.test_systemd_unit import container, driver, pod  # noqa: F401  (fixtures)

# One container at a time: see test_systemd_unit.py.
pytestmark = pytest.mark.xdist_group("nspawn")

PACKAGE_SCRIPT = os.path.join(REPO_DIR, "test", "package")
STALL_FILE = "/run/kvolumed-test-stall"
DEB_IN_CONTAINER = "/kvolumed-under-test.deb"
# Where the package's postrm looks for kvolumed's records: the default root-dir.
DEFAULT_RECORDS = "/var/lib/kubelet/kvolumed"


@pytest.fixture(scope="session")
def deb():
    # KVOLUMED_DEB: a .deb test/package already built from this tree.
    if os.environ.get("KVOLUMED_DEB"):
        yield os.environ["KVOLUMED_DEB"]
        return
    out = tempfile.mkdtemp(prefix="kvolumed-deb-test-", dir="/var/tmp")
    try:
        env = dict(os.environ, KVOLUMED_DEB_DIR=out, DEB_BUILD_OPTIONS="nocheck")
        started = time.monotonic()
        r = subprocess.run([PACKAGE_SCRIPT], env=env, capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        path = r.stdout.strip().splitlines()[-1]
        assert path.startswith(out) and path.endswith(".deb"), r.stdout
        print(f"test/package built {os.path.basename(path)} in {time.monotonic() - started:.1f} s")
        yield path
    finally:
        shutil.rmtree(out, ignore_errors=True)


def file_list(container, also_skip=()):
    """Every path of the container's own file system, but for the kernel's and
    the runtime's file systems, the bound-in directories of the test and the
    journal, which only ever grow."""
    skip = ["/proc", "/sys", "/dev", "/run", "/tmp", "/var/log/journal", container.kubelet_dir,
            *container.binds, *also_skip]
    prune = " -o ".join(f"-path '{p}'" for p in skip)
    r = container.sh(f"find / \\( {prune} \\) -prune -o -print", timeout=120)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.splitlines())


def test_deb_installs_starts_and_purges_clean(deb, container, fake_api, driver):
    started = time.monotonic()
    fake_api.create(make_node())
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                     "spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    container.boot()
    # A node as it is before the package: the catalog database exists (any
    # systemd package's trigger made it), kubelet's root directory holds a
    # pod's volume that is none of kvolumed's business.
    assert container.sh("journalctl --update-catalog").returncode == 0
    assert container.sh("mkdir -p /var/lib/kubelet/pods/p1/volumes && echo data > /var/lib/kubelet/pods/p1/volumes/f"
                        ).returncode == 0
    before = file_list(container)

    shutil.copy(deb, container.root + DEB_IN_CONTAINER)
    r = container.sh(f"dpkg -i {DEB_IN_CONTAINER}", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    os.unlink(container.root + DEB_IN_CONTAINER)

    # Installed as debian/rules says: disabled and not started (no credential yet).
    assert container.sh("systemctl is-enabled kvolumed").stdout.strip() == "disabled"
    assert container.show("ActiveState") == "inactive"
    files = container.sh("dpkg -L kvolumed").stdout.split()
    for path in ("/usr/sbin/kvolumed", "/lib/systemd/system/kvolumed.service", "/etc/kvolumed/kvolumed.conf",
                 "/usr/lib/systemd/catalog/kvolumed.catalog", "/usr/share/man/man8/kvolumed.8.gz",
                 "/usr/share/man/man5/kvolumed.conf.5.gz", "/usr/share/doc/kvolumed/rbac.yaml",
                 "/usr/share/doc/kvolumed/kvolumed-alerts.yaml"):
        assert path in files, files
    assert container.sh("dpkg-query -W -f='${Conffiles}' kvolumed").stdout.split()[0] == "/etc/kvolumed/kvolumed.conf"
    # systemd's dpkg trigger rebuilt the catalog: journalctl -x explains kvolumed's entries.
    assert "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a53" in container.sh("journalctl --list-catalog").stdout
    r = container.sh("systemd-analyze verify --man=no kvolumed.service")
    assert r.returncode == 0 and r.stdout + r.stderr == "", r.stdout + r.stderr

    # The release binary has no test hooks (meson -Dtest-hooks=false in
    # debian/rules): not even the names of the switches are in it, and the
    # stall switch set in a drop-in is not armed.
    with open(container.root + "/usr/sbin/kvolumed", "rb") as f:
        assert b"KVOLUMED_TEST_" not in f.read()

    # An operator's set-up: the kubeconfig at the default path, the root-dir
    # bound in, the static driver; the test switch that a test build would obey.
    shutil.copy(fake_api.kubeconfig_path, container.root + "/etc/kvolumed/kubeconfig")
    with open(container.root + "/etc/kvolumed/kvolumed.conf", "w") as f:
        f.write(f"[agent]\nnode-name = test-node\nroot-dir = {container.kubelet_dir}\n"
                "[csi]\nregistration-dir =\n"
                f'[driver "{DRIVER}"]\nendpoint = {driver.endpoint}\n'
                "[metrics]\nlisten =\n")
    dropin = container.root + "/etc/systemd/system/kvolumed.service.d"
    os.makedirs(dropin)
    with open(dropin + "/test.conf", "w") as f:
        f.write(f"[Service]\nEnvironment=KVOLUMED_TEST_STALL_FILE={STALL_FILE}\n")
    assert container.sh("systemctl daemon-reload").returncode == 0
    r = container.sh("systemctl enable --now kvolumed", timeout=150)
    assert r.returncode == 0, r.stderr + container.journal()
    assert container.show("ActiveState") == "active"
    log = container.journal("-o cat")
    assert "Ready: volumes on disk reconstructed" in log, log
    # A build with the hooks says "Test fault switch armed" before READY=1.
    assert "Test fault switch" not in log, log

    keep = fake_api.create(pod("keep", "data"))
    target = f"{container.kubelet_dir}/pods/{keep['metadata']['uid']}/volumes/kubernetes.io~csi/data/mount"
    wait_until(lambda: os.path.ismount(target), timeout=30, what="the pod's volume published")
    # What the daemon writes under the default root-dir's kvolumed/ (here: a stand-in).
    assert container.sh(f"mkdir -p {DEFAULT_RECORDS}/pods && touch {DEFAULT_RECORDS}/pods/record").returncode == 0
    wait_until(lambda: "1 pod volume published" in container.show("StatusText"), timeout=10,
               what="STATUS= counting the published volume")
    # The listing sees what the purge must take away.
    installed = file_list(container)
    for path in ("/usr/sbin/kvolumed", "/etc/kvolumed/kubeconfig", DEFAULT_RECORDS + "/pods/record",
                 "/etc/systemd/system/multi-user.target.wants/kvolumed.service"):
        assert path in installed, path

    # Purge: the unit is stopped and disabled, every file of the package and
    # kvolumed's own state go; the volumes stay, published (a stop tears
    # nothing down) and kubelet's directories untouched.
    os.unlink(dropin + "/test.conf")
    os.rmdir(dropin)
    r = container.sh("dpkg --purge kvolumed", timeout=200)
    assert r.returncode == 0, r.stdout + r.stderr
    assert container.show("LoadState") == "not-found"
    assert os.path.ismount(target)
    assert container.sh(f"mountpoint -q {target}").returncode == 0
    assert container.sh("cat /var/lib/kubelet/pods/p1/volumes/f").stdout == "data\n"
    after = file_list(container)
    assert after - before == set(), f"left behind by the purge: {sorted(after - before)}"
    assert before - after == set(), f"removed by the install and purge: {sorted(before - after)}"
    assert driver.calls("NodeUnpublishVolume") == []
    # The trigger ran again on removal: journalctl -x no longer knows kvolumed's entries.
    assert "5b3e0a7f1c2d4e6f8a9b0c1d2e3f4a53" not in container.sh("journalctl --list-catalog").stdout
    print(f"package install, start and purge took {time.monotonic() - started:.1f} s")


def configure_node(container, fake_api, driver, metrics=""):
    """An operator's set-up, as above: the kubeconfig at the default path,
    the root-dir bound in, the static driver."""
    fake_api.create(make_node())
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                     "spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    shutil.copy(fake_api.kubeconfig_path, container.root + "/etc/kvolumed/kubeconfig")
    with open(container.root + "/etc/kvolumed/kvolumed.conf", "w") as f:
        f.write(f"[agent]\nnode-name = test-node\nroot-dir = {container.kubelet_dir}\n"
                "[csi]\nregistration-dir =\n"
                f'[driver "{DRIVER}"]\nendpoint = {driver.endpoint}\n'
                f"[metrics]\nlisten = {metrics}\n")


def repack(deb, version, directory):
    """The same package under another version: what an older (or newer) build
    looks like to dpkg and apt.  Its binary and scripts are this build's."""
    unpacked = os.path.join(directory, "unpacked-" + version)
    r = subprocess.run(["dpkg-deb", "-R", deb, unpacked], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    control = os.path.join(unpacked, "DEBIAN", "control")
    with open(control) as f:
        text = f.read()
    with open(control, "w") as f:
        f.write(re.sub(r"(?m)^Version: .*$", f"Version: {version}", text))
    out = os.path.join(directory, f"kvolumed_{version}.deb")
    r = subprocess.run(["dpkg-deb", "--root-owner-group", "-b", unpacked, out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    shutil.rmtree(unpacked)
    return out


def deb_version(deb):
    return subprocess.run(["dpkg-deb", "-f", deb, "Version"], capture_output=True, text=True).stdout.strip()


def head_commit():
    r = subprocess.run(["git", "-C", REPO_DIR, "log", "-1", "--format=%H %cd", "--date=format-local:%Y%m%d.%H%M%S"],
                       capture_output=True, text=True, env=dict(os.environ, TZ="UTC0"))
    return r.stdout.split() if r.returncode == 0 else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_deb_says_which_commit_it_is_and_ships_its_guide(deb, tmp_path):
    """The package, the binary and its changelog name one version, one that
    orders (agent/version.sh), and the commit the tree was at; the README
    (with the handover guide kvolumed(8) points to) and NEWS.Debian are in
    its documentation."""
    version = deb_version(deb)
    m = re.fullmatch(r"(\d+\.\d+\.\d+)\+git(\d{8}\.\d{6})\.([0-9a-f]{12})", version)
    assert m, version
    head = head_commit()
    if head:
        assert (m.group(2), m.group(3)) == (head[1], head[0][:12]), (version, head)
    root = tmp_path / "x"
    r = subprocess.run(["dpkg-deb", "-x", deb, str(root)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(root / "usr/sbin/kvolumed"), "--version"], capture_output=True, text=True).stdout
    assert out.startswith(f"kvolumed {version}\ncommit: {m.group(3)}"), out
    assert "unknown" not in out
    changelog = subprocess.run(["zcat", str(root / "usr/share/doc/kvolumed/changelog.gz")], capture_output=True,
                               text=True).stdout
    assert changelog.startswith(f"kvolumed ({version}) unstable"), changelog[:300]
    assert f"Snapshot of commit {m.group(3)}" in changelog
    news = subprocess.run(["zcat", str(root / "usr/share/doc/kvolumed/NEWS.Debian.gz")], capture_output=True,
                          text=True).stdout
    assert "resync-interval 30s-24h" in news and "writable by no group or other user" in news, news
    readme = subprocess.run(["zcat", str(root / "usr/share/doc/kvolumed/README.md.gz")], capture_output=True,
                            text=True).stdout
    assert "### Handing a node over" in readme
    # kvolumed(8) names where the guide is.
    page = subprocess.run(["zcat", str(root / "usr/share/man/man8/kvolumed.8.gz")], capture_output=True,
                          text=True).stdout
    assert "/usr/share/doc/kvolumed/README.md.gz" in page.replace("\\&", "")

    # Versions order as the commits do: apt takes a later build as an
    # upgrade, an earlier one (or 0.1.0, the version of every build before)
    # as a downgrade, and the next release above every snapshot of this one.
    def older(a, b):
        return subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
    assert older("0.1.0", version)
    day, second = m.group(2).split(".")
    assert older(f"{m.group(1)}+git{int(day) - 1}.235959.ffffffffffff", version)       # the day before
    assert older(version, f"{m.group(1)}+git{day}.{int(second) + 1:06d}.000000000000")  # a second later
    assert older(version, "0.1.1")
    assert older("0.1.0+git20261128", version)       # the changelog's own entry, NEWS.Debian's


def test_upgrade_refused_by_the_new_binary_fails_and_keeps_the_old_running(deb, container, fake_api, driver,
                                                                          tmp_path):
    """A drop-in an older build accepted and this one refuses: the configure
    step fails with the check's message, the running kvolumed is neither
    stopped nor restarted; fixed, "dpkg --configure" restarts it.  Then a
    rollback by version through apt."""
    new_version = deb_version(deb)
    old = repack(deb, "0.1.0", str(tmp_path))
    container.boot()
    shutil.copy(old, container.root + "/old.deb")
    r = container.sh("dpkg -i /old.deb", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    port = free_port()
    configure_node(container, fake_api, driver, metrics=f"127.0.0.1:{port}")
    r = container.sh("systemctl enable --now kvolumed", timeout=150)
    assert r.returncode == 0, r.stderr + container.journal()
    pid = container.show("MainPID")
    assert pid != "0"

    # What kvolumed 0.1.0 took: a safety-net resync every 10 s.
    os.makedirs(container.root + "/etc/kvolumed/kvolumed.conf.d", exist_ok=True)
    with open(container.root + "/etc/kvolumed/kvolumed.conf.d/50-resync.conf", "w") as f:
        f.write("[agent]\nresync-interval = 10s\n")
    shutil.copy(deb, container.root + DEB_IN_CONTAINER)
    r = container.sh(f"dpkg -i {DEB_IN_CONTAINER}", timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "/etc/kvolumed/kvolumed.conf.d/50-resync.conf:2: resync-interval: 10s is out of range" in out, out
    assert "the service was NOT restarted" in out and "apt-get install kvolumed=0.1.0" in out, out
    assert "post-installation script subprocess returned error exit status 1" in out, out
    assert container.sh("dpkg-query -W -f='${Status} ${Version}' kvolumed").stdout == \
        f"install ok half-configured {new_version}"
    # The old daemon serves on, never stopped.
    assert container.show("ActiveState") == "active"
    assert container.show("MainPID") == pid
    assert container.show("NRestarts") == "0"

    # Fixed: the configure step the upgrade left finishes and restarts it.
    os.unlink(container.root + "/etc/kvolumed/kvolumed.conf.d/50-resync.conf")
    r = container.sh("dpkg --configure kvolumed", timeout=200)
    assert r.returncode == 0, r.stdout + r.stderr
    assert container.show("ActiveState") == "active"
    assert container.show("MainPID") not in (pid, "0")
    assert container.sh("dpkg-query -W -f='${Status} ${Version}' kvolumed").stdout == \
        f"install ok installed {new_version}"
    # What runs is the package's build, and says so in its metric.
    commit = container.sh("kvolumed --version").stdout.splitlines()[1].removeprefix("commit: ")
    assert commit != "unknown" and re.fullmatch(r"[0-9a-f]{12}(-dirty)?", commit), commit
    info = f'kvolumed_build_info{{commit="{commit}",version="{new_version}"}} 1'

    def scraped():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                return info in resp.read().decode()
        except OSError:
            return False
    wait_until(scraped, timeout=60, what=info)

    # Rollback by version, through apt, from a repository holding both.
    os.makedirs(container.root + "/repo")
    shutil.copy(old, container.root + "/repo/")
    shutil.copy(deb, container.root + "/repo/")
    r = subprocess.run("dpkg-scanpackages --multiversion . > Packages", shell=True, cwd=container.root + "/repo",
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(container.root + "/repo/local.list", "w") as f:
        f.write("deb [trusted=yes] file:/repo ./\n")
    sources = "-o Dir::Etc::sourcelist=/repo/local.list -o Dir::Etc::sourceparts=- "
    apt = "apt-get -q " + sources
    r = container.sh(apt + "update", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    policy = container.sh("apt-cache " + sources + "policy kvolumed").stdout
    assert f"Installed: {new_version}" in policy and "0.1.0 " in policy, policy
    r = container.sh("DEBIAN_FRONTEND=noninteractive " + apt + "install -y --allow-downgrades kvolumed=0.1.0",
                     timeout=200)
    assert r.returncode == 0, r.stdout + r.stderr
    assert container.sh("dpkg-query -W -f='${Version}' kvolumed").stdout == "0.1.0"
    assert container.show("ActiveState") == "active"


def test_the_unit_refuses_a_kubelet_on_its_root_dir_without_a_restart_loop(deb, container, fake_api, driver):
    """The handover's guard under systemd: while a kubelet serves on root-dir
    the start fails with the reason in the journal and is not retried
    (RestartPreventExitStatus=1); once kubelet is stopped it starts."""
    from integration.test_agent_kubelet_guard import FakeKubelet
    container.boot()
    shutil.copy(deb, container.root + DEB_IN_CONTAINER)
    r = container.sh(f"dpkg -i {DEB_IN_CONTAINER}", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    configure_node(container, fake_api, driver)
    # kubelet's socket on the shared root-dir, served from the host side.
    kubelet = FakeKubelet(os.path.join(container.kubelet_dir, "pod-resources", "kubelet.sock"))
    try:
        # journald held while kvolumed runs and exits: it handles the reason
        # after kvolumed is gone, as a loaded node's may, when it can no
        # longer read the sender's unit.  `journalctl -u` must show it still.
        r = container.sh("kill -STOP $(pidof systemd-journald)")
        assert r.returncode == 0, r.stdout + r.stderr
        try:
            r = container.sh("systemctl enable --now kvolumed", timeout=150)
        finally:
            container.sh("kill -CONT $(pidof systemd-journald)")
        assert r.returncode != 0
        assert container.show("ExecMainStatus") == "1"
        assert container.show("ActiveState") == "failed"
        reason = f"A kubelet is running on root-dir {container.kubelet_dir}"
        log = wait_until(lambda: (text := container.journal("-o cat")) and reason in text and text,
                         timeout=30, what="the reason in journalctl -u kvolumed")
        assert "Stop kubelet first" in log, log
        # "failed", not "activating (auto-restart)": no restart is scheduled.
        assert container.show("NRestarts") == "0"
    finally:
        kubelet.stop()
    r = container.sh("systemctl start kvolumed", timeout=150)
    assert r.returncode == 0, r.stderr + container.journal()
    assert container.show("ActiveState") == "active"
