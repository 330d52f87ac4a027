"""configMap and secret volumes (kubelet's kubernetes.io/configmap and
kubernetes.io/secret): kvolumed writes the object's keys itself, in kubelet's
AtomicWriter layout, on root-dir's disk for a configMap and on a tmpfs of its
own for a secret; it reads each object as the node does (a GET, then a watch
of that one object by name), follows its updates and keeps the files of a
deleted one; a restart rewrites nothing, a reboot sets the tmpfs up again."""
import base64
import glob
import json
import os
import signal
import stat
import subprocess
import time

import pytest

from integration.agent_fixtures import wait_until


def cm_volume(name, cm, **kw):
    return {"name": name, "configMap": {"name": cm, **kw}}


def secret_volume(name, secret, **kw):
    return {"name": name, "secret": {"secretName": secret, **kw}}


def configmap(env, name, data=None, binary=None, namespace="default"):
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
           "data": data or {}}
    if binary:
        obj["binaryData"] = {k: base64.b64encode(v).decode() for k, v in binary.items()}
    return env.api.create(obj)


def secret(env, name, data, namespace="default"):
    return env.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                           "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


def update_data(env, resource, name, data, namespace="default"):
    obj = env.api.get(resource, namespace, name)
    if resource == "secrets":
        data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    obj["data"] = data
    return env.api.update(obj)


def vol_dir(env, pod, kind, name):
    return f"{env.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~{kind}/{name}"


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def mounts_under(root):
    with open("/proc/self/mountinfo") as f:
        return [line.split() for line in f if line.split()[4].startswith(root + "/")]


def fs_type(path):
    for fields in mounts_under(os.path.dirname(path.rstrip("/"))):
        if fields[4] == path:
            return fields[fields.index("-") + 1]
    return None


def snapshot(d):
    """What a rewrite would change: the version ..data names, and the inode
    of every file and symlink in the volume."""
    found = {"..data": os.readlink(f"{d}/..data")}
    for path in sorted(glob.glob(f"{d}/**", recursive=True) + glob.glob(f"{d}/..data/*")):
        st = os.lstat(path)
        found[os.path.relpath(path, d)] = (st.st_ino, st.st_mtime_ns)
    return found


def configmap_reads(env, name):
    return [r for r in env.api.requests() if "/configmaps" in r["path"] and
            (r["path"].endswith("/" + name) or r["query"].get("fieldSelector", "").endswith("=" + name))]


def remove_pods(env, *pods):
    """The pods go: their volumes are torn down, nothing left under root-dir."""
    for pod in pods:
        env.api.remove("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    for pod in pods:
        env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)
    assert not mounts_under(env.root)


def test_configmap_files_modes_layout_and_fsgroup(volume_env):
    env = volume_env
    configmap(env, "cfg", {"a.conf": "alpha\n", "b.conf": "beta\n"}, binary={"blob": b"\x00\x01\xff"})
    env.start()
    pod = env.pod("web", [cm_volume("all", "cfg", defaultMode=0o600),
                          cm_volume("some", "cfg", items=[{"key": "a.conf", "path": "sub/dir/a", "mode": 0o400},
                                                          {"key": "b.conf", "path": "b"}])],
                  security_context={"fsGroup": 1234})
    d = vol_dir(env, pod, "configmap", "all")
    wait_until(lambda: read(f"{d}/a.conf") == "alpha\n", timeout=20, what="the configMap's files\n" + "")
    # kubelet's AtomicWriter layout: ..data -> ..<timestamp>, a symlink per key.
    data = os.readlink(f"{d}/..data")
    assert data.startswith("..") and data != "..data" and os.path.isdir(f"{d}/{data}")
    for key in ("a.conf", "b.conf", "blob"):
        assert os.readlink(f"{d}/{key}") == f"..data/{key}"
    assert open(f"{d}/blob", "rb").read() == b"\x00\x01\xff"
    assert sorted(os.listdir(d)) == sorted(["..data", data, "a.conf", "b.conf", "blob"])
    # defaultMode, with fsGroup's group read; the dir on root-dir's disk, not a mount.
    st = os.stat(f"{d}/a.conf")
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == 1234
    assert not os.path.ismount(d)
    dst = os.stat(d)
    assert dst.st_gid == 1234 and dst.st_mode & stat.S_ISGID
    # items: only the keys named, at their paths, with their modes.
    s = vol_dir(env, pod, "configmap", "some")
    wait_until(lambda: read(f"{s}/b") == "beta\n", timeout=20, what="the items volume")
    assert read(f"{s}/sub/dir/a") == "alpha\n"
    assert stat.S_IMODE(os.stat(f"{s}/sub/dir/a").st_mode) == 0o440  # 0400 | fsGroup's 0440
    assert stat.S_IMODE(os.stat(f"{s}/b").st_mode) == 0o644
    assert sorted(os.listdir(s)) == sorted(["..data", os.readlink(f"{s}/..data"), "sub", "b"])
    assert os.readlink(f"{s}/sub") == "..data/sub"
    remove_pods(env, pod)


def test_configmap_update_reaches_the_files_and_only_a_real_change_writes(volume_env):
    env = volume_env
    configmap(env, "cfg", {"a": "1", "b": "2"})
    env.start()
    pod = env.pod("web", [cm_volume("cfg", "cfg")])
    d = vol_dir(env, pod, "configmap", "cfg")
    wait_until(lambda: read(f"{d}/a") == "1", timeout=20, what="the configMap's files")
    env.agent.wait_for_log("Watching ConfigMap/default/cfg by name", timeout=10)
    before = snapshot(d)

    # A change of the object that changes no file (a label): nothing written.
    obj = env.api.get("configmaps", "default", "cfg")
    obj["metadata"].setdefault("labels", {})["touched"] = "yes"
    env.api.update(obj)
    env.agent.wait_for_log("GET ConfigMap/default/cfg: changed", timeout=10)
    time.sleep(1.0)  # several passes: none may write
    assert snapshot(d) == before

    # A real change: a new version, swapped in; the key removed disappears.
    t0 = time.monotonic()
    update_data(env, "configmaps", "cfg", {"a": "one", "c": "3"})
    wait_until(lambda: read(f"{d}/a") == "one", timeout=20, interval=0.005, what="the update in the file")
    latency = time.monotonic() - t0
    print(f"configMap change -> file: {latency * 1000:.0f} ms (kubelet: about 60-90 s, its sync period "
          "plus the watch cache's)")
    after = snapshot(d)
    assert after["..data"] != before["..data"]
    assert read(f"{d}/c") == "3"
    wait_until(lambda: not os.path.lexists(f"{d}/b"), timeout=5, what="the removed key's file gone")
    assert sorted(os.listdir(d)) == sorted(["..data", after["..data"], "a", "c"])
    assert not os.path.exists(f"{d}/{before['..data']}")  # the old version removed
    remove_pods(env, pod)


def test_secret_on_tmpfs_default_mode_updates_and_deletion_keeps_the_files(volume_env):
    env = volume_env
    secret(env, "creds", {"password": "hunter2", "user": "admin"})
    env.start()
    pod = env.pod("web", [secret_volume("creds", "creds")])
    d = vol_dir(env, pod, "secret", "creds")
    wait_until(lambda: read(f"{d}/password") == "hunter2", timeout=20, what="the secret's files")
    # On a tmpfs of its own (kubelet's Memory emptyDir), never on the disk.
    assert fs_type(d) == "tmpfs"
    assert stat.S_IMODE(os.stat(f"{d}/password").st_mode) == 0o644
    assert os.readlink(f"{d}/password") == "..data/password"
    env.agent.wait_for_log("Watching Secret/default/creds by name", timeout=10)

    update_data(env, "secrets", "creds", {"password": "correct horse", "user": "admin"})
    wait_until(lambda: read(f"{d}/password") == "correct horse", timeout=20, what="the secret's update")
    before = snapshot(d)

    # Deleted while the pod runs: kubelet keeps the last content, and says why.
    env.api.remove("secrets", "default", "creds")
    event = env.wait_event("FailedMount", 'secret "creds" not found')
    assert len(event) == 1 and "keep their last content" in event[0]["message"], event
    env.agent.wait_for_log('Volume creds of pod default/web keeps its last content: secret "creds" not found')
    time.sleep(1.0)
    assert snapshot(d) == before and read(f"{d}/password") == "correct horse"
    assert fs_type(d) == "tmpfs"
    # Created again: followed again (the watch by name saw it come back).
    secret(env, "creds", {"password": "new"})
    wait_until(lambda: read(f"{d}/password") == "new", timeout=20, what="the re-created secret")
    wait_until(lambda: not os.path.lexists(f"{d}/user"), timeout=5, what="the dropped key gone")
    # No value ever reaches the log.
    out = env.agent.output()
    assert "hunter2" not in out and "correct horse" not in out
    remove_pods(env, pod)
