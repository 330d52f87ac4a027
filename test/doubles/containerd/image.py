"""A local container image without a registry: Debian's busybox-static in one
layer, written as a docker-archive tarball that `ctr images import` accepts
(reference/containerd-here.md, "A local image without a registry")."""
import hashlib
import io
import json
import os
import tarfile

BUSYBOX = "/bin/busybox"  # busybox-static
# The applets the tests' containers use.
APPLETS = ("sh", "sleep", "echo", "cat", "ls", "sync", "date", "true")
# A name with a registry part, so that containerd does not rewrite it to
# docker.io/library/...: the CRI requests name it exactly so.
IMAGE = "localhost/kvolumed-busybox:1"


def _layer():
    """The root file system as an uncompressed tar, reproducibly."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for d in ("bin", "tmp", "dev", "proc", "sys", "etc", "data"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            t.addfile(info)
        with open(BUSYBOX, "rb") as f:
            data = f.read()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        t.addfile(info, io.BytesIO(data))
        for a in APPLETS:
            info = tarfile.TarInfo("bin/" + a)
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            t.addfile(info)
    return buf.getvalue()


def build(path, name=IMAGE):
    """Writes the archive to path.  The image's entrypoint sleeps until it is
    killed, so that it also serves as the sandbox ("pause") image."""
    layer = _layer()
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/bin/sleep"], "Cmd": ["2147483647"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name], "Layers": ["layer/layer.tar"]}]).encode()
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for member, data in ((config_name, config), ("layer/layer.tar", layer), ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return path


def available():
    """Why the image cannot be built here, or None."""
    return None if os.access(BUSYBOX, os.X_OK) else f"{BUSYBOX} is missing: install busybox-static"
