"""What the registry does to an object on create and update: validation of
identity and name, server-owned metadata, and the status subresource split."""
import copy
import datetime
import random
import re
import uuid

from . import errors

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
    "characters, '-' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
# The alphabet of k8s.io/apimachinery/pkg/util/rand.String (no vowels).
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# Metadata that only the server sets; a client's value is ignored.
_SERVER_OWNED = ("uid", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "generation")


def timestamp(offset_seconds=0):
    t = datetime.datetime.now(datetime.timezone.utc) \
        + datetime.timedelta(seconds=offset_seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(obj):
    return obj.setdefault("metadata", {})


def check_identity(resource, body):
    if not isinstance(body, dict):
        raise errors.bad_request("the object provided is not a JSON object")
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version and api_version != resource.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the "
            f"expected API version ({resource.api_version})")
    if kind and kind != resource.kind:
        raise errors.bad_request(
            f'{kind} in version "{resource.version}" cannot be handled as a '
            f'{resource.kind}: the kind in the data does not match the URL')
    if not isinstance(body.get("metadata", {}), dict):
        raise errors.bad_request("metadata must be a JSON object")


def _string_maps(m):
    """metadata.labels and metadata.annotations as the API server decodes
    and encodes a map[string]string with omitempty: a null value is "", a
    value of another type is refused, and an empty map is not returned."""
    for key in ("labels", "annotations"):
        if key not in m:
            continue
        value = m[key]
        if value is None:
            del m[key]
            continue
        if not isinstance(value, dict):
            raise errors.bad_request(
                f"json: cannot unmarshal {_json_type(value)} into Go struct "
                f"field ObjectMeta.metadata.{key} of type map[string]string")
        for k, v in list(value.items()):
            if v is None:
                value[k] = ""
            elif not isinstance(v, str):
                raise errors.bad_request(
                    f"json: cannot unmarshal {_json_type(v)} into Go struct "
                    f"field ObjectMeta.metadata.{key} of type string")
        if not value:
            del m[key]


def _json_type(v):
    return ("bool" if isinstance(v, bool) else
            "number" if isinstance(v, (int, float)) else
            "string" if isinstance(v, str) else
            "array" if isinstance(v, list) else "object")


def _check_namespace(resource, body, namespace):
    m = meta(body)
    if not resource.namespaced:
        m.pop("namespace", None)
        return
    if m.get("namespace") and m["namespace"] != namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the "
            "namespace sent on the request")
    m["namespace"] = namespace


def _check_name(resource, name, obj=None):
    if resource.plural == "clustertrustbundles":
        name = _trust_bundle_name(resource, name, obj)
    if not _DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        raise errors.invalid(resource, name, [(
            "metadata.name", "FieldValueInvalid",
            f'Invalid value: "{name}": {_DNS1123_MSG}')])


def _trust_bundle_name(resource, name, obj):
    """ValidateClusterTrustBundleName: a bundle of a signer is named
    "<signerName, / as :>:<rest>", one without a signer has no ":"; the
    rest is a DNS subdomain.  Returns the part to check as one."""
    signer = ((obj or {}).get("spec") or {}).get("signerName") or ""
    if not signer:
        if ":" in name:
            raise errors.invalid(resource, name, [(
                "metadata.name", "FieldValueInvalid",
                f'Invalid value: "{name}": ClusterTrustBundle without signer '
                f'name must not have ":" in its name')])
        return name
    prefix = signer.replace("/", ":") + ":"
    if not name.startswith(prefix):
        raise errors.invalid(resource, name, [(
            "metadata.name", "FieldValueInvalid",
            f'Invalid value: "{name}": ClusterTrustBundle for signerName '
            f'{signer} must be named with prefix {prefix}')])
    return name[len(prefix):]


def _validate_volume_attachment(resource, obj):
    """ValidateVolumeAttachment (+V1) of storage/validation (1.25): an
    attacher, a node, and exactly one source; a migrated inline volume's
    source is a PV spec as ValidatePersistentVolumeSpec takes one in the
    context of inline volumes (a CSI source, access modes, no capacity, no
    claimRef)."""
    name = meta(obj).get("name", "")
    spec = obj.get("spec") or {}
    source = spec.get("source") or {}
    causes = []
    if not spec.get("attacher"):
        causes.append(("spec.attacher", "FieldValueRequired", "Required value"))
    if not spec.get("nodeName"):
        causes.append(("spec.nodeName", "FieldValueRequired", "Required value"))
    pv_name, inline = source.get("persistentVolumeName"), source.get("inlineVolumeSpec")
    if pv_name is None and inline is None:
        causes.append(("spec.source", "FieldValueRequired",
                       "Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
    elif pv_name is not None and inline is not None:
        causes.append(("spec.source", "FieldValueForbidden",
                       "Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
    elif pv_name is not None and not pv_name:
        causes.append(("spec.source.persistentVolumeName", "FieldValueRequired",
                       "Required value: must specify non empty persistentVolumeName"))
    elif inline is not None:
        path = "spec.source.inlineVolumeSpec"
        if inline.get("claimRef") is not None:
            causes.append((path + ".claimRef", "FieldValueForbidden",
                           "Forbidden: may not be specified in the context of inline volumes"))
        if inline.get("capacity"):
            causes.append((path + ".capacity", "FieldValueForbidden",
                           "Forbidden: may not be specified in the context of inline volumes"))
        csi = inline.get("csi")
        if csi is None:
            causes.append((path + ".csi", "FieldValueRequired",
                           "Required value: has to be specified in the context of inline volumes"))
        elif not csi.get("driver") or not csi.get("volumeHandle"):
            causes.append((path + ".csi", "FieldValueRequired", "Required value: driver and volumeHandle"))
        if not inline.get("accessModes"):
            causes.append((path + ".accessModes", "FieldValueRequired", "Required value"))
    if causes:
        raise errors.invalid(resource, name, causes)


_VALIDATORS = {"volumeattachments": _validate_volume_attachment}


def prepare_create(resource, namespace, body, uid=None):
    check_identity(resource, body)
    obj = {"kind": resource.kind, "apiVersion": resource.api_version}
    obj.update((k, copy.deepcopy(v)) for k, v in body.items()
               if k not in ("kind", "apiVersion"))
    _check_namespace(resource, obj, namespace)
    m = meta(obj)
    if not m.get("name"):
        if not m.get("generateName"):
            raise errors.invalid(resource, "", [(
                "metadata.name", "FieldValueRequired",
                "Required value: name or generateName is required")])
        m["name"] = m["generateName"] + "".join(
            random.choice(_GENERATE_ALPHABET) for _ in range(5))
    _check_name(resource, m["name"], obj)
    _string_maps(m)
    if resource.plural in _VALIDATORS:
        _VALIDATORS[resource.plural](resource, obj)
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                "managedFields", "resourceVersion"):
        m.pop(key, None)
    m["uid"] = uid or str(uuid.uuid4())
    m["creationTimestamp"] = timestamp()
    m["generation"] = 1
    return obj


def prepare_update(resource, old, body, scope, url_name):
    """The object a PUT (scope "main" or "status") or a test's direct write
    (scope "all") stores.  Raises ApiError for a body the server refuses."""
    check_identity(resource, body)
    name = (body.get("metadata") or {}).get("name")
    if name != url_name:
        raise errors.bad_request(
            f"the name of the object ({name}) does not match the name on the "
            f"URL ({url_name})")
    new = {"kind": resource.kind, "apiVersion": resource.api_version}
    new.update((k, copy.deepcopy(v)) for k, v in body.items()
               if k not in ("kind", "apiVersion"))
    _check_namespace(resource, new, old["metadata"].get("namespace"))
    m = meta(new)
    for key in _SERVER_OWNED:
        if key in old["metadata"]:
            m[key] = old["metadata"][key]
        else:
            m.pop(key, None)
    m.pop("selfLink", None)
    m.pop("managedFields", None)
    _string_maps(m)
    if resource.has_status and scope == "status":
        # The status endpoint writes status and metadata only.
        new = {k: m if k == "metadata" else copy.deepcopy(v)
               for k, v in old.items() if k != "status"}
        if "status" in body:
            new["status"] = copy.deepcopy(body["status"])
    elif resource.has_status and scope == "main":
        new.pop("status", None)
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
    if resource.plural in _VALIDATORS:
        _VALIDATORS[resource.plural](resource, new)
    if _spec_of(new) != _spec_of(old):
        m["generation"] = old["metadata"].get("generation", 0) + 1
    return new


def _spec_of(obj):
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def same_ignoring_version(a, b):
    def strip(o):
        o = dict(o)
        o["metadata"] = {k: v for k, v in o.get("metadata", {}).items()
                         if k != "resourceVersion"}
        return o
    return strip(a) == strip(b)
