"""The log of requests the API port received, for tests to assert on."""
import json
import threading
import time

# Headers worth asserting on; the others are noise.
LOGGED_HEADERS = ("authorization", "content-type", "accept", "user-agent",
                  "accept-encoding")


class RequestLog:
    def __init__(self):
        self._lock = threading.Lock()
        self._entries = []

    def start(self, method, path, query, headers, body):
        """Records a request; the returned dict gets "status" when the answer
        is sent (for a watch: when the stream starts)."""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode("utf-8", "replace")
        entry = {"time": time.time(), "method": method, "path": path,
                 "query": query,
                 "headers": {h: headers[h] for h in LOGGED_HEADERS
                             if headers.get(h) is not None},
                 "body": parsed, "status": None, "user": None, "watch": False}
        with self._lock:
            self._entries.append(entry)
        return entry

    def entries(self):
        with self._lock:
            return [dict(e) for e in self._entries]

    def clear(self):
        with self._lock:
            self._entries = []
