"""fsGroup on a shared volume holding a deep tree (issue 20, item 6): one pod
writes a tree 400 levels deep; another pod asking for an fsGroup gets the
volume, with the group applied down to the bottom, and no FailedMount.  The
walk used to stop at depth 256 and the publish was retried forever.  kubelet
(SetVolumeOwnership, filepath.Walk) has no depth limit either."""
import os

from integration.agent_fixtures import wait_until

DEPTH = 400
GID = 3000


def claim(name, claim_name):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def write_deep_tree(top):
    """What a pod does: mkdir, chdir, again; a file at every level."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(DEPTH):
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
        os.mkdir("d", 0o700, dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(os.open("bottom", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    os.close(fd)


def bottom_gid(top):
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(DEPTH):
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.stat("bottom", dir_fd=fd, follow_symlinks=False).st_gid
    finally:
        os.close(fd)


def test_fsgroup_reaches_the_bottom_of_a_deep_tree(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"], fsGroupPolicy="File")
    env.pv("pv-shared", "vol-shared", claim="shared")
    env.pvc("shared", "pv-shared")
    env.start()
    writer = env.pod("writer", [claim("data", "shared")])
    env.wait_mounted(env.target(writer, "pv-shared"))
    write_deep_tree(env.target(writer, "pv-shared"))

    reader = env.pod("reader", [claim("data", "shared")], security_context={"fsGroup": GID})
    target = env.target(reader, "pv-shared")
    env.wait_mounted(target)
    wait_until(lambda: bottom_gid(target) == GID, 60,
               what=lambda: "the fsGroup applied at the bottom\n" + env.agent.output()[-3000:])
    # Done once: the publish succeeded, nothing failed or is retried.
    wait_until(lambda: len(env.calls("NodePublishVolume")) == 2, what="two publishes logged")
    assert [e for e in env.events() if e.get("reason") == "FailedMount"] == []
    assert "fsGroup" not in "".join(line for line in env.agent.output().splitlines() if "failed" in line.lower())
