"""A fake kube-apiserver for kvolumed's integration tests.

HTTPS (HTTP/1.1 only; HTTP/2 is not modelled, ALPN offers http/1.1) on
127.0.0.1 with a CA generated per server; bearer tokens or a client
certificate signed by that CA; pods, nodes, namespaces, persistentvolumes,
persistentvolumeclaims, secrets, configmaps, serviceaccounts, events (core/v1)
and csidrivers, csinodes, volumeattachments (storage.k8s.io/v1) with get,
list, watch, create, update, patch (merge, strategic merge, JSON patch),
delete, deletecollection, the status subresource where the real resource has
one and serviceaccounts/<name>/token (TokenRequest).

Identities and the Node authorizer (nodeauth.py): the server's own token and
client certificate (O=system:masters) are broad identities that may do
everything.  A node's identity (user system:node:<node>, group system:nodes:
a token from node_token(), or a client certificate with CN=system:node:<node>,
O=system:nodes from node_client_cert()) gets exactly what kube-apiserver with
--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction
gives it, with the real 403 bodies: pods read, its own pods' status, Node
create/read and writes of its own Node (no taint changes, no kubernetes.io /
k8s.io labels outside kubelet's set), secrets/configmaps/PVCs/PVs/
VolumeAttachments/service account tokens only through the graph of the pods
bound to it (PVCs, PVs, VolumeAttachments by GET only), its own CSINode,
csidrivers read, events written.  The graph is derived from the stored
objects per request; set_graph_lag(N) makes pods bound, PVs bound and
VolumeAttachments placed less than N seconds ago invisible to it, as the real
graph lags (kubernetes#128910).

In-process:

    from doubles.fakeapi import FakeApiServer
    with FakeApiServer(tmpdir) as api:          # or api.start() / api.stop()
        api.create({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "n1"}})
        api.server_url, api.ca_path, api.token, api.token_path,
        api.kubeconfig_path, api.client_cert_path, api.client_key_path
        api.node_kubeconfig("n1")              # path; the node's token
        api.node_kubeconfig("n1", auth="cert", cert_path=p, key_path=p)
        api.node_token("n1"), api.node_client_cert("n1"[, cert, key])
        api.set_graph_lag(2.0), api.node_graph("n1")
        api.bind_claim("ns", "claim", "pv", state="Bound")   # or "Pending",
                    # "PVReserved", "PVBound": the PV controller's steps

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
                                             watches (open), connectionsReset (closed
                                             unanswered by /faults/refuse "reset", in
                                             all), config, endpoints
    PUT    /config        {"bookmarkInterval": s, "defaultWatchTimeout": s,
                           "podGracefulDelete": bool,
                           "tokenMaxExpiration": s}     (any subset; 0: no cap on
                                             the TokenRequests' expirationSeconds)
    POST   /objects       <object>           create (status kept) -> 201 object
    PUT    /objects       <object>           write whole object (status too) -> 200
    GET    /objects/<resource>[?namespace=]  {"items": [...], "resourceVersion": "N"}
    GET    /objects/<resource>/<name>[?namespace=]          -> object
    DELETE /objects/<resource>/<name>[?namespace=][&gracePeriodSeconds=N]
                                             as the API: {"object", "removed"}
    DELETE /objects/<resource>/<name>?force=1[&namespace=]  remove for good -> object
    GET    /requests                         the request log (see FakeApiServer.requests)
    DELETE /requests                         clear it
    GET    /tokenrequests                    {"items": [...]}: the TokenRequests answered
                                             (FakeApiServer.token_requests)
    GET    /tokens                           {"tokens": [...]}
    PUT    /tokens        {"tokens": [...]}  replace the valid tokens
    POST   /tokens/rotate {"revokeOld": true} new token, rewrites token and kubeconfig
    POST   /faults/fail   {"count": N, "status": 500|429|503|..., "retryAfter": s,
                           "pathPrefix": "/api/v1/pods", "method": "GET"}
    POST   /faults/delay  {"seconds": D, "pathPrefix": ..., "method": ...}  (0 clears)
    POST   /faults/refuse {"seconds": T, "mode": "refuse"|"reset"}
    POST   /faults/graphlag {"seconds": N}  node authorizer graph lag (0 clears)
    POST   /faults/ignorefieldselector {"pathPrefix": "/api/v1/pods"}
                                             lists and watches there ignore fieldSelector
    POST   /faults/clear                     (the graph lag too)
    GET    /tokens/identities                {"tokens": {token: {"user", "groups"}}}
    POST   /tokens/identities {"token", "user", "groups": [...]}
    POST   /nodes/<node>/token               {"token"}: the node's bearer token
    POST   /nodes/<node>/certificate {"clientCert"?, "clientKey"?}
                                             a new node certificate -> the paths
    POST   /nodes/<node>/kubeconfig {"auth": "token"|"cert", "clientCert"?,
                                     "clientKey"?, "path"?} -> {"kubeconfig"}
    GET    /nodes/<node>/graph               what the node may reach now
    POST   /watches/close {"abrupt": false}  -> {"closed": n}
    POST   /compact                          -> {"compactedResourceVersion": "N"}

<resource> is a plural, singular, kind or short name ("pods", "Pod", "po",
"csidrivers.storage.k8s.io"); the namespace defaults to "default".  Errors
come back as kube-style Status bodies with the matching HTTP code.
"""
from .server import FakeApiServer

__all__ = ["FakeApiServer"]
