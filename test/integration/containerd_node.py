"""A node of the real-containerd tests (test_runtime_containerd*.py): kvolumed
as volume_env runs it, its [runtime] endpoint the socket of the session's real
containerd (test/doubles/containerd), /metrics and /volumes on a port of its
own, and the CRI pod runner of the tests."""
import hashlib
import json
import os
import socket
import time
import urllib.request

import pytest

from integration.agent_fixtures import DRIVER, wait_until, write_config

# The container: appends a counter to /data/log every 50 ms, and "stopped"
# when asked to stop (SIGTERM, containerd's default stop signal), then exits.
WRITER = ("trap 'echo stopped >> /data/log; exit 0' TERM; i=0; "
          "while :; do i=$((i+1)); echo $i >> /data/log; sleep 0.05; done")
# What kvolumed says when a pod's READY sandbox alone holds its volume.
SANDBOX_HELD = "says a sandbox of the pod is still READY"
# The gate's longest pause between two questions while a pod waits
# (volume/runtime.c GATE_BACKOFF_MAX_USEC): how late it can notice a stop.
GATE_CAP = 1.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """kvolumed (as volume_env runs it) asking the real containerd, with
    /metrics and /volumes on a port of its own."""

    def __init__(self, env, ctrd, runner):
        self.env, self.ctrd, self.runner = env, ctrd, runner
        self.port = free_port()

    def start(self, modes=("Persistent", "Ephemeral"), extra="", endpoint=None):
        """endpoint: the CRI socket kvolumed asks (default: containerd's)."""
        endpoint = endpoint or self.ctrd.endpoint
        env = self.env
        env.csidriver(attachRequired=False, volumeLifecycleModes=list(modes))
        path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                            f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n'
                            f"[runtime]\nendpoint = {endpoint}\n" + extra)
        with open(path) as f:
            text = f.read().replace("\nlisten =\n", f"\nlisten = 127.0.0.1:{self.port}\n")
        with open(path, "w") as f:
            f.write(text)
        env.agent = env.start_agent(path)
        env.agent.wait_for_log(f"Asking container runtime {endpoint}")
        return self

    # ---- pods and their volumes ----------------------------------------------
    def persistent_pod(self, name):
        """A pod with a PV of the mock driver; returns (pod, target, the
        driver's backing directory of the volume)."""
        env = self.env
        env.pv("pv-" + name, "vol-" + name, claim=name)
        env.pvc(name, "pv-" + name)
        pod = env.pod(name, [{"name": "data", "persistentVolumeClaim": {"claimName": name}}])
        target = env.target(pod, "pv-" + name)
        env.wait_mounted(target)
        sha = hashlib.sha256(("vol-" + name).encode()).hexdigest()[:32]
        return pod, target, os.path.join(env.driver.state_dir, "volumes", sha + ".data")

    def inline_pod(self, name):
        pod = self.env.pod(name, [{"name": "scratch", "csi": {"driver": DRIVER}}])
        return pod, self.env.target(pod, "scratch")

    def run_writer(self, pod, target):
        """The runner's part: a sandbox for the pod, the writer container
        with the volume's host path at /data; returns its container id once
        it has written into the volume."""
        sandbox = self.runner.run_pod(pod["metadata"]["uid"], pod["metadata"]["name"])
        cid = self.runner.run_container(sandbox, "writer", WRITER, [(target, "/data", False)])
        wait_until(lambda: len(written(target)) >= 2, timeout=15, what="the container writing into the volume")
        return cid

    # ---- what kvolumed did ---------------------------------------------------
    def unpublishes(self, target):
        return [c for c in self.env.calls("NodeUnpublishVolume") if c["request"]["target_path"] == target]

    def wait_held(self, pod, timeout=15):
        """kvolumed said it keeps the pod's volume for a running container."""
        self.env.agent.wait_for_log(f"of pod default/{pod['metadata']['name']}: container runtime", timeout=timeout)

    def sandbox(self, pod):
        """The runner's sandbox of the pod."""
        (sb,) = [p for p in self.runner.pods if p.uid == pod["metadata"]["uid"]]
        return sb

    def wait_held_for_sandbox(self, pod, target, since_output, timeout=15):
        """kvolumed said (after `since_output` characters of its output)
        that the pod's READY sandbox holds its volume, and the volume is
        there; an unpublish ends the wait, and fails."""
        name = pod["metadata"]["name"]
        line = f"of pod default/{name}: container runtime"

        def said():
            return any(line in ln and SANDBOX_HELD in ln
                       for ln in self.env.agent.output()[since_output:].splitlines())
        wait_until(lambda: said() or self.unpublishes(target), timeout=timeout,
                   what=f"kvolumed holding {name} for its READY sandbox")
        assert not self.unpublishes(target), "unpublished while the pod's sandbox was READY"
        assert os.path.ismount(target)

    def metric(self, name):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return None

    def teardown_waits(self, uid):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/volumes", timeout=5) as r:
            vols = json.load(r)["volumes"]
        return [p.get("teardown_waits") for v in vols for p in v.get("publishes", []) if p["pod_uid"] == uid]

    def stop_and_time(self, pod, cid, target):
        """What kubelet's killPod does, through CRI: StopContainer, then
        StopPodSandbox.  Between the two the volume stays (the sandbox is
        READY: a runner may start a container in it again); returns the
        seconds from StopPodSandbox's answer (the sandbox is NOTREADY) to
        the driver's NodeUnpublishVolume."""
        mark = len(self.env.agent.output())
        self.runner.stop_container(cid)
        assert self.runner.container_state(cid) == "CONTAINER_EXITED"
        self.wait_held_for_sandbox(pod, target, mark)
        self.runner.stop_pod(self.sandbox(pod))
        stopped = time.time()
        call = wait_until(lambda: self.unpublishes(target), timeout=15, interval=0.01,
                          what="NodeUnpublishVolume after the sandbox stopped")[0]
        return call["time"] - stopped


def written(target):
    try:
        with open(os.path.join(target, "log")) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


@pytest.fixture
def node(volume_env, containerd, pod_runner):
    return Node(volume_env, containerd, pod_runner)
