"""A publish whose NodePublishVolume answered OK, and a step after it failed
(here the read of the claim that decides an expansion inside the publish,
kubelet's expandVolumeDuringMount, answered 429 by a busy API server), is
retried from after the call: the driver is not asked to publish again what it
said it published.  Found by the fault storm (test/storm, api-429): a shared
PV's publish was called 4 more times, 1, 2, 4 and 8 s apart, after OK answers.
Only when the target is no longer mounted is the call made again."""
import os
import subprocess

from integration.agent_fixtures import wait_until

CLAIM_PATH = "/api/v1/namespaces/default/persistentvolumeclaims/"
PV_PATH = "/api/v1/persistentvolumes/"
FAILED = "MountVolume.Setup failed while expanding volume"


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def shared_volume(env, name="shared"):
    env.csidriver(attachRequired=False)
    env.pv(f"pv-{name}", f"vol-{name}", claim=name)
    pv = env.api.get("persistentvolumes", None, f"pv-{name}")
    pv["spec"]["accessModes"] = ["ReadWriteMany"]
    pv["metadata"].pop("resourceVersion", None)
    env.api.update(pv)
    env.pvc(name, f"pv-{name}")


def publishes_by_target(env):
    """target → the codes of its NodePublishVolume calls, in order."""
    by = {}
    for c in sorted(env.calls("NodePublishVolume"), key=lambda c: c["time"]):
        by.setdefault(c["request"]["target_path"], []).append(c["code"])
    return by


def failures(env):
    return env.agent.output().count(FAILED)


def wait_published(env, pod, timeout=60):
    env.agent.wait_for_log(f"Volume pv-shared published for pod default/{pod['metadata']['name']} ", timeout)


def test_shared_pv_publish_is_not_called_again_when_its_claim_read_meets_429(staged_volume_env):
    """The storm's case: pods of one shared PV, their publishes answered at
    once, while every GET of the claim and its PV is answered 429."""
    env = staged_volume_env
    shared_volume(env)
    # Calls keyed by volume and target path: both publishes in the driver at once.
    env.driver.control.set_config(op_lock="target")
    env.driver.control.hang("NodePublishVolume", count=2)
    env.start()
    pods = [env.pod(f"p{i}", [claim_volume("data", "shared")]) for i in range(2)]
    env.driver.control.wait_hung("NodePublishVolume", 2, timeout=60)
    env.api.fail_next(10 ** 6, status=429, retry_after=1, path_prefix=CLAIM_PATH, method="GET")
    env.api.fail_next(10 ** 6, status=429, retry_after=1, path_prefix=PV_PATH, method="GET")
    env.driver.control.release("NodePublishVolume")

    wait_until(lambda: failures(env) >= 1, 60, what="a publish failed by the claim's 429")
    # Both may fail for as long as the claim cannot be read: the first to
    # count as done spares the other its read.
    env.api.clear_faults()
    for p in pods:
        wait_published(env, p)
    by = publishes_by_target(env)
    assert sorted(by) == sorted(env.target(p, "pv-shared") for p in pods)
    # One call per target, answered OK: never called again after that.
    assert all(codes == ["OK"] for codes in by.values()), by
    assert not env.driver.violations()


def test_publish_retried_through_a_429_storm_resumes_after_its_call(volume_env):
    """Every API request answered 429 with Retry-After, as in the storm: the
    publish's claim read fails again and again; each retry reads again, and
    none repeats NodePublishVolume.  Once the server answers, the publish
    completes without another call."""
    env = volume_env
    shared_volume(env)
    env.driver.control.hang("NodePublishVolume")
    env.start()
    pod = env.pod("p0", [claim_volume("data", "shared")])
    env.driver.control.wait_hung("NodePublishVolume", timeout=60)
    env.api.fail_next(10 ** 9, status=429, retry_after=1)
    env.driver.control.release("NodePublishVolume")

    wait_until(lambda: failures(env) >= 3, 60, what="three failed attempts of the publish")
    assert publishes_by_target(env) == {env.target(pod, "pv-shared"): ["OK"]}
    env.agent.wait_for_log("resuming after the call", 5)
    env.api.clear_faults()
    wait_published(env, pod)
    assert publishes_by_target(env) == {env.target(pod, "pv-shared"): ["OK"]}
    assert os.path.ismount(env.target(pod, "pv-shared"))
    assert not env.driver.violations()


def test_a_publish_whose_target_went_meanwhile_is_called_again(volume_env):
    """What the earlier call made is gone (unmounted behind kvolumed's back
    between two attempts): the retry publishes again, it does not resume."""
    env = volume_env
    shared_volume(env)
    env.driver.control.hang("NodePublishVolume")
    env.start()
    pod = env.pod("p0", [claim_volume("data", "shared")])
    target = env.target(pod, "pv-shared")
    env.driver.control.wait_hung("NodePublishVolume", timeout=60)
    env.api.fail_next(10 ** 9, status=429, retry_after=1, path_prefix=CLAIM_PATH, method="GET")
    env.driver.control.release("NodePublishVolume")

    wait_until(lambda: failures(env) >= 1, 60, what="a publish failed by the claim's 429")
    subprocess.run(["umount", target], check=True)
    env.api.clear_faults()
    wait_published(env, pod)
    env.wait_mounted(target)
    assert publishes_by_target(env) == {target: ["OK", "OK"]}
    assert f"{target.split(env.root + '/', 1)[1]} is not mounted any more" in env.agent.output()
    assert not env.driver.violations()


def failed_teardowns(env, method):
    return sum(1 for line in env.agent.output().splitlines()
               if f"{method} succeeded, but" in line and "No retries permitted" in line)


def test_an_unpublish_whose_dirs_stay_is_not_called_again(volume_env):
    """NodeUnpublishVolume answered OK, then the pod's volume dir could not be
    removed (something left a file in it): the retries only remove what is
    left, they do not unpublish again what the driver said it unpublished."""
    env = volume_env
    shared_volume(env)
    env.start()
    pod = env.pod("p0", [claim_volume("data", "shared")])
    target = env.target(pod, "pv-shared")
    env.wait_mounted(target)
    stray = os.path.join(os.path.dirname(target), "left-behind")
    with open(stray, "w") as f:
        f.write("not kvolumed's\n")
    env.api.remove("pods", "default", "p0")

    wait_until(lambda: failed_teardowns(env, "NodeUnpublishVolume") >= 3, 60,
               what="three failed attempts of the unpublish")
    assert len(env.calls("NodeUnpublishVolume")) == 1
    assert "NodeUnpublishVolume of" in env.agent.output() and "resuming after the call" in env.agent.output()
    os.unlink(stray)
    env.wait_gone(os.path.dirname(target), timeout=60)
    env.wait_calls("NodeUnstageVolume", timeout=60)
    assert [c["code"] for c in env.calls("NodeUnpublishVolume")] == ["OK"]
    assert not env.driver.violations()


def test_an_unstage_whose_dirs_stay_is_not_called_again(volume_env):
    """The same for NodeUnstageVolume and the volume's staging dir."""
    env = volume_env
    shared_volume(env)
    env.start()
    pod = env.pod("p0", [claim_volume("data", "shared")])
    env.wait_mounted(env.target(pod, "pv-shared"))
    staging_dir = os.path.dirname(env.staging("vol-shared"))
    stray = os.path.join(staging_dir, "left-behind")
    with open(stray, "w") as f:
        f.write("not kvolumed's\n")
    env.api.remove("pods", "default", "p0")

    wait_until(lambda: failed_teardowns(env, "NodeUnstageVolume") >= 3, 60,
               what="three failed attempts of the unstage")
    assert len(env.calls("NodeUnstageVolume")) == 1
    os.unlink(stray)
    env.wait_gone(staging_dir, timeout=60)
    assert [c["code"] for c in env.calls("NodeUnstageVolume")] == ["OK"]
    assert not env.driver.violations()
