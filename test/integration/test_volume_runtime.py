"""The runtime gate (DESIGN.md §3): no volume of a pod is unpublished while the
container runtime, asked over CRI at [runtime] endpoint, says a container of
the pod is created or running, or a sandbox of the pod is READY (a runner
starts a crash-looping container's next attempt, or the first one after an
image pull, in it), whatever the API says.  Against the mock CRI runtime of
test/doubles/mockcri."""
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import time
import urllib.request

import grpc
import pytest

from doubles.mockcri import MockRuntime
from doubles.mockcri.proxy import HoldingProxy
from integration.agent_fixtures import DRIVER, wait_until, write_config

WAIT_LINE = "container runtime"  # part of every gate log line


def _mock_cri(events):
    # A short directory: a socket path must fit in 107 bytes.
    d = tempfile.mkdtemp(prefix="cri-", dir="/tmp")
    rt = MockRuntime(os.path.join(d, "cri.sock"), events=events)
    rt.start()
    yield rt
    rt.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def mock_cri():
    """Debian 12's containerd 1.6: no GetContainerEvents."""
    yield from _mock_cri("unimplemented")


@pytest.fixture
def mock_cri_events():
    """containerd 1.7 and later: GetContainerEvents streams."""
    yield from _mock_cri("stream")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(env, cri, metrics_port=None, libcurl="system"):
    """kvolumed with the runtime gate on, optionally with /volumes, and with
    this machine's libcurl (7.88: a connection per call) or libcurl 8 from
    bookworm-backports (connections reused and multiplexed)."""
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    if metrics_port is None and libcurl == "system":
        return env.start(extra=f"[runtime]\nendpoint = {cri.endpoint}\n")
    agent_env = None
    if libcurl == "curl8":
        from integration.test_csi_client import curl8_libdir
        agent_env = dict(os.environ, LD_LIBRARY_PATH=curl8_libdir())
    path = write_config(env.tmp_path / "kvolumed.conf", env.root, env.api.node_kubeconfig("test-node"),
                        f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n'
                        f"[runtime]\nendpoint = {cri.endpoint}\n")
    if metrics_port is not None:
        text = open(path).read().replace("\nlisten =\n", f"\nlisten = 127.0.0.1:{metrics_port}\n")
        open(path, "w").write(text)
    env.agent = env.start_agent(path, env=agent_env)
    return env.agent


def running_pod(env, cri, name):
    """A pod whose inline volume is published and whose container runs."""
    pod = env.pod(name, [{"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    cri.add_pod(pod["metadata"]["uid"], name=name)
    return pod, target


def unpublished(env, target):
    return [c for c in env.calls("NodeUnpublishVolume") if c["request"]["target_path"] == target]


def volumes_json(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/volumes", timeout=5) as r:
        return json.load(r)


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def wait_held(env, cri, pod, target, since):
    """The gate has asked the runtime since `since`, been told the container
    runs, and said so; the volume is still there."""
    uid = pod["metadata"]["uid"]
    env.agent.wait_for_log(f"Not unpublishing volume scratch of pod default/{pod['metadata']['name']}", timeout=15)
    assert any(m == "ListContainers" for _, m in cri.requests(since))
    assert os.path.ismount(target)
    assert not unpublished(env, target)
    assert f"POD_UID={uid}" in env.agent.output()


def release(env, cri, pod, target, stop=None):
    """The runner stops the pod (`stop`, by default all of it at once);
    once the volume is unpublished, how long after the stop the gate asked
    the runtime the question that freed it: what its backoff bounds.  The
    unpublish after that writes durably and calls the driver, which a
    loaded disk made take seconds: waited for, not timed."""
    if stop:
        stop()
    else:
        cri.stop_pod(pod["metadata"]["uid"])
    stopped = cri.changes("stop")[-1][0]
    wait_until(lambda: unpublished(env, target), timeout=30, interval=0.01, what="NodeUnpublishVolume")
    after = rounds(cri, stopped)
    # None after the stop: the round that freed the pod was logged by the
    # runtime just before the stop, and listed after it.
    return after[0] - stopped if after else 0.0


def test_force_deleted_pod_keeps_volume_while_its_container_runs(volume_env, mock_cri):
    env, cri = volume_env, mock_cri
    port = free_port()
    start(env, cri, metrics_port=port)
    pod, target = running_pod(env, cri, "web")
    uid = pod["metadata"]["uid"]
    since = time.monotonic()
    env.api.remove("pods", "default", "web")  # force delete: gone from the API at once
    wait_held(env, cri, pod, target, since)
    # /volumes says why; the metric counts the waiting pod.
    pubs = [p for v in volumes_json(port)["volumes"] for p in v.get("publishes", []) if p["pod_uid"] == uid]
    assert pubs and "still created or running" in pubs[0]["teardown_waits"]
    assert metric(port, "kvolumed_runtime_waiting_pods") == 1
    assert metric(port, "kvolumed_runtime_errors_total") == 0
    # Still held after several more rounds of the runtime saying so.
    n = len(cri.requests(since))
    wait_until(lambda: len(cri.requests(since)) >= n + 4, timeout=15, what="more rounds of the gate")
    assert os.path.ismount(target) and not unpublished(env, target)
    assert env.agent.output().count("Not unpublishing volume scratch") == 1  # once per wait

    asked = release(env, cri, pod, target)
    env.wait_gone(os.path.dirname(target))
    # The backoff is capped at 1 s; the slack is for a loaded machine.
    assert asked < 3.0, f"the runtime was asked again {asked:.2f}s after the container stopped"
    wait_until(lambda: metric(port, "kvolumed_runtime_waiting_pods") == 0, what="no pod waiting")


def test_graceful_delete_terminated_in_api_but_running_in_runtime(volume_env, mock_cri):
    """The API's status says the container terminated; the runtime knows
    better.  The pod object stays (graceful deletion), with no sandbox label:
    a runner that is not kubelet may set none, the sandbox's metadata.uid is
    what counts."""
    env, cri = volume_env, mock_cri
    start(env, cri)
    pod = env.pod("job", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    cri.add_pod(pod["metadata"]["uid"], name="job", kubelet_labels=False)
    since = time.monotonic()
    pod = env.api.get("pods", "default", "job")
    pod["status"]["containerStatuses"] = [{"name": "c", "ready": False, "restartCount": 0, "image": "busybox",
                                           "imageID": "", "state": {"terminated": {
                                               "exitCode": 0, "startedAt": "2026-11-22T00:00:00Z",
                                               "finishedAt": "2026-11-22T00:01:00Z"}}}]
    # (A terminal phase would make the API server delete the object at once.)
    env.api.update(pod)
    env.api.delete("pods", "default", "job", grace_period_seconds=30)
    wait_held(env, cri, pod, target, since)
    assert env.api.get("pods", "default", "job") is not None
    asked = release(env, cri, pod, target)
    env.wait_gone(os.path.dirname(target))
    assert asked < 3.0, f"the runtime was asked again {asked:.2f}s after the container stopped"


def test_runtime_unreachable_holds_every_teardown(volume_env, mock_cri):
    env, cri = volume_env, mock_cri
    port = free_port()
    start(env, cri, metrics_port=port)
    pod, target = running_pod(env, cri, "web")
    cri.stop_pod(pod["metadata"]["uid"])  # even a stopped container: nobody can say so
    cri.stop()
    env.api.remove("pods", "default", "web")
    env.agent.wait_for_log("does not answer", timeout=15)
    # Several failed rounds, one warning.
    wait_until(lambda: metric(port, "kvolumed_runtime_errors_total") >= 4, timeout=15, what="4 failed rounds")
    assert env.agent.output().count("does not answer (") == 1
    assert metric(port, "kvolumed_runtime_unreachable") == 1
    assert os.path.ismount(target) and not unpublished(env, target)
    uid = pod["metadata"]["uid"]
    pubs = [p for v in volumes_json(port)["volumes"] for p in v.get("publishes", []) if p["pod_uid"] == uid]
    assert pubs and "does not answer" in pubs[0]["teardown_waits"]

    cri.start()
    wait_until(lambda: unpublished(env, target), timeout=15, what="NodeUnpublishVolume once it answers")
    env.wait_gone(os.path.dirname(target))
    env.agent.wait_for_log("answers again")
    assert env.agent.output().count("answers again") == 1
    assert metric(port, "kvolumed_runtime_unreachable") == 0


def test_no_endpoint_trusts_the_api(volume_env, mock_cri):
    """Without [runtime] endpoint, today's behaviour: the API alone decides,
    and the runtime is never asked."""
    env, cri = volume_env, mock_cri
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    env.start()
    pod, target = running_pod(env, cri, "web")
    env.api.remove("pods", "default", "web")
    env.wait_gone(os.path.dirname(target))
    assert unpublished(env, target)
    assert cri.requests() == []
    env.agent.wait_for_log("[runtime] endpoint is empty")


def unary(requests):
    return [r for r in requests if r[1] != "GetContainerEvents"]


def cpu_ticks(pid):
    """utime + stime of the process, in clock ticks (1/100 s)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


@pytest.mark.parametrize("events", ["unimplemented", "stream"])
def test_burst_then_rest_asks_nothing(volume_env, events):
    """A burst of teardowns of pods their runner stopped (their sandboxes
    NOTREADY) costs a few rounds for all the pods together, not
    one per pod; at rest the runtime is not asked at all, and the event
    stream, where the runtime serves it, stays open without waking kvolumed."""
    env = volume_env
    cri_gen = _mock_cri(events)
    cri = next(cri_gen)
    try:
        _burst_then_rest(env, cri, events)
    finally:
        next(cri_gen, None)


def _burst_then_rest(env, cri, events):
    pods = []
    for i in range(8):
        pod = env.pod(f"p{i}", [{"name": "scratch", "csi": {"driver": DRIVER}}])
        pods.append((pod, env.target(pod, "scratch")))
        # Stopped by their runner (containers exited, sandbox NOTREADY)
        # before kvolumed subscribes: no event of theirs comes.  (One read
        # after a pod's deletion, as the mock's stream on a loaded machine
        # delivered them, names a waiting pod and rightly asks once more.)
        cri.add_pod(pod["metadata"]["uid"], name=pod["metadata"]["name"], state="EXITED")
        cri.stop_pod(pod["metadata"]["uid"])
    start(env, cri)
    if events == "stream":
        wait_until(lambda: cri.open_streams() == 1, what="kvolumed subscribed to the runtime's events")
    for pod, target in pods:
        env.wait_mounted(target)
    # Nothing asked while nothing is torn down; the one subscription, opened
    # at start-up, is not a question.
    assert unary(cri.requests()) == []
    assert [m for _, m in cri.requests()] == ["GetContainerEvents"]
    # A burst: the deletions reach kvolumed together.  (Made one by one
    # while it runs, on a loaded machine each can come after the round
    # that the one before started, and needs its own: an answer serves
    # only the pods that waited when its round began.)
    env.agent.signal(signal.SIGSTOP)
    try:
        for pod, _ in pods:
            env.api.remove("pods", "default", pod["metadata"]["name"])
    finally:
        env.agent.signal(signal.SIGCONT)
    for _, target in pods:
        env.wait_gone(os.path.dirname(target))
    burst = unary(cri.requests())
    assert 2 <= len(burst) <= 8, burst  # rounds of 2 calls, far fewer than one per pod
    if events == "stream":
        wait_until(lambda: cri.open_streams() == 1, what="the event stream open")
    t = time.monotonic()
    cpu = cpu_ticks(env.agent.proc.pid)
    time.sleep(3)  # an observation window, not a wait for a condition
    assert cri.requests(t) == []  # not a call, not a resubscription
    # The idle stream does not keep the loop busy (a loop spinning on it
    # would burn the whole window, 300 ticks); the API's watches wake it a
    # few times, which costs next to nothing.
    assert cpu_ticks(env.agent.proc.pid) - cpu <= 10
    if events == "stream":
        assert cri.open_streams() == 1


def test_teardown_found_at_restart_goes_through_the_gate(volume_env, mock_cri):
    env, cri = volume_env, mock_cri
    start(env, cri)
    pod, target = running_pod(env, cri, "web")
    env.agent.stop()
    env.api.remove("pods", "default", "web")
    since = time.monotonic()
    env.agent = env.start_agent(str(env.tmp_path / "kvolumed.conf"))
    wait_held(env, cri, pod, target, since)
    release(env, cri, pod, target)
    env.wait_gone(os.path.dirname(target))


def test_reload_names_the_endpoint_as_needing_a_restart(volume_env, mock_cri):
    env, cri = volume_env, mock_cri
    start(env, cri)
    env.agent.wait_for_log(" starting for node ")  # its signal handlers are set up
    path = str(env.tmp_path / "kvolumed.conf")
    text = open(path).read().replace(cri.endpoint, "unix:///run/crio/crio.sock")
    open(path, "w").write(text)
    env.agent.signal(signal.SIGHUP)
    env.agent.wait_for_log('"runtime.endpoint = unix:///run/crio/crio.sock" takes effect at the next restart')


def rounds(cri, since, until=None):
    return [t for t, m in cri.requests(since) if m == "ListContainers" and (until is None or t < until)]


def assert_not_polled(cri, since, held):
    """No round of the pod's wait came sooner than 1 s after the one before
    it, up to the stop: polling would ask again 0.1, 0.3, 0.7 s after an
    answer; with the stream up, a round comes from an event that names the
    pod, or from a reconcile pass that finds the last answer older than its
    1 s of validity (an API event late on a loaded machine), or from the
    10 s safety net.  A round is logged by the runtime after kvolumed sent
    it and before the answer came, so a pass's round follows the one before
    by more than 1 s however slow either side is.  (Once, undecodable events
    that only said a container started each asked again: 33 ms apart.)"""
    stop = [t for t, *_ in cri.changes("stop")]
    asked = rounds(cri, since, until=stop[-1] if stop else None)
    gaps = [(round(a, 3), round(b - a, 3)) for a, b in zip(asked, asked[1:]) if b > held]
    assert all(g >= 1.0 for _, g in gaps), f"the runtime was polled while the stream was open: {gaps}"


def wait_stop_event_read(env, pod, mark):
    """kvolumed read the stop of the pod's container from the event stream,
    after `mark` characters of its output; its output from there."""
    line = re.compile(rf"CONTAINER_STOPPED_EVENT for container \w+ of pod {pod['metadata']['uid']}")
    return wait_until(lambda: (lambda out: out if line.search(out) else None)(env.agent.output()[mark:]),
                      timeout=30, what=f"kvolumed reading the stop of pod {pod['metadata']['uid']} from the stream")


@pytest.mark.parametrize("libcurl", ["system", "curl8"])
def test_events_unpublish_follows_the_stop_without_polling(volume_env, mock_cri_events, libcurl):
    """With GetContainerEvents, a waiting pod is asked about again when the
    runtime says one of its containers stopped, not on a timer: no round at
    all while the container runs, one right after its stop event.  With
    libcurl 8 too, where unary calls share connections: the never-ending
    stream has its own, and holds none of them back."""
    env, cri = volume_env, mock_cri_events
    start(env, cri, libcurl=libcurl)
    wait_until(lambda: cri.open_streams() == 1, what="kvolumed subscribed to the runtime's events")
    pod, target = running_pod(env, cri, "web")
    since = time.monotonic()
    env.api.remove("pods", "default", "web")
    wait_held(env, cri, pod, target, since)
    held = rounds(cri, since)[-1]
    # The polling fallback would ask again 0.1, 0.3, 0.7 and 1.5 s after
    # the answer: an observation window long enough to see it.
    wait_until(lambda: time.monotonic() > held + 1.6, what="the observation window")
    assert_not_polled(cri, since, held)
    assert os.path.ismount(target) and not unpublished(env, target)

    mark = len(env.agent.output())
    t0 = time.monotonic()
    cri.stop_pod(pod["metadata"]["uid"])
    wait_until(lambda: unpublished(env, target), timeout=30, interval=0.01, what="NodeUnpublishVolume")
    unpublished_at = time.monotonic()
    stopped = cri.changes("stop")[-1][0]
    assert rounds(cri, stopped), "no round after the stop event"
    out = wait_stop_event_read(env, pod, mark)
    env.wait_gone(os.path.dirname(target))
    # The event made kvolumed ask: it says so.  (Or, rarely, a reconcile
    # pass that found the answer stale asked first, and then the event
    # named a pod that no longer waited: that was long before the safety
    # net's first re-check, 10 s after the first answer, later than `held`.)
    uid = pod["metadata"]["uid"]
    assert (f"a container or sandbox of waiting pod {uid} stopped or went; asking again" in out
            or unpublished_at < held + 10.0), \
        f"unpublished {unpublished_at - t0:.2f}s after the container stopped, not for its stop event:\n{out}"
    assert_not_polled(cri, since, held)  # over the whole wait
    assert [m for _, m in cri.requests()].count("GetContainerEvents") == 1


def test_events_unimplemented_falls_back_to_polling(volume_env, mock_cri):
    """containerd 1.6 answers GetContainerEvents with UNIMPLEMENTED: said once
    at info, and the gate polls with its backoff while a pod waits."""
    env, cri = volume_env, mock_cri
    start(env, cri)
    env.agent.wait_for_log("does not serve GetContainerEvents")
    pod, target = running_pod(env, cri, "web")
    since = time.monotonic()
    env.api.remove("pods", "default", "web")
    wait_held(env, cri, pod, target, since)
    wait_until(lambda: len(rounds(cri, since)) >= 3, timeout=15, what="rounds of the polling fallback")
    asked = release(env, cri, pod, target)
    env.wait_gone(os.path.dirname(target))
    assert asked < 3.0, f"the runtime was asked again {asked:.2f}s after the container stopped"
    assert env.agent.output().count("does not serve GetContainerEvents") == 1
    assert [m for _, m in cri.requests()].count("GetContainerEvents") == 1  # not asked again


@pytest.mark.parametrize("libcurl", ["system", "curl8"])
def test_broken_stream_falls_back_and_resubscribes(volume_env, mock_cri_events, libcurl):
    """The stream broken (a runtime restart, a reset connection): the gate
    polls while pods wait, and subscribes again with a backoff; events work
    again on the new stream."""
    env, cri = volume_env, mock_cri_events
    start(env, cri, libcurl=libcurl)
    wait_until(lambda: cri.open_streams() == 1, what="kvolumed subscribed")
    pod, target = running_pod(env, cri, "web")
    since = time.monotonic()
    env.api.remove("pods", "default", "web")
    wait_held(env, cri, pod, target, since)
    broke = time.monotonic()
    cri.break_streams()
    env.agent.wait_for_log("event stream of container runtime")
    wait_until(lambda: [m for _, m in cri.requests()].count("GetContainerEvents") >= 2 and cri.open_streams() == 1,
               timeout=15, what="a new subscription")
    # Between the break and the new stream, polling held the pod.
    assert rounds(cri, broke), "no round after the stream broke"
    assert os.path.ismount(target) and not unpublished(env, target)
    # A stop is seen on the new stream.  (Not timed: the unpublish after
    # it writes durably first, which a loaded disk made take seconds; and
    # the polling armed while the stream was down may see the stop first.)
    mark = len(env.agent.output())
    cri.stop_pod(pod["metadata"]["uid"])
    wait_until(lambda: unpublished(env, target), timeout=30, interval=0.01, what="NodeUnpublishVolume")
    wait_stop_event_read(env, pod, mark)
    env.wait_gone(os.path.dirname(target))



@pytest.mark.parametrize("libcurl", ["system", "curl8"])
def test_events_read_together_are_each_decoded(volume_env, mock_cri_events, libcurl):
    """Events that reach kvolumed in one read (a busy runtime, a busy loop)
    are each decoded whole.  Once each but the last of them was decoded
    with the next one's length: it did not decode, a warning said the
    runtime sent garbage, and a pod waiting for teardown was asked about
    again for nothing.  A relay holds the stream's bytes back and hands
    them over in one write, so this happens every time."""
    env, cri = volume_env, mock_cri_events
    proxy = HoldingProxy(cri.socket_path, os.path.join(os.path.dirname(cri.socket_path), "relay.sock")).start()
    try:
        start(env, proxy, libcurl=libcurl)
        wait_until(lambda: cri.open_streams() == 1 and proxy.streams() == 1, what="kvolumed subscribed")
        pod, target = running_pod(env, cri, "web")
        since = time.monotonic()
        env.api.remove("pods", "default", "web")
        wait_held(env, cri, pod, target, since)
        proxy.hold()
        other = "0b0e8f2c-2f59-4a34-9d6a-5d1c0a7e4b11"
        sid = cri.add_pod(other, name="other")  # 4 events: the sandbox created, started; its container
        cri.exit_containers(other)  # and a 5th, not waited for below: the last of a burst may come late
        wait_until(lambda: proxy.held_messages() >= 5, what="the runtime's 5 events held by the relay")
        proxy.release()
        lines = [re.compile(f"CONTAINER_CREATED_EVENT for sandbox {sid} of pod {other}"),
                 re.compile(f"CONTAINER_STARTED_EVENT for sandbox {sid} of pod {other}"),
                 re.compile(rf"CONTAINER_CREATED_EVENT for container \w+ of pod {other}"),
                 re.compile(rf"CONTAINER_STARTED_EVENT for container \w+ of pod {other}")]
        wait_until(lambda: "does not decode" in env.agent.output() or
                   all(line.search(env.agent.output()) for line in lines), timeout=30,
                   what="kvolumed's lines about the first 4 events")
        out = env.agent.output()
        assert "does not decode" not in out, out
        # A container created, started or stopped in a pod that does not
        # wait frees nothing: no question about the waiting pod.
        assert "asking again" not in out, out
        assert os.path.ismount(target) and not unpublished(env, target)
    finally:
        proxy.stop()


# --- a READY sandbox: the runner may (re)start a container in it --------------------

SANDBOX_LINE = "says a sandbox of the pod is still READY"


def wait_held_for_sandbox(env, pod, target, since_output):
    """The gate said the pod's READY sandbox holds it, after `since_output`
    characters of kvolumed's output, and the volume is still there (an
    unpublish instead ends the wait, and fails)."""
    wait_until(lambda: SANDBOX_LINE in env.agent.output()[since_output:] or unpublished(env, target), timeout=15,
               what="the gate holding the pod for its READY sandbox")
    assert not unpublished(env, target), "unpublished while the pod's sandbox was READY"
    assert os.path.ismount(target)
    assert f"Not unpublishing volume scratch of pod default/{pod['metadata']['name']}" in env.agent.output()


def stop_pod_sandbox(cri, sandbox_id):
    """The runner's StopPodSandbox, over CRI, as kubelet's killPod calls it."""
    pb, pb_grpc = cri.pb, cri.pb_grpc
    with grpc.insecure_channel("unix:" + cri.socket_path) as ch:
        pb_grpc.RuntimeServiceStub(ch).StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=sandbox_id),
                                                      timeout=10)


@pytest.mark.parametrize("events", ["unimplemented", "stream"])
def test_crash_looping_pod_keeps_volume_until_its_sandbox_stops(volume_env, events):
    """CrashLoopBackOff: between two attempts the container is EXITED and
    its sandbox READY, and the runner starts the next attempt there with the
    volume's host path as a bind source.  A force-deleted pod in that state
    keeps its volume through crashes and restarts until its runner stops the
    sandbox (StopPodSandbox over CRI, as kubelet's killPod does)."""
    env = volume_env
    cri_gen = _mock_cri(events)
    cri = next(cri_gen)
    try:
        port = free_port()
        start(env, cri, metrics_port=port)
        if events == "stream":
            wait_until(lambda: cri.open_streams() == 1, what="kvolumed subscribed to the runtime's events")
        pod, target = running_pod(env, cri, "crashy")
        uid = pod["metadata"]["uid"]
        (sid,) = cri.sandbox_ids(uid)
        since = time.monotonic()
        env.api.remove("pods", "default", "crashy")
        wait_held(env, cri, pod, target, since)

        # It crashes: EXITED, its sandbox READY.  Still held, and /volumes says why.
        mark = len(env.agent.output())
        cri.exit_containers(uid)
        wait_held_for_sandbox(env, pod, target, mark)
        pubs = [p for v in volumes_json(port)["volumes"] for p in v.get("publishes", []) if p["pod_uid"] == uid]
        assert pubs and "sandbox of the pod is still READY" in pubs[0]["teardown_waits"]
        assert "StopPodSandbox" in pubs[0]["teardown_waits"]
        assert metric(port, "kvolumed_runtime_waiting_pods") == 1
        if events == "unimplemented":
            # Several more rounds of the runtime saying so: the volume stays.
            n = len(rounds(cri, since))
            wait_until(lambda: len(rounds(cri, since)) >= n + 2, timeout=30, what="more rounds of the gate")
        assert os.path.ismount(target) and not unpublished(env, target)

        # The next attempt starts in the sandbox, on the volume; crashes again.
        cri.restart_container(uid)
        assert os.path.ismount(target)
        cri.exit_containers(uid)
        n = len(rounds(cri, since))
        wait_until(lambda: len(rounds(cri, since)) >= n + 1, timeout=30, what="a round after the second crash")
        assert os.path.ismount(target) and not unpublished(env, target)
        assert env.agent.output().count(SANDBOX_LINE) == 1  # once per wait, however many attempts

        # The runner stops the sandbox: torn down.
        asked = release(env, cri, pod, target, stop=lambda: stop_pod_sandbox(cri, sid))
        assert cri.sandbox_state(uid) == ["NOTREADY"]
        env.wait_gone(os.path.dirname(target))
        env.agent.wait_for_log("no sandbox of it is READY; tearing down its volume scratch")
        assert asked < 3.0, f"the runtime was asked again {asked:.2f}s after the sandbox stopped"
        if events == "stream":
            assert rounds(cri, cri.changes("stop")[-1][0]), "no round after the sandbox's stop event"
        wait_until(lambda: metric(port, "kvolumed_runtime_waiting_pods") == 0, what="no pod waiting")
    finally:
        next(cri_gen, None)


def test_pod_pulling_its_image_keeps_volume_until_its_sandbox_stops(volume_env, mock_cri_events):
    """A runner still pulling the image: the sandbox READY, no container yet;
    the first container will start with the volume's host path.  A force
    delete does not unpublish it until the sandbox stops."""
    env, cri = volume_env, mock_cri_events
    start(env, cri)
    wait_until(lambda: cri.open_streams() == 1, what="kvolumed subscribed to the runtime's events")
    pod = env.pod("pulling", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    target = env.target(pod, "scratch")
    env.wait_mounted(target)
    uid = pod["metadata"]["uid"]
    sid = cri.add_pod(uid, name="pulling", containers=())
    since = time.monotonic()
    mark = len(env.agent.output())
    env.api.remove("pods", "default", "pulling")
    wait_held_for_sandbox(env, pod, target, mark)
    assert any(m == "ListPodSandbox" for _, m in cri.requests(since))
    assert os.path.ismount(target) and not unpublished(env, target)

    # The image is there: the container starts on the volume, then the
    # runner kills the pod (containers, then the sandbox).
    cri.restart_container(uid)
    assert os.path.ismount(target)
    cri.exit_containers(uid)
    assert os.path.ismount(target) and not unpublished(env, target)
    stop_pod_sandbox(cri, sid)
    wait_until(lambda: unpublished(env, target), timeout=15, interval=0.01, what="NodeUnpublishVolume")
    env.wait_gone(os.path.dirname(target))
