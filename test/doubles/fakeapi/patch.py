"""The three patch formats of kube-apiserver: JSON merge patch (RFC 7386),
JSON patch (RFC 6902) and a subset of strategic merge patch.

Strategic merge patch needs the Go struct tags (patchStrategy,
patchMergeKey) of every field; the fake knows them by field name for the
lists the node agent and kubectl touch, which is where the name alone is
unambiguous.  Not modelled: `$retainKeys`, `$patch: merge`, merge keys that
differ for one field name in different structs, and server-side apply.
"""
import copy

from . import errors

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Lists of objects merged by key (patchStrategy "merge", patchMergeKey).
_MERGE_KEYS = {
    "volumesAttached": "name",          # NodeStatus
    "conditions": "type",               # NodeStatus, PodStatus, PVCStatus
    "addresses": "type",                # NodeStatus
    "containers": "name", "initContainers": "name",
    "ephemeralContainers": "name", "volumes": "name", "env": "name",
    "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "ports": "containerPort", "imagePullSecrets": "name",
    "ownerReferences": "uid", "podIPs": "ip", "hostIPs": "ip",
    "drivers": "name",                  # CSINodeSpec
}
# Lists of primitives merged as sets (patchStrategy "merge" on []string).
_MERGED_PRIMITIVE_LISTS = {"finalizers"}

_DELETE_FROM = "$deleteFromPrimitiveList/"
_ELEMENT_ORDER = "$setElementOrder/"


def apply(content_type, target, patch):
    """Returns the patched copy of target; raises ApiError."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media == MERGE_PATCH:
        return merge_patch(target, patch)
    if media == STRATEGIC_MERGE_PATCH:
        if not isinstance(patch, dict):
            raise errors.bad_request("strategic merge patch must be a JSON object")
        return _strategic_map(copy.deepcopy(target), patch)
    if media == JSON_PATCH:
        return json_patch(target, patch)
    raise errors.unsupported_patch_type(content_type)


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _strategic_map(target, patch):
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    orders = {}
    for key, value in patch.items():
        if key.startswith(_ELEMENT_ORDER):
            orders[key[len(_ELEMENT_ORDER):]] = value
        elif key.startswith(_DELETE_FROM):
            field = key[len(_DELETE_FROM):]
            target[field] = [v for v in target.get(field) or [] if v not in value]
        elif key == "$retainKeys" or key == "$patch":
            continue
        elif value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            cur = target.get(key)
            merged = _strategic_map(copy.deepcopy(cur) if isinstance(cur, dict)
                                    else {}, value)
            if merged is None:
                target.pop(key, None)
            else:
                target[key] = merged
        elif isinstance(value, list):
            target[key] = _strategic_list(key, target.get(key) or [], value)
        else:
            target[key] = copy.deepcopy(value)
    for field, order in orders.items():
        if isinstance(target.get(field), list):
            target[field] = _reorder(field, target[field], order)
    return target


def _strategic_list(field, current, patch):
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch
                if not (isinstance(p, dict) and "$patch" in p)]
    if field in _MERGED_PRIMITIVE_LISTS:
        return list(current) + [v for v in patch if v not in current]
    key = _MERGE_KEYS.get(field)
    if key is None:
        return copy.deepcopy(patch)
    result = copy.deepcopy(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise errors.bad_request(
                f"map: {item} does not contain declared merge key: {key}")
        idx = next((i for i, c in enumerate(result)
                    if isinstance(c, dict) and c.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del result[idx]
        elif idx is None:
            result.append(_strategic_map({}, item))
        else:
            result[idx] = _strategic_map(result[idx], item)
    return result


def _reorder(field, items, order):
    """$setElementOrder: the listed elements in the listed order, the others
    after them in their current order."""
    key = _MERGE_KEYS.get(field)

    def ident(x):
        return x.get(key) if key and isinstance(x, dict) else x
    wanted = [ident(o) for o in order]
    ordered = sorted((x for x in items if ident(x) in wanted),
                     key=lambda x: wanted.index(ident(x)))
    return ordered + [x for x in items if ident(x) not in wanted]


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise errors.ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc, parts):
    cur = doc
    for p in parts:
        if isinstance(cur, list):
            cur = cur[int(p)]
        elif isinstance(cur, dict):
            cur = cur[p]
        else:
            raise KeyError(p)
    return cur


def json_patch(target, ops):
    if not isinstance(ops, list):
        raise errors.bad_request("json patch must be a JSON array")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            doc = _json_patch_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as e:
            raise errors.ApiError(
                422, "Invalid",
                f"the server rejected our request due to an error in our "
                f"request: {op.get('op')} {op.get('path')}: {e!r}") from None
    return doc


def _json_patch_op(doc, op):
    kind, parts = op["op"], _pointer(op["path"])
    if kind == "test":
        if _resolve(doc, parts) != op["value"]:
            raise ValueError("test failed")
        return doc
    if kind in ("move", "copy"):
        value = copy.deepcopy(_resolve(doc, _pointer(op["from"])))
        if kind == "move":
            doc = _json_patch_op(doc, {"op": "remove", "path": op["from"]})
        return _json_patch_op(doc, {"op": "add", "path": op["path"],
                                    "value": value})
    if not parts:
        if kind == "remove":
            raise ValueError("cannot remove the root")
        return copy.deepcopy(op["value"])
    parent, last = _resolve(doc, parts[:-1]), parts[-1]
    if kind == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
    elif kind == "replace":
        if isinstance(parent, list):
            parent[int(last)] = copy.deepcopy(op["value"])
        else:
            if last not in parent:     # RFC 6902: replace needs a target
                raise KeyError(last)
            parent[last] = copy.deepcopy(op["value"])
    elif kind == "add":
        if isinstance(parent, list):
            idx = len(parent) if last == "-" else int(last)
            if idx > len(parent):
                raise IndexError(last)
            parent.insert(idx, copy.deepcopy(op["value"]))
        else:
            parent[last] = copy.deepcopy(op["value"])
    else:
        raise ValueError(f"unknown op {kind}")
    return doc
