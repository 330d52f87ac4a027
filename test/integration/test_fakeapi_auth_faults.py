"""Fake API server: authentication and injected faults."""
import http.client
import socket
import ssl
import threading
import time

import pytest

from doubles.fakeapi.testclient import Client

PODS = "/api/v1/namespaces/default/pods"
UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "Unauthorized",
                "reason": "Unauthorized", "code": 401}


def stream_is_cut(watch):
    """True if the watch's connection broke, False if the stream ended as a
    chunked response should (or an event came)."""
    try:
        watch.next(3)
    except (http.client.HTTPException, ConnectionError, OSError):
        return True
    return False


@pytest.mark.parametrize("token", [None, "wrong"])
def test_401_without_valid_token(fake_api, token):
    r = Client(fake_api, token=token).get(PODS)
    assert (r.status, r.json) == (401, UNAUTHORIZED)
    assert fake_api.requests()[-1]["user"] is None


def test_token_rotation(fake_api):
    old = fake_api.token
    assert Client(fake_api).get(PODS).status == 200
    new = fake_api.rotate_token()
    assert new != old and fake_api.tokens() == [new]
    with open(fake_api.token_path) as f:
        assert f.read().strip() == new
    with open(fake_api.kubeconfig_path) as f:
        assert new in f.read()
    assert Client(fake_api, token=old).get(PODS).status == 401
    assert Client(fake_api, token=new).get(PODS).status == 200
    fake_api.set_tokens(["a", "b"])
    assert Client(fake_api, token="b").get(PODS).status == 200
    assert Client(fake_api, token=new).get(PODS).status == 401


def test_client_certificate_replaces_token(fake_api):
    c = Client(fake_api, token=None,
               cert=(fake_api.client_cert_path, fake_api.client_key_path))
    assert c.get(PODS).status == 200
    assert fake_api.requests()[-1]["user"] == "fakeapi-client"


def test_serving_certificate_valid_for_localhost_and_ip(fake_api):
    ctx = ssl.create_default_context(cafile=fake_api.ca_path)
    for host in ("localhost", "127.0.0.1"):
        with socket.create_connection(("127.0.0.1", fake_api.port)) as s:
            with ctx.wrap_socket(s, server_hostname=host) as tls:
                assert tls.version().startswith("TLS")
                assert tls.selected_alpn_protocol() is None


def test_fail_next_counts_and_retry_after(fake_api):
    c = Client(fake_api)
    fake_api.fail_next(2, status=429, retry_after=3, path_prefix="/api/v1/nodes")
    assert c.get(PODS).status == 200                      # not matching
    r = c.get("/api/v1/nodes")
    assert (r.status, r.headers["Retry-After"]) == (429, "3")
    assert r.json["reason"] == "TooManyRequests"
    assert r.json["details"] == {"retryAfterSeconds": 3}
    assert c.get("/api/v1/nodes").status == 429
    assert c.get("/api/v1/nodes").status == 200           # only two
    fake_api.fail_next(1, status=500, method="POST")
    assert c.get(PODS).status == 200
    r = c.request("POST", PODS, {"metadata": {"name": "a"}, "spec": {}})
    assert (r.status, r.json["reason"]) == (500, "InternalError")
    assert [e["status"] for e in fake_api.requests()] == \
        [200, 429, 429, 200, 200, 500]


def test_delay(fake_api):
    c = Client(fake_api)
    fake_api.set_delay(0.5, path_prefix="/api/v1/nodes")
    start = time.monotonic()
    assert c.get(PODS).status == 200
    assert time.monotonic() - start < 0.4
    start = time.monotonic()
    assert c.get("/api/v1/nodes").status == 200
    assert time.monotonic() - start >= 0.5
    fake_api.set_delay(0)
    start = time.monotonic()
    c.get("/api/v1/nodes")
    assert time.monotonic() - start < 0.4


def test_refuse_connections(fake_api):
    fake_api.refuse_connections(0.7)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", fake_api.port), timeout=2)
    time.sleep(1.0)
    assert Client(fake_api).get(PODS).status == 200


def test_reset_connections(fake_api):
    fake_api.refuse_connections(0.7, mode="reset")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        Client(fake_api).get(PODS, timeout=2)
    time.sleep(1.0)
    assert Client(fake_api).get(PODS).status == 200


def test_refuse_cuts_open_watches(fake_api):
    w = Client(fake_api).watch(PODS, resourceVersion="0")
    fake_api.refuse_connections(0.3)
    assert stream_is_cut(w)


def test_close_watches_cleanly_and_abruptly(fake_api):
    c = Client(fake_api)
    w = c.watch(PODS, resourceVersion="0")
    got = []
    t = threading.Thread(target=lambda: got.append(w.next(5)))
    t.start()
    time.sleep(0.2)
    assert fake_api.close_watches() == 1
    t.join()
    assert got == [None]                  # chunked stream terminated properly
    w = c.watch(PODS, resourceVersion="0")
    time.sleep(0.2)
    assert fake_api.state()["watches"] == 1
    assert fake_api.close_watches(abrupt=True) == 1
    assert stream_is_cut(w)
    assert fake_api.state()["watches"] == 0
