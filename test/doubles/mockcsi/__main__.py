"""CLI: PYTHONPATH=<repo>/test /usr/bin/python3 -m doubles.mockcsi --endpoint unix:///x/csi.sock ..."""
import argparse
import os
import sys

from .driver import ALL_NODE_CAPS, DEFAULT_CAPS, Driver, Settings
from .volumes import parse_size


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m doubles.mockcsi",
                                description="Mock CSI node plugin (real mounts) for kvolumed tests.")
    p.add_argument("--endpoint", required=True, help="unix:///path/csi.sock")
    p.add_argument("--name", default="mock.csi.kvolumed.io", help="driver name (GetPluginInfo)")
    p.add_argument("--vendor-version", default="0.1.0")
    p.add_argument("--state-dir", required=True, help="state file, backing files, call log, control socket")
    p.add_argument("--node-id", default="node-1")
    p.add_argument("--no-stage", action="store_true", help="drop STAGE_UNSTAGE_VOLUME from the capabilities")
    p.add_argument("--tmpfs", action="store_true", help="filesystem volumes are tmpfs, not loop+ext4")
    p.add_argument("--caps", default=",".join(DEFAULT_CAPS),
                   help="comma list of node capabilities (or 'none'); known: " + ",".join(ALL_NODE_CAPS))
    p.add_argument("--op-lock", choices=("volume", "target"), default="volume",
                   help="concurrent calls refused (ABORTED) per volume, or per volume and target path")
    p.add_argument("--boot-sessions", action="store_true",
                   help="keep per-volume state that survives a reboot until NodeUnstage/NodeUnpublish, "
                        "which answer NOT_FOUND for what the driver knows nothing of")
    p.add_argument("--stage-no-mount", action="store_true",
                   help="NodeStageVolume mounts nothing at the staging path (as the CSI hostpath driver)")
    p.add_argument("--publish-no-mount", action="store_true",
                   help="NodePublishVolume makes the target a plain directory and mounts nothing")
    p.add_argument("--max-volumes", type=int, default=0, help="NodeGetInfo max_volumes_per_node")
    p.add_argument("--topology", default="", help="k=v,... NodeGetInfo accessible_topology segments")
    p.add_argument("--volume-size", default="64Mi", help="size of a volume created on first use")
    p.add_argument("--no-auto-create", action="store_true",
                   help="unknown volume ids get NOT_FOUND instead of a new disk")
    p.add_argument("--registration-dir", help="serve <dir>/<name>-reg.sock (kubelet plugin registration)")
    p.add_argument("--registration-type", default="CSIPlugin")
    p.add_argument("--registration-versions", default="1.0.0", help="comma list for PluginInfo.supported_versions")
    p.add_argument("--registration-endpoint", default="", help="PluginInfo.endpoint (default: the CSI socket path)")
    p.add_argument("--state-write", choices=("safe", "hostpath"), default="safe",
                   help="state file written via temp+fsync+rename, or in place and never synced as the CSI "
                        "hostpath driver does (a crash may then lose or tear it)")
    p.add_argument("--gc-freeze", action="store_true",
                   help="benchmarks: freeze Python's collector after each call, so that no call waits for a full "
                        "collection of thousands of volumes (leaks garbage cycles)")
    p.add_argument("--control-socket", help="default <state-dir>/control.sock")
    p.add_argument("--call-log", help="default <state-dir>/calls.jsonl")
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    caps = set() if a.caps.strip() in ("", "none") else {c.strip() for c in a.caps.split(",") if c.strip()}
    unknown = caps - set(ALL_NODE_CAPS)
    if unknown:
        raise SystemExit("unknown capabilities: %s" % ",".join(sorted(unknown)))
    if a.no_stage:
        caps.discard("STAGE_UNSTAGE_VOLUME")
    topology = dict(kv.split("=", 1) for kv in a.topology.split(",") if kv)
    settings = Settings(name=a.name, vendor_version=a.vendor_version, node_id=a.node_id, caps=caps,
                        max_volumes_per_node=a.max_volumes, topology=topology, tmpfs=a.tmpfs,
                        default_size=parse_size(a.volume_size), auto_create=not a.no_auto_create,
                        registration_type=a.registration_type,
                        registration_versions=[v for v in a.registration_versions.split(",") if v],
                        registration_endpoint=a.registration_endpoint, op_lock=a.op_lock,
                        boot_sessions=a.boot_sessions, stage_mount=not a.stage_no_mount,
                        publish_mount=not a.publish_no_mount, state_write=a.state_write,
                        gc_freeze=a.gc_freeze)
    drv = Driver(a.endpoint, a.state_dir, settings, registration_dir=a.registration_dir,
                 control_socket=a.control_socket, call_log=a.call_log)
    code = drv.run()
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: gRPC worker threads still sleeping in an injected delay must
    # not hold the process up after a clean stop.
    os._exit(code)


if __name__ == "__main__":
    main()
