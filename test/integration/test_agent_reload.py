"""What a SIGHUP changes under a running kvolumed: the CSI call timeout, the
per-driver limit, the statically configured drivers and the metrics address
take effect at once; node-name and root-dir are only named (see
test_agent_lifecycle.py)."""
import signal
import socket
import urllib.error
import urllib.request

from integration.agent_fixtures import DRIVER, wait_until, write_config

OTHER = "other.csi.kvolumed.io"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status
    except (urllib.error.URLError, OSError):
        return None


def configure(env, listen, csi="", drivers=()):
    sections = f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n'
    for name, endpoint in drivers:
        sections += f'[driver "{name}"]\nendpoint = {endpoint}\n'
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        sections + "[log]\nlevel = debug\n", csi=csi)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("\nlisten =\n", f"\nlisten = {listen}\n"))
    return path


def csinode_drivers(env):
    try:
        return {d["name"]: d.get("nodeID") for d in env.api.get("csinodes", None, "test-node")["spec"]["drivers"]}
    except Exception:
        return {}


def test_reload_applies_drivers_timeouts_and_metrics_address(volume_env, mock_csi_factory):
    env = volume_env
    other = mock_csi_factory(name=OTHER, tmpfs=True, node_id="other-node-id")
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": OTHER},
                    "spec": {"attachRequired": False, "volumeLifecycleModes": ["Ephemeral"]}})
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    first, second = free_port(), free_port()
    config = configure(env, f"127.0.0.1:{first}")
    agent = env.start_agent(config)
    env.agent = agent
    wait_until(lambda: healthz(first) == 200, what="/healthz on the first address")
    wait_until(lambda: DRIVER in csinode_drivers(env), what="the configured driver in CSINode")

    # The other driver, a new address and a 2 s call timeout, all live.
    configure(env, f"127.0.0.1:{second}", csi="call-timeout = 2s\n", drivers=[(OTHER, other.endpoint)])
    agent.signal(signal.SIGHUP)
    wait_until(lambda: healthz(second) == 200, what="/healthz on the new address")
    assert healthz(first) is None, "the old address still answers"
    wait_until(lambda: csinode_drivers(env).get(OTHER) == "other-node-id", what="the new driver in CSINode")
    pod = env.pod("web", [{"name": "v", "csi": {"driver": OTHER}}])
    env.wait_mounted(env.target(pod, "v"))
    env.driver.control.hang("NodePublishVolume", count=1)
    slow = env.pod("slow", [{"name": "s", "csi": {"driver": DRIVER}}])
    agent.wait_for_log("CSI_METHOD=NodePublishVolume CSI_CODE=DeadlineExceeded", timeout=10)
    env.driver.control.release("NodePublishVolume")
    env.wait_mounted(env.target(slow, "s"), timeout=20)
    assert "takes effect at the next restart" not in agent.output()

    # The driver removed again: its CSINode entry goes; it is no longer called.
    env.api.remove("pods", "default", "web")
    env.wait_gone(env.target(pod, "v"))
    configure(env, f"127.0.0.1:{second}", csi="call-timeout = 2s\n")
    agent.signal(signal.SIGHUP)
    wait_until(lambda: OTHER not in csinode_drivers(env), what="the removed driver out of CSINode")
    assert DRIVER in csinode_drivers(env)
    assert agent.proc.poll() is None
