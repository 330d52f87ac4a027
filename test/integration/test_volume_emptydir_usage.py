"""The usage of emptyDir volumes in /volumes (issue 32): a tmpfs one's
statfs, a disk one's du, measured off the loop once per [csi]
stats-interval.  kubelet exports kubelet_volume_stats_* only for volumes
with a claim, so an emptyDir has no metric: /volumes only."""
import json
import os

from integration.agent_fixtures import DRIVER, wait_until, write_config
from integration.test_agent_metrics import SERVING, get

MiB = 1024 * 1024


def start(env):
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n',
                        csi="stats-interval = 1s\n")
    with open(path) as f:
        text = f.read()
    assert text.count("\nlisten =\n") == 1
    with open(path, "w") as f:
        f.write(text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n"))
    env.agent = env.start_agent(path)
    env.agent.wait_for_log("Serving /metrics")
    return SERVING.search(env.agent.output()).group(1)


def usage(address, pod, name):
    status, _, body = get(address, "/volumes")
    assert status == 200, body
    unique = f"kubernetes.io/empty-dir/{pod['metadata']['uid']}-{name}"
    for v in json.loads(body)["volumes"]:
        if v["unique_name"] == unique:
            return v.get("usage")
    return None


def volume_path(env, pod, name):
    return f"{env.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~empty-dir/{name}"


def write(path, size):
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        os.fsync(f.fileno())


def wait_usage(env, address, pod, name, predicate, what):
    seen = []

    def check():
        u = usage(address, pod, name)
        seen[:] = [u]
        return u is not None and predicate(u) and u

    return wait_until(check, 30, interval=0.2,
                      what=lambda: f"{what}; last usage {seen}\n" + env.agent.output()[-3000:])


def test_memory_emptydir_shows_the_tmpfs_usage_and_its_size(volume_env):
    env = volume_env
    address = start(env)
    pod = env.pod("web", [{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}])
    path = volume_path(env, pod, "mem")
    wait_until(lambda: os.path.ismount(path), 30, what=lambda: f"{path} mounted\n" + env.agent.output()[-3000:])
    write(f"{path}/data", 3 * MiB)
    u = wait_usage(env, address, pod, "mem", lambda u: (u["usedBytes"] or 0) >= 3 * MiB,
                   "the tmpfs's 3 MiB in usedBytes")
    assert u["capacityBytes"] == 8 * MiB
    assert u["measuredAt"].endswith("Z")
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)


def test_disk_emptydir_usage_is_measured_and_refreshed(volume_env):
    env = volume_env
    address = start(env)
    pod = env.pod("web", [{"name": "scratch", "emptyDir": {}}])
    path = volume_path(env, pod, "scratch")
    wait_until(lambda: os.path.isdir(path), 30, what=lambda: f"{path} made\n" + env.agent.output()[-3000:])
    first = wait_usage(env, address, pod, "scratch", lambda u: u["measuredAt"] is not None, "a first measure")
    assert first["capacityBytes"] is None
    assert first["usedBytes"] < MiB
    os.makedirs(f"{path}/a/b")
    write(f"{path}/a/b/data", 2 * MiB)
    u = wait_usage(env, address, pod, "scratch", lambda u: (u["usedBytes"] or 0) >= 2 * MiB,
                   "the 2 MiB written in usedBytes after a refresh")
    assert u["measuredAt"] >= first["measuredAt"]
    assert u["capacityBytes"] is None


def test_disk_emptydir_usage_does_not_follow_a_symlink(volume_env):
    env = volume_env
    address = start(env)
    pod = env.pod("web", [{"name": "scratch", "emptyDir": {}}])
    path = volume_path(env, pod, "scratch")
    wait_until(lambda: os.path.isdir(path), 30, what=lambda: f"{path} made\n" + env.agent.output()[-3000:])
    os.symlink("/", f"{path}/root")
    os.symlink("/usr", f"{path}/usr")
    write(f"{path}/marker", 256 * 1024)
    # The marker counted: measured after the symlinks were made.
    u = wait_usage(env, address, pod, "scratch", lambda u: (u["usedBytes"] or 0) >= 256 * 1024,
                   "the marker's 256 KiB in usedBytes")
    assert u["usedBytes"] < MiB, u
