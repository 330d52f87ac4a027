"""A proxy in front of a driver's CSI socket that hands each answer to the
client in one piece, late: what a loaded machine does to a gRPC answer.

Unloaded, grpcio's answer reaches the client in the pieces grpcio writes it
in, soon after the request.  Beside other work on 2 cores the driver's
process runs late, and the client, when it next reads, finds the whole
answer (HEADERS, DATA, grpc-status trailers) waiting in its socket.  The
proxy makes that the rule: it relays the client's bytes at once, holds the
driver's until a stream ends (a HEADERS frame with END_STREAM: the
trailers, or RST_STREAM, GOAWAY, or the driver closing), and then writes
them to the client with one sendall(), no sooner than `hold` seconds after
the connection was opened (so that libcurl's own timers of the connect,
such as its 200 ms happy-eyeballs timer, are long gone and cannot wake a
transfer that libcurl forgot).

With `tail=N` the answer goes in two writes: first everything before the
last N bytes of the DATA frame before the last one, then, once the client
has read all of that (TIOCOUTQ is 0), the rest: those N bytes, the last DATA
frame and the trailers, which the client then finds in its socket together,
as it found the end of a 4 MiB answer written faster than it read.

`bursts` lists the size of every write to a client, in order."""
import fcntl
import struct
import termios
import time

from doubles.unixrelay import UnixRelay

DATA, HEADERS, RST_STREAM, GOAWAY = 0x0, 0x1, 0x3, 0x7
END_STREAM = 0x1


class BurstProxy(UnixRelay):
    def __init__(self, upstream, path, hold=1.0, tail=None):
        super().__init__(upstream, path)
        self.hold = hold
        self.tail = tail
        self.bursts = []

    def relay(self, client, up, opened):
        self._spawn(self.pump, client, up)
        self._spawn(self._answers, up, client, opened)

    @staticmethod
    def _unread(sock):
        """Bytes written to `sock` that its peer has not read yet."""
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0)))[0]

    def _pieces(self, held, last_data):
        """[held] or, with `tail`, the bytes before the last DATA frame's
        last `tail` bytes of the frame before it, and the rest."""
        if self.tail is None or last_data is None or last_data - 9 - self.tail <= 0:
            return [held]
        cut = last_data - 9 - self.tail
        return [held[:cut], held[cut:]]

    def _flush(self, dst, held, opened, last_data=None):
        wait = opened + self.hold - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        pieces = self._pieces(held, last_data)
        for i, piece in enumerate(pieces):
            if i > 0:
                # The client has read the piece before, so that this one
                # arrives as a read of its own.
                end = time.monotonic() + 30
                while self._unread(dst) > 0 and time.monotonic() < end:
                    time.sleep(0.002)
            # Counted before it goes: the client may have its answer, and
            # the test look at `bursts`, before sendall() returns here.
            with self._lock:
                self.bursts.append(len(piece))
            dst.sendall(bytes(piece))

    def _answers(self, src, dst, opened):
        """The driver's bytes, whole frames at a time, flushed at each stream's end."""
        buf = bytearray()
        held = bytearray()
        last_data = None  # where, in held, the last DATA frame starts its payload
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                end = False
                while len(buf) >= 9:
                    length = int.from_bytes(buf[0:3], "big")
                    if len(buf) < 9 + length:
                        break
                    ftype, flags = buf[3], buf[4]
                    if ftype == DATA:
                        last_data = len(held) + 9
                    held += buf[:9 + length]
                    del buf[:9 + length]
                    if (ftype == HEADERS and flags & END_STREAM) or ftype in (RST_STREAM, GOAWAY):
                        end = True
                if end:
                    self._flush(dst, held, opened, last_data)
                    held = bytearray()
                    last_data = None
            if held or buf:
                self._flush(dst, held + buf, opened)
        except (OSError, ValueError):  # ValueError: stop() closed the socket meanwhile
            pass
        self.shut(src, dst)
