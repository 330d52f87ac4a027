"""Pods of other nodes are never set up here.  kvolumed asks for its node's
pods only (fieldSelector=spec.nodeName=<node>), but an answer may ignore the
selector: a proxy that drops it, a server bug, the in-cluster mode with an
identity that may list every pod.  Whatever comes, a pod whose spec.nodeName
is not this node (or is empty: not scheduled yet) is ignored, with one
warning."""
import os

from integration.agent_fixtures import VolumeEnv, wait_until


def inline(name):
    return {"name": name, "csi": {"driver": "mock.csi.kvolumed.io"}}


def published_for(env, pod):
    uid = pod["metadata"]["uid"]
    return [c for c in env.calls("NodePublishVolume") if f"/pods/{uid}/" in c["request"]["target_path"]]


def warnings_about_other_nodes(env):
    return [line for line in env.agent.output().splitlines()
            if "warning" in line and "not this node" in line]


def check_ignores_other_nodes(env):
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.api.ignore_field_selector("/api/v1/pods")
    elsewhere = env.pod("elsewhere", [inline("scratch")], nodeName="other-node")
    unscheduled = env.pod("unscheduled", [inline("scratch")], nodeName="")
    env.start()
    here = env.pod("here", [inline("scratch")])
    env.wait_mounted(env.target(here, "scratch"))
    wait_until(lambda: published_for(env, here), what="the publish of this node's pod logged")
    # Pods come in order on one watch, and the other two came first (in the
    # list): by now they were handled.
    for pod in (elsewhere, unscheduled):
        assert not published_for(env, pod), f"set up {pod['metadata']['name']}, a pod of another node"
        assert not os.path.exists(os.path.dirname(env.target(pod, "scratch")))
    assert len(warnings_about_other_nodes(env)) == 1, env.agent.output()[-3000:]

    # More of them later, through the watch: still ignored, without another warning.
    late = env.pod("late-elsewhere", [inline("scratch")], nodeName="other-node")
    here2 = env.pod("here-2", [inline("scratch")])
    env.wait_mounted(env.target(here2, "scratch"))
    wait_until(lambda: published_for(env, here2), what="the publish of this node's second pod logged")
    assert not published_for(env, late)
    assert len(warnings_about_other_nodes(env)) == 1

    # Deleting them is nothing to this node either.
    env.api.remove("pods", "default", "elsewhere")
    env.api.remove("pods", "default", "here")
    env.wait_gone(os.path.dirname(env.target(here, "scratch")))
    assert os.path.ismount(env.target(here2, "scratch"))
    assert not env.driver.violations()


def test_pods_of_other_nodes_are_ignored(volume_env):
    """As the node itself: the Node authorizer lets a node list every pod."""
    check_ignores_other_nodes(volume_env)


def test_pods_of_other_nodes_are_ignored_with_a_wide_identity(fake_api, mock_csi_factory, start_agent, tmp_path):
    driver = mock_csi_factory(name="mock.csi.kvolumed.io", tmpfs=True)
    check_ignores_other_nodes(VolumeEnv(fake_api, driver, start_agent, tmp_path, broad=True))


def test_fake_api_can_ignore_the_field_selector(fake_api):
    """The fault itself: a list with the node's selector gets every pod."""
    for name, node in (("a", "n1"), ("b", "n2")):
        fake_api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                         "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})
    from doubles.fakeapi.testclient import Client
    c = Client(fake_api)
    path = "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"
    assert [p["metadata"]["name"] for p in c.request("GET", path).json["items"]] == ["a"]
    fake_api.ignore_field_selector("/api/v1/pods")
    assert sorted(p["metadata"]["name"] for p in c.request("GET", path).json["items"]) == ["a", "b"]
    fake_api.clear_faults()
    assert [p["metadata"]["name"] for p in c.request("GET", path).json["items"]] == ["a"]
