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
from doubles.containerd.proxy import RequestCounter
from doubles.unixrelay import UnixRelay

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


class HoldingProxy(UnixRelay):
    def __init__(self, upstream, path):
        super().__init__(upstream, path)
        self._conns = []
        self._hold = False

    def relay(self, client, up, opened):
        conn = _Conn(client, up)
        with self._lock:
            self._conns.append(conn)
        counter = RequestCounter(lambda p, conn=conn: self._record(conn, p))
        self._spawn(self.pump, conn.client, conn.up, counter.feed)
        self._spawn(self._pump_answers, conn)

    def _record(self, conn, path):
        with self._lock:
            conn.paths.append(path)

    def _pump_answers(self, conn):
        def forward(data):
            with self._lock:
                if self._hold and EVENTS in conn.paths:
                    conn.held += data
                    return
            conn.client.sendall(data)
        self.pump(conn.up, conn.client, forward=forward)

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
