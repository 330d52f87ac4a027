"""The mock driver's "is this path a mount point" answers as the mount
table does, without making the kernel write the whole table: the benchmarks
put 10,000 mounts on the node, and a mountinfo read per call made the
driver, not kvolumed, what they measured."""
import builtins
import os
import subprocess

import pytest

from doubles.mockcsi import mounts


def table_says(path):
    """The reference: the whole mount table, parsed."""
    path = os.path.normpath(path)
    return any(m["mount_point"] == path for m in mounts.mountinfo())


@pytest.fixture
def tree(tmp_path):
    """Mount points of every shape the driver makes, and paths that are
    none: stacked tmpfs, a bind-mounted file (a block volume), a name with
    a space (escaped in mountinfo), a directory under a mount, a symlink to
    a mount point and a path through a symlinked parent."""
    d = tmp_path / "a b"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "one", str(d)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "two", str(d)], check=True)
    (d / "sub").mkdir()
    f, g = tmp_path / "dev", tmp_path / "target"
    f.write_text("")
    g.write_text("")
    subprocess.run(["mount", "--bind", str(f), str(g)], check=True)
    (tmp_path / "link").symlink_to(d)
    (tmp_path / "parent-link").symlink_to(tmp_path)
    yield {"stacked": (str(d), True), "bind file": (str(g), True), "plain file": (str(f), False),
           "under a mount": (str(d / "sub"), False), "missing": (str(tmp_path / "missing"), False),
           "symlink to a mount point": (str(tmp_path / "link"), False),
           "through a symlinked parent": (str(tmp_path / "parent-link" / "a b"), False),
           "trailing slash": (str(d) + "/", True), "the tmp dir": (str(tmp_path), False)}
    for p in (g, d, d):
        subprocess.run(["umount", str(p)], check=False)


def test_is_mount_point_agrees_with_the_mount_table(tree):
    for what, (path, expected) in tree.items():
        assert table_says(path) == expected, what
        assert mounts.is_mount_point(path) == expected, what
        assert (mounts.mount_entry(path) is not None) == expected, what
    assert mounts.mount_entry(tree["stacked"][0])["source"] == "two"  # the top one


def test_is_mount_point_reads_no_mount_table(tree, monkeypatch):
    """statx answers for a path without a symlink in its parent; mountinfo
    is for what statx cannot say (its answer stays the fallback)."""
    real_open = builtins.open
    reads = []

    def counting_open(file, *args, **kwargs):
        if str(file).endswith("/mountinfo"):
            reads.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    for what in ("stacked", "bind file", "plain file", "under a mount", "missing"):
        path, expected = tree[what]
        assert mounts.is_mount_point(path) == expected, what
    assert reads == []
    # Through a symlinked parent mountinfo, which names no symlink, decides.
    assert mounts.is_mount_point(tree["through a symlinked parent"][0]) is False
    assert len(reads) == 1
