"""What a node's own identity may do: the Node authorizer and the
NodeRestriction admission plugin of a kube-apiserver run with
--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction
(kubernetes 1.25 plugin/pkg/auth/authorizer/node/ and
plugin/pkg/admission/noderestriction/admission.go; behaviour, not code).

Only requests of a node identity (user system:node:<name> in group
system:nodes) are restricted; every other identity may do everything, as if
RBAC granted it (the fake has no RBAC).  RBAC grants the system:nodes group
nothing by default, so the node's rights are exactly the Node authorizer's.

The graph.  The real authorizer walks a graph that informers feed:
    pod -> node                    (pods with spec.nodeName)
    secret, configmap, pvc, serviceaccount -> pod   (named in the pod spec)
    pv -> pvc                      (the PV's spec.claimRef)
    secret -> pv                   (the PV's kubelet-visible secret refs)
    volumeattachment -> node       (spec.nodeName)
The fake derives the same graph from the stored objects at request time.
Secrets, configmaps and PVCs are vertices because a pod names them (the
graph has no informer on them), so they are reachable before they exist.

Graph lag (a fault): the informers of the real graph lag behind the store
(kubernetes/kubernetes#128910).  With a lag of N seconds, a pod whose binding
(or UID) changed, a PV whose claimRef changed and a VolumeAttachment whose
nodeName changed less than N seconds ago are not in the graph yet, so what
is reachable only through them is refused as "no relationship found".

Refusals are the real server's 403 bodies: the authorizer's
`<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource
"<resource>[/<sub>]" in API group "<group>" in the namespace "<ns>"[: <reason>]`
(or `at the cluster scope`), admission's `<resource> "<name>" is forbidden:
<reason>`.
"""
import copy
import threading
import time
from dataclasses import dataclass

from . import errors, resources
from .auth import Identity

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
NODE_RESTRICTION_NAMESPACE = "node-restriction.kubernetes.io"

# Labels a kubelet may set on its own Node (k8s.io/kubelet/pkg/apis
# IsKubeletLabel), besides the kubelet.kubernetes.io / node.kubernetes.io
# namespaces and their subdomains.
KUBELET_LABELS = frozenset((
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "kubernetes.io/os", "kubernetes.io/arch",
    "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
))
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")

# The static rules (bootstrappolicy NodeRules) for the resources the fake
# serves and the Node authorizer does not subdivide: (group, resource[/sub])
# -> verbs.
_STATIC_RULES = {
    ("", "nodes"): {"create", "get", "list", "watch", "update", "patch"},
    ("", "nodes/status"): {"update", "patch"},
    ("", "events"): {"create", "update", "patch"},
    ("", "pods"): {"get", "list", "watch", "create", "delete"},
    ("", "pods/status"): {"update", "patch"},
    ("", "pods/eviction"): {"create"},
    ("storage.k8s.io", "csidrivers"): {"get", "list", "watch"},
    # kubelet's delegated authentication (NodeRules).
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    # With the ClusterTrustBundleProjection feature (on wherever the API is
    # served): kubelet reads every bundle to project them.
    ("certificates.k8s.io", "clustertrustbundles"): {"get", "list", "watch"},
}


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes of a resource request, as RequestInfo fills
    them: name is the URL's, or for list/watch the value of a
    fieldSelector metadata.name=<name>; create has no name."""
    user: Identity
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str


# -- the graph ----------------------------------------------------------------

def _pod_secret_names(spec):
    """podutil.VisitPodSecretNames."""
    names = [r.get("name") for r in spec.get("imagePullSecrets") or []]
    for c in _containers(spec):
        names += [(e.get("secretRef") or {}).get("name")
                  for e in c.get("envFrom") or []]
        names += [((e.get("valueFrom") or {}).get("secretKeyRef") or {})
                  .get("name") for e in c.get("env") or []]
    for v in spec.get("volumes") or []:
        if "azureFile" in v:
            names.append(v["azureFile"].get("secretName"))
        elif "projected" in v:
            names += [(s.get("secret") or {}).get("name")
                      for s in v["projected"].get("sources") or []]
        elif "secret" in v:
            names.append(v["secret"].get("secretName"))
        elif "csi" in v:
            names.append((v["csi"].get("nodePublishSecretRef") or {})
                         .get("name"))
        else:
            for kind in ("cephfs", "cinder", "flexVolume", "rbd", "scaleIO",
                         "iscsi", "storageos"):
                if kind in v:
                    names.append((v[kind].get("secretRef") or {}).get("name"))
    return {n for n in names if n}


def _pod_configmap_names(spec):
    """podutil.VisitPodConfigmapNames."""
    names = []
    for c in _containers(spec):
        names += [(e.get("configMapRef") or {}).get("name")
                  for e in c.get("envFrom") or []]
        names += [((e.get("valueFrom") or {}).get("configMapKeyRef") or {})
                  .get("name") for e in c.get("env") or []]
    for v in spec.get("volumes") or []:
        if "projected" in v:
            names += [(s.get("configMap") or {}).get("name")
                      for s in v["projected"].get("sources") or []]
        elif "configMap" in v:
            names.append(v["configMap"].get("name"))
    return {n for n in names if n}


def _containers(spec):
    return [c for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or []]


def _pod_claim_names(pod):
    names = set()
    for v in (pod.get("spec") or {}).get("volumes") or []:
        if (v.get("persistentVolumeClaim") or {}).get("claimName"):
            names.add(v["persistentVolumeClaim"]["claimName"])
        elif "ephemeral" in v:     # ephemeral.VolumeClaimName
            names.add(f'{pod["metadata"]["name"]}-{v["name"]}')
    return names


def _pv_secret_refs(pv):
    """pvutil.VisitPVSecretNames, the kubelet-visible ones: (namespace,
    name); refs without a namespace of their own use the claimRef's."""
    spec = pv.get("spec") or {}
    claim_ns = (spec.get("claimRef") or {}).get("namespace", "")
    refs = []
    if "azureFile" in spec:
        a = spec["azureFile"]
        refs.append((a.get("secretNamespace") or claim_ns, a.get("secretName")))
    for kind in ("cephfs", "flexVolume", "rbd", "scaleIO", "iscsi"):
        if kind in spec and spec[kind].get("secretRef"):
            ref = spec[kind]["secretRef"]
            refs.append((ref.get("namespace") or claim_ns, ref.get("name")))
    for kind in ("cinder", "storageos"):
        if kind in spec and spec[kind].get("secretRef"):
            ref = spec[kind]["secretRef"]
            refs.append((ref.get("namespace", ""), ref.get("name")))
    if "csi" in spec:
        for key in ("nodePublishSecretRef", "nodeStageSecretRef",
                    "nodeExpandSecretRef"):
            ref = spec["csi"].get(key)
            if ref:
                refs.append((ref.get("namespace", ""), ref.get("name")))
    return {(ns, n) for ns, n in refs if n}


def _graph_signature(plural, obj):
    """What the real graph populator reacts to for each kind it watches."""
    spec = obj.get("spec") or {}
    uid = obj["metadata"].get("uid")
    if plural == "pods":
        return (uid, spec.get("nodeName"))
    if plural == "persistentvolumes":
        ref = spec.get("claimRef") or {}
        return (uid, ref.get("namespace"), ref.get("name"))
    if plural == "volumeattachments":
        return (uid, spec.get("nodeName"))
    return None


class GraphClock:
    """When each pod, PV and VolumeAttachment last changed in a way the
    graph sees (store listener); the graph lag fault hides recent ones."""

    WATCHED = ("pods", "persistentvolumes", "volumeattachments")

    def __init__(self):
        self._lock = threading.Lock()
        self._since = {}        # (plural, namespace, name) -> (signature, t)

    def observe(self, resource, change_type, obj):
        if resource.plural not in self.WATCHED:
            return
        m = obj["metadata"]
        key = (resource.plural, m.get("namespace", ""), m["name"])
        with self._lock:
            if change_type == "DELETED":
                self._since.pop(key, None)
                return
            sig = _graph_signature(resource.plural, obj)
            cur = self._since.get(key)
            if cur is None or cur[0] != sig:
                self._since[key] = (sig, time.monotonic())

    def age(self, plural, obj):
        m = obj["metadata"]
        with self._lock:
            cur = self._since.get((plural, m.get("namespace", ""), m["name"]))
        return float("inf") if cur is None else time.monotonic() - cur[1]


class Graph:
    """The vertices reachable from one node, derived from the store."""

    def __init__(self, store, clock, lag):
        self._store, self._clock, self._lag = store, clock, lag
        self.node_known = False      # some pod or attachment names the node
        self.pods, self.secrets, self.configmaps = set(), set(), set()
        self.claims, self.service_accounts = set(), set()
        self.volumes, self.attachments = set(), set()

    def _visible(self, plural, obj):
        return self._lag <= 0 or self._clock.age(plural, obj) >= self._lag

    def build(self, node):
        store, res, visible = self._store, resources.lookup, self._visible
        for pod in store.peek(res("pods")):
            spec = pod.get("spec") or {}
            if spec.get("nodeName") != node or not visible("pods", pod):
                continue
            self.node_known = True
            m = pod["metadata"]
            ns = m.get("namespace", "")
            self.pods.add((ns, m["name"]))
            # A node must not gain rights from a pod it could create itself.
            if MIRROR_POD_ANNOTATION in (m.get("annotations") or {}):
                continue
            if spec.get("serviceAccountName"):
                self.service_accounts.add((ns, spec["serviceAccountName"]))
            self.secrets |= {(ns, n) for n in _pod_secret_names(spec)}
            self.configmaps |= {(ns, n) for n in _pod_configmap_names(spec)}
            self.claims |= {(ns, n) for n in _pod_claim_names(pod)}
        for pv in store.peek(res("persistentvolumes")):
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if (ref.get("namespace", ""), ref.get("name")) in self.claims \
                    and visible("persistentvolumes", pv):
                self.volumes.add(pv["metadata"]["name"])
                self.secrets |= _pv_secret_refs(pv)
        for va in store.peek(res("volumeattachments")):
            if (va.get("spec") or {}).get("nodeName") == node \
                    and visible("volumeattachments", va):
                self.node_known = True
                self.attachments.add(va["metadata"]["name"])
        return self

    def reaches(self, kind, namespace, name):
        if not self.node_known:
            return False
        if kind == "persistentvolumes":
            return name in self.volumes
        if kind == "volumeattachments":
            return name in self.attachments
        return (namespace, name) in {
            "secrets": self.secrets, "configmaps": self.configmaps,
            "persistentvolumeclaims": self.claims,
            "serviceaccounts": self.service_accounts}[kind]


# -- authorization -------------------------------------------------------------

def forbidden_by_authorizer(attrs, reason):
    """responsewriters.Forbidden."""
    what = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource
                             else "")
    msg = f'User "{attrs.user.name}" cannot {attrs.verb} resource "{what}" ' \
          f'in API group "{attrs.group}" '
    msg += f'in the namespace "{attrs.namespace}"' if attrs.namespace \
        else "at the cluster scope"
    if reason:
        msg += f": {reason}"
    return errors.forbidden(attrs.group, attrs.resource, attrs.name, msg,
                            {"X-Content-Type-Options": "nosniff"})


class NodeAuthorizer:
    def __init__(self, store, clock, lag_seconds):
        """lag_seconds: a callable giving the graph lag now."""
        self.store, self.clock, self.lag_seconds = store, clock, lag_seconds

    def authorize(self, attrs):
        """Raises the 403 ApiError if the request is refused."""
        node, is_node = attrs.user.node()
        if not is_node:
            return
        if not node:
            raise forbidden_by_authorizer(
                attrs, f'unknown node for user "{attrs.user.name}"')
        reason = self._decide(node, attrs)
        if reason is not None:
            raise forbidden_by_authorizer(attrs, reason)

    def graph(self, node):
        return Graph(self.store, self.clock, self.lag_seconds()).build(node)

    def _decide(self, node, a):
        """None to allow, else the reason ("" for none)."""
        gr = (a.group, a.resource)
        if gr in (("", "secrets"), ("", "configmaps")):
            if a.verb not in ("get", "list", "watch"):
                return "can only read resources of this type"
            if a.subresource:
                return "cannot read subresource"
            if not a.namespace:
                return "can only read namespaced object of this type"
            return self._path(node, a)
        if gr == ("", "persistentvolumeclaims") and a.subresource == "status":
            if a.verb not in ("update", "patch"):
                return "can only get/update/patch this type"
            return self._path(node, a)
        if gr in (("", "persistentvolumeclaims"), ("", "persistentvolumes"),
                  ("storage.k8s.io", "volumeattachments")):
            if a.verb != "get":
                return "can only get individual resources of this type"
            if a.subresource:
                return "cannot get subresource"
            return self._path(node, a)
        if gr == ("", "serviceaccounts"):
            if a.verb != "create" or not a.name:
                return "can only create tokens for individual service accounts"
            if a.subresource != "token":
                return "can only create token subresource of serviceaccount"
            return self._path(node, a)
        if gr == ("storage.k8s.io", "csinodes"):
            if a.verb not in ("get", "create", "update", "patch", "delete"):
                return "can only get, create, update, patch, or delete a CSINode"
            if a.subresource:
                return "cannot authorize CSINode subresources"
            if a.verb != "create" and a.name != node:
                return "can only access CSINode with the same name as the " \
                       "requesting node"
            return None
        what = a.resource + (f"/{a.subresource}" if a.subresource else "")
        if a.verb in _STATIC_RULES.get((a.group, what), ()):
            return None
        return ""

    def _path(self, node, a):
        if not a.name:
            return "No Object name found"
        if self.graph(node).reaches(a.resource, a.namespace, a.name):
            return None
        return f"no relationship found between node '{node}' and this object"


# -- admission -----------------------------------------------------------------

def _forbidden(attrs, obj, message):
    """admission.NewForbidden: the request's name, else the object's name
    or generateName, else "Unknown"."""
    name = attrs.name
    if not name and obj is not None:
        m = obj.get("metadata") or {}
        name = m.get("name") or m.get("generateName") or ""
    return errors.forbidden(attrs.group, attrs.resource, name or "Unknown",
                            message)


def _label_namespace(key):
    prefix, sep, _ = key.partition("/")
    return prefix if sep else ""


def _is_kubernetes_label(key):
    ns = _label_namespace(key)
    return ns in ("kubernetes.io", "k8s.io") or ns.endswith(".kubernetes.io") \
        or ns.endswith(".k8s.io")


def is_kubelet_label(key):
    if key in KUBELET_LABELS:
        return True
    ns = _label_namespace(key)
    return any(ns == allowed or ns.endswith("." + allowed)
               for allowed in KUBELET_LABEL_NAMESPACES)


def forbidden_labels(old, new):
    """The label keys added, removed or changed that a node may not touch."""
    old, new = old or {}, new or {}
    modified = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
    bad = set()
    for key in modified:
        ns = _label_namespace(key)
        if ns == NODE_RESTRICTION_NAMESPACE \
                or ns.endswith("." + NODE_RESTRICTION_NAMESPACE):
            bad.add(key)
        if _is_kubernetes_label(key) and not is_kubelet_label(key):
            bad.add(key)
    return sorted(bad)


def _semantic(value):
    """What apiequality.Semantic.DeepEqual compares: Go zero values (absent,
    null, "", 0, false, empty list or map) are all alike."""
    if isinstance(value, dict):
        out = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, "", 0, False,
                                                          [], {})}
    if isinstance(value, list):
        return [_semantic(v) for v in value]
    return value


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _spec(obj):
    return (obj or {}).get("spec") or {}


class NodeRestriction:
    def __init__(self, store):
        self.store = store

    def admission(self, attrs):
        """The admit(old, new) callback for a write by a node, or None."""
        node, is_node = attrs.user.node()
        if not is_node:
            return None

        def admit(old, new):
            self._admit(node, attrs, old, new)
        return admit

    def _admit(self, node, a, old, new):
        if not node:
            raise _forbidden(a, new, f'could not determine node from user '
                                     f'"{a.user.name}"')
        gr = (a.group, a.resource)
        if gr == ("", "pods"):
            if a.subresource == "":
                return self._pod(node, a, old, new)
            if a.subresource == "status":
                return self._pod_status(node, a, old, new)
            raise _forbidden(a, new, f'unexpected pod subresource '
                                     f'"{a.subresource}", only \'status\' and '
                                     f'\'eviction\' are allowed')
        if gr == ("", "nodes"):
            return self._node(node, a, old, new)
        if gr == ("", "persistentvolumeclaims"):
            if a.subresource != "status":
                raise _forbidden(a, new, "may only update PVC status")
            return self._pvc_status(node, a, old, new)
        if gr == ("storage.k8s.io", "csinodes"):
            name = _meta(new).get("name") if a.verb == "create" else a.name
            if name != node:
                raise _forbidden(a, new, "can only access CSINode with the "
                                         "same name as the requesting node")
        return None

    def _pod(self, node, a, old, new):
        if a.verb == "delete":
            if _spec(old).get("nodeName") != node:
                raise _forbidden(a, None, f'node "{node}" can only delete pods '
                                          f'with spec.nodeName set to itself')
            return
        if a.verb != "create":
            op = {"update": "UPDATE", "patch": "UPDATE"}.get(a.verb, a.verb)
            raise _forbidden(a, new, f'unexpected operation "{op}", node '
                                     f'"{node}" can only create and delete '
                                     f'mirror pods')
        m, spec = _meta(new), _spec(new)
        if MIRROR_POD_ANNOTATION not in (m.get("annotations") or {}):
            raise _forbidden(a, new, f'pod does not have '
                                     f'"{MIRROR_POD_ANNOTATION}" annotation, '
                                     f'node "{node}" can only create mirror '
                                     f'pods')
        if spec.get("nodeName") != node:
            raise _forbidden(a, new, f'node "{node}" can only create pods with '
                                     f'spec.nodeName set to itself')
        owners = m.get("ownerReferences") or []
        if len(owners) > 1:
            raise _forbidden(a, new, f'node "{node}" can only create pods with '
                                     f'a single owner reference set to itself')
        if not owners:
            raise _forbidden(a, new, f'node "{node}" can only create pods with '
                                     f'an owner reference set to itself')
        owner = owners[0]
        if (owner.get("apiVersion"), owner.get("kind"), owner.get("name")) \
                != ("v1", "Node", node):
            raise _forbidden(a, new, f'node "{node}" can only create pods with '
                                     f'an owner reference set to itself')
        if not owner.get("controller"):
            raise _forbidden(a, new, f'node "{node}" can only create pods with '
                                     f'a controller owner reference set to '
                                     f'itself')
        if owner.get("blockOwnerDeletion"):
            raise _forbidden(a, new, f'node "{node}" must not set '
                                     f'blockOwnerDeletion on an owner '
                                     f'reference')
        node_obj = self.store.peek_one(resources.lookup("nodes"), None, node)
        if node_obj is None:
            raise errors.not_found(resources.lookup("nodes"), node)
        node_uid = node_obj["metadata"].get("uid")
        if owner.get("uid") != node_uid:
            raise _forbidden(a, new, f'node {node} UID mismatch: expected '
                                     f'{node_uid} got {owner.get("uid", "")}')
        if spec.get("serviceAccountName"):
            raise _forbidden(a, new, f'node "{node}" can not create pods that '
                                     f'reference a service account')
        if _pod_secret_names(spec):
            raise _forbidden(a, new, f'node "{node}" can not create pods that '
                                     f'reference secrets')
        if _pod_configmap_names(spec):
            raise _forbidden(a, new, f'node "{node}" can not create pods that '
                                     f'reference configmaps')
        if any("persistentVolumeClaim" in v for v in spec.get("volumes") or []):
            raise _forbidden(a, new, f'node "{node}" can not create pods that '
                                     f'reference persistentvolumeclaims')

    def _pod_status(self, node, a, old, new):
        if _spec(old).get("nodeName") != node:
            raise _forbidden(a, new, f'node "{node}" can only update pod status '
                                     f'for pods with spec.nodeName set to '
                                     f'itself')
        if (_meta(old).get("labels") or {}) != (_meta(new).get("labels") or {}):
            raise _forbidden(a, new, f'node "{node}" cannot update labels '
                                     f'through pod status')

    def _pvc_status(self, node, a, old, new):
        def comparable(obj):
            obj = copy.deepcopy(obj)
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
            m = obj.setdefault("metadata", {})
            m.pop("resourceVersion", None)
            m.pop("managedFields", None)
            status = obj.setdefault("status", {})
            status.pop("capacity", None)
            status.pop("conditions", None)
            # RecoverVolumeExpansionFailure (GA in 1.34, so always on here):
            # the node reports its part of an expansion in these too.
            status.pop("allocatedResourceStatuses", None)
            status.pop("allocatedResources", None)
            return _semantic(obj)
        before, after = comparable(old), comparable(new)
        if before != after:
            changed = sorted(k for k in set(before) | set(after)
                             if before.get(k) != after.get(k))
            # The real message ends in diff.ObjectReflectDiff's Go output,
            # which the fake does not reproduce; it names the fields instead.
            raise _forbidden(a, new, f'node "{node}" is not allowed to update '
                                     f'fields other than status.capacity and '
                                     f'status.conditions: changed '
                                     f'{", ".join(changed)}')

    def _node(self, node, a, old, new):
        requested = a.name if a.verb != "create" else _meta(new).get("name")
        if requested != node:
            raise _forbidden(a, new, f'node "{node}" is not allowed to modify '
                                     f'node "{requested}"')
        if a.verb == "create":
            if _spec(new).get("configSource") is not None:
                raise _forbidden(a, new, f'node "{node}" is not allowed to '
                                         f'create pods with a non-nil '
                                         f'configSource')
            bad = forbidden_labels(None, _meta(new).get("labels"))
            if bad:
                raise _forbidden(a, new, f'node "{node}" is not allowed to set '
                                         f'the following labels: '
                                         f'{", ".join(bad)}')
            return
        if new is None:        # delete: the authorizer already refused it
            return
        source = _spec(new).get("configSource")
        if source is not None and \
                _semantic(source) != _semantic(_spec(old).get("configSource")):
            raise _forbidden(a, new, f'node "{node}" is not allowed to update '
                                     f'configSource to a new non-nil '
                                     f'configSource')
        if _semantic(_spec(new).get("taints") or []) != \
                _semantic(_spec(old).get("taints") or []):
            raise _forbidden(a, new, f'node "{node}" is not allowed to modify '
                                     f'taints')
        bad = forbidden_labels(_meta(old).get("labels"),
                               _meta(new).get("labels"))
        if bad:
            raise _forbidden(a, new, f'is not allowed to modify labels: '
                                     f'{", ".join(bad)}')

    def admit_token_request(self, a, request):
        """admitServiceAccount: a node's TokenRequest must be bound to a pod
        on that node.  Raises ApiError."""
        node, is_node = a.user.node()
        if not is_node:
            return
        if not node:
            raise _forbidden(a, request, f'could not determine node from user '
                                         f'"{a.user.name}"')
        ref = _spec(request).get("boundObjectRef")
        if not isinstance(ref, dict) or ref.get("apiVersion") != "v1" \
                or ref.get("kind") != "Pod" or not ref.get("name"):
            raise _forbidden(a, request, "node requested token not bound to a "
                                         "pod")
        if not ref.get("uid"):
            raise _forbidden(a, request, "node requested token with a pod "
                                         "binding without a uid")
        pods = resources.lookup("pods")
        pod = self.store.peek_one(pods, a.namespace, ref["name"])
        if pod is None:
            raise errors.not_found(pods, ref["name"])
        if ref["uid"] != pod["metadata"].get("uid"):
            raise _forbidden(a, request, f'the UID in the bound object '
                                         f'reference ({ref["uid"]}) does not '
                                         f'match the UID in record. The object '
                                         f'might have been deleted and then '
                                         f'recreated')
        if _spec(pod).get("nodeName") != node:
            raise _forbidden(a, request, "node requested token bound to a pod "
                                         "scheduled on a different node")
