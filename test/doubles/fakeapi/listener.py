"""The HTTP(S) listening side: TLS on the connection's own thread, tracking of
open connections so they can be cut, and refusing connections for a while."""
import socket
import ssl
import threading
import time
from http.server import ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # An accept backlog big enough for a burst of reconnecting clients.
    request_queue_size = 128

    def __init__(self, address, handler_class, listener):
        self.listener = listener
        super().__init__(address, handler_class)

    def finish_request(self, request, client_address):
        # Runs on the connection's thread, so a slow TLS handshake never
        # blocks accept().
        lst = self.listener
        # Tracked from its accept, through a descriptor of its own that TLS
        # does not detach: a cut must reach a connection still in its
        # handshake too.  Tracked before the check, so that a connection
        # either sees the reset or is cut by it (before, one accepted just
        # before an outage could answer during it, and a client took the
        # server for back: test_k8s_outage's attempts bound failed at
        # random).
        handle = request.dup()
        lst.track(handle, True)
        try:
            if time.monotonic() < lst.reset_until:
                lst.resets += 1
                return
            if lst.ssl_context is not None:
                request.settimeout(10)
                try:
                    request = lst.ssl_context.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return
                request.settimeout(None)
            self.RequestHandlerClass(request, client_address, self)
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        finally:
            lst.track(handle, False)
            handle.close()
            request.close()


class Listener:
    """Serves handler_class on host:port; `app` is handed to the handlers as
    server.listener.app."""

    def __init__(self, host, port, handler_class, app, ssl_context=None):
        self.host, self.port = host, port
        self.handler_class = handler_class
        self.app = app
        self.ssl_context = ssl_context
        self.reset_until = 0.0
        self.resets = 0          # connections closed unanswered ("reset" mode)
        self._lock = threading.Lock()
        self._connections = set()
        self._server = None
        self._stopped = False
        self._reopen_timer = None

    def start(self):
        server = _Server((self.host, self.port), self.handler_class, self)
        self.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, args=(0.05,),
                         name=f"fakeapi-listen-{self.port}", daemon=True).start()
        with self._lock:
            self._server = server

    def stop(self):
        with self._lock:
            self._stopped = True
            if self._reopen_timer:
                self._reopen_timer.cancel()
        self._close_listener()
        self.cut_connections()

    def track(self, conn, add):
        with self._lock:
            (self._connections.add if add else self._connections.discard)(conn)

    def cut_connections(self):
        """Shuts down every open connection under its handler's feet."""
        with self._lock:
            conns = list(self._connections)
        for c in conns:
            try:
                # socket.shutdown, not SSLSocket.shutdown: no TLS close_notify,
                # just the TCP connection going away as when a server dies.
                socket.socket.shutdown(c, socket.SHUT_RDWR)
            except OSError:
                pass
        return len(conns)

    def refuse(self, seconds, mode="refuse"):
        """For `seconds`: "refuse" closes the listening socket (clients get
        ECONNREFUSED), "reset" accepts and closes at once.  Open connections
        are cut in both modes, as when the server restarts."""
        if mode == "reset":
            self.reset_until = time.monotonic() + seconds
            self.cut_connections()
            return
        if mode != "refuse":
            raise ValueError(f"unknown mode {mode!r}")
        self._close_listener()
        self.cut_connections()
        timer = threading.Timer(seconds, self._reopen)
        timer.daemon = True
        with self._lock:
            self._reopen_timer = timer
        timer.start()

    def _reopen(self):
        with self._lock:
            if self._stopped:
                return
        self.start()

    def _close_listener(self):
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
