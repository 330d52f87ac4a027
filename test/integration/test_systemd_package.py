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
import shutil
import subprocess
import tempfile
import time

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
