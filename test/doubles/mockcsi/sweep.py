"""cleanup(): remove every mount and loop device a (possibly SIGKILLed) mock
driver left, working only from its state dir and the kernel's tables.

Named sweep.py rather than cleanup.py so that `doubles.mockcsi.cleanup` stays
the function: importing a submodule of the same name would shadow it.
"""
import os
import shutil

from . import mounts, state


def _under(path, root):
    root = os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def cleanup(state_dir, under=None, remove_volumes=False):
    """Unmount what the driver made and anything mounted under `under` (deepest
    first), then detach the loop devices backed by files in state_dir (or
    under `under`, e.g. the device-lock loops kubelet-like agents attach).

    The state file is updated to say nothing is staged or published, so a
    driver started afterwards agrees with the kernel.  tmpfs-mode data is
    saved first so a restage still sees it, as with a loop-backed disk.
    With remove_volumes, backing files are deleted too.
    Returns {"unmounted": [paths], "detached": [devices]}.
    """
    state_dir = os.path.abspath(state_dir)
    st = state.load(state_dir)
    ours = mounts.loops_under(state_dir)
    if under:
        ours += [d for d, b in mounts.loop_backing_files().items() if _under(b, under) and d not in ours]

    # tmpfs-mode disks: keep their data before the mount goes away.
    for vol in st["volumes"].values():
        dev = vol.get("device")
        if vol["kind"] == "tmpfs" and dev and mounts.is_mount_point(dev) and not remove_volumes:
            tmp = vol["backing"] + ".saving"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            mounts.run(["cp", "-a", dev + "/.", tmp + "/"])
            shutil.rmtree(vol["backing"], ignore_errors=True)
            os.rename(tmp, vol["backing"])

    wanted = set()
    created = {}  # path -> "dir"/"file" the driver created there
    for vid, e in st["ephemeral"].items():
        wanted.add(e["target"])
        created[e["target"]] = e.get("created")
    for vol in st["volumes"].values():
        for target, p in vol["published"].items():
            wanted.add(target)
            created[target] = p.get("created")
        if vol["staged"]:
            wanted.add(vol["staged"]["path"])
            if vol["staged"].get("created_dir"):
                created[vol["staged"]["path"]] = "dir"
    loopset = set(ours)
    for m in mounts.mountinfo():
        mp = m["mount_point"]
        if _under(mp, state_dir) or (under and _under(mp, under)) or m["source"] in loopset:
            wanted.add(mp)

    unmounted = []
    # Deepest first: a parent cannot be unmounted while a child is mounted on it.
    for path in sorted(wanted, key=lambda p: (p.count("/"), len(p)), reverse=True):
        if mounts.is_mount_point(path):
            mounts.umount(path)
            unmounted.append(path)
    for path, kind in created.items():
        try:
            if kind == "dir" and os.path.isdir(path):
                os.rmdir(path)
            elif kind == "file" and os.path.isfile(path):
                os.unlink(path)
        except OSError:
            pass  # not empty / already gone: not ours to force
    for vol in st["volumes"].values():
        dev = vol.get("device")
        if vol["kind"] == "tmpfs" and dev and os.path.isdir(dev):
            try:
                os.rmdir(dev)
            except OSError:
                pass

    detached = []
    for dev in sorted(set(ours)):
        mounts.loop_detach(dev)
        detached.append(dev)

    for vid, vol in list(st["volumes"].items()):
        vol.update(device=None, staged=None, published={})
        if remove_volumes:
            if os.path.isdir(vol["backing"]):
                shutil.rmtree(vol["backing"], ignore_errors=True)
            elif os.path.exists(vol["backing"]):
                os.unlink(vol["backing"])
            del st["volumes"][vid]
    st["ephemeral"] = {}
    if os.path.isdir(state_dir):
        state.save(state_dir, st)
    return {"unmounted": unmounted, "detached": detached}
