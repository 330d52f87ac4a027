"""kvolumed under valgrind's memcheck through whole flows (inline, persistent,
raw block, a failing call, a SIGHUP reload, a clean stop): no invalid access,
no definite leak.  The ASan+UBSan runs of the suite stay; valgrind also sees
the non-instrumented build and what the libraries do."""
import os
import re
import signal

import pytest

from integration.agent_fixtures import DRIVER, wait_until

# kvolumed under valgrind is 20-50 times slower: beside parallel workers on
# 2 cores its flows outran the tests' timeouts (test/check runs it alone).
pytestmark = pytest.mark.serial

VALGRIND = ["valgrind", "--tool=memcheck", "--leak-check=full", "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite", "--error-exitcode=99", "--trace-children=no", "--num-callers=30"]


# Named so that test/check's second pass, over the ASan build (-k "volume or
# agent"), leaves it out: valgrind cannot run an ASan binary.
def test_full_flows_under_memcheck(volume_env):
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    env.pv("pv-v", "vol-v", claim="cv")
    env.pvc("cv", "pv-v")
    env.pv("pv-b", "vol-b", claim="cb", volume_mode="Block")
    env.pvc("cb", "pv-b")
    env.driver.control.fail_next("NodePublishVolume", "UNAVAILABLE", "busy", count=1)
    agent = env.start(wrapper=VALGRIND)
    pod = env.pod("web", [{"name": "data", "persistentVolumeClaim": {"claimName": "cv"}},
                          {"name": "disk", "persistentVolumeClaim": {"claimName": "cb"}},
                          {"name": "scratch", "csi": {"driver": DRIVER}}], devices=["disk"])
    env.wait_mounted(env.target(pod, "pv-v"), timeout=60)
    env.wait_mounted(env.target(pod, "scratch"), timeout=60)
    device = f"{env.root}/pods/{pod['metadata']['uid']}/volumeDevices/kubernetes.io~csi/pv-b"
    wait_until(lambda: os.path.exists(device), timeout=60, what="the block device mapped")
    agent.signal(signal.SIGHUP)
    agent.wait_for_log("Configuration reloaded", timeout=30)
    env.api.remove("pods", "default", "web")
    env.wait_calls("NodeUnstageVolume", 2, timeout=60)
    wait_until(lambda: not os.path.exists(f"{env.root}/pods/{pod['metadata']['uid']}"), timeout=60,
               what="teardown")
    agent.signal(signal.SIGTERM)
    code = agent.wait(timeout=60)
    log = agent.output()
    summary = re.search(r"ERROR SUMMARY: (\d+) errors", log)
    assert summary, log[-3000:]
    assert summary.group(1) == "0" and code == 0, log[-6000:]
    assert "definitely lost: 0 bytes" in log or "All heap blocks were freed" in log or \
        "definitely lost" not in log, log[-3000:]


# Not "volume" nor "agent" in the name: see above.
def test_local_api_under_memcheck(volume_env, tmp_path):
    """The local API's waits (answered by a pass, at once with 409, at the
    timeout, and unanswered at the stop), its filters and its errors."""
    import tempfile
    import threading
    import uuid
    from integration.test_agent_localapi import api_get, inline, wait_in_thread
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    sock = os.path.join(tempfile.mkdtemp(prefix="kvm", dir="/tmp"), "api.sock")
    agent = env.start(extra=f"[api]\nsocket = {sock}\n", wrapper=VALGRIND)
    agent.wait_for_log("Serving the local volumes API", timeout=60)
    uid = str(uuid.uuid4())
    waiter = wait_in_thread(sock, uid, "wait=mounted&timeout=60s", timeout=90)
    agent.wait_for_log("waiting until mounted", timeout=30)
    env.api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                    "spec": {"nodeName": "test-node", "volumes": [inline("v")],
                             "containers": [{"name": "c", "image": "busybox",
                                             "volumeMounts": [{"name": "v", "mountPath": "/v"}]}]},
                    "status": {"phase": "Running"}}, uid=uid)
    waiter.join(90)
    assert waiter.result[0] == 200, waiter.result
    # No CSIDriver: Persistent only, the inline volume is refused.
    other = env.pod("other", [inline("v", driver="nope.csi.kvolumed.io")])
    status, body, _ = api_get(sock, f"/v1/pods/{other['metadata']['uid']}/volumes?wait=mounted&timeout=60s",
                              timeout=90)
    assert status == 409, body
    assert api_get(sock, f"/v1/pods/{uid}/volumes?wait=unmounted&timeout=200ms", timeout=60)[0] == 504
    assert api_get(sock, "/volumes?pod=default/web&state=published", timeout=60)[0] == 200
    assert api_get(sock, "/v1/pods/nope/volumes", timeout=60)[0] == 400
    # A client that hangs up while waiting: its wait ends at once.
    from integration.test_agent_localapi import raw_wait
    gone_uid = str(uuid.uuid4())
    gone = raw_wait(sock, gone_uid)
    agent.wait_for_log(f"pod {gone_uid}: waiting until mounted", timeout=30)
    gone.close()
    agent.wait_for_log("1 gone so far", timeout=60)
    left_uid = str(uuid.uuid4())
    left = wait_in_thread(sock, left_uid, "wait=mounted&timeout=10m", timeout=90)
    agent.wait_for_log(f"pod {left_uid}: waiting until mounted", timeout=30)
    agent.signal(signal.SIGTERM)
    code = agent.wait(timeout=60)
    left.join(30)
    assert left.result and left.result[0] == 503, (left.result, agent.output()[-3000:])
    log = agent.output()
    summary = re.search(r"ERROR SUMMARY: (\d+) errors", log)
    assert summary, log[-3000:]
    assert summary.group(1) == "0" and code == 0, log[-6000:]


# Not "volume" nor "agent" in the name: see above.
def test_root_dir_lost_and_regained_under_memcheck(volume_env):
    """root-dir mounted over while calls are in flight (issue 29): the
    operation held at its next step, resumed once root-dir is kvolumed's
    again; held again, and ended by a stop."""
    from integration.test_agent_rootdir import LOST, REGAINED, inline, mount_over, unmount
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.driver.control.hang("NodePublishVolume", count=1, when="after")
    agent = env.start(wrapper=VALGRIND)
    pod = env.pod("web", [inline("scratch")])
    env.driver.control.wait_hung("NodePublishVolume", timeout=60)
    mount_over(env, env.root)
    try:
        agent.wait_for_log(LOST, timeout=60)
        env.driver.control.release("NodePublishVolume")
        agent.wait_for_log("Holding the publish of", timeout=60)
    finally:
        unmount(env, env.root)
    agent.wait_for_log(REGAINED, timeout=60)
    agent.wait_for_log("Volume scratch published for pod default/web", timeout=60)
    env.driver.control.hang("NodeUnpublishVolume", count=1, when="after")
    env.api.remove("pods", "default", "web")
    env.driver.control.wait_hung("NodeUnpublishVolume", timeout=60)
    mount_over(env, env.root)
    try:
        wait_until(lambda: agent.output().count(LOST) == 2, timeout=60, what="root-dir lost again")
        env.driver.control.release("NodeUnpublishVolume")
        agent.wait_for_log("Holding the unpublish of", timeout=60)
        agent.signal(signal.SIGTERM)
        code = agent.wait(timeout=60)
    finally:
        unmount(env, env.root)
    log = agent.output()
    assert "Leaving the unpublish of" in log, log[-3000:]
    summary = re.search(r"ERROR SUMMARY: (\d+) errors", log)
    assert summary, log[-3000:]
    assert summary.group(1) == "0" and code == 0, log[-6000:]


# Not "volume" nor "agent" in the name: see above.
def test_configmap_and_secret_flows_under_memcheck(volume_env):
    """kvolumed writing a configMap's and a secret's files: set-up, an update,
    the secret deleted (its files kept) and created again, teardown."""
    import base64
    env = volume_env
    env.api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"},
                    "data": {"a": "1"}})
    enc = lambda v: base64.b64encode(v.encode()).decode()  # noqa: E731
    env.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "default"},
                    "data": {"p": enc("x")}})
    agent = env.start(wrapper=VALGRIND)
    pod = env.pod("web", [{"name": "cfg", "configMap": {"name": "cfg"}},
                          {"name": "creds", "secret": {"secretName": "creds"}},
                          {"name": "gone", "configMap": {"name": "absent", "optional": True}}])
    base = f"{env.root}/pods/{pod['metadata']['uid']}/volumes"

    def read(path):
        try:
            return open(path).read()
        except OSError:
            return None
    wait_until(lambda: read(f"{base}/kubernetes.io~configmap/cfg/a") == "1" and
               read(f"{base}/kubernetes.io~secret/creds/p") == "x", timeout=60, what="the files")
    cm = env.api.get("configmaps", "default", "cfg")
    cm["data"] = {"a": "2"}
    env.api.update(cm)
    wait_until(lambda: read(f"{base}/kubernetes.io~configmap/cfg/a") == "2", timeout=60, what="the update")
    env.api.remove("secrets", "default", "creds")
    agent.wait_for_log("keeps its last content", timeout=60)
    env.api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "default"},
                    "data": {"p": enc("y")}})
    wait_until(lambda: read(f"{base}/kubernetes.io~secret/creds/p") == "y", timeout=60, what="the new secret")
    env.api.remove("pods", "default", "web")
    wait_until(lambda: not os.path.exists(f"{env.root}/pods/{pod['metadata']['uid']}"), timeout=60,
               what="teardown")
    agent.signal(signal.SIGTERM)
    code = agent.wait(timeout=60)
    log = agent.output()
    summary = re.search(r"ERROR SUMMARY: (\d+) errors", log)
    assert summary, log[-3000:]
    assert summary.group(1) == "0" and code == 0, log[-6000:]
