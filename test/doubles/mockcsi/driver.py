"""gRPC services of the mock driver: csi.v1 Identity and Node on the CSI
socket, pluginregistration.Registration on the registration socket, and the
process life cycle (start, ready line, clean stop).

Every RPC goes through Driver.call(), which in order: takes the per-volume
operation lock (ABORTED if taken), applies the method's faults (delay, hang,
queued error, crash), does the work, and appends one line to the call log.
"""
import collections
import gc
import concurrent.futures
import faulthandler
import os
import signal
import sys
import threading
import time

import grpc

from . import faults as faults_mod
from . import stubs
from .volumes import CSIError, VolumeManager, DEFAULT_SIZE

ALL_NODE_CAPS = ("STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "EXPAND_VOLUME", "VOLUME_CONDITION",
                 "SINGLE_NODE_MULTI_WRITER", "VOLUME_MOUNT_GROUP")
DEFAULT_CAPS = ("STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "EXPAND_VOLUME")
MAX_UNIX_PATH = 107  # sun_path is 108 bytes including the NUL
VOLUME_OPS = ("NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume")
NEAR_DEADLINE = 2.0  # seconds: answers closer to the call's deadline are logged with deadline_left


class Settings:
    """Everything the control API may change while the driver runs."""

    FIELDS = ("name", "vendor_version", "node_id", "caps", "max_volumes_per_node", "topology",
              "probe_ready", "auto_create", "default_size", "registration_type",
              "registration_versions", "registration_endpoint", "op_lock", "boot_sessions", "stage_mount",
              "publish_mount")

    def __init__(self, **kw):
        self.name = "mock.csi.kvolumed.io"
        self.vendor_version = "0.1.0"
        self.node_id = "node-1"
        self.caps = set(DEFAULT_CAPS)
        self.max_volumes_per_node = 0
        self.topology = {}
        self.probe_ready = True
        self.auto_create = True
        self.default_size = DEFAULT_SIZE
        self.tmpfs = False
        self.registration_type = "CSIPlugin"
        self.registration_versions = ["1.0.0"]
        self.registration_endpoint = ""
        self.op_lock = "volume"  # or "target": see VolumeManager.acquire_op
        self.boot_sessions = False  # see VolumeManager.session_open
        # False: NodeStageVolume prepares the device and mounts nothing at the
        # staging path (the CSI hostpath driver, drivers whose stage only sets
        # up a device or a session); each publish then mounts the device itself.
        self.stage_mount = True
        # False: NodePublishVolume makes the target a plain directory, no mount.
        self.publish_mount = True
        # How the state file is written at each change (state.save): "safe",
        # or "hostpath" (in place, never synced, as the CSI hostpath driver).
        self.state_write = "safe"
        # True (benchmarks): gc.freeze() after each call, see _call_ends.
        self.gc_freeze = False
        for k, v in kw.items():
            setattr(self, k, v)

    def to_json(self):
        d = {k: getattr(self, k) for k in self.FIELDS}
        d["caps"] = sorted(self.caps)
        d["tmpfs"] = self.tmpfs
        return d

    def update(self, changes):
        for k, v in changes.items():
            if k not in self.FIELDS:
                raise ValueError("unknown or read-only setting %r" % k)
            if k == "caps":
                bad = set(v) - set(ALL_NODE_CAPS)
                if bad:
                    raise ValueError("unknown capabilities %s" % sorted(bad))
                v = set(v)
            if k == "registration_versions" and not isinstance(v, list):
                raise ValueError("registration_versions must be a list")
            setattr(self, k, v)


def _socket_path(endpoint):
    path = endpoint[len("unix://"):] if endpoint.startswith("unix://") else \
        endpoint[len("unix:"):] if endpoint.startswith("unix:") else endpoint
    path = os.path.abspath(path)
    if len(path.encode()) > MAX_UNIX_PATH:
        raise SystemExit("socket path longer than %d bytes: %s" % (MAX_UNIX_PATH, path))
    return path


def _stopped(shutdown_event, what, timeout=5):
    """Waits for a gRPC server's stop, but not forever: a server whose
    shutdown never completes must not keep the driver (and the test that
    stops it) from exiting; the process ends with os._exit anyway."""
    if not shutdown_event.wait(timeout):
        print("mockcsi: the %s did not finish stopping within %d s; going on" % (what, timeout),
              file=sys.stderr, flush=True)


class Driver:
    def __init__(self, endpoint, state_dir, settings, registration_dir=None,
                 control_socket=None, call_log=None):
        self.pb, self.pb_grpc, self.reg_pb, self.reg_pb_grpc = stubs.load()
        self.settings = settings
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        self.socket_path = _socket_path(endpoint)
        self.registration_dir = registration_dir
        self.control_socket = _socket_path(control_socket or os.path.join(self.state_dir, "control.sock"))
        self.faults = faults_mod.FaultTable()
        self.log = faults_mod.CallLog(call_log or os.path.join(self.state_dir, "calls.jsonl"),
                                      self.pb.csi_secret)
        self.volumes = VolumeManager(self.state_dir, settings, self.pb)
        self.registrations = []  # NotifyRegistrationStatus calls received
        # Calls being served, to bound what the client keeps in flight:
        # contexts whose client has gone are not counted.
        self._calls_lock = threading.Lock()
        self._calls = {}  # id -> (grpc context, method, call log entry)
        self._max_in_flight = 0
        self._max_volume_ops = 0     # of VOLUME_OPS only
        self._max_by_method = {}
        self.stopping = False
        self.stop_requested = threading.Event()
        self.cleanup_on_stop = True
        self.server = None
        self.reg_server = None
        self.control = None

    # ---- the per-call pipeline ----------------------------------------------
    def call(self, method, request, context, work):
        t0 = time.time()
        entry = {"time": t0, "method": method, "pid": os.getpid(),
                 "request": self.log.request_json(request)}
        digests = faults_mod.secret_digests(request)
        if digests:
            entry["secret_digests"] = digests
        vid = getattr(request, "volume_id", "") if method.startswith("Node") else ""
        plan = {}
        locked = False
        resp = None
        self._call_begins(context, method, entry)
        try:
            if vid:
                per_target = method in ("NodePublishVolume", "NodeUnpublishVolume")
                locked = self.volumes.acquire_op(vid, request.target_path if per_target else "")
            plan = self.faults.begin(method)
            if plan:
                entry["fault"] = {k: v for k, v in plan.items() if v}
            if plan.get("delay"):
                time.sleep(plan["delay"])
            if plan.get("hang") == "before":
                self.faults.block(method, context.is_active)
            err = plan.get("error")
            if plan.get("crash") == "before":
                self._crash(entry, "before")
            if err and err["when"] == "before":
                raise CSIError(faults_mod.parse_code(err["code"]), err["message"])
            with self.volumes.lock:
                if self.stopping:
                    raise CSIError(grpc.StatusCode.UNAVAILABLE, "driver is shutting down")
                # noop: OK, and nothing done (the driver's records lost the volume).
                resp = getattr(self.pb, method + "Response")() if plan.get("noop") else work(request, plan)
            if plan.get("hang") == "after":
                self.faults.block(method, context.is_active)
            if plan.get("crash") == "after":
                self._crash(entry, "after")
            if err:
                raise CSIError(faults_mod.parse_code(err["code"]), err["message"])
            entry.update(code="OK", message="")
        except CSIError as e:
            entry.update(code=e.code.name, message=e.message)
        except Exception as e:  # a bug here or a failing mount(8): INTERNAL, like a Go driver
            entry.update(code="INTERNAL", message="%s: %s" % (type(e).__name__, e))
        finally:
            if locked:
                self.volumes.release_op(locked)
            self._call_ends(context)
        if not context.is_active():
            entry["client_gone"] = True  # the client never saw this answer
        left = context.time_remaining()
        if left is not None and left < NEAR_DEADLINE:
            # The client's clock started before ours: it may already have
            # given up on this answer even though our deadline has not passed.
            entry["deadline_left"] = round(left, 3)
        entry["duration"] = round(time.time() - t0, 6)
        self.log.record(entry)
        if entry["code"] != "OK":
            context.abort(grpc.StatusCode[entry["code"]], entry["message"])
        return resp

    @staticmethod
    def _client_waits(context):
        """The client has neither cancelled the call nor passed its deadline
        (grpc-timeout): the cancellation of a call the client timed out may
        reach us after the client's next call."""
        if not context.is_active():
            return False
        left = context.time_remaining()
        return left is None or left > 0

    def _counts(self):
        """(calls, volume operations, {method: calls}) whose client still waits."""
        by_method = collections.Counter(m for c, m, _ in self._calls.values() if self._client_waits(c))
        return sum(by_method.values()), sum(by_method[m] for m in VOLUME_OPS), by_method

    def _call_begins(self, context, method, entry):
        with self._calls_lock:
            self._calls[id(context)] = (context, method, entry)
            n, ops, by_method = self._counts()
            self._max_in_flight = max(self._max_in_flight, n)
            self._max_volume_ops = max(self._max_volume_ops, ops)
            self._max_by_method[method] = max(self._max_by_method.get(method, 0), by_method[method])

    def _call_ends(self, context):
        with self._calls_lock:
            self._calls.pop(id(context), None)
        if self.settings.gc_freeze:
            # What the collector tracks so far is never walked again: a full
            # collection over a fill's 10,000 volumes stops this Python
            # process for ~60 ms, which a driver in Go does not do.
            gc.freeze()

    def in_flight(self, reset_max=False):
        """Calls whose client still waits: {"now", "max": the most at once
        (counted at the start of each call) since the start or the last
        reset, "volume_ops_max": the same for Node{Stage,Unstage,Publish,
        Unpublish}Volume only, "by_method_max": {method: the same}}."""
        with self._calls_lock:
            n, ops, by_method = self._counts()
            result = {"now": n, "max": self._max_in_flight, "volume_ops_max": self._max_volume_ops,
                      "by_method_max": dict(self._max_by_method)}
            if reset_max:
                self._max_in_flight, self._max_volume_ops = n, ops
                self._max_by_method = {m: k for m, k in by_method.items() if k}
            return result

    def _crash(self, entry, when):
        entry.update(code="CRASH", message="crash injected %s the work" % when,
                     duration=round(time.time() - entry["time"], 6))
        # The other calls in flight end with the process, as a real driver's
        # do: logged, so that a reader of the log knows they were made and
        # cannot know whether their work was done (test/storm/audit.py).
        with self._calls_lock:
            others = [e for _, _, e in self._calls.values() if e is not entry]
        for other in others:
            lost = dict(other, code="CRASH", message="lost with the process (another call's injected crash)",
                        duration=round(time.time() - other["time"], 6))
            lost["fault"] = dict(other.get("fault") or {}, crash="lost")
            self.log.record(lost)
        self.log.record(entry)
        sys.stdout.flush()
        os._exit(faults_mod.CRASH_EXIT_CODE)

    # ---- Identity -----------------------------------------------------------
    def _plugin_info(self, req, plan):
        return self.pb.GetPluginInfoResponse(name=self.settings.name,
                                             vendor_version=self.settings.vendor_version)

    def _plugin_caps(self, req, plan):
        S = self.pb.PluginCapability.Service
        caps = []
        if self.settings.topology:
            caps.append(self.pb.PluginCapability(service=S(type=S.VOLUME_ACCESSIBILITY_CONSTRAINTS)))
        return self.pb.GetPluginCapabilitiesResponse(capabilities=caps)

    def _probe(self, req, plan):
        from google.protobuf import wrappers_pb2
        return self.pb.ProbeResponse(ready=wrappers_pb2.BoolValue(value=bool(self.settings.probe_ready)))

    # ---- Node -----------------------------------------------------------------
    def _node_caps(self, req, plan):
        C = self.pb.NodeServiceCapability
        return self.pb.NodeGetCapabilitiesResponse(capabilities=[
            C(rpc=C.RPC(type=C.RPC.Type.Value(name))) for name in ALL_NODE_CAPS
            if name in self.settings.caps])

    def _node_info(self, req, plan):
        s = self.settings
        node_id = s.node_id
        segments = dict(s.topology)
        over = plan.get("oversize")
        if over:
            pad = "x" * int(over["bytes"])
            if over.get("field", "node_id") == "node_id":
                node_id = node_id + pad
            else:
                segments["mock.csi.kvolumed.io/pad"] = pad
        resp = self.pb.NodeGetInfoResponse(node_id=node_id, max_volumes_per_node=int(s.max_volumes_per_node))
        if segments:
            resp.accessible_topology.segments.update(segments)
        return resp

    def _stage(self, req, plan):
        self.volumes.stage(req)
        self.volumes.session_open("stage", req.volume_id, req.staging_target_path)
        return self.pb.NodeStageVolumeResponse()

    def _unstage(self, req, plan):
        self.volumes.session_close("stage", req.volume_id, req.staging_target_path)
        self.volumes.unstage(req)
        return self.pb.NodeUnstageVolumeResponse()

    def _publish(self, req, plan):
        self.volumes.publish(req)
        self.volumes.session_open("publish", req.volume_id, req.target_path)
        return self.pb.NodePublishVolumeResponse()

    def _unpublish(self, req, plan):
        self.volumes.session_close("publish", req.volume_id, req.target_path)
        self.volumes.unpublish(req)
        return self.pb.NodeUnpublishVolumeResponse()

    def _stats(self, req, plan):
        resp = self.pb.NodeGetVolumeStatsResponse(usage=self.volumes.stats(req))
        if "VOLUME_CONDITION" in self.settings.caps:
            resp.volume_condition.abnormal = False
            resp.volume_condition.message = "volume is healthy"
        return resp

    def _expand(self, req, plan):
        return self.pb.NodeExpandVolumeResponse(capacity_bytes=self.volumes.expand(req))

    # ---- Registration ---------------------------------------------------------
    def _reg_info(self, req, plan):
        s = self.settings
        return self.reg_pb.PluginInfo(type=s.registration_type, name=s.name,
                                      endpoint=s.registration_endpoint or self.socket_path,
                                      supported_versions=list(s.registration_versions))

    def _reg_notify(self, req, plan):
        self.registrations.append({"time": time.time(), "plugin_registered": req.plugin_registered,
                                   "error": req.error})
        return self.reg_pb.RegistrationStatusResponse()

    # ---- servicers ------------------------------------------------------------
    def _servicer(self, base, table):
        drv = self

        def make(name, fn):
            return lambda self_, request, context: drv.call(name, request, context, fn)
        return type("Mock" + base.__name__, (base,), {n: make(n, f) for n, f in table.items()})()

    def _new_server(self):
        return grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=64), options=[
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024)])

    @staticmethod
    def _bind(server, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)  # stale socket of a killed predecessor
        if server.add_insecure_port("unix:" + path) == 0:
            raise SystemExit("cannot listen on unix:%s" % path)

    @property
    def registration_socket(self):
        if not self.registration_dir:
            return None
        return _socket_path(os.path.join(self.registration_dir, self.settings.name + "-reg.sock"))

    def start_registration(self):
        if self.reg_server is not None or not self.registration_dir:
            return
        srv = self._new_server()
        self.reg_pb_grpc.add_RegistrationServicer_to_server(self._servicer(
            self.reg_pb_grpc.RegistrationServicer,
            {"GetInfo": self._reg_info, "NotifyRegistrationStatus": self._reg_notify}), srv)
        self._bind(srv, self.registration_socket)
        srv.start()
        self.reg_server = srv

    def stop_registration(self):
        """Stop serving and remove the socket: kubelet then deregisters the driver."""
        if self.reg_server is None:
            return
        _stopped(self.reg_server.stop(0), "registration server")
        self.reg_server = None
        try:
            os.unlink(self.registration_socket)
        except FileNotFoundError:
            pass

    def start(self):
        from .control import ControlServer
        srv = self._new_server()
        self.pb_grpc.add_IdentityServicer_to_server(self._servicer(self.pb_grpc.IdentityServicer, {
            "GetPluginInfo": self._plugin_info, "GetPluginCapabilities": self._plugin_caps,
            "Probe": self._probe}), srv)
        self.pb_grpc.add_NodeServicer_to_server(self._servicer(self.pb_grpc.NodeServicer, {
            "NodeGetCapabilities": self._node_caps, "NodeGetInfo": self._node_info,
            "NodeStageVolume": self._stage, "NodeUnstageVolume": self._unstage,
            "NodePublishVolume": self._publish, "NodeUnpublishVolume": self._unpublish,
            "NodeGetVolumeStats": self._stats, "NodeExpandVolume": self._expand}), srv)
        self._bind(srv, self.socket_path)
        srv.start()
        self.server = srv
        self.control = ControlServer(self, self.control_socket)
        self.control.start()
        # The registration socket comes last: kubelet (or kvolumed) calls the
        # CSI socket as soon as it sees it, as with node-driver-registrar.
        self.start_registration()

    def ready_line(self):
        return "MOCKCSI READY pid=%d endpoint=unix://%s control=%s registration=%s" % (
            os.getpid(), self.socket_path, self.control_socket, self.registration_socket or "-")

    def request_stop(self, cleanup=True):
        self.cleanup_on_stop = cleanup
        self.stop_requested.set()

    def stop(self):
        """Stop serving; with cleanup, undo every mount and loop device."""
        self.stop_registration()
        with self.volumes.lock:
            self.stopping = True
        self.faults.release()  # hung calls return (UNAVAILABLE) instead of pinning threads
        _stopped(self.server.stop(1), "CSI server")
        if self.cleanup_on_stop:
            self.volumes.teardown_all()
        self.control.stop()
        for p in (self.socket_path, self.control_socket):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def run(self):
        """Serve until SIGTERM/SIGINT or a control /shutdown; returns the exit code."""
        # The handler only notes the signal: it runs in the main thread
        # between two bytecodes, possibly inside stop_requested.wait() while
        # that holds the Event's lock, and Event.set() there would wait for
        # that lock for ever (a driver that never stopped on SIGTERM, its
        # stderr empty, seen in the check under load).
        signalled = []
        signal.signal(signal.SIGTERM, lambda *_: signalled.append(1))
        signal.signal(signal.SIGINT, lambda *_: signalled.append(1))
        self.start()
        print(self.ready_line(), flush=True)
        while not signalled and not self.stop_requested.wait(0.2):
            pass
        if signalled:
            self.request_stop(True)
        # A stop that hangs must say where: the fixture gives up after 30 s
        # and shows this stderr.
        faulthandler.dump_traceback_later(10, repeat=True, file=sys.stderr)
        self.stop()
        faulthandler.cancel_dump_traceback_later()
        return 0
