/* SPDX-License-Identifier: Apache-2.0 */
/* The counts of the status line, kept as things change (VolumeCounts in
 * internal.h).  The volumes' part is applied by actual.c's setters; the
 * pods' part (desired and waiting volumes) here, when a pod's desired state
 * is set and before it changes.  Only "failing" is judged when asked, over
 * the volumes that have a backoff: whether a backoff still matters depends
 * on its pod, which may have gone since.
 *
 * The pod volumes by state (published, pending, failed, tearing-down) are
 * podstate.c's judgement, the one kvolumed_volumes{state}, STATUS=, /volumes
 * and the local API show.  A pod volume's state is judged from its pod (its
 * desired volumes, what was reported to it) and the volume it resolves to
 * (its publishes, stage and backoffs); a publish tearing down from its
 * volume and its pod's desired state.  Whatever changes one of those marks
 * it stale: the pod (manager.c's reports, the desired state here) or the
 * volume (actual.c's setters), and a stale volume makes the pods that want
 * it stale in turn.  A read judges again only what is stale, each pod and
 * volume replacing what it added before: beside 10,000 volumes the walk of
 * every pod volume took 23 ms of the loop once a second while things
 * changed, and a new pod met it (issue 31).  The tests' check compares the
 * result with that walk after every pass (counts_verify()). */
#include "volume/internal.h"

static char present;

int counts_init(VolumeCounts *c) {
        *c = (VolumeCounts){ .with_backoffs = hashmap_new(),
                             .stale_pods = hashmap_new(),
                             .stale_volumes = hashmap_new(),
                             .inline_wanters = hashmap_new() };
        if (!c->with_backoffs || !c->stale_pods || !c->stale_volumes || !c->inline_wanters)
                return -ENOMEM;
        return plugin_counts_init(c);
}

void counts_done(VolumeCounts *c) {
        c->with_backoffs = hashmap_free(c->with_backoffs);
        c->stale_pods = hashmap_free(c->stale_pods);
        c->stale_volumes = hashmap_free(c->stale_volumes);
        c->inline_wanters = hashmap_free(c->inline_wanters);
        plugin_counts_done(c);
}

static void mark(VolumeCounts *c, Hashmap *stale, const char *key) {
        if (c->broken || hashmap_get(stale, key))
                return;
        if (hashmap_put(stale, key, &present, NULL) < 0)
                c->broken = true;
}

void counts_pod_stale(VolumeCounts *c, const char *pod_uid) {
        mark(c, c->stale_pods, pod_uid);
}

void counts_volume_stale(VolumeCounts *c, const char *unique_name) {
        mark(c, c->stale_volumes, unique_name);
}

/* Its publishes tearing down depend on its desired volumes
 * (reconciler_pod_wants()): those volumes are judged again. */
static void pod_volumes_stale(VolumeManager *m, const PodEntry *e) {
        const Hashmap *vols = pod_index_volumes(m->pod_index, e->uid);
        const char *name;

        for (size_t i = 0; hashmap_iterate(vols, &i, &name, NULL);)
                counts_volume_stale(&m->counts, name);
}

static void inline_wanters(VolumeManager *m, PodEntry *e, bool add) {
        for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                const VolumeSpec *s = e->desired->volumes[v].spec;
                if (!s || s->lifecycle == VOLUME_PERSISTENT)
                        continue;
                if (!add) {
                        if (hashmap_get(m->counts.inline_wanters, s->unique_name) == e)
                                (void) hashmap_remove(m->counts.inline_wanters, s->unique_name);
                } else if (hashmap_put(m->counts.inline_wanters, s->unique_name, e, NULL) < 0)
                        m->counts.broken = true;
        }
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
        inline_wanters(m, e, true);
        plugin_counts_pod_noted(&m->counts, e);
        counts_pod_stale(&m->counts, e->uid);
        pod_volumes_stale(m, e);
}

void counts_pod_forgotten(VolumeManager *m, PodEntry *e) {
        m->counts.desired -= e->counted_desired;
        m->counts.waiting -= e->counted_waiting;
        e->counted_desired = e->counted_waiting = 0;
        /* Its volumes leave the states now (the pod may be freed before the
         * next read), and come back when it is judged again. */
        for (size_t s = 0; s < _POD_VOLUME_STATE_MAX; s++) {
                m->counts.by_state[s] -= e->counted_states[s];
                e->counted_states[s] = 0;
        }
        inline_wanters(m, e, false);
        plugin_counts_pod_forgotten(&m->counts, e);
        counts_pod_stale(&m->counts, e->uid);
        pod_volumes_stale(m, e);
}

static void judge_pod(VolumeManager *m, PodEntry *e) {
        unsigned now[_POD_VOLUME_STATE_MAX] = {};

        /* The metrics' part with it (podstate.c reads it at a scrape). */
        free(e->counted_failures);
        if (pod_volumes_judge(m, e, now, &e->counted_failures, &e->n_counted_failures, e->counted_unready) < 0)
                m->counts.broken = true;
        for (size_t s = 0; s < _POD_VOLUME_STATE_MAX; s++) {
                m->counts.by_state[s] += now[s] - e->counted_states[s]; /* unsigned: wraps to the difference */
                e->counted_states[s] = now[s];
        }
}

static void judge_volume(VolumeManager *m, ActualVolume *av) {
        unsigned now = 0;
        void *pub;

        for (size_t i = 0; hashmap_iterate(av->publishes, &i, NULL, &pub);)
                now += describe_publish_tearing_down(m, av, pub);
        m->counts.by_state[POD_VOLUME_TEARING_DOWN] += now - av->counted_tearing_down;
        av->counted_tearing_down = now;
}

/* What is stale judged again: the volumes first, as the pods that want one
 * are judged again with it. */
static void settle(VolumeManager *m) {
        VolumeCounts *c = &m->counts;
        const char *key;

        for (size_t i = 0; hashmap_iterate(c->stale_volumes, &i, &key, NULL);) {
                ActualVolume *av = hashmap_get(m->volumes, key);
                const Hashmap *pods = wanters_of(m, key);
                const PodEntry *e = hashmap_get(c->inline_wanters, key);
                const char *uid;

                if (av)
                        judge_volume(m, av);
                for (size_t j = 0; hashmap_iterate(pods, &j, &uid, NULL);)
                        counts_pod_stale(c, uid);
                if (e)
                        counts_pod_stale(c, e->uid);
                (void) hashmap_remove(c->stale_volumes, key);
        }
        for (size_t i = 0; hashmap_iterate(c->stale_pods, &i, &key, NULL);) {
                PodEntry *e = hashmap_get(m->pod_entries, key);
                if (e)
                        judge_pod(m, e);
                (void) hashmap_remove(c->stale_pods, key);
        }
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
        settle(m);
        for (size_t i = 0; i < _POD_VOLUME_STATE_MAX; i++)
                s->by_state[i] = c->by_state[i];
}

/* Out of memory once, here or in the indexes a stale volume's pods are
 * found with: only a walk can tell. */
static bool counts_broken(VolumeManager *m) {
        return m->counts.broken || m->wanters_broken || pod_index_broken(m->pod_index);
}

bool counts_settle(VolumeManager *m) {
        if (counts_broken(m))
                return false;
        settle(m);
        return !counts_broken(m);
}

bool counts_get(VolumeManager *m, VolumeManagerStats *ret) {
        if (counts_broken(m))
                return false;
        counts_read(m, ret);
        return true;
}

void counts_verify(VolumeManager *m) {
        VolumeManagerStats kept = {}, walked = {};

        if (counts_broken(m))
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
        for (size_t i = 0; i < _POD_VOLUME_STATE_MAX; i++)
                if (kept.by_state[i] != walked.by_state[i])
                        log_error("Incremental pass missed: the count of %s pod volumes is %u, a walk of the "
                                  "node finds %u",
                                  pod_volume_state_to_string(i), kept.by_state[i], walked.by_state[i]);
        podstate_verify_metrics(m);
        plugin_counts_verify(m);
}
