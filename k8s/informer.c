/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "k8s/backoff.h"
#include "k8s/informer.h"
#include "k8s/json-stream.h"
#include "k8s/json.h"
#include "k8s/store.h"
#include "systemd/log.h"
#include "systemd/trace.h"
#include "systemd/validate.h"

#define DEFAULT_PAGE_SIZE 500u
#define DEFAULT_MIN_WATCH_TIMEOUT (5 * USEC_PER_MINUTE)
/* A watch that ends this soon without delivering anything is retried with
 * backoff, not at once, so a server that closes every watch is not hammered. */
#define SHORT_WATCH (1 * USEC_PER_SEC)

typedef enum Next {
        NEXT_LIST,
        NEXT_WATCH,
} Next;

typedef struct PendingEvent {
        struct PendingEvent *next;
        uint64_t received_usec; /* test_trace_now(): 0 outside the bench */
        size_t size;
        char text[];
} PendingEvent;

struct K8sInformer {
        K8sClient *client;
        const K8sKind *kind;
        K8sInformerHandlers handlers;
        void *userdata;
        char *namespace, *field_selector, *label_selector;
        char *last_error; /* the error last logged as a warning; NULL once it works again */
        unsigned page_size;
        uint64_t min_watch_timeout_usec;
        int (*filter)(const void *obj, const char **ret_field);

        K8sStore *store;
        char *resource_version;
        bool synced;
        bool started;

        /* listing */
        K8sRequest *list_request;
        void **list_items;
        size_t n_list_items, list_items_alloc;
        char **list_keep;   /* store keys of listed objects that did not decode */
        size_t n_list_keep;
        char *list_continue;
        bool list_after_gone;

        /* watching */
        K8sRequest *watch_request;
        K8sJsonStream stream;
        int stream_error; /* why we aborted the watch from on_data */
        PendingEvent *pending_head, *pending_tail;
        sd_event_source *defer;
        uint64_t watch_started_usec;
        unsigned watch_events;

        K8sBackoff backoff;
        sd_event_source *retry_timer;
        Next next;

        unsigned busy; /* nesting of our callbacks; free is deferred while > 0 */
        bool free_requested;
        K8sInformerStats stats;
};

static void informer_watch(K8sInformer *i);
static void informer_list(K8sInformer *i, bool after_gone);

static uint64_t now_usec(K8sInformer *i) {
        uint64_t t = 0;
        (void) sd_event_now(k8s_client_event(i->client), CLOCK_MONOTONIC, &t);
        return t;
}

static void describe_raw(const cJSON *obj, char *buf, size_t size) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
        const cJSON *ns = cJSON_GetObjectItemCaseSensitive(md, "namespace");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(md, "name");
        snprintf(buf, size, "%s%s%s", cJSON_IsString(ns) ? ns->valuestring : "", cJSON_IsString(ns) ? "/" : "",
                 cJSON_IsString(name) ? name->valuestring : "(unnamed)");
}

/* metadata.namespace and .name of an object that did not decode, read raw. */
static int raw_name(const cJSON *obj, const char **ret_namespace, const char **ret_name) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
        const cJSON *ns = cJSON_GetObjectItemCaseSensitive(md, "namespace");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(md, "name");

        if (!cJSON_IsString(name) || isempty(name->valuestring))
                return -EBADMSG;
        *ret_namespace = cJSON_IsString(ns) ? ns->valuestring : NULL;
        *ret_name = name->valuestring;
        return 0;
}

/* Decodes one object; NULL (with one log line) when it does not decode or
 * the filter rejects it.  *ret_unreadable (optional) tells the first case:
 * the object exists, but this version of it cannot be used. */
static void *informer_decode(K8sInformer *i, const cJSON *obj, bool *ret_unreadable) {
        K8sDecodeError err = {};
        void *o = NULL;
        char what[300];
        const char *field = NULL;
        int r;

        if (ret_unreadable)
                *ret_unreadable = false;
        r = i->kind->decode(obj, &o, &err);
        if (r < 0) {
                describe_raw(obj, what, sizeof what);
                i->stats.skipped++;
                if (ret_unreadable)
                        *ret_unreadable = r == -EBADMSG;
                if (r == -EBADMSG)
                        log_fields(LOG_WARNING, &((LogFields) { .object = what }),
                                   "Skipping %s %s: field %s: %s", i->kind->kind, what, err.field,
                                   strempty(err.problem));
                else
                        log_warning_errno(r, "Skipping %s %s: %m", i->kind->kind, what);
                return NULL;
        }
        if (i->filter && i->filter(o, &field) < 0) {
                describe_raw(obj, what, sizeof what);
                i->stats.skipped++;
                log_fields(LOG_WARNING, &((LogFields) { .object = what }),
                           "Skipping %s %s: field %s is not safe to use", i->kind->kind, what, strempty(field));
                i->kind->free(o);
                return NULL;
        }
        return o;
}

static void informer_destroy(K8sInformer *i);

static void busy_enter(K8sInformer *i) {
        i->busy++;
}

/* Returns true when the informer is gone. */
static bool busy_leave(K8sInformer *i) {
        if (--i->busy == 0 && i->free_requested) {
                informer_destroy(i);
                return true;
        }
        return false;
}

static void report_error(K8sInformer *i, int error, long status, const char *message) {
        K8sResponse resp = { .error = error, .status = status };

        i->stats.errors++;
        /* The client said once that the server is unreachable; an answer
         * that refuses is said once until another one comes: one line per
         * change, not per retry. */
        if (k8s_response_unreachable(&resp) || streq_ptr(i->last_error, message))
                log_debug("%s informer: %s", i->kind->kind, strempty(message));
        else {
                log_warning("%s informer: %s", i->kind->kind, strempty(message));
                (void) free_and_strdup(&i->last_error, message);
        }
        if (i->handlers.on_error && !i->free_requested)
                i->handlers.on_error(i, error, status, message, i->userdata);
}

static void deliver(K8sInformer *i, K8sDeltaType type, const void *old, const void *new) {
        if (i->free_requested)
                return;
        switch (type) {
        case K8S_DELTA_ADD:
                if (i->handlers.on_add)
                        i->handlers.on_add(i, new, i->userdata);
                break;
        case K8S_DELTA_UPDATE:
                if (i->handlers.on_update)
                        i->handlers.on_update(i, old, new, i->userdata);
                break;
        case K8S_DELTA_DELETE:
                if (i->handlers.on_delete)
                        i->handlers.on_delete(i, old, i->userdata);
                break;
        }
}

/* --- scheduling -------------------------------------------------------------- */

static int on_retry_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        K8sInformer *i = userdata;

        busy_enter(i);
        if (i->next == NEXT_LIST)
                informer_list(i, i->list_after_gone);
        else
                informer_watch(i);
        (void) busy_leave(i);
        return 0;
}

static void schedule(K8sInformer *i, Next next, uint64_t delay_usec) {
        i->next = next;
        if (sd_event_source_set_time(i->retry_timer, now_usec(i) + delay_usec) < 0 ||
            sd_event_source_set_enabled(i->retry_timer, SD_EVENT_ONESHOT) < 0)
                log_error("%s informer: cannot arm its retry timer", i->kind->kind);
}

static void schedule_backoff(K8sInformer *i, Next next, uint64_t retry_after_usec) {
        uint64_t d = k8s_backoff_next(&i->backoff, k8s_random01());
        /* 429 and 503 say when to come back; never sooner. */
        if (retry_after_usec > d)
                d = retry_after_usec;
        log_debug("%s informer: retrying %s in %.1fs", i->kind->kind, next == NEXT_LIST ? "list" : "watch",
                  (double) d / 1e6);
        schedule(i, next, d);
}

/* --- list -------------------------------------------------------------------- */

static int append_query(char **path, const char *name, const char *value) {
        _cleanup_free_ char *esc = k8s_escape(value);
        char *p;

        if (!esc)
                return -ENOMEM;
        if (asprintf(&p, "%s%c%s=%s", *path, strchr(*path, '?') ? '&' : '?', name, esc) < 0)
                return -ENOMEM;
        free(*path);
        *path = p;
        return 0;
}

static int collection_path(K8sInformer *i, char **ret) {
        char *p;

        if (i->namespace && i->kind->namespaced) {
                if (asprintf(&p, "%s/namespaces/%s/%s", i->kind->api_prefix, i->namespace, i->kind->plural) < 0)
                        return -ENOMEM;
        } else if (asprintf(&p, "%s/%s", i->kind->api_prefix, i->kind->plural) < 0)
                return -ENOMEM;
        if ((i->field_selector && append_query(&p, "fieldSelector", i->field_selector) < 0) ||
            (i->label_selector && append_query(&p, "labelSelector", i->label_selector) < 0)) {
                free(p);
                return -ENOMEM;
        }
        *ret = p;
        return 0;
}

static void list_items_clear(K8sInformer *i) {
        for (size_t k = 0; k < i->n_list_items; k++)
                i->kind->free(i->list_items[k]);
        free(i->list_items);
        i->list_items = NULL;
        i->n_list_items = i->list_items_alloc = 0;
        i->list_continue = mfree_str(i->list_continue);
        for (size_t k = 0; k < i->n_list_keep; k++)
                free(i->list_keep[k]);
        free(i->list_keep);
        i->list_keep = NULL;
        i->n_list_keep = 0;
}

/* A listed object that did not decode keeps its last good version. */
static int list_keep_push(K8sInformer *i, const cJSON *obj) {
        const char *namespace, *name;
        char **p, *key;

        if (raw_name(obj, &namespace, &name) < 0)
                return 0; /* nameless: it cannot be in the store either */
        key = k8s_store_key(i->store, namespace, name);
        if (!key)
                return -ENOMEM;
        p = realloc(i->list_keep, (i->n_list_keep + 2) * sizeof *p);
        if (!p) {
                free(key);
                return -ENOMEM;
        }
        i->list_keep = p;
        i->list_keep[i->n_list_keep++] = key;
        i->list_keep[i->n_list_keep] = NULL;
        return 0;
}

static int list_items_push(K8sInformer *i, void *o) {
        if (i->n_list_items == i->list_items_alloc) {
                size_t a = MAX(i->list_items_alloc * 2, (size_t) 64);
                void **p = realloc(i->list_items, a * sizeof *p);
                if (!p)
                        return -ENOMEM;
                i->list_items = p;
                i->list_items_alloc = a;
        }
        i->list_items[i->n_list_items++] = o;
        return 0;
}

static void list_page(K8sInformer *i);

static void list_finish(K8sInformer *i, const char *rv) {
        K8sDelta *deltas = NULL;
        size_t n = 0;
        void **items = i->list_items;
        size_t n_items = i->n_list_items;
        bool first = !i->synced;
        int r;

        i->list_items = NULL;
        i->n_list_items = i->list_items_alloc = 0;
        r = k8s_store_replace(i->store, items, n_items, i->list_keep, &deltas, &n);
        list_items_clear(i);
        if (r < 0) {
                report_error(i, r, 0, "out of memory while applying a list");
                schedule_backoff(i, NEXT_LIST, 0);
                return;
        }
        if (free_and_strdup(&i->resource_version, rv) < 0) {
                k8s_deltas_free(i->kind, deltas, n);
                schedule_backoff(i, NEXT_LIST, 0);
                return;
        }
        i->stats.lists++;
        k8s_backoff_reset(&i->backoff);
        i->last_error = mfree_str(i->last_error);
        log_debug("%s informer: listed %zu objects at resourceVersion %s, %zu changes", i->kind->kind, n_items,
                  rv, n);
        for (size_t k = 0; k < n; k++)
                deliver(i, deltas[k].type, deltas[k].old, deltas[k].new);
        k8s_deltas_free(i->kind, deltas, n);
        i->synced = true;
        if (first && i->handlers.on_synced && !i->free_requested)
                i->handlers.on_synced(i, i->userdata);
        if (!i->free_requested)
                informer_watch(i);
}

static void on_list_page(K8sClient *c, const K8sResponse *resp, void *userdata) {
        K8sInformer *i = userdata;
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        const cJSON *md, *items, *rv, *cont, *e;

        i->list_request = NULL;
        busy_enter(i);
        if (resp->error < 0 || resp->status != 200) {
                /* An expired continue token: start the list over. */
                if (resp->status == 410 && i->list_continue) {
                        log_info("%s informer: list continuation expired, listing again", i->kind->kind);
                        list_items_clear(i);
                        list_page(i);
                        goto out;
                }
                report_error(i, resp->error, resp->status, resp->message);
                list_items_clear(i);
                schedule_backoff(i, NEXT_LIST, resp->retry_after_usec);
                goto out;
        }
        j = cJSON_ParseWithLength(resp->body, resp->size);
        md = cJSON_GetObjectItemCaseSensitive(j, "metadata");
        items = cJSON_GetObjectItemCaseSensitive(j, "items");
        rv = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
        cont = cJSON_GetObjectItemCaseSensitive(md, "continue");
        if (!j || !cJSON_IsString(rv) || !(cJSON_IsArray(items) || cJSON_IsNull(items) || !items)) {
                report_error(i, -EBADMSG, resp->status, "list answer is not a valid List object");
                list_items_clear(i);
                schedule_backoff(i, NEXT_LIST, 0);
                goto out;
        }
        cJSON_ArrayForEach(e, items) {
                bool unreadable;
                void *o = informer_decode(i, e, &unreadable);
                if ((o && list_items_push(i, o) < 0) || (!o && unreadable && list_keep_push(i, e) < 0)) {
                        if (o)
                                i->kind->free(o);
                        report_error(i, -ENOMEM, 0, "out of memory while listing");
                        list_items_clear(i);
                        schedule_backoff(i, NEXT_LIST, 0);
                        goto out;
                }
        }
        if (cJSON_IsString(cont) && !isempty(cont->valuestring)) {
                if (free_and_strdup(&i->list_continue, cont->valuestring) < 0) {
                        list_items_clear(i);
                        schedule_backoff(i, NEXT_LIST, 0);
                        goto out;
                }
                list_page(i);
                goto out;
        }
        i->list_continue = mfree_str(i->list_continue);
        list_finish(i, rv->valuestring);
out:
        (void) busy_leave(i);
}

static void list_page(K8sInformer *i) {
        _cleanup_free_ char *path = NULL;
        char limit[32];
        int r;

        r = collection_path(i, &path);
        if (r >= 0) {
                snprintf(limit, sizeof limit, "%u", i->page_size);
                r = append_query(&path, "limit", limit);
        }
        if (r >= 0 && i->list_continue)
                r = append_query(&path, "continue", i->list_continue);
        if (r >= 0)
                r = k8s_client_request(i->client, "GET", path, NULL, NULL, on_list_page, i, &i->list_request);
        if (r < 0) {
                report_error(i, r, 0, "cannot start a list request");
                list_items_clear(i);
                schedule_backoff(i, NEXT_LIST, 0);
        }
}

static void informer_list(K8sInformer *i, bool after_gone) {
        list_items_clear(i);
        i->list_after_gone = after_gone;
        if (after_gone)
                i->stats.relists_gone++;
        list_page(i);
}

/* --- watch ------------------------------------------------------------------ */

static void pending_clear(K8sInformer *i) {
        while (i->pending_head) {
                PendingEvent *p = i->pending_head;
                i->pending_head = p->next;
                free(p);
        }
        i->pending_tail = NULL;
        if (i->defer)
                (void) sd_event_source_set_enabled(i->defer, SD_EVENT_OFF);
}

static int on_stream_object(const char *text, size_t size, void *userdata) {
        K8sInformer *i = userdata;
        PendingEvent *p = malloc(sizeof *p + size + 1);

        if (!p)
                return -ENOMEM;
        p->next = NULL;
        p->received_usec = test_trace_now();
        p->size = size;
        memcpy(p->text, text, size);
        p->text[size] = '\0';
        if (i->pending_tail)
                i->pending_tail->next = p;
        else
                i->pending_head = p;
        i->pending_tail = p;
        return 0;
}

/* Inside libcurl's write callback: only split and queue, handlers run later
 * from the loop where they may start or stop requests. */
static int on_watch_data(K8sClient *c, const char *data, size_t size, void *userdata) {
        K8sInformer *i = userdata;
        int r = k8s_json_stream_feed(&i->stream, data, size, on_stream_object, i);

        if (r < 0) {
                i->stream_error = r;
                return r;
        }
        if (i->pending_head)
                (void) sd_event_source_set_enabled(i->defer, SD_EVENT_ONESHOT);
        return 0;
}

static void watch_stop(K8sInformer *i) {
        k8s_request_cancel(TAKE_PTR(i->watch_request));
        k8s_json_stream_reset(&i->stream);
        i->stream_error = 0;
        pending_clear(i);
}

static void set_rv_from(K8sInformer *i, const cJSON *obj) {
        const cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
        const cJSON *rv = cJSON_GetObjectItemCaseSensitive(md, "resourceVersion");
        if (cJSON_IsString(rv) && !isempty(rv->valuestring))
                (void) free_and_strdup(&i->resource_version, rv->valuestring);
}

/* Applies one watch event.  Returns <0 when the watch must be dropped
 * (invalid event, ERROR): the informer has then scheduled what comes next. */
static int apply_event(K8sInformer *i, const char *text, size_t size, uint64_t received_usec) {
        uint64_t dispatched_usec = test_trace_now();
        _cleanup_(cJSON_Deletep) cJSON *j = cJSON_ParseWithLength(text, size);
        uint64_t parsed_usec = test_trace_now();
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        const cJSON *obj = cJSON_GetObjectItemCaseSensitive(j, "object");
        const char *t;

        if (!j || !cJSON_IsString(type) || !cJSON_IsObject(obj)) {
                log_warning("%s informer: watch event is not valid JSON or has no type/object, restarting the watch",
                            i->kind->kind);
                watch_stop(i);
                schedule_backoff(i, NEXT_WATCH, 0);
                return -EBADMSG;
        }
        t = type->valuestring;
        i->watch_events++;
        k8s_backoff_reset(&i->backoff);
        i->last_error = mfree_str(i->last_error);

        if (streq(t, "BOOKMARK")) {
                set_rv_from(i, obj);
                return 0;
        }
        if (streq(t, "ERROR")) {
                const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "code");
                const cJSON *msg = cJSON_GetObjectItemCaseSensitive(obj, "message");
                long status = cJSON_IsNumber(code) ? (long) code->valuedouble : 0;
                watch_stop(i);
                if (status == 410) {
                        log_info("%s informer: watch from resourceVersion %s expired (%s), relisting", i->kind->kind,
                                 strempty(i->resource_version), cJSON_IsString(msg) ? msg->valuestring : "410 Gone");
                        informer_list(i, true);
                        return -ESTALE;
                }
                _cleanup_free_ char *m = NULL;
                if (asprintf(&m, "watch of %s on API server %s ended with an error %ld: %s", i->kind->plural,
                             k8s_client_server(i->client), status,
                             cJSON_IsString(msg) ? msg->valuestring : "(no message)") < 0)
                        m = NULL;
                report_error(i, -EIO, status, m);
                schedule_backoff(i, NEXT_WATCH, 0);
                return -EIO;
        }

        bool added = streq(t, "ADDED"), modified = streq(t, "MODIFIED"), deleted = streq(t, "DELETED");
        if (!added && !modified && !deleted) {
                log_warning("%s informer: ignoring watch event of unknown type \"%s\"", i->kind->kind, t);
                return 0;
        }
        set_rv_from(i, obj);
        bool unreadable;
        void *o = informer_decode(i, obj, &unreadable);
        void *old = NULL;
        if (!o && deleted && unreadable) {
                /* Gone is gone, readable or not: its name is enough. */
                const char *namespace, *name;
                if (raw_name(obj, &namespace, &name) >= 0) {
                        k8s_store_remove(i->store, namespace, name, &old);
                        if (old) {
                                deliver(i, K8S_DELTA_DELETE, old, NULL);
                                i->kind->free(old);
                        }
                }
                return 0;
        }
        if (!o)
                return 0; /* an unreadable update: the last good version stays */
        const K8sMeta *m = o;
        if (added) {
                test_trace_at(received_usec, "received", m->uid);
                test_trace_at(dispatched_usec, "dispatched", m->uid);
                test_trace_at(parsed_usec, "parsed", m->uid);
                test_trace("decoded", m->uid);
        }
        if (deleted) {
                k8s_store_remove(i->store, m->namespace, m->name, &old);
                i->kind->free(o);
                if (old) {
                        deliver(i, K8S_DELTA_DELETE, old, NULL);
                        i->kind->free(old);
                }
                return 0;
        }
        if (k8s_store_put(i->store, o, &old) < 0) {
                i->kind->free(o);
                report_error(i, -ENOMEM, 0, "out of memory while applying a watch event");
                return 0;
        }
        if (!old)
                deliver(i, K8S_DELTA_ADD, NULL, o);
        else if (!streq_ptr(((K8sMeta *) old)->uid, m->uid)) {
                /* Deleted and created again under the same name while the
                 * watch missed the deletion: two events for the layer above. */
                deliver(i, K8S_DELTA_DELETE, old, NULL);
                deliver(i, K8S_DELTA_ADD, NULL, o);
        } else
                deliver(i, K8S_DELTA_UPDATE, old, o);
        if (old)
                i->kind->free(old);
        return 0;
}

/* Runs the queued events; stops early when the watch was dropped. */
static void dispatch_pending(K8sInformer *i) {
        while (i->pending_head && !i->free_requested) {
                PendingEvent *p = i->pending_head;
                i->pending_head = p->next;
                if (!i->pending_head)
                        i->pending_tail = NULL;
                int r = apply_event(i, p->text, p->size, p->received_usec);
                free(p);
                if (r < 0)
                        break;
        }
}

static int on_defer(sd_event_source *s, void *userdata) {
        K8sInformer *i = userdata;

        busy_enter(i);
        dispatch_pending(i);
        (void) busy_leave(i);
        return 0;
}

static void on_watch_done(K8sClient *c, const K8sResponse *resp, void *userdata) {
        K8sInformer *i = userdata;
        bool short_watch;

        i->watch_request = NULL;
        busy_enter(i);
        /* What arrived before the end counts: apply it first. */
        dispatch_pending(i);
        if (i->free_requested || i->watch_request || i->list_request ||
            sd_event_source_get_enabled(i->retry_timer, NULL) > 0)
                goto out; /* an event already decided what comes next */

        short_watch = now_usec(i) - i->watch_started_usec < SHORT_WATCH && i->watch_events == 0;
        if (i->stream_error < 0) {
                log_warning("%s informer: dropping the watch: %s", i->kind->kind,
                            i->stream_error == -EFBIG ? "an event is larger than 16 MiB"
                            : i->stream_error == -EBADMSG ? "the stream is not JSON"
                                                          : strerror(-i->stream_error));
                k8s_json_stream_reset(&i->stream);
                i->stream_error = 0;
                schedule_backoff(i, NEXT_WATCH, 0);
        } else if (resp->error == 0 && resp->status == 200) {
                k8s_json_stream_reset(&i->stream);
                /* The normal end of a watch (timeoutSeconds) or a dropped connection: resume. */
                if (short_watch)
                        schedule_backoff(i, NEXT_WATCH, 0);
                else
                        informer_watch(i);
        } else if (resp->error == 0 && resp->status == 410) {
                k8s_json_stream_reset(&i->stream);
                log_info("%s informer: watch answered 410 Gone, relisting", i->kind->kind);
                informer_list(i, true);
        } else {
                k8s_json_stream_reset(&i->stream);
                /* A connection that breaks mid-stream after events is routine (the
                 * server restarted, a proxy timed out): resume without an error. */
                if (resp->error < 0 && !short_watch && i->watch_events > 0) {
                        log_info("%s informer: watch connection lost (%s), resuming from resourceVersion %s",
                                 i->kind->kind, strempty(resp->message), strempty(i->resource_version));
                        informer_watch(i);
                } else {
                        report_error(i, resp->error, resp->status, resp->message);
                        schedule_backoff(i, NEXT_WATCH, resp->retry_after_usec);
                }
        }
out:
        (void) busy_leave(i);
}

static void informer_watch(K8sInformer *i) {
        _cleanup_free_ char *path = NULL;
        uint64_t timeout;
        char buf[32];
        int r;

        watch_stop(i);
        /* client-go: a random timeout in [min, 2·min) spreads the reconnects. */
        timeout = i->min_watch_timeout_usec + (uint64_t) ((double) i->min_watch_timeout_usec * k8s_random01());
        r = collection_path(i, &path);
        if (r >= 0)
                r = append_query(&path, "watch", "1");
        if (r >= 0)
                r = append_query(&path, "allowWatchBookmarks", "true");
        if (r >= 0)
                r = append_query(&path, "resourceVersion", i->resource_version);
        if (r >= 0) {
                snprintf(buf, sizeof buf, "%" PRIu64, MAX(timeout / USEC_PER_SEC, (uint64_t) 1));
                r = append_query(&path, "timeoutSeconds", buf);
        }
        /* curl's own limit is a safety net behind the server's timeoutSeconds. */
        if (r >= 0)
                r = k8s_client_watch(i->client, path, timeout + 30 * USEC_PER_SEC, on_watch_data, on_watch_done, i,
                                     &i->watch_request);
        if (r < 0) {
                report_error(i, r, 0, "cannot start a watch request");
                schedule_backoff(i, NEXT_WATCH, 0);
                return;
        }
        i->stats.watches++;
        i->watch_started_usec = now_usec(i);
        i->watch_events = 0;
}

/* --- life cycle ------------------------------------------------------------- */

int k8s_informer_new(K8sClient *c, const K8sKind *kind, const K8sInformerOptions *o,
                     const K8sInformerHandlers *handlers, void *userdata, K8sInformer **ret) {
        static const K8sInformerOptions no_options = {};
        K8sInformer *i;
        int r;

        if (!o)
                o = &no_options;
        i = calloc(1, sizeof *i);
        if (!i)
                return -ENOMEM;
        i->client = c;
        i->kind = kind;
        if (handlers)
                i->handlers = *handlers;
        i->userdata = userdata;
        i->page_size = o->page_size ?: DEFAULT_PAGE_SIZE;
        i->min_watch_timeout_usec = o->min_watch_timeout_usec ?: DEFAULT_MIN_WATCH_TIMEOUT;
        i->filter = o->filter;
        i->backoff = K8S_BACKOFF_REFLECTOR;
        k8s_json_stream_init(&i->stream, K8S_MAX_WATCH_EVENT);
        if ((o->namespace && !(i->namespace = strdup(o->namespace))) ||
            (o->field_selector && !(i->field_selector = strdup(o->field_selector))) ||
            (o->label_selector && !(i->label_selector = strdup(o->label_selector)))) {
                r = -ENOMEM;
                goto fail;
        }
        r = k8s_store_new(kind, &i->store);
        if (r < 0)
                goto fail;
        r = sd_event_add_time(k8s_client_event(c), &i->retry_timer, CLOCK_MONOTONIC, 0, USEC_PER_MSEC, on_retry_timer, i);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_enabled(i->retry_timer, SD_EVENT_OFF);
        r = sd_event_add_defer(k8s_client_event(c), &i->defer, on_defer, i);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_enabled(i->defer, SD_EVENT_OFF);
        *ret = i;
        return 0;
fail:
        informer_destroy(i);
        return r;
}

int k8s_informer_start(K8sInformer *i) {
        if (i->started)
                return -EALREADY;
        i->started = true;
        schedule(i, NEXT_LIST, 0);
        return 0;
}

static void informer_destroy(K8sInformer *i) {
        watch_stop(i);
        k8s_request_cancel(TAKE_PTR(i->list_request));
        list_items_clear(i);
        k8s_json_stream_done(&i->stream);
        sd_event_source_disable_unref(i->retry_timer);
        sd_event_source_disable_unref(i->defer);
        k8s_store_free(i->store);
        free(i->resource_version);
        free(i->namespace);
        free(i->last_error);
        free(i->field_selector);
        free(i->label_selector);
        free(i);
}

K8sInformer *k8s_informer_free(K8sInformer *i) {
        if (!i)
                return NULL;
        if (i->busy > 0) {
                /* Called from a handler: stop now, free when the handler returns. */
                i->free_requested = true;
                watch_stop(i);
                k8s_request_cancel(TAKE_PTR(i->list_request));
                (void) sd_event_source_set_enabled(i->retry_timer, SD_EVENT_OFF);
                return NULL;
        }
        informer_destroy(i);
        return NULL;
}

const K8sKind *k8s_informer_kind(K8sInformer *i) {
        return i->kind;
}

bool k8s_informer_synced(K8sInformer *i) {
        return i->synced;
}

const char *k8s_informer_resource_version(K8sInformer *i) {
        return i->resource_version;
}

size_t k8s_informer_size(K8sInformer *i) {
        return k8s_store_size(i->store);
}

const void *k8s_informer_get(K8sInformer *i, const char *namespace, const char *name) {
        return k8s_store_get(i->store, namespace, name);
}

const void *k8s_informer_next(K8sInformer *i, size_t *cursor) {
        return k8s_store_next(i->store, cursor);
}

void k8s_informer_get_stats(K8sInformer *i, K8sInformerStats *ret) {
        *ret = i->stats;
}

void *k8s_informer_userdata(K8sInformer *i) {
        return i->userdata;
}

/* --- the informers kvolumed runs --------------------------------------------- */

/* Only what the store itself cannot hold safely is refused here; the names
 * that become paths are the volume manager's to check, so that it can tell
 * the pod's owner with an Event instead of the pod silently not existing. */
static int pod_filter(const void *obj, const char **ret_field) {
        const K8sPod *p = obj;
        if (validate_uid(p->meta.uid) < 0) {
                *ret_field = "metadata.uid";
                return -EINVAL;
        }
        return 0;
}

static int new_with_selector(K8sClient *c, const K8sKind *kind, const char *field, const char *value,
                             int (*filter)(const void *, const char **), const K8sInformerHandlers *h,
                             void *userdata, K8sInformer **ret) {
        _cleanup_free_ char *sel = NULL;

        if (field && asprintf(&sel, "%s=%s", field, value) < 0)
                return -ENOMEM;
        return k8s_informer_new(c, kind, &(K8sInformerOptions) { .field_selector = sel, .filter = filter }, h,
                                userdata, ret);
}

int k8s_informer_new_pods_on_node(K8sClient *c, const char *node, const K8sInformerHandlers *h, void *userdata,
                                  K8sInformer **ret) {
        if (validate_dns1123_subdomain(node) < 0)
                return -EINVAL;
        return new_with_selector(c, &k8s_kind_pod, "spec.nodeName", node, pod_filter, h, userdata, ret);
}

int k8s_informer_new_csidrivers(K8sClient *c, const K8sInformerHandlers *h, void *userdata, K8sInformer **ret) {
        return new_with_selector(c, &k8s_kind_csidriver, NULL, NULL, NULL, h, userdata, ret);
}

int k8s_informer_new_node(K8sClient *c, const char *node, const K8sInformerHandlers *h, void *userdata,
                          K8sInformer **ret) {
        if (validate_dns1123_subdomain(node) < 0)
                return -EINVAL;
        return new_with_selector(c, &k8s_kind_node, "metadata.name", node, NULL, h, userdata, ret);
}

int k8s_informer_new_volume_attachment(K8sClient *c, const char *name, const K8sInformerHandlers *h,
                                       void *userdata, K8sInformer **ret) {
        if (validate_dns1123_subdomain(name) < 0)
                return -EINVAL;
        return new_with_selector(c, &k8s_kind_volume_attachment, "metadata.name", name, NULL, h, userdata, ret);
}

/* One object by name: a list and watch with fieldSelector metadata.name=<n>,
 * the only list or watch the Node authorizer allows a node on configMaps
 * and secrets. */
int k8s_informer_new_by_name(K8sClient *c, const K8sKind *kind, const char *namespace, const char *name,
                             const K8sInformerHandlers *h, void *userdata, K8sInformer **ret) {
        _cleanup_free_ char *sel = NULL;

        if (!kind || kind->namespaced != !!namespace)
                return -EINVAL;
        if (namespace && validate_dns1123_label(namespace) < 0)
                return -EINVAL;
        if (validate_dns1123_subdomain(name) < 0)
                return -EINVAL;
        if (asprintf(&sel, "metadata.name=%s", name) < 0)
                return -ENOMEM;
        return k8s_informer_new(c, kind,
                                &(K8sInformerOptions) { .namespace = namespace, .field_selector = sel }, h,
                                userdata, ret);
}

int k8s_informer_new_configmap(K8sClient *c, const char *namespace, const char *name, const K8sInformerHandlers *h,
                               void *userdata, K8sInformer **ret) {
        return k8s_informer_new_by_name(c, &k8s_kind_configmap, namespace, name, h, userdata, ret);
}

int k8s_informer_new_secret(K8sClient *c, const char *namespace, const char *name, const K8sInformerHandlers *h,
                            void *userdata, K8sInformer **ret) {
        return k8s_informer_new_by_name(c, &k8s_kind_secret, namespace, name, h, userdata, ret);
}
