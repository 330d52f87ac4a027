"""API errors and the `Status` bodies kube-apiserver sends for them.

Messages, reasons and details follow k8s.io/apimachinery/pkg/api/errors, so a
client that matches on them behaves as it would against the real server.
"""


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        return failure_status(self.code, self.reason, self.message, self.details)


def failure_status(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(resource, name):
    d = {"name": name}
    if resource.group:
        d["group"] = resource.group
    d["kind"] = resource.plural
    return d


def not_found(resource, name):
    return ApiError(404, "NotFound",
                    f'{resource.group_resource} "{name}" not found',
                    _details(resource, name))


def no_such_route():
    return ApiError(404, "NotFound",
                    "the server could not find the requested resource", {})


def already_exists(resource, name):
    return ApiError(409, "AlreadyExists",
                    f'{resource.group_resource} "{name}" already exists',
                    _details(resource, name))


def conflict(resource, name, why="the object has been modified; please apply "
             "your changes to the latest version and try again"):
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {resource.group_resource} '
                    f'"{name}": {why}', _details(resource, name))


def invalid(resource, name, causes):
    """causes: list of (field, reason, message); reason as in
    metav1.CauseType, e.g. FieldValueRequired, FieldValueInvalid."""
    parts = [f"{field}: {msg}" for field, _, msg in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.kind
    details["causes"] = [{"reason": r, "message": m, "field": f}
                         for f, r, m in causes]
    return ApiError(422, "Invalid",
                    f'{resource.kind} "{name}" is invalid: {summary}', details)


def forbidden(group, resource, name, message, headers=None):
    """apierrors.NewForbidden: details name (if any), group (if any) and the
    resource (not the subresource) as kind."""
    gr = f"{resource}.{group}" if group else resource
    details = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    text = f'{gr} "{name}" is forbidden: {message}' if name else \
        f"{gr} is forbidden: {message}"
    return ApiError(403, "Forbidden", text, details, headers)


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested "
                    "resource", {})


def unsupported_patch_type(content_type):
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - "
                    f"accepted media types include: application/json-patch+json, "
                    f"application/merge-patch+json, "
                    f"application/strategic-merge-patch+json (got "
                    f"{content_type or 'no Content-Type'})")


def expired(message):
    return ApiError(410, "Expired", message)


UNAUTHORIZED = failure_status(401, "Unauthorized", "Unauthorized")


def injected(code, retry_after=None):
    """The errors a test injects: what an overloaded or broken server says."""
    if code == 429:
        details = {"retryAfterSeconds": retry_after or 1}
        headers = {"Retry-After": str(retry_after or 1)}
        return ApiError(429, "TooManyRequests",
                        "Too many requests, please try again later.", details,
                        headers)
    if code == 503:
        headers = {"Retry-After": str(retry_after)} if retry_after else {}
        return ApiError(503, "ServiceUnavailable",
                        "the server is currently unable to handle the request",
                        {}, headers)
    headers = {"Retry-After": str(retry_after)} if retry_after else {}
    return ApiError(code, "InternalError",
                    "Internal error occurred: injected by fakeapi",
                    {"causes": [{"message": "injected by fakeapi"}]}, headers)
