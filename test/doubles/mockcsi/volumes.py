"""The real work of the node plugin: backing "disks", stage, publish and undo.

A volume's "disk" is either
  * loop mode: a sparse file `<state>/volumes/<sha>.img` attached to a loop
    device while the volume is in use (staged, or published directly when the
    driver has no STAGE_UNSTAGE_VOLUME); block volumes always use this;
  * tmpfs mode: a tmpfs mounted at `<state>/tmpfs/<sha>` while in use, whose
    contents are copied to `<state>/volumes/<sha>.data/` when it is released
    and back when it is acquired, so data survives unstage/restage like on a
    disk, at tmpfs speed.
The file/dir persists across stage/unstage and restarts; only
`delete_volume` (control API) or `cleanup(..., remove_volumes=True)` removes it.

Every method takes the protobuf request and raises CSIError with the gRPC
status a careful real driver returns (CSI spec error tables); strictness is
deliberate: a double kinder than a real driver hides bugs in the CO.  Where
the spec leaves the driver free but a CO is clearly misbehaving (e.g.
unstaging a volume that is still published), the call succeeds like a real
driver and a "violation" is recorded for tests to assert on.
"""
import hashlib
import json
import os
import re
import shutil
import threading
import time

import grpc

from . import mounts, state

EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"
SIZE_KEY = "size"  # volume_context key giving a new volume's size ("64Mi", bytes)
DEFAULT_SIZE = 64 * 1024 * 1024
VIOLATIONS_FILE = "violations.jsonl"


def read_violations(state_dir):
    try:
        with open(os.path.join(state_dir, VIOLATIONS_FILE)) as f:
            return [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []


class CSIError(Exception):
    def __init__(self, code, message):
        super().__init__("%s: %s" % (code.name, message))
        self.code = code
        self.message = message


def parse_size(s):
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]i?)?\s*", str(s))
    if not m:
        raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "bad size %r" % s)
    mult = {None: 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[m.group(2)]
    return int(m.group(1)) * mult


def _norm(p):
    return os.path.normpath(p) if p else p


class VolumeManager:
    def __init__(self, state_dir, settings, csi_pb2):
        """settings: object with .caps (set of names), .tmpfs, .default_size,
        .auto_create (all read at call time so the control API can change them)."""
        self.dir = os.path.abspath(state_dir)
        self.settings = settings
        self.pb = csi_pb2
        self.lock = threading.RLock()
        self.busy = set()
        os.makedirs(os.path.join(self.dir, "volumes"), exist_ok=True)
        os.makedirs(os.path.join(self.dir, "tmpfs"), exist_ok=True)
        self.st = state.load(self.dir)
        self._reconcile_devices()
        self.save()

    # ---- bookkeeping -------------------------------------------------------
    def save(self):
        state.save(self.dir, self.st, getattr(self.settings, "state_write", "safe"))

    def violation(self, msg):
        # Persisted so tests can read them after a crash or restart.
        entry = {"time": time.time(), "message": msg}
        with open(os.path.join(self.dir, VIOLATIONS_FILE), "a") as f:
            f.write(json.dumps(entry) + "\n")

    def violations(self):
        return read_violations(self.dir)

    def _reconcile_devices(self):
        """After a restart, the recorded loop device may have another number
        (or be gone); the backing file is the stable identity."""
        for vol in self.st["volumes"].values():
            if vol["kind"] == "loop":
                found = mounts.live_loops_for(vol["backing"])
                vol["device"] = found[0] if found else None
            elif vol.get("device") and not mounts.is_mount_point(vol["device"]):
                vol["device"] = None

    def acquire_op(self, volume_id, target=""):
        """Exclusion of concurrent calls, as the CSI spec lets drivers do.
        op_lock "volume" (GCE PD, hostpath-like): a second call for a volume
        with a call in flight gets ABORTED.  op_lock "target" (AWS EBS-like):
        publishes and unpublishes are keyed by volume and target path, so
        pods sharing a volume are served side by side; a publish overlapping
        a stage or unstage of its volume is a CO violation.  Returns the key
        to release."""
        per_target = getattr(self.settings, "op_lock", "volume") == "target" and target
        key = (volume_id, target) if per_target else (volume_id, "")
        with self.lock:
            if key in self.busy:
                raise CSIError(grpc.StatusCode.ABORTED,
                               "an operation with the given volume ID %s already exists" % volume_id)
            if per_target and (volume_id, "") in self.busy:
                self.violation("publish of %s at %s while its stage or unstage runs" % (volume_id, target))
            if not per_target and any(v == volume_id for v, _ in self.busy):
                if getattr(self.settings, "op_lock", "volume") == "target":
                    self.violation("stage or unstage of %s while a publish of it runs" % volume_id)
                raise CSIError(grpc.StatusCode.ABORTED,
                               "an operation with the given volume ID %s already exists" % volume_id)
            self.busy.add(key)
        return key

    def release_op(self, key):
        with self.lock:
            self.busy.discard(key)

    def has_cap(self, name):
        return name in self.settings.caps

    # ---- volumes (disks) ---------------------------------------------------
    def _sha(self, vid):
        return hashlib.sha256(vid.encode()).hexdigest()[:32]

    def create_volume(self, vid, size=None, block=False):
        with self.lock:
            if vid in self.st["volumes"]:
                return self.st["volumes"][vid]
            size = int(size or self.settings.default_size)
            kind = "tmpfs" if self.settings.tmpfs and not block else "loop"
            sha = self._sha(vid)
            if kind == "loop":
                backing = os.path.join(self.dir, "volumes", sha + ".img")
                with open(backing, "wb") as f:
                    f.truncate(size)  # sparse
            else:
                backing = os.path.join(self.dir, "volumes", sha + ".data")
                os.makedirs(backing, mode=0o755, exist_ok=True)
            vol = {"backing": backing, "kind": kind, "size": size, "fs_type": "",
                   "device": None, "staged": None, "published": {}}
            self.st["volumes"][vid] = vol
            self.save()
            return vol

    def delete_volume(self, vid):
        with self.lock:
            vol = self.st["volumes"].get(vid)
            if vol is None:
                raise CSIError(grpc.StatusCode.NOT_FOUND, "volume %s not found" % vid)
            if vol["staged"] or vol["published"] or vol["device"]:
                raise CSIError(grpc.StatusCode.FAILED_PRECONDITION, "volume %s is in use" % vid)
            if os.path.isdir(vol["backing"]):
                shutil.rmtree(vol["backing"])
            elif os.path.exists(vol["backing"]):
                os.unlink(vol["backing"])
            del self.st["volumes"][vid]
            self.save()

    def _get_or_create(self, vid, ctx, block):
        vol = self.st["volumes"].get(vid)
        if vol is None:
            if not self.settings.auto_create:
                raise CSIError(grpc.StatusCode.NOT_FOUND, "volume %s does not exist" % vid)
            size = parse_size(ctx[SIZE_KEY]) if SIZE_KEY in ctx else None
            vol = self.create_volume(vid, size, block)
        if block and vol["kind"] != "loop":
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT,
                           "volume %s is a tmpfs filesystem volume, not a block volume" % vid)
        return vol

    def _in_use(self, vol):
        return vol["staged"] is not None or any(p["direct"] for p in vol["published"].values())

    def _acquire(self, vol):
        """Make the volume's device available (attach loop / mount tmpfs)."""
        if vol["device"]:
            return vol["device"]
        if vol["kind"] == "loop":
            vol["device"] = mounts.loop_attach(vol["backing"])
        else:
            dev = os.path.join(self.dir, "tmpfs", os.path.basename(vol["backing"])[:-5])
            os.makedirs(dev, exist_ok=True)
            # mode=0755 so the root looks like a fresh ext4 root, not /tmp.
            mounts.mount("tmpfs", dev, "tmpfs", ["size=%d" % vol["size"], "mode=0755"])
            mounts.run(["cp", "-a", vol["backing"] + "/.", dev + "/"])
            vol["device"] = dev
        self.save()
        return vol["device"]

    def _release(self, vol):
        """Give the device back once nothing on this node uses it any more."""
        if self._in_use(vol) or not vol["device"]:
            return
        if vol["kind"] == "loop":
            mounts.loop_detach(vol["device"])
        else:
            save_tmp = vol["backing"] + ".saving"
            shutil.rmtree(save_tmp, ignore_errors=True)
            # Copy out, then swap, so a crash mid-copy never loses the old data.
            os.makedirs(save_tmp)
            mounts.run(["cp", "-a", vol["device"] + "/.", save_tmp + "/"])
            shutil.rmtree(vol["backing"], ignore_errors=True)
            os.rename(save_tmp, vol["backing"])
            mounts.umount(vol["device"])
            os.rmdir(vol["device"])
        vol["device"] = None
        self.save()

    def _format(self, vol, fs_type):
        if vol["kind"] != "loop":
            return
        have = mounts.blkid_type(vol["device"])
        if not have:
            mounts.mkfs(vol["device"], fs_type)
        elif have != fs_type:
            raise CSIError(grpc.StatusCode.INTERNAL,
                           "volume %s is formatted as %s, %s requested" % (vol["backing"], have, fs_type))
        vol["fs_type"] = fs_type

    def _resize_fs(self, vol):
        """Grow the ext filesystem to the device size.

        Online growth (the fs is mounted) needs CAP_SYS_RESOURCE, which some
        containers drop; then the resize is left pending and done offline
        (e2fsck + resize2fs) right before the next mount, i.e. at restage.
        """
        dev = vol["device"]
        if dev and not any(m["source"] == dev for m in mounts.mountinfo()):
            mounts.run(["e2fsck", "-f", "-p", dev])
            mounts.run(["resize2fs", dev])
            vol["resize_pending"] = False
            return
        if dev:
            p = mounts.run(["resize2fs", dev], check=False)
            if p.returncode == 0:
                vol["resize_pending"] = False
                return
            if "Permission denied" not in p.stdout:
                raise mounts.CommandError(["resize2fs", dev], p.returncode, p.stdout)
        vol["resize_pending"] = True

    def _mount_fs(self, vol, target, fs_type, flags, readonly):
        dev = vol["device"]
        if vol["kind"] == "loop":
            self._format(vol, fs_type)
            if vol.get("resize_pending"):
                self._resize_fs(vol)
            mounts.mount(dev, target, fs_type, list(flags) + (["ro"] if readonly else []))
        else:
            mounts.bind(dev, target, readonly, flags)

    @staticmethod
    def _apply_group(path, group):
        if not group:
            return
        try:
            gid = int(group)
        except ValueError:
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "volume_mount_group %r is not a gid" % group)
        os.chown(path, -1, gid)
        os.chmod(path, os.stat(path).st_mode & 0o7777 | 0o2070)

    # ---- argument checks ---------------------------------------------------
    def _check_capability(self, cap):
        which = cap.WhichOneof("access_type")
        if which is None:
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "volume capability has no access type")
        mode = cap.access_mode.mode
        M = self.pb.VolumeCapability.AccessMode
        if mode == M.UNKNOWN:
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "volume capability access mode not set")
        if mode in (M.SINGLE_NODE_SINGLE_WRITER, M.SINGLE_NODE_MULTI_WRITER) and \
                not self.has_cap("SINGLE_NODE_MULTI_WRITER"):
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT,
                           "access mode %s needs the SINGLE_NODE_MULTI_WRITER capability" % M.Mode.Name(mode))
        if which == "mount":
            if cap.mount.volume_mount_group and not self.has_cap("VOLUME_MOUNT_GROUP"):
                raise CSIError(grpc.StatusCode.INVALID_ARGUMENT,
                               "volume_mount_group set but VOLUME_MOUNT_GROUP is not advertised")
            fs = cap.mount.fs_type or "ext4"
            if not self.settings.tmpfs and not mounts.mkfs_available(fs):
                raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "unsupported fs_type %r" % fs)
        return which == "block"

    @staticmethod
    def _require(value, what):
        if not value:
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "%s missing in request" % what)

    def _require_cap(self, name, method):
        if not self.has_cap(name):
            raise CSIError(grpc.StatusCode.UNIMPLEMENTED, "%s: %s capability not advertised" % (method, name))

    def _cap_record(self, cap):
        block = cap.WhichOneof("access_type") == "block"
        return {"block": block,
                "fs_type": "" if block else (cap.mount.fs_type or "ext4"),
                "mount_flags": [] if block else sorted(cap.mount.mount_flags),
                "access_mode": self.pb.VolumeCapability.AccessMode.Mode.Name(cap.access_mode.mode),
                "volume_mount_group": "" if block else cap.mount.volume_mount_group}

    def _owner_of_path(self, path):
        """(volume_id, 'staged'|'published'|'ephemeral') of what we have at path."""
        for vid, vol in self.st["volumes"].items():
            if vol["staged"] and vol["staged"]["path"] == path:
                return vid, "staged"
            if path in vol["published"]:
                return vid, "published"
        for vid, e in self.st["ephemeral"].items():
            if e["target"] == path:
                return vid, "ephemeral"
        return None, None

    # ---- NodeStageVolume ---------------------------------------------------
    def stage(self, req):
        self._require_cap("STAGE_UNSTAGE_VOLUME", "NodeStageVolume")
        self._require(req.volume_id, "volume ID")
        self._require(req.staging_target_path, "staging target path")
        if not req.HasField("volume_capability"):
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "volume capability missing in request")
        block = self._check_capability(req.volume_capability)
        path = _norm(req.staging_target_path)
        rec = self._cap_record(req.volume_capability)
        with self.lock:
            vid = req.volume_id
            owner, what = self._owner_of_path(path)
            if owner is not None and (owner != vid or what != "staged"):
                raise CSIError(grpc.StatusCode.ALREADY_EXISTS,
                               "staging path %s is in use by volume %s (%s)" % (path, owner, what))
            vol = self._get_or_create(vid, req.volume_context, block)
            if vol["staged"] and vol["staged"].get("mounted", not vol["staged"]["block"]) and \
                    not mounts.is_mount_point(vol["staged"]["path"]):
                # Someone unmounted it behind our back (a cleanup, the CO):
                # like mount-utils' IsLikelyNotMountPoint check, trust the kernel.
                vol["staged"] = None
            if vol["staged"]:
                old = vol["staged"]
                if old["path"] != path:
                    raise CSIError(grpc.StatusCode.FAILED_PRECONDITION,
                                   "volume %s is already staged at %s" % (vid, old["path"]))
                if {k: old[k] for k in rec} != rec:
                    raise CSIError(grpc.StatusCode.ALREADY_EXISTS,
                                   "volume %s is staged at %s with an incompatible capability" % (vid, path))
                return
            if not block and mounts.is_mount_point(path):
                # A mount with no record: a predecessor killed while its
                # mount(8) ran (that child finishes the mount).  As drivers
                # with mount-utils' IsLikelyNotMountPoint do: take it.
                vol["staged"] = dict(rec, path=path, created_dir=False)
                self.save()
                return
            created = False
            if not os.path.isdir(path):
                # kubelet creates globalmount / the block staging dir itself; a
                # driver doing MkdirAll hides it if the CO does not.
                self.violation("NodeStageVolume %s: staging_target_path %s did not exist" % (vid, path))
                os.makedirs(path, 0o750)
                created = True
            mount = not block and self.settings.stage_mount
            try:
                self._acquire(vol)
                if not block and not mount:
                    # The hostpath driver's stage: the volume is made ready
                    # (here: formatted), nothing is mounted; publish mounts it.
                    self._format(vol, rec["fs_type"])
                elif not block:
                    self._mount_fs(vol, path, rec["fs_type"], rec["mount_flags"], False)
                    try:
                        self._apply_group(path, rec["volume_mount_group"])
                    except Exception:
                        mounts.umount(path)
                        raise
            except Exception:
                self._release(vol)
                if created:
                    os.rmdir(path)
                raise
            vol["staged"] = dict(rec, path=path, created_dir=created, mounted=mount)
            self.save()

    # ---- NodeUnstageVolume -------------------------------------------------
    def unstage(self, req):
        self._require_cap("STAGE_UNSTAGE_VOLUME", "NodeUnstageVolume")
        self._require(req.volume_id, "volume ID")
        self._require(req.staging_target_path, "staging target path")
        path = _norm(req.staging_target_path)
        with self.lock:
            vol = self.st["volumes"].get(req.volume_id)
            if vol is None or not vol["staged"] or vol["staged"]["path"] != path:
                return  # spec: not found / not staged there -> OK
            users = [t for t, p in vol["published"].items() if p["staging_path"] == path]
            if users:
                self.violation("NodeUnstageVolume %s while still published at %s" % (req.volume_id, users))
            if vol["staged"].get("mounted", not vol["staged"]["block"]):
                mounts.umount(path)
            if vol["staged"]["created_dir"] and os.path.isdir(path):
                os.rmdir(path)
            vol["staged"] = None
            self.save()
            self._release(vol)

    # ---- NodePublishVolume -------------------------------------------------
    def _is_ephemeral(self, req):
        if req.volume_context.get(EPHEMERAL_KEY) == "true":
            return True
        return (self.has_cap("STAGE_UNSTAGE_VOLUME") and not req.staging_target_path
                and req.volume_id not in self.st["volumes"])

    def publish(self, req):
        self._require(req.volume_id, "volume ID")
        self._require(req.target_path, "target path")
        if not req.HasField("volume_capability"):
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "volume capability missing in request")
        block = self._check_capability(req.volume_capability)
        target = _norm(req.target_path)
        rec = self._cap_record(req.volume_capability)
        rec.update(readonly=req.readonly, staging_path=_norm(req.staging_target_path) or "")
        vid = req.volume_id
        with self.lock:
            owner, what = self._owner_of_path(target)
            if owner is not None and (owner != vid or what == "staged"):
                raise CSIError(grpc.StatusCode.ALREADY_EXISTS,
                               "target path %s is in use by volume %s (%s)" % (target, owner, what))
            if self._is_ephemeral(req):
                return self._publish_ephemeral(req, target, rec, block)
            stage = self.has_cap("STAGE_UNSTAGE_VOLUME")
            if stage:
                if not req.staging_target_path:
                    raise CSIError(grpc.StatusCode.FAILED_PRECONDITION,
                                   "staging target path not set but STAGE_UNSTAGE_VOLUME is advertised")
                vol = self.st["volumes"].get(vid)
                if vol is None or not vol["staged"] or vol["staged"]["path"] != rec["staging_path"]:
                    raise CSIError(grpc.StatusCode.FAILED_PRECONDITION,
                                   "volume %s is not staged at %s" % (vid, rec["staging_path"]))
                if vol["staged"]["block"] != block:
                    raise CSIError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "volume %s staged as %s, published as %s" % (
                                       vid, "block" if vol["staged"]["block"] else "mount",
                                       "block" if block else "mount"))
            else:
                vol = self._get_or_create(vid, req.volume_context, block)
            old = vol["published"].get(target)
            if old is not None and old.get("mounted", True) and not mounts.is_mount_point(target):
                del vol["published"][target]  # unmounted behind our back: publish again
                old = None
            if old is not None:
                if {k: old[k] for k in rec} != rec:
                    raise CSIError(grpc.StatusCode.ALREADY_EXISTS,
                                   "volume %s is published at %s with incompatible arguments" % (vid, target))
                return
            if not block and mounts.is_mount_point(target):
                # Mounted by a predecessor killed before it recorded it (see stage).
                vol["published"][target] = dict(rec, direct=not stage, created=None)
                self.save()
                return
            M = self.pb.VolumeCapability.AccessMode
            if (req.volume_capability.access_mode.mode == M.SINGLE_NODE_SINGLE_WRITER
                    and vol["published"]):
                raise CSIError(grpc.StatusCode.FAILED_PRECONDITION,
                               "volume %s is SINGLE_NODE_SINGLE_WRITER and already published at %s"
                               % (vid, sorted(vol["published"])))
            created = None
            if not os.path.isdir(os.path.dirname(target)):
                # kubelet creates the parent (<specName>/ or publish/<specName>/)
                # before NodePublishVolume; drivers MkdirAll and hide it if not.
                self.violation("NodePublishVolume %s: parent of target_path %s did not exist" % (vid, target))
            if block:
                if os.path.isdir(target):
                    raise CSIError(grpc.StatusCode.INVALID_ARGUMENT,
                                   "target path %s of a block volume is a directory" % target)
                os.makedirs(os.path.dirname(target), 0o750, exist_ok=True)
                if not os.path.exists(target):
                    open(target, "w").close()
                    created = "file"
            elif not os.path.exists(target):
                os.makedirs(target, 0o750)
                created = "dir"
            # Staged without a mount: the publish mounts the device, which it
            # then holds like a publish without staging does.
            staged_mount = stage and vol["staged"].get("mounted", not block)
            entry = dict(rec, direct=not stage or (not block and not staged_mount), created=created)
            vol["published"][target] = entry
            try:
                if not block and not self.settings.publish_mount:
                    entry["mounted"] = False  # a plain directory is all the pod gets
                elif stage and not block and staged_mount:
                    mounts.bind(vol["staged"]["path"], target, req.readonly, rec["mount_flags"])
                else:
                    dev = self._acquire(vol)
                    if block:
                        mounts.bind(dev, target, req.readonly)
                    else:
                        self._mount_fs(vol, target, rec["fs_type"], rec["mount_flags"], req.readonly)
                if not block and not req.readonly:
                    self._apply_group(target, rec["volume_mount_group"])
            except Exception:
                mounts.umount(target)
                del vol["published"][target]
                self._remove_created(target, created)
                self._release(vol)
                raise
            self.save()

    def _publish_ephemeral(self, req, target, rec, block):
        vid = req.volume_id
        if block:
            raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "ephemeral volumes cannot be block volumes")
        old = self.st["ephemeral"].get(vid)
        if old is not None and old.get("mounted", True) and not mounts.is_mount_point(old["target"]):
            del self.st["ephemeral"][vid]  # unmounted behind our back
            old = None
        if old is not None:
            if old["target"] != target:
                raise CSIError(grpc.StatusCode.ALREADY_EXISTS,
                               "ephemeral volume %s is already published at %s" % (vid, old["target"]))
            if old["readonly"] != req.readonly:
                raise CSIError(grpc.StatusCode.ALREADY_EXISTS,
                               "ephemeral volume %s is published with other arguments" % vid)
            return
        ctx = req.volume_context
        size = parse_size(ctx[SIZE_KEY]) if SIZE_KEY in ctx else self.settings.default_size
        if mounts.is_mount_point(target):
            # Mounted by a predecessor killed before it recorded it (see stage).
            self.st["ephemeral"][vid] = {"target": target, "size": size, "created": None,
                                         "readonly": req.readonly}
            self.save()
            return
        created = None
        if not os.path.exists(target):
            os.makedirs(target, 0o750)
            created = "dir"
        self.st["ephemeral"][vid] = {"target": target, "size": size, "created": created,
                                     "readonly": req.readonly}
        if not self.settings.publish_mount:
            self.st["ephemeral"][vid]["mounted"] = False  # a plain directory
            self.save()
            return
        try:
            mounts.mount("tmpfs", target, "tmpfs", ["size=%d" % size, "mode=0755"])
            if req.readonly:
                mounts.run(["mount", "-o", "remount,ro", target])
            else:
                self._apply_group(target, rec["volume_mount_group"])
        except Exception:
            mounts.umount(target)
            del self.st["ephemeral"][vid]
            self._remove_created(target, created)
            raise
        self.save()

    @staticmethod
    def _remove_created(path, created):
        # CSI: "the SP MUST delete the file or directory it created at this path".
        try:
            if created == "dir":
                os.rmdir(path)
            elif created == "file":
                os.unlink(path)
        except FileNotFoundError:
            pass

    # ---- NodeUnpublishVolume -----------------------------------------------
    def unpublish(self, req):
        self._require(req.volume_id, "volume ID")
        self._require(req.target_path, "target path")
        target = _norm(req.target_path)
        vid = req.volume_id
        with self.lock:
            eph = self.st["ephemeral"].get(vid)
            if eph is not None and eph["target"] == target:
                mounts.umount(target)
                self._remove_created(target, eph["created"])
                del self.st["ephemeral"][vid]
                self.save()
                return
            vol = self.st["volumes"].get(vid)
            if vol is None or target not in vol["published"]:
                return  # spec: volume or target not found -> OK
            entry = vol["published"][target]
            mounts.umount(target)
            self._remove_created(target, entry["created"])
            del vol["published"][target]
            self.save()
            self._release(vol)

    # ---- NodeGetVolumeStats ------------------------------------------------
    def _locate(self, vid, path):
        """Return (kind, block) of what volume vid has at path, or raise NOT_FOUND."""
        path = _norm(path)
        eph = self.st["ephemeral"].get(vid)
        if eph is not None:
            if eph["target"] == path:
                return eph, False
            raise CSIError(grpc.StatusCode.NOT_FOUND, "volume %s is not at %s" % (vid, path))
        vol = self.st["volumes"].get(vid)
        if vol is None:
            raise CSIError(grpc.StatusCode.NOT_FOUND, "volume %s not found" % vid)
        if vol["staged"] and vol["staged"]["path"] == path:
            return vol, vol["staged"]["block"]
        if path in vol["published"]:
            return vol, vol["published"][path]["block"]
        raise CSIError(grpc.StatusCode.NOT_FOUND, "volume %s is not staged or published at %s" % (vid, path))

    def stats(self, req):
        self._require_cap("GET_VOLUME_STATS", "NodeGetVolumeStats")
        self._require(req.volume_id, "volume ID")
        self._require(req.volume_path, "volume path")
        with self.lock:
            vol, block = self._locate(req.volume_id, req.volume_path)
            U = self.pb.VolumeUsage
            if block:
                return [U(total=vol["size"], unit=U.BYTES)]
            s = os.statvfs(_norm(req.volume_path))
            return [U(total=s.f_blocks * s.f_frsize, available=s.f_bavail * s.f_frsize,
                      used=(s.f_blocks - s.f_bfree) * s.f_frsize, unit=U.BYTES),
                    U(total=s.f_files, available=s.f_favail, used=s.f_files - s.f_ffree, unit=U.INODES)]

    # ---- NodeExpandVolume --------------------------------------------------
    def expand(self, req):
        self._require_cap("EXPAND_VOLUME", "NodeExpandVolume")
        self._require(req.volume_id, "volume ID")
        self._require(req.volume_path, "volume path")
        with self.lock:
            vol, block = self._locate(req.volume_id, req.volume_path)
            if req.volume_id in self.st["ephemeral"]:
                raise CSIError(grpc.StatusCode.INVALID_ARGUMENT, "ephemeral volumes cannot be expanded")
            cr = req.capacity_range
            want = cr.required_bytes or vol["size"]
            if cr.limit_bytes and want > cr.limit_bytes:
                raise CSIError(grpc.StatusCode.OUT_OF_RANGE,
                               "required_bytes %d > limit_bytes %d" % (want, cr.limit_bytes))
            if want <= vol["size"]:
                return vol["size"]  # never shrink; already big enough
            if vol["kind"] == "loop":
                with open(vol["backing"], "r+b") as f:
                    f.truncate(want)
                if vol["device"]:
                    mounts.loop_refresh(vol["device"])
                if vol["fs_type"].startswith("ext") and not block:
                    self._resize_fs(vol)
            elif vol["device"]:
                mounts.run(["mount", "-o", "remount,size=%d" % want, vol["device"]])
            vol["size"] = want
            self.save()
            return want

    # ---- state that survives a reboot (settings.boot_sessions) -------------
    # Real drivers keep node state outside the mounts, which a reboot does
    # not undo and only NodeUnstageVolume / NodeUnpublishVolume end: iSCSI
    # sessions and NVMe-oF connections set up again at boot, the block
    # publish file, a lock.  In this mode every stage and publish opens a
    # "session" that neither a clean stop (teardown_all) nor a reboot ends,
    # and an unstage or unpublish of something the driver knows nothing of
    # answers NOT_FOUND, as the CSI spec lets it.
    def _sessions(self):
        return self.st.setdefault("sessions", {})

    def session_open(self, kind, vid, path):
        if not getattr(self.settings, "boot_sessions", False):
            return
        with self.lock:
            self._sessions()["%s %s" % (kind, _norm(path))] = vid
            self.save()

    def _known_at(self, vid, path):
        eph = self.st["ephemeral"].get(vid)
        vol = self.st["volumes"].get(vid)
        return bool((eph and eph["target"] == path)
                    or (vol and ((vol["staged"] and vol["staged"]["path"] == path) or path in vol["published"])))

    def session_close(self, kind, vid, path):
        if not getattr(self.settings, "boot_sessions", False):
            return
        path = _norm(path)
        with self.lock:
            sessions = self._sessions()
            key = "%s %s" % (kind, path)
            if sessions.get(key) == vid:
                del sessions[key]
                self.save()
            elif not self._known_at(vid, path):
                raise CSIError(grpc.StatusCode.NOT_FOUND, "volume %s: nothing at %s" % (vid, path))

    def forget_session(self, key):
        """The driver lost track of one (a test's way to get NOT_FOUND)."""
        with self.lock:
            self._sessions().pop(key, None)
            self.save()

    # ---- teardown ----------------------------------------------------------
    def teardown_all(self):
        """Undo every mount and device this driver made (clean stop)."""
        with self.lock:
            for vid, e in list(self.st["ephemeral"].items()):
                mounts.umount(e["target"])
                self._remove_created(e["target"], e["created"])
                del self.st["ephemeral"][vid]
            for vol in self.st["volumes"].values():
                for target, entry in list(vol["published"].items()):
                    mounts.umount(target)
                    self._remove_created(target, entry["created"])
                    del vol["published"][target]
                if vol["staged"]:
                    if not vol["staged"]["block"]:
                        mounts.umount(vol["staged"]["path"])
                    if vol["staged"]["created_dir"] and os.path.isdir(vol["staged"]["path"]):
                        os.rmdir(vol["staged"]["path"])
                    vol["staged"] = None
                self._release(vol)
            self.save()
