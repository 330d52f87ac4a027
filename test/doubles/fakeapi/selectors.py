"""Field and label selectors, parsed from the query string and matched on objects."""
import re

from . import errors

_FIELD_TERM = re.compile(r"^([^=!]+?)\s*(==|=|!=)\s*(.*)$")


def field_value(obj, label):
    """The string kube-apiserver's GetAttrs puts in the fields.Set for label."""
    if label == "source":      # events: source.component, under a short label
        label = "source.component"
    cur = obj
    for part in label.split("."):
        if not isinstance(cur, dict):
            cur = None
            break
        cur = cur.get(part)
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


class FieldSelector:
    def __init__(self, terms=()):
        self.terms = list(terms)   # (label, op, value), op in "=", "!="

    @classmethod
    def parse(cls, text, resource):
        terms = []
        for raw in (text or "").split(","):
            raw = raw.strip()
            if not raw:
                continue
            m = _FIELD_TERM.match(raw)
            if not m:
                raise errors.bad_request(
                    f'unable to parse requirement: invalid selector: '
                    f"'{text}'; can't understand '{raw}'")
            label, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
            if label not in ("metadata.name", "metadata.namespace") \
                    and label not in resource.field_labels:
                raise errors.bad_request(f'field label not supported: {label}')
            terms.append((label, "!=" if op == "!=" else "=", value))
        return cls(terms)

    def matches(self, obj):
        for label, op, value in self.terms:
            if (field_value(obj, label) == value) != (op == "="):
                return False
        return True


def _split_top_level(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


_SET_TERM = re.compile(r"^([\w./-]+)\s+(in|notin)\s+\((.*)\)$")
_EQ_TERM = re.compile(r"^([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)$")
_EXISTS_TERM = re.compile(r"^(!?)\s*([\w./-]+)$")


class LabelSelector:
    def __init__(self, reqs=()):
        self.reqs = list(reqs)     # (key, op, set of values)

    @classmethod
    def parse(cls, text):
        reqs = []
        for term in _split_top_level(text or ""):
            m = _SET_TERM.match(term)
            if m:
                values = {v.strip() for v in m.group(3).split(",") if v.strip()}
                reqs.append((m.group(1), m.group(2), values))
                continue
            m = _EQ_TERM.match(term)
            if m:
                op = "!=" if m.group(2) == "!=" else "="
                reqs.append((m.group(1), op, {m.group(3)}))
                continue
            m = _EXISTS_TERM.match(term)
            if m:
                reqs.append((m.group(2), "!" if m.group(1) else "exists", set()))
                continue
            raise errors.bad_request(
                f"unable to parse requirement: found '{term}', expected: "
                f"in, notin, =, ==, !=, gt, lt")
        return cls(reqs)

    def matches(self, obj):
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for key, op, values in self.reqs:
            present = key in labels
            if op == "exists" and not present:
                return False
            if op == "!" and present:
                return False
            if op in ("=", "in") and labels.get(key) not in values:
                return False
            if op in ("!=", "notin") and present and labels[key] in values:
                return False
        return True
