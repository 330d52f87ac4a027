"""Control channel of a running mock driver: HTTP/1.1 + JSON on a unix socket.

A unix socket (not TCP) so parallel drivers never fight over ports and only
root on this machine can reach it.  From bash:
    curl -s --unix-socket $STATE/control.sock http://mock/faults/NodePublishVolume \\
         -X POST -d '{"errors":[{"code":"UNAVAILABLE","message":"boom"}]}'
From Python: ControlClient(path).

Endpoints (bodies and answers are JSON; errors answer 400/404/409 {"error": msg}):
  GET    /health                    {"ok": true, "pid": N}
  GET    /config                    current settings
  PATCH  /config                    change settings, answers the new settings
  GET    /faults                    {"Method": spec, ...}
  POST   /faults/<Method>           merge a fault spec (see faults.py); errors are queued
  DELETE /faults[/<Method>]         clear faults (also releases hung calls)
  POST   /release[/<Method>]        release hung calls, {"released": n}
  GET    /hung                      {"Method": calls blocked now}
  GET    /inflight                  {"now": n, "max": m, "volume_ops_max": m, "by_method_max":
                                    {...}}: calls whose client still waits (now, and the most
                                    at once since start or reset: all, the four volume
                                    operations, each method)
  DELETE /inflight                  the same, then the maximum restarts from now
  GET    /calls[?method=M]          call log entries (list)
  DELETE /calls                     truncate the call log
  GET    /state                     the state file contents (volumes, mounts, devices)
  POST   /volumes                   {"volume_id", "size"?, "block"?} pre-create a backing volume
  DELETE /volumes/<volume_id>       delete an unused volume's backing file (409 if in use)
  GET    /violations                CO misbehaviour the driver tolerated (list)
  GET    /registration              {"serving": bool, "socket": path, "notifications": [...]}
  POST   /registration              start serving the registration socket
  DELETE /registration              stop serving it and remove the socket
  POST   /shutdown                  {"cleanup": true|false}: stop like SIGTERM; with
                                    cleanup false, mounts and loop devices are left
                                    in place (a driver upgrade/restart)
Volume ids in URLs are percent-encoded.
"""
import http.client
import http.server
import json
import os
import socket
import socketserver
import threading
import time
import urllib.parse

import grpc

from .volumes import CSIError


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    driver = None  # set per server subclass

    def log_message(self, *args):
        pass  # stdout belongs to the ready line; stderr would only be noise

    def address_string(self):
        return "unix"

    def _send(self, status, obj):
        body = json.dumps(obj, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw.strip() else {}

    def _route(self, verb):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        query = dict(urllib.parse.parse_qsl(url.query))
        d = self.driver
        try:
            body = self._body()
            key = (verb, parts[0] if parts else "")
            arg = parts[1] if len(parts) > 1 else None
            if key == ("GET", "health"):
                return self._send(200, {"ok": True, "pid": os.getpid()})
            if key == ("GET", "config"):
                return self._send(200, d.settings.to_json())
            if key == ("PATCH", "config"):
                d.settings.update(body)
                return self._send(200, d.settings.to_json())
            if key == ("GET", "faults"):
                return self._send(200, d.faults.snapshot())
            if key == ("POST", "faults") and arg:
                d.faults.set(arg, body)
                return self._send(200, d.faults.snapshot().get(arg, {}))
            if key == ("DELETE", "faults"):
                d.faults.clear(arg)
                return self._send(200, {})
            if key == ("POST", "release"):
                return self._send(200, {"released": d.faults.release(arg)})
            if key == ("GET", "hung"):
                return self._send(200, d.faults.hung())
            if key == ("GET", "inflight"):
                return self._send(200, d.in_flight())
            if key == ("DELETE", "inflight"):
                return self._send(200, d.in_flight(reset_max=True))
            if key == ("GET", "calls"):
                return self._send(200, d.log.read(query.get("method")))
            if key == ("DELETE", "calls"):
                d.log.clear()
                return self._send(200, {})
            if key == ("GET", "state"):
                with d.volumes.lock:
                    return self._send(200, d.volumes.st)
            if key == ("POST", "volumes"):
                with d.volumes.lock:
                    d.volumes.create_volume(body["volume_id"], body.get("size"), body.get("block", False))
                    return self._send(200, d.volumes.st["volumes"][body["volume_id"]])
            if key == ("DELETE", "volumes") and arg:
                d.volumes.delete_volume(arg)
                return self._send(200, {})
            if key == ("DELETE", "sessions"):
                d.volumes.forget_session(body["key"])
                return self._send(200, {})
            if key == ("GET", "violations"):
                return self._send(200, d.volumes.violations())
            if key == ("GET", "registration"):
                return self._send(200, {"serving": d.reg_server is not None,
                                        "socket": d.registration_socket,
                                        "notifications": d.registrations})
            if key == ("POST", "registration"):
                d.start_registration()
                return self._send(200, {"serving": d.reg_server is not None})
            if key == ("DELETE", "registration"):
                d.stop_registration()
                return self._send(200, {"serving": False})
            if key == ("POST", "shutdown"):
                d.request_stop(bool(body.get("cleanup", True)))
                return self._send(200, {"stopping": True})
            return self._send(404, {"error": "no route %s %s" % (verb, url.path)})
        except CSIError as e:
            status = {grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.FAILED_PRECONDITION: 409}
            return self._send(status.get(e.code, 400), {"error": e.message})
        except (ValueError, KeyError, TypeError) as e:
            return self._send(400, {"error": "%s: %s" % (type(e).__name__, e)})

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PATCH(self):
        self._route("PATCH")

    def do_DELETE(self):
        self._route("DELETE")


class ControlServer:
    def __init__(self, driver, path):
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        handler = type("Handler", (_Handler,), {"driver": driver})
        self.srv = _Server(path, handler)
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


class ControlError(Exception):
    def __init__(self, status, message):
        super().__init__("HTTP %d: %s" % (status, message))
        self.status = status
        self.message = message


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("mockcsi", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class ControlClient:
    """Python side of the control channel; every method maps to one endpoint."""

    def __init__(self, socket_path, timeout=30):
        self.socket_path = socket_path
        self.timeout = timeout

    def request(self, verb, path, body=None):
        conn = _UnixHTTPConnection(self.socket_path, self.timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(verb, path, body=data, headers=headers)
            resp = conn.getresponse()
            obj = json.loads(resp.read() or b"null")
        finally:
            conn.close()
        if resp.status != 200:
            raise ControlError(resp.status, (obj or {}).get("error", ""))
        return obj

    @staticmethod
    def _q(s):
        return urllib.parse.quote(s, safe="")

    # --- settings ---
    def health(self):
        return self.request("GET", "/health")

    def config(self):
        return self.request("GET", "/config")

    def set_config(self, **changes):
        return self.request("PATCH", "/config", changes)

    def set_caps(self, *caps):
        return self.set_config(caps=list(caps))

    # --- faults ---
    def faults(self):
        return self.request("GET", "/faults")

    def inject(self, method, **spec):
        return self.request("POST", "/faults/" + method, spec)

    def fail_next(self, method, code, message="", count=1, when="before"):
        code = code.name if isinstance(code, grpc.StatusCode) else code
        return self.inject(method, errors=[{"code": code, "message": message, "when": when}] * count)

    def delay(self, method, seconds):
        return self.inject(method, delay=seconds)

    def hang(self, method, count=1, when="before"):
        return self.inject(method, hang=count, hang_when=when)

    def crash(self, method, when="before"):
        return self.inject(method, crash=when)

    def oversize(self, nbytes, field="node_id", method="NodeGetInfo"):
        return self.inject(method, oversize={"bytes": nbytes, "field": field})

    def clear_faults(self, method=None):
        return self.request("DELETE", "/faults" + ("/" + method if method else ""))

    def release(self, method=None):
        return self.request("POST", "/release" + ("/" + method if method else ""))["released"]

    def hung(self):
        return self.request("GET", "/hung")

    def in_flight(self, reset_max=False):
        return self.request("DELETE" if reset_max else "GET", "/inflight")

    def wait_hung(self, method, n=1, timeout=10):
        """Wait until n calls of method are blocked in a hang (avoids races)."""
        end = time.time() + timeout
        while time.time() < end:
            if self.hung().get(method, 0) >= n:
                return
            time.sleep(0.02)
        raise TimeoutError("%d %s call(s) not hung after %ss: %s" % (n, method, timeout, self.hung()))

    # --- observation ---
    def calls(self, method=None):
        return self.request("GET", "/calls" + ("?method=" + self._q(method) if method else ""))

    def clear_calls(self):
        return self.request("DELETE", "/calls")

    def state(self):
        return self.request("GET", "/state")

    def forget_session(self, key):
        return self.request("DELETE", "/sessions", {"key": key})

    def violations(self):
        return self.request("GET", "/violations")

    # --- volumes ---
    def create_volume(self, volume_id, size=None, block=False):
        return self.request("POST", "/volumes", {"volume_id": volume_id, "size": size, "block": block})

    def delete_volume(self, volume_id):
        return self.request("DELETE", "/volumes/" + self._q(volume_id))

    # --- registration / life cycle ---
    def registration(self):
        return self.request("GET", "/registration")

    def start_registration(self):
        return self.request("POST", "/registration")

    def stop_registration(self):
        return self.request("DELETE", "/registration")

    def shutdown(self, cleanup=True):
        return self.request("POST", "/shutdown", {"cleanup": cleanup})
