#!/usr/bin/python3
"""Benchmark of a pod's non-CSI volumes (issue 32), run by
test/bench/podvolumes.sh as root inside a private mount namespace: the real
kvolumed against the fake API server (in this process) and the mock CSI
driver, root-dir on a disk file system (--workdir, /var/tmp: a tmpfs
root-dir would hide the cost of the durable writes the design asks for).

(a) an ordinary pod: the kube-api-access-xxxxx projected volume exactly as
    the ServiceAccount admission plugin adds it (token, kube-root-ca.crt,
    namespace), a configMap volume, a disk emptyDir and one inline CSI
    volume; (b) a CSI-only pod (the same inline CSI volume alone).  Each
    measured from its creation in the API to the local API's
    `wait=mounted` answered 200; pods created one at a time, the two kinds
    interleaved, --repeat of each; medians with min-max and the ratio.
(c) a configMap change (an API update) to the new content readable at the
    host path the runner binds into the container (the file polled
    tightly), --repeat times; median and max: for a configMap one pod uses,
    and (c') for the one every ordinary pod uses, read in the last of them
    (kvolumed rewrites each pod's volume in turn)."""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import DRIVER, NODE, close_bench_node, kvolumed_path, machine, open_bench_node, stop_process, wait  # noqa: E402

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=180):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def local_get(sock, url):
    conn = UnixConnection(sock)
    try:
        conn.request("GET", url)
        r = conn.getresponse()
        return r.status, json.loads(r.read().decode())
    finally:
        conn.close()


def kube_api_access():
    """The volume the ServiceAccount admission plugin adds to every pod
    (as test_runtime_containerd_pod_volumes.py's)."""
    return {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}


def make_pod(name, volumes):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "serviceAccountName": "default", "volumes": volumes,
                     "containers": [{"name": "c", "image": "x", "volumeMounts": [
                         {"name": v["name"], "mountPath": "/v/" + v["name"]} for v in volumes]}]},
            "status": {"phase": "Running"}}


def ordinary_volumes():
    return [kube_api_access(),
            {"name": "cfg", "configMap": {"name": "app-config"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "data", "csi": {"driver": DRIVER}}]


def csi_volumes():
    return [{"name": "data", "csi": {"driver": DRIVER}}]


def time_pod(api, sock, name, volumes):
    """Seconds from the pod's creation in the API to wait=mounted's 200;
    returns (seconds, the answer)."""
    t0 = time.monotonic()
    uid = api.create(make_pod(name, volumes))["metadata"]["uid"]
    status, body = local_get(sock, f"/v1/pods/{uid}/volumes?wait=mounted&timeout=2m")
    t1 = time.monotonic()
    if status != 200 or not body.get("allMounted"):
        raise SystemExit(f"bench: pod {name}: wait=mounted answered {status}: {body}")
    return t1 - t0, body


def config_change(api, agent, sock, pod_name, volumes, cm_name, repeat):
    """Seconds from each of `repeat` updates of configMap cm_name in the API
    to its new content readable at the host path the runner binds for the
    volume "cfg" of a new pod (the file polled tightly)."""
    _, body = time_pod(api, sock, pod_name, volumes)
    (c,) = body["containers"]
    (host,) = [m["host_path"] for m in c["mounts"] if m["container_path"] == "/v/cfg"]
    path = os.path.join(host, "app.conf")
    log(f"(c): {repeat} updates of {cm_name}, polling {path}")
    changes = []
    for i in range(1, repeat + 1):
        want = f"{pod_name} generation {i}\n"
        cm = api.get("configmaps", "default", cm_name)
        cm["data"] = {"app.conf": want}
        cm["metadata"].pop("resourceVersion", None)
        t0 = time.monotonic()
        api.update(cm)

        def readable():
            try:
                with open(path) as f:
                    return f.read() == want
            except OSError:  # the ..data link between its swap steps
                return False
        wait(readable, 180, f"{pod_name}'s generation {i} at {path}", interval=0.0005, alive=agent)
        changes.append(time.monotonic() - t0)
    return changes


def ms(x):
    return f"{x * 1000:8.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--workdir", default="/var/tmp")
    args = ap.parse_args()

    class Node:
        pass
    node = Node()
    open_bench_node(node, args.workdir, "kvpodvol.", "kvp.")
    agent = None
    try:
        api = node.api
        sock = os.path.join(node.work, "kvolumed.sock")
        api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": "default"}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "kube-root-ca.crt", "namespace": "default"}, "data": {"ca.crt": CA}})
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": "default"},
                    "data": {"app.conf": "generation 0\n"}})
        agent = subprocess.Popen([kvolumed_path(), "--config", node.config],
                                 env=dict(os.environ, KVOLUMED_LOG_TARGET="stderr"), stderr=subprocess.DEVNULL)
        wait(lambda: os.path.exists(sock), 60, "the local API socket", alive=agent)
        # One of each first: the informers' first lists, the driver's first call.
        time_pod(api, sock, "warm-ordinary", ordinary_volumes())
        time_pod(api, sock, "warm-csi", csi_volumes())

        ordinary, csi_only = [], []
        log(f"(a)/(b): {args.repeat} pods of each kind, interleaved, one at a time")
        for i in range(args.repeat):
            ordinary.append(time_pod(api, sock, f"ord-{i:03d}", ordinary_volumes())[0])
            csi_only.append(time_pod(api, sock, f"csi-{i:03d}", csi_volumes())[0])

        # (c): a configMap changed in the API, its new content awaited at the
        # host path the runner binds, in a pod of its own using it alone and
        # in the last of the ordinary pods, which all use app-config.
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "own-config", "namespace": "default"},
                    "data": {"app.conf": "generation 0\n"}})
        vols = ordinary_volumes()
        vols[1] = {"name": "cfg", "configMap": {"name": "own-config"}}
        own = config_change(api, agent, sock, "cfg-own", vols, "own-config", args.repeat)
        shared = config_change(api, agent, sock, "cfg-shared", ordinary_volumes(), "app-config", args.repeat)
        users = args.repeat + 2  # the ordinary pods above, the warm-up one and this one

        m = machine(node.root)
        mo, mc = statistics.median(ordinary), statistics.median(csi_only)
        print(f"machine: {m}")
        print(f"root-dir {node.root} on {m['root_dir_fs']} ({m['root_dir_source']}), {args.repeat} repeats each")
        print()
        print("| case                                         | median ms |   min ms |   max ms |")
        print("|----------------------------------------------|-----------|----------|----------|")
        print(f"| (a) ordinary pod: creation -> wait=mounted   | {ms(mo)}  | {ms(min(ordinary))} | {ms(max(ordinary))} |")
        print(f"| (b) CSI-only pod: creation -> wait=mounted   | {ms(mc)}  | {ms(min(csi_only))} | {ms(max(csi_only))} |")
        for what, changes in (("(c) configMap of 1 pod: update -> host file", own),
                              (f"(c') one of {users} pods': update -> host file", shared)):
            print(f"| {what:<44} | {ms(statistics.median(changes))}  | {ms(min(changes))} | {ms(max(changes))} |")
        print()
        print(f"ratio (a)/(b) of the medians: {mo / mc:.2f}")
    finally:
        stop_process(agent)
        close_bench_node(node)


if __name__ == "__main__":
    main()
