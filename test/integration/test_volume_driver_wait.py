"""Volumes and a driver that is not registered (yet): issue 20, item 9.

After a restart, the drivers already in plugins_registry register again a
moment after the first reconcile pass.  Volumes found set up need no driver
until they change: no FailedMount on a running pod, no volume shown as
anything but published.  A volume that really waits for a driver says so
after a grace period in which registration normally completes, and once.

kubelet (kubelet-facts §6, §8) re-runs NodePublishVolume for every volume it
reconstructs and reports "driver name ... not found in the list of registered
CSI drivers" for each until the driver is back (kubernetes/kubernetes#72500):
this is where kvolumed does better."""
import json
import time
import urllib.request

from integration.agent_fixtures import DRIVER, answered_requests, wait_until, write_config
from integration.test_agent_metrics import SERVING

REG = "reg.csi.kvolumed.io"
PODS, INLINE_PER_POD = 20, 4  # and one persistent volume each: 100 published volumes
# volume/internal.h DRIVER_WAIT_GRACE_USEC
GRACE = 20.0


def start(env, registration_dir):
    """kvolumed as the node, with plugin registration and /volumes on."""
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n')
    with open(path) as f:
        text = f.read()
    text = text.replace("registration-dir =\n", f"registration-dir = {registration_dir}\n")
    text = text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n")
    with open(path, "w") as f:
        f.write(text)
    env.agent = env.start_agent(path)
    env.agent.wait_for_log("Serving /metrics", timeout=30)
    return SERVING.search(env.agent.output()).group(1)


def volumes(address):
    with urllib.request.urlopen(f"http://{address}/volumes", timeout=10) as r:
        return json.loads(r.read())


def published(state):
    return sorted(p["path"] for v in state["volumes"] for p in v["publishes"] if p["state"] == "done")


def inline(name):
    return {"name": name, "csi": {"driver": REG, "volumeAttributes": {"size": "1Mi"}}}


def persistent(env, i):
    """PV pv<i> (staged, then published) bound to claim c<i>."""
    env.api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv{i}"},
                    "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                             "claimRef": {"namespace": "default", "name": f"c{i}"},
                             "csi": {"driver": REG, "volumeHandle": f"vol{i}"}}})
    env.pvc(f"c{i}", f"pv{i}")
    return {"name": "data", "persistentVolumeClaim": {"claimName": f"c{i}"}}


def registered_driver(env, mock_csi_factory):
    env.api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": REG},
                    "spec": {"attachRequired": False, "volumeLifecycleModes": ["Persistent", "Ephemeral"]}})
    return mock_csi_factory(name=REG, tmpfs=True, registration_dir=True, node_id="reg-node")


def registrations(drv):
    return sum(1 for n in drv.control.registration()["notifications"] if n["plugin_registered"])


def publishes(drv, method="NodePublishVolume"):
    return [c for c in drv.calls() if c["method"] == method]


def failed_mounts(env):
    return [e for e in env.events() if e.get("reason") == "FailedMount"]


def test_restart_with_100_published_volumes_posts_no_event(volume_env, mock_csi_factory):
    env = volume_env
    drv = registered_driver(env, mock_csi_factory)
    start(env, drv.registration_dir)
    wait_until(lambda: registrations(drv) == 1, 30, what="the driver registered")
    pods = [env.pod(f"p{i}", [inline(f"v{j}") for j in range(INLINE_PER_POD)] + [persistent(env, i)])
            for i in range(PODS)]
    targets = sorted([env.target(p, f"v{j}") for p in pods for j in range(INLINE_PER_POD)]
                     + [env.target(p, f"pv{i}") for i, p in enumerate(pods)])
    assert len(targets) == 100
    for t in targets:
        env.wait_mounted(t, timeout=120)
    wait_until(lambda: len(publishes(drv)) == len(targets), 30, what="100 publishes logged")
    assert len(publishes(drv, "NodeStageVolume")) == PODS
    # Each publish has its Normal event (posted after it): all of them in,
    # and every event request answered, before the restart.
    wait_until(lambda: len([e for e in env.events() if e.get("reason") == "SuccessfulMountVolume"]) == 100, 30,
               what="100 SuccessfulMountVolume events")
    answered_requests(env.api, lambda r: "/events" in r["path"])
    assert failed_mounts(env) == []
    events_before = env.events()

    # An upgrade: kvolumed stops and starts again; the registrar's socket
    # stays.  Its GetInfo answers only after kvolumed's first pass, as on a
    # loaded node (the first pass runs milliseconds before, anyway).
    env.agent.stop()
    drv.control.hang("GetInfo", count=-1)
    address = start(env, drv.registration_dir)
    drv.control.wait_hung("GetInfo", 1, timeout=30)
    # /volumes shows every volume published from the start, before and after
    # the first pass, driver or not.
    assert published(volumes(address)) == targets
    env.agent.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
    assert published(volumes(address)) == targets
    answered_requests(env.api, lambda r: "/events" in r["path"])
    assert failed_mounts(env) == [], failed_mounts(env)[:3]
    # A pod created while the driver is not back yet waits for it, silently.
    late = env.pod("late", [inline("v")])
    env.agent.wait_for_log(f"Volume v of pod default/late waits for CSI driver {REG} to register", timeout=30)
    drv.control.clear_faults("GetInfo")
    wait_until(lambda: registrations(drv) == 2, 60, what="the driver registered again\n"
               + env.agent.output()[-3000:])
    env.wait_mounted(env.target(late, "v"), timeout=60)
    # The driver mounts before it answers: kvolumed has it once the answer came.
    wait_until(lambda: published(volumes(address)) == sorted(targets + [env.target(late, "v")]), 30,
               what="the 101 volumes published in /volumes")
    # Nothing set up was staged or published again, nothing was reported:
    # not one Event on the running pods since the restart; the late pod has
    # its volume's success, no warning.
    assert len(publishes(drv)) == len(targets) + 1
    assert len(publishes(drv, "NodeStageVolume")) == PODS
    assert failed_mounts(env) == [], failed_mounts(env)[:3]
    events = env.events()
    assert [e for e in events if e["involvedObject"]["name"] != "late"] == events_before
    assert [e["type"] for e in events if e["involvedObject"]["name"] == "late"] in ([], ["Normal"])
    assert "not found in the list of registered CSI drivers" not in env.agent.output()


def test_a_volume_waiting_for_its_driver_says_so_after_the_grace_once(volume_env, mock_csi_factory):
    env = volume_env
    drv = registered_driver(env, mock_csi_factory)
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    drv.control.stop_registration()  # the driver is not there
    address = start(env, drv.registration_dir)
    env.agent.wait_for_log("Ready: volumes on disk reconstructed", timeout=30)
    created = time.monotonic()
    pod = env.pod("web", [inline("scratch")])
    # kvolumed has seen the pod once it says the volume waits (or, wrongly,
    # once it reported it).
    wait_until(lambda: f"waits for CSI driver {REG} to register" in env.agent.output() or failed_mounts(env), 30,
               what="the pod's volume waiting for its driver")
    assert failed_mounts(env) == [], "reported before the grace period"
    # /volumes says what it waits for meanwhile.
    waiting = [v for v in volumes(address)["volumes"] if v["driver"] == REG]
    assert len(waiting) == 1 and waiting[0]["driver_waiting_since"], waiting
    event = env.wait_event("FailedMount", f"driver name {REG} not found in the list of registered CSI drivers",
                           timeout=GRACE + 30)[0]
    assert time.monotonic() - created >= GRACE - 1, "reported before the grace period"
    # Once: passes over the pod (it changes) say nothing more.  The pods'
    # watch keeps its order: once "other" is mounted, kvolumed has seen the
    # updates of "web" before it, and passed over them.
    for i in range(3):
        web = env.api.get("pods", "default", "web")
        web["metadata"].setdefault("labels", {})["touch"] = str(i)
        web["metadata"].pop("resourceVersion", None)
        env.api.update(web)
    other = env.pod("other", [{"name": "s", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(other, "s"), timeout=60)
    drv.control.start_registration()
    env.wait_mounted(env.target(pod, "scratch"), timeout=60)
    wait_until(lambda: [v["driver_waiting_since"] for v in volumes(address)["volumes"] if v["driver"] == REG]
               == [None], what="/volumes: no longer waiting")
    events = failed_mounts(env)
    assert len(events) == 1 and events[0].get("count", 1) == 1, events
    assert events[0]["metadata"]["name"] == event["metadata"]["name"]
