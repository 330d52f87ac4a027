"""SelfSubjectReview (authentication.k8s.io): who the server says the caller
is, as kube-apiserver answers it.  GA (v1) since 1.28, v1beta1 from 1.27 (on
by default), v1alpha1 in 1.26 behind a feature gate.  Every authenticated
user may create one (the system:basic-user ClusterRole), a node included: the
Node authorizer does not restrict it.  It is never stored.

The versions served are a mode of the server (FakeApiServer.configure(
selfSubjectReview=...)): "v1" (the default, as this fake's 1.32), "v1beta1"
(a 1.27 server), "none" (before 1.27: 404 for every version)."""
import json

from . import errors

PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"   # before a runtime.Unknown in kube's protobuf encoding


# -- the protobuf encoding that clients built on client-go (kubectl) use for
# built-in types: just what a SelfSubjectReview needs.

def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes_field(number, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _fields(data):
    """(number, bytes) of each length-delimited field; others are skipped."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 2:
            n, i = _read_varint(data, i)
            yield number, data[i:i + n]
            i += n
        elif wire == 0:
            _, i = _read_varint(data, i)
        else:
            raise ValueError(f"wire type {wire}")


def _read_varint(data, i):
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def _decode_type_meta(body):
    """apiVersion and kind of a protobuf request body (runtime.Unknown)."""
    if not body.startswith(_MAGIC):
        raise ValueError("no k8s protobuf magic")
    unknown = dict(_fields(body[len(_MAGIC):]))
    meta = dict(_fields(unknown.get(1, b"")))
    return {"apiVersion": meta.get(1, b"").decode(), "kind": meta.get(2, b"").decode()}


def _encode_review(version, user_info):
    user = _bytes_field(1, user_info["username"]) + b"".join(
        _bytes_field(3, g) for g in user_info.get("groups", ()))
    review = _bytes_field(1, b"") + _bytes_field(2, _bytes_field(1, user))
    type_meta = _bytes_field(1, f"{GROUP}/{version}") + _bytes_field(2, "SelfSubjectReview")
    return _MAGIC + _bytes_field(1, type_meta) + _bytes_field(2, review) + _bytes_field(3, "") \
        + _bytes_field(4, "")

GROUP = "authentication.k8s.io"
MODES = {"v1": ("v1",), "v1beta1": ("v1beta1",), "none": ()}


def served(mode, version):
    return version in MODES[mode]


def review(method, version, body, identity, content_type="", accept=""):
    """(code, body, content type) for a request to .../selfsubjectreviews of
    a served version, in JSON or in kube's protobuf as the request asks;
    raises errors.ApiError as the real server would."""
    if method != "POST":
        raise errors.method_not_allowed()
    try:
        if content_type.startswith(PROTOBUF):
            obj = _decode_type_meta(body or b"")
        else:
            obj = json.loads(body or b"{}")
    except (ValueError, IndexError) as e:
        raise errors.bad_request(f"the body of the request was in an unknown format: {e}")
    if not isinstance(obj, dict) or obj.get("kind") != "SelfSubjectReview" \
            or obj.get("apiVersion") != f"{GROUP}/{version}":
        raise errors.bad_request(
            f"the API version in the data ({obj.get('apiVersion') if isinstance(obj, dict) else None}) does "
            f"not match the expected API version ({GROUP}/{version})")
    user_info = {"username": identity.name}
    if identity.groups:
        user_info["groups"] = list(identity.groups)
    if accept.split(",")[0].strip().startswith(PROTOBUF):
        return 201, _encode_review(version, user_info), PROTOBUF
    return 201, {"kind": "SelfSubjectReview", "apiVersion": f"{GROUP}/{version}",
                 "metadata": {"creationTimestamp": None},
                 "status": {"userInfo": user_info}}, "application/json"
