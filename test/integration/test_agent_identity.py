"""Who the API server says kvolumed is (issue 22, Day 1): the fake serves
SelfSubjectReview as kube-apiserver does; --check-config --online asks it;
the daemon asks it at start, logs it once, and refuses another node's
credential (exit 1)."""
import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from doubles.fakeapi import certs
from integration.agent_fixtures import make_node, write_config

NODE = "test-node"


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "KVOLUMED_LOG_TARGET": "stderr"})


def errors(r):
    """stderr without the warnings --check-config gives for valid settings."""
    return "".join(line for line in r.stderr.splitlines(keepends=True) if not line.startswith("warning: "))


def conf(tmp_path, kubeconfig, node=NODE):
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return write_config(tmp_path / "k.conf", str(root), kubeconfig, node=node,
                        extra="[runtime]\nendpoint =\n")


def post(api, path, body, token=None, method="POST"):
    ctx = ssl.create_default_context(cafile=api.ca_path)
    req = urllib.request.Request(api.server_url + path, data=json.dumps(body).encode() if body else None,
                                 method=method, headers={"Authorization": f"Bearer {token or api.token}",
                                                         "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


V1 = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
V1BETA1 = "/apis/authentication.k8s.io/v1beta1/selfsubjectreviews"


def test_fake_serves_selfsubjectreview_as_the_real_server(fake_api):
    token = fake_api.node_token(NODE)
    code, body = post(fake_api, V1, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                      token)
    assert code == 201
    assert body["kind"] == "SelfSubjectReview" and body["apiVersion"] == "authentication.k8s.io/v1"
    assert body["status"]["userInfo"] == {"username": "system:node:" + NODE,
                                          "groups": ["system:nodes", "system:authenticated"]}
    # The real server refuses another kind or version in the body, and GET.
    code, body = post(fake_api, V1, {"apiVersion": "authentication.k8s.io/v1beta1", "kind": "SelfSubjectReview"})
    assert code == 400 and body["reason"] == "BadRequest"
    code, body = post(fake_api, V1, None, method="GET")
    assert code == 405
    # A 1.32 server serves v1 only; a 1.27 one v1beta1; older ones none (404).
    assert post(fake_api, V1BETA1, {"apiVersion": "authentication.k8s.io/v1beta1",
                                     "kind": "SelfSubjectReview"})[0] == 404
    fake_api.configure(selfSubjectReview="v1beta1")
    assert post(fake_api, V1BETA1, {"apiVersion": "authentication.k8s.io/v1beta1",
                                     "kind": "SelfSubjectReview"})[0] == 201
    assert post(fake_api, V1, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})[0] == 404
    fake_api.configure(selfSubjectReview="none")
    assert post(fake_api, V1, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})[0] == 404


@pytest.mark.parametrize("mode", ["v1", "v1beta1"])
def test_online_check_prints_the_node_identity(kvolumed_bin, fake_api, tmp_path, mode):
    fake_api.configure(selfSubjectReview=mode)
    r = run(kvolumed_bin, "--check-config", "--online", "--config",
            conf(tmp_path, fake_api.node_kubeconfig(NODE, auth="cert")))
    assert r.returncode == 0, r.stderr
    assert (f"online: API server {fake_api.server_url}: kvolumed is system:node:{NODE} "
            "(groups system:nodes, system:authenticated)") in r.stdout.splitlines()
    assert [q["path"] for q in fake_api.requests()] == (
        [V1] if mode == "v1" else [V1, V1BETA1])


def test_online_check_on_an_older_server_cannot_tell(kvolumed_bin, fake_api, tmp_path):
    fake_api.configure(selfSubjectReview="none")
    r = run(kvolumed_bin, "--check-config", "--online", "--config", conf(tmp_path, fake_api.node_kubeconfig(NODE)))
    assert r.returncode == 0, r.stderr
    assert (f"online: API server {fake_api.server_url}: cannot tell who kvolumed is (no SelfSubjectReview: "
            "Kubernetes before 1.27); the credential was accepted") in r.stdout.splitlines()


def test_online_check_fails_on_another_authority_on_401_and_on_another_node(kvolumed_bin, fake_api, tmp_path,
                                                                              tmp_path_factory):
    # A CA of another authority: TLS fails.
    other = certs.write_pki(str(tmp_path_factory.mktemp("other-ca")))
    kc = fake_api.node_kubeconfig(NODE)
    bad_ca = tmp_path / "bad-ca.kubeconfig"
    bad_ca.write_text(open(kc).read().replace(fake_api.ca_path, other["ca.crt"]))
    r = run(kvolumed_bin, "--check-config", "--online", "--config", conf(tmp_path, str(bad_ca)))
    assert r.returncode == 1
    assert errors(r).startswith(f"online: [kubernetes] kubeconfig {bad_ca}: API server {fake_api.server_url}: "
                               f"the server's certificate is not signed by {other['ca.crt']}"), r.stderr
    # A token the server does not know: 401.
    bad_token = tmp_path / "bad-token.kubeconfig"
    bad_token.write_text(open(kc).read().replace(fake_api.node_token(NODE), "nobody-knows-this"))
    r = run(kvolumed_bin, "--check-config", "--online", "--config", conf(tmp_path, str(bad_token)))
    assert r.returncode == 1
    assert errors(r).startswith(f"online: [kubernetes] kubeconfig {bad_token}: API server {fake_api.server_url} "
                               "answered 401 Unauthorized"), r.stderr
    # Another node's credential.
    other_kc = fake_api.node_kubeconfig("worker-2")
    path = conf(tmp_path, other_kc)
    r = run(kvolumed_bin, "--check-config", "--online", "--config", path)
    assert r.returncode == 1
    assert errors(r) == (f"online: the credential of [kubernetes] kubeconfig {other_kc} is node worker-2's (user "
                        f"system:node:worker-2), but node-name is {NODE} ({path}:2): the API server would let "
                        "kvolumed act only for node worker-2; use this node's own credential or fix node-name\n")


def test_online_check_escapes_what_the_server_says(kvolumed_bin, fake_api, tmp_path):
    """A user name is whatever the authenticator (a webhook, OIDC) says: one
    with a newline or a terminal escape must neither fake a line of the
    check's output nor reach the terminal (issue 29, safety item 8)."""
    kc = fake_api.node_kubeconfig(NODE)
    text = open(kc).read()

    hostile = f"admin\x1b]0;owned\x07\nonline: API server https://evil: kvolumed is system:node:{NODE}\u202e"
    fake_api.add_identity_token("tok-hostile", hostile, ["system:masters\x1b[2J", "gr\u00fcn"])
    hostile_kc = tmp_path / "hostile.kubeconfig"
    hostile_kc.write_text(text.replace(fake_api.node_token(NODE), "tok-hostile"))
    r = run(kvolumed_bin, "--check-config", "--online", "--config", conf(tmp_path, str(hostile_kc)))
    assert r.returncode == 0, r.stderr
    assert (f"online: API server {fake_api.server_url}: kvolumed is admin\\x1b]0;owned\\x07\\nonline: API server "
            f"https://evil: kvolumed is system:node:{NODE}\\xe2\\x80\\xae (groups system:masters\\x1b[2J, "
            "gr\u00fcn, system:authenticated)") in r.stdout.splitlines()
    assert "\x1b" not in r.stdout + r.stderr
    assert not [line for line in r.stdout.splitlines() if line.startswith("online: API server https://evil")]

    # Another node's identity, with a hostile name: the error escapes it too.
    fake_api.add_identity_token("tok-node", "system:node:w2\x1b[31m\nfake", ["system:nodes"])
    node_kc = tmp_path / "node.kubeconfig"
    node_kc.write_text(text.replace(fake_api.node_token(NODE), "tok-node"))
    path = conf(tmp_path, str(node_kc))
    r = run(kvolumed_bin, "--check-config", "--online", "--config", path)
    assert r.returncode == 1
    assert errors(r) == (f"online: the credential of [kubernetes] kubeconfig {node_kc} is node w2\\x1b[31m\\nfake's "
                         f"(user system:node:w2\\x1b[31m\\nfake), but node-name is {NODE} ({path}:2): the API "
                         "server would let kvolumed act only for node w2\\x1b[31m\\nfake; use this node's own "
                         "credential or fix node-name\n")


def test_start_refuses_another_nodes_credential(start_agent, fake_api, tmp_path):
    """kubeconfig of system:node:worker-2, node-name test-node: exit 1 with a
    line naming the credential and node-name, before any volume work."""
    fake_api.create(make_node())
    other_kc = fake_api.node_kubeconfig("worker-2")
    agent = start_agent(conf(tmp_path, other_kc))
    assert agent.wait(timeout=20) == 1
    out = agent.output()
    assert (f"Refusing to start: the credential of [kubernetes] kubeconfig {other_kc} is node worker-2's "
            "(user system:node:worker-2), but node-name is test-node") in out
    # Nothing was listed for the wrong node.
    assert not [q for q in fake_api.requests() if q["path"] != V1]


@pytest.mark.parametrize("case", ["node", "broad", "old-server"])
def test_start_logs_the_identity_once(start_agent, fake_api, tmp_path, notify_socket, case):
    fake_api.create(make_node())
    if case == "old-server":
        fake_api.configure(selfSubjectReview="none")
    kc = fake_api.kubeconfig_path if case == "broad" else fake_api.node_kubeconfig(NODE)
    agent = start_agent(conf(tmp_path, kc), notify=notify_socket)
    notify_socket.wait_for("READY=1", timeout=20)
    out = agent.output()
    expect = {
        "node": f"API server {fake_api.server_url} says kvolumed is system:node:{NODE} (groups system:nodes, "
                "system:authenticated)\n",
        "broad": f"API server {fake_api.server_url} says kvolumed is token:{fake_api.token[:8]} (groups "
                 "system:masters, system:authenticated): not a node identity",
        "old-server": f"API server {fake_api.server_url} cannot tell who kvolumed is",
    }[case]
    assert out.count(expect) == 1, out
    assert out.count("says kvolumed is") + out.count("cannot tell who kvolumed is") == 1


KUBECTL = "/usr/bin/kubectl"


@pytest.mark.skipif(not os.path.exists(KUBECTL), reason="kubectl is not installed")
@pytest.mark.parametrize("mode", ["v1", "v1beta1", "none"])
def test_kubectl_auth_whoami_agrees_with_the_fake(fake_api, tmp_path, mode):
    """The real client (kubectl auth whoami, which falls back from v1 to
    v1beta1 and v1alpha1 on 404) reads the fake's answers as a real server's."""
    fake_api.configure(selfSubjectReview=mode)
    p = subprocess.run([KUBECTL, "--kubeconfig", fake_api.node_kubeconfig(NODE), "--request-timeout", "10s",
                        "auth", "whoami", "-o", "json"], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, HOME=str(tmp_path)))
    if mode == "none":
        assert p.returncode != 0
        assert "the server doesn't have a resource type" in p.stderr or "not enabled" in p.stderr, p.stderr
        return
    assert p.returncode == 0, p.stderr
    review = json.loads(p.stdout)
    assert review["apiVersion"] == f"authentication.k8s.io/{mode}"
    assert review["status"]["userInfo"]["username"] == "system:node:" + NODE
    assert review["status"]["userInfo"]["groups"] == ["system:nodes", "system:authenticated"]
