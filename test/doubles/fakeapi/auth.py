"""Authentication as kube-apiserver with --anonymous-auth=false: an x509
client certificate signed by the CA, or a bearer token from a set that tests
may change while the server runs (token rotation).

Who a request is: an Identity (user name and groups).  A client certificate
names its user in the subject's CN and its groups in the O attributes, as
kube-apiserver reads them.  A token is either a plain token (the server's own
token and what set_tokens() installs): a broad identity in group
system:masters that may do everything, or a token registered with a user and
groups by add_identity_token() (a node's token: user system:node:<node>,
group system:nodes), which the node authorizer restricts.
"""
import threading
from dataclasses import dataclass

NODE_USER_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
MASTERS_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"


@dataclass(frozen=True)
class Identity:
    name: str
    groups: tuple = ()

    def node(self):
        """(node name, True) for a node's identity, as nodeidentifier does:
        the user is system:node:<name> AND in group system:nodes; else
        ("", False).  The name may be empty (an unidentifiable node)."""
        if not self.name.startswith(NODE_USER_PREFIX) \
                or NODES_GROUP not in self.groups:
            return "", False
        return self.name[len(NODE_USER_PREFIX):], True


def node_identity(node_name):
    return Identity(NODE_USER_PREFIX + node_name,
                    (NODES_GROUP, AUTHENTICATED_GROUP))


class Authenticator:
    def __init__(self, tokens):
        self._lock = threading.Lock()
        self._tokens = set(tokens)
        self._identities = {}        # token -> Identity

    def set_tokens(self, tokens):
        """Replaces the plain (broad) tokens; identity tokens stay."""
        with self._lock:
            self._tokens = set(tokens)

    def add_token(self, token):
        with self._lock:
            self._tokens.add(token)

    def tokens(self):
        """The plain tokens."""
        with self._lock:
            return sorted(self._tokens)

    def add_identity_token(self, token, user, groups=()):
        """token authenticates as user with groups (system:authenticated is
        added, as the real server does for every authenticated user)."""
        groups = tuple(groups)
        if AUTHENTICATED_GROUP not in groups:
            groups += (AUTHENTICATED_GROUP,)
        with self._lock:
            self._identities[token] = Identity(user, groups)

    def remove_identity_token(self, token):
        with self._lock:
            self._identities.pop(token, None)

    def identity_tokens(self):
        """{token: {"user": ..., "groups": [...]}}"""
        with self._lock:
            return {t: {"user": i.name, "groups": list(i.groups)}
                    for t, i in self._identities.items()}

    def authenticate(self, authorization, peer_cert):
        """The Identity, or None.  peer_cert is what SSLSocket.getpeercert()
        returns: only a certificate that verified against the CA is there."""
        if peer_cert:
            cn, orgs = None, []
            for rdn in peer_cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName" and cn is None:
                        cn = value
                    elif key == "organizationName":
                        orgs.append(value)
            if cn is not None:
                return Identity(cn, tuple(orgs) + (AUTHENTICATED_GROUP,))
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            with self._lock:
                if token in self._identities:
                    return self._identities[token]
                if token in self._tokens:
                    return Identity("token:" + token[:8],
                                    (MASTERS_GROUP, AUTHENTICATED_GROUP))
        return None
