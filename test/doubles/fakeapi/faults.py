"""Faults a test injects into the API port: failed requests, slow responses,
the node authorizer's graph lagging behind new objects, lists and watches
that ignore their field selector."""
import threading
import time

from . import errors


class _Rule:
    def __init__(self, path_prefix, method):
        self.path_prefix = path_prefix
        self.method = method.upper() if method else None

    def matches(self, method, path):
        return (not self.path_prefix or path.startswith(self.path_prefix)) \
            and (not self.method or self.method == method)


class Faults:
    def __init__(self):
        self._lock = threading.Lock()
        self._failures = []      # [rule, remaining count, ApiError]
        self._delays = []        # (rule, seconds)
        # The node authorizer's graph does not see pods bound, PVs claimed
        # and VolumeAttachments placed less than this many seconds ago.
        self.graph_lag = 0.0
        self._unselective = []   # rules of lists and watches that ignore fieldSelector

    def fail_next(self, count, status=500, retry_after=None, path_prefix=None,
                  method=None):
        """The next `count` requests that match answer `status` (500, 429
        with Retry-After, 503, or any other code as an InternalError)."""
        with self._lock:
            self._failures.append([_Rule(path_prefix, method), int(count),
                                   errors.injected(int(status), retry_after)])

    def set_delay(self, seconds, path_prefix=None, method=None):
        """Every matching request waits `seconds` before it is handled;
        seconds=0 removes the delays."""
        with self._lock:
            if not seconds:
                self._delays = []
            else:
                self._delays.append((_Rule(path_prefix, method), float(seconds)))

    def set_graph_lag(self, seconds):
        """The node authorizer's graph lags `seconds` behind the store (0:
        not at all), see nodeauth."""
        self.graph_lag = max(0.0, float(seconds))

    def ignore_field_selector(self, path_prefix=None):
        """Lists and watches that match answer as if they had no
        fieldSelector: a proxy that drops it, a server bug, or an identity
        for which a wider answer is allowed.  The selector is still parsed
        (a malformed one is refused), then not applied."""
        with self._lock:
            self._unselective.append(_Rule(path_prefix, "GET"))

    def ignores_field_selector(self, path):
        with self._lock:
            return any(rule.matches("GET", path) for rule in self._unselective)

    def clear(self):
        with self._lock:
            self._failures, self._delays, self._unselective = [], [], []
            self.graph_lag = 0.0

    def apply(self, method, path):
        """Sleeps for the matching delays, then raises the injected error if
        a failure rule still has requests to fail."""
        with self._lock:
            delay = sum(s for rule, s in self._delays if rule.matches(method, path))
            error = None
            for entry in self._failures:
                if entry[1] > 0 and entry[0].matches(method, path):
                    entry[1] -= 1
                    error = entry[2]
                    break
            self._failures = [e for e in self._failures if e[1] > 0]
        if delay:
            time.sleep(delay)
        if error:
            raise error
