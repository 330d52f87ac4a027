"""Authentication as kube-apiserver with --anonymous-auth=false: an x509
client certificate signed by the CA, or a bearer token from a set that tests
may change while the server runs (token rotation)."""
import threading


class Authenticator:
    def __init__(self, tokens):
        self._lock = threading.Lock()
        self._tokens = set(tokens)

    def set_tokens(self, tokens):
        with self._lock:
            self._tokens = set(tokens)

    def add_token(self, token):
        with self._lock:
            self._tokens.add(token)

    def tokens(self):
        with self._lock:
            return sorted(self._tokens)

    def authenticate(self, authorization, peer_cert):
        """The user name, or None.  peer_cert is what SSLSocket.getpeercert()
        returns: only a certificate that verified against the CA is there."""
        if peer_cert:
            for rdn in peer_cert.get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        return value
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and token:
            with self._lock:
                if token in self._tokens:
                    return "token:" + token[:8]
        return None
