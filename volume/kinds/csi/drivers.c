/* SPDX-License-Identifier: Apache-2.0 */
/* Driver registration as the Node and CSINode show it (kubelet-facts §9,
 * kubelet's nodeinfomanager InstallCSIDriver/UninstallCSIDriver), for drivers
 * announced by plugin registration and statically configured ones alike
 * (csi/ calls "registered" for both once NodeGetInfo answered):
 *
 *   - the CSINode entry {name, nodeID, topologyKeys sorted, allocatable.count}:
 *     csi-attacher takes the node ID only from there;
 *   - the csi.volume.kubernetes.io/nodeid annotation, and the
 *     controller-managed-attach-detach annotation without which the
 *     attach/detach controller ignores this node's pods;
 *   - the driver's topology segments as Node labels (an existing label with
 *     another value is kubelet's "detected topology value collision", and
 *     fails the registration).
 *
 * What the Node loses (re-created, or someone removed annotations or labels)
 * is written again when the node informer shows it missing; CSINode cannot be
 * watched by a node, so its entries are written again when the Node's UID
 * changes (the garbage collector deletes a CSINode with its owner Node).
 * Every writer reads before it writes, so writing again what is already
 * there costs a GET and no PATCH, and causes no event: no write loop.  A
 * write in flight is never started twice; a failed one is retried with
 * backoff. */
#include <stdarg.h>
#include <stdio.h>

#include "k8s/writers.h"
#include "systemd/log.h"
#include "volume/internal.h"
#include "volume/kinds/csi/kind.h"

#define WRITE_RETRY_FIRST_USEC (500 * USEC_PER_MSEC)
#define WRITE_RETRY_MAX_USEC (30 * USEC_PER_SEC)

typedef struct WriteState {
        bool pending;     /* must be written, whatever the Node shows (CSINode; after a failure) */
        bool in_flight;
        uint64_t retry_at; /* CLOCK_MONOTONIC; after a failure, not before */
        uint64_t backoff_usec;
} WriteState;

typedef struct DriverRecord {
        char *name;
        char *registration_socket; /* NULL: configured statically */
        char *node_id;
        char **topology_keys;      /* sorted */
        K8sStringMap topology;     /* NodeGetInfo accessible_topology segments */
        int64_t max_volumes;
        WriteState annotation, csinode;
        bool collision_reported;   /* a label someone changed: said once, not fought over */
        uint64_t limit_due;        /* attach limits: NodeGetInfo again then (0: not scheduled) */
        bool limit_querying;
        Hashmap *limit_held;       /* unique names of volumes waiting for room under the limit */
        VolumeManager *m;          /* for the capabilities' warm-up below */
        CsiCall *caps_call;        /* NodeGetCapabilities asked at registration, in flight */
} DriverRecord;

typedef enum WriteKind {
        WRITE_MANAGED,
        WRITE_ANNOTATION,
        WRITE_CSINODE,
        WRITE_LABELS,
        WRITE_UNINSTALL, /* fire and forget: the record is gone */
} WriteKind;

typedef struct WriteCtx WriteCtx;
typedef struct LimitQuery LimitQuery;

struct DriverTable {
        VolumeManager *m;
        Hashmap *records;          /* driver name → DriverRecord */
        char *node_uid;            /* of the Node the informer showed last */
        WriteState managed, labels;
        /* Labels a driver that went away (or stopped reporting) leaves behind,
         * to be removed if the Node still has them with that value. */
        K8sStringMap labels_to_remove;
        K8sStringMap labels_sending_removal; /* the removals of the write in flight */
        sd_event_source *retry_timer;
        WriteCtx *writes;          /* in flight */
        sd_event_source *limit_timer; /* attach limits: the next NodeGetInfo refresh */
        LimitQuery *queries;       /* attach limits: NodeGetInfo calls in flight */
};

struct WriteCtx {
        DriverTable *t;
        WriteKind kind;
        char *driver;
        WriteCtx *prev, *next;
};

static void sync_node(DriverTable *t);
static void limits_arm(DriverTable *t);
static int limits_setup(DriverTable *t);
static void limits_free(DriverTable *t);

const K8sCSIDriver *csi_driver_object(VolumeManager *m, const char *driver) {
        return k8s_informer_get(m->csidrivers, NULL, driver);
}

bool csi_driver_attachable(VolumeManager *m, const char *driver) {
        const K8sCSIDriver *d = csi_driver_object(m, driver);
        return !d || d->attach_required;
}

static int oom(void) {
        return log_error_errno(ENOMEM, "Out of memory recording CSI drivers on the node");
}

/* ---- records ------------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static DriverRecord *record_free(DriverRecord *d) {
        if (!d)
                return NULL;
        csi_call_cancel(d->caps_call);
        free(d->name);
        free(d->registration_socket);
        free(d->node_id);
        k8s_strv_free(d->topology_keys);
        k8s_string_map_done(&d->topology);
        hashmap_free(d->limit_held);
        free(d);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(DriverRecord *, record_free);

static int string_map_add(K8sStringMap *map, const char *key, const char *value) {
        char **keys, **values;

        for (size_t i = 0; i < map->n; i++)
                if (streq(map->keys[i], key))
                        return free_and_strdup(&map->values[i], value) < 0 ? -ENOMEM : 0;
        keys = realloc(map->keys, (map->n + 1) * sizeof(char *));
        if (!keys)
                return -ENOMEM;
        map->keys = keys;
        values = realloc(map->values, (map->n + 1) * sizeof(char *));
        if (!values)
                return -ENOMEM;
        map->values = values;
        map->keys[map->n] = strdup(key);
        map->values[map->n] = strdup(value);
        if (!map->keys[map->n] || !map->values[map->n]) {
                free(map->keys[map->n]);
                free(map->values[map->n]);
                return -ENOMEM;
        }
        map->n++;
        return 0;
}

static void string_map_remove(K8sStringMap *map, const char *key) {
        for (size_t i = 0; i < map->n; i++)
                if (streq(map->keys[i], key)) {
                        free(map->keys[i]);
                        free(map->values[i]);
                        map->keys[i] = map->keys[map->n - 1];
                        map->values[i] = map->values[map->n - 1];
                        map->n--;
                        return;
                }
}

static int record_new(const CsiRegisteredDriver *d, DriverRecord **ret) {
        _cleanup_(record_freep) DriverRecord *rec = calloc(1, sizeof *rec);
        const CsiNodeInfo *info = d->node_info;

        if (!rec || !(rec->name = strdup(d->name)) || !(rec->node_id = strdup(info->node_id)) ||
            (d->registration_socket && !(rec->registration_socket = strdup(d->registration_socket))) ||
            !(rec->topology_keys = calloc(info->n_topology + 1, sizeof(char *))))
                return -ENOMEM;
        for (size_t i = 0; i < info->n_topology; i++) {
                if (string_map_add(&rec->topology, info->topology[i].key, info->topology[i].value) < 0 ||
                    !(rec->topology_keys[i] = strdup(info->topology[i].key)))
                        return -ENOMEM;
        }
        qsort(rec->topology_keys, info->n_topology, sizeof(char *), cmp_str);
        /* kubelet: capped to MaxInt32, negative omitted (the writer omits <= 0). */
        rec->max_volumes = info->max_volumes_per_node;
        *ret = TAKE_PTR(rec);
        return 0;
}

/* Whether a recorded driver other than "except" reports key=value. */
static bool label_reported_elsewhere(DriverTable *t, const char *except, const char *key, const char *value) {
        void *v;

        for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                DriverRecord *d = v;
                if (except && streq(d->name, except))
                        continue;
                if (streq_ptr(k8s_string_map_get(&d->topology, key), value))
                        return true;
        }
        return false;
}

/* The labels of "rec" that no other driver reports any more are to be
 * removed.  kubelet leaves topology labels on the Node when a driver goes
 * (UninstallCSIDriver); issue 10 asks for their removal, so a node whose
 * driver is gone does not keep attracting topology-constrained volumes.
 * kubelet's own labels (topology.kubernetes.io/zone, ...) are left:
 * kubelet maintains them itself. */
static void record_drop_labels(DriverTable *t, const DriverRecord *rec, const K8sStringMap *keep) {
        for (size_t i = 0; i < rec->topology.n; i++) {
                const char *key = rec->topology.keys[i], *value = rec->topology.values[i];
                if (keep && streq_ptr(k8s_string_map_get(keep, key), value))
                        continue;
                if (label_reported_elsewhere(t, rec->name, key, value) || k8s_node_label_is_kubelet_label(key))
                        continue;
                if (string_map_add(&t->labels_to_remove, key, value) < 0)
                        (void) oom();
                else
                        t->labels.pending = true;
        }
}

/* ---- writes ------------------------------------------------------------------------- */

static void write_failed(DriverTable *t, WriteState *w) {
        uint64_t now = 0;

        (void) sd_event_now(t->m->event, CLOCK_MONOTONIC, &now);
        w->pending = true;
        w->backoff_usec = w->backoff_usec ? MIN(w->backoff_usec * 2, WRITE_RETRY_MAX_USEC) : WRITE_RETRY_FIRST_USEC;
        w->retry_at = now + w->backoff_usec;
}

static void write_succeeded(WriteState *w) {
        w->backoff_usec = 0;
        w->retry_at = 0;
}

static bool write_may_start(DriverTable *t, const WriteState *w) {
        uint64_t now = 0;

        if (w->in_flight)
                return false;
        (void) sd_event_now(t->m->event, CLOCK_MONOTONIC, &now);
        return now >= w->retry_at;
}

static WriteCtx *write_ctx_new(DriverTable *t, WriteKind kind, const char *driver) {
        WriteCtx *w = calloc(1, sizeof *w);

        if (!w)
                return NULL;
        *w = (WriteCtx){ .t = t, .kind = kind };
        if (driver && !(w->driver = strdup(driver))) {
                free(w);
                return NULL;
        }
        w->next = t->writes;
        if (t->writes)
                t->writes->prev = w;
        t->writes = w;
        return w;
}

static void write_ctx_free(WriteCtx *w) {
        DriverTable *t = w->t;

        if (w->prev)
                w->prev->next = w->next;
        else if (t->writes == w)
                t->writes = w->next;
        if (w->next)
                w->next->prev = w->prev;
        free(w->driver);
        free(w);
}

static WriteState *write_state(DriverTable *t, WriteKind kind, const char *driver) {
        DriverRecord *d = driver ? hashmap_get(t->records, driver) : NULL;

        switch (kind) {
        case WRITE_MANAGED:
                return &t->managed;
        case WRITE_LABELS:
                return &t->labels;
        case WRITE_ANNOTATION:
                return d ? &d->annotation : NULL;
        case WRITE_CSINODE:
                return d ? &d->csinode : NULL;
        case WRITE_UNINSTALL:
                break;
        }
        return NULL;
}

static const char *write_what(WriteKind kind) {
        switch (kind) {
        case WRITE_MANAGED:
                return "the controller-managed attach/detach annotation";
        case WRITE_ANNOTATION:
                return "the nodeid annotation";
        case WRITE_CSINODE:
                return "the CSINode entry";
        case WRITE_LABELS:
                return "the topology labels";
        case WRITE_UNINSTALL:
                return "the removal of the node's entries";
        }
        return "?";
}

static void arm_retry(DriverTable *t);
static const K8sNode *informer_node(DriverTable *t);

static void on_written(K8sClient *c, int error, const char *message, void *userdata) {
        WriteCtx *w = userdata;
        DriverTable *t = w->t;
        WriteState *ws = write_state(t, w->kind, w->driver);
        LogFields f = { .driver = w->driver };

        /* While the API server is unreachable the client said so once; each
         * retry of the write says nothing more. */
        if (error < 0)
                log_fields(k8s_client_unreachable_since(c, NULL) ? LOG_DEBUG : LOG_WARNING, &f,
                           "Failed to write %s%s%s on node %s: %s", write_what(w->kind),
                           w->driver ? " of CSI driver " : "", strempty(w->driver), t->m->node_name,
                           strempty(message));
        else
                log_fields(LOG_DEBUG, &f, "Wrote %s%s%s on node %s", write_what(w->kind),
                           w->driver ? " of CSI driver " : "", strempty(w->driver), t->m->node_name);
        if (w->kind == WRITE_LABELS) {
                /* Removals that went through are done; those that failed wait for the retry. */
                if (error >= 0)
                        k8s_string_map_done(&t->labels_sending_removal);
                else
                        for (size_t i = 0; i < t->labels_sending_removal.n; i++)
                                if (!k8s_string_map_get(&t->labels_to_remove, t->labels_sending_removal.keys[i]))
                                        (void) string_map_add(&t->labels_to_remove,
                                                              t->labels_sending_removal.keys[i],
                                                              t->labels_sending_removal.values[i]);
                k8s_string_map_done(&t->labels_sending_removal);
        }
        if (ws) {
                ws->in_flight = false;
                if (error < 0)
                        write_failed(t, ws);
                else
                        write_succeeded(ws);
        }
        write_ctx_free(w);
        sync_node(t);
}

static void start_write(DriverTable *t, WriteKind kind, DriverRecord *d) {
        VolumeManager *m = t->m;
        WriteState *ws = write_state(t, kind, d ? d->name : NULL);
        LogFields f = { .driver = d ? d->name : NULL };
        _cleanup_(k8s_string_map_done) K8sStringMap add = {};
        WriteCtx *w;
        void *v;
        int r;

        if (!ws || !write_may_start(t, ws))
                return;
        w = write_ctx_new(t, kind, d ? d->name : NULL);
        if (!w) {
                (void) oom();
                return;
        }
        switch (kind) {
        case WRITE_MANAGED:
                r = k8s_node_set_driver_id(m->k8s, m->node_name, NULL, NULL, on_written, w);
                break;
        case WRITE_ANNOTATION:
                r = k8s_node_set_driver_id(m->k8s, m->node_name, d->name, d->node_id, on_written, w);
                break;
        case WRITE_CSINODE:
                r = k8s_csinode_set_driver_owned(m->k8s, m->node_name, t->node_uid, d->name, d->node_id,
                                                 d->topology_keys, d->max_volumes, on_written, w);
                break;
        case WRITE_LABELS:
                r = 0;
                for (size_t i = 0; r >= 0 && hashmap_iterate(t->records, &i, NULL, &v);) {
                        DriverRecord *rec = v;
                        const K8sNode *node = informer_node(t);
                        for (size_t k = 0; r >= 0 && k < rec->topology.n; k++) {
                                const char *cur = node ? k8s_string_map_get(&node->labels, rec->topology.keys[k])
                                                       : NULL;
                                /* A label someone changed since is reported, not fought over. */
                                if (cur && !streq(cur, rec->topology.values[k]))
                                        continue;
                                r = string_map_add(&add, rec->topology.keys[k], rec->topology.values[k]);
                        }
                }
                if (r >= 0) {
                        k8s_string_map_done(&t->labels_sending_removal);
                        t->labels_sending_removal = t->labels_to_remove;
                        t->labels_to_remove = (K8sStringMap){};
                        if (add.n == 0 && t->labels_sending_removal.n == 0) {
                                t->labels.pending = false;
                                write_ctx_free(w);
                                return;
                        }
                        r = k8s_node_update_labels(m->k8s, m->node_name, &add, &t->labels_sending_removal,
                                                   on_written, w);
                        if (r < 0) {
                                t->labels_to_remove = t->labels_sending_removal;
                                t->labels_sending_removal = (K8sStringMap){};
                        }
                }
                break;
        default:
                r = -EINVAL;
        }
        if (r < 0) {
                log_fields_errno(LOG_WARNING, r, &f, "Cannot write %s on node %s: %m", write_what(kind),
                                 m->node_name);
                write_ctx_free(w);
                write_failed(t, ws);
                arm_retry(t);
                return;
        }
        ws->pending = false;
        ws->in_flight = true;
}

/* Removes a driver's CSINode entry and nodeid key (kubelet's
 * UninstallCSIDriver), and queues the removal of its topology labels. */
static void uninstall(DriverTable *t, DriverRecord *rec) {
        VolumeManager *m = t->m;
        LogFields f = { .driver = rec->name };
        WriteCtx *a = write_ctx_new(t, WRITE_UNINSTALL, rec->name);
        WriteCtx *c = write_ctx_new(t, WRITE_UNINSTALL, rec->name);
        int r = -ENOMEM;

        if (a && c) {
                r = k8s_node_set_driver_id(m->k8s, m->node_name, rec->name, NULL, on_written, a);
                if (r >= 0)
                        a = NULL;
                if (r >= 0)
                        r = k8s_csinode_set_driver(m->k8s, m->node_name, rec->name, NULL, NULL, 0, on_written, c);
                if (r >= 0)
                        c = NULL;
        }
        if (a)
                write_ctx_free(a);
        if (c)
                write_ctx_free(c);
        if (r < 0)
                log_fields_errno(LOG_WARNING, r, &f, "Failed to remove CSI driver %s from node %s: %m", rec->name,
                                 m->node_name);
        record_drop_labels(t, rec, NULL);
}

/* ---- comparing with the Node ---------------------------------------------------------- */

static int on_retry_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        sync_node(userdata);
        return 0;
}

static void arm_retry(DriverTable *t) {
        uint64_t when = UINT64_MAX;
        void *v;

        if (t->managed.pending && t->managed.retry_at)
                when = MIN(when, t->managed.retry_at);
        if (t->labels.pending && t->labels.retry_at)
                when = MIN(when, t->labels.retry_at);
        for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                DriverRecord *d = v;
                if (d->annotation.pending && d->annotation.retry_at)
                        when = MIN(when, d->annotation.retry_at);
                if (d->csinode.pending && d->csinode.retry_at)
                        when = MIN(when, d->csinode.retry_at);
        }
        if (when == UINT64_MAX) {
                (void) sd_event_source_set_enabled(t->retry_timer, SD_EVENT_OFF);
                return;
        }
        (void) sd_event_source_set_time(t->retry_timer, when);
        (void) sd_event_source_set_enabled(t->retry_timer, SD_EVENT_ONESHOT);
}

/* The Node as the informer has it (NULL before it is listed). */
static const K8sNode *informer_node(DriverTable *t) {
        return t->m->node ? k8s_informer_get(t->m->node, NULL, t->m->node_name) : NULL;
}

/* Whether the nodeid annotation of "node" maps "driver" to "node_id". */
static bool node_id_annotated(const K8sNode *node, const char *driver, const char *node_id) {
        _cleanup_free_ char *value = NULL;
        const char *old = k8s_string_map_get(&node->annotations, K8S_ANNOTATION_NODE_ID);

        /* Setting it again changes nothing exactly when it is there already. */
        return k8s_node_id_annotation_update(old, driver, node_id, &value) == 0;
}

/* Marks what the Node lacks, then starts what may start. */
static void sync_node(DriverTable *t) {
        const K8sNode *node = informer_node(t);
        void *v;

        if (node) {
                if (!streq_ptr(k8s_string_map_get(&node->annotations, K8S_ANNOTATION_CONTROLLER_MANAGED), "true"))
                        t->managed.pending = true;
                for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                        DriverRecord *d = v;
                        bool collision = false;

                        if (!node_id_annotated(node, d->name, d->node_id))
                                d->annotation.pending = true;
                        for (size_t k = 0; k < d->topology.n; k++) {
                                const char *cur = k8s_string_map_get(&node->labels, d->topology.keys[k]);
                                if (!cur)
                                        t->labels.pending = true;
                                else if (!streq(cur, d->topology.values[k])) {
                                        collision = true;
                                        if (!d->collision_reported)
                                                log_fields(LOG_WARNING, &(LogFields){ .driver = d->name },
                                                           "Node %s has label %s=%s, but CSI driver %s reports "
                                                           "%s=%s; leaving the label as it is",
                                                           t->m->node_name, d->topology.keys[k], cur, d->name,
                                                           d->topology.keys[k], d->topology.values[k]);
                                }
                        }
                        d->collision_reported = collision;
                }
                for (size_t k = 0; k < t->labels_to_remove.n; k++)
                        if (streq_ptr(k8s_string_map_get(&node->labels, t->labels_to_remove.keys[k]),
                                      t->labels_to_remove.values[k]))
                                t->labels.pending = true;
        }

        if (t->managed.pending)
                start_write(t, WRITE_MANAGED, NULL);
        for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                DriverRecord *d = v;
                if (d->annotation.pending)
                        start_write(t, WRITE_ANNOTATION, d);
                if (d->csinode.pending)
                        start_write(t, WRITE_CSINODE, d);
        }
        if (t->labels.pending)
                start_write(t, WRITE_LABELS, NULL);
        arm_retry(t);
}

void drivers_node_changed(VolumeManager *m, const K8sNode *node) {
        DriverTable *t = m->drivers;
        void *v;

        if (!t || !node || !streq_ptr(node->meta.name, m->node_name))
                return;
        if (t->node_uid && !streq_ptr(t->node_uid, node->meta.uid)) {
                /* Deleted and created again: the garbage collector takes the
                 * CSINode with the old Node, and nothing tells us when. */
                log_notice("Node %s was created again (UID %s, was %s); recording its CSI drivers again",
                           m->node_name, strempty(node->meta.uid), t->node_uid);
                for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                        DriverRecord *d = v;
                        d->csinode.pending = true;
                        d->csinode.retry_at = 0;
                        d->annotation.retry_at = 0;
                }
                t->managed.retry_at = t->labels.retry_at = 0;
        }
        if (free_and_strdup(&t->node_uid, node->meta.uid) < 0)
                (void) oom();
        sync_node(t);
        csi_client_retry_deferred(m->csi); /* the drivers that waited for the Node */
}

/* ---- attach limits (KEP-4876) ---------------------------------------------------------- */

/* CSINode.spec.drivers[].allocatable.count comes from NodeGetInfo's
 * max_volumes_per_node at registration.  kubelet (MutableCSINodeAllocatableCount)
 * asks again every CSIDriver.spec.nodeAllocatableUpdatePeriodSeconds (at
 * least 10 s), and at once when an attach failed with RESOURCE_EXHAUSTED;
 * kvolumed does the same, with [csi] attach-limit-refresh-interval for the
 * drivers whose CSIDriver does not say (0: never), and also after a stage or
 * publish that failed with RESOURCE_EXHAUSTED. */

#define LIMIT_PERIOD_MIN_USEC (10 * USEC_PER_SEC)

struct LimitQuery {
        DriverTable *t;
        char *driver;
        CsiCall *call;
        LimitQuery *prev, *next;
};

static void limit_query_free(LimitQuery *q) {
        DriverTable *t = q->t;

        if (q->prev)
                q->prev->next = q->next;
        else
                t->queries = q->next;
        if (q->next)
                q->next->prev = q->prev;
        free(q->driver);
        free(q);
}

static uint64_t limit_period(DriverTable *t, const DriverRecord *rec) {
        const K8sCSIDriver *d = t->m->csidrivers ? csi_driver_object(t->m, rec->name) : NULL;

        if (d && d->has_node_allocatable_update_period_seconds && d->node_allocatable_update_period_seconds > 0)
                return MAX((uint64_t) d->node_allocatable_update_period_seconds * USEC_PER_SEC,
                           LIMIT_PERIOD_MIN_USEC);
        return t->m->attach_limit_refresh_usec;
}

static void limits_arm(DriverTable *t) {
        uint64_t now = 0, when = UINT64_MAX;
        void *v;

        (void) sd_event_now(t->m->event, CLOCK_MONOTONIC, &now);
        for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                DriverRecord *d = v;
                uint64_t period = limit_period(t, d);
                if (period == 0 || d->limit_querying) {
                        d->limit_due = 0;
                        continue;
                }
                if (d->limit_due == 0 || d->limit_due > now + period)
                        d->limit_due = now + period;
                when = MIN(when, d->limit_due);
        }
        if (when == UINT64_MAX) {
                (void) sd_event_source_set_enabled(t->limit_timer, SD_EVENT_OFF);
                return;
        }
        (void) sd_event_source_set_time(t->limit_timer, when);
        (void) sd_event_source_set_enabled(t->limit_timer, SD_EVENT_ONESHOT);
}

static void on_limit_info(const CsiStatus *status, const CsiNodeInfo *info, void *userdata) {
        LimitQuery *q = userdata;
        DriverTable *t = q->t;
        DriverRecord *rec = hashmap_get(t->records, q->driver);
        LogFields f = { .driver = q->driver, .csi_method = "NodeGetInfo", .csi_code = csi_code_name(status->code) };

        if (rec) {
                rec->limit_querying = false;
                rec->limit_due = 0;
        }
        if (status->code != CSI_CODE_OK)
                log_fields(LOG_WARNING, &f, "NodeGetInfo of CSI driver %s for its attach limit failed: %s", q->driver,
                           status->message);
        else if (rec && info->max_volumes_per_node != rec->max_volumes) {
                log_fields(LOG_INFO, &f, "CSI driver %s now allows %" PRIi64 " volumes on node %s (was %" PRIi64 ")",
                           q->driver, info->max_volumes_per_node, t->m->node_name, rec->max_volumes);
                rec->max_volumes = info->max_volumes_per_node;
                rec->csinode.pending = true;
                sync_node(t);
                manager_schedule_pass(t->m); /* volumes held by the limit may go on */
        } else
                log_fields(LOG_DEBUG, &f, "CSI driver %s still allows %" PRIi64 " volumes", q->driver,
                           info->max_volumes_per_node);
        limit_query_free(q);
        limits_arm(t);
}

static void limit_query(DriverTable *t, DriverRecord *rec) {
        LimitQuery *q;
        int r;

        if (rec->limit_querying)
                return;
        q = calloc(1, sizeof *q);
        if (!q || !(q->driver = strdup(rec->name))) {
                free(q);
                return;
        }
        q->t = t;
        r = csi_node_get_info(t->m->csi, rec->name, on_limit_info, q, &q->call);
        if (r < 0) {
                LogFields f = { .driver = rec->name, .csi_method = "NodeGetInfo" };
                log_fields_errno(LOG_WARNING, r, &f, "Cannot ask CSI driver %s for its attach limit: %m", rec->name);
                free(q->driver);
                free(q);
                return;
        }
        q->next = t->queries;
        if (q->next)
                q->next->prev = q;
        t->queries = q;
        rec->limit_querying = true;
}

static int on_limit_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        DriverTable *t = userdata;
        void *v;

        for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                DriverRecord *d = v;
                if (d->limit_due != 0 && d->limit_due <= usec)
                        limit_query(t, d);
        }
        limits_arm(t);
        return 0;
}

static int limits_setup(DriverTable *t) {
        int r = sd_event_add_time(t->m->event, &t->limit_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC,
                                  on_limit_timer, t);
        if (r >= 0)
                r = sd_event_source_set_enabled(t->limit_timer, SD_EVENT_OFF);
        if (r >= 0)
                (void) sd_event_source_set_description(t->limit_timer, "attach-limit-refresh");
        return r;
}

static void limits_free(DriverTable *t) {
        while (t->queries) {
                csi_call_cancel(t->queries->call);
                limit_query_free(t->queries);
        }
        sd_event_source_disable_unref(t->limit_timer);
}

void drivers_refresh_attach_limit(VolumeManager *m, const char *driver) {
        DriverRecord *rec = m->drivers && driver ? hashmap_get(m->drivers->records, driver) : NULL;

        if (!rec)
                return;
        log_fields(LOG_INFO, &(LogFields){ .driver = driver },
                   "CSI driver %s answered RESOURCE_EXHAUSTED: asking it for its attach limit again", driver);
        limit_query(m->drivers, rec);
}

/* An attachable volume counts from before it is staged until it is gone
 * from the node (the same span as volumesInUse). */
static bool counts_against_limit(VolumeManager *m, const ActualVolume *av) {
        return av->lifecycle == VOLUME_PERSISTENT && (av->attachable || csi_driver_attachable(m, av->driver)) &&
               (av->stage != STAGE_NONE || av->stage_stale || hashmap_size(av->publishes) > 0 ||
                actual_volume_busy(av) || av->expanding);
}

bool drivers_attach_limit_reached(VolumeManager *m, const ActualVolume *av, char *message, size_t size) {
        DriverRecord *rec = m->drivers ? hashmap_get(m->drivers->records, av->driver) : NULL;
        unsigned n = 0;
        void *v;

        if (!rec || rec->max_volumes <= 0 || counts_against_limit(m, av))
                return false;
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &v);) {
                const ActualVolume *other = v;
                if (other != av && streq_ptr(other->driver, av->driver) && counts_against_limit(m, other))
                        n++;
        }
        if ((int64_t) n + 1 <= rec->max_volumes)
                return false;
        /* Looked at again when one of the driver's volumes changes (drivers_volume_changed). */
        if (!rec->limit_held)
                rec->limit_held = hashmap_new();
        if (rec->limit_held)
                (void) hashmap_put(rec->limit_held, av->unique_name, (void *) 1, NULL);
        /* kubelet rejects such a pod (its VolumeAttachLimitExceededError, once
         * an attachment failed with RESOURCE_EXHAUSTED); kvolumed does not
         * own the pod's phase, so the volume waits, without a call bound to fail. */
        snprintf(message, size, "Node has reached its volume attachment limit: CSI driver %s allows %" PRIi64
                 " volumes on node %s, all in use; volume \"%s\" waits until one is gone", av->driver,
                 rec->max_volumes, m->node_name, av->spec_name);
        return true;
}

void drivers_volume_changed(VolumeManager *m, const ActualVolume *av) {
        DriverRecord *rec = m->drivers ? hashmap_get(m->drivers->records, av->driver) : NULL;
        const char *name;

        if (!rec || hashmap_size(rec->limit_held) == 0)
                return;
        /* It may have left the node: the volumes that waited for room are
         * planned in the same pass as it (they may wait again). */
        for (size_t j = 0; hashmap_iterate(rec->limit_held, &j, &name, NULL);) {
                manager_schedule_volume_pass(m, name);
                hashmap_remove(rec->limit_held, name);
        }
}

/* ---- registration callbacks ---------------------------------------------------------- */

/* Lets the volumes of a driver that just came up try at once, instead of
 * waiting out the backoff their failures while it was away earned them. */
static void wake_volumes(VolumeManager *m, const char *driver) {
        void *value;

        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                if (streq_ptr(av->driver, driver))
                        actual_volume_reset_backoffs(av);
        }
        manager_schedule_pass(m);
}

/* Logs why a driver is refused, and has the plugin told the same. */
static int refuse(DriverTable *t, const char *driver, int error, const char *format, ...) _printf_(4, 5);
static int refuse(DriverTable *t, const char *driver, int error, const char *format, ...) {
        LogFields f = { .driver = driver };
        _cleanup_free_ char *reason = NULL;
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&reason, format, ap) < 0)
                reason = NULL;
        va_end(ap);
        if (reason)
                csi_client_set_refusal_reason(t->m->csi, reason);
        return log_fields_errno(LOG_WARNING, error, &f, "Refusing CSI driver %s: %s", driver,
                                reason ?: "out of memory");
}

/* kubelet's collision rule, checked against the Node as the informer shows
 * it and against what the other drivers report, before anything is written:
 * a refused registration writes nothing. */
static int check_topology(DriverTable *t, const DriverRecord *rec, const DriverRecord *old) {
        const K8sNode *node = informer_node(t);
        void *v;

        for (size_t k = 0; k < rec->topology.n; k++) {
                const char *key = rec->topology.keys[k], *value = rec->topology.values[k];
                const char *cur = node ? k8s_string_map_get(&node->labels, key) : NULL;

                if (k8s_validate_label(key, value) < 0)
                        return refuse(t, rec->name, EINVAL, "topology segment %s=%s is not a valid Node label", key,
                                      value);
                if (!k8s_node_label_allowed(key))
                        return refuse(t, rec->name, EPERM,
                                      "topology key %s is in the kubernetes.io/k8s.io namespaces: NodeRestriction "
                                      "forbids a node to set that label on itself",
                                      key);
                /* The value this driver set before is its own to change. */
                if (cur && !streq(cur, value) &&
                    !(old && streq_ptr(k8s_string_map_get(&old->topology, key), cur) &&
                      !label_reported_elsewhere(t, rec->name, key, cur)))
                        return refuse(t, rec->name, EEXIST,
                                      "detected topology value collision: driver reported %s:%s but existing label "
                                      "is %s:%s",
                                      key, value, key, cur);
                for (size_t i = 0; hashmap_iterate(t->records, &i, NULL, &v);) {
                        const DriverRecord *other = v;
                        const char *theirs = k8s_string_map_get(&other->topology, key);
                        if (!streq(other->name, rec->name) && theirs && !streq(theirs, value))
                                return refuse(t, rec->name, EEXIST,
                                              "detected topology value collision: driver reported %s:%s but CSI "
                                              "driver %s reports %s:%s",
                                              key, value, other->name, key, theirs);
                }
        }
        return 0;
}

static void on_warm_capabilities(const CsiStatus *status, const CsiNodeCapabilities *caps, void *userdata) {
        DriverRecord *rec = userdata;
        DriverCaps *dc;

        rec->caps_call = NULL;
        if (status->code == CSI_CODE_CANCELLED)
                return;
        if (!caps) {
                /* The first operation asks again, and fails with the reason. */
                LogFields f = { .driver = rec->name, .csi_method = "NodeGetCapabilities" };
                log_fields(LOG_DEBUG, &f, "Driver %s did not answer NodeGetCapabilities at registration: %s: %s",
                           rec->name, csi_code_name(status->code), status->message);
                return;
        }
        dc = hashmap_get(rec->m->caps, rec->name);
        if (!dc) {
                dc = calloc(1, sizeof *dc);
                if (!dc)
                        return;
                if (hashmap_put(rec->m->caps, rec->name, dc, NULL) < 0) {
                        free(dc);
                        return;
                }
        }
        dc->known = true;
        dc->caps = *caps;
}

/* The driver's node capabilities, asked as soon as it is recorded rather
 * than by the first operation that needs them: otherwise the first pod after
 * a start or a driver's (re)registration waits for one more round trip to the
 * driver before its NodePublishVolume (issue 31: the first pod's cold cost).
 * A failure here costs nothing: the operation asks again, as before. */
static void warm_capabilities(VolumeManager *m, DriverRecord *rec) {
        rec->m = m;
        if (csi_node_get_capabilities(m->csi, rec->name, on_warm_capabilities, rec, &rec->caps_call) < 0)
                rec->caps_call = NULL;
}

static int on_registered(CsiClient *c, const CsiRegisteredDriver *d, void *userdata) {
        VolumeManager *m = userdata;
        DriverTable *t = m->drivers;
        _cleanup_(record_freep) DriverRecord *rec = NULL;
        DriverRecord *old;
        LogFields f = { .driver = d->name };
        int r;

        free(hashmap_remove(m->caps, d->name)); /* a new driver process may say otherwise */
        if (isempty(d->node_info->node_id))
                return refuse(t, d->name, EINVAL, "node ID is empty");
        /* The collision rule needs the Node's labels: wait for the informer's
         * first list rather than refuse (node-driver-registrar exits when
         * told it was refused). */
        if (!informer_node(t) && (!m->node || !k8s_informer_synced(m->node))) {
                log_fields(LOG_DEBUG, &f, "Recording CSI driver %s once node %s is listed", d->name, m->node_name);
                return -EAGAIN;
        }
        r = record_new(d, &rec);
        if (r < 0)
                return oom();
        old = hashmap_get(t->records, d->name);
        r = check_topology(t, rec, old);
        if (r < 0) {
                /* As kubelet: a driver whose installation failed is uninstalled. */
                if (old) {
                        hashmap_remove(t->records, old->name);
                        uninstall(t, old);
                        record_free(old);
                        sync_node(t);
                }
                return r;
        }
        if (old) {
                hashmap_remove(t->records, old->name);
                record_drop_labels(t, old, &rec->topology);
                record_free(old);
        }
        /* What it reports now is not to be removed. */
        for (size_t k = 0; k < rec->topology.n; k++)
                string_map_remove(&t->labels_to_remove, rec->topology.keys[k]);
        rec->annotation.pending = rec->csinode.pending = true;
        t->labels.pending = rec->topology.n > 0 || t->labels.pending;
        r = hashmap_put(t->records, rec->name, rec, NULL);
        if (r < 0)
                return oom();
        f.message_id = LOG_MESSAGE_ID_DRIVER_REGISTERED;
        log_fields(LOG_INFO, &f, "Recording CSI driver %s (%s) on node %s: node ID %s, %zu topology segments",
                   d->name, d->registration_socket ? "registered" : "configured statically", m->node_name,
                   rec->node_id, rec->topology.n);
        warm_capabilities(m, TAKE_PTR(rec));
        sync_node(t);
        limits_arm(t);
        wake_volumes(m, d->name);
        return 0;
}

static void on_deregistered(CsiClient *c, const char *driver, const char *registration_socket, void *userdata) {
        VolumeManager *m = userdata;
        DriverTable *t = m->drivers;
        DriverRecord *rec = hashmap_get(t->records, driver);
        LogFields f = { .driver = driver };

        if (registration_socket)
                log_fields(LOG_INFO, &f, "CSI driver %s deregistered (%s gone)", driver, registration_socket);
        else
                log_fields(LOG_INFO, &f, "CSI driver %s was removed from the configuration", driver);
        free(hashmap_remove(m->caps, driver));
        manager_schedule_pass(m);
        if (!rec || !streq_ptr(rec->registration_socket, registration_socket))
                return;
        if (csi_client_has_driver(c, driver)) {
                /* Also configured statically: it stays on the node as that. */
                log_fields(LOG_INFO, &f, "CSI driver %s is also configured statically; keeping its entries", driver);
                return;
        }
        hashmap_remove(t->records, driver);
        uninstall(t, rec);
        record_free(rec);
        sync_node(t);
}

static void on_registration_failed(CsiClient *c, const char *socket, const char *reason, void *userdata) {
        /* csi/ has logged it already, at the level it deserves. */
        log_debug("Registration through %s failed: %s", socket, reason);
}

/* ---- life cycle ----------------------------------------------------------------------- */

int drivers_setup(VolumeManager *m) {
        DriverTable *t;
        int r;

        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        m->drivers = t;
        t->m = m;
        t->records = hashmap_new();
        if (!t->records)
                return -ENOMEM;
        r = sd_event_add_time(m->event, &t->retry_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC, on_retry_timer,
                              t);
        if (r >= 0)
                r = sd_event_source_set_enabled(t->retry_timer, SD_EVENT_OFF);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(t->retry_timer, "driver-registration-retry");
        r = limits_setup(t);
        if (r < 0)
                return r;
        /* Without the controller-managed annotation the attach/detach
         * controller ignores this node's pods: written at start, and again
         * whenever the Node is seen without it. */
        t->managed.pending = true;
        csi_client_set_registration_callbacks(m->csi,
                                              &(CsiRegistrationCallbacks){ .registered = on_registered,
                                                                           .deregistered = on_deregistered,
                                                                           .failed = on_registration_failed },
                                              m);
        return 0;
}

void drivers_start(VolumeManager *m) {
        if (m->drivers)
                sync_node(m->drivers);
}

void drivers_free(VolumeManager *m) {
        DriverTable *t = m->drivers;
        void *v;

        if (!t)
                return;
        if (m->csi)
                csi_client_set_registration_callbacks(m->csi, &(CsiRegistrationCallbacks){}, NULL);
        /* The API client is freed after us without running the loop again:
         * no callback of a write in flight can come. */
        while (t->writes)
                write_ctx_free(t->writes);
        for (size_t i = 0; t->records && hashmap_iterate(t->records, &i, NULL, &v);)
                record_free(v);
        hashmap_free(t->records);
        k8s_string_map_done(&t->labels_to_remove);
        k8s_string_map_done(&t->labels_sending_removal);
        sd_event_source_disable_unref(t->retry_timer);
        limits_free(t);
        free(t->node_uid);
        free(t);
        m->drivers = NULL;
}
