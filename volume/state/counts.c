/* SPDX-License-Identifier: Apache-2.0 */
/* The counts of the status line, kept as things change (VolumeCounts in
 * internal.h).  The volumes' part is applied by actual.c's setters; the
 * pods' part (desired and waiting volumes) here, when a pod's desired state
 * is set and before it changes.  Only "failing" is judged when asked, over
 * the volumes that have a backoff: whether a backoff still matters depends
 * on its pod, which may have gone since. */
#include "volume/internal.h"

int counts_init(VolumeCounts *c) {
        *c = (VolumeCounts){ .with_backoffs = hashmap_new() };
        return c->with_backoffs ? 0 : -ENOMEM;
}

void counts_done(VolumeCounts *c) {
        c->with_backoffs = hashmap_free(c->with_backoffs);
}

static void pod_counts(const PodEntry *e, unsigned *ret_desired, unsigned *ret_waiting) {
        unsigned desired = 0, waiting = 0;

        for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                desired++;
                waiting += !e->desired->volumes[v].spec;
        }
        *ret_desired = desired;
        *ret_waiting = waiting;
}

void counts_pod_noted(VolumeManager *m, PodEntry *e) {
        counts_pod_forgotten(m, e); /* a note not paired with a forget counts once */
        /* Since when its volumes are wanted: the age of an unready one. */
        if (e->desired && e->wanted_since == 0)
                (void) sd_event_now(m->event, CLOCK_MONOTONIC, &e->wanted_since);
        pod_counts(e, &e->counted_desired, &e->counted_waiting);
        m->counts.desired += e->counted_desired;
        m->counts.waiting += e->counted_waiting;
}

void counts_pod_forgotten(VolumeManager *m, PodEntry *e) {
        m->counts.desired -= e->counted_desired;
        m->counts.waiting -= e->counted_waiting;
        e->counted_desired = e->counted_waiting = 0;
}

/* What the counts say, against what a walk says: the walk is
 * volume_manager_get_stats()'s. */
static void counts_read(VolumeManager *m, VolumeManagerStats *s) {
        const VolumeCounts *c = &m->counts;
        void *value;

        s->desired = c->desired;
        s->waiting = c->waiting;
        s->published = c->published;
        s->uncertain = c->uncertain;
        s->staged = c->staged;
        s->attach_waiting = c->attach_waiting;
        s->unresponsive = c->unresponsive;
        s->mounts_pending = c->mounts_pending;
        s->failing = 0;
        for (size_t i = 0; hashmap_iterate(c->with_backoffs, &i, NULL, &value);)
                s->failing += describe_volume_failing(m, value);
}

bool counts_get(VolumeManager *m, VolumeManagerStats *ret) {
        if (m->counts.broken)
                return false;
        counts_read(m, ret);
        return true;
}

void counts_verify(VolumeManager *m) {
        VolumeManagerStats kept = {}, walked = {};

        if (m->counts.broken)
                return;
        counts_read(m, &kept);
        volume_manager_get_stats(m, &walked);
#define CHECK(field)                                                                                               \
        if (kept.field != walked.field)                                                                          \
        log_error("Incremental pass missed: the status count " #field " is %u, a walk of the node finds %u",     \
                  kept.field, walked.field)
        CHECK(desired);
        CHECK(waiting);
        CHECK(published);
        CHECK(uncertain);
        CHECK(staged);
        CHECK(attach_waiting);
        CHECK(unresponsive);
        CHECK(mounts_pending);
        CHECK(failing);
#undef CHECK
}
