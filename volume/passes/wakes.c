/* SPDX-License-Identifier: Apache-2.0 */
/* When the reconciler must look at a volume again: a backoff running out,
 * a warning or a report coming due, a republish, and (with no volume) a
 * volumesInUse patch to retry.  The retry timer used to start a full pass
 * over every pod and volume whenever any of them came due (issue 23): now
 * the pass it starts is scoped to the volumes, and the pods, whose wake
 * came.  Each wake is keyed by volume and pod and holds its earliest due
 * time; a heap orders them, entries whose key's time changed being
 * skipped when they come up.  A full pass notes every wake again, so it
 * begins by forgetting them all: the heap stays as large as what is
 * pending.  Out of memory once, a wake may be lost: the set is "broken"
 * until the next full pass, and meanwhile a retry coming due takes a full
 * pass, as before. */
#include <stdio.h>
#include <stdlib.h>

#include "volume/internal.h"

typedef struct Wake {
        uint64_t due;
        char *key; /* "<unique name>\n<pod UID>", "<unique name>\n", or "" for volumesInUse */
} Wake;

struct Wakes {
        Hashmap *due;   /* key → uint64_t * (its earliest due time) */
        Wake *heap;     /* a binary min-heap on due */
        size_t n, allocated;
        bool broken;
};

int wakes_new(Wakes **ret) {
        Wakes *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->due = hashmap_new();
        if (!w->due) {
                free(w);
                return -ENOMEM;
        }
        *ret = w;
        return 0;
}

static void forget_all(Wakes *w) {
        const char *key;
        void *value;

        for (size_t i = 0; hashmap_iterate(w->due, &i, &key, &value);) {
                (void) hashmap_remove(w->due, key);
                free(value);
        }
        for (size_t i = 0; i < w->n; i++)
                free(w->heap[i].key);
        w->n = 0;
}

Wakes *wakes_free(Wakes *w) {
        if (!w)
                return NULL;
        forget_all(w);
        hashmap_free(w->due);
        free(w->heap);
        free(w);
        return NULL;
}

static void swap(Wake *a, Wake *b) {
        Wake t = *a;
        *a = *b;
        *b = t;
}

static int heap_push(Wakes *w, uint64_t due, const char *key) {
        size_t i;

        if (w->n == w->allocated) {
                size_t want = w->allocated ? 2 * w->allocated : 64;
                Wake *h = reallocarray(w->heap, want, sizeof *h);
                if (!h)
                        return -ENOMEM;
                w->heap = h;
                w->allocated = want;
        }
        w->heap[w->n] = (Wake){ .due = due, .key = strdup(key) };
        if (!w->heap[w->n].key)
                return -ENOMEM;
        for (i = w->n++; i > 0 && w->heap[(i - 1) / 2].due > w->heap[i].due; i = (i - 1) / 2)
                swap(&w->heap[(i - 1) / 2], &w->heap[i]);
        return 0;
}

/* Takes the earliest entry off; the caller frees its key. */
static Wake heap_pop(Wakes *w) {
        Wake top = w->heap[0];
        size_t i = 0;

        w->heap[0] = w->heap[--w->n];
        for (;;) {
                size_t l = 2 * i + 1, r = l + 1, min = i;
                if (l < w->n && w->heap[l].due < w->heap[min].due)
                        min = l;
                if (r < w->n && w->heap[r].due < w->heap[min].due)
                        min = r;
                if (min == i)
                        break;
                swap(&w->heap[i], &w->heap[min]);
                i = min;
        }
        return top;
}

void wakes_note(VolumeManager *m, const char *unique_name, const char *pod_uid, uint64_t when) {
        Wakes *w = m->wakes;
        _cleanup_free_ char *key = NULL;
        uint64_t *due;

        if (when == 0 || when == UINT64_MAX || w->broken)
                return;
        if (asprintf(&key, "%s%s%s", strempty(unique_name), unique_name ? "\n" : "", strempty(pod_uid)) < 0)
                goto broken;
        due = hashmap_get(w->due, key);
        if (due && *due <= when)
                return; /* woken earlier already: that pass notes it again */
        if (!due) {
                due = malloc(sizeof *due);
                if (!due || hashmap_put(w->due, key, due, NULL) < 0) {
                        free(due);
                        goto broken;
                }
        }
        *due = when;
        if (heap_push(w, when, key) < 0)
                goto broken;
        return;
broken:
        w->broken = true;
}

void wakes_clear(VolumeManager *m) {
        forget_all(m->wakes);
        m->wakes->broken = false;
}

bool wakes_broken(VolumeManager *m) {
        return m->wakes->broken;
}

uint64_t wakes_next(VolumeManager *m) {
        Wakes *w = m->wakes;

        /* Entries whose key was lowered since (or released) are dropped here. */
        while (w->n > 0) {
                uint64_t *due = hashmap_get(w->due, w->heap[0].key);
                if (due && *due == w->heap[0].due)
                        return w->heap[0].due;
                free(heap_pop(w).key);
        }
        return UINT64_MAX;
}

size_t wakes_release(VolumeManager *m, uint64_t now) {
        Wakes *w = m->wakes;
        size_t n = 0;

        while (wakes_next(m) <= now) {
                _cleanup_free_ char *key = heap_pop(w).key;
                char *nl = strrchr(key, '\n'); /* pod UIDs have none; a handle might */

                free(hashmap_remove(w->due, key));
                n++;
                if (!nl) {
                        m->in_use_dirty = true; /* the volumesInUse retry */
                        continue;
                }
                *nl = '\0';
                if (hashmap_put(m->dirty_volumes, key, m, NULL) < 0 ||
                    (nl[1] && hashmap_put(m->dirty_pods, nl + 1, m, NULL) < 0))
                        m->full_pass_wanted = true;
        }
        return n;
}
