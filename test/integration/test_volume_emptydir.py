"""emptyDir volumes (kubelet pkg/volume/emptydir) end to end: the real
kvolumed and the fake API server, with real directories and tmpfs mounts."""
import glob
import json
import os
import stat
import subprocess

from integration.agent_fixtures import wait_until
from integration.pod_volume_fixtures import kill_agent, records_of_previous_boot

MiB = 1024 * 1024


def empty_dir(name, **spec):
    return {"name": name, "emptyDir": spec}


def path_of(env, pod, name):
    return f"{env.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~empty-dir/{name}"


def mount_of(path):
    """(mount id, fstype, super options) of the mount at path, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                rest = fields[fields.index("-") + 1:]
                found = (fields[0], rest[0], rest[2])
    return locals().get("found")


def tmpfs_size(path):
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def wait_dir(env, path):
    return wait_until(lambda: os.path.isdir(path) and stat.S_IMODE(os.stat(path).st_mode) == 0o777, 15,
                      what=lambda: f"{path} made 0777\n" + env.agent.output()[-3000:])


def test_disk_emptydir_is_a_0777_dir_removed_at_teardown(volume_env, tmp_path):
    env = volume_env
    env.start()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the pod's")
    pod = env.pod("web", [empty_dir("scratch")])
    path = path_of(env, pod, "scratch")
    wait_dir(env, path)
    assert not os.path.ismount(path)
    # What a pod leaves: files, dirs, and a symlink out of the volume, which
    # the removal must not follow.
    os.makedirs(f"{path}/a/b")
    with open(f"{path}/a/b/f", "w") as f:
        f.write("x")
    os.symlink(str(outside), f"{path}/a/out")
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)
    assert (outside / "keep").read_text() == "not the pod's"
    assert not glob.glob(f"{env.root}/kvolumed/pods/*")


def test_fs_group_is_applied_to_an_emptydir(volume_env):
    """kubelet's SetVolumeOwnership after SetUp: the group, setgid."""
    env = volume_env
    env.start()
    pod = env.pod("web", [empty_dir("scratch"), empty_dir("mem", medium="Memory")],
                  security_context={"fsGroup": 2345})
    for name in ("scratch", "mem"):
        path = path_of(env, pod, name)
        wait_until(lambda: os.path.isdir(path) and os.stat(path).st_gid == 2345
                   and os.stat(path).st_mode & stat.S_ISGID, 30,
                   what=lambda: f"{path} owned by group 2345, setgid\n" + env.agent.output()[-3000:])
    assert stat.S_IMODE(os.stat(path_of(env, pod, "scratch")).st_mode) == 0o2777
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)


def test_memory_emptydir_with_size_limit_is_a_tmpfs_of_that_size(volume_env):
    env = volume_env
    env.start()
    pod = env.pod("web", [empty_dir("mem", medium="Memory", sizeLimit="16Mi")])
    path = path_of(env, pod, "mem")
    env.wait_mounted(path)
    mount_id, fstype, options = mount_of(path)
    assert fstype == "tmpfs"
    assert f"size={16 * 1024}k" in options.split(","), (options, tmpfs_size(path))
    assert tmpfs_size(path) == 16 * MiB
    with open(f"{path}/data", "w") as f:
        f.write("in memory")
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)
    assert mount_of(path) is None


def test_memory_emptydir_without_size_limit_takes_the_pods_memory_limits(volume_env):
    env = volume_env
    env.start()
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "test-node", "volumes": [empty_dir("mem", medium="Memory")],
                     "containers": [
                         {"name": "a", "image": "busybox", "resources": {"limits": {"memory": "24Mi"}},
                          "volumeMounts": [{"name": "mem", "mountPath": "/m"}]},
                         {"name": "b", "image": "busybox", "resources": {"limits": {"memory": "8Mi"}}}]},
            "status": {"phase": "Running"}}
    pod = env.api.create(body)
    uid = pod["metadata"]["uid"]
    path = path_of(env, pod, "mem")
    env.wait_mounted(path)
    assert tmpfs_size(path) == 32 * MiB
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)


def test_restart_keeps_the_tmpfs_and_a_reboot_mounts_it_again(volume_env):
    env = volume_env
    env.start()
    pod = env.pod("web", [empty_dir("mem", medium="Memory", sizeLimit="8Mi"), empty_dir("disk")])
    mem, disk = path_of(env, pod, "mem"), path_of(env, pod, "disk")
    env.wait_mounted(mem)
    wait_dir(env, disk)
    with open(f"{mem}/data", "w") as f:
        f.write("kept across a restart")
    with open(f"{disk}/data", "w") as f:
        f.write("kept on disk")
    mount_id = mount_of(mem)[0]
    # The disk one's record says it is set up without a mount (done: the
    # intent written before the work has no mount either).
    def recorded_done_without_mount():
        record = json.load(open(glob.glob(f"{env.root}/kvolumed/**/kubernetes.io~empty-dir/disk/kvolumed.json",
                                          recursive=True)[0]))
        return record.get("done") and not record["mount"]
    wait_until(recorded_done_without_mount, 15, what="the disk emptyDir recorded as done, no mount")

    kill_agent(env)
    env.start()
    wait_until(lambda: "Found publish of kubernetes.io/empty-dir/" in env.agent.output(), 30,
               what="the emptyDirs reconstructed")
    # Another pod set up after the restart: the first pass is long done.
    other = env.pod("other", [empty_dir("scratch")])
    wait_dir(env, path_of(env, other, "scratch"))
    # Nothing remade: the same tmpfs with its data, the disk dir with its.
    assert mount_of(mem)[0] == mount_id
    assert open(f"{mem}/data").read() == "kept across a restart"
    assert open(f"{disk}/data").read() == "kept on disk"
    assert "Volume mem published" not in env.agent.output()
    assert "Volume disk published" not in env.agent.output()

    # The reboot: the tmpfs is gone and the records are a previous boot's.
    kill_agent(env)
    subprocess.run(["umount", mem], check=True)
    records_of_previous_boot(env.root)
    env.start()
    env.wait_mounted(mem, timeout=30)
    assert not os.path.exists(f"{mem}/data")
    assert open(f"{disk}/data").read() == "kept on disk"
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)


def test_root_dir_is_made_a_shared_mount_at_start(volume_env):
    """kubelet's setupDataDirs: root-dir rshared, so that Bidirectional
    mounts of node plugins reach the host; said once in the log."""
    env = volume_env
    real = os.path.realpath(env.root)
    env.start(env={"KVOLUMED_TEST_ROOT_DIR_PRIVATE": None})
    env.agent.wait_for_log("a shared mount", timeout=30)
    with open("/proc/self/mountinfo") as f:
        entries = [line.split() for line in f if line.split()[4] == real]
    assert entries, "root-dir is no mount point"
    assert any(o.startswith("shared:") for o in entries[-1][6:entries[-1].index("-")])
    # A restart finds it shared already: nothing stacked.
    env.agent.stop()
    env.start(env={"KVOLUMED_TEST_ROOT_DIR_PRIVATE": None})
    env.agent.wait_for_log("is on a shared mount already", timeout=30)
    with open("/proc/self/mountinfo") as f:
        assert len([line for line in f if line.split()[4] == real]) == len(entries)


def test_emptydir_is_kept_while_the_runtime_says_its_container_runs(volume_env, tmp_path):
    """The runtime's word before any teardown (DESIGN §3), for an emptyDir
    too: its data stays while the mock CRI runtime says the pod runs."""
    from integration.test_volume_runtime import _mock_cri
    gen = _mock_cri("unimplemented")
    cri = next(gen)
    try:
        env = volume_env
        env.start(extra=f"[runtime]\nendpoint = {cri.endpoint}\n")
        pod = env.pod("web", [empty_dir("scratch"), empty_dir("mem", medium="Memory")])
        uid = pod["metadata"]["uid"]
        disk, mem = path_of(env, pod, "scratch"), path_of(env, pod, "mem")
        wait_dir(env, disk)
        env.wait_mounted(mem)
        with open(f"{disk}/f", "w") as f:
            f.write("still used")
        cri.add_pod(uid, name="web")
        env.api.remove("pods", "default", "web")
        # Said once for the pod, of whichever volume the pass met first.
        wait_until(lambda: "of pod default/web: container runtime" in env.agent.output(), 30,
                   what="the teardown held by the runtime")
        assert open(f"{disk}/f").read() == "still used"
        assert os.path.ismount(mem)
        cri.stop_pod(uid)
        env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
        assert mount_of(mem) is None
    finally:
        next(gen, None)
