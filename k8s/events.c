/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "k8s/events.h"
#include "k8s/json.h"
#include "k8s/ratelimit.h"
#include "systemd/log.h"
#include "systemd/validate.h"

typedef struct Seen {
        char *key; /* object + type + reason + message */
        char *name;
        unsigned count;
        uint64_t first_usec, last_usec;
} Seen;

typedef struct Spam {
        char *key; /* source + object */
        K8sTokenBucket bucket;
        uint64_t last_usec;
} Spam;

/* Small linear caches, bounded like client-go's LRUs; events are rare. */
struct K8sEventCache {
        Seen seen[K8S_EVENT_CACHE_MAX];
        size_t n_seen;
        Spam spam[K8S_EVENT_CACHE_MAX];
        size_t n_spam;
};

int k8s_event_cache_new(K8sEventCache **ret) {
        *ret = calloc(1, sizeof **ret);
        return *ret ? 0 : -ENOMEM;
}

K8sEventCache *k8s_event_cache_free(K8sEventCache *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_seen; i++) {
                free(c->seen[i].key);
                free(c->seen[i].name);
        }
        for (size_t i = 0; i < c->n_spam; i++)
                free(c->spam[i].key);
        free(c);
        return NULL;
}

static Spam *spam_get(K8sEventCache *c, const char *key, uint64_t now) {
        size_t victim = 0;

        for (size_t i = 0; i < c->n_spam; i++) {
                if (streq(c->spam[i].key, key))
                        return &c->spam[i];
                if (c->spam[i].last_usec < c->spam[victim].last_usec)
                        victim = i;
        }
        char *k = strdup(key);
        if (!k)
                return NULL;
        if (c->n_spam < K8S_EVENT_CACHE_MAX)
                victim = c->n_spam++;
        else
                free(c->spam[victim].key);
        c->spam[victim] = (Spam) { .key = k, .last_usec = now };
        k8s_token_bucket_init(&c->spam[victim].bucket, 1e6 / (double) K8S_EVENT_SPAM_REFILL, K8S_EVENT_SPAM_BURST, now);
        return &c->spam[victim];
}

K8sEventAction k8s_event_cache_decide(K8sEventCache *c, const K8sObjectRef *obj, const char *type,
                                      const char *reason, const char *message, uint64_t now,
                                      K8sEventDecision *ret) {
        _cleanup_free_ char *obj_key = NULL, *key = NULL;
        Spam *spam;
        size_t victim = 0;

        *ret = (K8sEventDecision) { .action = K8S_EVENT_DROP };
        if (asprintf(&obj_key, "%s\x1f%s\x1f%s\x1f%s\x1f%s", strempty(obj->kind), strempty(obj->namespace),
                     strempty(obj->name), strempty(obj->uid), strempty(obj->api_version)) < 0)
                return K8S_EVENT_DROP;
        spam = spam_get(c, obj_key, now);
        if (!spam || !k8s_token_bucket_take(&spam->bucket, now))
                return K8S_EVENT_DROP;
        spam->last_usec = now;

        if (asprintf(&key, "%s\x1f%s\x1f%s\x1f%s", obj_key, strempty(type), strempty(reason), strempty(message)) < 0)
                return K8S_EVENT_DROP;
        for (size_t i = 0; i < c->n_seen; i++) {
                Seen *s = &c->seen[i];
                if (streq(s->key, key) && now - s->last_usec <= K8S_EVENT_AGGREGATE_WINDOW && s->last_usec <= now) {
                        s->count++;
                        s->last_usec = now;
                        *ret = (K8sEventDecision) { .action = K8S_EVENT_PATCH, .count = s->count,
                                                    .first_usec = s->first_usec };
                        snprintf(ret->name, sizeof ret->name, "%s", s->name);
                        return K8S_EVENT_PATCH;
                }
                if (streq(s->key, key) || s->last_usec < c->seen[victim].last_usec)
                        victim = i;
        }
        /* client-go names events "<object>.<unix nanoseconds in hex>". */
        snprintf(ret->name, sizeof ret->name, "%.200s.%llx", strempty(obj->name),
                 (unsigned long long) now * 1000ULL);
        char *name = strdup(ret->name);
        if (!name)
                return K8S_EVENT_DROP;
        Seen *s = NULL;
        for (size_t i = 0; i < c->n_seen; i++)
                if (streq(c->seen[i].key, key))
                        s = &c->seen[i];
        if (!s) {
                if (c->n_seen < K8S_EVENT_CACHE_MAX)
                        victim = c->n_seen++;
                else {
                        free(c->seen[victim].key);
                        c->seen[victim].key = NULL;
                }
                s = &c->seen[victim];
                free(s->name);
                s->key = TAKE_PTR(key);
        } else
                free(s->name);
        s->name = name;
        s->count = 1;
        s->first_usec = s->last_usec = now;
        ret->action = K8S_EVENT_CREATE;
        ret->count = 1;
        ret->first_usec = now;
        return K8S_EVENT_CREATE;
}

void k8s_event_cache_forget(K8sEventCache *c, const char *name) {
        for (size_t i = 0; i < c->n_seen; i++)
                if (streq(c->seen[i].name, name)) {
                        free(c->seen[i].key);
                        free(c->seen[i].name);
                        c->seen[i] = c->seen[--c->n_seen];
                        c->seen[c->n_seen] = (Seen) {};
                        return;
                }
}

void k8s_format_time(uint64_t usec, char buf[static 32]) {
        time_t t = (time_t) (usec / USEC_PER_SEC);
        struct tm tm;

        gmtime_r(&t, &tm);
        strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* --- recorder ------------------------------------------------------------- */

struct K8sEventRecorder {
        K8sClient *client;
        char *component;
        char *host;
        K8sEventCache *cache;
        /* One Event request at a time, in order, as client-go's broadcaster
         * does: the PATCH of a repeat must not overtake the POST creating it. */
        struct EventOp *queue_head, *queue_tail;
        struct EventOp *in_flight;
};

typedef struct EventOp {
        struct EventOp *next;
        K8sEventRecorder *recorder; /* NULL once the recorder is gone */
        char *namespace;
        char *name;
        char *patch_body;  /* NULL: create */
        char *create_body; /* also to fall back to a POST when the PATCH finds nothing */
        k8s_write_done_t done;
        void *userdata;
} EventOp;

static void event_op_free(void *p) {
        EventOp *op = p;
        if (!op)
                return;
        if (op->recorder && op->recorder->in_flight == op)
                op->recorder->in_flight = NULL;
        free(op->namespace);
        free(op->name);
        free(op->patch_body);
        free(op->create_body);
        free(op);
}

static void on_event_done(K8sClient *c, const K8sResponse *resp, void *userdata);

static int event_op_send(EventOp *op) {
        K8sEventRecorder *rec = op->recorder;
        _cleanup_free_ char *path = NULL;
        K8sRequest *req;
        int r;

        if (op->patch_body) {
                if (asprintf(&path, "/api/v1/namespaces/%s/events/%s", op->namespace, op->name) < 0)
                        return -ENOMEM;
                r = k8s_client_request(rec->client, "PATCH", path, "application/strategic-merge-patch+json",
                                       op->patch_body, on_event_done, op, &req);
        } else {
                if (asprintf(&path, "/api/v1/namespaces/%s/events", op->namespace) < 0)
                        return -ENOMEM;
                r = k8s_client_request(rec->client, "POST", path, "application/json", op->create_body,
                                       on_event_done, op, &req);
        }
        if (r < 0)
                return r;
        k8s_request_set_destroy(req, event_op_free);
        rec->in_flight = op;
        return 0;
}

static void event_queue_pump(K8sEventRecorder *rec) {
        while (!rec->in_flight && rec->queue_head) {
                EventOp *op = rec->queue_head;
                rec->queue_head = op->next;
                if (!rec->queue_head)
                        rec->queue_tail = NULL;
                op->next = NULL;
                int r = event_op_send(op);
                if (r < 0) {
                        log_warning_errno(r, "Cannot record event %s/%s: %m", op->namespace, op->name);
                        if (op->done)
                                op->done(rec->client, r, "cannot start the request", op->userdata);
                        event_op_free(op);
                }
        }
}

static void on_event_done(K8sClient *c, const K8sResponse *resp, void *userdata) {
        EventOp *op = userdata;
        K8sEventRecorder *rec = op->recorder;
        bool ok = resp->error == 0 && resp->status >= 200 && resp->status < 300;

        if (rec)
                rec->in_flight = NULL;
        if (!ok && rec && op->patch_body && resp->error == 0 && resp->status == 404) {
                /* The Event expired or was deleted: create it again. */
                k8s_event_cache_forget(rec->cache, op->name);
                op->patch_body = mfree_str(op->patch_body);
                if (event_op_send(op) >= 0)
                        return;
        }
        if (!ok)
                log_warning("Cannot record event %s/%s: %s", op->namespace, op->name, strempty(resp->message));
        if (op->done)
                op->done(c, ok ? 0 : resp->error < 0 ? resp->error : -EIO, ok ? NULL : resp->message, op->userdata);
        event_op_free(op);
        if (rec)
                event_queue_pump(rec);
}

int k8s_event_recorder_new(K8sClient *client, const char *component, const char *host, K8sEventRecorder **ret) {
        K8sEventRecorder *r = calloc(1, sizeof *r);

        if (!r)
                return -ENOMEM;
        r->client = client;
        r->component = strdup(component);
        r->host = strdup(host);
        if (!r->component || !r->host || k8s_event_cache_new(&r->cache) < 0) {
                k8s_event_recorder_free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

K8sEventRecorder *k8s_event_recorder_free(K8sEventRecorder *r) {
        if (!r)
                return NULL;
        while (r->queue_head) {
                EventOp *op = r->queue_head;
                r->queue_head = op->next;
                op->recorder = NULL;
                event_op_free(op);
        }
        if (r->in_flight)
                r->in_flight->recorder = NULL; /* its request still owns it */
        free(r->component);
        free(r->host);
        k8s_event_cache_free(r->cache);
        free(r);
        return NULL;
}

static cJSON *event_body(K8sEventRecorder *rec, const K8sObjectRef *obj, const char *ns, const char *type,
                         const char *reason, const char *message, const K8sEventDecision *d, uint64_t now) {
        cJSON *e = cJSON_CreateObject(), *md, *io, *src;
        char first[32], last[32];

        k8s_format_time(d->first_usec, first);
        k8s_format_time(now, last);
        if (!e || !cJSON_AddStringToObject(e, "apiVersion", "v1") || !cJSON_AddStringToObject(e, "kind", "Event") ||
            !(md = cJSON_AddObjectToObject(e, "metadata")) || !cJSON_AddStringToObject(md, "name", d->name) ||
            !cJSON_AddStringToObject(md, "namespace", ns) || !(io = cJSON_AddObjectToObject(e, "involvedObject")) ||
            !cJSON_AddStringToObject(io, "kind", strempty(obj->kind)) ||
            !cJSON_AddStringToObject(io, "apiVersion", strempty(obj->api_version)) ||
            (obj->namespace && !cJSON_AddStringToObject(io, "namespace", obj->namespace)) ||
            !cJSON_AddStringToObject(io, "name", strempty(obj->name)) ||
            (obj->uid && !cJSON_AddStringToObject(io, "uid", obj->uid)) ||
            (obj->resource_version && !cJSON_AddStringToObject(io, "resourceVersion", obj->resource_version)) ||
            !cJSON_AddStringToObject(e, "reason", reason) || !cJSON_AddStringToObject(e, "message", message) ||
            !cJSON_AddStringToObject(e, "type", type) || !(src = cJSON_AddObjectToObject(e, "source")) ||
            !cJSON_AddStringToObject(src, "component", rec->component) ||
            !cJSON_AddStringToObject(src, "host", rec->host) ||
            !cJSON_AddStringToObject(e, "firstTimestamp", first) ||
            !cJSON_AddStringToObject(e, "lastTimestamp", last) ||
            !cJSON_AddNumberToObject(e, "count", d->count) ||
            !cJSON_AddStringToObject(e, "reportingComponent", rec->component) ||
            !cJSON_AddStringToObject(e, "reportingInstance", rec->host)) {
                cJSON_Delete(e);
                return NULL;
        }
        return e;
}

int k8s_event_record(K8sEventRecorder *rec, const K8sObjectRef *obj, const char *type, const char *reason,
                     const char *message, k8s_write_done_t done, void *userdata) {
        struct timespec ts;
        K8sEventDecision d;
        const char *ns = obj->namespace ?: "default";
        _cleanup_(cJSON_Deletep) cJSON *body = NULL;
        EventOp *op;
        uint64_t now;
        char last[32];

        /* The Event's name is "<name>.<hex>" and becomes part of a PATCH URL:
         * only names the API server could have made get that far. */
        if (validate_dns1123_label(ns) < 0 || validate_dns1123_subdomain(obj->name) < 0)
                return -EINVAL;
        clock_gettime(CLOCK_REALTIME, &ts);
        now = (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
        if (k8s_event_cache_decide(rec->cache, obj, type, reason, message, now, &d) == K8S_EVENT_DROP) {
                log_debug("Event %s on %s/%s dropped by the spam filter", reason, ns, strempty(obj->name));
                return 1;
        }
        body = event_body(rec, obj, ns, type, reason, message, &d, now);
        op = calloc(1, sizeof *op);
        if (!body || !op || !(op->namespace = strdup(ns)) || !(op->name = strdup(d.name)) ||
            !(op->create_body = cJSON_PrintUnformatted(body))) {
                event_op_free(op);
                return -ENOMEM;
        }
        op->recorder = rec;
        op->done = done;
        op->userdata = userdata;
        if (d.action == K8S_EVENT_PATCH) {
                _cleanup_(cJSON_Deletep) cJSON *p = cJSON_CreateObject();
                k8s_format_time(now, last);
                if (!p || !cJSON_AddNumberToObject(p, "count", d.count) ||
                    !cJSON_AddStringToObject(p, "lastTimestamp", last) || !(op->patch_body = cJSON_PrintUnformatted(p))) {
                        event_op_free(op);
                        return -ENOMEM;
                }
        }
        if (rec->queue_tail)
                rec->queue_tail->next = op;
        else
                rec->queue_head = op;
        rec->queue_tail = op;
        event_queue_pump(rec);
        return 0;
}
