"""What the tests of the kinds kvolumed sets up itself (configMap, secret,
downwardAPI, projected, emptyDir) share: where a pod's volume is, what is
in it and on what it is mounted, and the restart and reboot they go
through."""
import glob
import json
import os
import signal

# A boot ID no boot has: the records then name a previous boot.
OTHER_BOOT_ID = "00000000-0000-4000-8000-000000000000"


def vol_dir(env, pod, kind, name):
    return f"{env.root}/pods/{pod['metadata']['uid']}/volumes/kubernetes.io~{kind}/{name}"


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def mounts_under(root):
    """The mountinfo fields of every mount below root."""
    with open("/proc/self/mountinfo") as f:
        return [line.split() for line in f if line.split()[4].startswith(root + "/")]


def fs_type(path):
    for fields in mounts_under(os.path.dirname(path.rstrip("/"))):
        if fields[4] == path:
            return fields[fields.index("-") + 1]
    return None


def snapshot(d):
    """What a rewrite would change: the version ..data names, and the inode
    of every file and symlink in the volume."""
    found = {"..data": os.readlink(f"{d}/..data")}
    for path in sorted(glob.glob(f"{d}/**", recursive=True) + glob.glob(f"{d}/..data/*")):
        st = os.lstat(path)
        found[os.path.relpath(path, d)] = (st.st_ino, st.st_mtime_ns)
    return found


def remove_pods(env, *pods):
    """The pods go: their volumes are torn down, nothing left under root-dir."""
    for pod in pods:
        env.api.remove("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    for pod in pods:
        env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)
    assert not mounts_under(env.root)


def kill_agent(env):
    """SIGKILL: no chance to finish anything."""
    env.agent.proc.send_signal(signal.SIGKILL)
    env.agent.proc.wait(timeout=30)


def records_of_previous_boot(root):
    """What a reboot leaves: every intent record under root names another
    boot (the caller undoes the mounts and devices the boot took along)."""
    for path in glob.glob(f"{root}/**/kvolumed*.json", recursive=True):
        with open(path) as f:
            record = json.load(f)
        record["bootID"] = OTHER_BOOT_ID
        with open(path, "w") as f:
            json.dump(record, f)
