"""FakeApiServer: the fake kube-apiserver and the handle tests drive it by."""
import json
import os
import secrets
import ssl
import threading
import time
import uuid

import yaml

from . import binding, certs, resources, selfsubject, tokenreview
from .apihandler import ApiHandler
from .auth import NODE_USER_PREFIX, NODES_GROUP, Authenticator
from .control import ControlHandler
from .faults import Faults
from .listener import Listener
from .nodeauth import GraphClock, NodeAuthorizer, NodeRestriction
from .requestlog import RequestLog
from .store import Store

DEFAULT_NAMESPACE = "default"


def _write_atomic(path, text, mode=0o600):
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode),
              "w") as f:
        f.write(text)
    os.rename(tmp, path)


# The versions of clusterTrustBundles a server may serve (configure()).
CLUSTER_TRUST_BUNDLE_MODES = ("none", "v1alpha1", "v1beta1")


class FakeApiServer:
    def __init__(self, workdir, port=0, control_port=0, bookmark_interval=1.0,
                 default_watch_timeout=1800.0, pod_graceful_delete=True):
        """control_port=None: no control port (in-process use only).
        default_watch_timeout: for watches without timeoutSeconds (the real
        server picks 1800-3600 s)."""
        self.workdir = os.path.abspath(workdir)
        self.store = Store(pod_graceful_delete)
        self.faults = Faults()
        self.log = RequestLog()
        self.token = secrets.token_hex(16)
        self.auth = Authenticator([self.token])
        self.graph_clock = GraphClock()
        self.store.listeners.append(self.graph_clock.observe)
        self.node_authorizer = NodeAuthorizer(self.store, self.graph_clock,
                                              lambda: self.faults.graph_lag)
        self.node_restriction = NodeRestriction(self.store)
        self._node_tokens = {}       # node name -> token
        self._token_lock = threading.Lock()
        self._token_requests = []    # TokenRequests answered, oldest first
        self.token_max_expiration = None  # seconds: cap on issued tokens
        self._node_certs = 0         # node certificates issued so far
        self.bookmark_interval = float(bookmark_interval)
        self.self_subject_review = "v1"  # selfsubject.MODES: the versions served
        # The version of certificates.k8s.io clustertrustbundles served, or
        # "none": beta (v1beta1) since 1.33 and off by default, so a
        # cluster answers 404 unless its admin turned the API on.
        self.cluster_trust_bundles = "none"
        self._issued = {}            # token -> what TokenReview tells of it
        self.default_watch_timeout = float(default_watch_timeout)
        self._port, self._control_port = port, control_port
        self._api = self._control = None
        self.ca_path = os.path.join(self.workdir, "ca.crt")
        self.token_path = os.path.join(self.workdir, "token")
        self.kubeconfig_path = os.path.join(self.workdir, "kubeconfig")
        self.client_cert_path = os.path.join(self.workdir, "client.crt")
        self.client_key_path = os.path.join(self.workdir, "client.key")
        self.endpoints_path = os.path.join(self.workdir, "endpoints.json")
        self.nodes_dir = os.path.join(self.workdir, "nodes")

    # -- life cycle ----------------------------------------------------------

    def start(self):
        os.makedirs(self.workdir, exist_ok=True)
        pki = certs.write_pki(self.workdir)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki["server.crt"], pki["server.key"])
        ctx.load_verify_locations(pki["ca.crt"])
        ctx.verify_mode = ssl.CERT_OPTIONAL     # a client cert, or a token
        ctx.set_alpn_protocols(["http/1.1"])    # HTTP/2 is not modelled
        self._api = Listener("127.0.0.1", self._port, ApiHandler, self, ctx)
        self._api.start()
        if self._control_port is not None:
            self._control = Listener("127.0.0.1", self._control_port,
                                     ControlHandler, self)
            self._control.start()
        self._write_client_files()
        return self

    def stop(self):
        self.store.close_watches()
        for listener in (self._api, self._control):
            if listener is not None:
                listener.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        return self._api.port

    @property
    def server_url(self):
        return f"https://127.0.0.1:{self._api.port}"

    @property
    def control_url(self):
        return f"http://127.0.0.1:{self._control.port}" if self._control else None

    def endpoints(self):
        return {"server": self.server_url, "control": self.control_url,
                "ca": self.ca_path, "token": self.token_path,
                "kubeconfig": self.kubeconfig_path,
                "clientCert": self.client_cert_path,
                "clientKey": self.client_key_path}

    def _write_client_files(self):
        q = json.dumps     # a JSON string is a valid YAML double-quoted scalar
        kubeconfig = f"""apiVersion: v1
kind: Config
clusters:
- name: fakeapi
  cluster:
    server: {q(self.server_url)}
    certificate-authority: {q(self.ca_path)}
users:
- name: fakeapi-token
  user:
    token: {q(self.token)}
- name: fakeapi-cert
  user:
    client-certificate: {q(self.client_cert_path)}
    client-key: {q(self.client_key_path)}
contexts:
- name: fakeapi
  context:
    cluster: fakeapi
    user: fakeapi-token
    namespace: {DEFAULT_NAMESPACE}
- name: fakeapi-cert
  context:
    cluster: fakeapi
    user: fakeapi-cert
    namespace: {DEFAULT_NAMESPACE}
current-context: fakeapi
"""
        _write_atomic(self.token_path, self.token + "\n")
        _write_atomic(self.kubeconfig_path, kubeconfig)
        _write_atomic(self.endpoints_path, json.dumps(self.endpoints()) + "\n",
                      0o644)

    # -- objects -------------------------------------------------------------

    @staticmethod
    def _resource_of(obj):
        res = resources.by_api_version_kind(obj.get("apiVersion"), obj.get("kind"))
        if res is None:
            raise KeyError(f"no resource for apiVersion {obj.get('apiVersion')!r}"
                           f" kind {obj.get('kind')!r}")
        return res

    @staticmethod
    def _namespace(res, namespace):
        return (namespace or DEFAULT_NAMESPACE) if res.namespaced else None

    def create(self, obj, uid=None):
        """Creates obj (kind and apiVersion required) as a POST would, but
        with its status kept; returns the stored object.  uid: the test
        chooses the object's UID (a client never can: a POST's is ignored),
        to wait for an object before it exists."""
        res = self._resource_of(obj)
        ns = self._namespace(res, (obj.get("metadata") or {}).get("namespace"))
        return self.store.create(res, ns, obj, uid=uid)

    def update(self, obj):
        """Writes obj whole, status included; a metadata.resourceVersion in
        obj is a precondition (409 Conflict if stale), none means
        unconditional."""
        res = self._resource_of(obj)
        m = obj.get("metadata") or {}
        return self.store.update(res, self._namespace(res, m.get("namespace")),
                                 m.get("name"), obj, scope="all")

    def get(self, resource, namespace, name):
        res = resources.lookup(resource)
        return self.store.get(res, self._namespace(res, namespace), name)

    def list(self, resource, namespace=None):
        """(items, resourceVersion); namespace None = all namespaces."""
        return self.store.list(resources.lookup(resource), namespace)

    def delete(self, resource, namespace, name, grace_period_seconds=None):
        """As a DELETE request: (object, removed); finalizers and a bound
        pod's grace period leave the object in place, marked."""
        res = resources.lookup(resource)
        return self.store.delete(res, self._namespace(res, namespace), name,
                                 grace_period_seconds)

    def remove(self, resource, namespace, name):
        """Removes the object for good (DELETED event), finalizers or not."""
        res = resources.lookup(resource)
        return self.store.remove(res, self._namespace(res, namespace), name)

    def bind_claim(self, namespace, claim, pv, state="Bound"):
        """Binds claim and PV as the PV controller does, up to `state`
        ("Pending", "PVReserved", "PVBound" or "Bound", see binding.py);
        returns (claim, pv)."""
        return binding.bind(self, namespace, claim, pv, state)

    def load(self, path):
        """Creates every object of a JSON or (multi-document) YAML file;
        `kind: List` documents are unpacked."""
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        created = []
        for doc in docs:
            for obj in doc.get("items", []) if doc.get("kind") == "List" else [doc]:
                created.append(self.create(obj))
        return created

    @property
    def resource_version(self):
        return self.store.resource_version

    # -- requests and auth ---------------------------------------------------

    def requests(self):
        """Every API request so far: dicts with time, method, path, query
        (name -> last value), headers (authorization, content-type, accept,
        user-agent, accept-encoding), body (parsed JSON or text), status,
        user (None if unauthenticated), groups (the user's, when
        authenticated), watch (True for a watch stream)."""
        return self.log.entries()

    def clear_requests(self):
        self.log.clear()

    def tokens(self):
        return self.auth.tokens()

    def set_tokens(self, tokens):
        self.auth.set_tokens(tokens)

    def add_token(self, token):
        self.auth.add_token(token)

    def rotate_token(self, revoke_old=True):
        """A new valid token, written to the token file and the kubeconfig;
        the old one stops working unless revoke_old is False."""
        old, self.token = self.token, secrets.token_hex(16)
        self.auth.add_token(self.token)
        if revoke_old:
            self.auth.set_tokens(t for t in self.auth.tokens() if t != old)
        self._write_client_files()
        return self.token

    # -- node identities -----------------------------------------------------

    def add_identity_token(self, token, user, groups=()):
        """token authenticates as user in groups (the node authorizer
        restricts a user system:node:<name> in group system:nodes)."""
        self.auth.add_identity_token(token, user, groups)

    def node_token(self, node):
        """A bearer token for the node's identity (system:node:<node>, group
        system:nodes), the same one on every call."""
        if node not in self._node_tokens:
            token = secrets.token_hex(16)
            self.auth.add_identity_token(token, NODE_USER_PREFIX + node,
                                         (NODES_GROUP,))
            self._node_tokens[node] = token
        return self._node_tokens[node]

    def node_client_cert(self, node, cert_path=None, key_path=None):
        """A new client certificate for the node's identity (CN
        system:node:<node>, O system:nodes) signed by the server's CA:
        (cert_path, key_path).  Without paths, new files under nodes/;
        cert_path == key_path writes one PEM with both, as kubelet's
        kubelet-client-current.pem.  Files are replaced atomically."""
        self._node_certs += 1
        if cert_path is None:
            os.makedirs(self.nodes_dir, exist_ok=True)
            base = os.path.join(self.nodes_dir, f"{node}-{self._node_certs}")
            cert_path, key_path = base + ".crt", base + ".key"
        key_path = key_path or cert_path
        cert, key = certs.client_cert(self.workdir, NODE_USER_PREFIX + node,
                                      NODES_GROUP)
        if key_path == cert_path:
            _write_atomic(cert_path, (cert + key).decode())
        else:
            _write_atomic(cert_path, cert.decode())
            _write_atomic(key_path, key.decode())
        return cert_path, key_path

    def node_kubeconfig(self, node, auth="token", cert_path=None,
                        key_path=None, path=None):
        """A kubeconfig file for the node's identity; returns its path
        (default nodes/<node>-<auth>.kubeconfig).  auth "token": the
        node_token() inline; "cert": client-certificate/client-key files,
        cert_path/key_path if given (they may be one file, and may be
        replaced later: clients re-read them), else a new node_client_cert."""
        q = json.dumps
        if auth == "token":
            user = f"    token: {q(self.node_token(node))}\n"
        elif auth == "cert":
            if cert_path is None:
                cert_path, key_path = self.node_client_cert(node)
            user = (f"    client-certificate: {q(str(cert_path))}\n"
                    f"    client-key: {q(str(key_path or cert_path))}\n")
        else:
            raise ValueError(f"auth must be 'token' or 'cert', not {auth!r}")
        os.makedirs(self.nodes_dir, exist_ok=True)
        path = str(path or os.path.join(self.nodes_dir,
                                        f"{node}-{auth}.kubeconfig"))
        _write_atomic(path, f"""apiVersion: v1
kind: Config
clusters:
- name: fakeapi
  cluster:
    server: {q(self.server_url)}
    certificate-authority: {q(self.ca_path)}
users:
- name: {q(NODE_USER_PREFIX + node)}
  user:
{user}contexts:
- name: fakeapi-node
  context:
    cluster: fakeapi
    user: {q(NODE_USER_PREFIX + node)}
    namespace: {DEFAULT_NAMESPACE}
current-context: fakeapi-node
""")
        return path

    def node_graph(self, node):
        """What the node authorizer lets the node reach now (lag applied):
        {"pods", "secrets", "configmaps", "persistentvolumeclaims",
        "serviceaccounts": ["ns/name", ...], "persistentvolumes",
        "volumeattachments": ["name", ...]}."""
        g = self.node_authorizer.graph(node)

        def names(pairs):
            return sorted(f"{ns}/{n}" for ns, n in pairs)
        return {"pods": names(g.pods), "secrets": names(g.secrets),
                "configmaps": names(g.configmaps),
                "persistentvolumeclaims": names(g.claims),
                "serviceaccounts": names(g.service_accounts),
                "persistentvolumes": sorted(g.volumes),
                "volumeattachments": sorted(g.attachments)}

    # -- faults --------------------------------------------------------------

    def set_graph_lag(self, seconds):
        """The node authorizer's graph lags `seconds` behind: pods bound,
        PVs bound to a claim and VolumeAttachments placed on a node less
        than that long ago are not in it yet, so a node's requests that need
        them get 403 "no relationship found" (kubernetes#128910).  0 ends
        the fault, as clear_faults() does."""
        self.faults.set_graph_lag(seconds)

    def fail_next(self, count, status=500, retry_after=None, path_prefix=None,
                  method=None):
        """The next `count` authenticated requests matching path_prefix and
        method get `status` (429 and 503 carry Retry-After: retry_after)."""
        self.faults.fail_next(count, status, retry_after, path_prefix, method)

    def set_delay(self, seconds, path_prefix=None, method=None):
        """Matching requests wait `seconds` first; 0 removes every delay."""
        self.faults.set_delay(seconds, path_prefix, method)

    def ignore_field_selector(self, path_prefix=None):
        """From now on (until clear_faults), lists and watches under
        path_prefix (all when None) answer as if they had no fieldSelector."""
        self.faults.ignore_field_selector(path_prefix)

    def clear_faults(self):
        self.faults.clear()
        self._api.reset_until = 0.0

    def refuse_connections(self, seconds, mode="refuse"):
        """For `seconds`, "refuse": nothing listens (ECONNREFUSED); "reset":
        connections are accepted and closed at once.  Open connections,
        watches included, are cut."""
        self._api.refuse(seconds, mode)

    def close_watches(self, abrupt=False):
        """Ends every open watch now (abrupt: drop the connection instead of
        ending the stream); returns how many there were."""
        return self.store.close_watches(abrupt)

    def compact(self):
        """Watches from a resourceVersion older than the current one get 410
        from now on; returns the compaction resourceVersion."""
        return str(self.store.compact())

    # -- service account tokens (TokenRequest) ---------------------------------

    def issue_token(self, namespace, service_account, asked, audiences,
                    seconds=3600, pod=None, node=None, sa_uid=None):
        """A recognisable, unique token: fake-token:<ns>/<sa>:<audiences>:<n>:<nonce>.
        pod ({name, uid}) and node ({name, uid}) are its binding, which a
        TokenReview (review_token) tells."""
        with self._token_lock:
            n = len(self._token_requests) + 1
            token = (f"fake-token:{namespace}/{service_account}:"
                     f"{','.join(audiences)}:{n}:{secrets.token_hex(4)}")
            self._issued[token] = {
                "namespace": namespace, "serviceAccount": service_account,
                "serviceAccountUID": sa_uid, "audiences": list(audiences),
                "expires": time.time() + seconds, "pod": pod, "node": node,
                "jti": str(uuid.uuid4())}
        return token

    def review_token(self, body):
        """The TokenReview answer for a review body (tokenreview.review)."""
        spec = (body or {}).get("spec") or {}
        with self._token_lock:
            issued = self._issued.get(spec.get("token"))
        pods = resources.lookup("pods")
        return tokenreview.review(
            issued, lambda ns, name: self.store.peek_one(pods, ns, name), body)

    def serves(self, resource):
        """Whether the API of this resource is on (a mode of the server)."""
        if resource.plural == "clustertrustbundles":
            return resource.version == self.cluster_trust_bundles
        return True

    def record_token_request(self, namespace, service_account, asked, token,
                             audiences, expiration):
        with self._token_lock:
            self._token_requests.append({
                "time": time.time(), "namespace": namespace,
                "serviceAccount": service_account, "spec": asked,
                "token": token, "audiences": audiences,
                "expirationTimestamp": expiration})

    def token_requests(self):
        """Every TokenRequest answered: dicts with time, namespace,
        serviceAccount, spec (as asked: audiences, expirationSeconds,
        boundObjectRef), token, audiences and expirationTimestamp (as issued)."""
        with self._token_lock:
            return [dict(e) for e in self._token_requests]

    def configure(self, bookmarkInterval=None, defaultWatchTimeout=None,
                  podGracefulDelete=None, tokenMaxExpiration=None,
                  selfSubjectReview=None, clusterTrustBundles=None):
        if bookmarkInterval is not None:
            self.bookmark_interval = float(bookmarkInterval)
        if defaultWatchTimeout is not None:
            self.default_watch_timeout = float(defaultWatchTimeout)
        if podGracefulDelete is not None:
            self.store.pod_graceful_delete = bool(podGracefulDelete)
        if selfSubjectReview is not None:
            if selfSubjectReview not in selfsubject.MODES:
                raise ValueError(f"selfSubjectReview must be one of {sorted(selfsubject.MODES)}")
            self.self_subject_review = selfSubjectReview
        if clusterTrustBundles is not None:
            if clusterTrustBundles not in CLUSTER_TRUST_BUNDLE_MODES:
                raise ValueError("clusterTrustBundles must be one of "
                                 f"{sorted(CLUSTER_TRUST_BUNDLE_MODES)}")
            self.cluster_trust_bundles = clusterTrustBundles
        if tokenMaxExpiration is not None:
            self.token_max_expiration = (None if tokenMaxExpiration <= 0
                                         else int(tokenMaxExpiration))

    def state(self):
        return {"resourceVersion": str(self.store.resource_version),
                "compactedResourceVersion": str(self.store.compacted_version),
                "watches": self.store.watch_count(),
                "connectionsReset": self._api.resets,
                "bookmarkInterval": self.bookmark_interval,
                "defaultWatchTimeout": self.default_watch_timeout,
                "podGracefulDelete": self.store.pod_graceful_delete,
                "tokenMaxExpiration": self.token_max_expiration,
                "selfSubjectReview": self.self_subject_review,
                "clusterTrustBundles": self.cluster_trust_bundles,
                "endpoints": self.endpoints()}
