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

GROUP = "authentication.k8s.io"
MODES = {"v1": ("v1",), "v1beta1": ("v1beta1",), "none": ()}


def served(mode, version):
    return version in MODES[mode]


def review(method, version, body, identity):
    """(code, body) for a request to .../selfsubjectreviews of a served
    version; raises errors.ApiError as the real server would."""
    if method != "POST":
        raise errors.method_not_allowed()
    try:
        obj = json.loads(body or b"{}")
    except ValueError as e:
        raise errors.bad_request(f"the body of the request was in an unknown format: {e}")
    if not isinstance(obj, dict) or obj.get("kind") != "SelfSubjectReview" \
            or obj.get("apiVersion") != f"{GROUP}/{version}":
        raise errors.bad_request(
            f"the API version in the data ({obj.get('apiVersion') if isinstance(obj, dict) else None}) does "
            f"not match the expected API version ({GROUP}/{version})")
    user_info = {"username": identity.name}
    if identity.groups:
        user_info["groups"] = list(identity.groups)
    return 201, {"kind": "SelfSubjectReview", "apiVersion": f"{GROUP}/{version}",
                 "metadata": {"creationTimestamp": None},
                 "status": {"userInfo": user_info}}
