/* SPDX-License-Identifier: Apache-2.0 */
/* Which pods want a persistent volume: an index kept beside the desired
 * state, so that a scoped pass plans a shared volume for the pods that
 * want it instead of walking every pod of the node (measured: the walk was
 * what a pod event cost beside 1,000 pods).  Inline volumes need none: one
 * pod alone wants each.  Kept in step by manager_rebuild_pod() and the
 * pod's deletion, the only places a pod's desired volumes change. */
#include <stdlib.h>

#include "volume/internal.h"

static void for_each_persistent(VolumeManager *m, PodEntry *e, bool add) {
        for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                const VolumeSpec *s = e->desired->volumes[v].spec;
                Hashmap *pods;

                if (!s || s->lifecycle != VOLUME_PERSISTENT)
                        continue;
                pods = hashmap_get(m->wanters, s->unique_name);
                if (!add) {
                        if (!pods)
                                continue;
                        (void) hashmap_remove(pods, e->uid);
                        if (hashmap_size(pods) == 0)
                                hashmap_free(hashmap_remove(m->wanters, s->unique_name));
                        continue;
                }
                if (!pods) {
                        pods = hashmap_new();
                        if (!pods || hashmap_put(m->wanters, s->unique_name, pods, NULL) < 0) {
                                hashmap_free(pods);
                                m->wanters_broken = true;
                                continue;
                        }
                }
                if (hashmap_put(pods, e->uid, m, NULL) < 0)
                        m->wanters_broken = true;
        }
}

void wanters_forget(VolumeManager *m, PodEntry *e) {
        for_each_persistent(m, e, false);
}

void wanters_note(VolumeManager *m, PodEntry *e) {
        for_each_persistent(m, e, true);
}

const Hashmap *wanters_of(VolumeManager *m, const char *unique_name) {
        return hashmap_get(m->wanters, unique_name);
}

void wanters_free_all(VolumeManager *m) {
        void *value;

        for (size_t i = 0; m->wanters && hashmap_iterate(m->wanters, &i, NULL, &value);)
                hashmap_free(value);
        m->wanters = hashmap_free(m->wanters);
}
