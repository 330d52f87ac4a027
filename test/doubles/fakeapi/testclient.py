"""A raw HTTPS client for tests that need to see the wire (status codes,
headers, each watch line) rather than what a client library makes of it."""
import http.client
import json
import socket
import ssl
from urllib.parse import urlencode

_DEFAULT = object()


class Response:
    def __init__(self, status, headers, raw):
        self.status, self.headers, self.raw = status, headers, raw
        try:
            self.json = json.loads(raw) if raw else None
        except ValueError:
            self.json = None


class Watch:
    """An open watch stream, read chunk by chunk so that a stream the server
    ends (terminating chunk) and a connection it cuts can be told apart."""

    def __init__(self, sock):
        self.sock = sock
        self.file = sock.makefile("rb")
        status_line = self.file.readline().decode()
        self.status = int(status_line.split()[1])
        self.headers = {}
        while True:
            line = self.file.readline().decode().strip()
            if not line:
                break
            key, _, value = line.partition(":")
            self.headers[key.strip()] = value.strip()
        self._pending = b""

    def _chunk(self):
        size_line = self.file.readline()
        if not size_line:
            raise ConnectionError("connection closed in the middle of the stream")
        size = int(size_line.split(b";")[0], 16)
        data = self.file.read(size + 2)[:size]
        if size and not data:
            raise ConnectionError("connection closed in the middle of a chunk")
        return data

    def next(self, timeout=5.0):
        """The next event, or None when the stream ended cleanly; raises
        TimeoutError if nothing came within timeout, ConnectionError if the
        connection was cut."""
        self.sock.settimeout(timeout)
        while b"\n" not in self._pending:
            data = self._chunk()
            if not data:
                return None
            self._pending += data
        line, _, self._pending = self._pending.partition(b"\n")
        return json.loads(line)

    def close(self):
        self.file.close()
        self.sock.close()


class Client:
    def __init__(self, api, token=_DEFAULT, cert=None):
        """api: a FakeApiServer; token None sends no Authorization header;
        cert: (certfile, keyfile) for client-certificate authentication."""
        self.host, self.port = "127.0.0.1", api.port
        self.token = api.token if token is _DEFAULT else token
        self.ctx = ssl.create_default_context(cafile=api.ca_path)
        if cert:
            self.ctx.load_cert_chain(*cert)

    def _connect(self, timeout):
        return http.client.HTTPSConnection(self.host, self.port,
                                           context=self.ctx, timeout=timeout)

    def _headers(self, content_type, token):
        h = {"Accept": "application/json"}
        token = self.token if token is _DEFAULT else token
        if token:
            h["Authorization"] = f"Bearer {token}"
        if content_type:
            h["Content-Type"] = content_type
        return h

    def request(self, method, path, body=None, query=None,
                content_type="application/json", token=_DEFAULT, timeout=10):
        if query:
            path += "?" + urlencode(query)
        data = body if isinstance(body, (bytes, str)) or body is None \
            else json.dumps(body)
        conn = self._connect(timeout)
        try:
            conn.request(method, path, body=data,
                         headers=self._headers(content_type if data is not None
                                               else None, token))
            r = conn.getresponse()
            return Response(r.status, dict(r.getheaders()), r.read())
        finally:
            conn.close()

    def get(self, path, **query):
        return self.request("GET", path, query=query)

    def watch(self, path, timeout=10, **query):
        query.setdefault("watch", "1")
        sock = self.ctx.wrap_socket(
            socket.create_connection((self.host, self.port), timeout=timeout),
            server_hostname="localhost")
        head = [f"GET {path}?{urlencode(query)} HTTP/1.1", "Host: localhost"]
        head += [f"{k}: {v}" for k, v in self._headers(None, _DEFAULT).items()]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        return Watch(sock)
