#!/usr/bin/python3
"""The demo, run by test/demo inside a private mount namespace: kvolumed on a
pretend node "demo-node", against the fake API server and the mock CSI
driver (which registers through kubelet's plugin-registration directory).
A pod with an inline volume and a pod with a PVC appear; their volumes are
set up; the pods are deleted; their volumes go."""
import http.client
import json
import os
import socket
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "test"))

from doubles.fakeapi import FakeApiServer  # noqa: E402

DRIVER = "mock.csi.kvolumed.io"
NODE = "demo-node"
BUILD = os.environ.get("KVOLUMED_BUILD_DIR", os.path.join(REPO, "build"))


def say(text):
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def wait(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.1)


class UnixHTTPConnection(http.client.HTTPConnection):
    """The local volumes API, as `curl --unix-socket` speaks to it."""

    def __init__(self, path):
        super().__init__("localhost", timeout=60)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def mounts_under(root):
    out = subprocess.run(["findmnt", "-rn", "-o", "TARGET,SOURCE,FSTYPE,OPTIONS"], capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if line.startswith(root + "/")]


def show_mounts(root):
    lines = mounts_under(root)
    for line in lines:
        target, source, fstype, options = line.split(" ", 3)
        print(f"   {target.replace(root, '<root>')}  {fstype}  ({source}, {options.split(',')[0]})")
    if not lines:
        print("   (nothing mounted under root-dir)")


def stream(proc, prefix):
    for line in proc.stderr:
        print(f"{prefix}{line.rstrip()}", flush=True)


def main():
    work = tempfile.mkdtemp(prefix="kvdemo.", dir="/tmp")
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "plugins_registry"))
    procs = []
    api = FakeApiServer(os.path.join(work, "api"), control_port=None).start()
    try:
        say(f"fake API server at {api.server_url}; node {NODE} and the CSIDriver object")
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "status": {}})
        api.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": DRIVER},
                    "spec": {"attachRequired": False, "podInfoOnMount": True,
                             "volumeLifecycleModes": ["Persistent", "Ephemeral"]}})

        say("mock CSI driver (loop devices with ext4), registering in <root>/plugins_registry")
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "test"))
        driver = subprocess.Popen(
            ["/usr/bin/python3", "-m", "doubles.mockcsi", "--endpoint", f"unix://{work}/csi.sock",
             "--name", DRIVER, "--node-id", "demo-node-id", "--state-dir", os.path.join(work, "driver"),
             "--registration-dir", os.path.join(root, "plugins_registry")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(driver)
        print("   " + driver.stdout.readline().strip())

        config = os.path.join(work, "kvolumed.conf")
        with open(config, "w") as f:
            f.write(f"[agent]\nnode-name = {NODE}\nroot-dir = {root}\n"
                    f"[kubernetes]\nkubeconfig = {api.kubeconfig_path}\n"
                    f"[csi]\nregistration-dir = {root}/plugins_registry\n"
                    f"[api]\nsocket = {work}/kvolumed.sock\n"
                    "[metrics]\nlisten =\n[log]\nlevel = info\n")
        say("kvolumed (its log lines are prefixed with 'kvolumed |')")
        agent = subprocess.Popen([os.path.join(BUILD, "agent", "kvolumed"), "--config", config],
                                 env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"),
                                 stderr=subprocess.PIPE, text=True)
        procs.append(agent)
        threading.Thread(target=stream, args=(agent, "   kvolumed | "), daemon=True).start()

        def csinode_ready():
            try:
                node = api.get("csinodes", None, NODE)
            except Exception:
                return False
            return node and any(d.get("name") == DRIVER for d in node["spec"].get("drivers", []))
        wait(csinode_ready, "the CSINode entry of the driver")
        time.sleep(0.3)
        say("the driver registered: CSINode and the node annotation say so")
        print(f"   CSINode {NODE}: {api.get('csinodes', None, NODE)['spec']['drivers']}")
        ann = api.get("nodes", None, NODE)["metadata"].get("annotations", {})
        print(f"   Node annotations: {ann}")

        say("a pod with an inline volume, and a pod with a PVC bound to a PV")
        api.create({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-data"},
                    "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                             "csi": {"driver": DRIVER, "volumeHandle": "vol-data", "fsType": "ext4"},
                             "claimRef": {"namespace": "default", "name": "data"}}})
        api.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "data", "namespace": "default"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-data",
                             "resources": {"requests": {"storage": "64Mi"}}}, "status": {"phase": "Bound"}})
        api.bind_claim("default", "data", "pv-data")  # the PV's claimRef gets the claim's uid
        pods = []
        for name, volume in (("scratch-pod", {"name": "scratch", "csi": {"driver": DRIVER}}),
                             ("db", {"name": "data", "persistentVolumeClaim": {"claimName": "data"}})):
            pods.append(api.create({"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": name, "namespace": "default"},
                                    "spec": {"nodeName": NODE, "volumes": [volume],
                                             "containers": [{"name": "c", "image": "busybox",
                                                             "volumeMounts": [{"name": volume["name"],
                                                                               "mountPath": "/data"}]}]},
                                    "status": {"phase": "Running"}}))
        say("an ordinary pod: the kube-api-access volume admission adds, a configMap, a Memory emptyDir")
        api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": "default"}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "kube-root-ca.crt", "namespace": "default"},
                    "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n(the cluster's CA)\n-----END CERTIFICATE-----\n"}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app", "namespace": "default"},
                    "data": {"greeting": "hello"}})
        kube_api_access = {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}
        web = api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                          "spec": {"nodeName": NODE, "serviceAccountName": "default",
                                   "volumes": [kube_api_access, {"name": "cfg", "configMap": {"name": "app"}},
                                               {"name": "cache", "emptyDir": {"medium": "Memory",
                                                                              "sizeLimit": "16Mi"}}],
                                   "containers": [{"name": "app", "image": "busybox", "volumeMounts": [
                                       {"name": "kube-api-access-x7k2p", "readOnly": True,
                                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                                       {"name": "cfg", "mountPath": "/etc/app"},
                                       {"name": "cache", "mountPath": "/cache"}]}]},
                          "status": {"phase": "Running"}})
        pods.append(web)
        wait(lambda: len(mounts_under(root)) >= 5, "the volumes to be mounted")
        time.sleep(0.5)
        say("mounted under root-dir (kubelet's paths)")
        show_mounts(root)
        say("kvolumed status: the node's volumes, read from the local volumes API")
        status = subprocess.run([os.path.join(BUILD, "agent", "kvolumed"), "status", "--socket",
                                 os.path.join(work, "kvolumed.sock")], capture_output=True, text=True, timeout=30)
        for line in status.stdout.splitlines():
            print("   " + line)
        if status.returncode != 0:
            raise SystemExit(f"kvolumed status failed: {status.stderr.strip()}")
        say("what the runner passes to CRI for the web pod's container (GET /v1/pods/<uid>/volumes)")
        conn = UnixHTTPConnection(os.path.join(work, "kvolumed.sock"))
        conn.request("GET", f"/v1/pods/{web['metadata']['uid']}/volumes?wait=mounted&timeout=30s")
        body = json.loads(conn.getresponse().read())
        conn.close()
        print(f"   allMounted: {body['allMounted']}")
        for m in body["containers"][0]["mounts"]:
            print(f"   {m['container_path']:48} <- {m['host_path'].replace(root, '<root>')}"
                  f"{'  (read-only)' if m['readonly'] else ''}")
        sa = f"{root}/pods/{web['metadata']['uid']}/volumes/kubernetes.io~projected/kube-api-access-x7k2p"
        print(f"   {sorted(os.listdir(sa))} in <root>/pods/<uid>/volumes/kubernetes.io~projected/kube-api-access-x7k2p")
        target = f"{root}/pods/{pods[1]['metadata']['uid']}/volumes/kubernetes.io~csi/pv-data/mount"
        with open(os.path.join(target, "hello.txt"), "w") as f:
            f.write("hello from the db pod\n")
        print(f"   wrote {target.replace(root, '<root>')}/hello.txt")

        say("deleting the pods")
        for p in pods:
            api.remove("pods", "default", p["metadata"]["name"])
        wait(lambda: not mounts_under(root), "the volumes to go")
        time.sleep(0.3)
        say("after teardown")
        show_mounts(root)
        left = [d for d in os.listdir(os.path.join(root, "pods"))] if os.path.isdir(os.path.join(root, "pods")) else []
        print(f"   pod directories left: {left or 'none'}")

        say("stopping kvolumed (SIGTERM: volumes would stay; there are none left)")
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=15)
        time.sleep(0.2)
        print(f"   kvolumed exited with status {code}")
        return code
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
        api.stop()
        # kvolumed made root-dir a shared mount by binding it onto itself
        # (as kubelet does at start; a node keeps it until reboot): the
        # demo's namespace goes, and the bind with it, but not before rm.
        subprocess.run(["umount", "-R", root], capture_output=True)
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
