"""A fake kube-apiserver for kvolumed's integration tests.

HTTPS (HTTP/1.1 only; HTTP/2 is not modelled, ALPN offers http/1.1) on
127.0.0.1 with a CA generated per server; bearer tokens or a client
certificate signed by that CA; pods, nodes, namespaces, persistentvolumes,
persistentvolumeclaims, secrets, events (core/v1) and csidrivers, csinodes,
volumeattachments (storage.k8s.io/v1) with get, list, watch, create, update,
patch (merge, strategic merge, JSON patch), delete, deletecollection and the
status subresource where the real resource has one.

In-process:

    from doubles.fakeapi import FakeApiServer
    with FakeApiServer(tmpdir) as api:          # or api.start() / api.stop()
        api.create({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "n1"}})
        api.server_url, api.ca_path, api.token, api.token_path,
        api.kubeconfig_path, api.client_cert_path, api.client_key_path

Command line (PYTHONPATH=<repo>/test):

    /usr/bin/python3 -m doubles.fakeapi --dir DIR [--port 0]
        [--control-port 0] [--bookmark-interval 1] [--load FILE]...

writes DIR/{ca.crt, token, kubeconfig, client.crt, client.key,
endpoints.json}, prints endpoints.json's content as one JSON line
({"server", "control", "ca", "token", "kubeconfig", "clientCert",
"clientKey"}) when it serves, and runs until SIGTERM or SIGINT.

Control port (plain HTTP on 127.0.0.1, JSON bodies, no auth):

    GET    /healthz                          {"ok": true}
    GET    /state                            resourceVersion, compactedResourceVersion,
                                             watches (open), config, endpoints
    PUT    /config        {"bookmarkInterval": s, "defaultWatchTimeout": s,
                           "podGracefulDelete": bool}   (any subset)
    POST   /objects       <object>           create (status kept) -> 201 object
    PUT    /objects       <object>           write whole object (status too) -> 200
    GET    /objects/<resource>[?namespace=]  {"items": [...], "resourceVersion": "N"}
    GET    /objects/<resource>/<name>[?namespace=]          -> object
    DELETE /objects/<resource>/<name>[?namespace=][&gracePeriodSeconds=N]
                                             as the API: {"object", "removed"}
    DELETE /objects/<resource>/<name>?force=1[&namespace=]  remove for good -> object
    GET    /requests                         the request log (see FakeApiServer.requests)
    DELETE /requests                         clear it
    GET    /tokens                           {"tokens": [...]}
    PUT    /tokens        {"tokens": [...]}  replace the valid tokens
    POST   /tokens/rotate {"revokeOld": true} new token, rewrites token and kubeconfig
    POST   /faults/fail   {"count": N, "status": 500|429|503|..., "retryAfter": s,
                           "pathPrefix": "/api/v1/pods", "method": "GET"}
    POST   /faults/delay  {"seconds": D, "pathPrefix": ..., "method": ...}  (0 clears)
    POST   /faults/refuse {"seconds": T, "mode": "refuse"|"reset"}
    POST   /faults/clear
    POST   /watches/close {"abrupt": false}  -> {"closed": n}
    POST   /compact                          -> {"compactedResourceVersion": "N"}

<resource> is a plural, singular, kind or short name ("pods", "Pod", "po",
"csidrivers.storage.k8s.io"); the namespace defaults to "default".  Errors
come back as kube-style Status bodies with the matching HTTP code.
"""
from .server import FakeApiServer

__all__ = ["FakeApiServer"]
