"""Local PVs (kubelet pkg/volume/local): spec.local.path bind-mounted at
pods/<uid>/volumes/kubernetes.io~local-volume/<pv>, when the PV's node
affinity admits this Node."""
import glob
import json
import os
import signal
import subprocess

from integration.agent_fixtures import wait_until


def mounted(path):
    """In the mount table: os.path.ismount misses a bind of the same file system."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def local_pv(env, name, path, node="test-node", claim="claim"):
    return env.api.create({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "local": {"path": str(path)},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [
                     {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                 "claimRef": {"namespace": "default", "name": claim}},
        "status": {"phase": "Available"}})


def local_pod(env, tmp_path):
    """kvolumed, a local PV of this node on a directory with a file, and a
    pod using it through a claim; returns the pod's uid and the bind's
    path once it is mounted."""
    env.start()
    disk = tmp_path / "disk"
    disk.mkdir()
    (disk / "hello").write_text("from the local disk")
    local_pv(env, "pv-local", disk)
    env.pvc("claim", "pv-local")
    pod = env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}])
    uid = pod["metadata"]["uid"]
    target = f"{env.root}/pods/{uid}/volumes/kubernetes.io~local-volume/pv-local"
    wait_until(lambda: mounted(target), 30, what=f"{target} mounted")
    return uid, target


def test_local_pv_is_bind_mounted_and_unmounted(volume_env, tmp_path):
    env = volume_env
    uid, target = local_pod(env, tmp_path)
    assert open(f"{target}/hello").read() == "from the local disk"
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
    assert not mounted(target)
    assert (tmp_path / "disk" / "hello").read_text() == "from the local disk"


def test_local_pv_of_another_node_is_a_final_error(volume_env, tmp_path):
    env = volume_env
    env.start()
    local_pv(env, "pv-elsewhere", tmp_path, node="other-node")
    env.pvc("claim", "pv-elsewhere")
    pod = env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}])
    env.wait_event("FailedMount", "node affinity", timeout=30)
    assert not os.path.exists(f"{env.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~local-volume")


def mount_id(path):
    """The id of the top mount at path, or None."""
    with open("/proc/self/mountinfo") as f:
        ids = [line.split()[0] for line in f if line.split()[4] == path]
    return ids[-1] if ids else None


def kill_agent(env):
    env.agent.proc.send_signal(signal.SIGKILL)
    env.agent.proc.wait()


def test_local_pv_survives_a_kill_and_is_bound_again_after_a_reboot(volume_env, tmp_path):
    """kill -9 of kvolumed: the bind stays, the same mount, nothing remade.
    A reboot (the records' boot-id another): the bind is gone and made again."""
    env = volume_env
    uid, target = local_pod(env, tmp_path)
    wait_until(lambda: "Volume pv-local published" in env.agent.output(), 30, what="the publish logged")
    before = mount_id(target)

    kill_agent(env)
    env.start()
    wait_until(lambda: "Found publish of kubernetes.io/local-volume/" in env.agent.output(), 30,
               what=lambda: "the local volume reconstructed\n" + env.agent.output()[-3000:])
    # Another pod set up after the restart: the first pass is long done.
    other = env.pod("other", [{"name": "scratch", "emptyDir": {}}])
    wait_until(lambda: os.path.isdir(f"{env.root}/pods/{other['metadata']['uid']}/volumes/kubernetes.io~empty-dir/"
                                     "scratch"), 30, what="the other pod's emptyDir")
    assert mount_id(target) == before
    with open("/proc/self/mountinfo") as f:
        assert sum(1 for line in f if line.split()[4] == target) == 1
    assert "Volume pv-local published" not in env.agent.output()
    assert open(f"{target}/hello").read() == "from the local disk"

    # The reboot: the bind is gone and the records are a previous boot's.
    kill_agent(env)
    subprocess.run(["umount", target], check=True)
    assert not mounted(target)
    records = glob.glob(f"{env.root}/**/kvolumed*.json", recursive=True)
    assert records
    for path in records:
        with open(path) as f:
            record = json.load(f)
        record["bootID"] = "00000000-0000-4000-8000-000000000000"
        with open(path, "w") as f:
            json.dump(record, f)
    env.start()
    wait_until(lambda: mounted(target), 30, what=f"{target} bound again after the reboot\n"
               + env.agent.output()[-3000:])
    assert open(f"{target}/hello").read() == "from the local disk"
    env.api.remove("pods", "default", "web")
    env.api.remove("pods", "default", "other")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
    assert not mounted(target)
    assert (tmp_path / "disk" / "hello").read_text() == "from the local disk"
