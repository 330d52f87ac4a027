"""The attach/detach controller and the external-attacher (csi-attacher) of
a cluster, for one CSI volume on one node: what a test has done to a volume
before kvolumed may stage it (kubelet-facts §3; kubernetes 1.25
pkg/volume/csi/csi_attacher.go Attach, pkg/controller/volume/attachdetach,
behaviour, not code).

The controller names the VolumeAttachment after the CSI handle, driver and
node ("csi-" + sha256(handle + driver + node)) and records the source it
attaches: the PV's name (source.persistentVolumeName), or, for a pod's
inline volume CSI migration serves, the spec of the PV the translation made
of it (source.inlineVolumeSpec, spec.InlineVolumeSpecForCSIMigration).  For
a migrated volume (an in-tree PV or inline volume of a plugin the node's
CSINode lists in storage.alpha.kubernetes.io/migrated-plugins) both are the
translated CSI volume's: the driver, the handle, the VolumeAttachment name
kubelet computes too.  The controller attaches a migrated volume through the
CSI driver only when the node's CSINode says the plugin is migrated there
(csimigration.IsMigratable with the node's annotation): otherwise it would use
the in-tree attacher, which no node serving through CSI has; attach_volume()
refuses then, as that controller leaves no VolumeAttachment.  The attacher
then sets status.attached (and attachmentMetadata, the publish context) and
the controller lists the volume in the Node's status.volumesAttached under
its unique name, kubernetes.io/csi/<driver>^<handle>."""
import hashlib

from .errors import ApiError

MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"


def attachment_name(handle, driver, node):
    """csi_attacher.go getAttachmentName."""
    return "csi-" + hashlib.sha256((handle + driver + node).encode()).hexdigest()


def unique_name(driver, handle):
    """The volume's name in volumesAttached / volumesInUse (csi_plugin.go GetVolumeName)."""
    return f"kubernetes.io/csi/{driver}^{handle}"


class NotMigratedOnNode(AssertionError):
    """The controller would not attach the volume through the CSI driver."""


def migrated_plugins(api, node):
    """The in-tree plugins the node's CSINode says are migrated there."""
    items, _ = api.list("csinodes")
    for c in items:
        if c["metadata"]["name"] == node:
            value = (c["metadata"].get("annotations") or {}).get(MIGRATED_PLUGINS, "")
            return [p for p in value.split(",") if p]
    return []


def attach_volume(api, node, driver, handle, pv_name=None, inline_spec=None, metadata=None,
                  migrated_from=None):
    """Attaches as the controller and csi-attacher do; returns the
    VolumeAttachment.  Exactly one of pv_name (a PV's volume, migrated or
    not) and inline_spec (the translated PV spec of a migrated inline
    volume: csi, accessModes, volumeMode).  migrated_from: the in-tree plugin
    of a migrated volume, which the node must list as migrated."""
    if (pv_name is None) == (inline_spec is None):
        raise ValueError("exactly one of pv_name and inline_spec")
    if inline_spec is not None and not migrated_from:
        raise ValueError("only a migrated inline volume is attached through its spec")
    if migrated_from and migrated_from not in migrated_plugins(api, node):
        raise NotMigratedOnNode(f"{migrated_from} is not migrated on node {node} "
                                f"(CSINode {MIGRATED_PLUGINS}: {migrated_plugins(api, node)})")
    source = {"persistentVolumeName": pv_name} if pv_name is not None else {"inlineVolumeSpec": inline_spec}
    status = {"attached": True}
    if metadata:
        status["attachmentMetadata"] = dict(metadata)
    va = api.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                     "metadata": {"name": attachment_name(handle, driver, node)},
                     "spec": {"attacher": driver, "nodeName": node, "source": source},
                     "status": status})
    name = unique_name(driver, handle)
    _update_attached(api, node, lambda attached: [v for v in attached if v["name"] != name]
                     + [{"name": name, "devicePath": ""}])
    return va


def detach_volume(api, node, driver, handle):
    """The controller's detach once no pod on the node uses the volume."""
    api.remove("volumeattachments", None, attachment_name(handle, driver, node))
    name = unique_name(driver, handle)
    _update_attached(api, node, lambda attached: [v for v in attached if v["name"] != name])


def _update_attached(api, node, change):
    """The Node's status.volumesAttached changed as the controller does it:
    a write conditional on the version read, again on a conflict, so that
    kvolumed's own status (volumesInUse) written meanwhile is kept."""
    while True:
        obj = api.get("nodes", None, node)
        status = obj.setdefault("status", {})
        status["volumesAttached"] = change(status.get("volumesAttached") or [])
        try:
            api.update(obj)
            return
        except ApiError as e:
            if e.code != 409:
                raise
