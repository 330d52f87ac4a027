"""A relay in front of the mock CRI runtime's socket that can hold back what
the runtime sends on the connection of its GetContainerEvents stream, and
then hand it over in one write: the client reads several events in one
read, as it does from a busy runtime or after the client's own loop was
busy.  Load makes that happen now and then; this makes it happen every
time.

Each connection is relayed byte for byte; the client's half is parsed for
its requests' `:path` (doubles.containerd.proxy's RequestCounter), which is
how the stream's connection is known (the client gives the stream a
connection of its own)."""
import os
import socket
import threading

from doubles.containerd.proxy import RequestCounter

EVENTS = "/runtime.v1.RuntimeService/GetContainerEvents"
DATA = 0x0


def grpc_messages(h2_bytes):
    """How many whole gRPC messages the DATA frames of server-to-client
    HTTP/2 bytes carry (one stream per connection here)."""
    body, buf = b"", h2_bytes
    while len(buf) >= 9:
        length = int.from_bytes(buf[0:3], "big")
        if len(buf) < 9 + length:
            break
        if buf[3] == DATA:
            body += buf[9:9 + length]
        buf = buf[9 + length:]
    n = 0
    while len(body) >= 5 and len(body) >= 5 + int.from_bytes(body[1:5], "big"):
        body = body[5 + int.from_bytes(body[1:5], "big"):]
        n += 1
    return n


class _Conn:
    def __init__(self, client, up):
        self.client, self.up = client, up
        self.paths = []
        self.held = b""


class HoldingProxy:
    def __init__(self, upstream, path):
        self.upstream = upstream
        self.path = path
        self.endpoint = "unix://" + path
        self._lock = threading.Lock()
        self._conns = []
        self._hold = False
        self._listener = None
        self._threads = []
        self._stopping = False

    def start(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(64)
        self._spawn(self._accept)
        return self

    def _spawn(self, fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self):
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(self.upstream)
            except OSError:
                client.close()
                up.close()
                continue
            conn = _Conn(client, up)
            with self._lock:
                self._conns.append(conn)
            counter = RequestCounter(lambda p, conn=conn: self._record(conn, p))
            self._spawn(self._pump_requests, conn, counter)
            self._spawn(self._pump_answers, conn)

    def _record(self, conn, path):
        with self._lock:
            conn.paths.append(path)

    def _pump_requests(self, conn, counter):
        self._pump(conn.client, conn.up, counter.feed)

    def _pump_answers(self, conn):
        def forward(data):
            with self._lock:
                if self._hold and EVENTS in conn.paths:
                    conn.held += data
                    return
            conn.client.sendall(data)
        self._pump(conn.up, conn.client, None, forward)

    @staticmethod
    def _pump(src, dst, feed, forward=None):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if feed is not None:
                    feed(data)
                if forward is not None:
                    forward(data)
                else:
                    dst.sendall(data)
        except (OSError, ValueError):
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def streams(self):
        """How many connections carry a GetContainerEvents request."""
        with self._lock:
            return sum(EVENTS in c.paths for c in self._conns)

    def hold(self):
        """From now on, what the runtime sends on the event stream's
        connection is kept here."""
        with self._lock:
            self._hold = True

    def held_messages(self):
        with self._lock:
            return sum(grpc_messages(c.held) for c in self._conns)

    def release(self):
        """Hands what was held to the client in one write per connection,
        and relays as before."""
        with self._lock:
            self._hold = False
            for c in self._conns:
                if c.held:
                    c.client.sendall(c.held)
                    c.held = b""

    def stop(self):
        self._stopping = True
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        with self._lock:
            for c in self._conns:
                for s in (c.client, c.up):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()
            self._conns = []
        for t in self._threads:
            t.join(timeout=5)
        if os.path.exists(self.path):
            os.unlink(self.path)
