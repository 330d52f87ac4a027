"""The PersistentVolume controller's binding of a claim to a PV, one step at
a time, so that a test can hold a PV and a claim in any state a real cluster
passes through (pkg/controller/volume/persistentvolume: bind() writes the
PV's claimRef with the claim's uid and the PV's phase first, then the claim's
volumeName, then the claim's phase)."""
import copy

# The states, in the order the controller reaches them.
STATES = (
    "Pending",      # the claim names the PV (its user pre-bound it); the PV is untouched
    "PVReserved",   # the PV's claimRef names the claim, without its uid (an admin's pre-binding)
    "PVBound",      # the PV's claimRef carries the claim's uid and the PV is Bound; the claim is Pending
    "Bound",        # the claim is Bound too: what kubelet mounts
)


def bind(api, namespace, claim, pv, state="Bound"):
    """Brings claim `namespace/claim` and PV `pv` to `state` of STATES;
    returns (claim, pv) as stored."""
    if state not in STATES:
        raise ValueError(f"binding state {state!r} is not one of {STATES}")
    step = STATES.index(state)
    c = copy.deepcopy(api.get("persistentvolumeclaims", namespace, claim))
    v = copy.deepcopy(api.get("persistentvolumes", None, pv))
    ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
           "namespace": c["metadata"]["namespace"], "name": claim}
    if step >= STATES.index("PVBound"):
        ref["uid"] = c["metadata"]["uid"]
        ref["resourceVersion"] = c["metadata"]["resourceVersion"]
    if step >= STATES.index("PVReserved"):
        v["spec"]["claimRef"] = ref
        v["status"] = {"phase": "Bound" if "uid" in ref else "Available"}
        v["metadata"].pop("resourceVersion", None)
        v = api.update(v)
    c["spec"]["volumeName"] = pv
    c["status"] = dict(c.get("status") or {})
    c["status"]["phase"] = "Bound" if state == "Bound" else "Pending"
    if state == "Bound":
        c["status"]["accessModes"] = v["spec"].get("accessModes", [])
        c["status"]["capacity"] = v["spec"].get("capacity", {})
    c["metadata"].pop("resourceVersion", None)
    return api.update(c), v
