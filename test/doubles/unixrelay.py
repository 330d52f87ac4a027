"""A unix socket that relays each connection to another unix socket: the
skeleton the proxies of the doubles share (containerd's counting proxy, the
mock CRI runtime's holding relay, the mock CSI driver's burst proxy).  A
subclass says what the two directions of a connection do (relay()); the
base accepts, connects upstream, keeps every socket for stop() and copies
bytes (pump())."""
import os
import socket
import threading
import time


class UnixRelay:
    def __init__(self, upstream, path):
        self.upstream = upstream
        self.path = path
        self.endpoint = "unix://" + path
        self._lock = threading.Lock()
        self._listener = None
        self._threads = []
        self._sockets = []   # every client's and upstream's socket, closed by stop()
        self._stopping = False

    def start(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(64)
        self._spawn(self._accept)
        return self

    def relay(self, client, up, opened):
        """Starts the two directions of a new connection (opened: the
        monotonic time it was accepted)."""
        raise NotImplementedError

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
            opened = time.monotonic()
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(self.upstream)
            except OSError:
                # The upstream is down: the client sees its connection closed.
                client.close()
                up.close()
                continue
            with self._lock:
                self._sockets += [client, up]
            self.relay(client, up, opened)

    @staticmethod
    def shut(*socks):
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def pump(self, src, dst, feed=None, forward=None):
        """Copies src to dst until either ends, then shuts both: feed(data)
        sees each read first; forward(data), if given, sends it instead."""
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
        except (OSError, ValueError):  # ValueError: a parser's, or stop() closed the socket meanwhile
            pass
        self.shut(src, dst)

    def stop(self):
        self._stopping = True
        if self._listener is not None:
            self.shut(self._listener)
            self._listener.close()
        with self._lock:
            for s in self._sockets:
                self.shut(s)
                s.close()
            self._sockets = []
        for t in self._threads:
            t.join(timeout=5)
        if os.path.exists(self.path):
            os.unlink(self.path)
