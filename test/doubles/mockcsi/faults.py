"""Per-method fault injection and the JSON-lines call log.

Faults are keyed by bare RPC method name (`NodePublishVolume`, `Probe`,
`GetInfo`, ...); the names are unique across the CSI and registration
services.  A method's fault spec, all keys optional:

  delay      seconds to sleep before doing anything (every call, until cleared)
  errors     queue of {"code": "UNAVAILABLE"|14, "message": str,
                       "when": "before"|"after"}; each call pops one.
             "before": return the error without doing the work;
             "after": do the work (mount, ...) and then return the error,
             as a driver whose reply was lost or that timed out late does.
  hang       number of upcoming calls that block until released (-1: all)
  hang_when  "before" (default) or "after" the work
  crash      "before" | "after": os._exit(CRASH_EXIT_CODE) during the next
             call, before or after the work (one shot: the process is gone)
  error_rate {"rate": 0.2, "codes": ["UNAVAILABLE", ...], "when": "before" |
             "after" | "either", "message": str}: each call without a queued
             error fails with probability `rate`, with one of `codes` at
             random ("either": before or after the work at random); null
             removes it
  hang_rate  probability that a call hangs (as "hang", at hang_when) when no
             "hang" count applies; 0 removes it
  noop       number of upcoming calls answered OK without doing any of the
             work (-1: all): a driver whose own records lost the volume
             answers "not published, nothing to do" (the hostpath driver
             after a publish made again over a mounted target forgets it)
  oversize   {"bytes": N, "field": "node_id" | "topology"}: NodeGetInfo
             only; pads the response beyond N bytes (receive-limit tests)

A hung call also stops hanging, and goes on with the work, once its client
has gone (cancelled the call or closed the connection): the calls blocked in
the driver are the calls the client still waits for.
"""
import collections
import json
import os
import random
import threading
import time

import grpc

CRASH_EXIT_CODE = 86


def parse_code(code):
    """Accept "NOT_FOUND", "not_found", 5 or "5"; return a grpc.StatusCode."""
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int) or (isinstance(code, str) and code.isdigit()):
        n = int(code)
        for c in grpc.StatusCode:
            if c.value[0] == n:
                return c
        raise ValueError("unknown status code %r" % code)
    return grpc.StatusCode[str(code).upper()]


class FaultTable:
    def __init__(self):
        self._lock = threading.Condition()
        self._faults = {}
        self._release_gen = collections.Counter()  # method -> releases so far
        self._hung = collections.Counter()  # method -> calls now blocked

    @staticmethod
    def _new_entry():
        return {"delay": 0.0, "errors": collections.deque(), "hang": 0, "hang_when": "before",
                "crash": None, "oversize": None, "error_rate": None, "hang_rate": 0.0, "noop": 0}

    def _entry(self, method):
        return self._faults.setdefault(method, self._new_entry())

    def set(self, method, spec):
        """Merge spec into the method's faults; "errors" are appended to the queue."""
        with self._lock:
            # Apply to a copy: a bad spec must leave the table untouched.
            cur = self._entry(method) if method in self._faults else None
            e = dict(cur or self._new_entry(), errors=collections.deque((cur or {}).get("errors", ())))
            for key, val in spec.items():
                if key == "errors":
                    for err in val:
                        parse_code(err.get("code"))  # validate now, not at call time
                        when = err.get("when", "before")
                        if when not in ("before", "after"):
                            raise ValueError("errors[].when must be before|after")
                        e["errors"].append({"code": parse_code(err["code"]).name,
                                            "message": err.get("message", ""), "when": when})
                elif key == "delay":
                    e["delay"] = float(val)
                elif key == "hang":
                    e["hang"] = -1 if val is True else int(val)
                elif key == "hang_when":
                    if val not in ("before", "after"):
                        raise ValueError("hang_when must be before|after")
                    e["hang_when"] = val
                elif key == "crash":
                    if val not in (None, "before", "after"):
                        raise ValueError("crash must be before|after|null")
                    e["crash"] = val
                elif key == "error_rate":
                    if val is not None:
                        codes = [parse_code(c).name for c in val.get("codes") or ["UNAVAILABLE"]]
                        if val.get("when", "before") not in ("before", "after", "either"):
                            raise ValueError("error_rate.when must be before|after|either")
                        val = {"rate": float(val.get("rate", 0)), "codes": codes,
                               "when": val.get("when", "before"), "message": val.get("message", "injected")}
                    e["error_rate"] = val
                elif key == "hang_rate":
                    e["hang_rate"] = float(val)
                elif key == "noop":
                    e["noop"] = -1 if val is True else int(val)
                elif key == "oversize":
                    if val is not None and val.get("field", "node_id") not in ("node_id", "topology"):
                        raise ValueError("oversize.field must be node_id|topology")
                    e["oversize"] = val
                else:
                    raise ValueError("unknown fault key %r" % key)
            self._faults[method] = e

    def clear(self, method=None):
        with self._lock:
            if method is None:
                self._faults.clear()
            else:
                self._faults.pop(method, None)
        self.release(method)

    def release(self, method=None):
        """Unblock the calls hanging now (all methods if None); returns how many."""
        with self._lock:
            methods = [method] if method else list(self._hung)
            n = 0
            for m in methods:
                n += self._hung[m]
                self._release_gen[m] += 1
            self._lock.notify_all()
            return n

    def hung(self):
        with self._lock:
            return {m: n for m, n in self._hung.items() if n}

    def snapshot(self):
        with self._lock:
            return {m: dict(e, errors=list(e["errors"])) for m, e in self._faults.items()}

    def begin(self, method):
        """Called at the start of a call: returns the plan for this call."""
        with self._lock:
            e = self._faults.get(method)
            if not e:
                return {}
            plan = {"delay": e["delay"], "crash": e["crash"], "oversize": e["oversize"]}
            if e.get("noop"):
                plan["noop"] = True
                if e["noop"] > 0:
                    e["noop"] -= 1
            if e["errors"]:
                plan["error"] = e["errors"].popleft()
            elif e["error_rate"] and random.random() < e["error_rate"]["rate"]:
                r = e["error_rate"]
                when = r["when"] if r["when"] != "either" else random.choice(("before", "after"))
                plan["error"] = {"code": random.choice(r["codes"]), "message": r["message"], "when": when}
            if e["hang"]:
                plan["hang"] = e["hang_when"]
                if e["hang"] > 0:
                    e["hang"] -= 1
            elif e["hang_rate"] and random.random() < e["hang_rate"]:
                plan["hang"] = e["hang_when"]
            return plan

    def block(self, method, client_active=None):
        """Block until release(method) or release(None) is called, or until
        client_active() (if given) says the client has gone."""
        with self._lock:
            gen = self._release_gen[method]
            self._hung[method] += 1
            try:
                while self._release_gen[method] == gen:
                    if client_active is None:
                        self._lock.wait()
                        continue
                    if not client_active():
                        break
                    self._lock.wait(0.1)
            finally:
                self._hung[method] -= 1


def _redact(msg, secret_ext):
    """Replace the values of every csi_secret field (maps) by their keys, in place."""
    for field, value in msg.ListFields():
        opts = field.GetOptions()
        if secret_ext is not None and opts.Extensions[secret_ext]:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                for k in list(value.keys()):
                    value[k] = k
            elif field.type == field.TYPE_STRING:
                setattr(msg, field.name, "<redacted>")
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            if field.label == field.LABEL_REPEATED:
                for sub in value:
                    _redact(sub, secret_ext)
            else:
                _redact(value, secret_ext)


def secret_digests(request):
    """SHA-256 (hex) of each value of a request's secrets map: lets a test
    check what the driver was given without the log holding it."""
    import hashlib
    secrets = getattr(request, "secrets", None)
    if not secrets:
        return None
    return {k: hashlib.sha256(v.encode()).hexdigest() for k, v in secrets.items()}


class CallLog:
    """Append-only JSON lines: one object per finished (or crashing) call."""

    def __init__(self, path, secret_ext):
        self.path = path
        self._secret_ext = secret_ext
        self._lock = threading.Lock()

    def request_json(self, request):
        from google.protobuf import json_format
        copy = type(request)()
        copy.CopyFrom(request)
        _redact(copy, self._secret_ext)
        return json_format.MessageToDict(copy, preserving_proto_field_name=True)

    def record(self, entry):
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock:
            # O_APPEND + one write per line: a crash never leaves half a line
            # that a reader would choke on (short of the disk filling up).
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def read(self, method=None):
        return read_call_log(self.path, method)

    def clear(self):
        with self._lock:
            open(self.path, "w").close()


def read_call_log(path, method=None):
    try:
        with open(path) as f:
            lines = [json.loads(l) for l in f if l.strip()]
    except FileNotFoundError:
        return []
    return [l for l in lines if method is None or l["method"] == method]


def now():
    return time.time()
