"""Local PVs (kubelet pkg/volume/local): spec.local.path bind-mounted at
pods/<uid>/volumes/kubernetes.io~local-volume/<pv>, when the PV's node
affinity admits this Node."""
import os

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


def test_local_pv_is_bind_mounted_and_unmounted(volume_env, tmp_path):
    env = volume_env
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
    assert open(f"{target}/hello").read() == "from the local disk"
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)
    assert not mounted(target)
    assert (disk / "hello").read_text() == "from the local disk"


def test_local_pv_of_another_node_is_a_final_error(volume_env, tmp_path):
    env = volume_env
    env.start()
    local_pv(env, "pv-elsewhere", tmp_path, node="other-node")
    env.pvc("claim", "pv-elsewhere")
    pod = env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}])
    env.wait_event("FailedMount", "node affinity", timeout=30)
    assert not os.path.exists(f"{env.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~local-volume")
