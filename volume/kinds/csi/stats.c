/* SPDX-License-Identifier: Apache-2.0 */
/* Volume stats for kubelet_volume_stats_*: NodeGetVolumeStats of each
 * published volume of a PVC, per driver in rounds.  kubelet computes its
 * volume stats per pod on a fixed period, all in parallel, and with 1,000
 * pods that alone drove a node's load to 178 (kubernetes#103728); here each
 * driver has one round at a time, at most VOLUME_STATS_MAX_IN_FLIGHT calls
 * of it in flight, each with a short deadline, and the next round is only
 * scheduled once the last one ended, an interval later, jittered.  The calls
 * go through a limit of their own in the CSI client: nothing here can take
 * the place of a stage or publish.
 *
 * Also the counts read at scrape time (volume_manager_total_volumes, the
 * watch restarts): they read the manager's state, and live here so that the
 * manager's own files stay about volumes. */
#include <stdio.h>
#include <stdlib.h>

#include "k8s/backoff.h"
#include "systemd/log.h"
#include "volume/host/paths.h"
#include "volume/internal.h"

/* Rounds start within this of a driver being seen: soon, but not in
 * lockstep with the publishes that made it appear. */
#define FIRST_ROUND_SPREAD_USEC (2 * USEC_PER_SEC)

typedef struct StatsDriver StatsDriver;

typedef struct StatsEntry {
        StatsDriver *driver;
        char *unique_name;
        char *pod_uid;
        char *pod_key;
        char *spec_name;
        char *handle;
        char *target;  /* absolute */
        char *namespace;
        char *claim;
        unsigned generation; /* the last round that listed it */
        CsiCall *call;
        bool has_sample;
        VolumeStatsSample sample; /* its strings point into this entry */
} StatsEntry;

struct StatsDriver {
        VolumeStats *stats;
        char *name;
        Hashmap *entries;   /* unique name + "\n" + pod UID → StatsEntry */
        StatsEntry **queue; /* this round's work, in order */
        size_t n_queue, next;
        unsigned in_flight;
        unsigned generation;
        bool round_running;
        CsiCall *caps_call;
        sd_event_source *timer;
};

struct VolumeStats {
        VolumeManager *m;
        uint64_t interval_usec;
        uint64_t timeout_usec;
        Hashmap *drivers; /* name → StatsDriver */
        sd_event_source *discover_timer;
        bool stopped;
};

static uint64_t jittered(uint64_t interval) {
        /* ±10 %: drivers, and agents restarted together, drift apart. */
        return interval - interval / 10 + (uint64_t) ((double) (interval / 5) * k8s_random01());
}

static uint64_t now_usec(VolumeStats *s) {
        uint64_t now = 0;
        (void) sd_event_now(s->m->event, CLOCK_MONOTONIC, &now);
        return now;
}

/* ---- entries ------------------------------------------------------------------- */

static StatsEntry *entry_free(StatsEntry *e) {
        if (!e)
                return NULL;
        csi_call_cancel(e->call);
        free(e->unique_name);
        free(e->pod_uid);
        free(e->pod_key);
        free(e->spec_name);
        free(e->handle);
        free(e->target);
        free(e->namespace);
        free(e->claim);
        free(e);
        return NULL;
}

static char *entry_key(const char *unique_name, const char *pod_uid) {
        char *key = NULL;
        return asprintf(&key, "%s\n%s", unique_name, pod_uid) < 0 ? NULL : key;
}

static void entry_remove(StatsDriver *d, StatsEntry *e) {
        _cleanup_free_ char *key = entry_key(e->unique_name, e->pod_uid);
        if (key)
                (void) hashmap_remove(d->entries, key);
        if (e->call)
                d->in_flight--;
        entry_free(e);
}

/* The claim a pod's publish of a persistent volume comes from: kubelet
 * labels stats with it, and exports none for a volume without one.  A
 * generic ephemeral volume's claim is "<pod>-<volume>". */
static int resolve_claim(VolumeManager *m, const ActualVolume *av, const ActualPublish *pub,
                         char **ret_namespace, char **ret_claim) {
        PodEntry *e = hashmap_get(m->pod_entries, pub->pod_uid);
        const K8sPod *pod;
        const char *name = NULL;

        *ret_namespace = *ret_claim = NULL;
        if (!e || !e->desired)
                return 0;
        pod = k8s_informer_get(m->pods, e->namespace, e->name);
        if (!pod || !streq_ptr(pod->meta.uid, e->uid))
                return 0;
        for (size_t v = 0; v < e->desired->n_volumes && !name; v++) {
                const DesiredVolume *dv = &e->desired->volumes[v];
                if (dv->spec && streq(dv->spec->unique_name, av->unique_name) &&
                    streq_ptr(dv->spec->spec_name, pub->spec_name))
                        name = dv->name;
        }
        for (size_t v = 0; name && v < pod->n_volumes; v++) {
                const K8sPodVolume *pv = &pod->volumes[v];
                if (!streq_ptr(pv->name, name))
                        continue;
                if (pv->claim_name)
                        *ret_claim = strdup(pv->claim_name);
                else if (pv->ephemeral && asprintf(ret_claim, "%s-%s", pod->meta.name, pv->name) < 0)
                        *ret_claim = NULL;
                else if (!pv->ephemeral)
                        return 0;
                if (!*ret_claim)
                        return -ENOMEM;
                *ret_namespace = strdup(strempty(pod->meta.namespace));
                if (!*ret_namespace) {
                        *ret_claim = mfree_str(*ret_claim);
                        return -ENOMEM;
                }
                return 1;
        }
        return 0;
}

/* Finds or makes the entry of one publish and brings its paths and labels
 * up to date; NULL when it is not to be sampled (no claim) or on ENOMEM. */
static StatsEntry *entry_update(StatsDriver *d, const ActualVolume *av, const ActualPublish *pub) {
        VolumeManager *m = d->stats->m;
        _cleanup_free_ char *key = NULL, *namespace = NULL, *claim = NULL, *target = NULL;
        StatsEntry *e;

        if (resolve_claim(m, av, pub, &namespace, &claim) <= 0)
                return NULL;
        if (asprintf(&target, "%s/%s", m->root->path, pub->target) < 0)
                return NULL;
        key = entry_key(av->unique_name, pub->pod_uid);
        if (!key)
                return NULL;
        e = hashmap_get(d->entries, key);
        if (!e) {
                e = calloc(1, sizeof *e);
                if (!e)
                        return NULL;
                e->driver = d;
                e->unique_name = strdup(av->unique_name);
                e->pod_uid = strdup(pub->pod_uid);
                e->pod_key = strdup(strempty(pub->pod_key));
                e->spec_name = strdup(strempty(pub->spec_name));
                e->handle = strdup(av->handle);
                if (!e->unique_name || !e->pod_uid || !e->pod_key || !e->spec_name || !e->handle ||
                    hashmap_put(d->entries, key, e, NULL) < 0)
                        return entry_free(e);
        }
        free(e->target);
        e->target = TAKE_PTR(target);
        free(e->namespace);
        e->namespace = TAKE_PTR(namespace);
        free(e->claim);
        e->claim = TAKE_PTR(claim);
        e->sample.namespace = e->namespace;
        e->sample.claim = e->claim;
        e->sample.driver = d->name;
        return e;
}

/* ---- rounds -------------------------------------------------------------------- */

static void round_start(StatsDriver *d);
static bool driver_has(VolumeManager *m, const char *driver, CsiNodeCapability cap, bool *ret_known);

static void round_end(StatsDriver *d) {
        VolumeStats *s = d->stats;
        LogFields f = { .driver = d->name, .csi_method = "NodeGetVolumeStats" };
        bool known;

        if (d->round_running) {
                if (driver_has(s->m, d->name, CSI_NODE_CAP_GET_VOLUME_STATS, &known))
                        log_fields(LOG_DEBUG, &f, "Volume stats round of driver %s done: %zu volumes",
                                   d->name, d->n_queue);
                else
                        log_fields(LOG_DEBUG, &f, "Volume stats round of driver %s: %s", d->name,
                                   known ? "it has no GET_VOLUME_STATS capability, not asked"
                                         : "its capabilities are unknown");
        }
        d->round_running = false;
        free(d->queue);
        d->queue = NULL;
        d->n_queue = d->next = 0;
        if (s->stopped || s->interval_usec == 0)
                return;
        (void) sd_event_source_set_time(d->timer, now_usec(s) + jittered(s->interval_usec));
        (void) sd_event_source_set_enabled(d->timer, SD_EVENT_ONESHOT);
}

static void usage_apply(StatsEntry *e, const CsiVolumeStats *st, bool condition_capable) {
        VolumeStatsSample *x = &e->sample;

        x->has_bytes = x->has_inodes = false;
        for (size_t i = 0; i < st->n_usage; i++) {
                const CsiVolumeUsage *u = &st->usage[i];
                /* As kubelet's csi metrics: available, total and used as given. */
                if (u->unit == CSI_VOLUME_USAGE_BYTES) {
                        x->has_bytes = true;
                        x->available_bytes = u->available;
                        x->capacity_bytes = u->total;
                        x->used_bytes = u->used;
                } else if (u->unit == CSI_VOLUME_USAGE_INODES) {
                        x->has_inodes = true;
                        x->inodes_free = u->available;
                        x->inodes = u->total;
                        x->inodes_used = u->used;
                }
        }
        /* As kubelet: the condition counts only from a driver that says it has one. */
        x->has_condition = condition_capable && st->has_condition;
        x->abnormal = x->has_condition && st->abnormal;
        e->has_sample = x->has_bytes || x->has_inodes || x->has_condition;
}

static void pump(StatsDriver *d);

static void on_volume_stats(const CsiStatus *status, const CsiVolumeStats *st, void *userdata) {
        StatsEntry *e = userdata;
        StatsDriver *d = e->driver;
        bool known, was_abnormal = e->has_sample && e->sample.abnormal;
        LogFields f = { .pod_uid = e->pod_uid,
                        .pod = e->pod_key,
                        .volume = e->spec_name,
                        .driver = d->name,
                        .volume_handle = e->handle,
                        .csi_method = "NodeGetVolumeStats",
                        .csi_code = csi_code_name(status->code) };

        e->call = NULL;
        d->in_flight--;
        if (st)
                usage_apply(e, st, driver_has(d->stats->m, d->name, CSI_NODE_CAP_VOLUME_CONDITION, &known));
        else {
                /* Numbers that can no longer be confirmed are not exported:
                 * a scraper sees the series go, as with kubelet. */
                e->has_sample = false;
                log_fields(LOG_DEBUG, &f, "No stats for volume %s of pod %s this round", e->spec_name,
                           e->pod_key);
        }
        /* Said when it turns abnormal, not every round. */
        if (e->has_sample && e->sample.abnormal && !was_abnormal)
                log_fields(LOG_WARNING, &f, "Volume %s of pod %s is abnormal: %s", e->spec_name, e->pod_key,
                           st ? strempty(st->condition_message) : "");
        pump(d);
}

/* Starts calls up to the limit; ends the round once nothing is left. */
static void pump(StatsDriver *d) {
        VolumeStats *s = d->stats;

        while (!s->stopped && d->in_flight < VOLUME_STATS_MAX_IN_FLIGHT && d->next < d->n_queue) {
                StatsEntry *e = d->queue[d->next++];
                LogFields f = { .pod_uid = e->pod_uid,
                                .pod = e->pod_key,
                                .volume = e->spec_name,
                                .driver = d->name,
                                .volume_handle = e->handle,
                                .csi_method = "NodeGetVolumeStats" };
                int r;

                if (e->call)
                        continue; /* still running from before (cannot be: rounds do not overlap) */
                /* Not beside a stage, publish or unpublish of the volume: many
                 * drivers answer a second call for a volume ID with ABORTED,
                 * and the mount call must not be the one refused.  Its numbers
                 * wait for the next round. */
                const ActualVolume *av = hashmap_get(s->m->volumes, e->unique_name);
                if (!av || actual_volume_busy(av))
                        continue;
                r = csi_node_get_volume_stats(
                        s->m->csi, d->name,
                        &(CsiNodeGetVolumeStatsRequest){ .volume_id = e->handle,
                                                         .volume_path = e->target,
                                                         /* kubelet sends no staging path
                                                          * (csi_client.go NodeGetVolumeStats) */
                                                         .timeout_usec = s->timeout_usec },
                        on_volume_stats, e, &e->call);
                if (r < 0) {
                        e->has_sample = false;
                        log_fields(LOG_DEBUG, &f, "Cannot ask the stats of volume %s of pod %s: %s",
                                   e->spec_name, e->pod_key, strerror(-r));
                        continue;
                }
                d->in_flight++;
        }
        if (d->round_running && d->in_flight == 0 && d->next >= d->n_queue)
                round_end(d);
}

static bool driver_has(VolumeManager *m, const char *driver, CsiNodeCapability cap, bool *ret_known) {
        const DriverCaps *dc = hashmap_get(m->caps, driver);
        *ret_known = dc && dc->known;
        return *ret_known && csi_node_capabilities_has(&dc->caps, cap);
}

static void drop_entries(StatsDriver *d) {
        void *value;
        for (size_t i = 0; hashmap_iterate(d->entries, &i, NULL, &value);)
                entry_free(value);
        hashmap_free(d->entries);
        d->entries = hashmap_new();
        d->in_flight = 0;
}

/* Lists this round's work: every published volume of a claim. */
static void round_plan(StatsDriver *d) {
        VolumeManager *m = d->stats->m;
        void *value, *pv;
        size_t n = 0;

        d->generation++;
        /* Every kind's volumes are in m->volumes; those without a driver
         * (emptyDir, configMap, ...) have NULL there. */
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                if (streq_ptr(av->driver, d->name))
                        n += hashmap_size(av->publishes);
        }
        d->queue = n > 0 ? calloc(n, sizeof *d->queue) : NULL;
        for (size_t i = 0; d->queue && hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                if (!streq_ptr(av->driver, d->name) || av->lifecycle != VOLUME_PERSISTENT)
                        continue;
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);) {
                        ActualPublish *pub = pv;
                        StatsEntry *e;
                        if (pub->state != PUBLISH_DONE || pub->stale || d->n_queue >= n)
                                continue;
                        e = entry_update(d, av, pub);
                        if (!e)
                                continue;
                        e->generation = d->generation;
                        d->queue[d->n_queue++] = e;
                }
        }
        /* Publishes gone since the last round take their samples along. */
        for (size_t i = 0; hashmap_iterate(d->entries, &i, NULL, &value);) {
                StatsEntry *e = value;
                if (e->generation != d->generation)
                        entry_remove(d, e);
        }
}

static void round_continue(StatsDriver *d) {
        VolumeManager *m = d->stats->m;
        bool known;

        if (!driver_has(m, d->name, CSI_NODE_CAP_GET_VOLUME_STATS, &known)) {
                /* Never asked of a driver that does not offer it. */
                drop_entries(d);
                round_end(d);
                return;
        }
        round_plan(d);
        pump(d);
}

static void on_capabilities(const CsiStatus *status, const CsiNodeCapabilities *caps, void *userdata) {
        StatsDriver *d = userdata;
        VolumeManager *m = d->stats->m;
        DriverCaps *dc;

        d->caps_call = NULL;
        if (!caps) {
                round_end(d);
                return;
        }
        /* The manager's cache: its operations will not ask again. */
        dc = hashmap_get(m->caps, d->name);
        if (!dc) {
                dc = calloc(1, sizeof *dc);
                if (dc && hashmap_put(m->caps, d->name, dc, NULL) < 0) {
                        free(dc);
                        dc = NULL;
                }
        }
        if (!dc) {
                round_end(d);
                return;
        }
        dc->known = true;
        dc->caps = *caps;
        round_continue(d);
}

static void round_start(StatsDriver *d) {
        VolumeManager *m = d->stats->m;
        bool known;
        int r;

        if (d->round_running || d->stats->stopped)
                return;
        if (m->root_lost) {
                /* Its paths would name what is at root-dir's path now (rootwatch.c): the next round. */
                round_end(d);
                return;
        }
        d->round_running = true;
        (void) driver_has(m, d->name, CSI_NODE_CAP_GET_VOLUME_STATS, &known);
        if (known) {
                round_continue(d);
                return;
        }
        /* Volumes found at start-up, before any operation asked. */
        r = csi_node_get_capabilities(m->csi, d->name, on_capabilities, d, &d->caps_call);
        if (r < 0) {
                LogFields f = { .driver = d->name, .csi_method = "NodeGetCapabilities" };
                log_fields(LOG_DEBUG, &f, "No volume stats from driver %s this round: %s", d->name,
                           strerror(-r));
                round_end(d);
        }
}

static int on_driver_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        round_start(userdata);
        return 0;
}

/* ---- drivers ------------------------------------------------------------------- */

static StatsDriver *stats_driver_free(StatsDriver *d) {
        void *value;

        if (!d)
                return NULL;
        csi_call_cancel(d->caps_call);
        for (size_t i = 0; hashmap_iterate(d->entries, &i, NULL, &value);)
                entry_free(value);
        hashmap_free(d->entries);
        free(d->queue);
        sd_event_source_disable_unref(d->timer);
        free(d->name);
        free(d);
        return NULL;
}

static StatsDriver *stats_driver_new(VolumeStats *s, const char *name) {
        StatsDriver *d = calloc(1, sizeof *d);

        if (!d)
                return NULL;
        d->stats = s;
        d->name = strdup(name);
        d->entries = hashmap_new();
        if (!d->name || !d->entries ||
            sd_event_add_time(s->m->event, &d->timer, CLOCK_MONOTONIC,
                              now_usec(s) + (uint64_t) ((double) FIRST_ROUND_SPREAD_USEC * k8s_random01()),
                              USEC_PER_MSEC, on_driver_timer, d) < 0 ||
            hashmap_put(s->drivers, name, d, NULL) < 0)
                return stats_driver_free(d);
        (void) sd_event_source_set_description(d->timer, "volume-stats");
        (void) sd_event_source_set_enabled(d->timer, SD_EVENT_ONESHOT);
        return d;
}

/* New drivers with persistent volumes get their rounds; drivers with none
 * left, and no round running, are forgotten. */
static int on_discover(sd_event_source *source, uint64_t usec, void *userdata) {
        VolumeStats *s = userdata;
        VolumeManager *m = s->m;
        void *value;

        if (s->stopped || s->interval_usec == 0)
                return 0;
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                /* A CSI driver's: a local PV is persistent too, without one. */
                if (av->driver && av->lifecycle == VOLUME_PERSISTENT && hashmap_size(av->publishes) > 0 &&
                    !hashmap_get(s->drivers, av->driver))
                        (void) stats_driver_new(s, av->driver);
        }
        for (size_t i = 0; hashmap_iterate(s->drivers, &i, NULL, &value);) {
                StatsDriver *d = value;
                bool used = false;
                void *v;
                if (d->round_running || hashmap_size(d->entries) > 0)
                        continue;
                for (size_t j = 0; !used && hashmap_iterate(m->volumes, &j, NULL, &v);)
                        used = streq_ptr(((ActualVolume *) v)->driver, d->name);
                if (!used)
                        stats_driver_free(hashmap_remove(s->drivers, d->name));
        }
        /* Once an interval: an idle node must stay idle.  A new driver's
         * volumes wait at most that long for their first round. */
        (void) sd_event_source_set_time(source, now_usec(s) + jittered(s->interval_usec));
        (void) sd_event_source_set_enabled(source, SD_EVENT_ONESHOT);
        return 0;
}

static void stats_clear(VolumeStats *s) {
        void *value;
        for (size_t i = 0; hashmap_iterate(s->drivers, &i, NULL, &value);)
                stats_driver_free(value);
        hashmap_free(s->drivers);
        s->drivers = hashmap_new();
}

int volume_stats_new(VolumeManager *m, uint64_t interval_usec, uint64_t timeout_usec, VolumeStats **ret) {
        _cleanup_(volume_stats_freep) VolumeStats *s = NULL;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->m = m;
        s->interval_usec = interval_usec;
        s->timeout_usec = timeout_usec ?: VOLUME_STATS_DEFAULT_TIMEOUT_USEC;
        s->drivers = hashmap_new();
        if (!s->drivers)
                return -ENOMEM;
        /* The first round an interval after the start, not amid the burst of
         * publishes a start brings. */
        r = sd_event_add_time(m->event, &s->discover_timer, CLOCK_MONOTONIC,
                              now_usec(s) + (interval_usec > 0 ? jittered(interval_usec) : 0), USEC_PER_MSEC,
                              on_discover, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(s->discover_timer, "volume-stats-discover");
        (void) sd_event_source_set_enabled(s->discover_timer,
                                           interval_usec > 0 ? SD_EVENT_ONESHOT : SD_EVENT_OFF);
        *ret = TAKE_PTR(s);
        return 0;
}

VolumeStats *volume_stats_free(VolumeStats *s) {
        void *value;

        if (!s)
                return NULL;
        for (size_t i = 0; hashmap_iterate(s->drivers, &i, NULL, &value);)
                stats_driver_free(value);
        hashmap_free(s->drivers);
        sd_event_source_disable_unref(s->discover_timer);
        free(s);
        return NULL;
}

void volume_stats_set_interval(VolumeStats *s, uint64_t interval_usec, uint64_t timeout_usec) {
        if (!s)
                return;
        s->timeout_usec = timeout_usec ?: VOLUME_STATS_DEFAULT_TIMEOUT_USEC;
        if (s->interval_usec == interval_usec)
                return;
        s->interval_usec = interval_usec;
        /* Rounds already scheduled keep their time; the next ones follow. */
        if (interval_usec == 0) {
                stats_clear(s);
                (void) sd_event_source_set_enabled(s->discover_timer, SD_EVENT_OFF);
        } else if (!s->stopped) {
                (void) sd_event_source_set_time(s->discover_timer, now_usec(s));
                (void) sd_event_source_set_enabled(s->discover_timer, SD_EVENT_ONESHOT);
        }
}

void volume_stats_stop(VolumeStats *s) {
        void *value;

        if (!s)
                return;
        s->stopped = true;
        (void) sd_event_source_set_enabled(s->discover_timer, SD_EVENT_OFF);
        for (size_t i = 0; hashmap_iterate(s->drivers, &i, NULL, &value);) {
                StatsDriver *d = value;
                void *v;
                csi_call_cancel(d->caps_call);
                d->caps_call = NULL;
                for (size_t j = 0; hashmap_iterate(d->entries, &j, NULL, &v);) {
                        StatsEntry *e = v;
                        csi_call_cancel(e->call);
                        e->call = NULL;
                }
                d->in_flight = 0;
                d->round_running = false;
                (void) sd_event_source_set_enabled(d->timer, SD_EVENT_OFF);
        }
}

/* ---- reading ------------------------------------------------------------------- */

static bool still_published(VolumeManager *m, const StatsEntry *e) {
        const ActualVolume *av = hashmap_get(m->volumes, e->unique_name);
        const ActualPublish *pub = av ? hashmap_get(av->publishes, e->pod_uid) : NULL;
        return pub && pub->state == PUBLISH_DONE;
}

static int compare_samples(const void *a, const void *b) {
        const StatsEntry *x = *(StatsEntry *const *) a, *y = *(StatsEntry *const *) b;
        int c = strcmp(x->namespace, y->namespace);
        if (c == 0)
                c = strcmp(x->claim, y->claim);
        if (c == 0)
                c = strcmp(x->pod_uid, y->pod_uid);
        return c;
}

void volume_stats_foreach(VolumeStats *s, volume_stats_sample_t cb, void *userdata) {
        _cleanup_free_ StatsEntry **all = NULL;
        size_t n = 0, allocated = 0;
        void *value, *ev;

        if (!s)
                return;
        for (size_t i = 0; hashmap_iterate(s->drivers, &i, NULL, &value);)
                allocated += hashmap_size(((StatsDriver *) value)->entries);
        if (allocated == 0)
                return;
        all = calloc(allocated, sizeof *all);
        if (!all)
                return;
        for (size_t i = 0; hashmap_iterate(s->drivers, &i, NULL, &value);)
                for (size_t j = 0; hashmap_iterate(((StatsDriver *) value)->entries, &j, NULL, &ev);) {
                        StatsEntry *e = ev;
                        if (e->has_sample && e->namespace && e->claim && still_published(s->m, e))
                                all[n++] = e;
                }
        qsort(all, n, sizeof *all, compare_samples);
        for (size_t i = 0; i < n; i++) {
                /* Two pods of one claim: one series, as kubelet's collector. */
                if (i > 0 && streq(all[i]->namespace, all[i - 1]->namespace) &&
                    streq(all[i]->claim, all[i - 1]->claim))
                        continue;
                cb(&all[i]->sample, userdata);
        }
}

void volume_manager_count_watch_restarts(VolumeManager *m, volume_watch_count_t cb, void *userdata) {
        K8sInformer *informers[] = { m->csidrivers, m->node, m->pods };

        for (size_t i = 0; i < ELEMENTSOF(informers); i++) {
                K8sInformerStats st = {};
                if (!informers[i])
                        continue;
                k8s_informer_get_stats(informers[i], &st);
                /* The first watch is the start, not a restart. */
                cb(k8s_informer_kind(informers[i])->plural, st.watches > 0 ? st.watches - 1 : 0, userdata);
        }
}
