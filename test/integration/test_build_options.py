"""What a build needs and what it contains, from meson's own answers: a
configure in a scratch directory with the optional tools hidden (PATH without
scdoc, a pkg-config search path without cmocka.pc), then its target and test
lists and ninja's dry run of every command.  No compiling: a few seconds."""
import glob
import json
import os
import subprocess

import pytest

from integration.agent_fixtures import REPO_DIR


def hidden_path(tmp_path, hide):
    """A PATH directory with every program of the system but `hide`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        for name in os.listdir(d) if os.path.isdir(d) else ():
            if name != hide and not (bin_dir / name).exists():
                (bin_dir / name).symlink_to(os.path.join(d, name))
    return str(bin_dir)


def hidden_pkgconfig(tmp_path, hide):
    """A pkg-config search path with every .pc file of the system but `hide`."""
    pc_dir = tmp_path / "pkgconfig"
    pc_dir.mkdir()
    search = subprocess.run(["pkg-config", "--variable", "pc_path", "pkg-config"],
                            capture_output=True, text=True, check=True).stdout.strip()
    for d in search.split(":"):
        for pc in glob.glob(os.path.join(d, "*.pc")):
            name = os.path.basename(pc)
            if name != hide and not (pc_dir / name).exists():
                (pc_dir / name).symlink_to(pc)
    return str(pc_dir)


def introspect(build, what):
    r = subprocess.run(["meson", "introspect", build, what], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def daemon_only(tmp_path_factory):
    """Configured with scdoc and cmocka out of sight, default options."""
    tmp = tmp_path_factory.mktemp("daemon-only")
    env = dict(os.environ, PATH=hidden_path(tmp, "scdoc"), PKG_CONFIG_LIBDIR=hidden_pkgconfig(tmp, "cmocka.pc"))
    env.pop("PKG_CONFIG_PATH", None)
    build = str(tmp / "build")
    r = subprocess.run(["meson", "setup", build, REPO_DIR], env=env, capture_output=True, text=True, timeout=300)
    return build, env, r


def test_hidden_tools_are_really_hidden(daemon_only):
    build, env, r = daemon_only
    assert subprocess.run(["which", "scdoc"], env=env, capture_output=True).returncode != 0
    assert subprocess.run(["pkg-config", "--exists", "cmocka"], env=env).returncode != 0
    # ...while what the daemon needs is still found the same way.
    assert subprocess.run(["pkg-config", "--exists", "libsystemd", "libmicrohttpd"], env=env).returncode == 0


def test_daemon_only_build_without_scdoc_and_cmocka(daemon_only):
    build, env, r = daemon_only
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "scdoc not found: the man pages are not built" in r.stdout, r.stdout
    assert "cmocka not found: the unit tests of test/unit are not built" in r.stdout, r.stdout

    targets = {t["name"] for t in introspect(build, "--targets")}
    assert "kvolumed" in targets
    assert not {"kvolumed.8", "kvolumed.conf.5"} & targets, targets
    tests = {t["name"] for t in introspect(build, "--tests")}
    assert not {t for t in tests if t.startswith("test-")}, tests
    installed = introspect(build, "--installed").values()
    assert not [p for p in installed if "/man/" in p], installed

    # No command of the whole build runs scdoc or links cmocka.
    r = subprocess.run(["ninja", "-C", build, "-n", "-v"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "kvolumed" in r.stdout
    assert "scdoc" not in r.stdout and "cmocka" not in r.stdout


def test_default_build_has_no_test_hooks(daemon_only):
    """meson's defaults are a release's: the KVOLUMED_TEST_* switches are compiled out."""
    build, env, r = daemon_only
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    options = {o["name"]: o["value"] for o in introspect(build, "--buildoptions")}
    assert options["test-hooks"] is False
    r = subprocess.run(["ninja", "-C", build, "-n", "-v", "agent/kvolumed"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert "-DKVOLUMED_TEST_HOOKS=0" in r.stdout and "-DKVOLUMED_TEST_HOOKS=1" not in r.stdout
