"""A TCP relay in front of the fake API server that a test can take down and
bring back on the same port: while down, connections are refused and the
open ones are cut, as when the API server or the network to it goes away.
kvolumed is given a kubeconfig naming the relay (same host, so TLS still
verifies)."""
import re
import socket
import threading


class ApiOutage:
    def __init__(self, api):
        self.api = api
        self.port = None
        self._lock = threading.Lock()
        self._listener = None
        self._conns = []
        self.up()

    @property
    def server_url(self):
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, node="test-node"):
        """A copy of the node's kubeconfig whose server is the relay."""
        path = self.api.node_kubeconfig(node)
        with open(path) as f:
            text = f.read()
        relayed = path + ".relayed"
        with open(relayed, "w") as f:
            f.write(re.sub(r'server: "https://127\.0\.0\.1:\d+"', f'server: "{self.server_url}"', text))
        return relayed

    def up(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port or 0))
        s.listen(64)
        self.port = s.getsockname()[1]
        with self._lock:
            self._listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def down(self):
        """Refuses new connections and cuts the open ones."""
        with self._lock:
            s, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if s:
            # close() alone does not wake the thread blocked in accept(),
            # which keeps the port bound until a connection comes: up()
            # could not bind it again (seen once the client stopped
            # knocking while the server is down).  shutdown() wakes it.
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self, s):
        while True:
            try:
                client, _ = s.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.api.port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not s:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for c in (src, dst):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.down()
