"""/metrics read by a real Prometheus text parser (prometheus_client, as a
scraper would): after a full flow, every family's type, labels and buckets as
kubelet's; kubelet_volume_stats_* from NodeGetVolumeStats for PVC volumes
(equal to the driver's answer, a statvfs of the target), never asked of a
driver without GET_VOLUME_STATS; the health gauge; a hung stats call that
neither delays a new pod's publish nor outlives its deadline; and kvolumed's
own families."""
import os
import signal
import time

from prometheus_client.parser import text_string_to_metric_families

from integration.agent_fixtures import DRIVER, VolumeEnv, wait_until, write_config
from integration.test_agent_metrics import SERVING, get

PLUGIN = "kubernetes.io/csi:" + DRIVER
KUBELET_BUCKETS = ["0.1", "0.25", "0.5", "1", "2.5", "5", "10", "15", "25", "50", "120", "300", "600", "+Inf"]
PVC_LABELS = {"namespace", "persistentvolumeclaim"}
STATS_GAUGES = ["kubelet_volume_stats_available_bytes", "kubelet_volume_stats_capacity_bytes",
                "kubelet_volume_stats_used_bytes", "kubelet_volume_stats_inodes",
                "kubelet_volume_stats_inodes_free", "kubelet_volume_stats_inodes_used"]
HEALTH = "kubelet_volume_stats_health_status_abnormal"
STATS_METHOD = "/csi.v1.Node/NodeGetVolumeStats"


def start(env, csi=""):
    """kvolumed as the node with [metrics] listen on a free port and `csi`
    in its [csi] section; returns the address /metrics is served on."""
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n', csi=csi)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("\nlisten =\n", "\nlisten = 127.0.0.1:0\n"))
    env.agent = env.start_agent(path)
    env.agent.wait_for_log("Serving /metrics")
    return SERVING.search(env.agent.output()).group(1)


def scrape(address):
    """{family name: Metric} as prometheus_client parses the text."""
    status, headers, body = get(address, "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    families = {}
    for fam in text_string_to_metric_families(body):
        assert fam.name not in families, f"family {fam.name} twice"
        families[fam.name] = fam
    return families


def value(families, family, sample_name=None, **labels):
    """The value of the one sample of `family` with exactly these labels (None if absent)."""
    fam = families.get(family)
    if fam is None:
        return None
    found = [s.value for s in fam.samples
             if (sample_name is None or s.name == sample_name) and s.labels == labels]
    assert len(found) <= 1, f"{family}{labels} twice"
    return found[0] if found else None


def statvfs_usage(path):
    """What the mock driver answers for a mounted volume: statvfs of the target."""
    s = os.statvfs(path)
    return {"kubelet_volume_stats_capacity_bytes": s.f_blocks * s.f_frsize,
            "kubelet_volume_stats_available_bytes": s.f_bavail * s.f_frsize,
            "kubelet_volume_stats_used_bytes": (s.f_blocks - s.f_bfree) * s.f_frsize,
            "kubelet_volume_stats_inodes": s.f_files,
            "kubelet_volume_stats_inodes_free": s.f_favail,
            "kubelet_volume_stats_inodes_used": s.f_files - s.f_ffree}


def claim_volume(name, claim):
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def stats_of(families, claim, namespace="default"):
    return {g: value(families, g, namespace=namespace, persistentvolumeclaim=claim) for g in STATS_GAUGES}


def make_env(fake_api, mock_csi_factory, start_agent, tmp_path, caps):
    driver = mock_csi_factory(name=DRIVER, tmpfs=True, caps=caps)
    return VolumeEnv(fake_api, driver, start_agent, tmp_path)


def persistent_volume(env, pv, handle, claim):
    env.pv(pv, handle, claim=claim)
    env.pvc(claim, pv)


def test_families_as_kubelets_after_a_full_flow(fake_api, mock_csi_factory, start_agent, tmp_path):
    env = make_env(fake_api, mock_csi_factory, start_agent, tmp_path,
                   ["STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS", "VOLUME_CONDITION"])
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    persistent_volume(env, "pv-data", "vol-data", "data")
    address = start(env, csi="stats-interval = 1s\n")
    # A failing call: the first publish fails, its retry succeeds.
    env.driver.control.fail_next("NodePublishVolume", "INTERNAL", "injected")
    web = env.pod("web", [claim_volume("data", "data"), {"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(web, "pv-data")
    env.wait_mounted(target)
    env.wait_mounted(env.target(web, "scratch"))
    # A second pod of the same claim: still one series per claim, as kubelet.
    other = env.pod("other", [claim_volume("data", "data")])
    env.wait_mounted(env.target(other, "pv-data"))

    def stats_current():
        fams = scrape(address)
        return stats_of(fams, "data") == statvfs_usage(target) and fams
    families = wait_until(stats_current, timeout=15, what="stats equal to statvfs of the target")
    empty = stats_of(families, "data")
    # Later rounds follow the volume: write to it, and the numbers follow.
    with open(os.path.join(target, "blob"), "wb") as f:
        f.write(b"x" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())
    assert statvfs_usage(target) != empty
    families = wait_until(stats_current, timeout=15, what="stats following a write")
    assert stats_of(families, "data")["kubelet_volume_stats_used_bytes"] >= \
        empty["kubelet_volume_stats_used_bytes"] + (1 << 20)

    for name in STATS_GAUGES + [HEALTH]:
        fam = families[name]
        assert fam.type == "gauge", name
        assert fam.documentation.startswith("[ALPHA] "), name
        # The PVC volume only: the inline volume has no claim, and kubelet
        # exports none for it; two pods of one claim make one series.
        assert [s.labels for s in fam.samples] == [{"namespace": "default", "persistentvolumeclaim": "data"}]
    assert families["kubelet_volume_stats_capacity_bytes"].documentation == "[ALPHA] Capacity in bytes of the volume"
    assert value(families, HEALTH, namespace="default", persistentvolumeclaim="data") == 0

    # The calls were what kubelet sends (csi_client.go NodeGetVolumeStats):
    # the handle and the publish target, never a staging path, even of a
    # staged volume.
    stats_calls = env.calls("NodeGetVolumeStats")
    targets = {env.target(web, "pv-data"), env.target(other, "pv-data")}
    assert stats_calls and {c["request"]["volume_path"] for c in stats_calls} <= targets
    assert all(c["request"]["volume_id"] == "vol-data" for c in stats_calls)
    assert all(not c["request"].get("staging_target_path") for c in stats_calls)

    # kubelet's histograms: labels and buckets.
    csi_ops = families["csi_operations_seconds"]
    assert csi_ops.type == "histogram"
    for s in csi_ops.samples:
        expected = {"driver_name", "method_name", "grpc_status_code", "migrated"} | (
            {"le"} if s.name.endswith("_bucket") else set())
        assert set(s.labels) == expected and s.labels["migrated"] == "false"
    publish = dict(driver_name=DRIVER, method_name="/csi.v1.Node/NodePublishVolume", migrated="false")
    assert value(families, "csi_operations_seconds", "csi_operations_seconds_count",
                 grpc_status_code="Internal", **publish) == 1
    assert value(families, "csi_operations_seconds", "csi_operations_seconds_count",
                 grpc_status_code="OK", **publish) == 3
    assert value(families, "csi_operations_seconds", "csi_operations_seconds_count", driver_name=DRIVER,
                 method_name=STATS_METHOD, grpc_status_code="OK", migrated="false") >= 2
    les = [s.labels["le"] for s in csi_ops.samples if s.name == "csi_operations_seconds_bucket"
           and s.labels["method_name"] == publish["method_name"] and s.labels["grpc_status_code"] == "OK"]
    assert [float(le) for le in les] == [float(b) for b in KUBELET_BUCKETS]

    storage = families["storage_operation_duration_seconds"]
    assert storage.type == "histogram"
    assert {s.labels["volume_plugin"] for s in storage.samples} == {PLUGIN}
    assert {s.labels["status"] for s in storage.samples} == {"success", "fail-unknown"}
    for op, status in [("volume_mount", "success"), ("volume_mount", "fail-unknown"), ("mount_device", "success")]:
        assert value(families, "storage_operation_duration_seconds", "storage_operation_duration_seconds_count",
                     volume_plugin=PLUGIN, operation_name=op, status=status, migrated="false") >= 1, (op, status)
    les = sorted({s.labels["le"] for s in storage.samples if s.name.endswith("_bucket")}, key=float)
    assert [float(le) for le in les] == [float(b) for b in KUBELET_BUCKETS]

    # volume_manager_total_volumes: kubelet's gauge, per plugin and state.
    total = families["volume_manager_total_volumes"]
    assert total.type == "gauge" and total.documentation == "[ALPHA] Number of volumes in Volume Manager"
    assert value(families, "volume_manager_total_volumes", plugin_name=PLUGIN, state="desired_state_of_world") == 3
    assert value(families, "volume_manager_total_volumes", plugin_name=PLUGIN, state="actual_state_of_world") == 3

    # kvolumed's own.
    reconcile = families["kvolumed_reconcile_seconds"]
    assert reconcile.type == "histogram"
    assert value(families, "kvolumed_reconcile_seconds", "kvolumed_reconcile_seconds_count") >= 3
    assert families["kvolumed_volumes"].type == "gauge"
    assert value(families, "kvolumed_volumes", state="published") == 3
    in_flight = families["kvolumed_csi_calls_in_flight"]
    assert in_flight.type == "gauge" and [s.labels for s in in_flight.samples] == [{"driver_name": DRIVER}]
    assert families["kvolumed_csi_calls_queued"].type == "gauge"

    # Watches that end are restarted, and counted per resource.
    # The parser names a counter family without its "_total".
    restarts = families["kvolumed_api_watch_restarts"]
    assert restarts.type == "counter"
    assert {s.name for s in restarts.samples} == {"kvolumed_api_watch_restarts_total"}
    before = {s.labels["resource"]: s.value for s in restarts.samples}
    assert set(before) == {"pods", "csidrivers", "nodes"}
    assert env.api.close_watches() >= 3

    def restarted():
        fams = scrape(address)
        now = {s.labels["resource"]: s.value for s in fams["kvolumed_api_watch_restarts"].samples}
        return all(now[r] >= before[r] + 1 for r in before)
    wait_until(restarted, timeout=10, what="the watches restarted and counted")

    # An unpublished volume's series go.
    env.api.remove("pods", "default", "web")
    env.api.remove("pods", "default", "other")
    env.wait_gone(os.path.dirname(target))

    def series_gone():
        fams = scrape(address)
        return all(name not in fams for name in STATS_GAUGES + [HEALTH]) and fams
    wait_until(series_gone, timeout=10, what="the stats series gone with the volume")
    # The publish dir goes with the unpublish; the volume leaves the actual
    # state only with its unstage, which follows.
    wait_until(lambda: value(scrape(address), "volume_manager_total_volumes", plugin_name=PLUGIN,
                             state="actual_state_of_world") is None,
               timeout=10, what="the volume gone from the actual state after its unstage")


def test_stats_never_asked_of_a_driver_without_the_capability(fake_api, mock_csi_factory, start_agent, tmp_path):
    env = make_env(fake_api, mock_csi_factory, start_agent, tmp_path, ["STAGE_UNSTAGE_VOLUME"])
    env.csidriver(attachRequired=False)
    persistent_volume(env, "pv-data", "vol-data", "data")
    address = start(env, csi="stats-interval = 1s\n")
    pod = env.pod("web", [claim_volume("data", "data")])
    env.wait_mounted(env.target(pod, "pv-data"))
    # Rounds run (and say why they ask nothing): two of them.
    wait_until(lambda: env.agent.output().count(
        f"Volume stats round of driver {DRIVER}: it has no GET_VOLUME_STATS capability") >= 2,
        timeout=15, what="two stats rounds")
    assert not env.calls("NodeGetVolumeStats")
    families = scrape(address)
    assert not [name for name in families if name.startswith("kubelet_volume_stats_")]
    assert value(families, "csi_operations_seconds", "csi_operations_seconds_count", driver_name=DRIVER,
                 method_name=STATS_METHOD, grpc_status_code="OK", migrated="false") is None


def test_no_health_gauge_without_volume_condition(fake_api, mock_csi_factory, start_agent, tmp_path):
    env = make_env(fake_api, mock_csi_factory, start_agent, tmp_path, ["GET_VOLUME_STATS"])
    env.csidriver(attachRequired=False)
    persistent_volume(env, "pv-data", "vol-data", "data")
    address = start(env, csi="stats-interval = 1s\n")
    pod = env.pod("web", [claim_volume("data", "data")])
    target = env.target(pod, "pv-data")
    env.wait_mounted(target)

    def sampled():
        fams = scrape(address)
        return stats_of(fams, "data") == statvfs_usage(target) and fams
    families = wait_until(sampled, timeout=15, what="the stats of the claim")
    assert HEALTH not in families
    # Not staged (no STAGE_UNSTAGE_VOLUME): no staging path is sent.
    assert all(not c["request"].get("staging_target_path") for c in env.calls("NodeGetVolumeStats"))


def test_hung_stats_call_delays_no_publish_and_is_cut_off(fake_api, mock_csi_factory, start_agent, tmp_path):
    env = make_env(fake_api, mock_csi_factory, start_agent, tmp_path,
                   ["STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"])
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent", "Ephemeral"])
    persistent_volume(env, "pv-data", "vol-data", "data")
    # One CSI call at a time for everything else: a stats call holding that
    # one slot would stop every publish.  A stats call is cut off after
    # call-timeout here (10 s otherwise).
    address = start(env, csi="stats-interval = 1s\nmax-parallel = 1\ncall-timeout = 6s\n")
    web = env.pod("web", [claim_volume("data", "data")])
    env.wait_mounted(env.target(web, "pv-data"))
    env.wait_calls("NodeGetVolumeStats", code="OK")

    env.driver.control.hang("NodeGetVolumeStats", count=-1)
    env.driver.control.wait_hung("NodeGetVolumeStats", timeout=15)
    hung_at = time.monotonic()
    # A new pod's volume is published while the stats call hangs.
    late = env.pod("late", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(late, "scratch"), timeout=5)
    assert time.monotonic() - hung_at < 6
    families = scrape(address)
    cut = dict(driver_name=DRIVER, method_name=STATS_METHOD, grpc_status_code="DeadlineExceeded", migrated="false")
    assert value(families, "csi_operations_seconds", "csi_operations_seconds_count", **cut) is None, \
        "the publish waited for the stats call to end"
    assert env.driver.control.hung().get("NodeGetVolumeStats", 0) >= 1
    assert value(families, "kvolumed_csi_calls_in_flight", driver_name=DRIVER) >= 1

    # The hung call is cut off at its deadline; its numbers go; the next round
    # asks again (and hangs again).
    def cut_off():
        fams = scrape(address)
        return (value(fams, "csi_operations_seconds", "csi_operations_seconds_count", **cut) or 0) >= 1 and fams
    families = wait_until(cut_off, timeout=15, what="the stats call cut off")
    assert time.monotonic() - hung_at >= 5.5
    assert "kubelet_volume_stats_capacity_bytes" not in families
    env.driver.control.wait_hung("NodeGetVolumeStats", timeout=15)

    # Once the driver answers again, so do the stats.
    env.driver.control.clear_faults("NodeGetVolumeStats")
    target = env.target(web, "pv-data")

    def answered():
        fams = scrape(address)
        return stats_of(fams, "data") == statvfs_usage(target)
    wait_until(answered, timeout=20, what="stats again after the driver recovered")


def test_stats_interval_applies_on_reload(fake_api, mock_csi_factory, start_agent, tmp_path):
    env = make_env(fake_api, mock_csi_factory, start_agent, tmp_path, ["STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"])
    env.csidriver(attachRequired=False)
    persistent_volume(env, "pv-data", "vol-data", "data")
    address = start(env, csi="stats-interval = 1s\n")
    pod = env.pod("web", [claim_volume("data", "data")])
    target = env.target(pod, "pv-data")
    env.wait_mounted(target)
    wait_until(lambda: stats_of(scrape(address), "data") == statvfs_usage(target), timeout=15, what="stats")

    # Off: the series go and no call follows.
    config = str(env.tmp_path / "kvolumed.conf")
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace("stats-interval = 1s\n", "stats-interval = 0\n"))
    env.agent.signal(signal.SIGHUP)
    env.agent.wait_for_log("Configuration reloaded")
    assert "kubelet_volume_stats_capacity_bytes" not in scrape(address)
    off_at = time.time()
    # Nothing is to happen: watched for more than two intervals.
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert "kubelet_volume_stats_capacity_bytes" not in scrape(address)
        time.sleep(0.1)
    assert not [c for c in env.calls("NodeGetVolumeStats") if c["time"] > off_at]

    # On again: back within a round.
    with open(config, "w") as f:
        f.write(text)
    env.agent.signal(signal.SIGHUP)
    wait_until(lambda: stats_of(scrape(address), "data") == statvfs_usage(target), timeout=15,
               what="stats after turning them on again")
    assert [c for c in env.calls("NodeGetVolumeStats") if c["time"] > off_at]


def test_stats_rounds_beside_kinds_without_a_driver(fake_api, mock_csi_factory, start_agent, tmp_path):
    """A stats round finds its drivers and their volumes among every volume
    of the node, and the kinds without a driver are there too: a local PV
    (persistent, driver NULL, hashed as a driver's name) and emptyDirs
    (compared by strcmp with NULL).  kvolumed crashed an interval after
    its start on any node with one of them and a driver that has
    GET_VOLUME_STATS.  Two rounds, the claim's stats current, kvolumed up."""
    from integration.test_volume_local import local_pv
    env = make_env(fake_api, mock_csi_factory, start_agent, tmp_path, ["STAGE_UNSTAGE_VOLUME", "GET_VOLUME_STATS"])
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Persistent"])
    persistent_volume(env, "pv-data", "vol-data", "data")
    disk = tmp_path / "disk"
    disk.mkdir()
    local_pv(env, "pv-local", disk, claim="local")
    env.pvc("local", "pv-local")
    address = start(env, csi="stats-interval = 1s\n")
    caches = [{"name": f"cache-{i}", "emptyDir": {}} for i in range(4)]
    web = env.pod("web", [claim_volume("data", "data"), claim_volume("local", "local")] + caches)
    target = env.target(web, "pv-data")
    env.wait_mounted(target)
    pod_dir = f"{env.root}/pods/{web['metadata']['uid']}/volumes"
    wait_until(lambda: os.path.ismount(f"{pod_dir}/kubernetes.io~local-volume/pv-local") or
               any(line.split()[4] == f"{pod_dir}/kubernetes.io~local-volume/pv-local"
                   for line in open("/proc/self/mountinfo")), timeout=15, what="the local PV")
    wait_until(lambda: all(os.path.isdir(f"{pod_dir}/kubernetes.io~empty-dir/cache-{i}") for i in range(4)),
               timeout=15, what="the emptyDirs")
    rounds = len(env.calls("NodeGetVolumeStats"))
    wait_until(lambda: len(env.calls("NodeGetVolumeStats")) >= rounds + 2 or env.agent.proc.poll() is not None,
               timeout=30, what="two stats rounds")
    assert env.agent.proc.poll() is None, env.agent.output()[-3000:]
    assert stats_of(scrape(address), "data") == statvfs_usage(target)
    # The local PV's bind is kvolumed's to undo, not the mock driver's.
    env.api.remove("pods", "default", "web")
    env.wait_gone(f"{env.root}/pods/{web['metadata']['uid']}", timeout=30)
