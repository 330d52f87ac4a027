"""Checks of the fault storm that read the mock CSI driver's call log and the
fake API server's request log (see storm.py for the run itself).

The call log has one line per finished call (start time, duration, code, the
fault the driver applied, "client_gone" when kvolumed had stopped waiting for
the answer).  The driver serves at most one call per volume ID at a time (a
second one gets ABORTED), so the successful calls of one volume, in start
order, are the order in which their work happened.

A call is *clean* when its code is OK and kvolumed saw that answer (the
client had not gone, the answer came more than 2 s before the call's
deadline, and the driver did not crash within CRASH_MARGIN of logging it:
the reply may have died with the process).  Anything else (an error, a crash, an answer nobody
read) leaves kvolumed uncertain of the outcome, and one more call of the same
kind is then legitimate.  The rules, per volume ID and target path:

  duplicate publish    NodePublishVolume OK on a target already published
                       where the previous call on that target was a clean
                       NodePublishVolume: kvolumed published twice what it
                       knew was published.
  duplicate unpublish  NodeUnpublishVolume OK on a target not published where
                       the previous call on it was a clean NodeUnpublishVolume.
  duplicate stage      the same for NodeStageVolume of a volume ID.
  duplicate unstage    the same for NodeUnstageVolume (so every NodeStage is
                       matched by at most one NodeUnstage).
  unstage while published
                       NodeUnstageVolume OK while a target of the same volume
                       is published (from the log's own state: a publish whose
                       work happened, even if its answer was an error or lost).
  driver refusal       an answer the driver gave on its own (not injected)
                       other than OK: FAILED_PRECONDITION (publish before
                       stage), ALREADY_EXISTS (incompatible arguments),
                       INVALID_ARGUMENT, NOT_FOUND, INTERNAL, ... (ABORTED is
                       not counted: it is the driver's answer to a second call
                       for a volume with a hung call still in the driver)

The work of a call happened (for the log's state) when the code is OK, or the
injected error or crash came "after" the work.  A call in flight when another
call's injected crash ended the process is logged as lost (fault crash
"lost"): whether its work happened is unknown, so a teardown's is taken as
done and a set-up's as not (neither can then make a later call a duplicate,
the lost call being the previous one, not clean).  A call in flight when the
process was killed from outside is in no log: the first call of each volume
after such a kill is never a duplicate.
"""
import collections

NODE_OPS = ("NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume")


def _work_done(e):
    if e["code"] == "OK":
        return True
    fault = e.get("fault") or {}
    err = fault.get("error") or {}
    if e["code"] == "CRASH" and fault.get("crash") == "lost":
        return e["method"] in ("NodeUnstageVolume", "NodeUnpublishVolume")
    if e["code"] == "CRASH":
        return fault.get("crash") == "after"
    return bool(err) and err.get("when") == "after" and e["code"] == err.get("code")


def _injected(e):
    fault = e.get("fault") or {}
    err = fault.get("error") or {}
    return e["code"] == "CRASH" or (err and e["code"] == err.get("code"))


# An answer logged less than this long before its driver process crashed
# may never have been sent: the crash of another call ends the process
# between the log line and the reply.
CRASH_MARGIN = 1.0


def _clean(e, crashes):
    # deadline_left: answered so close to the deadline that kvolumed, whose
    # clock started first, may have given up on it already.
    if e["code"] != "OK" or e.get("client_gone") or "deadline_left" in e:
        return False
    crashed = crashes.get(e.get("pid"))
    return crashed is None or e["time"] + e.get("duration", 0) < crashed - CRASH_MARGIN


class CallAudit:
    """Fed the call log in batches (each batch complete: no call of it still
    running), keeps the per-volume state across batches."""

    def __init__(self):
        self.published = collections.defaultdict(set)   # vid -> targets
        self.staged = set()                             # vids
        self.last_target_call = {}                      # (vid, target) -> (method, clean)
        self.last_stage_call = {}                       # vid -> (method, clean)
        self.problems = collections.defaultdict(list)   # rule -> examples
        self.counts = collections.Counter()
        self.crashes = {}                               # driver pid -> time it crashed
        self.kills = []                                 # times a driver was killed from outside
        self.last_time = {}                             # (vid, target or "") -> time of its last call

    def _problem(self, rule, e, what):
        self.counts[rule] += 1
        if len(self.problems[rule]) < 5:
            self.problems[rule].append(f"{what} (call at {e['time']:.3f}, code {e['code']}, pid {e.get('pid')})")

    def feed(self, entries, killed=()):
        """killed: (pid, time) of driver processes ended from outside."""
        for e in entries:
            if e["code"] == "CRASH":
                self.crashes[e.get("pid")] = e["time"] + e.get("duration", 0)
        for pid, t in killed:
            self.crashes[pid] = t
            if t not in self.kills:
                self.kills.append(t)
        entries = sorted((e for e in entries if e["method"] in NODE_OPS), key=lambda e: e["time"])
        for e in entries:
            m, req = e["method"], e.get("request") or {}
            vid = req.get("volume_id", "")
            if e["code"] not in ("OK", "ABORTED", "CRASH") and not _injected(e) and \
                    not (e["code"] == "UNAVAILABLE" and "shutting down" in e.get("message", "")):
                self._problem("driver refusal", e, f"{m} {vid}: {e['code']} {e.get('message', '')[:160]}")
            done = _work_done(e)
            if m in ("NodePublishVolume", "NodeUnpublishVolume"):
                target = req.get("target_path", "")
                key = (vid, target)
                prev = self._previous(self.last_target_call, key, e)
                if m == "NodePublishVolume":
                    if e["code"] == "OK" and target in self.published[vid] and prev == (m, True):
                        self._problem("duplicate publish", e, f"{vid} at {target}")
                    if done:
                        self.published[vid].add(target)
                else:
                    if e["code"] == "OK" and target not in self.published[vid] and prev == (m, True):
                        self._problem("duplicate unpublish", e, f"{vid} at {target}")
                    if done:
                        self.published[vid].discard(target)
                if e["code"] != "ABORTED":
                    self.last_target_call[key] = (m, _clean(e, self.crashes))
                    self.last_time[key] = e["time"]
            else:
                prev = self._previous(self.last_stage_call, vid, e)
                if m == "NodeStageVolume":
                    if e["code"] == "OK" and vid in self.staged and prev == (m, True):
                        self._problem("duplicate stage", e, vid)
                    if done:
                        self.staged.add(vid)
                else:
                    if e["code"] == "OK" and self.published[vid]:
                        self._problem("unstage while published", e,
                                      f"{vid} still published at {sorted(self.published[vid])[:2]}")
                    if e["code"] == "OK" and vid not in self.staged and prev == (m, True):
                        self._problem("duplicate unstage", e, vid)
                    if done:
                        self.staged.discard(vid)
                if e["code"] != "ABORTED":
                    self.last_stage_call[vid] = (m, _clean(e, self.crashes))
                    self.last_time[vid] = e["time"]
            if not self.published[vid]:
                self.published.pop(vid, None)

    def _previous(self, last, key, e):
        """The previous call of key, (method, clean); unclean when the driver
        was killed from outside since (a call of key may have been lost)."""
        prev = last.get(key)
        since = self.last_time.get(key)
        if prev and since is not None and any(since < k < e["time"] for k in self.kills):
            return (prev[0], False)
        return prev

    RULES = ("duplicate publish", "duplicate unpublish", "duplicate stage", "duplicate unstage",
             "unstage while published", "driver refusal")


def call_figures(entries, t0, t1):
    """Counts of the node calls that started in [t0, t1)."""
    c = collections.Counter()
    for e in entries:
        if not t0 <= e["time"] < t1:
            continue
        m, fault = e["method"], e.get("fault") or {}
        if e["code"] == "OK" and not e.get("client_gone"):
            c[m + " ok"] += 1
        if fault.get("error") and e["code"] == fault["error"].get("code"):
            c["errors injected"] += 1
        if fault.get("hang"):
            c["hangs injected"] += 1
        if e["code"] == "CRASH":
            c["crashes"] += 1
        if e.get("client_gone"):
            c["answers after the client gave up"] += 1
        elif "deadline_left" in e:
            c["answers near the deadline"] += 1
        if e["code"] not in ("OK", "CRASH"):
            c["errors " + e["code"]] += 1
    return c


# --- the API server's request log ---------------------------------------------

def reflector_attempts_bound(seconds, initial=0.8, cap=30.0):
    """The most list/watch requests one informer can make in `seconds` when
    every one fails: client-go's reflector backoff (800 ms doubling to 30 s;
    the jitter only lengthens it), plus the request in flight when the window
    opens."""
    n, t, d = 1, 0.0, initial
    while t + d <= seconds:
        t += d
        n += 1
        d = min(2 * d, cap)
    return n + 1


def lookup_attempts_bound(seconds, initial=0.1, cap=3.2):
    """The same for one object's GETs (volume/state/watches.h: 100 ms doubling to
    3.2 s), plus one immediate refetch per pod event the node sees."""
    return reflector_attempts_bound(seconds, initial, cap)


def request_key(r):
    """("informer", collection path + selectors) for list and watch requests,
    ("get", path) for reads of one object, (method, path) for the rest."""
    q = r.get("query") or {}
    path = r["path"]
    if r["method"] == "GET":
        parts = [p for p in path.split("/") if p]
        # /api/v1/pods, /api/v1/nodes, /apis/storage.k8s.io/v1/csidrivers: collections
        collection = (parts[0] == "api" and len(parts) in (3, 5)) or (parts[0] == "apis" and len(parts) in (4, 6))
        if collection or q.get("watch") in ("1", "true"):
            sel = ",".join(f"{k}={q[k]}" for k in ("fieldSelector", "labelSelector") if q.get(k))
            return ("informer", path + ("?" + sel if sel else ""))
        return ("get", path)
    return (r["method"], path)


def api_figures(requests, t0, t1):
    """Requests that arrived in [t0, t1): total, per second, the most in one
    second, by status."""
    rs = [r for r in requests if t0 <= r["time"] < t1]
    per_second = collections.Counter(int(r["time"] - t0) for r in rs)
    status = collections.Counter(str(r.get("status")) for r in rs)
    span = max(t1 - t0, 1e-9)
    return {"requests": len(rs), "per_second": round(len(rs) / span, 2),
            "max_in_one_second": max(per_second.values(), default=0),
            "by_status": dict(sorted(status.items()))}


def check_backoff(requests, t0, t1, retry_after=None):
    """For a window where every request fails: no informer made more
    requests than the reflector's backoff allows, no object was read more
    often than the lookup backoff allows, and (with retry_after) no request
    to the same key came sooner than Retry-After after a 429 on it.
    Returns (problems, figures)."""
    rs = sorted((r for r in requests if t0 <= r["time"] < t1), key=lambda r: r["time"])
    by_key = collections.defaultdict(list)
    for r in rs:
        by_key[request_key(r)].append(r)
    span = t1 - t0
    problems, worst = [], {}
    for key, lst in by_key.items():
        kind = key[0]
        if kind == "informer":
            bound = reflector_attempts_bound(span)
        elif kind == "get":
            bound = lookup_attempts_bound(span)
        else:
            bound = None
        if bound is not None:
            w = worst.get(kind)
            if w is None or len(lst) > w[0]:
                worst[kind] = (len(lst), bound, key[1])
            if len(lst) > bound:
                problems.append(f"{len(lst)} requests to {key[1]} in {span:.0f} s, the backoff allows {bound}")
        if retry_after and kind in ("informer", "get"):
            for a, b in zip(lst, lst[1:]):
                if a.get("status") == 429 and b["time"] - a["time"] < retry_after - 0.05:
                    problems.append(f"{key[1]}: asked again {b['time'] - a['time']:.2f} s after a 429 "
                                    f"with Retry-After: {retry_after}")
                    break
    figures = {k: {"most": v[0], "bound": v[1], "path": v[2]} for k, v in worst.items()}
    return problems, figures
