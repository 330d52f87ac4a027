/* SPDX-License-Identifier: Apache-2.0 */
/* Which volumes each pod has on the node: a publish, or a publish or
 * unpublish in flight.  A pod gone from the API leaves only that behind,
 * and a mount point that changed names its pod; both used to be found by a
 * walk over every volume of the node (issue 23).  Derived from the truth
 * after each change instead of counted: actual.c calls pod_index_sync()
 * after every change of a volume's publishes or operations, and the
 * manager adds and removes whole volumes, so that an entry says exactly
 * what the volume's own maps say.  Out of memory once, the index is
 * broken for good and its users walk, as before. */
#include <stdlib.h>

#include "volume/internal.h"

struct PodIndex {
        Hashmap *pods; /* pod UID → Hashmap: the volume's unique_name → non-NULL */
        bool broken;
};

static char present;

int pod_index_new(PodIndex **ret) {
        PodIndex *x = calloc(1, sizeof *x);
        if (!x)
                return -ENOMEM;
        x->pods = hashmap_new();
        if (!x->pods) {
                free(x);
                return -ENOMEM;
        }
        *ret = x;
        return 0;
}

PodIndex *pod_index_free(PodIndex *x) {
        void *value;

        if (!x)
                return NULL;
        for (size_t i = 0; hashmap_iterate(x->pods, &i, NULL, &value);)
                hashmap_free(value);
        hashmap_free(x->pods);
        free(x);
        return NULL;
}

static bool has_pod(const ActualVolume *av, const char *pod_uid) {
        return hashmap_get(av->publishes, pod_uid) || hashmap_get(av->pod_ops, pod_uid);
}

static void drop(PodIndex *x, const char *unique_name, const char *pod_uid) {
        Hashmap *vols = hashmap_get(x->pods, pod_uid);
        if (!vols)
                return;
        (void) hashmap_remove(vols, unique_name);
        if (hashmap_size(vols) == 0)
                hashmap_free(hashmap_remove(x->pods, pod_uid));
}

static void add(PodIndex *x, const ActualVolume *av, const char *pod_uid) {
        Hashmap *vols = hashmap_get(x->pods, pod_uid);

        if (!vols) {
                /* Keyed by the volume's own unique name: a volume leaves the
                 * index (pod_index_remove_volume) before it is freed. */
                vols = hashmap_new_borrowing();
                if (!vols || hashmap_put(x->pods, pod_uid, vols, NULL) < 0) {
                        hashmap_free(vols);
                        x->broken = true;
                        return;
                }
        }
        if (hashmap_put(vols, av->unique_name, &present, NULL) < 0)
                x->broken = true;
}

void pod_index_sync(PodIndex *x, const ActualVolume *av, const char *pod_uid) {
        if (!x || !pod_uid)
                return;
        if (has_pod(av, pod_uid))
                add(x, av, pod_uid);
        else
                drop(x, av->unique_name, pod_uid);
}

void pod_index_add_volume(PodIndex *x, const ActualVolume *av) {
        const char *uid;

        for (size_t i = 0; hashmap_iterate(av->publishes, &i, &uid, NULL);)
                add(x, av, uid);
        for (size_t i = 0; hashmap_iterate(av->pod_ops, &i, &uid, NULL);)
                add(x, av, uid);
}

void pod_index_remove_volume(PodIndex *x, const ActualVolume *av) {
        const char *uid;

        for (size_t i = 0; hashmap_iterate(av->publishes, &i, &uid, NULL);)
                drop(x, av->unique_name, uid);
        for (size_t i = 0; hashmap_iterate(av->pod_ops, &i, &uid, NULL);)
                drop(x, av->unique_name, uid);
}

bool pod_index_broken(const PodIndex *x) {
        return !x || x->broken;
}

const Hashmap *pod_index_volumes(const PodIndex *x, const char *pod_uid) {
        return hashmap_get(x->pods, pod_uid);
}

bool pod_index_agrees(const PodIndex *x, const Hashmap *volumes) {
        const char *uid, *name;
        void *value;
        size_t entries = 0, expected = 0;

        if (x->broken)
                return true; /* not used */
        /* Every entry names a volume that has the pod ... */
        for (size_t i = 0; hashmap_iterate(x->pods, &i, &uid, &value);)
                for (size_t j = 0; hashmap_iterate(value, &j, &name, NULL);) {
                        const ActualVolume *av = hashmap_get(volumes, name);
                        if (!av || !has_pod(av, uid))
                                return false;
                        entries++;
                }
        /* ... and every pod a volume has is an entry (as many as there are). */
        for (size_t i = 0; hashmap_iterate(volumes, &i, &name, &value);) {
                const ActualVolume *av = value;
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, &uid, NULL);)
                        expected++;
                for (size_t j = 0; hashmap_iterate(av->pod_ops, &j, &uid, NULL);)
                        expected += !hashmap_get(av->publishes, uid);
        }
        return entries == expected;
}
