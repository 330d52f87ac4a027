"""meson install lays out what the README says: the daemon in sbin, the
example configuration in /etc/kvolumed, the unit in systemd's directory, the
RBAC fallback in the documentation directory."""
import os
import subprocess

from integration.agent_fixtures import build_dir


def test_install_layout(tmp_path):
    dest = tmp_path / "dest"
    r = subprocess.run(["meson", "install", "-C", build_dir(), "--no-rebuild", "--destdir", str(dest)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    sbin = [f for f in files if f.endswith("/sbin/kvolumed")]
    assert len(sbin) == 1 and os.access(dest / sbin[0], os.X_OK)
    assert "etc/kvolumed/kvolumed.conf" in files
    # The RBAC fallback is documentation, not configuration (README, "Running as the node").
    assert [f for f in files if f.endswith("share/doc/kvolumed/rbac.yaml")], files
    assert not [f for f in files if f.startswith("etc/") and "rbac" in f], files
    unit = [f for f in files if f.endswith("systemd/system/kvolumed.service")]
    assert len(unit) == 1, files
    text = (dest / unit[0]).read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text
    # The unit starts the binary where it was installed.
    assert f"ExecStart=/{sbin[0]}\n" in text
