"""The API port: routing of kube-apiserver's REST paths onto the store, list
and watch encoding, and the order of checks (authentication, injected faults,
authorization, route, verb, body, admission) kube-apiserver applies."""
import base64
import json
import time
import uuid
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

from . import (discovery, errors, objects, openapi, patch, resources,
               selfsubject, tokenreview)
from .nodeauth import Attributes
from .selectors import FieldSelector, LabelSelector

_TRUE = ("true", "1", "t", "yes", "y")
_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list "
    "result. You can start a new list without the continue parameter, or use "
    "the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent "
    "list - objects that were created, modified, or deleted between the time "
    "the first chunk was returned and now may show up in the list.")


def _validate_token_request(name, spec):
    """ValidateTokenRequest: 10 minutes to 2^32 seconds."""
    seconds = spec["expirationSeconds"]
    why = None
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        why = "must be an integer"
    elif seconds < 600:
        why = "may not specify a duration less than 10 minutes"
    elif seconds > 1 << 32:
        why = "may not specify a duration larger than 2^32 seconds"
    if why:
        message = f"Invalid value: {seconds}: {why}"
        raise errors.ApiError(
            422, "Invalid", f'TokenRequest.authentication.k8s.io "{name}" is '
            f'invalid: spec.expirationSeconds: {message}',
            {"name": name, "group": "authentication.k8s.io",
             "kind": "TokenRequest",
             "causes": [{"reason": "FieldValueInvalid", "message": message,
                         "field": "spec.expirationSeconds"}]})


def _flag(query, name):
    return query.get(name, "").lower() in _TRUE


def _list_item(obj):
    # Items of a built-in list carry no kind/apiVersion on the wire.
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakeapi"
    # TCP_NODELAY on every connection, as Go's net package sets it for the
    # real API server: without it an answer's body, written after its
    # headers, waits for the client's delayed ACK (40 ms) and every
    # request-reply (a TokenRequest) looks that much slower than it is.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass    # the request log is the record; stderr stays quiet

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = lambda self: self._handle()

    # -- plumbing ------------------------------------------------------------

    @property
    def app(self):
        return self.server.listener.app

    def _read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, code, body, content_type="application/json", headers=None):
        data = body if isinstance(body, bytes) else \
            (json.dumps(body, separators=(",", ":")) + "\n").encode()
        self.send_response(code)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        # Logged before the write: a client that hangs up mid-answer must not
        # leave the request looking unanswered.
        self._entry["status"] = code
        self.end_headers()
        self.wfile.write(data)

    def _handle(self):
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in
                 parse_qs(url.query, keep_blank_values=True).items()}
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        self._entry = self.app.log.start(self.command, url.path, query,
                                         headers, body)
        try:
            user = self.app.auth.authenticate(headers.get("authorization"),
                                              self.connection.getpeercert()
                                              if hasattr(self.connection,
                                                         "getpeercert") else None)
            if user is None:
                self._send(401, errors.UNAUTHORIZED)
                return
            self._user = user
            self._entry["user"] = user.name
            self._entry["groups"] = list(user.groups)
            self.app.faults.apply(self.command, url.path)
            self._route(url.path, query, body)
        except errors.ApiError as e:
            self._send(e.code, e.status(), headers=e.headers)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            # A request the fake does not cope with must get an answer that
            # says so, not a dropped connection.
            self._send(500, errors.failure_status(
                500, "InternalError", f"fakeapi cannot handle this: {e!r}"))

    # -- routing -------------------------------------------------------------

    def _route(self, path, query, body):
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/livez", "/readyz"):
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        if parts == ["version"]:
            return self._send(200, discovery.VERSION)
        if parts[:2] == ["openapi", "v3"]:
            doc = openapi.root(self.app.serves) if len(parts) == 2 else \
                openapi.group_version("/".join(parts[2:]), self.app.serves)
            if doc is None:
                raise errors.no_such_route()
            return self._send(200, doc)
        if not parts or parts[0] not in ("api", "apis"):
            return self._send(404, b"404 page not found\n",
                              "text/plain; charset=utf-8")
        if parts[0] == "api":
            if len(parts) == 1:
                host = f"{self.server.server_address[0]}:" \
                       f"{self.server.server_address[1]}"
                return self._send(200, discovery.api_versions(host))
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                return self._send(200, discovery.api_group_list(
                    self.app.serves))
            if len(parts) == 2:
                doc = discovery.api_group(parts[1], self.app.serves)
                if doc is None:
                    raise errors.no_such_route()
                return self._send(200, doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            doc = discovery.api_resource_list(group, version, self.app.serves)
            if doc is None or self.command != "GET":
                raise errors.no_such_route()
            return self._send(200, doc)

        if group == selfsubject.GROUP and rest == ["selfsubjectreviews"]:
            if not selfsubject.served(self.app.self_subject_review, version):
                raise errors.no_such_route()
            return self._send(*selfsubject.review(self.command, version, body, self._user,
                                                  self.headers.get("Content-Type", ""),
                                                  self.headers.get("Accept", "")))

        if group == tokenreview.GROUP and version == "v1" \
                and rest == ["tokenreviews"]:
            return self._token_review(body)

        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            inner = resources.by_path(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        res = resources.by_path(group, version, rest[0])
        if res is not None and not self.app.serves(res):
            res = None      # an API the server has off: 404
        if res is None or len(rest) > 3 \
                or (res.namespaced and namespace is None and len(rest) > 1):
            raise errors.no_such_route()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not (sub == "status" and res.has_status) \
                and not (sub == "token" and res.plural == "serviceaccounts"):
            raise errors.no_such_route()

        self._attrs = self._attributes(res, namespace, name, sub, query)
        self.app.node_authorizer.authorize(self._attrs)
        if name is None:
            return self._collection(res, namespace, query, body)
        if sub is None:
            return self._item(res, namespace, name, query, body)
        if sub == "token":
            return self._token(res, namespace, name, body)
        return self._status(res, namespace, name, body)

    def _attributes(self, res, namespace, name, sub, query):
        """authorizer.Attributes as RequestInfo derives them from the URL."""
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection"}.get(
                    self.command, "get")
        if verb == "get" and _flag(query, "watch"):
            verb = "watch"
        elif verb == "get" and not name:
            verb = "list"
        if verb in ("list", "watch") and not name:
            # A list or watch of one object names it for the authorizer.
            try:
                terms = FieldSelector.parse(query.get("fieldSelector"),
                                            res).terms
            except errors.ApiError:
                terms = []     # refused later, after authorization
            for label, op, value in terms:
                if label == "metadata.name" and op == "=" \
                        and value not in (".", "..") \
                        and "/" not in value and "%" not in value:
                    name = value
                    break
        return Attributes(self._user, verb, res.group, res.plural, sub or "",
                          namespace or "", name or "")

    def _admit(self):
        """NodeRestriction's admit(old, new) for this request, or None."""
        return self.app.node_restriction.admission(self._attrs)

    def _collection(self, res, namespace, query, body):
        verb = self.command
        if verb == "GET":
            fields = FieldSelector.parse(query.get("fieldSelector"), res)
            labels = LabelSelector.parse(query.get("labelSelector"))
            if self.app.faults.ignores_field_selector(urlsplit(self.path).path):
                fields = FieldSelector()
            if _flag(query, "watch"):
                return self._watch(res, namespace, fields, labels, query)
            return self._list(res, namespace, fields, labels, query)
        if res.namespaced and namespace is None:
            raise errors.method_not_allowed()
        if verb == "POST":
            obj = self.app.store.create(res, namespace, self._json(body),
                                        admit=self._admit())
            return self._send(201, obj)
        if verb == "DELETE":
            fields = FieldSelector.parse(query.get("fieldSelector"), res)
            labels = LabelSelector.parse(query.get("labelSelector"))
            items, rv = self.app.store.list(res, namespace, fields, labels)
            grace, _ = self._delete_options(query, body)
            for o in items:
                self.app.store.delete(res, namespace, o["metadata"]["name"],
                                      grace, admit=self._admit())
            return self._send(200, {"kind": res.list_kind,
                                    "apiVersion": res.api_version,
                                    "metadata": {"resourceVersion": rv},
                                    "items": [_list_item(o) for o in items]})
        raise errors.method_not_allowed()

    def _item(self, res, namespace, name, query, body):
        store, verb = self.app.store, self.command
        if verb == "GET":
            if _flag(query, "watch"):
                fields = FieldSelector([("metadata.name", "=", name)])
                labels = LabelSelector.parse(query.get("labelSelector"))
                return self._watch(res, namespace, fields, labels, query)
            return self._send(200, store.get(res, namespace, name))
        if verb == "PUT":
            return self._send(200, store.update(res, namespace, name,
                                                self._json(body),
                                                admit=self._admit()))
        if verb == "PATCH":
            return self._patch(res, namespace, name, body, "main")
        if verb == "DELETE":
            grace, pre = self._delete_options(query, body)
            obj, removed = store.delete(res, namespace, name, grace, pre,
                                        admit=self._admit())
            if removed and not res.returns_deleted_object:
                details = {"name": name}
                if res.group:
                    details["group"] = res.group
                details.update(kind=res.plural, uid=obj["metadata"]["uid"])
                return self._send(200, {"kind": "Status", "apiVersion": "v1",
                                        "metadata": {}, "status": "Success",
                                        "details": details})
            return self._send(200, obj)
        raise errors.method_not_allowed()

    def _status(self, res, namespace, name, body):
        verb = self.command
        if verb == "GET":
            return self._send(200, self.app.store.get(res, namespace, name))
        if verb == "PUT":
            return self._send(200, self.app.store.update(
                res, namespace, name, self._json(body), scope="status",
                admit=self._admit()))
        if verb == "PATCH":
            return self._patch(res, namespace, name, body, "status")
        raise errors.method_not_allowed()

    # -- verbs ---------------------------------------------------------------

    @staticmethod
    def _json(body):
        try:
            return json.loads(body)
        except ValueError as e:
            raise errors.bad_request(
                f"couldn't get version/kind; json parse error: {e}") from None

    def _patch(self, res, namespace, name, body, scope):
        content_type = self.headers.get("Content-Type")
        media = (content_type or "").split(";")[0].strip().lower()
        if media not in (patch.MERGE_PATCH, patch.STRATEGIC_MERGE_PATCH,
                         patch.JSON_PATCH):
            raise errors.unsupported_patch_type(content_type)
        return self._send(200, self.app.store.patch(
            res, namespace, name, media, self._json(body), scope,
            admit=self._admit()))

    def _token_binding(self, namespace, ref):
        """The pod ({name, uid}) and its node ({name, uid}) a TokenRequest
        binds the token to, as the TokenRequest REST handler checks it: the
        pod must exist (404) with the UID given (409)."""
        if not isinstance(ref, dict) or ref.get("kind") != "Pod":
            return None, None
        pods = resources.lookup("pods")
        pod = self.app.store.peek_one(pods, namespace, ref.get("name") or "")
        if pod is None:
            raise errors.not_found(pods, ref.get("name") or "")
        uid = pod["metadata"].get("uid")
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(
                pods, ref.get("name"), f'the UID in the bound object reference '
                f'({ref["uid"]}) does not match the UID in record. The object '
                f'might have been deleted and then recreated')
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = None
        if node_name:
            n = self.app.store.peek_one(resources.lookup("nodes"), None,
                                        node_name)
            node = {"name": node_name,
                    "uid": (n or {}).get("metadata", {}).get("uid")}
        return {"name": pod["metadata"]["name"], "uid": uid}, node

    def _token(self, res, namespace, name, body):
        """POST serviceaccounts/<name>/token: a TokenRequest answered with a
        recognisable token "fake-token:<sa>:<audiences>:<n>:<nonce>" (nothing
        authenticates with it), recorded for tests (token_requests())."""
        if self.command != "POST":
            raise errors.method_not_allowed()
        request = self._json(body)
        if not isinstance(request, dict):
            raise errors.bad_request("the object provided is not a JSON object")
        self.app.node_restriction.admit_token_request(self._attrs, request)
        self.app.store.get(res, namespace, name)  # 404 without the account
        spec = dict(request.get("spec") or {})
        asked = dict(spec)
        # An empty list, as an absent one, means the API server's audience.
        if not spec.get("audiences"):
            spec["audiences"] = ["https://kubernetes.default.svc"]
        spec.setdefault("expirationSeconds", 3600)
        _validate_token_request(name, spec)
        # As --service-account-max-token-expiration: the server may issue a
        # shorter token than asked; the client must read the expiry it got.
        seconds = int(spec["expirationSeconds"])
        if self.app.token_max_expiration is not None:
            seconds = min(seconds, int(self.app.token_max_expiration))
        spec["expirationSeconds"] = seconds
        pod, node = self._token_binding(namespace, spec.get("boundObjectRef"))
        sa_uid = self.app.store.get(res, namespace, name)["metadata"].get("uid")
        token = self.app.issue_token(namespace, name, asked, spec["audiences"],
                                     seconds, pod, node, sa_uid)
        expiration = objects.timestamp(seconds)
        self.app.record_token_request(namespace, name, asked, token,
                                      spec["audiences"], expiration)
        meta = dict(request.get("metadata") or {})
        meta.update(name=name, namespace=namespace,
                    creationTimestamp=objects.timestamp())
        return self._send(201, {
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": meta, "spec": spec,
            "status": {"token": token, "expirationTimestamp": expiration}})

    def _token_review(self, body):
        """POST tokenreviews: never stored; a node may create one."""
        if self.command != "POST":
            raise errors.method_not_allowed()
        self._attrs = Attributes(self._user, "create", tokenreview.GROUP,
                                 "tokenreviews", "", "", "")
        self.app.node_authorizer.authorize(self._attrs)
        request = self._json(body)
        if not isinstance(request, dict) or \
                not ((request.get("spec") or {}).get("token")):
            raise errors.bad_request(
                "token is required for TokenReview in authentication")
        return self._send(201, self.app.review_token(request))

    def _delete_options(self, query, body):
        opts = self._json(body) if body.strip() else {}
        grace = opts.get("gracePeriodSeconds")
        if "gracePeriodSeconds" in query:
            try:
                grace = int(query["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("invalid gracePeriodSeconds") from None
        return grace, opts.get("preconditions")

    def _list(self, res, namespace, fields, labels, query):
        store = self.app.store
        items, rv = store.list(res, namespace, fields, labels)
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        meta = {}
        if token:
            try:
                state = json.loads(base64.b64decode(token))
                after, rv = tuple(state["start"]), state["rv"]
            except (ValueError, KeyError, TypeError):
                raise errors.bad_request("continue key is not valid") from None
            if int(rv) < store.compacted_version:
                raise errors.expired(_CONTINUE_TOO_OLD)
            items = [o for o in items
                     if (o["metadata"].get("namespace", ""),
                         o["metadata"]["name"]) > after]
        elif query.get("resourceVersionMatch") == "Exact" and \
                int(query.get("resourceVersion") or 0) < store.compacted_version:
            raise errors.expired(
                "The resourceVersion for the provided list is too old.")
        # resourceVersion=0 is served from the watch cache, which ignores limit.
        if limit > 0 and query.get("resourceVersion") != "0" \
                and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = base64.b64encode(json.dumps(
                {"rv": rv, "start": [last.get("namespace", ""), last["name"]]}
            ).encode()).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        body = {"kind": res.list_kind, "apiVersion": res.api_version,
                "metadata": {"resourceVersion": rv, **meta},
                "items": [_list_item(o) for o in items]}
        return self._send(200, body)

    # -- watch ---------------------------------------------------------------

    def _start_stream(self):
        self.send_response(200)
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self._entry["status"] = 200
        self._entry["watch"] = True

    def _chunk(self, event):
        data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, res, namespace, fields, labels, query):
        app = self.app
        rv = query.get("resourceVersion")
        initial_end = _flag(query, "sendInitialEvents")
        if initial_end and rv in (None, ""):
            rv = "0"
        try:
            watcher = app.store.watch(res, namespace, fields, labels, rv)
        except errors.ApiError as e:
            if e.code != 410:
                raise
            # The watch cache answers 200 and an ERROR event, then ends.
            self._start_stream()
            self._chunk({"type": "ERROR", "object": e.status()})
            self.wfile.write(b"0\r\n\r\n")
            return
        initial_left = watcher.initial_events if initial_end else 0
        bookmarks = _flag(query, "allowWatchBookmarks")
        timeout = float(query.get("timeoutSeconds") or 0)
        if timeout <= 0:
            timeout = app.default_watch_timeout
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + app.bookmark_interval
        try:
            self._start_stream()
            if initial_end and initial_left == 0:
                self._chunk(self._bookmark(res, watcher.start_version,
                                           initial_end=True))
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = deadline - now
                if bookmarks:
                    wait = max(0.0, min(wait, next_bookmark - now))
                event = watcher.next(wait)
                if watcher.closed:
                    break
                if event is not None:
                    self._chunk({"type": event[0], "object": event[1]})
                    if initial_left:
                        initial_left -= 1
                        if initial_left == 0:
                            self._chunk(self._bookmark(
                                res, watcher.start_version, initial_end=True))
                    continue
                if bookmarks and time.monotonic() >= next_bookmark:
                    version = app.store.bookmark_version(watcher)
                    if version is not None:
                        self._chunk(self._bookmark(res, version))
                    next_bookmark = time.monotonic() + app.bookmark_interval
            if watcher.abrupt:
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionError, OSError):
            self.close_connection = True
        finally:
            app.store.unwatch(watcher)

    @staticmethod
    def _bookmark(res, version, initial_end=False):
        meta = {"resourceVersion": version}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"type": "BOOKMARK",
                "object": {"kind": res.kind, "apiVersion": res.api_version,
                           "metadata": meta}}
