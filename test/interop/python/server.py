"""A canned CSI node plugin on Python grpcio, for csi/'s interop tests and
benchmark: the same answers as ../go/server.go and ../node/server.js, and no
work at all, so a benchmark measures the RPC path only.

  PYTHONPATH=<repo>/test /usr/bin/python3 test/interop/python/server.py SOCKET [--workers N]

Requests with volume_id "fail-<CODE NUMBER>" fail with that code and a
message that needs percent-encoding; "hang" never answers before the deadline.
"""
import argparse
import concurrent.futures
import os
import signal
import sys
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from doubles.mockcsi import stubs  # noqa: E402  (pb2 modules from the reference csi.proto)

pb, pb_grpc, _, _ = stubs.load()


def canned(answer):
    def handle(self, request, context):
        vid = getattr(request, "volume_id", "")
        if vid == "hang":
            threading.Event().wait(context.time_remaining() or 3600)
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "hung until the deadline")
        if vid.startswith("fail-"):
            code = next(c for c in grpc.StatusCode if c.value[0] == int(vid[5:]))
            context.abort(code, "failed: 100%% \"%s\" caf\u00e9" % vid)
        return answer(request)
    return handle


def publish(r):
    m = r.volume_capability.mount
    if (r.target_path, m.fs_type, list(m.mount_flags), dict(r.secrets), r.readonly,
            r.volume_capability.access_mode.mode) != (
            "/target", "xfs", ["ro", "noatime"], {"key": "value"}, True,
            pb.VolumeCapability.AccessMode.SINGLE_NODE_MULTI_WRITER) and r.volume_id != "bench":
        raise ValueError("unexpected request %s" % r)
    return pb.NodePublishVolumeResponse()


S = pb.PluginCapability.Service
V = pb.PluginCapability.VolumeExpansion
R = pb.NodeServiceCapability.RPC


class Identity(pb_grpc.IdentityServicer):
    GetPluginInfo = canned(lambda r: pb.GetPluginInfoResponse(
        name="python.csi.kvolumed.io", vendor_version="py-1", manifest={"impl": "grpcio"}))
    GetPluginCapabilities = canned(lambda r: pb.GetPluginCapabilitiesResponse(capabilities=[
        pb.PluginCapability(service=S(type=S.VOLUME_ACCESSIBILITY_CONSTRAINTS)),
        pb.PluginCapability(volume_expansion=V(type=V.ONLINE))]))
    Probe = canned(lambda r: pb.ProbeResponse(ready={"value": True}))


class Node(pb_grpc.NodeServicer):
    NodeStageVolume = canned(lambda r: pb.NodeStageVolumeResponse())
    NodeUnstageVolume = canned(lambda r: pb.NodeUnstageVolumeResponse())
    NodePublishVolume = canned(publish)
    NodeUnpublishVolume = canned(lambda r: pb.NodeUnpublishVolumeResponse())
    NodeGetVolumeStats = canned(lambda r: pb.NodeGetVolumeStatsResponse(
        usage=[pb.VolumeUsage(available=1, total=3, used=2, unit=pb.VolumeUsage.BYTES)],
        volume_condition=pb.VolumeCondition(abnormal=True, message="bad")))
    NodeExpandVolume = canned(lambda r: pb.NodeExpandVolumeResponse(capacity_bytes=r.capacity_range.required_bytes))
    NodeGetCapabilities = canned(lambda r: pb.NodeGetCapabilitiesResponse(capabilities=[
        pb.NodeServiceCapability(rpc=R(type=R.STAGE_UNSTAGE_VOLUME)),
        pb.NodeServiceCapability(rpc=R(type=R.VOLUME_MOUNT_GROUP))]))
    NodeGetInfo = canned(lambda r: pb.NodeGetInfoResponse(
        node_id="node-python", max_volumes_per_node=9, accessible_topology=pb.Topology(segments={"zone": "a"})))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("socket")
    p.add_argument("--workers", type=int, default=16)
    a = p.parse_args()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=a.workers))
    pb_grpc.add_IdentityServicer_to_server(Identity(), server)
    pb_grpc.add_NodeServicer_to_server(Node(), server)
    if os.path.exists(a.socket):
        os.unlink(a.socket)
    server.add_insecure_port("unix:" + a.socket)
    server.start()
    print("READY", a.socket, flush=True)
    # The handler only notes the signal (Event.set() in a handler can wait
    # for ever on the lock of the wait it interrupted).
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        time.sleep(0.2)
    server.stop(0).wait()


if __name__ == "__main__":
    main()
