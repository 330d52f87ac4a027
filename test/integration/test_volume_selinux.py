"""SELinux mount context (KEP-1710): context="<label>" in the mount flags of
NodeStageVolume and NodePublishVolume where kubelet passes it, the label
recorded in vol_data.json as seLinuxMountContext, and one context per volume
on the node: a pod that needs another waits, also after a restart.

The host's SELinux state comes from KVOLUMED_TEST_SELINUXFS, a directory
standing for /sys/fs/selinux (enabled when it holds "enforce")."""
import json
import os
import signal

from integration.agent_fixtures import wait_until

LEVEL1 = "s0:c1,c2"
LEVEL2 = "s0:c3,c4"
CTX1 = f"system_u:object_r:container_file_t:{LEVEL1}"
CTX2 = f"system_u:object_r:container_file_t:{LEVEL2}"
MOUNT_ALL = "[volumes]\nselinux-mount-all = true\n"


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def selinuxfs(tmp_path, monkeypatch, enabled=True):
    d = tmp_path / ("selinuxfs-on" if enabled else "selinuxfs-off")
    d.mkdir(exist_ok=True)
    if enabled:
        (d / "enforce").write_text("1\n")
    monkeypatch.setenv("KVOLUMED_TEST_SELINUXFS", str(d))


def volume(env, name, handle, modes, mount_options=None):
    """A PV with these access modes and its bound claim (named like the PV)."""
    env.pv(name, handle, claim=name)
    pv = env.api.get("persistentvolumes", None, name)
    pv["spec"]["accessModes"] = modes
    if mount_options:
        pv["spec"]["mountOptions"] = mount_options
    env.api.update(pv)
    env.pvc(name, name)


def pod(env, name, claim, level=None, policy=None, **options):
    sc = {}
    if level or options:
        sc["seLinuxOptions"] = {**options, **({"level": level} if level else {})}
    if policy:
        sc["seLinuxChangePolicy"] = policy
    return env.pod(name, [claim_volume("data", claim)], security_context=sc or None)


def flags(call):
    return call["request"]["volume_capability"]["mount"].get("mount_flags", [])


# The driver logs a call after answering it: a mount may be there before its call is logged.
def publish_flags(env, target):
    calls = wait_until(lambda: [c for c in env.calls("NodePublishVolume") if c["request"]["target_path"] == target],
                       what=f"NodePublishVolume for {target}")
    return flags(calls[-1])


def stage_flags(env, handle):
    calls = wait_until(lambda: [c for c in env.calls("NodeStageVolume") if c["request"]["volume_id"] == handle],
                       what=f"NodeStageVolume of {handle}")
    return flags(calls[-1])


def vol_data(path):
    with open(os.path.join(os.path.dirname(path), "vol_data.json")) as f:
        return json.load(f)


def context(ctx):
    return f'context="{ctx}"'


def test_rwop_volume_is_staged_and_published_with_the_pods_context(volume_env, tmp_path, monkeypatch):
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-rwop", "vol-rwop", ["ReadWriteOncePod"], mount_options=["noatime"])
    env.start()
    # The label is the file label of the pod's process label: its user and
    # level, the runtime's object_r and container_file_t.
    p = pod(env, "web", "pv-rwop", level=LEVEL1, user="staff_u", role="staff_r", type="spc_t")
    target = env.target(p, "pv-rwop")
    env.wait_mounted(target)
    want = "staff_u:object_r:container_file_t:" + LEVEL1
    assert stage_flags(env, "vol-rwop") == ["noatime", context(want)]
    assert publish_flags(env, target) == ["noatime", context(want)]
    assert vol_data(env.staging("vol-rwop"))["seLinuxMountContext"] == want
    assert vol_data(target)["seLinuxMountContext"] == want
    assert not env.driver.violations()


def test_context_only_where_kubelet_passes_it(volume_env, tmp_path, monkeypatch):
    """RWOP with a level gets it; an RWX volume (no switch), a pod without a
    level and a pod that asks for Recursive relabelling do not."""
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-yes", "vol-yes", ["ReadWriteOncePod"])
    volume(env, "pv-rwx", "vol-rwx", ["ReadWriteMany"])
    volume(env, "pv-nolevel", "vol-nolevel", ["ReadWriteOncePod"])
    volume(env, "pv-recursive", "vol-recursive", ["ReadWriteOncePod"])
    env.start()
    pods = {
        "pv-yes": pod(env, "yes", "pv-yes", level=LEVEL1),
        "pv-rwx": pod(env, "rwx", "pv-rwx", level=LEVEL1, policy="MountOption"),
        "pv-nolevel": pod(env, "nolevel", "pv-nolevel", user="system_u"),
        "pv-recursive": pod(env, "recursive", "pv-recursive", level=LEVEL1, policy="Recursive"),
    }
    for pv, p in pods.items():
        env.wait_mounted(env.target(p, pv))
    assert stage_flags(env, "vol-yes") == [context(CTX1)]
    assert publish_flags(env, env.target(pods["pv-yes"], "pv-yes")) == [context(CTX1)]
    for pv in ("pv-rwx", "pv-nolevel", "pv-recursive"):
        assert stage_flags(env, pv.replace("pv-", "vol-")) == [], pv
        assert publish_flags(env, env.target(pods[pv], pv)) == [], pv
        assert "seLinuxMountContext" not in vol_data(env.target(pods[pv], pv)), pv
        assert "seLinuxMountContext" not in vol_data(env.staging(pv.replace("pv-", "vol-"))), pv


def test_no_context_without_selinux_on_the_host_nor_for_a_driver_without_selinux_mount(
        volume_env, tmp_path, monkeypatch):
    env = volume_env
    selinuxfs(tmp_path, monkeypatch, enabled=False)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    for n in (1, 2, 3):
        volume(env, f"pv-{n}", f"vol-{n}", ["ReadWriteOncePod"])
    env.start()
    p1 = pod(env, "one", "pv-1", level=LEVEL1)
    env.wait_mounted(env.target(p1, "pv-1"))
    assert stage_flags(env, "vol-1") == [] and publish_flags(env, env.target(p1, "pv-1")) == []

    # The same node with SELinux: the driver's seLinuxMount decides.
    env.agent.stop()
    selinuxfs(tmp_path, monkeypatch, enabled=True)
    driver = env.api.get("csidrivers", None, "mock.csi.kvolumed.io")
    driver["spec"]["seLinuxMount"] = False
    env.api.update(driver)
    env.start()
    p2 = pod(env, "two", "pv-2", level=LEVEL1)
    env.wait_mounted(env.target(p2, "pv-2"))
    assert stage_flags(env, "vol-2") == [] and publish_flags(env, env.target(p2, "pv-2")) == []

    driver = env.api.get("csidrivers", None, "mock.csi.kvolumed.io")
    driver["spec"]["seLinuxMount"] = True
    env.api.update(driver)
    p3 = pod(env, "three", "pv-3", level=LEVEL1)
    env.wait_mounted(env.target(p3, "pv-3"))
    assert stage_flags(env, "vol-3") == [context(CTX1)]
    assert publish_flags(env, env.target(p3, "pv-3")) == [context(CTX1)]
    # The first volume was not set up again with a context.
    assert len([c for c in env.calls("NodeStageVolume") if c["request"]["volume_id"] == "vol-1"]) == 1


def test_switch_passes_context_for_pods_asking_mount_option(volume_env, tmp_path, monkeypatch):
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-opt", "vol-opt", ["ReadWriteMany"])
    volume(env, "pv-unset", "vol-unset", ["ReadWriteOnce"])
    env.start(extra=MOUNT_ALL)
    a = pod(env, "opt", "pv-opt", level=LEVEL1, policy="MountOption")
    b = pod(env, "unset", "pv-unset", level=LEVEL1)
    env.wait_mounted(env.target(a, "pv-opt"))
    env.wait_mounted(env.target(b, "pv-unset"))
    assert stage_flags(env, "vol-opt") == [context(CTX1)]
    assert publish_flags(env, env.target(a, "pv-opt")) == [context(CTX1)]
    assert vol_data(env.target(a, "pv-opt"))["seLinuxMountContext"] == CTX1
    assert stage_flags(env, "vol-unset") == []
    assert publish_flags(env, env.target(b, "pv-unset")) == []


def test_pod_needing_another_context_waits_until_the_first_pod_goes(volume_env, tmp_path, monkeypatch):
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-shared", "vol-shared", ["ReadWriteMany"])
    env.start(extra=MOUNT_ALL)
    a = pod(env, "a", "pv-shared", level=LEVEL1, policy="MountOption")
    env.wait_mounted(env.target(a, "pv-shared"))
    b = pod(env, "b", "pv-shared", level=LEVEL2, policy="MountOption")
    event = env.wait_event("FailedMount", "conflicting SELinux labels")[0]
    assert event["involvedObject"]["name"] == "b"
    assert f'"{CTX1}" and "{CTX2}"' in event["message"]
    assert not [c for c in env.calls("NodePublishVolume")
                if c["request"]["target_path"] == env.target(b, "pv-shared")]
    assert len(env.wait_calls("NodeStageVolume")) == 1

    # The first pod goes: the volume is unstaged and staged again with b's context.
    env.api.remove("pods", "default", "a")
    env.wait_mounted(env.target(b, "pv-shared"))
    assert os.path.exists(env.target(a, "pv-shared")) is False
    env.wait_calls("NodeStageVolume", 2)
    env.wait_calls("NodePublishVolume", 2)
    methods = [c["method"] for c in env.calls() if c["method"] in
               ("NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume")]
    assert methods == ["NodeStageVolume", "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume",
                       "NodeStageVolume", "NodePublishVolume"]
    assert stage_flags(env, "vol-shared") == [context(CTX2)]
    assert publish_flags(env, env.target(b, "pv-shared")) == [context(CTX2)]
    assert vol_data(env.staging("vol-shared"))["seLinuxMountContext"] == CTX2
    assert not env.driver.violations()


def test_context_conflict_is_enforced_after_a_restart(volume_env, tmp_path, monkeypatch):
    """The context is read back from vol_data.json: without it, a pod that
    needs no context would share a volume mounted with one."""
    env = volume_env
    selinuxfs(tmp_path, monkeypatch)
    env.csidriver(attachRequired=False, seLinuxMount=True)
    volume(env, "pv-shared", "vol-shared", ["ReadWriteMany"])
    env.start(extra=MOUNT_ALL)
    a = pod(env, "a", "pv-shared", level=LEVEL1, policy="MountOption")
    env.wait_mounted(env.target(a, "pv-shared"))
    env.agent.proc.send_signal(signal.SIGKILL)
    env.agent.proc.wait()

    b = pod(env, "b", "pv-shared")  # no label: it needs no context
    env.start(extra=MOUNT_ALL)
    event = env.wait_event("FailedMount", "conflicting SELinux labels")[0]
    assert event["involvedObject"]["name"] == "b"
    assert f'"{CTX1}" and ""' in event["message"]
    assert not [c for c in env.calls("NodePublishVolume")
                if c["request"]["target_path"] == env.target(b, "pv-shared")]
    assert os.path.ismount(env.target(a, "pv-shared"))

    env.api.remove("pods", "default", "a")
    env.wait_mounted(env.target(b, "pv-shared"))
    env.wait_calls("NodeUnstageVolume")
    env.wait_calls("NodeStageVolume", 2)
    assert stage_flags(env, "vol-shared") == []
    assert publish_flags(env, env.target(b, "pv-shared")) == []
    assert "seLinuxMountContext" not in vol_data(env.staging("vol-shared"))
    assert not env.driver.violations()
