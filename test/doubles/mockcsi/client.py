"""A small CSI client for tests that talk to the driver directly.

Like kubelet, it opens a fresh channel per call by default (fresh=True), so
tests exercise connection setup the same way kvolumed does; the per-call
helpers build requests with the defaults kubelet would send.
"""
import grpc

from . import stubs

DEFAULT_TIMEOUT = 30


class CSIClient:
    def __init__(self, endpoint, fresh=True, max_receive=4 * 1024 * 1024):
        self.pb, self.pb_grpc, self.reg_pb, self.reg_pb_grpc = stubs.load()
        self.target = endpoint if endpoint.startswith("unix:") else "unix:" + endpoint
        self.fresh = fresh
        self.options = [("grpc.max_receive_message_length", max_receive)]
        self._chan = None

    def _channel(self):
        if self.fresh:
            return grpc.insecure_channel(self.target, options=self.options)
        if self._chan is None:
            self._chan = grpc.insecure_channel(self.target, options=self.options)
        return self._chan

    def close(self):
        if self._chan is not None:
            self._chan.close()
            self._chan = None

    def _call(self, stub_cls, method, request, timeout):
        chan = self._channel()
        try:
            return getattr(stub_cls(chan), method)(request, timeout=timeout)
        finally:
            if self.fresh:
                chan.close()

    def identity(self, method, request=None, timeout=DEFAULT_TIMEOUT):
        req = request or getattr(self.pb, method + "Request")()
        return self._call(self.pb_grpc.IdentityStub, method, req, timeout)

    def node(self, method, request=None, timeout=DEFAULT_TIMEOUT, **fields):
        req = request if request is not None else getattr(self.pb, method + "Request")(**fields)
        return self._call(self.pb_grpc.NodeStub, method, req, timeout)

    # ---- request builders -------------------------------------------------
    def capability(self, block=False, fs_type="", mount_flags=(), mode="SINGLE_NODE_WRITER",
                   volume_mount_group=""):
        VC = self.pb.VolumeCapability
        cap = VC(access_mode=VC.AccessMode(mode=VC.AccessMode.Mode.Value(mode)))
        if block:
            cap.block.SetInParent()
        else:
            cap.mount.fs_type = fs_type
            cap.mount.mount_flags.extend(mount_flags)
            cap.mount.volume_mount_group = volume_mount_group
        return cap

    # ---- Node calls -----------------------------------------------------------
    def caps(self):
        resp = self.node("NodeGetCapabilities")
        return sorted(self.pb.NodeServiceCapability.RPC.Type.Name(c.rpc.type) for c in resp.capabilities)

    def stage(self, volume_id, staging_path, block=False, fs_type="", mount_flags=(),
              mode="SINGLE_NODE_WRITER", volume_mount_group="", volume_context=None,
              secrets=None, publish_context=None, timeout=DEFAULT_TIMEOUT):
        return self.node("NodeStageVolume", self.pb.NodeStageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging_path,
            volume_capability=self.capability(block, fs_type, mount_flags, mode, volume_mount_group),
            volume_context=volume_context or {}, secrets=secrets or {},
            publish_context=publish_context or {}), timeout)

    def unstage(self, volume_id, staging_path, timeout=DEFAULT_TIMEOUT):
        return self.node("NodeUnstageVolume", self.pb.NodeUnstageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging_path), timeout)

    def publish(self, volume_id, target_path, staging_path="", block=False, fs_type="",
                mount_flags=(), mode="SINGLE_NODE_WRITER", readonly=False, volume_mount_group="",
                volume_context=None, secrets=None, publish_context=None, timeout=DEFAULT_TIMEOUT):
        return self.node("NodePublishVolume", self.pb.NodePublishVolumeRequest(
            volume_id=volume_id, target_path=target_path, staging_target_path=staging_path,
            volume_capability=self.capability(block, fs_type, mount_flags, mode, volume_mount_group),
            readonly=readonly, volume_context=volume_context or {}, secrets=secrets or {},
            publish_context=publish_context or {}), timeout)

    def unpublish(self, volume_id, target_path, timeout=DEFAULT_TIMEOUT):
        return self.node("NodeUnpublishVolume", self.pb.NodeUnpublishVolumeRequest(
            volume_id=volume_id, target_path=target_path), timeout)

    def stats(self, volume_id, volume_path, timeout=DEFAULT_TIMEOUT):
        return self.node("NodeGetVolumeStats", self.pb.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=volume_path), timeout)

    def expand(self, volume_id, volume_path, required_bytes, timeout=DEFAULT_TIMEOUT):
        return self.node("NodeExpandVolume", self.pb.NodeExpandVolumeRequest(
            volume_id=volume_id, volume_path=volume_path,
            capacity_range=self.pb.CapacityRange(required_bytes=required_bytes)), timeout)

    # ---- registration socket -----------------------------------------------
    def registration(self, method, request=None, timeout=DEFAULT_TIMEOUT):
        req = request
        if req is None:
            req = self.reg_pb.InfoRequest() if method == "GetInfo" else self.reg_pb.RegistrationStatus()
        return self._call(self.reg_pb_grpc.RegistrationStub, method, req, timeout)


def status_of(fn, *args, **kwargs):
    """Calls fn and returns (grpc.StatusCode, details): OK and "" when it
    succeeded, the RPC error's code and details when it failed."""
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""
