"""Where the mount table comes from: the kernel's mount events (fanotify on
our mount namespace, statmount, listmount: Linux 6.15+) or
/proc/self/mountinfo ([agent] mount-source = mountinfo, and every kernel
older than that).  Each test runs on both sources: they must give the same
answers."""
import json
import os
import platform
import subprocess
import time

import pytest

from integration.agent_fixtures import DRIVER, wait_until
from integration.test_agent_metrics import SERVING, get, metrics_config

SOURCES = ["auto", "mountinfo"]


def kernel_has_mount_events():
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 15)


def expected(source):
    return "kernel" if source == "auto" and kernel_has_mount_events() else "mountinfo"


def with_source(path, source):
    """The configuration at path with [agent] mount-source set."""
    with open(path) as f:
        text = f.read()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("mount-source ="))
    with open(path, "w") as f:
        f.write(text.replace("[agent]\n", f"[agent]\nmount-source = {source}\n", 1) + "\n")
    return path


def inline(name):
    return {"name": name, "csi": {"driver": DRIVER}}


@pytest.mark.parametrize("source", SOURCES)
def test_the_source_is_logged_once_and_shown(volume_env, source):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.agent = env.start_agent(with_source(metrics_config(env, "127.0.0.1:0"), source))
    env.agent.wait_for_log("Serving /metrics")
    address = SERVING.search(env.agent.output()).group(1)
    status, _, body = get(address, "/volumes")
    assert status == 200
    assert json.loads(body)["mount_source"] == expected(source)
    lines = [line for line in env.agent.output().splitlines() if "Mount table: " in line]
    assert len(lines) == 1, lines
    assert ("from the kernel" in lines[0]) == (expected(source) == "kernel"), lines
    # And it works: a volume published, its mount seen, its loss seen.
    pod = env.pod("web", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    env.agent.wait_for_log("/mount is a mount point: watched for its loss", timeout=15)


@pytest.mark.parametrize("source", SOURCES)
def test_a_lost_mount_is_noticed_however_busy_the_loop(volume_env, tmp_path, source):
    """A node whose loop never goes idle (the test switch keeps a source due
    on every iteration, as endless pod churn would) still notices a mount
    lost behind its back within the bound (MOUNT_TABLE_MAX_DELAY_USEC, 1 s):
    the read of the table at idle priority alone waited for good."""
    env = volume_env
    busy = tmp_path / "busy"
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start(agent=f"mount-source = {source}\n", env={"KVOLUMED_TEST_BUSY_FILE": str(busy)})
    pod = env.pod("web", [inline("scratch")])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    env.agent.wait_for_log("/mount is a mount point: watched for its loss", timeout=15)
    busy.touch()
    env.agent.wait_for_log("the loop is never idle")
    started = time.monotonic()
    subprocess.run(["umount", "-l", target], check=True)
    # Generous for a loaded machine: the bound is 1 s; without it, never.
    env.agent.wait_for_log("is no longer mounted; publishing it again", timeout=10)
    noticed = time.monotonic() - started
    # Still busy: the loop's other work goes on, the volume comes back.
    wait_until(lambda: len([c for c in env.calls("NodePublishVolume") if c["code"] == "OK"]) == 2,
               what="a second NodePublishVolume while the loop is busy")
    env.wait_mounted(target)
    busy.unlink()
    env.agent.wait_for_log("the loop is idle again")
    print(f"lost mount noticed after {noticed * 1000:.0f} ms with a loop never idle ({source})")
