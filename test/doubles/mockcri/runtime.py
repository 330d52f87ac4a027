"""A mock CRI container runtime: the RuntimeService of runtime.v1 on a unix
socket, on grpcio, in the test's process.

Pods and containers are set by the test, in the states a runner leaves them
in on containerd:
  `add_pod`          RunPodSandbox (the sandbox READY) and its containers in
                     one state; with containers=() a pod whose image is
                     still being pulled (a READY sandbox, no container yet);
                     with state="EXITED" a crash-looping pod between two
                     attempts (CrashLoopBackOff: its containers EXITED, its
                     sandbox READY);
  `exit_containers`  every container of the pod exits, its sandbox stays
                     READY (a crash, or a runner that stopped the containers
                     but not yet the sandbox);
  `restart_container` the next attempt: a new RUNNING container in the
                     pod's READY sandbox (refused, as by containerd, in a
                     sandbox that is not READY);
  `stop_pod`         StopPodSandbox as containerd does it: every container of
                     the sandbox stops, then the sandbox is NOTREADY;
  `remove_pod`       RemovePodSandbox.
The runtime answers ListPodSandbox and ListContainers with the filters a
real runtime applies, Version, and StopPodSandbox / StopContainer as
containerd does (idempotent; NOT_FOUND for an id it does not know).  Every
other method answers UNIMPLEMENTED, as the generated servicer base does and
as containerd 1.6 answers GetContainerEvents.  `stop()` makes it unreachable (the socket goes:
connection refused), `start()` brings it back on the same socket.  Every call
is logged with its time (`requests()`).

`events` picks how GetContainerEvents behaves, as the real runtimes do:
  "unimplemented"  the default: UNIMPLEMENTED, as Debian 12's containerd 1.6;
  "stream"         containerd 1.7 and later: a stream that stays open and
                   carries one ContainerEventResponse per state change of a
                   container or sandbox (created, started, stopped, deleted;
                   a sandbox's events name the sandbox as the container, as
                   containerd does), each with the sandbox's status.  Like
                   grpc-go, the server sends no response headers before the
                   first event.  `break_streams(code)` ends the open streams
                   with an error status, as a runtime restart or a broken
                   connection does.
Every state change the test makes is timestamped (`changes()`), so that a
benchmark can measure from the runtime's change to a driver call."""
import os
import queue
import threading
import time
import uuid
from concurrent import futures

import grpc

from .stubs import load

STATES = ("CREATED", "RUNNING", "EXITED", "UNKNOWN")


class MockRuntime:
    def __init__(self, socket_path, events="unimplemented"):
        if events not in ("unimplemented", "stream"):
            raise ValueError(f"events mode {events!r}")
        self.events = events
        self.socket_path = socket_path
        self.endpoint = "unix://" + socket_path
        self.pb, self.pb_grpc = load()
        self._lock = threading.Lock()
        self._sandboxes = {}  # id -> dict(uid, name, namespace, state, labels)
        self._containers = {}  # id -> dict(sandbox, name, state, labels)
        self._log = []
        self._changes = []  # (monotonic time, what, pod uid, wall-clock time)
        self._streams = []  # one queue.Queue per open GetContainerEvents stream
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
            self._emit(sid, sid, "CONTAINER_CREATED_EVENT")
            self._emit(sid, sid, "CONTAINER_STARTED_EVENT")
            for c in containers:
                cid = uuid.uuid4().hex
                self._containers[cid] = dict(sandbox=sid, name=c, state=state, labels=dict(labels),
                                             created=time.time_ns())
                self._emit(sid, cid, "CONTAINER_CREATED_EVENT")
                if state != "CREATED":
                    self._emit(sid, cid, "CONTAINER_STARTED_EVENT")
                if state == "EXITED":
                    self._emit(sid, cid, "CONTAINER_STOPPED_EVENT")
            self._changes.append((time.monotonic(), "add", uid, time.time()))
        return sid

    def stop_pod(self, uid):
        """StopPodSandbox of every sandbox of the pod: each container of
        it exits, then the sandbox stops (NOTREADY) and says so with a
        CONTAINER_STOPPED_EVENT naming the sandbox, as containerd's
        handleSandboxExit does."""
        with self._lock:
            # Timestamped before the change is visible to a List or an event.
            self._changes.append((time.monotonic(), "stop", uid, time.time()))
            for sid, s in self._sandboxes.items():
                if s["uid"] == uid:
                    self._stop_sandbox(sid)

    def _stop_sandbox(self, sid):
        """Under the lock.  Idempotent, as StopPodSandbox must be."""
        s = self._sandboxes[sid]
        for cid, c in self._containers.items():
            if c["sandbox"] == sid:
                self._stop_container(cid)
        if s["state"] != "NOTREADY":
            s["state"] = "NOTREADY"
            self._emit(sid, sid, "CONTAINER_STOPPED_EVENT")

    def _stop_container(self, cid):
        c = self._containers[cid]
        if c["state"] != "EXITED":
            c["state"] = "EXITED"
            self._emit(c["sandbox"], cid, "CONTAINER_STOPPED_EVENT")

    def exit_containers(self, uid):
        """Every container of the pod exits; its sandbox stays READY, and
        the runner may start the next attempt in it (CrashLoopBackOff)."""
        with self._lock:
            self._changes.append((time.monotonic(), "exit", uid, time.time()))
            for cid, c in self._containers.items():
                if self._sandboxes[c["sandbox"]]["uid"] == uid:
                    self._stop_container(cid)

    def restart_container(self, uid, name="app"):
        """The next attempt of a container: created and started in the
        pod's READY sandbox.  containerd refuses CreateContainer in a
        sandbox that is not READY; so does this."""
        with self._lock:
            ready = [sid for sid, s in self._sandboxes.items() if s["uid"] == uid and s["state"] == "READY"]
            if not ready:
                raise RuntimeError(f"no READY sandbox for pod {uid}: CreateContainer is refused")
            sid, cid = ready[0], uuid.uuid4().hex
            self._containers[cid] = dict(sandbox=sid, name=name, state="RUNNING",
                                         labels=dict(self._sandboxes[sid]["labels"]), created=time.time_ns())
            self._emit(sid, cid, "CONTAINER_CREATED_EVENT")
            self._emit(sid, cid, "CONTAINER_STARTED_EVENT")
            self._changes.append((time.monotonic(), "restart", uid, time.time()))
            return cid

    def sandbox_ids(self, uid):
        with self._lock:
            return [sid for sid, s in self._sandboxes.items() if s["uid"] == uid]

    def sandbox_state(self, uid):
        """The states of the pod's sandboxes ("READY", "NOTREADY")."""
        with self._lock:
            return [s["state"] for s in self._sandboxes.values() if s["uid"] == uid]

    def remove_pod(self, uid):
        with self._lock:
            self._changes.append((time.monotonic(), "remove", uid, time.time()))
            gone = {sid for sid, s in self._sandboxes.items() if s["uid"] == uid}
            for cid, c in self._containers.items():
                if c["sandbox"] in gone:
                    self._emit(c["sandbox"], cid, "CONTAINER_DELETED_EVENT")
            for sid in gone:
                self._emit(sid, sid, "CONTAINER_DELETED_EVENT")
            self._sandboxes = {k: v for k, v in self._sandboxes.items() if k not in gone}
            self._containers = {k: v for k, v in self._containers.items() if v["sandbox"] not in gone}

    def changes(self, what=None):
        """[(monotonic time, what, pod uid, wall-clock time)] of the state
        changes the test made ("add", "exit", "restart", "stop", "remove";
        "stop" also for a StopPodSandbox call); the wall-clock time
        compares with the mock CSI driver's call log."""
        with self._lock:
            return [c for c in self._changes if what is None or c[1] == what]

    # ---- the event stream -------------------------------------------------------
    def _emit(self, sid, cid, kind):
        """Under the lock: an event to every open stream (CRI-O broadcasts;
        containerd 1.7 hands each event to one subscriber, which is the same
        with one)."""
        if self.events != "stream" or not self._streams:
            return
        pb, s = self.pb, self._sandboxes[sid]
        status = pb.PodSandboxStatus(
            id=sid, metadata=pb.PodSandboxMetadata(name=s["name"], uid=s["uid"], namespace=s["namespace"]),
            state=pb.PodSandboxState.Value("SANDBOX_" + s["state"]), created_at=s["created"], labels=s["labels"])
        statuses = [pb.ContainerStatus(id=k, metadata=pb.ContainerMetadata(name=c["name"]),
                                       state=pb.ContainerState.Value("CONTAINER_" + c["state"]),
                                       created_at=c["created"], labels=c["labels"])
                    for k, c in self._containers.items() if c["sandbox"] == sid]
        ev = pb.ContainerEventResponse(container_id=cid, container_event_type=pb.ContainerEventType.Value(kind),
                                       created_at=time.time_ns(), pod_sandbox_status=status,
                                       containers_statuses=statuses)
        for q in self._streams:
            q.put(ev)

    def open_streams(self):
        with self._lock:
            return len(self._streams)

    def break_streams(self, code=grpc.StatusCode.UNAVAILABLE):
        """Ends every open GetContainerEvents stream with `code`."""
        with self._lock:
            for q in self._streams:
                q.put(code)

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

            def StopPodSandbox(self, request, context):
                rt._record("StopPodSandbox")
                with rt._lock:
                    s = rt._sandboxes.get(request.pod_sandbox_id)
                    if s is None:
                        context.abort(grpc.StatusCode.NOT_FOUND,
                                      f"an error occurred when try to find sandbox {request.pod_sandbox_id!r}: not found")
                    rt._changes.append((time.monotonic(), "stop", s["uid"], time.time()))
                    rt._stop_sandbox(request.pod_sandbox_id)
                return pb.StopPodSandboxResponse()

            def StopContainer(self, request, context):
                rt._record("StopContainer")
                with rt._lock:
                    if request.container_id not in rt._containers:
                        context.abort(grpc.StatusCode.NOT_FOUND,
                                      f"an error occurred when try to find container {request.container_id!r}: not found")
                    rt._stop_container(request.container_id)
                return pb.StopContainerResponse()

            def GetContainerEvents(self, request, context):
                rt._record("GetContainerEvents")
                if rt.events != "stream":
                    context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
                q = queue.Queue()
                context.add_callback(lambda: q.put(None))  # the client went: end the handler
                with rt._lock:
                    rt._streams.append(q)
                try:
                    while True:
                        ev = q.get()
                        if ev is None:
                            return
                        if isinstance(ev, grpc.StatusCode):
                            context.abort(ev, "event stream broken by the test")
                        yield ev
                finally:
                    with rt._lock:
                        rt._streams.remove(q)

        return Servicer()

    # ---- reachability -----------------------------------------------------------
    def start(self):
        if self._server:
            return
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
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
