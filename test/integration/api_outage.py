"""A TCP relay in front of the fake API server that a test can take down and
bring back on the same port: while down, connections are refused and the
open ones are cut, as when the API server or the network to it goes away.
kvolumed is given a kubeconfig naming the relay (same host, so TLS still
verifies)."""
import re
import socket
import threading


class ApiOutage:
    """The port is the relay's from start to close, down included: a socket
    stays bound to it, listening while up and not while down (connections
    are refused all the same).  Closing it while down let any connect() on
    the machine (kvolumed's retries, other tests under xdist) take the port
    as its ephemeral local port, and up() failed with EADDRINUSE."""

    def __init__(self, api):
        self.api = api
        self._cond = threading.Condition()
        self._listening = False
        self._closed = False
        self._conns = []
        # Bumped by each down(): a pump forwards for its generation only.
        self._generation = 0
        # An explicit bind keeps the port across shutdown() (a socket bound
        # to port 0 gives its port back when it stops listening): find a
        # free port with a first socket, bind it again beside it.
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", self.port))
        probe.close()
        threading.Thread(target=self._accept, daemon=True).start()
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
        with self._cond:
            if not self._listening:
                self._sock.listen(64)
                self._listening = True
                self._cond.notify_all()

    def down(self):
        """Refuses new connections and cuts the open ones, all at once, as a
        server that dies does: no pump forwards a byte once this began (it
        checks the generation under the lock that this holds while it cuts).
        Cut one by one, a connection not yet cut under load could still carry
        a request kvolumed made after seeing the first cut, and its answer
        told of a server back between two cuts of one outage."""
        with self._cond:
            was, self._listening = self._listening, False
            conns, self._conns = self._conns, []
            self._generation += 1
            if was:
                # Stops listening (the backlog is reset) and wakes the thread
                # blocked in accept(); the socket keeps its port.
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            for c in conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for c in conns:
            c.close()

    def _accept(self):
        while True:
            with self._cond:
                while not self._listening and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                client, _ = self._sock.accept()
            except OSError:
                continue  # down() in between: wait for up()
            try:
                upstream = socket.create_connection(("127.0.0.1", self.api.port))
            except OSError:
                client.close()
                continue
            with self._cond:
                if not self._listening:
                    client.close()
                    upstream.close()
                    continue
                self._conns += [client, upstream]
                generation = self._generation
            threading.Thread(target=self._pump, args=(client, upstream, generation), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, generation), daemon=True).start()

    def _pump(self, src, dst, generation):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._cond:
                    if generation != self._generation:
                        break
                # Outside the lock (a peer that does not read would hold
                # down() up): down() shuts dst down before it returns, so
                # a send that comes after its cuts fails.
                dst.sendall(data)
        except OSError:
            pass
        for c in (src, dst):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self.down()
        self._sock.close()
