"""Shared pytest set-up for the integration suite.

The suite runs as root inside a private mount namespace (test/check wraps it in
`unshare -m --propagation private`), so every mount a test makes disappears
with the namespace even if the test crashes.  Loop devices are global and are
detached by the fixtures that create them.
"""
import os
import sys

TEST_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_DIR = os.path.dirname(TEST_DIR)
if TEST_DIR not in sys.path:
    sys.path.insert(0, TEST_DIR)

# Fixtures of the test doubles live next to the doubles themselves.
pytest_plugins = [
    "doubles.fakeapi.fixtures",
    "doubles.mockcsi.fixtures",
    "doubles.containerd.fixtures",
    "integration.agent_fixtures",
]


import subprocess  # noqa: E402

import pytest  # noqa: E402

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """item.rep_call: the test's own outcome, for fixtures whose teardown
    differs after a failure (agent_fixtures._tear_down_after_failure)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


# kvolumed's default local API socket directory.  Every agent a test starts
# without an [api] section makes its socket there: inside the suite's private
# mount namespace a tmpfs over it keeps those sockets off the machine's /run.
API_SOCKET_DIR = "/run/kvolumed"


def _parent_pid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _in_private_mount_namespace():
    """True when some ancestor of this process (PID 1 may not be readable in
    a container) is in another mount namespace: `unshare -m` made ours."""
    try:
        own = os.readlink("/proc/self/ns/mnt")
        pid = os.getpid()
        while pid > 1:
            pid = _parent_pid(pid)
            try:
                if os.readlink(f"/proc/{pid}/ns/mnt") != own:
                    return True
            except OSError:
                continue
    except OSError:
        pass
    return False


# pytest-xdist (-n N): each worker is a python started under
# `unshare -m --propagation private`, a mount namespace of its own below the
# suite's.  The mount table a test's fixtures compare before and after, the
# tmpfs on /run/kvolumed, /run/containerd and what systemd-nspawn mounts are
# then the worker's alone: a test never sees another worker's mounts, and one
# worker's `umount -l` never takes another's.  Loop devices, cgroups, ports
# and /tmp stay shared by every worker: the fixtures make those unique.
WORKER_PYTHON = f"unshare -m --propagation private {sys.executable}"


def _xdist_worker():
    return os.environ.get("PYTEST_XDIST_WORKER")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "serial: counts kvolumed's own passes, or is load of its own, which other tests "
        "would change or suffer from: test/check runs these alone, after the parallel runs (-m serial)")
    if os.geteuid() != 0 or _xdist_worker() or not getattr(config.option, "numprocesses", None):
        return
    # xdist turned -n N into N plain "popen" specs (its pytest_cmdline_main);
    # its workers are started later, at the session's start.
    config.option.tx = [f"popen//python={WORKER_PYTHON}" if spec == "popen" else spec
                        for spec in config.option.tx]
    # The mount point of every worker's tmpfs is made once, here, and removed
    # when every worker is gone: an rmdir by one worker would detach the
    # tmpfs another worker mounted on it in its own namespace (and so does
    # the rmdir of another run's: test/check makes it for all of its runs).
    if _in_private_mount_namespace() and not os.path.isdir(API_SOCKET_DIR):
        os.makedirs(API_SOCKET_DIR, mode=0o755)
        config._kvolumed_made_api_socket_dir = True


def pytest_unconfigure(config):
    if getattr(config, "_kvolumed_made_api_socket_dir", False):
        try:
            os.rmdir(API_SOCKET_DIR)
        except OSError:
            pass


@pytest.fixture(scope="session", autouse=True)
def private_api_socket_dir():
    if os.geteuid() != 0 or not _in_private_mount_namespace():
        yield
        return
    # An xdist worker finds the directory made by the controller.
    made = not os.path.isdir(API_SOCKET_DIR) and not _xdist_worker()
    if made:
        os.makedirs(API_SOCKET_DIR, mode=0o755)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "kvolumed-test-run", API_SOCKET_DIR],
                   check=True)
    yield
    subprocess.run(["umount", "-l", API_SOCKET_DIR], check=False)
    if made:
        try:
            os.rmdir(API_SOCKET_DIR)
        except OSError:
            pass
