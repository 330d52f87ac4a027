"""The legacy (unaggregated) discovery documents: /version, /api, /apis,
/apis/<group>, /api/v1 and /apis/<group>/<version>.

kubectl asks /api and /apis for the aggregated format first
(application/json;g=apidiscovery.k8s.io;v=v2) and falls back to these when
the answer's Content-Type is plain application/json.
"""
from . import resources

VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-fakeapi",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3", "compiler": "gc", "platform": "linux/amd64",
}


def api_versions(server_address):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _all(_resource):
    return True


def _group(name, served=_all):
    versions = sorted({r.version for r in resources.RESOURCES
                       if r.group == name and served(r)})
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def _served_groups(served):
    return [g for g in resources.groups()
            if any(r.group == g and served(r) for r in resources.RESOURCES)]


def api_group_list(served=_all):
    """served(resource): whether the server's modes have its API on."""
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, served) for g in _served_groups(served)]}


def api_group(name, served=_all):
    if name not in _served_groups(served):
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, served)}


def api_resource_list(group, version, served=_all):
    members = [r for r in resources.in_group_version(group, version)
               if served(r)]
    if not members:
        return None
    entries = []
    for r in members:
        entry = {"name": r.plural, "singularName": r.singular,
                 "namespaced": r.namespaced, "kind": r.kind,
                 "verbs": list(resources.STANDARD_VERBS)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entries.append(entry)
        if r.has_status:
            entries.append({"name": f"{r.plural}/status", "singularName": "",
                            "namespaced": r.namespaced, "kind": r.kind,
                            "verbs": ["get", "patch", "update"]})
        if r.plural == "serviceaccounts":
            entries.append({"name": "serviceaccounts/token", "singularName": "",
                            "namespaced": True,
                            "group": "authentication.k8s.io", "version": "v1",
                            "kind": "TokenRequest", "verbs": ["create"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries}
