"""The API resources the fake serves, described the way discovery describes them."""
from dataclasses import dataclass

# Every built-in resource of kube-apiserver supports the full set of standard
# verbs (RBAC, not the server, narrows them), so the fake does too.
STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch",
                  "update", "watch")


@dataclass(frozen=True)
class Resource:
    group: str          # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple = ()
    categories: tuple = ()
    has_status: bool = False
    # Field selector labels beyond metadata.name / metadata.namespace, which
    # every resource supports (fields.Set of the resource's GetAttrs).
    field_labels: tuple = ()
    # The registry of some resources answers DELETE with the deleted object
    # (ReturnDeletedObject), the others with a Status of success.
    returns_deleted_object: bool = False

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self):
        """How kube-apiserver names the resource in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self):
        return self.kind + "List"


_POD_FIELDS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
               "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
               "status.podIP", "status.nominatedNodeName")
_EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace",
                 "involvedObject.name", "involvedObject.uid",
                 "involvedObject.apiVersion", "involvedObject.resourceVersion",
                 "involvedObject.fieldPath", "reason", "reportingComponent",
                 "source", "type")

RESOURCES = (
    Resource("", "v1", "pods", "pod", "Pod", True, ("po",), ("all",),
             has_status=True, field_labels=_POD_FIELDS,
             returns_deleted_object=True),
    Resource("", "v1", "nodes", "node", "Node", False, ("no",),
             has_status=True, field_labels=("spec.unschedulable",)),
    Resource("", "v1", "namespaces", "namespace", "Namespace", False, ("ns",),
             has_status=True, field_labels=("status.phase",),
             returns_deleted_object=True),
    Resource("", "v1", "persistentvolumes", "persistentvolume",
             "PersistentVolume", False, ("pv",), has_status=True),
    Resource("", "v1", "persistentvolumeclaims", "persistentvolumeclaim",
             "PersistentVolumeClaim", True, ("pvc",), has_status=True),
    Resource("", "v1", "secrets", "secret", "Secret", True,
             field_labels=("type",)),
    Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount",
             True, ("sa",)),
    Resource("", "v1", "events", "event", "Event", True, ("ev",),
             field_labels=_EVENT_FIELDS),
    Resource("storage.k8s.io", "v1", "csidrivers", "csidriver", "CSIDriver",
             False),
    Resource("storage.k8s.io", "v1", "csinodes", "csinode", "CSINode", False),
    Resource("storage.k8s.io", "v1", "volumeattachments", "volumeattachment",
             "VolumeAttachment", False, has_status=True),
    # Served only in the version the server's clusterTrustBundles mode names
    # (FakeApiServer.serves); spec.signerName is their field selector.
    Resource("certificates.k8s.io", "v1beta1", "clustertrustbundles",
             "clustertrustbundle", "ClusterTrustBundle", False,
             field_labels=("spec.signerName",)),
    Resource("certificates.k8s.io", "v1alpha1", "clustertrustbundles",
             "clustertrustbundle", "ClusterTrustBundle", False,
             field_labels=("spec.signerName",)),
)


def groups():
    """API groups other than core, in discovery order."""
    seen = []
    for r in RESOURCES:
        if r.group and r.group not in seen:
            seen.append(r.group)
    return seen


def in_group_version(group, version):
    return [r for r in RESOURCES if r.group == group and r.version == version]


def by_path(group, version, plural):
    for r in RESOURCES:
        if (r.group, r.version, r.plural) == (group, version, plural):
            return r
    return None


def by_api_version_kind(api_version, kind):
    for r in RESOURCES:
        if r.api_version == api_version and r.kind == kind:
            return r
    return None


def lookup(name):
    """Resolves what a test writes: "pods", "pod", "Pod", "po",
    "csidrivers.storage.k8s.io" or a Resource itself."""
    if isinstance(name, Resource):
        return name
    for r in RESOURCES:
        if name in (r.plural, r.singular, r.kind, r.group_resource) \
                or name in r.short_names:
            return r
    raise KeyError(f"unknown resource {name!r}")
