"""Client certificates replaced under a running client, as kubelet rotates
its own: /var/lib/kubelet/pki/kubelet-client-current.pem is a symlink to a
file holding certificate and key, switched to a new file before the old
certificate expires.  The k8s/ module must use the new certificate for the
next requests without a restart, never reuse a connection made with the old
one, and re-read the file when the server refuses it.

The fake API server names the user of a request after its client
certificate's CN, so the request log tells which certificate a request came
with (TLS authenticates a connection, not a request).  The k8s/ tests drive
test/tools/k8s-harness; the last one runs kvolumed itself."""
import os

from doubles.fakeapi import FakeApiServer, certs
from integration.agent_fixtures import DRIVER, wait_until, write_config

from .test_k8s_client import NODE, Harness, node, pod

GROUP = "system:masters"   # a broad identity: what is tested is which one is used


def kubelet_pem(fake_api, cn):
    """A kubelet-style client file: the certificate, then its key."""
    cert, key = certs.client_cert(fake_api.workdir, cn, GROUP)
    return cert + key


def write_file(path, data):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(data)


def switch_symlink(link, target):
    """What kubelet's certificate store does: a new symlink renamed over the
    current one, so that readers see the old file or the new one."""
    tmp = link + ".tmp"
    os.symlink(target, tmp)
    os.rename(tmp, link)


def write_kubeconfig(fake_api, path, cert, key):
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: "{fake_api.server_url}"
    certificate-authority: "{fake_api.ca_path}"
users:
- name: node
  user:
    client-certificate: "{cert}"
    client-key: "{key}"
contexts:
- name: x
  context: {{cluster: c, user: node}}
current-context: x
""")
    return str(path)


def user(request):
    """The user name a logged request was authenticated as."""
    u = request["user"]
    return getattr(u, "name", u)


def node_gets(fake_api):
    return [r for r in fake_api.requests()
            if r["method"] == "GET" and r["path"] == f"/api/v1/nodes/{NODE}"]


def get_node(h):
    h.send(f"get node - {NODE}")
    return h.wait_for(lambda e: e["type"] == "get", timeout=20, what="get node")


def kubelet_pki(fake_api, tmp_path, cn):
    pki = tmp_path / "pki"
    pki.mkdir()
    first = str(pki / "kubelet-client-2024-01-01-00-00-00.pem")
    write_file(first, kubelet_pem(fake_api, cn))
    current = str(pki / "kubelet-client-current.pem")
    os.symlink(first, current)
    return pki, current


def test_k8s_rotated_client_certificate_symlink_is_used_without_restart(fake_api, tmp_path):
    fake_api.create(node())
    pki, current = kubelet_pki(fake_api, tmp_path, "rotation-old")
    kc = write_kubeconfig(fake_api, tmp_path / "kubelet.conf", current, current)
    h = Harness(["--kubeconfig", kc, "--node", NODE, "--informers", "pods"])
    try:
        h.event("synced")
        assert get_node(h)["status"] == 200
        assert user(node_gets(fake_api)[-1]) == "rotation-old"

        second = str(pki / "kubelet-client-2024-06-01-00-00-00.pem")
        write_file(second, kubelet_pem(fake_api, "rotation-new"))
        before = len(fake_api.requests())
        switch_symlink(current, second)

        # The connection of the first GET is idle in libcurl's pool, and the
        # server keeps it open: reusing it would send this request as the
        # old user.
        assert get_node(h)["status"] == 200
        assert user(node_gets(fake_api)[-1]) == "rotation-new"

        # A watch that starts again after the rotation goes as the new user too.
        fake_api.close_watches(abrupt=True)
        fake_api.create(pod("after-rotation"))
        h.event("add", key="default/after-rotation", timeout=20)
        watches = [r for r in fake_api.requests() if r["path"] == "/api/v1/pods" and r["watch"]]
        assert user(watches[-1]) == "rotation-new" and watches[-1]["status"] == 200
        after = fake_api.requests()[before:]
        assert after and all(user(r) == "rotation-new" for r in after), after
    finally:
        assert h.stop() == 0


def test_k8s_separate_certificate_and_key_files_rotate(fake_api, tmp_path):
    fake_api.create(node())
    cert, key = certs.client_cert(fake_api.workdir, "pair-old", GROUP)
    crt_path, key_path = str(tmp_path / "client.crt"), str(tmp_path / "client.key")
    write_file(crt_path, cert)
    write_file(key_path, key)
    kc = write_kubeconfig(fake_api, tmp_path / "kubeconfig", crt_path, key_path)
    h = Harness(["--kubeconfig", kc, "--node", NODE, "--informers", "node"])
    try:
        h.event("synced", kind="Node")
        assert get_node(h)["status"] == 200
        assert user(node_gets(fake_api)[-1]) == "pair-old"
        cert, key = certs.client_cert(fake_api.workdir, "pair-new", GROUP)
        for path, data in ((key_path, key), (crt_path, cert)):   # renamed over, as tools write them
            write_file(path + ".tmp", data)
            os.rename(path + ".tmp", path)
        assert get_node(h)["status"] == 200
        assert user(node_gets(fake_api)[-1]) == "pair-new"
    finally:
        assert h.stop() == 0


def same_size_pems(fake_api, *cns):
    """Kubelet-style files for cns, padded with newlines to one size, so that
    one can overwrite another in place without changing its metadata."""
    pems = [kubelet_pem(fake_api, cn) for cn in cns]
    size = max(len(p) for p in pems)
    return [p + b"\n" * (size - len(p)) for p in pems]


def overwrite_in_place(path, data):
    """Rewrites the file behind path keeping inode, size and mtime: only a
    forced re-read can notice."""
    st = os.stat(path)
    assert st.st_size == len(data)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_k8s_client_certificate_is_reread_after_401(fake_api, tmp_path):
    """A 401 answer forces a re-read even if the file's metadata looks the
    same, and the request is retried once with the new certificate."""
    fake_api.create(node())
    old, new = same_size_pems(fake_api, "refused-old", "refused-new")
    pki, current = kubelet_pki(fake_api, tmp_path, "unused")
    write_file(current, old)
    kc = write_kubeconfig(fake_api, tmp_path / "kubelet.conf", current, current)
    h = Harness(["--kubeconfig", kc, "--node", NODE, "--informers", "node"])
    try:
        h.event("synced", kind="Node")
        assert get_node(h)["status"] == 200
        overwrite_in_place(current, new)
        # The server refuses the old certificate once: a revocation.
        fake_api.fail_next(1, status=401, path_prefix=f"/api/v1/nodes/{NODE}", method="GET")
        g = get_node(h)
        assert g["status"] == 200, g
        gets = node_gets(fake_api)
        assert [(user(r), r["status"]) for r in gets[-2:]] == \
            [("refused-old", 401), ("refused-new", 200)]
    finally:
        assert h.stop() == 0


def test_k8s_client_certificate_is_reread_after_tls_failure(fake_api, tmp_path):
    """A certificate the server's CA did not sign fails the handshake; the
    file is fixed in place (same metadata) and the next attempt reads it
    again instead of failing forever."""
    fake_api.create(node())
    other = FakeApiServer(tmp_path / "other", control_port=None).start()
    try:
        foreign_cert, foreign_key = certs.client_cert(other.workdir, "foreign", GROUP)
    finally:
        other.stop()
    good = kubelet_pem(fake_api, "fixed")
    bad = foreign_cert + foreign_key
    size = max(len(good), len(bad))
    good, bad = good + b"\n" * (size - len(good)), bad + b"\n" * (size - len(bad))
    pki, current = kubelet_pki(fake_api, tmp_path, "unused")
    write_file(current, bad)
    kc = write_kubeconfig(fake_api, tmp_path / "kubelet.conf", current, current)
    h = Harness(["--kubeconfig", kc, "--node", NODE, "--informers", "node"])
    try:
        # The handshake fails: no HTTP answer.  (The message varies with the
        # moment the server drops the connection: a TLS alert, or a reset.)
        e = h.event("error", kind="Node")
        assert e["status"] == 0 and e["error"] < 0, e
        overwrite_in_place(current, good)
        h.event("synced", kind="Node", timeout=30)
        assert user([r for r in fake_api.requests() if r["path"] == "/api/v1/nodes"][-1]) == "fixed"
    finally:
        assert h.stop() == 0


def test_kvolumed_uses_the_rotated_certificate_without_restart(volume_env, fake_api, tmp_path):
    """The daemon itself, with a kubelet-style kubeconfig: a volume mounted
    after the rotation is reported by the new certificate's user."""
    env = volume_env
    env.csidriver(attachRequired=False, volumeLifecycleModes=["Ephemeral"])
    pki, current = kubelet_pki(fake_api, tmp_path, "kvolumed-old")
    kc = write_kubeconfig(fake_api, tmp_path / "kubelet.conf", current, current)
    # Debug level: a Normal event (a POST) records each successful mount.
    config = write_config(tmp_path / "kvolumed.conf", env.root, kc,
                          f'[driver "{DRIVER}"]\nendpoint = {env.driver.endpoint}\n[log]\nlevel = debug\n')
    env.agent = env.start_agent(config)

    def mount_event_post(pod_name):
        def find():
            return [r for r in fake_api.requests()
                    if r["method"] == "POST" and r["path"].endswith("/events") and r["status"] == 201
                    and isinstance(r["body"], dict)
                    and r["body"].get("involvedObject", {}).get("name") == pod_name
                    and r["body"].get("reason") == "SuccessfulMountVolume"]
        return wait_until(find, 15, what=f"the mount event of {pod_name}")[0]

    first = env.pod("first", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(first, "scratch"))
    assert user(mount_event_post("first")) == "kvolumed-old"

    second_file = str(pki / "kubelet-client-2024-06-01-00-00-00.pem")
    write_file(second_file, kubelet_pem(fake_api, "kvolumed-new"))
    switch_symlink(current, second_file)

    second = env.pod("second", [{"name": "scratch", "csi": {"driver": DRIVER}}])
    env.wait_mounted(env.target(second, "scratch"))
    post = mount_event_post("second")
    assert user(post) == "kvolumed-new"
    later = fake_api.requests()
    later = later[next(i for i, r in enumerate(later) if user(r) == "kvolumed-new"):]
    assert all(user(r) == "kvolumed-new" for r in later), [(r["method"], r["path"], user(r)) for r in later]
    assert env.agent.proc.poll() is None
