"""Fake API server: the command line and the control port."""
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request

import pytest

TEST_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KUBECTL = "/usr/bin/kubectl"


def control(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture
def cli(tmp_path):
    load = tmp_path / "objects.yaml"
    load.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n---\n"
                    "apiVersion: v1\nkind: List\nitems:\n"
                    "- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n"
                    "  spec: {nodeName: n1, containers: [{name: c, image: x}]}\n")
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-m", "doubles.fakeapi", "--dir", str(tmp_path / "d"),
         "--load", str(load)],
        stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=TEST_DIR))
    line = proc.stdout.readline()
    try:
        yield proc, json.loads(line), tmp_path / "d"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_writes_files_and_prints_endpoints(cli):
    proc, ep, d = cli
    assert sorted(os.listdir(d)) == sorted([
        "ca.crt", "ca.key", "client.crt", "client.key", "endpoints.json", "kubeconfig",
        "server.crt", "server.key", "token"])
    assert json.loads((d / "endpoints.json").read_text()) == ep
    assert ep["server"].startswith("https://127.0.0.1:")
    assert ep["control"].startswith("http://127.0.0.1:")
    assert ep["kubeconfig"] == str(d / "kubeconfig")
    kubeconfig = (d / "kubeconfig").read_text()
    assert f'server: "{ep["server"]}"' in kubeconfig
    assert "current-context: fakeapi" in kubeconfig
    assert (d / "token").read_text().strip() in kubeconfig
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_cli_control_port(cli):
    _, ep, _ = cli
    base = ep["control"]
    status, pods = control(base, "GET", "/objects/pods?namespace=default")
    assert status == 200 and [p["metadata"]["name"] for p in pods["items"]] == ["p"]
    status, created = control(base, "POST", "/objects", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}})
    assert status == 201 and created["metadata"]["resourceVersion"]
    status, err = control(base, "POST", "/objects", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"}})
    assert (status, err["reason"]) == (409, "AlreadyExists")
    status, res = control(base, "DELETE", "/objects/pods/p?namespace=default")
    assert status == 200 and res["removed"] is False      # bound: graceful
    status, _ = control(base, "DELETE", "/objects/pods/p?namespace=default&force=1")
    assert status == 200
    assert control(base, "GET", "/objects/pods/p?namespace=default")[0] == 404
    state = control(base, "GET", "/state")[1]
    assert control(base, "POST", "/compact")[1] == {
        "compactedResourceVersion": state["resourceVersion"]}
    assert control(base, "POST", "/watches/close", {})[1] == {"closed": 0}
    assert control(base, "PUT", "/config", {"bookmarkInterval": 0.5})[1][
        "bookmarkInterval"] == 0.5
    assert control(base, "GET", "/nothing")[0] == 404


@pytest.mark.skipif(not os.path.exists(KUBECTL), reason="kubectl is not installed")
def test_cli_kubeconfig_works_with_kubectl_and_faults(cli, tmp_path):
    _, ep, d = cli
    env = dict(os.environ, HOME=str(tmp_path))

    def kubectl(*args):
        return subprocess.run([KUBECTL, "--kubeconfig", ep["kubeconfig"],
                               "--cache-dir", str(tmp_path / "kc"), *args],
                              capture_output=True, text=True, env=env, timeout=60)
    p = kubectl("get", "nodes", "-o", "name")
    assert (p.returncode, p.stdout) == (0, "node/n1\n")
    control(ep["control"], "POST", "/faults/fail",
            {"count": 1, "status": 500, "pathPrefix": "/api/v1/nodes/n1"})
    p = kubectl("get", "node", "n1")
    assert p.returncode == 1 and "InternalError" in p.stderr
    assert kubectl("get", "node", "n1").returncode == 0
    status, reqs = control(ep["control"], "GET", "/requests")
    node_gets = [r["status"] for r in reqs if r["path"] == "/api/v1/nodes/n1"]
    assert node_gets == [500, 200]
    status, tok = control(ep["control"], "POST", "/tokens/rotate", {})
    assert (d / "token").read_text().strip() == tok["token"]
    # kubectl reads the rewritten kubeconfig, with the new token.
    assert kubectl("get", "node", "n1").returncode == 0
