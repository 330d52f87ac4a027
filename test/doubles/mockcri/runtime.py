"""A mock CRI container runtime: the RuntimeService of runtime.v1 on a unix
socket, on grpcio, in the test's process.

Pods and containers are set by the test (`add_pod`, `stop_container`,
`remove_pod`); the runtime answers ListPodSandbox and ListContainers with
the filters a real runtime applies, and Version.  Every other method answers
UNIMPLEMENTED, as the generated servicer base does and as containerd 1.6
answers GetContainerEvents.  `stop()` makes it unreachable (the socket goes:
connection refused), `start()` brings it back on the same socket.  Every call
is logged with its time (`requests()`)."""
import os
import threading
import time
import uuid
from concurrent import futures

import grpc

from .stubs import load

STATES = ("CREATED", "RUNNING", "EXITED", "UNKNOWN")


class MockRuntime:
    def __init__(self, socket_path):
        self.socket_path = socket_path
        self.endpoint = "unix://" + socket_path
        self.pb, self.pb_grpc = load()
        self._lock = threading.Lock()
        self._sandboxes = {}  # id -> dict(uid, name, namespace, state, labels)
        self._containers = {}  # id -> dict(sandbox, name, state, labels)
        self._log = []
        self._server = None

    # ---- state the test sets ------------------------------------------------
    def add_pod(self, uid, name="pod", namespace="default", containers=("app",), state="RUNNING",
                kubelet_labels=True):
        """A ready sandbox for the pod, with one container per name.  With
        kubelet_labels=False the io.kubernetes.* labels are left out, as a
        runner other than kubelet may."""
        sid = uuid.uuid4().hex
        labels = {"io.kubernetes.pod.uid": uid, "io.kubernetes.pod.name": name,
                  "io.kubernetes.pod.namespace": namespace} if kubelet_labels else {}
        with self._lock:
            self._sandboxes[sid] = dict(uid=uid, name=name, namespace=namespace, state="READY", labels=labels,
                                        created=time.time_ns())
            for c in containers:
                self._containers[uuid.uuid4().hex] = dict(sandbox=sid, name=c, state=state, labels=dict(labels),
                                                          created=time.time_ns())
        return sid

    def stop_pod(self, uid):
        """Every container of the pod exits and its sandbox stops."""
        with self._lock:
            for sid, s in self._sandboxes.items():
                if s["uid"] == uid:
                    s["state"] = "NOTREADY"
                    for c in self._containers.values():
                        if c["sandbox"] == sid:
                            c["state"] = "EXITED"

    def remove_pod(self, uid):
        with self._lock:
            gone = {sid for sid, s in self._sandboxes.items() if s["uid"] == uid}
            self._sandboxes = {k: v for k, v in self._sandboxes.items() if k not in gone}
            self._containers = {k: v for k, v in self._containers.items() if v["sandbox"] not in gone}

    # ---- the request log --------------------------------------------------------
    def requests(self, since=0.0):
        """[(monotonic time, method)] of the calls received after `since`."""
        with self._lock:
            return [r for r in self._log if r[0] >= since]

    def _record(self, method):
        with self._lock:
            self._log.append((time.monotonic(), method))

    # ---- the service ------------------------------------------------------------
    def _servicer(self):
        pb, rt = self.pb, self

        class Servicer(self.pb_grpc.RuntimeServiceServicer):
            def Version(self, request, context):
                rt._record("Version")
                return pb.VersionResponse(version="0.1.0", runtime_name="mockcri", runtime_version="0.1.0",
                                          runtime_api_version="v1")

            def ListPodSandbox(self, request, context):
                rt._record("ListPodSandbox")
                f = request.filter if request.HasField("filter") else None
                items = []
                with rt._lock:
                    for sid, s in rt._sandboxes.items():
                        if f and f.id and f.id != sid:
                            continue
                        if f and f.HasField("state") and pb.PodSandboxState.Name(f.state.state) != "SANDBOX_" + s["state"]:
                            continue
                        if f and any(s["labels"].get(k) != v for k, v in f.label_selector.items()):
                            continue
                        items.append(pb.PodSandbox(
                            id=sid, metadata=pb.PodSandboxMetadata(name=s["name"], uid=s["uid"],
                                                                   namespace=s["namespace"]),
                            state=pb.PodSandboxState.Value("SANDBOX_" + s["state"]), created_at=s["created"],
                            labels=s["labels"]))
                return pb.ListPodSandboxResponse(items=items)

            def ListContainers(self, request, context):
                rt._record("ListContainers")
                f = request.filter if request.HasField("filter") else None
                out = []
                with rt._lock:
                    for cid, c in rt._containers.items():
                        if f and f.id and f.id != cid:
                            continue
                        if f and f.pod_sandbox_id and f.pod_sandbox_id != c["sandbox"]:
                            continue
                        if f and f.HasField("state") and pb.ContainerState.Name(f.state.state) != "CONTAINER_" + c["state"]:
                            continue
                        if f and any(c["labels"].get(k) != v for k, v in f.label_selector.items()):
                            continue
                        out.append(pb.Container(
                            id=cid, pod_sandbox_id=c["sandbox"], metadata=pb.ContainerMetadata(name=c["name"]),
                            state=pb.ContainerState.Value("CONTAINER_" + c["state"]), created_at=c["created"],
                            labels=c["labels"]))
                return pb.ListContainersResponse(containers=out)

        return Servicer()

    # ---- reachability -----------------------------------------------------------
    def start(self):
        if self._server:
            return
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.pb_grpc.add_RuntimeServiceServicer_to_server(self._servicer(), server)
        server.add_insecure_port("unix:" + self.socket_path)
        server.start()
        self._server = server

    def stop(self):
        """Unreachable: the server goes and its socket with it."""
        if self._server:
            self._server.stop(grace=None).wait()
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    @property
    def running(self):
        return self._server is not None
