// A canned CSI node plugin on @grpc/grpc-js, loading the reference csi.proto
// dynamically, for the interop tests of kvolumed's C client.
//   node server.js REFERENCE_DIR SOCKET_PATH
// Requests with volume_id "fail-<CODE NUMBER>" fail with that gRPC code and a message
// that needs percent-encoding; "hang" never answers (deadline tests).
"use strict";
const path = require("path");
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const [refDir, socketPath] = process.argv.slice(2);
const def = loader.loadSync(path.join(refDir, "csi.proto"), {
  keepCase: true, longs: Number, enums: String, defaults: false, oneofs: true,
  includeDirs: [refDir, "/usr/include"],
});
const csi = grpc.loadPackageDefinition(def).csi.v1;

function handler(name, answer) {
  return (call, cb) => {
    const req = call.request || {};
    const vid = req.volume_id || "";
    if (vid === "hang") return; // never answers
    if (vid.startsWith("fail-")) {
      const code = parseInt(vid.slice(5), 10);
      return cb({ code, details: "failed: 100% \"" + vid + "\" caf\u00e9" });
    }
    cb(null, answer(req));
  };
}

const server = new grpc.Server();
server.addService(csi.Identity.service, {
  GetPluginInfo: handler("GetPluginInfo", () => ({ name: "node.csi.kvolumed.io", vendor_version: "js-1", manifest: { impl: "grpc-js" } })),
  GetPluginCapabilities: handler("GetPluginCapabilities", () => ({ capabilities: [{ service: { type: "VOLUME_ACCESSIBILITY_CONSTRAINTS" } }, { volume_expansion: { type: "ONLINE" } }] })),
  Probe: handler("Probe", () => ({ ready: { value: true } })),
});
server.addService(csi.Node.service, {
  NodeStageVolume: handler("NodeStageVolume", () => ({})),
  NodeUnstageVolume: handler("NodeUnstageVolume", () => ({})),
  NodePublishVolume: handler("NodePublishVolume", (r) => {
    // Echo checks: the test sends these exact values.
    if (r.target_path !== "/target" || r.volume_capability.mount.fs_type !== "xfs" ||
        r.volume_capability.mount.mount_flags[1] !== "noatime" || r.secrets.key !== "value" ||
        r.volume_capability.access_mode.mode !== "SINGLE_NODE_MULTI_WRITER" || r.readonly !== true)
      throw new Error("unexpected request " + JSON.stringify(r));
    return {};
  }),
  NodeUnpublishVolume: handler("NodeUnpublishVolume", () => ({})),
  NodeGetVolumeStats: handler("NodeGetVolumeStats", () => ({ usage: [{ available: 1, total: 3, used: 2, unit: "BYTES" }], volume_condition: { abnormal: true, message: "bad" } })),
  NodeExpandVolume: handler("NodeExpandVolume", (r) => ({ capacity_bytes: r.capacity_range.required_bytes })),
  NodeGetCapabilities: handler("NodeGetCapabilities", () => ({ capabilities: [{ rpc: { type: "STAGE_UNSTAGE_VOLUME" } }, { rpc: { type: "VOLUME_MOUNT_GROUP" } }] })),
  NodeGetInfo: handler("NodeGetInfo", () => ({ node_id: "node-node", max_volumes_per_node: 9, accessible_topology: { segments: { zone: "a" } } })),
});
server.bindAsync("unix://" + socketPath, grpc.ServerCredentials.createInsecure(), (err) => {
  if (err) { console.error(err); process.exit(1); }
  console.log("READY " + socketPath);
});
process.on("SIGTERM", () => server.tryShutdown(() => process.exit(0)));
