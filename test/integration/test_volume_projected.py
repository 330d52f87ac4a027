"""downwardAPI and projected volumes (kubelet's kubernetes.io/downward-api and
kubernetes.io/projected): kvolumed writes the files itself on a tmpfs of the
volume's own, in kubelet's AtomicWriter layout.  The projected volume the
ServiceAccount admission plugin adds to nearly every pod (kube-api-access-<5>:
a pod-bound token of 3607 s, kube-root-ca.crt's ca.crt, the namespace), its
token's renewal (before 80 % of its life, spread over time rather than in
step), a refused TokenRequest, clusterTrustBundles served or not, a restart
that rewrites nothing, a reboot that sets the tmpfs up again."""
import datetime
import base64
import json
import os
import stat
import statistics
import subprocess
import time

import pytest

from integration.agent_fixtures import trace_lines, wait_until
from integration.pod_volume_fixtures import fs_type, kill_agent, mounts_under, read, records_of_previous_boot, remove_pods, snapshot, vol_dir
from integration.test_agent_localapi import UnixConnection  # noqa: F401  (the socket client)

SA = "default"
CA = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def kube_api_access(name="kube-api-access-x7k2p", expiration=3607):
    """Exactly what the ServiceAccount admission plugin adds."""
    return {"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": expiration, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}


def cluster(env, namespace="default", sa=SA):
    """The objects every namespace has: its service account and kube-root-ca.crt."""
    env.api.create({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": sa, "namespace": namespace}})
    env.api.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "kube-root-ca.crt", "namespace": namespace}, "data": {"ca.crt": CA}})


def wait_for(env, predicate, what, timeout=30, interval=0.05):
    """wait_until, with kvolumed's log in the failure."""
    try:
        return wait_until(predicate, timeout=timeout, interval=interval, what=what)
    except AssertionError as e:
        events = [e.get("message") for e in env.events()]
        try:
            from integration.test_agent_localapi import api_get
            pods, _ = env.api.list("pods")
            events.append([api_get("/run/kvolumed/kvolumed.sock", f"/v1/pods/{p['metadata']['uid']}/volumes")[1]
                           for p in pods[:3]])
        except Exception as x:  # best effort
            events.append(repr(x))
        raise AssertionError(f"{e}\nevents: {events}\n{env.agent.output()[-6000:] if env.agent else ''}") from None


def review(env, token):
    return env.api.review_token({"spec": {"token": token}})["status"]


def token_requests(env, pod=None):
    out = []
    for r in env.api.token_requests():
        ref = (r["spec"] or {}).get("boundObjectRef") or {}
        if pod is None or ref.get("uid") == pod["metadata"]["uid"]:
            out.append(r)
    return out


def local_volumes(env, sock, pod):
    from integration.test_agent_localapi import api_get
    return api_get(sock, f"/v1/pods/{pod['metadata']['uid']}/volumes")


def start_with_socket(env, sockdir, extra_env=None):
    from integration.test_agent_localapi import api_config
    sock = os.path.join(sockdir, "run", "kvolumed.sock")
    env.agent = env.start_agent(api_config(env, sock), env=extra_env)
    env.agent.wait_for_log("Serving the local volumes API", timeout=30)
    return sock


@pytest.fixture
def sockdir():
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="kvp", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def set_labels(env, pod, labels):
    obj = env.api.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    obj["metadata"]["labels"] = labels
    return env.api.update(obj)


# --- kube-api-access ----------------------------------------------------------------------


def test_kube_api_access_files_modes_tmpfs_and_a_pod_bound_token(volume_env):
    env = volume_env
    cluster(env)
    env.start()
    pod = env.pod("web", [kube_api_access()], serviceAccountName=SA)
    d = vol_dir(env, pod, "projected", "kube-api-access-x7k2p")
    wait_for(env, lambda: read(f"{d}/token"), timeout=30, what="the token file")
    assert read(f"{d}/ca.crt") == CA
    assert read(f"{d}/namespace") == "default"
    # kubelet's layout and modes: defaultMode 0644 (no fsUser, no fsGroup), on a tmpfs of its own.
    assert os.path.ismount(d) and fs_type(d) == "tmpfs"
    data = os.readlink(f"{d}/..data")
    assert sorted(os.listdir(d)) == sorted(["..data", data, "token", "ca.crt", "namespace"])
    for name in ("token", "ca.crt", "namespace"):
        assert os.readlink(f"{d}/{name}") == f"..data/{name}"
        assert stat.S_IMODE(os.stat(f"{d}/{name}").st_mode) == 0o644
    # The token is bound to the pod: the API server's TokenReview says so.
    status = review(env, read(f"{d}/token"))
    assert status.get("authenticated") is True, status
    extra = status["user"]["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["web"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    assert status["user"]["username"] == f"system:serviceaccount:default:{SA}"
    reqs = token_requests(env, pod)
    assert len(reqs) == 1
    assert reqs[0]["spec"]["expirationSeconds"] == 3607
    assert reqs[0]["spec"]["boundObjectRef"] == {"apiVersion": "v1", "kind": "Pod", "name": "web",
                                                 "uid": pod["metadata"]["uid"]}
    assert not reqs[0]["spec"].get("audiences")  # the API server's own
    # A credential never reaches the log.
    assert read(f"{d}/token") not in env.agent.output()
    remove_pods(env, pod)


def test_token_mode_with_fs_user_and_fs_group(volume_env):
    """projected.go: the token is 0600 owned by the pod's common runAsUser
    (FsUserFrom), 0640 group fsGroup once the ownership change ran."""
    env = volume_env
    cluster(env)
    env.start()
    user = env.pod("user", [kube_api_access()], security_context={"runAsUser": 4321}, serviceAccountName=SA)
    group = env.pod("group", [kube_api_access()], security_context={"fsGroup": 2345}, serviceAccountName=SA)
    du = vol_dir(env, user, "projected", "kube-api-access-x7k2p")
    dg = vol_dir(env, group, "projected", "kube-api-access-x7k2p")
    wait_for(env, lambda: read(f"{du}/token") and read(f"{dg}/token"), timeout=30, what="both tokens")
    st = os.stat(f"{du}/token")
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 4321
    assert stat.S_IMODE(os.stat(f"{du}/ca.crt").st_mode) == 0o644
    st = os.stat(f"{dg}/token")
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == 2345
    remove_pods(env, user, group)


def token_trace(path):
    """{pod uid: [(issued, due)]} from the trace lines kvolumed writes when
    it draws a token's renewal time (KVOLUMED_TEST_TRACE_FILE)."""
    issued, out = {}, {}
    for when, step, uid in trace_lines(path):
        if step == "token-issued":
            issued[uid] = when
        elif step == "token-refresh-due":
            out.setdefault(uid, []).append((issued.get(uid), when))
    return out


def test_token_renewed_before_80_percent_of_its_life_atomically(volume_env, tmp_path):
    """A 600 s token (the API's minimum) on a clock scaled 60 times: renewed
    within 8 s, before 80 % of its (scaled) life; the file changes by the
    AtomicWriter's swap, the other files keep their content."""
    env = volume_env
    cluster(env)
    trace = str(tmp_path / "trace")
    env.start(env={"KVOLUMED_TEST_TOKEN_CLOCK_SCALE": "60", "KVOLUMED_TEST_TRACE_FILE": trace})
    pod = env.pod("web", [kube_api_access(expiration=600)], serviceAccountName=SA)
    d = vol_dir(env, pod, "projected", "kube-api-access-x7k2p")
    first = wait_for(env, lambda: read(f"{d}/token"), timeout=30, what="the token")
    version = os.readlink(f"{d}/..data")
    second = wait_for(env, lambda: (t := read(f"{d}/token")) != first and t, timeout=60, what="a renewed token")
    assert os.readlink(f"{d}/..data") != version, "a new version, swapped in"
    assert not os.path.exists(f"{d}/{version}"), "the old version is removed"
    assert read(f"{d}/ca.crt") == CA and read(f"{d}/namespace") == "default"
    assert review(env, second).get("authenticated") is True
    # The schedule kvolumed drew: before 80 % of the life (480 s / 60 = 8 s).
    (issued, due), *_ = token_trace(trace)[pod["metadata"]["uid"]]
    assert 0 < due - issued <= 8.0 + 0.01
    assert due - issued >= 8.0 * (1 - 0.4) - 0.01
    remove_pods(env, pod)


# --- downwardAPI ----------------------------------------------------------------------------


def downward_volume(name="info"):
    return {"name": name, "downwardAPI": {"items": [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "tier", "fieldRef": {"fieldPath": "metadata.labels['tier']"}},
        {"path": "cpu_limit", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}},
        {"path": "mem_limit", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory",
                                                   "divisor": "1Mi"}, "mode": 0o400}]}}


def test_downward_api_follows_the_pods_labels_and_defaults_limits_to_allocatable(volume_env):
    env = volume_env
    node = env.node()
    node.setdefault("status", {})["allocatable"] = {"cpu": "3500m", "memory": "7Gi", "pods": "110"}
    env.api.update(node)
    env.start()
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web", "namespace": "default", "labels": {"tier": "front", "app": "shop"},
                        "annotations": {"note": "a \"quoted\"\nvalue"}},
           "spec": {"nodeName": "test-node", "volumes": [downward_volume()],
                    "containers": [{"name": "c", "image": "busybox",
                                    "volumeMounts": [{"name": "info", "mountPath": "/etc/info"}]}]},
           "status": {"phase": "Running"}}
    pod = env.api.create(obj)
    d = vol_dir(env, pod, "downward-api", "info")
    wait_for(env, lambda: read(f"{d}/labels"), timeout=30, what="the downwardAPI files")
    assert os.path.ismount(d) and fs_type(d) == "tmpfs"
    assert read(f"{d}/labels") == 'app="shop"\ntier="front"'
    assert read(f"{d}/annotations") == 'note="a \\"quoted\\"\\nvalue"'
    assert read(f"{d}/tier") == "front"
    # No limits on the container: the Node's allocatable (kubelet's MergeContainerResourceLimits).
    assert read(f"{d}/cpu_limit") == "3500"
    assert read(f"{d}/mem_limit") == "7168"
    assert stat.S_IMODE(os.stat(f"{d}/mem_limit").st_mode) == 0o400
    assert stat.S_IMODE(os.stat(f"{d}/labels").st_mode) == 0o644
    # The pod's labels change: the files follow, by a swap.
    before = snapshot(d)
    set_labels(env, pod, {"tier": "back", "app": "shop"})
    wait_for(env, lambda: read(f"{d}/labels") == 'app="shop"\ntier="back"', timeout=30, what="the new labels")
    assert read(f"{d}/tier") == "back"
    assert os.readlink(f"{d}/..data") != before["..data"]
    # A change of the pod that changes no file writes nothing: the pod's
    # events are handled in order, so once the next real change is written,
    # the one before it was handled, and the writes counted are one.
    unique = f"kubernetes.io/downward-api/{pod['metadata']['uid']}-info"
    # The first version and the new labels' (logged just after the swap).
    wait_for(env, lambda: env.agent.output().count(f"of {unique} to ") >= 2, timeout=10, what="two writes logged")
    writes = env.agent.output().count(f"of {unique} to ")
    assert writes == 2
    obj = env.api.get("pods", "default", "web")
    obj["status"]["podIP"] = "10.1.0.9"
    env.api.update(obj)
    set_labels(env, pod, {"tier": "back", "app": "shop", "x": "1"})
    wait_for(env, lambda: 'x="1"' in (read(f"{d}/labels") or ""), timeout=30, what="the third labels")
    wait_for(env, lambda: env.agent.output().count(f"of {unique} to ") >= writes + 1, timeout=10, what="the log")
    assert env.agent.output().count(f"of {unique} to ") == writes + 1
    # The Node's allocatable changes: the limit the container does not set follows.
    node = env.node()
    node["status"]["allocatable"]["cpu"] = "1500m"
    env.api.update(node)
    wait_for(env, lambda: read(f"{d}/cpu_limit") == "1500", timeout=30, what="the new allocatable cpu")
    assert read(f"{d}/mem_limit") == "7168"
    remove_pods(env, pod)


# --- faults ---------------------------------------------------------------------------------


def test_refused_token_request_fails_only_that_volume_with_the_servers_words(volume_env, sockdir):
    """The pod's service account does not exist: the TokenRequest is refused
    (404); the volume says why in the local API and the log and is retried;
    the pod's other volumes are set up."""
    env = volume_env
    env.api.create({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "kube-root-ca.crt", "namespace": "default"}, "data": {"ca.crt": CA}})
    sock = start_with_socket(env, sockdir)
    pod = env.pod("web", [kube_api_access(), downward_volume("info")], serviceAccountName="ghost")
    info = vol_dir(env, pod, "downward-api", "info")
    wait_for(env, lambda: read(f"{info}/labels") is not None, timeout=30, what="the other volume")

    def reason():
        status, body, _ = local_volumes(env, sock, pod)
        for v in body.get("volumes", []) if isinstance(body, dict) else []:
            if v.get("name") == "kube-api-access-x7k2p" and "ghost" in json.dumps(v):
                return v
        return None
    v = wait_for(env, reason, timeout=30, what="the refusal in the local API")
    text = json.dumps(v)
    assert "failed to fetch token" in text and 'serviceaccounts \\"ghost\\" not found' in text, text
    env.agent.wait_for_log("failed to fetch token", timeout=10)
    assert not os.path.exists(f"{vol_dir(env, pod, 'projected', 'kube-api-access-x7k2p')}/token")
    # Retried with backoff: the account appears, the volume is set up.
    env.api.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ghost", "namespace": "default"}})
    d = vol_dir(env, pod, "projected", "kube-api-access-x7k2p")
    wait_for(env, lambda: read(f"{d}/token"), timeout=60, what="the token after the account was made")
    remove_pods(env, pod)


def ctb_volume(optional=False, **source):
    return {"name": "bundle", "projected": {"sources": [
        {"clusterTrustBundle": {"path": "ca.pem", "optional": optional, **source}}]}}


def test_cluster_trust_bundle_not_served_is_a_clear_error(volume_env, sockdir):
    env = volume_env
    sock = start_with_socket(env, sockdir)
    pod = env.pod("web", [ctb_volume(signerName="example.com/signer", labelSelector={})])

    def reason():
        status, body, _ = local_volumes(env, sock, pod)
        text = json.dumps(body)
        return text if "clusterTrustBundles are not served by the API server" in text else None
    wait_for(env, reason, timeout=30, what="the clear error in the local API")
    env.agent.wait_for_log("clusterTrustBundles are not served by the API server", timeout=10)
    remove_pods(env, pod)


def cert_pem(body):
    text = base64.b64encode(body).decode()
    return "-----BEGIN CERTIFICATE-----\n" + "\n".join(text[i:i + 64] for i in range(0, len(text), 64)) + \
        "\n-----END CERTIFICATE-----\n"


def test_cluster_trust_bundles_served_are_merged_once_each(volume_env):
    env = volume_env
    env.api.configure(clusterTrustBundles="v1beta1")
    a, b, c = cert_pem(b"\x30\x01a"), cert_pem(b"\x30\x01b"), cert_pem(b"\x30\x01c")
    for name, signer, labels, bundle in (("example.com:signer:one", "example.com/signer", {"env": "prod"}, a + b),
                                         ("example.com:signer:two", "example.com/signer", {"env": "prod"}, b),
                                         ("example.com:signer:dev", "example.com/signer", {"env": "dev"}, c),
                                         ("plain", None, {}, c)):
        spec = {"trustBundle": bundle}
        if signer:
            spec["signerName"] = signer
        env.api.create({"apiVersion": "certificates.k8s.io/v1beta1", "kind": "ClusterTrustBundle",
                        "metadata": {"name": name, "labels": labels}, "spec": spec})
    env.start()
    pod = env.pod("web", [ctb_volume(signerName="example.com/signer", labelSelector={"matchLabels": {"env": "prod"}}),
                          {"name": "byname", "projected": {"sources": [{"clusterTrustBundle": {
                              "path": "ca.pem", "name": "plain"}}]}}])
    d = vol_dir(env, pod, "projected", "bundle")
    got = wait_for(env, lambda: read(f"{d}/ca.pem"), timeout=30, what="the bundle")
    assert got == a + b, "each certificate once, of the matching bundles only"
    byname = vol_dir(env, pod, "projected", "byname")
    assert wait_for(env, lambda: read(f"{byname}/ca.pem"), timeout=30, what="the bundle by name") == c
    remove_pods(env, pod)


# --- restart, reboot, the runtime -------------------------------------------------------------


def test_restart_rewrites_nothing_and_reboot_sets_up_again(volume_env):
    env = volume_env
    cluster(env)
    env.start()
    pod = env.pod("web", [kube_api_access(), downward_volume("info")], serviceAccountName=SA)
    d = vol_dir(env, pod, "projected", "kube-api-access-x7k2p")
    info = vol_dir(env, pod, "downward-api", "info")
    wait_for(env, lambda: read(f"{d}/token") and read(f"{info}/labels") is not None, timeout=30, what="both volumes")
    token = read(f"{d}/token")
    before, before_info = snapshot(d), snapshot(info)
    n_requests = len(token_requests(env, pod))
    kill_agent(env)
    env.start()
    env.agent.wait_for_log("Found projected volume", timeout=30)
    # A pass or two over the pod: compared, nothing written, no new token.
    env.agent.wait_for_log("already holds the content of kubernetes.io/projected/", timeout=30)
    env.agent.wait_for_log("already holds the content of kubernetes.io/downward-api/", timeout=30)
    assert snapshot(d) == before and snapshot(info) == before_info
    assert read(f"{d}/token") == token
    assert len(token_requests(env, pod)) == n_requests
    # A reboot: the tmpfs are gone, the boot ID is another; set up again.
    kill_agent(env)
    for fields in sorted(mounts_under(env.root), key=lambda f: len(f[4]), reverse=True):
        subprocess.run(["umount", fields[4]], check=True)
    records_of_previous_boot(env.root)
    env.start()
    wait_until(lambda: os.path.ismount(d) and read(f"{d}/token") and os.path.ismount(info)
               and read(f"{info}/labels") is not None, timeout=60, what="both set up again")
    assert read(f"{d}/ca.crt") == CA
    remove_pods(env, pod)


def test_teardown_waits_for_the_runtime(volume_env):
    from integration.test_volume_runtime import _mock_cri
    gen = _mock_cri("unimplemented")
    cri = next(gen)
    try:
        env = volume_env
        cluster(env)
        env.start(extra=f"[runtime]\nendpoint = {cri.endpoint}\n")
        pod = env.pod("web", [kube_api_access()], serviceAccountName=SA)
        d = vol_dir(env, pod, "projected", "kube-api-access-x7k2p")
        wait_for(env, lambda: read(f"{d}/token"), timeout=30, what="the token")
        cri.add_pod(pod["metadata"]["uid"], name="web")
        env.api.remove("pods", "default", "web")
        env.agent.wait_for_log("Not unpublishing volume kube-api-access-x7k2p of pod default/web", timeout=30)
        assert os.path.ismount(d) and read(f"{d}/token")
        cri.stop_pod(pod["metadata"]["uid"])
        env.wait_gone(f"{env.root}/pods/{pod['metadata']['uid']}", timeout=30)
        assert not mounts_under(env.root)
    finally:
        next(gen, None)


# --- the renewal spread -------------------------------------------------------------------------


def expiry(req):
    """A TokenRequest's expirationTimestamp, in seconds."""
    return datetime.datetime.strptime(req["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def test_the_renewal_counts_from_kubelets_issue_time(volume_env, tmp_path):
    """kubelet's iat is the expiry less the lifetime asked for
    (token_manager.go requiresRefresh), in the API server's whole seconds.
    kvolumed counted from when its request left, a fraction of a second
    after that iat when the answer came within the same second: its
    renewal point could fall up to 0.2 s after kubelet's."""
    env = volume_env
    cluster(env)
    trace = str(tmp_path / "trace")
    env.start(env={"KVOLUMED_TEST_TRACE_FILE": trace})
    pod = env.pod("iat", [kube_api_access()], serviceAccountName=SA)
    uid = pod["metadata"]["uid"]
    drawn = wait_for(env, lambda: (t := token_trace(trace)) and uid in t and t, timeout=60,
                     interval=0.2, what="the renewal time drawn")
    [req] = token_requests(env, pod)
    issued, due = drawn[uid][0]
    assert issued <= expiry(req) - 3607 + 0.001, (issued, expiry(req) - 3607)
    assert due <= expiry(req) - 0.2 * 3607 + 0.001
    env.api.remove("pods", "default", "iat")
    env.wait_gone(f"{env.root}/pods/{uid}", timeout=30)


def test_two_hundred_tokens_renew_spread_out(volume_env, tmp_path):
    """200 pods given tokens together: the renewal times kvolumed draws (its
    trace, not the requests' arrivals) hold no more than a few in any second
    (kubelet's 10 s of jitter would put them all within ten seconds)."""
    env = volume_env
    cluster(env)
    trace = str(tmp_path / "trace")
    env.start(env={"KVOLUMED_TEST_TRACE_FILE": trace})
    pods = [env.pod(f"p{i}", [kube_api_access()], serviceAccountName=SA) for i in range(200)]
    uids = {p["metadata"]["uid"] for p in pods}
    drawn = wait_for(env, lambda: (t := token_trace(trace)) and uids <= set(t) and t, timeout=300,
                     interval=0.5, what="200 renewal times drawn")
    uids = sorted(uids)
    dues = [drawn[u][0][1] for u in uids]
    issued = [drawn[u][0][0] for u in uids]
    # Before kubelet's point (the expiry less 20 % of 3607 s: an answer that
    # came late on a busy machine moves neither), over 40 % of it.
    expires = {(r["spec"].get("boundObjectRef") or {}).get("uid"): expiry(r) for r in token_requests(env)}
    for u, i, d in zip(uids, issued, dues):
        assert 0.48 * 3607 - 1 <= d - i and d <= expires[u] - 0.2 * 3607 + 0.01
    per_second = {}
    for d in dues:
        per_second[int(d)] = per_second.get(int(d), 0) + 1
    assert max(per_second.values()) <= 6, sorted(per_second.values())[-5:]
    assert max(dues) - min(dues) > 600
    for p in pods:
        env.api.remove("pods", "default", p["metadata"]["name"])
    wait_for(env, lambda: not any(os.path.lexists(f"{env.root}/pods/{u}") for u in uids), timeout=300,
             interval=0.5, what="the 200 pods' volumes torn down")
