/* SPDX-License-Identifier: Apache-2.0 */
/* Recovery in slices.  A relist after an outage, a restart or a driver that
 * registers again can make thousands of operations due at once; started in
 * one pass they were written, synced and queued in one dispatch (the loop
 * deaf for seconds: /healthz unanswered) and all held in memory at once.
 * Here a pass starts at most RECONCILE_SLICE operations, and never more
 * than max_pending per driver are started and unfinished (the CSI client
 * runs max-parallel of them; the rest keep its pipe full).  What a pass
 * could not start is remembered by name in a FIFO, not as operations: the
 * pod or volume goes back to the dirty sets RECONCILE_SLICE at a time, in
 * the order it was held back, so that a driver at its limit does not starve
 * another.  Memory is bounded by the names (at most one entry per pod and
 * per volume of the node), whatever the due work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "systemd/log.h"
#include "volume/internal.h"

typedef struct Held {
        char *pod_uid;     /* NULL: the volume alone */
        char *unique_name;
} Held;

struct SliceQueue {
        Held *items;
        size_t head, n, allocated; /* ring buffer */
        Hashmap *keys;             /* "p:<uid>" / "v:<name>" held: one entry each */
        Hashmap *pending;          /* driver → unsigned *: started, not finished */
};

int slices_new(SliceQueue **ret) {
        SliceQueue *q = calloc(1, sizeof *q);

        if (!q)
                return -ENOMEM;
        q->keys = hashmap_new();
        q->pending = hashmap_new();
        if (!q->keys || !q->pending) {
                slices_free(q);
                return -ENOMEM;
        }
        *ret = q;
        return 0;
}

SliceQueue *slices_free(SliceQueue *q) {
        void *value;

        if (!q)
                return NULL;
        for (size_t i = 0; i < q->n; i++) {
                Held *h = &q->items[(q->head + i) % q->allocated];
                free(h->pod_uid);
                free(h->unique_name);
        }
        free(q->items);
        hashmap_free(q->keys);
        for (size_t i = 0; q->pending && hashmap_iterate(q->pending, &i, NULL, &value);)
                free(value);
        hashmap_free(q->pending);
        free(q);
        return NULL;
}

static unsigned *pending_of(SliceQueue *q, const char *driver, bool create) {
        unsigned *p = hashmap_get(q->pending, strempty(driver));

        if (p || !create)
                return p;
        p = calloc(1, sizeof *p);
        if (!p)
                return NULL;
        if (hashmap_put(q->pending, strempty(driver), p, NULL) < 0) {
                free(p);
                return NULL;
        }
        return p;
}

bool slices_room(VolumeManager *m, const char *driver, size_t started_in_pass) {
        unsigned *p;

        if (started_in_pass >= RECONCILE_SLICE)
                return false;
        p = pending_of(m->slices, driver, false);
        return !p || *p < m->max_pending;
}

void slices_started(VolumeManager *m, const char *driver) {
        unsigned *p = pending_of(m->slices, driver, true);
        if (p)
                (*p)++;
}

void slices_finished(VolumeManager *m, const char *driver) {
        unsigned *p = pending_of(m->slices, driver, false);
        if (p && *p > 0)
                (*p)--;
}

unsigned slices_pending(VolumeManager *m, const char *driver) {
        unsigned *p = pending_of(m->slices, driver, false);
        return p ? *p : 0;
}

static int hold_key(SliceQueue *q, const char *prefix, const char *name) {
        _cleanup_free_ char *key = NULL;

        if (asprintf(&key, "%s%s", prefix, name) < 0)
                return -ENOMEM;
        if (hashmap_get(q->keys, key))
                return 0;
        if (hashmap_put(q->keys, key, q, NULL) < 0)
                return -ENOMEM;
        return 1;
}

static int push(SliceQueue *q, const char *pod_uid, const char *unique_name) {
        Held h = {};

        if (q->n == q->allocated) {
                size_t want = q->allocated ? 2 * q->allocated : 64;
                Held *items = calloc(want, sizeof *items);
                if (!items)
                        return -ENOMEM;
                for (size_t i = 0; i < q->n; i++)
                        items[i] = q->items[(q->head + i) % q->allocated];
                free(q->items);
                q->items = items;
                q->head = 0;
                q->allocated = want;
        }
        h.unique_name = strdup(unique_name);
        h.pod_uid = pod_uid ? strdup(pod_uid) : NULL;
        if (!h.unique_name || (pod_uid && !h.pod_uid)) {
                free(h.unique_name);
                free(h.pod_uid);
                return -ENOMEM;
        }
        q->items[(q->head + q->n) % q->allocated] = h;
        q->n++;
        return 0;
}

void slices_defer(VolumeManager *m, const char *unique_name, const char *pod_uid) {
        SliceQueue *q = m->slices;
        int r;

        /* A pod that has an entry is planned whole by a scoped pass (an
         * inline volume is found only through its pod); the volume always,
         * for what no pod wants any more. */
        if (pod_uid && !hashmap_get(m->pod_entries, pod_uid))
                pod_uid = NULL;
        r = hold_key(q, "v:", unique_name);
        if (r >= 0 && pod_uid) {
                int k = hold_key(q, "p:", pod_uid);
                r = k < 0 ? k : MAX(r, k);
        }
        if (r > 0)
                r = push(q, pod_uid, unique_name);
        if (r < 0)
                m->full_pass_wanted = true; /* out of memory: the next pass looks at everything */
}

size_t slices_held(VolumeManager *m) {
        return m->slices->n;
}

size_t slices_release(VolumeManager *m) {
        SliceQueue *q = m->slices;
        size_t n = 0;

        while (q->n > 0 && n < RECONCILE_SLICE) {
                Held h = q->items[q->head];
                _cleanup_free_ char *vkey = NULL, *pkey = NULL;

                q->head = (q->head + 1) % q->allocated;
                q->n--;
                if (asprintf(&vkey, "v:%s", h.unique_name) >= 0)
                        (void) hashmap_remove(q->keys, vkey);
                if (h.pod_uid && asprintf(&pkey, "p:%s", h.pod_uid) >= 0)
                        (void) hashmap_remove(q->keys, pkey);
                if (hashmap_put(m->dirty_volumes, h.unique_name, m, NULL) < 0 ||
                    (h.pod_uid && hashmap_put(m->dirty_pods, h.pod_uid, m, NULL) < 0))
                        m->full_pass_wanted = true;
                free(h.unique_name);
                free(h.pod_uid);
                n++;
        }
        return n;
}
