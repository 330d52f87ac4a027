"""Object storage with one global resourceVersion, an event history that can
be compacted, and watchers fed the way kube-apiserver's watch cache feeds them.
"""
import collections
import copy
import threading

from . import errors, objects
from . import patch as patching
from .selectors import FieldSelector, LabelSelector

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def _with_version(obj, rv):
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(rv)
    return obj


class _Change:
    __slots__ = ("rv", "resource", "type", "obj", "prev")

    def __init__(self, rv, resource, type_, obj, prev):
        self.rv, self.resource, self.type = rv, resource, type_
        self.obj, self.prev = obj, prev


class Watcher:
    """One open watch: its filter and the queue of events it has yet to send."""

    def __init__(self, resource, namespace, fields, labels):
        self.resource = resource
        self.namespace = namespace
        self.fields = fields or FieldSelector()
        self.labels = labels or LabelSelector()
        self._cond = threading.Condition()
        self._queue = collections.deque()
        self.closed = False
        self.abrupt = False          # closed by cutting the connection
        self.initial_events = 0      # queued at registration
        self.start_version = None    # the store's resourceVersion then

    def selects(self, obj):
        if self.namespace and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.fields.matches(obj) and self.labels.matches(obj)

    def convert(self, change):
        """cacheWatcher.convertToWatchEvent: an object that stops matching
        the filter is DELETED for this watcher (with its previous content and
        the new resourceVersion), one that starts matching is ADDED."""
        cur = change.type != DELETED and self.selects(change.obj)
        old = change.prev is not None and self.selects(change.prev)
        if cur and old:
            return (MODIFIED, change.obj)
        if cur:
            return (ADDED, change.obj)
        if old:
            return (DELETED, _with_version(change.prev, change.rv))
        return None

    def put(self, event):
        with self._cond:
            self._queue.append(event)
            self._cond.notify()

    def pending(self):
        with self._cond:
            return len(self._queue)

    def next(self, timeout):
        """The next (type, object), or None on timeout or when closed."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait(timeout)
            if self.closed or not self._queue:
                return None
            return self._queue.popleft()

    def close(self, abrupt=False):
        with self._cond:
            self.closed = True
            self.abrupt = abrupt
            self._cond.notify_all()


class Store:
    def __init__(self, pod_graceful_delete=True):
        self._lock = threading.RLock()
        self._objects = {}           # (resource, namespace, name) -> object
        self._history = []           # _Change, oldest first
        self._watchers = set()
        self._rv = 1
        self._compacted = 1          # a watch from rv < this gets 410
        # kube-apiserver only marks a pod bound to a node for deletion and
        # leaves the removal to the kubelet; tests may switch that off.
        self.pod_graceful_delete = pod_graceful_delete
        # Called as listener(resource, type, object) under the store lock
        # after every write, in resourceVersion order (the node authorizer's
        # graph feeds on it); the object must not be modified.
        self.listeners = []

    # -- reads ---------------------------------------------------------------

    @property
    def resource_version(self):
        return self._rv

    @property
    def compacted_version(self):
        return self._compacted

    def watch_count(self):
        with self._lock:
            return len(self._watchers)

    def get(self, resource, namespace, name):
        with self._lock:
            obj = self._objects.get(self._key(resource, namespace, name))
            if obj is None:
                raise errors.not_found(resource, name)
            return copy.deepcopy(obj)

    def peek(self, resource):
        """The stored objects of a resource, not copied: read them only."""
        with self._lock:
            return [o for (r, _, _), o in self._objects.items() if r is resource]

    def peek_one(self, resource, namespace, name):
        """The stored object or None, not copied: read it only."""
        with self._lock:
            return self._objects.get(self._key(resource, namespace, name))

    def list(self, resource, namespace=None, fields=None, labels=None):
        """(objects sorted as etcd keys sort, list resourceVersion)."""
        w = Watcher(resource, namespace, fields, labels)
        with self._lock:
            items = [copy.deepcopy(o) for (r, _, _), o in self._objects.items()
                     if r is resource and w.selects(o)]
            rv = self._rv
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""),
                                  o["metadata"]["name"]))
        return items, str(rv)

    # -- writes --------------------------------------------------------------
    #
    # `admit(old, new)` is admission control: called under the lock with the
    # stored object (None on create) and the object the request asks for
    # (None on delete) before anything is written; it raises ApiError to
    # refuse.  As in kube-apiserver it sees the object after a patch was
    # applied and before the registry's strategy touched it.

    def create(self, resource, namespace, body, admit=None, uid=None):
        obj = objects.prepare_create(resource, namespace, body, uid=uid)
        key = self._key(resource, namespace, obj["metadata"]["name"])
        with self._lock:
            if admit:
                admit(None, obj)
            if key in self._objects:
                raise errors.already_exists(resource, key[2])
            self._commit(resource, key, ADDED, obj, None)
            return copy.deepcopy(obj)

    def update(self, resource, namespace, name, body, scope="main",
               admit=None):
        """PUT semantics; scope "status" for the status subresource, "all"
        for a test writing every field (status included)."""
        with self._lock:
            old = self._existing(resource, namespace, name)
            if admit:
                objects.check_identity(resource, body)
                admit(old, body)
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion") \
                if isinstance(body, dict) else None
            new = objects.prepare_update(resource, old, body, scope, name)
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise errors.conflict(resource, name)
            return self._replace(resource, old, new)

    def patch(self, resource, namespace, name, content_type, patch_body,
              scope="main", admit=None):
        with self._lock:
            old = self._existing(resource, namespace, name)
            patched = patching.apply(content_type, old, patch_body)
            if not isinstance(patched, dict):
                raise errors.bad_request("the patch does not produce an object")
            if admit:
                admit(old, patched)
            return self.update(resource, namespace, name, patched, scope)

    def delete(self, resource, namespace, name, grace_period=None,
               preconditions=None, admit=None):
        """DELETE semantics: (object, removed).  Finalizers and a pod's
        graceful deletion only mark the object."""
        with self._lock:
            old = self._existing(resource, namespace, name)
            if admit:
                admit(old, None)
            self._check_preconditions(resource, old, preconditions or {})
            period = self._grace_period(resource, old, grace_period)
            m = old["metadata"]
            if period == 0 and not m.get("finalizers"):
                self._remove(resource, old)
                return copy.deepcopy(old), True
            dgps = m.get("deletionGracePeriodSeconds")
            if m.get("deletionTimestamp") and dgps is not None and period >= dgps:
                return copy.deepcopy(old), False     # already pending, no sooner
            new = copy.deepcopy(old)
            nm = new["metadata"]
            nm["deletionTimestamp"] = objects.timestamp(period)
            nm["deletionGracePeriodSeconds"] = period
            if nm.get("generation"):
                nm["generation"] += 1
            return self._replace(resource, old, new), False

    def remove(self, resource, namespace, name):
        """Removes an object for good, finalizers or not (a test's hand)."""
        with self._lock:
            old = self._existing(resource, namespace, name)
            self._remove(resource, old)
            return copy.deepcopy(old)

    def compact(self):
        """Forgets the history: a watch from an older resourceVersion than
        the current one now gets 410 Gone."""
        with self._lock:
            self._compacted = self._rv
            self._history = []
            return self._rv

    # -- watches -------------------------------------------------------------

    def watch(self, resource, namespace, fields, labels, resource_version):
        """Registers a watcher primed with the events it must send first:
        the current objects as ADDED for resourceVersion ""/"0", else the
        recorded changes after resource_version.  Raises 410 Expired when the
        history no longer reaches back that far."""
        w = Watcher(resource, namespace, fields, labels)
        with self._lock:
            if resource_version in (None, "", "0"):
                for obj in self.list(resource, namespace, fields, labels)[0]:
                    w.put((ADDED, obj))
            else:
                since = self._parse_version(resource_version)
                if since < self._compacted:
                    raise errors.expired(
                        f"too old resource version: {since} ({self._compacted})")
                for change in self._history:
                    if change.rv > since and change.resource is resource:
                        event = w.convert(change)
                        if event:
                            w.put(event)
            w.initial_events = w.pending()
            w.start_version = str(self._rv)
            self._watchers.add(w)
        return w

    def unwatch(self, watcher):
        with self._lock:
            self._watchers.discard(watcher)
        watcher.close()

    def close_watches(self, abrupt=False):
        """Ends every open watch: cleanly (the chunked stream terminates) or,
        abrupt, by dropping the connection mid-stream."""
        with self._lock:
            watchers, self._watchers = self._watchers, set()
        for w in watchers:
            w.close(abrupt)
        return len(watchers)

    def bookmark_version(self, watcher):
        """The resourceVersion a bookmark may carry now: everything up to it
        has been queued for this watcher, so it must have sent its queue."""
        with self._lock:
            return None if watcher.pending() else str(self._rv)

    # -- internals -----------------------------------------------------------

    @staticmethod
    def _key(resource, namespace, name):
        return (resource, namespace if resource.namespaced else "", name)

    @staticmethod
    def _parse_version(text):
        try:
            value = int(text)
            if value < 0:
                raise ValueError
            return value
        except ValueError:
            raise errors.bad_request(
                f'resourceVersion: Invalid value: "{text}": must be a '
                f'non-negative integer') from None

    def _existing(self, resource, namespace, name):
        obj = self._objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise errors.not_found(resource, name)
        return obj

    def _grace_period(self, resource, obj, requested):
        if resource.plural != "pods" or not self.pod_graceful_delete:
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        # Pod strategy CheckGracefulDelete: unscheduled or finished pods go now.
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded",
                                                                 "Failed"):
            return 0
        if requested is not None:
            return max(int(requested), 0)
        return int(spec.get("terminationGracePeriodSeconds", 30))

    @staticmethod
    def _check_preconditions(resource, obj, pre):
        m = obj["metadata"]
        if pre.get("uid") and pre["uid"] != m.get("uid"):
            raise errors.conflict(
                resource, m["name"], f"Precondition failed: UID in precondition: "
                f"{pre['uid']}, UID in object meta: {m.get('uid')}")
        if pre.get("resourceVersion") and \
                pre["resourceVersion"] != m["resourceVersion"]:
            raise errors.conflict(
                resource, m["name"], f"Precondition failed: ResourceVersion in "
                f"precondition: {pre['resourceVersion']}, ResourceVersion in "
                f"object meta: {m['resourceVersion']}")

    def _replace(self, resource, old, new):
        m, om = new["metadata"], old["metadata"]
        # registry.Store.Update: clearing the last finalizer of an object
        # marked for deletion with no grace left deletes it instead.
        if om.get("deletionTimestamp") and om.get("finalizers") \
                and not m.get("finalizers") \
                and om.get("deletionGracePeriodSeconds") == 0:
            self._remove(resource, old)
            return copy.deepcopy(old)
        if objects.same_ignoring_version(old, new):
            return copy.deepcopy(old)      # no write, no event, same version
        key = self._key(resource, om.get("namespace"), om["name"])
        self._commit(resource, key, MODIFIED, new, old)
        return copy.deepcopy(new)

    def _remove(self, resource, obj):
        m = obj["metadata"]
        key = self._key(resource, m.get("namespace"), m["name"])
        del self._objects[key]
        self._rv += 1
        final = _with_version(obj, self._rv)
        self._publish(_Change(self._rv, resource, DELETED, final, obj))
        for listener in self.listeners:
            listener(resource, DELETED, obj)

    def _commit(self, resource, key, type_, obj, prev):
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[key] = obj
        self._publish(_Change(self._rv, resource, type_, copy.deepcopy(obj),
                              prev))
        for listener in self.listeners:
            listener(resource, type_, obj)

    def _publish(self, change):
        self._history.append(change)
        for w in self._watchers:
            if w.resource is change.resource:
                event = w.convert(change)
                if event:
                    w.put((event[0], copy.deepcopy(event[1])))
