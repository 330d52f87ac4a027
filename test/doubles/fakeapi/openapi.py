"""The least of OpenAPI v3 that kubectl needs.

kubectl create/apply/replace validate with --validate=strict by default: they
look in /openapi/v3 for a PATCH operation of the object's group/version/kind
that takes the `fieldValidation` query parameter, and if they find it they
leave validation to the server; otherwise they download the full schema and
fail without one.  So the fake publishes a document with those operations
only (no schemas); it does not validate fields itself.
"""
from . import resources


def _gv_path(group, version):
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _all(_resource):
    return True


def root(served=_all):
    """served(resource): whether the server's modes have its API on."""
    gvs = sorted({(r.group, r.version) for r in resources.RESOURCES
                  if served(r)})
    return {"paths": {_gv_path(g, v): {
        "serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=fakeapi"}
        for g, v in gvs}}


def group_version(path, served=_all):
    """The document of "api/v1" or "apis/<group>/<version>", or None."""
    parts = path.split("/")
    if parts[0] == "api" and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[0] == "apis" and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    members = [r for r in resources.in_group_version(group, version)
               if served(r)]
    if not members:
        return None
    paths = {}
    for r in members:
        scope = "/namespaces/{namespace}" if r.namespaced else ""
        item = f"/{_gv_path(group, version)}{scope}/{r.plural}/{{name}}"
        paths[item] = {"patch": {
            "operationId": f"patch{r.kind}",
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {
                "group": group, "version": version, "kind": r.kind},
            "parameters": [{"name": "fieldValidation", "in": "query",
                            "schema": {"type": "string", "uniqueItems": True}}],
            "responses": {"200": {"description": "OK"}}}}
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes (fakeapi)", "version": "v1.32.0"},
            "paths": paths}
