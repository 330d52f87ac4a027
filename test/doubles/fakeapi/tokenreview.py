"""TokenReview (authentication.k8s.io/v1 tokenreviews): what the API server
says of a service account token it issued through a TokenRequest, so that a
test can prove which pod a token kvolumed wrote is bound to.

As kube-apiserver's service account authenticator (1.30+) answers: the user
system:serviceaccount:<ns>:<sa> with the groups system:serviceaccounts,
system:serviceaccounts:<ns> and system:authenticated, and for a pod-bound
token the extra authentication.kubernetes.io/pod-name and pod-uid (and
node-name / node-uid of the node the pod is bound to, credential-id
"JTI=<id>").  A token that is unknown, expired, whose bound pod is gone or
was recreated ("service account token has been invalidated"), or whose
audiences do not meet the review's (the API server's own audience when the
review names none) is not authenticated.  A review is never stored; a node
may create one (bootstrappolicy NodeRules: kubelet's delegated authn)."""
import time

GROUP = "authentication.k8s.io"
API_SERVER_AUDIENCE = "https://kubernetes.default.svc"


def _unauthenticated(spec, error):
    return {"kind": "TokenReview", "apiVersion": f"{GROUP}/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec,
            "status": {"user": {}, "error": f"[invalid bearer token, {error}]"}}


def review(issued, store_get_pod, body):
    """issued: the record of the token (dict) or None; store_get_pod(ns,
    name): the stored pod or None.  Returns the TokenReview answer."""
    spec = dict((body or {}).get("spec") or {})
    if issued is None:
        return _unauthenticated(spec, "token is not a token this server issued")
    if time.time() >= issued["expires"]:
        return _unauthenticated(spec, "service account token has expired")
    pod = issued.get("pod")
    if pod is not None:
        current = store_get_pod(issued["namespace"], pod["name"])
        if current is None or current["metadata"].get("uid") != pod["uid"]:
            return _unauthenticated(spec, "service account token has been "
                                          "invalidated")
    target = spec.get("audiences") or [API_SERVER_AUDIENCE]
    audiences = [a for a in target if a in issued["audiences"]]
    if not audiences:
        return _unauthenticated(
            spec, f"token audiences {issued['audiences']!r} is invalid for "
                  f"the target audiences {target!r}".replace("'", '"'))
    ns, sa = issued["namespace"], issued["serviceAccount"]
    extra = {"authentication.kubernetes.io/credential-id":
             [f"JTI={issued['jti']}"]}
    if pod is not None:
        extra["authentication.kubernetes.io/pod-name"] = [pod["name"]]
        extra["authentication.kubernetes.io/pod-uid"] = [pod["uid"]]
        if issued.get("node"):
            extra["authentication.kubernetes.io/node-name"] = \
                [issued["node"]["name"]]
            if issued["node"].get("uid"):
                extra["authentication.kubernetes.io/node-uid"] = \
                    [issued["node"]["uid"]]
    user = {"username": f"system:serviceaccount:{ns}:{sa}",
            "groups": ["system:serviceaccounts",
                       f"system:serviceaccounts:{ns}",
                       "system:authenticated"],
            "extra": extra}
    if issued.get("serviceAccountUID"):
        user["uid"] = issued["serviceAccountUID"]
    return {"kind": "TokenReview", "apiVersion": f"{GROUP}/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec,
            "status": {"authenticated": True, "user": user,
                       "audiences": audiences}}
