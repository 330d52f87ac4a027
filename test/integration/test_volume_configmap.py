"""configMap and secret volumes (kubelet's kubernetes.io/configmap and
kubernetes.io/secret): kvolumed writes the object's keys itself, in kubelet's
AtomicWriter layout, on root-dir's disk for a configMap and on a tmpfs of its
own for a secret; it reads each object as the node does (a GET, then a watch
of that one object by name), follows its updates and keeps the files of a
deleted one; a restart rewrites nothing, a reboot sets the tmpfs up again."""
import base64
import os
import stat
import subprocess
import time

import pytest

from integration.agent_fixtures import answered_requests, wait_until
from integration.pod_volume_fixtures import fs_type, kill_agent, mounts_under, read, records_of_previous_boot, remove_pods, snapshot, vol_dir


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


def settled(d, timeout=10):
    """The writer's call done: it reads back as one version, ..data naming
    it (a reader sees the new content as soon as ..data is swapped, before
    the writer has removed the old version and the old names)."""
    def one_version():
        try:
            versions = [n for n in os.listdir(d) if n.startswith("..") and n not in ("..data", "..data_tmp")]
            return len(versions) == 1 and os.readlink(f"{d}/..data") == versions[0] and \
                not os.path.lexists(f"{d}/..data_tmp")
        except OSError:
            return False
    wait_until(one_version, timeout=timeout, what=f"one version in {d}")


def configmap_reads(env, name):
    return [r for r in env.api.requests() if "/configmaps" in r["path"] and
            (r["path"].endswith("/" + name) or r["query"].get("fieldSelector", "").endswith("=" + name))]


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
    settled(d)
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
    settled(s)
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
    settled(d)
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
    settled(d)
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
    node = env.node()
    node["status"]["allocatable"] = {"memory": "4Gi", "cpu": "2"}
    env.api.update(node)
    env.start()
    pod = env.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                          "spec": {"nodeName": "test-node", "volumes": [secret_volume("creds", "creds")],
                                   "containers": [{"name": "c", "image": "busybox",
                                                   "resources": {"limits": {"memory": "64Mi"}},
                                                   "volumeMounts": [{"name": "creds", "mountPath": "/s"}]}]},
                          "status": {"phase": "Running"}})
    d = vol_dir(env, pod, "secret", "creds")
    wait_until(lambda: read(f"{d}/password") == "hunter2", timeout=20, what="the secret's files")
    # On a tmpfs of its own (kubelet's Memory emptyDir), never on the disk,
    # sized as kubelet sizes it: the pod's memory limit, below allocatable.
    assert fs_type(d) == "tmpfs"
    [fields] = [m for m in mounts_under(env.root) if m[4] == d]
    assert "size=65536k" in fields[-1].split(","), fields
    assert stat.S_IMODE(os.stat(f"{d}/password").st_mode) == 0o644
    assert os.readlink(f"{d}/password") == "..data/password"
    env.agent.wait_for_log("Watching Secret/default/creds by name", timeout=10)

    update_data(env, "secrets", "creds", {"password": "correct horse", "user": "admin"})
    wait_until(lambda: read(f"{d}/password") == "correct horse", timeout=20, what="the secret's update")
    settled(d)
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


# --- the local API's answers, optional objects and keys ------------------------------

from integration.test_agent_localapi import api_get, sockdir, start as start_with_api  # noqa: E402,F401


def volumes_state(body):
    return {v["name"]: (v["state"], v.get("reason")) for v in body["volumes"]}


def test_missing_configmap_waits_with_the_reason_and_harms_nothing_else(volume_env, sockdir):
    env = volume_env
    configmap(env, "present", {"k": "v"})
    configmap(env, "partial", {"k": "v"})
    sock = start_with_api(env, sockdir)
    pod = env.pod("web", [cm_volume("good", "present"), cm_volume("missing", "absent"),
                          cm_volume("opt", "absent", optional=True),
                          cm_volume("keyless", "partial", items=[{"key": "nope", "path": "n"}]),
                          cm_volume("keyopt", "partial", optional=True,
                                    items=[{"key": "nope", "path": "n"}, {"key": "k", "path": "k"}])])
    uid = pod["metadata"]["uid"]
    # The other volumes are set up meanwhile.
    wait_until(lambda: read(f"{vol_dir(env, pod, 'configmap', 'good')}/k") == "v", timeout=20, what="good")
    wait_until(lambda: read(f"{vol_dir(env, pod, 'configmap', 'keyopt')}/k") == "v", timeout=20, what="keyopt")
    # An optional object that does not exist: mounted, empty.
    opt = vol_dir(env, pod, "configmap", "opt")
    wait_until(lambda: os.path.islink(f"{opt}/..data"), timeout=20, what="the empty optional volume")
    settled(opt)
    assert sorted(os.listdir(opt)) == sorted(["..data", os.readlink(f"{opt}/..data")])
    assert os.listdir(f"{opt}/..data") == []
    # Both reported (their objects answered), the runner's wait is answered at
    # once with kubelet's words (and retried by it).
    env.wait_event("FailedMount", 'configmap "absent" not found')
    env.wait_event("FailedMount", "configmap references non-existent config key: nope")
    t0 = time.time()
    status, body, _ = api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=60s")
    assert status == 409 and time.time() - t0 < 10, body
    states = volumes_state(body)
    assert states["missing"][0] == "failed" and 'configmap "absent" not found' in states["missing"][1], states
    assert states["keyless"][0] == "failed"
    assert "configmap references non-existent config key: nope" in states["keyless"][1], states
    for name in ("good", "opt", "keyopt"):
        assert states[name][0] == "published", states
    assert not os.path.exists(vol_dir(env, pod, "configmap", "missing"))
    assert not os.path.exists(vol_dir(env, pod, "configmap", "keyless"))

    # Not final: the object created, the key added, the watches bring them.
    configmap(env, "absent", {"x": "y"})
    update_data(env, "configmaps", "partial", {"k": "v", "nope": "here"})
    status, body = wait_until(
        lambda: (r := api_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=30s"))[0] == 200 and r[:2],
        timeout=30, what="every volume mounted")
    assert read(f"{vol_dir(env, pod, 'configmap', 'missing')}/x") == "y"
    assert read(f"{vol_dir(env, pod, 'configmap', 'keyless')}/n") == "here"
    wait_until(lambda: read(f"{opt}/x") == "y", timeout=20, what="the optional object's keys once it exists")
    wait_until(lambda: read(f"{vol_dir(env, pod, 'configmap', 'keyopt')}/n") == "here", timeout=20,
               what="the optional key once it exists")
    remove_pods(env, pod)


def test_configmaps_read_by_name_only(volume_env):
    """kubelet reads configMaps as the node: the one object a pod names, by
    GET and a watch with fieldSelector metadata.name, never a list of the
    namespace; the fake's Node authorizer refuses any other, and one no pod
    references is never asked for."""
    env = volume_env
    configmap(env, "cfg", {"k": "v"})
    configmap(env, "unrelated", {"secret": "no"})
    env.start()
    pod = env.pod("web", [cm_volume("cfg", "cfg")])
    d = vol_dir(env, pod, "configmap", "cfg")
    wait_until(lambda: read(f"{d}/k") == "v", timeout=20, what="the configMap's files")
    env.agent.wait_for_log("Watching ConfigMap/default/cfg by name", timeout=10)
    update_data(env, "configmaps", "cfg", {"k": "w"})
    wait_until(lambda: read(f"{d}/k") == "w", timeout=20, what="the update")
    cm_requests = [r for r in env.api.requests() if "/configmaps" in r["path"]]
    assert cm_requests
    for r in cm_requests:
        by_get = r["path"] == "/api/v1/namespaces/default/configmaps/cfg"
        by_watch = (r["path"] == "/api/v1/namespaces/default/configmaps"
                    and r["query"].get("fieldSelector") == "metadata.name=cfg")
        assert by_get or by_watch, r
        assert r["status"] in (200, None), r
    assert any(r.get("watch") for r in cm_requests)
    assert not configmap_reads(env, "unrelated")
    remove_pods(env, pod)
    # Nobody asks any more: its watch stops.
    env.agent.wait_for_log("No longer watching ConfigMap/default/cfg", timeout=30)


# --- restart, reboot, teardown -----------------------------------------------------------


def test_restart_rewrites_nothing_and_a_reboot_sets_the_tmpfs_up_again(volume_env):
    env = volume_env
    configmap(env, "cfg", {"a": "1"})
    secret(env, "creds", {"password": "hunter2"})
    env.start()
    pod = env.pod("web", [cm_volume("cfg", "cfg"), secret_volume("creds", "creds")],
                  security_context={"fsGroup": 4321})
    c, s = vol_dir(env, pod, "configmap", "cfg"), vol_dir(env, pod, "secret", "creds")
    wait_until(lambda: read(f"{c}/a") == "1" and read(f"{s}/password") == "hunter2", timeout=20,
               what="both volumes")
    env.agent.wait_for_log("watched for its loss", timeout=10)
    settled(c)
    settled(s)
    before = (snapshot(c), snapshot(s))

    # kill -9 and start: both found set up, compared by the writer, nothing rewritten.
    kill_agent(env)
    env.start()
    wait_until(lambda: env.agent.output().count("already holds the content of") >= 2, timeout=30,
               what=lambda: "both volumes compared after the restart\n" + env.agent.output()[-3000:])
    assert (snapshot(c), snapshot(s)) == before
    assert fs_type(s) == "tmpfs"

    # A reboot: the tmpfs is gone with the boot, the records name another boot.
    kill_agent(env)
    subprocess.run(["umount", s], check=True)
    assert not os.listdir(s)
    records_of_previous_boot(env.root)
    env.start()
    wait_until(lambda: fs_type(s) == "tmpfs" and read(f"{s}/password") == "hunter2", timeout=30,
               what=lambda: "the secret's tmpfs set up again\n" + env.agent.output()[-3000:])
    st = os.stat(f"{s}/password")
    assert st.st_gid == 4321 and stat.S_IMODE(st.st_mode) == 0o644
    wait_until(lambda: "already holds the content of kubernetes.io/configmap/" in env.agent.output(), timeout=30,
               what="the configMap compared")
    assert snapshot(c) == before[0]  # on the disk: it survived the boot, nothing rewritten
    remove_pods(env, pod)


def test_teardown_waits_for_the_runtime_and_the_mount_guard(volume_env, tmp_path):
    """A pod deleted while its container runs keeps its volumes (the runtime's
    word, the frame's); once it stopped, a bind of the secret's tmpfs still
    there (a container's mount the runtime has not cleaned) holds the
    unmount back, the files untouched; then everything goes."""
    from integration.test_volume_runtime import _mock_cri
    gen = _mock_cri("unimplemented")
    cri = next(gen)
    try:
        env = volume_env
        configmap(env, "cfg", {"a": "1"})
        secret(env, "creds", {"password": "hunter2"})
        env.start(extra=f"[runtime]\nendpoint = {cri.endpoint}\n")
        pod = env.pod("web", [cm_volume("cfg", "cfg"), secret_volume("creds", "creds")])
        uid = pod["metadata"]["uid"]
        c, s = vol_dir(env, pod, "configmap", "cfg"), vol_dir(env, pod, "secret", "creds")
        wait_until(lambda: read(f"{c}/a") == "1" and read(f"{s}/password") == "hunter2", timeout=20,
                   what="both volumes")
        cri.add_pod(uid, name="web")
        bind = f"{env.root}/container-rootfs-creds"
        os.mkdir(bind)
        subprocess.run(["mount", "--bind", s, bind], check=True)
        try:
            env.api.remove("pods", "default", "web")
            env.agent.wait_for_log("Not unpublishing volume", timeout=15)
            time.sleep(0.5)
            assert read(f"{c}/a") == "1" and read(f"{s}/password") == "hunter2" and fs_type(s) == "tmpfs"
            cri.stop_pod(uid)
            env.wait_gone(c, timeout=20)
            env.agent.wait_for_log(f"The tmpfs at {s} is still mounted at {bind}", timeout=20)
            assert fs_type(s) == "tmpfs" and read(f"{bind}/password") == "hunter2"  # held: left as it is
        finally:
            subprocess.run(["umount", bind], check=False)
            os.rmdir(bind)
        env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
        assert not mounts_under(env.root)
    finally:
        next(gen, None)


def test_authorizer_lag_on_a_new_configmap_is_retried(volume_env):
    """The Node authorizer's graph does not relate the new pod to its
    configMap for a moment: the node's GET is refused (403) and retried with
    the claims' backoff, then the watch starts; nothing reported."""
    env = volume_env
    configmap(env, "cfg", {"k": "v"})
    env.start()
    env.api.set_graph_lag(2.0)
    pod = env.pod("web", [cm_volume("cfg", "cfg")])
    d = vol_dir(env, pod, "configmap", "cfg")
    wait_until(lambda: read(f"{d}/k") == "v", timeout=30, what="the configMap's files")
    # A request's effect comes before its answer is logged: wait for the answers.
    statuses = [r["status"] for r in answered_requests(
        env.api, lambda r: r["method"] == "GET" and r["path"] == "/api/v1/namespaces/default/configmaps/cfg")]
    assert statuses[0] == 403 and 200 in statuses, statuses
    assert not [e for e in env.events() if e.get("reason") == "FailedMount"]
    env.api.set_graph_lag(0)
    remove_pods(env, pod)
