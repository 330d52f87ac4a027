/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-event.h>

#include "k8s/informer.h"
#include "systemd/hashmap.h"
#include "systemd/log.h"
#include "systemd/validate.h"
#include "volume/state/watches.h"

typedef struct ObjectEntry {
        ObjectWatches *w;
        const K8sKind *kind;
        char *key; /* "Kind/namespace/name", for logs */
        char *namespace;
        char *name;

        bool answered;          /* obj holds an answer */
        void *obj;              /* the last answer; NULL: the object does not exist */

        K8sRequest *request;    /* the GET in flight */
        bool again;             /* refreshed while a GET was in flight: GET again after it */
        sd_event_source *timer; /* the next GET of an object not final, or after a failure */
        uint64_t delay_usec;    /* the backoff: 0 after a final answer */

        unsigned failures;            /* other GETs failed in a row */
        unsigned forbidden;           /* GETs refused (403) in a row */
        uint64_t forbidden_since_usec;
        bool forbidden_reported;      /* object_watches_get says -EACCES */
        char *error;                  /* why the last GET failed; NULL after a success */

        /* The epoch of its last lookup: a full pass's sweep keeps what it
         * looked up (the current epoch), a resync round's what was looked
         * up since the round began. */
        uint64_t marked;
        /* Who looked it up since the last full pass began (keys; values
         * unused): told of its changes.  NULL until someone asks. */
        Hashmap *askers;
        bool askers_unknown;    /* a lookup without an asker, or out of memory */

        /* A configMap or secret: after its first answer, a watch of that one
         * object by name (kubelet's watch-based manager; the Node authorizer
         * allows it for an object a pod of the node references).  Its
         * events make the entry GET the object again: what changed reaches
         * exactly the askers.  NULL: not started (yet). */
        K8sInformer *informer;
} ObjectEntry;

struct ObjectWatches {
        K8sClient *client;
        sd_event *event;
        Hashmap *entries; /* key → ObjectEntry */
        /* The entries not in their final state (key → ObjectEntry): what a
         * pod's event refreshes, without a walk over every object the node
         * uses (thousands of bound claims, PVs and attachments). */
        Hashmap *unsettled;
        Hashmap *refresh_due; /* key → ObjectEntry: to GET at the refresh source */
        Hashmap *by_asker;    /* asker → Hashmap of the keys of the entries it looked up */
        sd_event_source *refresh_source; /* runs the refreshes asked for in this iteration */
        uint64_t epoch;       /* begins with a full pass or a resync round */
        object_watches_changed_t changed;
        void *userdata;
};

static uint64_t now_usec(ObjectWatches *w) {
        uint64_t now = 0;
        (void) sd_event_now(w->event, CLOCK_MONOTONIC, &now);
        return now;
}

/* Whether the answer is what a volume waits for (a bound claim, a PV bound
 * to a claim, an attached VolumeAttachment): no need to look again while pods
 * use it. */
static bool watched_kind(const K8sKind *kind) {
        return kind == &k8s_kind_configmap || kind == &k8s_kind_secret;
}

static bool entry_final(const ObjectEntry *e) {
        /* A watched object, there or not: its watch says when that changes. */
        if (watched_kind(e->kind))
                return e->answered && e->informer && !e->forbidden_reported;
        if (!e->answered || !e->obj || e->forbidden_reported)
                return false;
        if (e->kind == &k8s_kind_pvc) {
                const K8sPersistentVolumeClaim *pvc = e->obj;
                return !isempty(pvc->volume_name) && streq_ptr(pvc->phase, "Bound");
        }
        if (e->kind == &k8s_kind_volume_attachment)
                return ((const K8sVolumeAttachment *) e->obj)->attached;
        /* A PV without a claimRef uid is not bound yet: the PV controller
         * writes the uid before it binds the claim, and the claim's pod
         * waits for it. */
        if (e->kind == &k8s_kind_pv)
                return !isempty(((const K8sPersistentVolume *) e->obj)->claim_uid);
        return true; /* anything else that exists */
}

/* Every typed object starts with its K8sMeta. */
static const K8sMeta *object_meta(const void *obj) {
        return obj;
}

static bool same_answer(const void *a, const void *b) {
        if (!a || !b)
                return a == b;
        const K8sMeta *ma = object_meta(a), *mb = object_meta(b);
        /* Without a resourceVersion nothing tells them apart: take it as new. */
        return ma->resource_version && streq_ptr(ma->resource_version, mb->resource_version) &&
               streq_ptr(ma->uid, mb->uid);
}

static void by_asker_clear(ObjectWatches *w) {
        const char *asker;
        void *keys;

        for (size_t i = 0; hashmap_iterate(w->by_asker, &i, &asker, &keys);) {
                hashmap_free(keys);
                (void) hashmap_remove(w->by_asker, asker);
        }
}

/* Keeps the set of unsettled entries in step after any change of e. */
static void entry_settle(ObjectEntry *e) {
        if (entry_final(e))
                (void) hashmap_remove(e->w->unsettled, e->key);
        else if (!hashmap_get(e->w->unsettled, e->key) && hashmap_put(e->w->unsettled, e->key, e, NULL) < 0)
                log_warning("Out of memory: %s may not be looked up again", e->key);
}

static void entry_free(ObjectEntry *e) {
        if (!e)
                return;
        if (e->key && e->w) {
                const char *asker;
                (void) hashmap_remove(e->w->unsettled, e->key);
                (void) hashmap_remove(e->w->refresh_due, e->key);
                for (size_t i = 0; e->askers && hashmap_iterate(e->askers, &i, &asker, NULL);) {
                        Hashmap *keys = hashmap_get(e->w->by_asker, asker);
                        (void) hashmap_remove(keys, e->key);
                        if (keys && hashmap_size(keys) == 0)
                                hashmap_free(hashmap_remove(e->w->by_asker, asker));
                }
        }
        k8s_request_cancel(e->request);
        if (e->informer)
                log_debug("No longer watching %s", e->key);
        k8s_informer_free(e->informer);
        sd_event_source_disable_unref(e->timer);
        if (e->obj)
                e->kind->free(e->obj);
        free(e->key);
        free(e->namespace);
        free(e->name);
        free(e->error);
        hashmap_free(e->askers);
        free(e);
}

/* Tells the manager an entry changed, naming who waits for it. */
static void entry_changed(ObjectEntry *e) {
        _cleanup_free_ const char **askers = NULL;
        size_t n = 0;
        const char *key;

        if (!e->askers_unknown && e->askers) {
                askers = calloc(hashmap_size(e->askers) + 1, sizeof *askers);
                for (size_t i = 0; askers && hashmap_iterate(e->askers, &i, &key, NULL);)
                        askers[n++] = key;
        }
        if (e->askers_unknown || (e->askers && !askers))
                e->w->changed(NULL, 0, e->w->userdata);
        else
                e->w->changed(askers, n, e->w->userdata);
}

static void entry_fetch(ObjectEntry *e);

static int on_retry_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        entry_fetch(userdata);
        return 0;
}

static void entry_schedule(ObjectEntry *e, uint64_t delay) {
        uint64_t when = now_usec(e->w) + delay;
        /* sd-event's default slack is 250 ms: far too much for a 100 ms step. */
        uint64_t accuracy = MAX(delay / 8, USEC_PER_MSEC);
        int r;

        if (!e->timer) {
                r = sd_event_add_time(e->w->event, &e->timer, CLOCK_MONOTONIC, when, accuracy, on_retry_timer, e);
                if (r < 0) {
                        log_warning_errno(r, "Cannot schedule the next GET of %s: %m", e->key);
                        return;
                }
        } else {
                (void) sd_event_source_set_time(e->timer, when);
                (void) sd_event_source_set_time_accuracy(e->timer, accuracy);
        }
        (void) sd_event_source_set_enabled(e->timer, SD_EVENT_ONESHOT);
}

static uint64_t next_delay(uint64_t delay) {
        return delay == 0 ? OBJECT_LOOKUP_RETRY_INITIAL_USEC : MIN(2 * delay, OBJECT_LOOKUP_RETRY_MAX_USEC);
}

/* A GET failed: keep the last answer, retry with the backoff.  Returns
 * whether what object_watches_get says changed. */
static bool entry_failed(ObjectEntry *e, const K8sResponse *resp, char *message, uint64_t now) {
        bool was_reported = e->forbidden_reported;

        free(e->error);
        e->error = message;
        if (resp && resp->error == 0 && resp->status == 403) {
                if (e->forbidden++ == 0)
                        e->forbidden_since_usec = now;
                /* The authorizer's graph lags behind new pods: a refusal is
                 * reported only when it persists. */
                if (e->forbidden >= OBJECT_LOOKUP_FORBIDDEN_ATTEMPTS &&
                    now - e->forbidden_since_usec >= OBJECT_LOOKUP_FORBIDDEN_USEC && !e->forbidden_reported) {
                        e->forbidden_reported = true;
                        log_warning("GET %s refused %u times in %" PRIu64 " ms, still retrying: %s", e->key,
                                    e->forbidden, (now - e->forbidden_since_usec) / USEC_PER_MSEC,
                                    strempty(e->error));
                } else
                        log_debug("GET %s refused (%u in a row): %s", e->key, e->forbidden, strempty(e->error));
        } else {
                e->forbidden = 0;
                e->forbidden_reported = false;
                /* The first failure of a series says what happened: an API
                 * server that is down must not flood the log once per object
                 * and retry. */
                if (e->failures++ == 0 && !(resp && k8s_response_unreachable(resp)))
                        log_warning("GET %s failed, retrying with backoff: %s", e->key, strempty(e->error));
                else
                        log_debug("GET %s failed (%u in a row): %s", e->key, e->failures, strempty(e->error));
        }
        e->delay_usec = next_delay(e->delay_usec);
        entry_schedule(e, MAX(e->delay_usec, resp ? resp->retry_after_usec : 0));
        entry_settle(e);
        return was_reported != e->forbidden_reported;
}


/* Any event of the watched object: GET it, and the answer tells the askers
 * when it differs (a deletion: 404, the object gone). */
static void on_watch_add(K8sInformer *i, const void *obj, void *userdata) {
        entry_fetch(userdata);
}

static void on_watch_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        entry_fetch(userdata);
}

static void on_watch_delete(K8sInformer *i, const void *old, void *userdata) {
        entry_fetch(userdata);
}

/* The watch began after the GET: what changed in between is read again. */
static void on_watch_synced(K8sInformer *i, void *userdata) {
        entry_fetch(userdata);
}

static void entry_watch(ObjectEntry *e) {
        static const K8sInformerHandlers handlers = {
                .on_add = on_watch_add,
                .on_update = on_watch_update,
                .on_delete = on_watch_delete,
                .on_synced = on_watch_synced,
        };
        int r;

        if (e->informer || !watched_kind(e->kind))
                return;
        r = e->kind == &k8s_kind_configmap
                    ? k8s_informer_new_configmap(e->w->client, e->namespace, e->name, &handlers, e, &e->informer)
                    : k8s_informer_new_secret(e->w->client, e->namespace, e->name, &handlers, e, &e->informer);
        if (r >= 0)
                r = k8s_informer_start(e->informer);
        if (r < 0) {
                e->informer = k8s_informer_free(e->informer);
                log_warning_errno(r, "Cannot watch %s, looking it up with GETs instead: %m", e->key);
                return;
        }
        log_debug("Watching %s by name", e->key);
}

static bool entry_answered(ObjectEntry *e, void *obj) {
        bool changed = !e->answered || e->forbidden_reported || !same_answer(e->obj, obj);

        if (e->obj)
                e->kind->free(e->obj);
        e->obj = obj;
        e->answered = true;
        if (e->failures > 0)
                log_info("GET %s answered again after %u failures", e->key, e->failures);
        e->failures = 0;
        e->forbidden = 0;
        e->forbidden_reported = false;
        e->error = mfree_str(e->error);
        entry_watch(e);
        if (entry_final(e)) {
                e->delay_usec = 0;
                (void) sd_event_source_set_enabled(e->timer, SD_EVENT_OFF);
        } else {
                /* Something moves (a claim just created, say): look soon. */
                e->delay_usec = changed ? OBJECT_LOOKUP_RETRY_INITIAL_USEC : next_delay(e->delay_usec);
                entry_schedule(e, e->delay_usec);
        }
        entry_settle(e);
        if (changed)
                log_debug("GET %s: %s", e->key, obj ? "changed" : "not found");
        return changed;
}

static void on_answer(K8sClient *c, const K8sResponse *resp, void *userdata) {
        ObjectEntry *e = userdata;
        ObjectWatches *w = e->w;
        uint64_t now = now_usec(w);
        K8sDecodeError err = {};
        void *obj = NULL;
        char *message = NULL;
        bool changed;
        int r;

        e->request = NULL;
        if (resp->error == 0 && resp->status == 200) {
                r = k8s_object_decode(e->kind, resp->body, resp->size, &obj, &err);
                if (r < 0 && asprintf(&message, "%s from API server %s does not decode: field %s: %s", e->key,
                                      k8s_client_server(c), strempty(err.field), strempty(err.problem)) < 0)
                        message = NULL;
                changed = r >= 0 ? entry_answered(e, obj) : entry_failed(e, resp, message, now);
        } else if (resp->error == 0 && resp->status == 404)
                changed = entry_answered(e, NULL);
        else {
                /* The server's own words for a refusal ("persistentvolumeclaims
                 * \"x\" is forbidden: ..."), they go into an Event. */
                if (resp->error == 0 && resp->status == 403)
                        message = k8s_status_message(resp->body, resp->size);
                if (!message && resp->message)
                        message = strdup(resp->message);
                changed = entry_failed(e, resp, message, now);
        }
        if (e->again) {
                e->again = false;
                /* After a failure the backoff's timer asks again, not sooner. */
                if (e->failures == 0)
                        entry_fetch(e);
        }
        if (changed)
                entry_changed(e);
}

static int object_path(const ObjectEntry *e, char **ret) {
        int n;

        if (e->kind->namespaced)
                n = asprintf(ret, "%s/namespaces/%s/%s/%s", e->kind->api_prefix, e->namespace, e->kind->plural,
                             e->name);
        else
                n = asprintf(ret, "%s/%s/%s", e->kind->api_prefix, e->kind->plural, e->name);
        return n < 0 ? -ENOMEM : 0;
}

/* GET now, or once more after the GET in flight (its answer may predate
 * what made us ask). */
static void entry_fetch(ObjectEntry *e) {
        _cleanup_free_ char *path = NULL;
        int r;

        (void) hashmap_remove(e->w->refresh_due, e->key);
        if (e->request) {
                e->again = true;
                return;
        }
        (void) sd_event_source_set_enabled(e->timer, SD_EVENT_OFF);
        /* k8s_get_object cannot be cancelled, and an entry dropped by a sweep
         * must never be called back: the request is ours. */
        r = object_path(e, &path);
        if (r >= 0)
                r = k8s_client_request(e->w->client, "GET", path, NULL, NULL, on_answer, e, &e->request);
        if (r < 0) {
                char *message = NULL;
                if (asprintf(&message, "cannot GET %s: %s", e->key, strerror(-r)) < 0)
                        message = NULL;
                /* Out of memory, most likely: the backoff gives it time. */
                if (entry_failed(e, NULL, message, now_usec(e->w)))
                        entry_changed(e);
        }
}

static int on_refresh(sd_event_source *s, void *userdata) {
        ObjectWatches *w = userdata;
        void *value;

        /* entry_fetch() removes the entry it is given from refresh_due:
         * the current one, which iterating allows. */
        for (size_t i = 0; hashmap_iterate(w->refresh_due, &i, NULL, &value);)
                entry_fetch(value);
        return 0;
}

int object_watches_new(K8sClient *client, object_watches_changed_t changed, void *userdata, ObjectWatches **ret) {
        _cleanup_(object_watches_freep) ObjectWatches *w = calloc(1, sizeof *w);
        int r;

        if (!w)
                return -ENOMEM;
        w->entries = hashmap_new();
        w->unsettled = hashmap_new();
        w->refresh_due = hashmap_new();
        w->by_asker = hashmap_new();
        if (!w->entries || !w->unsettled || !w->refresh_due || !w->by_asker)
                return -ENOMEM;
        w->client = client;
        w->event = k8s_client_event(client);
        w->changed = changed;
        w->userdata = userdata;
        r = sd_event_add_defer(w->event, &w->refresh_source, on_refresh, w);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(w->refresh_source, SD_EVENT_OFF);
        *ret = TAKE_PTR(w);
        return 0;
}

ObjectWatches *object_watches_free(ObjectWatches *w) {
        void *value;

        if (!w)
                return NULL;
        for (size_t i = 0; hashmap_iterate(w->entries, &i, NULL, &value);)
                entry_free(value);
        hashmap_free(w->entries);
        hashmap_free(w->unsettled);
        hashmap_free(w->refresh_due);
        by_asker_clear(w);
        hashmap_free(w->by_asker);
        sd_event_source_disable_unref(w->refresh_source);
        free(w);
        return NULL;
}

void object_watches_begin(ObjectWatches *w) {
        void *value;

        by_asker_clear(w);
        w->epoch++;
        for (size_t i = 0; hashmap_iterate(w->entries, &i, NULL, &value);) {
                ObjectEntry *e = value;
                e->askers = hashmap_free(e->askers);
                e->askers_unknown = false;
        }
}

void object_watches_forget_asker(ObjectWatches *w, const char *asker) {
        _cleanup_(hashmap_freep) Hashmap *keys = asker ? hashmap_remove(w->by_asker, asker) : NULL;
        const char *key;

        for (size_t i = 0; keys && hashmap_iterate(keys, &i, &key, NULL);) {
                ObjectEntry *e = hashmap_get(w->entries, key);
                if (!e || !e->askers || !hashmap_remove(e->askers, asker))
                        continue;
                /* A final answer is kept: it costs no GET, and a pod that
                 * wants the object and is not rebuilt yet (its event in the
                 * same iteration) must find it, not wait for a new first
                 * answer meanwhile (its volume not desired: unstaged). */
                if (hashmap_size(e->askers) > 0 || e->askers_unknown || entry_final(e))
                        continue;
                log_debug("No longer looking up %s: %s needs it no more", e->key, asker);
                hashmap_remove(w->entries, key);
                entry_free(e);
        }
}

static void sweep(ObjectWatches *w, uint64_t since) {
        const char *key;
        void *value;

        for (size_t i = 0; hashmap_iterate(w->entries, &i, &key, &value);) {
                ObjectEntry *e = value;
                if (e->marked >= since)
                        continue;
                log_debug("No longer looking up %s", key);
                hashmap_remove(w->entries, key);
                entry_free(e);
        }
}

void object_watches_sweep(ObjectWatches *w) {
        sweep(w, w->epoch);
}

size_t object_watches_count(ObjectWatches *w) {
        return hashmap_size(w->entries);
}

static void refresh_entry(ObjectWatches *w, ObjectEntry *e) {
        /* A GET the server failed (5xx, 429, no connection) waits for its
         * backoff and Retry-After: a pod event does not make the server any
         * better.  A 403 may be the graph's lag, which the event can end. */
        if (e->failures > 0 || hashmap_get(w->refresh_due, e->key))
                return;
        if (hashmap_put(w->refresh_due, e->key, e, NULL) < 0) {
                /* The backoff's timer asks again. */
                log_warning("Out of memory: %s is not looked up again at once", e->key);
                return;
        }
        /* A deferred source runs once per loop iteration however often it is
         * enabled: a burst of pod events costs one GET per object. */
        (void) sd_event_source_set_enabled(w->refresh_source, SD_EVENT_ONESHOT);
}

void object_watches_refresh(ObjectWatches *w, const K8sKind *kind) {
        void *value;

        /* A final answer stays so for as long as a pod uses the object (a
         * bound claim's volumeName cannot change, a claim in use cannot be
         * deleted): fetching every one again on each pod update would cost
         * pods × claims GETs. */
        for (size_t i = 0; hashmap_iterate(w->unsettled, &i, NULL, &value);) {
                ObjectEntry *e = value;
                if ((kind && e->kind != kind) || entry_final(e))
                        continue;
                refresh_entry(w, e);
        }
}

void object_watches_refresh_asker(ObjectWatches *w, const char *asker) {
        Hashmap *keys = asker ? hashmap_get(w->by_asker, asker) : NULL;
        void *value;

        for (size_t i = 0; keys && hashmap_iterate(keys, &i, NULL, &value);)
                refresh_entry(w, value);
}

uint64_t object_watches_round_begin(ObjectWatches *w) {
        return ++w->epoch;
}

void object_watches_round_sweep(ObjectWatches *w, uint64_t epoch) {
        void *value;

        sweep(w, epoch);
        /* What no asker is known for is not refreshed by its asker's
         * slice: the end of the round does it. */
        for (size_t i = 0; hashmap_iterate(w->entries, &i, NULL, &value);) {
                ObjectEntry *e = value;
                if (e->askers_unknown)
                        refresh_entry(w, e);
        }
}

static int entry_key(const K8sKind *kind, const char *namespace, const char *name, char **ret) {
        return asprintf(ret, "%s/%s/%s", kind->kind, strempty(namespace), name) < 0 ? -ENOMEM : 0;
}

static int entry_new(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name, char *key,
                     ObjectEntry **ret) {
        ObjectEntry *e;
        int r;

        /* Names go into the request's path; only well-formed ones are asked for. */
        if (validate_dns1123_subdomain(name) < 0 || (kind->namespaced && validate_dns1123_label(namespace) < 0))
                return -EINVAL;
        e = calloc(1, sizeof *e);
        if (!e)
                return -ENOMEM;
        *e = (ObjectEntry){ .w = w, .kind = kind, .key = key };
        if (strdup_or_null(namespace, &e->namespace) < 0 || !(e->name = strdup(name))) {
                e->key = NULL;
                entry_free(e);
                return -ENOMEM;
        }
        r = hashmap_put(w->entries, key, e, NULL);
        if (r < 0) {
                e->key = NULL;
                entry_free(e);
                return r;
        }
        log_debug("Looking up %s", key);
        entry_settle(e);
        entry_fetch(e);
        *ret = e;
        return 0;
}

static ObjectEntry *entry_find(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name) {
        _cleanup_free_ char *key = NULL;

        if (entry_key(kind, namespace, name, &key) < 0)
                return NULL;
        return hashmap_get(w->entries, key);
}

/* Remembers who asked, both ways; should that fail, a change concerns
 * anyone and the entry is never forgotten for an asker. */
static void entry_note_asker(ObjectEntry *e, const char *asker) {
        Hashmap *keys;

        if (!asker) {
                e->askers_unknown = true;
                return;
        }
        if (e->askers_unknown || (e->askers && hashmap_get(e->askers, asker)))
                return;
        if (!e->askers)
                e->askers = hashmap_new();
        keys = hashmap_get(e->w->by_asker, asker);
        if (!keys && (keys = hashmap_new()) && hashmap_put(e->w->by_asker, asker, keys, NULL) < 0)
                keys = hashmap_free(keys);
        if (!e->askers || !keys || hashmap_put(keys, e->key, e, NULL) < 0 ||
            hashmap_put(e->askers, asker, e, NULL) < 0)
                e->askers_unknown = true;
}

int object_watches_get(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name,
                       const char *asker, const void **ret) {
        char *key = NULL;
        ObjectEntry *e;
        int r;

        *ret = NULL;
        r = entry_key(kind, namespace, name, &key);
        if (r < 0)
                return r;
        e = hashmap_get(w->entries, key);
        if (e)
                free(key);
        else {
                r = entry_new(w, kind, namespace, name, key, &e);
                if (r < 0) {
                        free(key);
                        return r;
                }
        }
        e->marked = w->epoch;
        entry_note_asker(e, asker);
        if (e->forbidden_reported)
                return -EACCES;
        if (!e->answered)
                return -EAGAIN;
        *ret = e->obj;
        return 0;
}

const char *object_watches_error(ObjectWatches *w, const K8sKind *kind, const char *namespace, const char *name) {
        ObjectEntry *e = entry_find(w, kind, namespace, name);
        return e ? e->error : NULL;
}
