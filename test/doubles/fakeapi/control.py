"""The control port: plain HTTP on loopback, JSON in and out, no auth.  It
drives the same FakeApiServer methods an in-process test calls; the endpoints
are listed in the package docstring."""
import json
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from . import errors


class ControlHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakeapi-control"

    def log_message(self, fmt, *args):
        pass

    do_GET = do_POST = do_PUT = do_DELETE = lambda self: self._handle()

    def _send(self, code, body):
        data = (json.dumps(body) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self):
        app = self.server.listener.app
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length)) if length else {}
        except ValueError as e:
            return self._send(400, {"error": f"bad JSON: {e}"})
        parts = [p for p in url.path.split("/") if p]
        route = (self.command, parts[0] if parts else "")
        try:
            result = self._dispatch(app, route, parts[1:], q, body)
        except errors.ApiError as e:
            return self._send(e.code, e.status())
        except (KeyError, ValueError, TypeError) as e:
            return self._send(400, {"error": repr(e)})
        if result is None:
            return self._send(404, {"error": f"no control endpoint "
                                             f"{self.command} {url.path}"})
        return self._send(*result)

    @staticmethod
    def _dispatch(app, route, rest, q, body):
        ns = q.get("namespace")
        if route == ("GET", "healthz"):
            return 200, {"ok": True}
        if route == ("GET", "state"):
            return 200, app.state()
        if route == ("POST", "objects"):
            return 201, app.create(body)
        if route == ("PUT", "objects"):
            return 200, app.update(body)
        if route == ("GET", "objects") and len(rest) == 1:
            items, rv = app.list(rest[0], ns)
            return 200, {"items": items, "resourceVersion": rv}
        if route == ("GET", "objects") and len(rest) == 2:
            return 200, app.get(rest[0], ns, rest[1])
        if route == ("DELETE", "objects") and len(rest) == 2:
            if q.get("force") in ("1", "true"):
                return 200, app.remove(rest[0], ns, rest[1])
            grace = q.get("gracePeriodSeconds")
            obj, removed = app.delete(rest[0], ns, rest[1],
                                      None if grace is None else int(grace))
            return 200, {"object": obj, "removed": removed}
        if route == ("GET", "requests"):
            return 200, app.requests()
        if route == ("DELETE", "requests"):
            app.clear_requests()
            return 200, {}
        if route == ("GET", "tokenrequests") and not rest:
            return 200, {"items": app.token_requests()}
        if route == ("GET", "tokens") and not rest:
            return 200, {"tokens": app.tokens()}
        if route == ("PUT", "tokens") and not rest:
            app.set_tokens(body["tokens"])
            return 200, {"tokens": app.tokens()}
        if route == ("POST", "tokens") and rest == ["rotate"]:
            return 200, {"token": app.rotate_token(
                revoke_old=body.get("revokeOld", True))}
        if route == ("GET", "tokens") and rest == ["identities"]:
            return 200, {"tokens": app.auth.identity_tokens()}
        if route == ("POST", "tokens") and rest == ["identities"]:
            app.add_identity_token(body["token"], body["user"],
                                   body.get("groups", []))
            return 200, {"token": body["token"]}
        if route == ("POST", "nodes") and len(rest) == 2 \
                and rest[1] == "kubeconfig":
            path = app.node_kubeconfig(rest[0], body.get("auth", "token"),
                                       body.get("clientCert"),
                                       body.get("clientKey"), body.get("path"))
            return 200, {"kubeconfig": path}
        if route == ("POST", "nodes") and len(rest) == 2 \
                and rest[1] == "token":
            return 200, {"token": app.node_token(rest[0])}
        if route == ("POST", "nodes") and len(rest) == 2 \
                and rest[1] == "certificate":
            cert, key = app.node_client_cert(rest[0], body.get("clientCert"),
                                             body.get("clientKey"))
            return 200, {"clientCert": cert, "clientKey": key}
        if route == ("GET", "nodes") and len(rest) == 2 and rest[1] == "graph":
            return 200, app.node_graph(rest[0])
        if route == ("POST", "faults") and rest == ["graphlag"]:
            app.set_graph_lag(body["seconds"])
            return 200, {}
        if route == ("POST", "faults") and rest == ["fail"]:
            app.fail_next(body.get("count", 1), body.get("status", 500),
                          body.get("retryAfter"), body.get("pathPrefix"),
                          body.get("method"))
            return 200, {}
        if route == ("POST", "faults") and rest == ["delay"]:
            app.set_delay(body["seconds"], body.get("pathPrefix"),
                          body.get("method"))
            return 200, {}
        if route == ("POST", "faults") and rest == ["refuse"]:
            app.refuse_connections(body["seconds"], body.get("mode", "refuse"))
            return 200, {}
        if route == ("POST", "faults") and rest == ["ignorefieldselector"]:
            app.ignore_field_selector(body.get("pathPrefix"))
            return 200, {}
        if route == ("POST", "faults") and rest == ["clear"]:
            app.clear_faults()
            return 200, {}
        if route == ("POST", "watches") and rest == ["close"]:
            return 200, {"closed": app.close_watches(body.get("abrupt", False))}
        if route == ("POST", "compact"):
            return 200, {"compactedResourceVersion": app.compact()}
        if route == ("PUT", "config"):
            app.configure(**body)
            return 200, app.state()
        return None
