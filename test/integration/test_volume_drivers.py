"""Driver registration as the Node and CSINode show it (kubelet-facts §9):
statically configured and registered drivers get their CSINode entry, the
nodeid annotation and their topology labels; a driver that goes away has
them removed; what the Node loses (re-created, annotations removed) is
written again."""
import json

from integration.agent_fixtures import DRIVER, VolumeEnv, make_node, wait_until, write_config

NODE = "test-node"
MANAGED = "volumes.kubernetes.io/controller-managed-attach-detach"
NODE_ID = "csi.volume.kubernetes.io/nodeid"
REG_DRIVER = "reg.csi.example.com"


def csinode_entry(api, driver):
    try:
        c = api.get("csinodes", None, NODE)
    except Exception:
        return None
    if not c:
        return None
    for d in (c.get("spec") or {}).get("drivers") or []:
        if d.get("name") == driver:
            return d
    return None


def annotations(api):
    return api.get("nodes", None, NODE)["metadata"].get("annotations") or {}


def labels(api):
    return api.get("nodes", None, NODE)["metadata"].get("labels") or {}


def node_ids(api):
    return json.loads(annotations(api).get(NODE_ID, "{}"))


def wait_for(env, predicate, what, timeout=15.0):
    """wait_until, with the agent's log in the failure."""
    try:
        return wait_until(predicate, timeout, what=what)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{env.agent.output()[-4000:] if env.agent else ''}") from None


def wait_recorded(env, driver, node_id, timeout=15.0):
    wait_for(env, lambda: (csinode_entry(env.api, driver) or {}).get("nodeID") == node_id
             and node_ids(env.api).get(driver) == node_id,
             f"{driver} in CSINode and the nodeid annotation", timeout)
    return csinode_entry(env.api, driver)


def static_env(fake_api, mock_csi_factory, start_agent, tmp_path, start=True, **opts):
    driver = mock_csi_factory(name=DRIVER, tmpfs=True, start=start, **opts)
    return VolumeEnv(fake_api, driver, start_agent, tmp_path)


def start_with_registration(env, registration_dir):
    """VolumeEnv.start, with plugin registration on in registration_dir."""
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.kubeconfig_path,
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n')
    with open(path) as f:
        text = f.read()
    assert "registration-dir =\n" in text
    with open(path, "w") as f:
        f.write(text.replace("registration-dir =\n", f"registration-dir = {registration_dir}\n"))
    env.agent = env.start_agent(path)
    return env.agent


def test_static_driver_gets_csinode_entry_annotation_and_labels(fake_api, mock_csi_factory, start_agent, tmp_path):
    env = static_env(fake_api, mock_csi_factory, start_agent, tmp_path, node_id="mock-node-7", max_volumes=7,
                     topology={"topology.mock.csi/zone": "z1", "topology.mock.csi/rack": "r9"})
    env.start()
    entry = wait_recorded(env, DRIVER, "mock-node-7")
    assert entry["nodeID"] == "mock-node-7"
    assert entry["topologyKeys"] == ["topology.mock.csi/rack", "topology.mock.csi/zone"]
    assert entry["allocatable"] == {"count": 7}
    assert annotations(env.api)[MANAGED] == "true"
    wait_until(lambda: labels(env.api).get("topology.mock.csi/zone") == "z1"
               and labels(env.api).get("topology.mock.csi/rack") == "r9", what="topology labels")
    # The CSINode is owned by the Node, as kubelet makes it.
    node = env.node()
    owners = env.api.get("csinodes", None, NODE)["metadata"]["ownerReferences"]
    assert owners == [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"]}]
    env.wait_calls("NodeGetInfo", 1)  # logged by the driver after it answered


def test_static_driver_not_up_at_start_is_recorded_once_it_starts(fake_api, mock_csi_factory, start_agent,
                                                                     tmp_path):
    env = static_env(fake_api, mock_csi_factory, start_agent, tmp_path, start=False, node_id="late-node")
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    agent = env.start()
    pod = env.pod("early", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    # kvolumed found no socket and waits for it; nothing is recorded meanwhile.
    agent.wait_for_log(f"of statically configured CSI driver {DRIVER}: No such file or directory")
    assert csinode_entry(env.api, DRIVER) is None
    assert DRIVER not in node_ids(env.api)

    env.driver.start()
    wait_recorded(env, DRIVER, "late-node")
    # Its volume waited, and is set up once the driver is up, without
    # waiting out the backoff its failures earned.
    env.wait_mounted(env.target(pod, "scratch"), timeout=10.0)
    agent.wait_for_log(f"Statically configured CSI driver {DRIVER} is ready")


def test_static_driver_restarted_with_new_node_id_is_recorded_again(fake_api, mock_csi_factory, start_agent,
                                                                      tmp_path):
    env = static_env(fake_api, mock_csi_factory, start_agent, tmp_path, node_id="first-id")
    env.start()
    wait_recorded(env, DRIVER, "first-id")
    env.driver.stop()
    env.driver.opts["node_id"] = "second-id"
    env.driver.start()  # binds its socket anew: kvolumed sees it and asks again
    entry = wait_recorded(env, DRIVER, "second-id")
    assert entry["nodeID"] == "second-id"


def test_registered_driver_topology_labels_added_then_removed(volume_env, mock_csi_factory):
    env = volume_env
    drv = mock_csi_factory(name=REG_DRIVER, tmpfs=True, registration_dir=True, node_id="reg-node",
                           topology={"topology.reg.example.com/zone": "zone-a"}, max_volumes=3)
    reg = drv.registration_dir
    # A label someone else set with the same key elsewhere stays untouched.
    node = env.node()
    node["metadata"].setdefault("labels", {})["unrelated.example.com/x"] = "y"
    node["metadata"].pop("resourceVersion", None)
    env.api.update(node)
    start_with_registration(env, reg)

    entry = wait_recorded(env, REG_DRIVER, "reg-node")
    assert entry["topologyKeys"] == ["topology.reg.example.com/zone"]
    assert entry["allocatable"] == {"count": 3}
    wait_until(lambda: labels(env.api).get("topology.reg.example.com/zone") == "zone-a", what="topology label")
    wait_until(lambda: any(n["plugin_registered"] for n in drv.control.registration()["notifications"]),
               what="NotifyRegistrationStatus(true)")
    wait_recorded(env, DRIVER, "node-1")  # the static one, beside it

    drv.control.stop_registration()  # its registration socket goes: deregistered
    wait_until(lambda: "topology.reg.example.com/zone" not in labels(env.api),
               what=lambda: "topology label removed\n" + env.agent.output()[-3000:])
    wait_until(lambda: csinode_entry(env.api, REG_DRIVER) is None, what="CSINode entry removed")
    wait_until(lambda: REG_DRIVER not in node_ids(env.api), what="nodeid key removed")
    # The rest of the node is as it was.
    assert labels(env.api)["unrelated.example.com/x"] == "y"
    assert csinode_entry(env.api, DRIVER)["nodeID"] == "node-1"
    assert node_ids(env.api)[DRIVER] == "node-1"
    assert annotations(env.api)[MANAGED] == "true"


def test_topology_collision_fails_the_registration(volume_env, mock_csi_factory):
    env = volume_env
    node = env.node()
    node["metadata"].setdefault("labels", {})["topology.reg.example.com/zone"] = "zone-b"
    node["metadata"].pop("resourceVersion", None)
    env.api.update(node)
    drv = mock_csi_factory(name=REG_DRIVER, tmpfs=True, registration_dir=True, node_id="reg-node",
                           topology={"topology.reg.example.com/zone": "zone-a"})
    reg = drv.registration_dir
    agent = start_with_registration(env, reg)

    def refused():
        return [n for n in drv.control.registration()["notifications"]
                if not n["plugin_registered"] and "detected topology value collision" in n["error"]]
    wait_for(env, refused, "NotifyRegistrationStatus(false, collision)")
    agent.wait_for_log("detected topology value collision: driver reported "
                       "topology.reg.example.com/zone:zone-a but existing label is topology.reg.example.com/zone:zone-b")
    wait_recorded(env, DRIVER, "node-1")  # the static driver is recorded meanwhile
    assert csinode_entry(env.api, REG_DRIVER) is None
    assert REG_DRIVER not in node_ids(env.api)
    assert labels(env.api)["topology.reg.example.com/zone"] == "zone-b"
    assert not any(n["plugin_registered"] for n in drv.control.registration()["notifications"])


def registered_env(volume_env, mock_csi_factory, **opts):
    """volume_env plus a registered driver REG_DRIVER (node ID "reg-node")."""
    drv = mock_csi_factory(name=REG_DRIVER, tmpfs=True, registration_dir=True, node_id="reg-node", **opts)
    start_with_registration(volume_env, drv.registration_dir)
    wait_recorded(volume_env, REG_DRIVER, "reg-node")
    return drv


def test_node_recreated_gets_annotations_labels_and_csinode_back(volume_env, mock_csi_factory):
    env = volume_env
    registered_env(env, mock_csi_factory, topology={"topology.reg.example.com/zone": "zone-a"})
    old_uid = env.node()["metadata"]["uid"]

    # Deleted and registered again; the garbage collector takes the CSINode
    # with its owner (the fake API server has none: the test does it).
    env.api.remove("nodes", None, NODE)
    env.api.remove("csinodes", None, NODE)
    new_uid = env.api.create(make_node())["metadata"]["uid"]
    assert new_uid != old_uid

    wait_for(env, lambda: annotations(env.api).get(MANAGED) == "true", "controller-managed annotation restored")
    entry = wait_recorded(env, REG_DRIVER, "reg-node")
    assert entry["topologyKeys"] == ["topology.reg.example.com/zone"]
    wait_recorded(env, DRIVER, "node-1")
    wait_for(env, lambda: labels(env.api).get("topology.reg.example.com/zone") == "zone-a",
             "topology label restored")
    owners = env.api.get("csinodes", None, NODE)["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners if o["kind"] == "Node"] == [new_uid]


def test_node_recreated_while_old_csinode_remains_gets_new_owner(volume_env, mock_csi_factory):
    env = volume_env
    registered_env(env, mock_csi_factory)
    env.api.remove("nodes", None, NODE)
    new_uid = env.api.create(make_node())["metadata"]["uid"]

    # The old CSINode, not yet collected, must name the new Node or the
    # garbage collector deletes it.
    def owned_by_new():
        c = env.api.get("csinodes", None, NODE)
        return [o["uid"] for o in c["metadata"].get("ownerReferences", []) if o["kind"] == "Node"] == [new_uid]
    wait_for(env, owned_by_new, "CSINode owned by the new Node")
    assert csinode_entry(env.api, REG_DRIVER)["nodeID"] == "reg-node"
    wait_for(env, lambda: node_ids(env.api).get(REG_DRIVER) == "reg-node", "nodeid annotation restored")


def test_annotations_and_labels_removed_by_someone_are_restored(volume_env, mock_csi_factory):
    env = volume_env
    registered_env(env, mock_csi_factory, topology={"topology.reg.example.com/zone": "zone-a"})

    node = env.node()
    node["metadata"]["annotations"] = {"someone.example.com/else": "kept"}
    node["metadata"]["labels"] = {}
    node["metadata"].pop("resourceVersion", None)
    env.api.update(node)

    wait_for(env, lambda: annotations(env.api).get(MANAGED) == "true"
             and node_ids(env.api).get(REG_DRIVER) == "reg-node" and node_ids(env.api).get(DRIVER) == "node-1",
             "annotations restored")
    wait_for(env, lambda: labels(env.api).get("topology.reg.example.com/zone") == "zone-a",
             "topology label restored")
    assert annotations(env.api)["someone.example.com/else"] == "kept"

    # Once restored, nothing more is written: an unrelated change of the
    # Node, then one kvolumed must act on, cost exactly the one PATCH that
    # restores the label.
    def node_patches():
        return [r for r in env.api.requests()
                if r["method"] == "PATCH" and r["path"] == f"/api/v1/nodes/{NODE}"]
    before = len(node_patches())
    node = env.node()
    node["metadata"]["annotations"]["someone.example.com/else"] = "changed"
    node["metadata"].pop("resourceVersion", None)
    env.api.update(node)
    node = env.node()
    node["metadata"]["labels"] = {}
    node["metadata"].pop("resourceVersion", None)
    env.api.update(node)
    wait_for(env, lambda: labels(env.api).get("topology.reg.example.com/zone") == "zone-a",
             "topology label restored again")
    assert len(node_patches()) == before + 1


MIGRATED = "storage.alpha.kubernetes.io/migrated-plugins"


def csinode_annotations(api):
    try:
        c = api.get("csinodes", None, NODE)
    except Exception:
        return None
    return (c or {}).get("metadata", {}).get("annotations") or {}


def test_migrated_plugins_annotation_follows_the_registered_drivers(fake_api, mock_csi_factory, start_agent,
                                                                     tmp_path):
    """kubelet's CSINode annotation (nodeinfomanager setMigrationAnnotation):
    the in-tree plugins migrated to the drivers of this node, sorted and
    comma-joined; it follows a driver that goes."""
    ebs = mock_csi_factory(name="ebs.csi.aws.com", tmpfs=True, node_id="ebs-node")
    pd = mock_csi_factory(name="pd.csi.storage.gke.io", tmpfs=True, registration_dir=True, node_id="pd-node")
    env = VolumeEnv(fake_api, ebs, start_agent, tmp_path)
    path = write_config(tmp_path / "kvolumed.conf", env.root, fake_api.kubeconfig_path,
                        f'[driver "ebs.csi.aws.com"]\nendpoint = {ebs.endpoint}\n',
                        csi=f"registration-dir = {pd.registration_dir}\n")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:  # write_config's empty registration-dir comes first
        f.write(text.replace("registration-dir =\n", "", 1))
    env.agent = env.start_agent(path)

    wait_recorded(env, "ebs.csi.aws.com", "ebs-node")
    wait_recorded(env, "pd.csi.storage.gke.io", "pd-node")
    wait_for(env, lambda: csinode_annotations(env.api).get(MIGRATED) == "kubernetes.io/aws-ebs,kubernetes.io/gce-pd",
             f"{MIGRATED} for both drivers (got {csinode_annotations(env.api)})")

    pd.control.stop_registration()  # deregistered: gce-pd is no longer migrated here
    wait_until(lambda: csinode_entry(env.api, "pd.csi.storage.gke.io") is None, what="CSINode entry removed")
    wait_for(env, lambda: csinode_annotations(env.api).get(MIGRATED) == "kubernetes.io/aws-ebs",
             f"{MIGRATED} without gce-pd (got {csinode_annotations(env.api)})")


def test_migrated_plugins_annotation_absent_without_a_migrated_driver(fake_api, mock_csi_factory, start_agent,
                                                                       tmp_path):
    """Only a driver no in-tree plugin migrates to: no key at all, never ""."""
    env = static_env(fake_api, mock_csi_factory, start_agent, tmp_path, node_id="n-7")
    env.start()
    wait_recorded(env, DRIVER, "n-7")
    assert MIGRATED not in csinode_annotations(env.api)


def test_migrated_plugins_empty_annotation_written_before_is_removed(fake_api, mock_csi_factory, start_agent,
                                                                      tmp_path):
    """A CSINode that already has the key as "" (what kvolumed wrote before):
    the next write of the driver's entry removes it."""
    env = static_env(fake_api, mock_csi_factory, start_agent, tmp_path, node_id="n-8")
    node = env.node()
    fake_api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                     "metadata": {"name": NODE, "annotations": {MIGRATED: "", "keep.example.com/x": "y"},
                                  "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                       "uid": node["metadata"]["uid"]}]},
                     "spec": {"drivers": []}})
    env.start()
    wait_recorded(env, DRIVER, "n-8")
    assert csinode_annotations(env.api) == {"keep.example.com/x": "y"}


def test_node_capabilities_are_asked_at_registration_not_by_the_first_pod(volume_env):
    """Issue 31 (the first pod's cold cost): the driver's node capabilities
    are asked when it is recorded, so that the first pod after a start does
    not wait for a NodeGetCapabilities round trip before its publish."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    wait_recorded(env, DRIVER, env.driver.opts.get("node_id") or "node-1")
    # No pod yet: asked at registration (generous timeout; nothing else asks).
    env.wait_calls("NodeGetCapabilities", 1, code="OK", timeout=30.0)
    pod = env.pod("first", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(pod, "scratch"))
    env.wait_calls("NodePublishVolume", 1, code="OK")
    methods = [c["method"] for c in env.calls()]
    # The publish used what was asked at registration: not asked again.
    assert methods.count("NodeGetCapabilities") == 1, methods
