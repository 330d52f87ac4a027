"""No node-sized work per event: a pod's event costs kvolumed a look at that
pod and its volumes, however many pods and volumes the node has.
volumesInUse is computed again only when something that feeds it changed
(never for a pod of inline volumes), and the pods that share a persistent
volume come from an index, not from a walk over every pod
(volume/wanters.c).  /volumes counts the pods and volumes the passes looked
at ("visited"); before, every pass walked every volume for volumesInUse and
every pod for a shared claim (issue 23: a new pod beside 10,000 volumes
took 9.7 times as long as on an empty node)."""
import json
import urllib.request

from integration.agent_fixtures import DRIVER, wait_until, write_config
from integration.test_volume_lookups import claim_volume

PODS = 40
VOLUMES = 5
SHARING = 4      # pods of the shared claim
TOUCHES = 5


def get_json(address, path):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as r:
        return json.loads(r.read())


def passes(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("kvolumed_reconcile_seconds_count "):
                return int(float(line.split()[1]))
    return 0


def touch(env, name, n):
    obj = env.api.get("pods", "default", name)
    obj["metadata"].setdefault("annotations", {})["test/touch"] = str(n)
    obj["metadata"].pop("resourceVersion", None)
    env.api.update(obj)


def cost_of_touches(env, address, name):
    """Pods and volumes looked at per event of pod `name`, once the node is
    quiet: each touch waits for the pass it causes."""
    before = get_json(address, "/volumes")["visited"]
    for n in range(TOUCHES):
        p0 = passes(address)
        touch(env, name, n)
        wait_until(lambda: passes(address) > p0, 10, interval=0.02, what="the pass of the pod's event")
    return (get_json(address, "/volumes")["visited"] - before) / TOUCHES


def test_a_pod_event_costs_the_pod_not_the_node(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral", "Persistent"])
    env.pv("pv-shared", "vol-shared", claim="shared")
    env.pvc("shared", "pv-shared")
    pods = [env.pod(f"p{i}", [{"name": f"v{j}", "csi": {"driver": DRIVER}} for j in range(VOLUMES)])
            for i in range(PODS)]
    pods += [env.pod(f"s{i}", [claim_volume("data", "shared"), {"name": "v0", "csi": {"driver": DRIVER}}])
             for i in range(SHARING)]
    config = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                          f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = info\n')
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n"))
    env.agent = env.start_agent(config)
    env.agent.wait_for_log("Serving /metrics")
    address = env.agent.output().split("Serving /metrics, /healthz, /volumes on ", 1)[1].split()[0]
    wait_until(lambda: get_json(address, "/volumes").get("published", 0) >= PODS * VOLUMES + 2 * SHARING, 60,
               interval=0.2, what="every volume published")
    node_size = PODS * VOLUMES + SHARING * 2 + PODS + SHARING   # volumes and pods

    inline = cost_of_touches(env, address, "p7")
    shared = cost_of_touches(env, address, "s1")
    # An inline pod: itself and its 5 volumes (each looked at once to plan
    # and once for its publishes).  A pod of the shared claim: itself, its
    # 2 volumes, and the SHARING pods of the claim.
    assert inline <= 2 * (1 + VOLUMES), (inline, node_size)
    assert shared <= 2 * (1 + 2 + SHARING), (shared, node_size)
