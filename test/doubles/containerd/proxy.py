"""A counting proxy on a CRI socket: a unix socket of its own that relays
every connection to the runtime's socket, byte for byte, and logs every
request a client makes on it: each HTTP/2 stream the client opens, with its
`:path` (decoded with Debian's python3-hpack), at the time it was opened.

This counts what containerd's own log cannot: containerd 1.6 logs the
requests its CRI service implements, but not one it answers UNIMPLEMENTED
(GetContainerEvents, which a client of a newer runtime may ask), nor one
that fails before the service sees it.  The proxy counts requests, whatever
the answer."""
import time

import hpack

from doubles.unixrelay import UnixRelay

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, CONTINUATION = 0x1, 0x9
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20


class RequestCounter:
    """Parses the client's half of one HTTP/2 connection as it flows."""

    def __init__(self, record):
        self.record = record
        self.buf = b""
        self.preface = False
        self.decoder = hpack.Decoder()
        self.streams = set()
        self.block = None  # (stream id, header block so far) until END_HEADERS

    def feed(self, data):
        self.buf += data
        if not self.preface:
            if len(self.buf) < len(PREFACE):
                return
            if not self.buf.startswith(PREFACE):
                raise ValueError("not HTTP/2 with prior knowledge")
            self.buf = self.buf[len(PREFACE):]
            self.preface = True
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[0:3], "big")
            if len(self.buf) < 9 + length:
                return
            ftype, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            if ftype == HEADERS:
                if flags & PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                if flags & PRIORITY:
                    payload = payload[5:]
                self.block = (stream, payload)
            elif ftype == CONTINUATION and self.block:
                self.block = (self.block[0], self.block[1] + payload)
            else:
                continue
            if flags & END_HEADERS:
                stream, block = self.block
                self.block = None
                headers = dict(self.decoder.decode(block))  # every block: the decoder's table stays in step
                if stream not in self.streams:  # a new stream is a request; trailers are not
                    self.streams.add(stream)
                    self.record(headers.get(":path", "?"))


class CriProxy(UnixRelay):
    def __init__(self, upstream, path):
        super().__init__(upstream, path)
        self._log = []

    def requests(self, since=0.0):
        """[(monotonic time, method)] of the requests opened after `since`."""
        with self._lock:
            return [(t, p.rsplit("/", 1)[-1]) for t, p in self._log if t >= since]

    def _record(self, path):
        with self._lock:
            self._log.append((time.monotonic(), path))

    def relay(self, client, up, opened):
        self._spawn(self.pump, client, up, RequestCounter(self._record).feed)
        self._spawn(self.pump, up, client)
