/* SPDX-License-Identifier: Apache-2.0 */
/* What an operator sees of the volume manager: /volumes, one JSON object
 * with the counters of the status line and every volume the manager tracks
 * (its driver, handle, attach, stage and publish state, what is uncertain,
 * the last error and when it is retried, whether its file system answers),
 * plus the pods' volumes that wait for something before any volume exists.
 * Built from memory only: serving it touches no file system and makes no
 * request, so a hung mount or a slow API server cannot stall it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "volume/host/paths.h"
#include "volume/internal.h"

static uint64_t clock_usec(clockid_t id) {
        struct timespec ts;
        (void) clock_gettime(id, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* RFC 3339 with milliseconds, UTC, as the API server writes microtimes. */
static cJSON *time_json(uint64_t realtime_usec) {
        char buf[64], date[40];
        time_t sec = (time_t) (realtime_usec / USEC_PER_SEC);
        struct tm tm;

        if (realtime_usec == 0 || !gmtime_r(&sec, &tm) ||
            strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
                return cJSON_CreateNull();
        snprintf(buf, sizeof buf, "%s.%03uZ", date, (unsigned) (realtime_usec % USEC_PER_SEC / 1000));
        return cJSON_CreateString(buf);
}

/* The loop's monotonic timestamps, shown as wall-clock times. */
typedef struct Clocks {
        uint64_t monotonic, realtime;
} Clocks;

static cJSON *monotonic_json(const Clocks *c, uint64_t monotonic_usec) {
        if (monotonic_usec == 0 || monotonic_usec == UINT64_MAX)
                return cJSON_CreateNull();
        if (monotonic_usec <= c->monotonic)
                return time_json(c->realtime - MIN(c->realtime, c->monotonic - monotonic_usec));
        return time_json(c->realtime + (monotonic_usec - c->monotonic));
}

static cJSON *path_json(VolumeManager *m, const char *rel) {
        _cleanup_free_ char *abs = NULL;
        if (!rel || asprintf(&abs, "%s/%s", m->root->path, rel) < 0)
                return cJSON_CreateNull();
        return cJSON_CreateString(abs);
}

static const char *stage_state_name(StageState s) {
        return s == STAGE_DONE ? "done" : s == STAGE_UNCERTAIN ? "uncertain" : "none";
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/* A hashmap's keys, sorted: the output is stable from one request to the next. */
static const char **sorted_keys(const Hashmap *h, size_t *ret_n) {
        const char **keys = calloc(hashmap_size(h) + 1, sizeof *keys);
        size_t n = 0;
        const char *key;

        if (!keys)
                return NULL;
        for (size_t i = 0; hashmap_iterate(h, &i, &key, NULL);)
                keys[n++] = key;
        qsort(keys, n, sizeof *keys, cmp_str);
        *ret_n = n;
        return keys;
}

static cJSON *attach_json(VolumeManager *m, const Clocks *c, const ActualVolume *av) {
        cJSON *o = cJSON_CreateObject();
        bool required =
                av->lifecycle == VOLUME_PERSISTENT &&
                (av->attachable || (av->kind->attachable && av->kind->attachable(m, av)));

        cJSON_AddBoolToObject(o, "required", required);
        if (required)
                cJSON_AddBoolToObject(o, "attached", manager_node_lists_attached(m, av->unique_name));
        else
                cJSON_AddNullToObject(o, "attached");
        cJSON_AddItemToObject(o, "waiting_since", monotonic_json(c, av->attach_wait_since));
        return o;
}

static cJSON *stage_json(VolumeManager *m, const ActualVolume *av) {
        _cleanup_free_ char *rel = NULL;
        cJSON *o = cJSON_CreateObject();

        cJSON_AddStringToObject(o, "state", stage_state_name(av->stage));
        if (av->lifecycle == VOLUME_PERSISTENT)
                (void) av->kind->paths(av, true, NULL, NULL, NULL, &rel);
        cJSON_AddItemToObject(o, "path", path_json(m, rel));
        cJSON_AddBoolToObject(o, "mount", av->stage == STAGE_DONE && av->staged_mount);
        cJSON_AddBoolToObject(o, "stale", av->stage_stale);
        return o;
}

static cJSON *publishes_json(VolumeManager *m, const ActualVolume *av, bool *uncertain) {
        _cleanup_free_ const char **keys = NULL;
        cJSON *a = cJSON_CreateArray();
        size_t n = 0;

        keys = sorted_keys(av->publishes, &n);
        for (size_t i = 0; keys && i < n; i++) {
                const ActualPublish *pub = hashmap_get(av->publishes, keys[i]);
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "pod_uid", pub->pod_uid);
                cJSON_AddStringToObject(o, "pod", pub->pod_key);
                cJSON_AddStringToObject(o, "volume", pub->spec_name);
                cJSON_AddStringToObject(o, "state", pub->state == PUBLISH_DONE ? "done" : "uncertain");
                cJSON_AddItemToObject(o, "path", path_json(m, pub->target));
                cJSON_AddBoolToObject(o, "mount", !pub->not_a_mount);
                cJSON_AddBoolToObject(o, "stale", pub->stale);
                const char *why = runtime_gate_reason(m->runtime, pub->pod_uid);
                if (why)
                        cJSON_AddStringToObject(o, "teardown_waits", why);
                cJSON_AddItemToArray(a, o);
                *uncertain = *uncertain || pub->state == PUBLISH_UNCERTAIN;
        }
        return a;
}

/* Whether a backoff ("<kind>/<pod UID>") is one the reconciler will retry:
 * a stage or unstage; a publish for a pod still wanting volumes; an
 * unpublish of a publish still there.  A pod deleted after its publish
 * failed leaves a backoff behind that nobody retries: not "failing". */
static bool backoff_live(VolumeManager *m, const ActualVolume *av, const char *key) {
        const char *slash = strchr(key, '/');
        const char *uid = slash ? slash + 1 : "";
        PodEntry *e;

        if (isempty(uid))
                return true;
        if (strncmp(key, "unpublish/", strlen("unpublish/")) == 0)
                return hashmap_get(av->publishes, uid) != NULL;
        e = hashmap_get(m->pod_entries, uid);
        return e && e->desired;
}

bool describe_volume_failing(VolumeManager *m, const ActualVolume *av) {
        const char *key;
        void *value;

        for (size_t i = 0; hashmap_iterate(av->backoffs, &i, &key, &value);)
                if (((const Backoff *) value)->last_error_usec != 0 && backoff_live(m, av, key))
                        return true;
        return false;
}

/* The backoffs of the volume's failed operations ("<kind>/<pod UID>"): each
 * with when it may run again; the earliest is the volume's next retry. */
static cJSON *retries_json(VolumeManager *m, const Clocks *c, const ActualVolume *av, uint64_t *ret_next) {
        _cleanup_free_ const char **keys = NULL;
        cJSON *a = cJSON_CreateArray();
        uint64_t next = UINT64_MAX;
        size_t n = 0;

        keys = sorted_keys(av->backoffs, &n);
        for (size_t i = 0; keys && i < n; i++) {
                const Backoff *b = hashmap_get(av->backoffs, keys[i]);
                const char *slash = strchr(keys[i], '/');
                _cleanup_free_ char *kind = NULL;
                cJSON *o;

                if (b->last_error_usec == 0 || !backoff_live(m, av, keys[i]))
                        continue;
                kind = slash ? strndup(keys[i], slash - keys[i]) : strdup(keys[i]);
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "operation", strempty(kind));
                if (slash && slash[1])
                        cJSON_AddStringToObject(o, "pod_uid", slash + 1);
                else
                        cJSON_AddNullToObject(o, "pod_uid");
                cJSON_AddItemToObject(o, "at", monotonic_json(c, backoff_next_try(b)));
                cJSON_AddNumberToObject(o, "backoff_seconds", (double) b->duration_usec / USEC_PER_SEC);
                cJSON_AddItemToArray(a, o);
                next = MIN(next, backoff_next_try(b));
        }
        *ret_next = next;
        return a;
}

static cJSON *volume_json(VolumeManager *m, const Clocks *c, const ActualVolume *av) {
        cJSON *o = cJSON_CreateObject(), *err;
        bool uncertain = av->stage == STAGE_UNCERTAIN;
        uint64_t next_retry;

        cJSON_AddStringToObject(o, "unique_name", av->unique_name);
        cJSON_AddStringToObject(o, "kind", av->kind->name);
        cJSON_AddStringToObject(o, "name", av->spec_name);
        cJSON_AddStringToObject(o, "driver", av->driver);
        cJSON_AddStringToObject(o, "handle", av->handle);
        cJSON_AddStringToObject(o, "lifecycle",
                                av->lifecycle == VOLUME_EPHEMERAL ? "ephemeral" : "persistent");
        cJSON_AddStringToObject(o, "mode", av->block ? "block" : "filesystem");
        cJSON_AddBoolToObject(o, "wanted", av->desired);
        cJSON_AddBoolToObject(o, "reconstructed", av->reconstructed);
        /* What a volume waits for before its FailedMount is due (reconciler.c). */
        cJSON_AddItemToObject(o, "driver_waiting_since",
                              monotonic_json(c, av->driver_wait_since != 0 && av->kind->available &&
                                                                !av->kind->available(m, av)
                                                        ? av->driver_wait_since
                                                        : 0));
        cJSON_AddItemToObject(o, "attach", attach_json(m, c, av));
        cJSON_AddItemToObject(o, "stage", stage_json(m, av));
        /* What only the kind knows of it. */
        if (av->kind->describe)
                (void) av->kind->describe(av, o);
        cJSON_AddItemToObject(o, "publishes", publishes_json(m, av, &uncertain));
        cJSON_AddBoolToObject(o, "uncertain", uncertain);
        /* The last error while something of the volume still fails. */
        if (av->last_error && describe_volume_failing(m, av)) {
                err = cJSON_AddObjectToObject(o, "last_error");
                cJSON_AddStringToObject(err, "message", av->last_error);
                cJSON_AddStringToObject(err, "operation", op_kind_to_string(av->last_error_op));
                if (av->last_error_pod)
                        cJSON_AddStringToObject(err, "pod_uid", av->last_error_pod);
                else
                        cJSON_AddNullToObject(err, "pod_uid");
                cJSON_AddItemToObject(err, "at", time_json(av->last_error_at));
        } else
                cJSON_AddNullToObject(o, "last_error");
        cJSON_AddItemToObject(o, "retries", retries_json(m, c, av, &next_retry));
        cJSON_AddItemToObject(o, "next_retry", monotonic_json(c, next_retry));
        cJSON_AddBoolToObject(o, "unresponsive", av->unresponsive_since != 0);
        cJSON_AddItemToObject(o, "unresponsive_since", time_json(av->unresponsive_since));
        return o;
}

/* A pod's volume that has no volume on the node yet, and why: its claim is
 * not bound, its driver is missing, its lifecycle mode is refused... */
static void add_pending(PodEntry *e, cJSON *pending) {
        const DesiredPod *p = e->desired;

        for (size_t v = 0; p && v < p->n_volumes; v++) {
                const DesiredVolume *dv = &p->volumes[v];
                const char *reported = hashmap_get(e->reported, dv->name);
                const char *why = dv->failed ?: dv->waiting ?: reported;
                cJSON *o;

                if (dv->spec && !reported)
                        continue;
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "pod_uid", p->uid);
                cJSON_AddStringToObject(o, "pod", p->key);
                cJSON_AddStringToObject(o, "volume", dv->name);
                if (dv->spec)
                        cJSON_AddStringToObject(o, "unique_name", dv->spec->unique_name);
                cJSON_AddStringToObject(o, "state",
                                        dv->failed ? "failed"
                                        : dv->spec ? "reported"
                                                   : "waiting");
                if (why)
                        cJSON_AddStringToObject(o, "message", why);
                else
                        cJSON_AddNullToObject(o, "message");
                cJSON_AddItemToArray(pending, o);
        }
}

/* Every pod volume on the node in the one vocabulary, as kvolumed_volumes
 * counts them: each volume a pod wants (found from the pod's desired state,
 * whether or not anything of it exists yet), then each publish no pod wants
 * any more. */
static void add_pod_volumes(VolumeManager *m, const char **uids, size_t n_pods, const char **names, size_t n,
                            cJSON *a) {
        for (size_t i = 0; i < n_pods; i++) {
                const PodEntry *e = hashmap_get(m->pod_entries, uids[i]);
                for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                        const DesiredVolume *dv = &e->desired->volumes[v];
                        const ActualVolume *av = dv->spec ? hashmap_get(m->volumes, dv->spec->unique_name) : NULL;
                        const ActualPublish *pub = av ? hashmap_get(av->publishes, e->uid) : NULL;
                        PodVolumeStatus st;
                        cJSON *o = cJSON_CreateObject();

                        describe_pod_volume(m, e, dv, &st);
                        cJSON_AddStringToObject(o, "pod_uid", e->uid);
                        cJSON_AddStringToObject(o, "pod", e->desired->key);
                        cJSON_AddStringToObject(o, "volume", dv->name);
                        cJSON_AddItemToObject(o, "unique_name", dv->spec ? cJSON_CreateString(dv->spec->unique_name)
                                                                        : cJSON_CreateNull());
                        cJSON_AddItemToObject(o, "kind", dv->spec ? cJSON_CreateString(dv->spec->kind->name)
                                                                 : cJSON_CreateNull());
                        cJSON_AddItemToObject(o, "driver", dv->spec && dv->spec->driver
                                                                   ? cJSON_CreateString(dv->spec->driver)
                                                                   : cJSON_CreateNull());
                        cJSON_AddStringToObject(o, "state", pod_volume_state_to_string(st.state));
                        cJSON_AddItemToObject(o, "reason", st.failure != POD_VOLUME_FAILURE_NONE
                                                                   ? cJSON_CreateString(pod_volume_failure_to_string(
                                                                             st.failure))
                                                                   : cJSON_CreateNull());
                        cJSON_AddItemToObject(o, "message",
                                              st.reason ? cJSON_CreateString(st.reason) : cJSON_CreateNull());
                        cJSON_AddItemToObject(o, "path", path_json(m, pub ? pub->target : NULL));
                        cJSON_AddItemToArray(a, o);
                }
        }
        for (size_t i = 0; i < n; i++) {
                const ActualVolume *av = hashmap_get(m->volumes, names[i]);
                _cleanup_free_ const char **keys = NULL;
                size_t n_pubs = 0;

                keys = sorted_keys(av->publishes, &n_pubs);
                for (size_t j = 0; keys && j < n_pubs; j++) {
                        const ActualPublish *pub = hashmap_get(av->publishes, keys[j]);
                        const char *why = runtime_gate_reason(m->runtime, pub->pod_uid);
                        cJSON *o;

                        if (!describe_publish_tearing_down(m, av, pub))
                                continue;
                        o = cJSON_CreateObject();
                        cJSON_AddStringToObject(o, "pod_uid", pub->pod_uid);
                        cJSON_AddStringToObject(o, "pod", pub->pod_key);
                        cJSON_AddStringToObject(o, "volume", pub->spec_name);
                        cJSON_AddStringToObject(o, "unique_name", av->unique_name);
                        cJSON_AddStringToObject(o, "kind", av->kind->name);
                        cJSON_AddItemToObject(o, "driver",
                                              av->driver ? cJSON_CreateString(av->driver) : cJSON_CreateNull());
                        cJSON_AddStringToObject(o, "state", pod_volume_state_to_string(POD_VOLUME_TEARING_DOWN));
                        cJSON_AddNullToObject(o, "reason");
                        cJSON_AddStringToObject(o, "message",
                                                why ?: av->last_error && describe_volume_failing(m, av)
                                                               ? av->last_error
                                                               : "the pod no longer wants it");
                        cJSON_AddItemToObject(o, "path", path_json(m, pub->target));
                        cJSON_AddItemToArray(a, o);
                }
        }
}

int volume_manager_describe_json(VolumeManager *m, char **ret) {
        _cleanup_free_ const char **names = NULL, **uids = NULL;
        VolumeManagerStats st = {};
        Clocks c = {};
        cJSON *root, *volumes, *pending;
        size_t n = 0, n_pods = 0;
        char *text;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &c.monotonic);
        c.realtime = clock_usec(CLOCK_REALTIME);
        c.monotonic = c.monotonic ?: clock_usec(CLOCK_MONOTONIC);
        volume_manager_get_counts(m, &st); /* the counts STATUS= and the metrics show */

        root = cJSON_CreateObject();
        if (!root)
                return -ENOMEM;
        cJSON_AddStringToObject(root, "node", m->node_name);
        cJSON_AddBoolToObject(root, "synced", volume_manager_synced(m));
        /* Where the mount table comes from: "kernel" or "mountinfo". */
        cJSON_AddStringToObject(root, "mount_source", mount_table_source(m->mounts));
        /* The counters first, as the status line and kvolumed_volumes have them. */
        cJSON_AddNumberToObject(root, "pods", st.pods);
        cJSON_AddNumberToObject(root, "desired", st.desired);
        cJSON_AddNumberToObject(root, "waiting", st.waiting);
        cJSON_AddNumberToObject(root, "published", st.published);
        cJSON_AddNumberToObject(root, "uncertain", st.uncertain);
        cJSON_AddNumberToObject(root, "staged", st.staged);
        cJSON_AddNumberToObject(root, "running", st.running);
        cJSON_AddNumberToObject(root, "heldBack", st.held_back);
        cJSON_AddNumberToObject(root, "visited", (double) st.visited);
        /* Stages and publishes waiting for the mount table read that tells
         * whether they made a mount: 0 once it ran. */
        cJSON_AddNumberToObject(root, "mounts_pending", st.mounts_pending);
        /* Mount points under root-dir as of the last change the manager saw. */
        cJSON_AddNumberToObject(root, "mounts_seen", st.mounts_seen);
        cJSON_AddNumberToObject(root, "waiting_for_attach", st.attach_waiting);
        cJSON_AddNumberToObject(root, "failing", st.failing);
        cJSON_AddNumberToObject(root, "unresponsive", st.unresponsive);
        /* The pod volumes by state: kvolumed_volumes{state}, the entries of pod_volumes. */
        cJSON *states = cJSON_AddObjectToObject(root, "states");
        for (PodVolumeState i = 0; states && i < _POD_VOLUME_STATE_MAX; i++)
                cJSON_AddNumberToObject(states, pod_volume_state_to_string(i), st.by_state[i]);

        volumes = cJSON_AddArrayToObject(root, "volumes");
        names = sorted_keys(m->volumes, &n);
        for (size_t i = 0; volumes && names && i < n; i++)
                cJSON_AddItemToArray(volumes, volume_json(m, &c, hashmap_get(m->volumes, names[i])));
        pending = cJSON_AddArrayToObject(root, "pending");
        uids = sorted_keys(m->pod_entries, &n_pods);
        for (size_t i = 0; pending && uids && i < n_pods; i++)
                add_pending(hashmap_get(m->pod_entries, uids[i]), pending);

        cJSON *pod_volumes = cJSON_AddArrayToObject(root, "pod_volumes");
        if (pod_volumes && names && uids)
                add_pod_volumes(m, uids, n_pods, names, n, pod_volumes);

        text = volumes && pending && pod_volumes && names && uids ? cJSON_PrintUnformatted(root) : NULL;
        cJSON_Delete(root);
        if (!text)
                return -ENOMEM;
        *ret = text;
        return 0;
}

void describe_note_outcome(VolumeManager *m, const Operation *op, bool success) {
        ActualVolume *av = op->av;

        (void) m;
        if (success) {
                /* A stage or publish that worked reached its file system. */
                if (op->kind == OP_STAGE || op->kind == OP_PUBLISH)
                        actual_volume_set_unresponsive(av, 0);
                /* The error stays shown while another operation of it still fails. */
                if (hashmap_size(av->backoffs) == 0) {
                        av->last_error = mfree_str(av->last_error);
                        av->last_error_pod = mfree_str(av->last_error_pod);
                        av->last_error_at = 0;
                }
                return;
        }
        if (op->unresponsive && av->unresponsive_since == 0)
                actual_volume_set_unresponsive(av, clock_usec(CLOCK_REALTIME));
        (void) free_and_strdup(&av->last_error, op->message ?: "unknown error");
        (void) free_and_strdup(&av->last_error_pod, op->pod.uid);
        av->last_error_op = op->kind;
        /* kubelet's isFinalError: a call that was made and failed without
         * leaving the volume uncertain (a timeout, UNAVAILABLE...). */
        av->last_error_final = (op->called && !op->uncertain) || op->final;
        av->last_error_at = clock_usec(CLOCK_REALTIME);
}
