/* SPDX-License-Identifier: Apache-2.0 */
/* The pod volumes and the publishes by plugin (a kind, and for CSI its
 * driver), kept as the desired and the actual state change: kubelet's
 * volume_manager_total_volumes and the drivers the pods want are read from
 * here at a scrape.  They were two walks of every pod volume and every
 * publish, 4-8 ms of the loop per scrape beside 10,000 volumes (issue 31).
 * A pod adds its desired volumes when counts.c notes it and takes them back
 * when it forgets it (the PodEntry remembers what it added); a publish counts
 * while it is done and its volume is in the manager (actual.c).  A tally no
 * pod volume and no publish counts any more is freed: inline volumes may
 * name any driver.  The walks stay here, for counts broken by a lack of
 * memory and for the tests' check, which compares the two after each pass. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "volume/internal.h"

struct PluginTally {
        const VolumeKind *kind;
        const char *driver; /* in key, after the separator; NULL for a kind without a driver */
        unsigned desired, desired_persistent, actual;
        char key[]; /* plugin name, or plugin name + "\x1f" + driver */
};

static int plugin_key(const VolumeKind *kind, const char *driver, char *buf, size_t size) {
        int n = driver ? snprintf(buf, size, "%s\x1f%s", kind->plugin_name, driver)
                       : snprintf(buf, size, "%s", kind->plugin_name);
        return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

/* The tally of (kind, driver), made when create; NULL: none, or out of memory
 * (the counts are then broken: a walk answers). */
static PluginTally *tally_get(VolumeCounts *c, const VolumeKind *kind, const char *driver, bool create) {
        char key[256];
        PluginTally *t;

        if (!c->plugins || plugin_key(kind, driver, key, sizeof key) < 0) {
                c->broken = true;
                return NULL;
        }
        t = hashmap_get(c->plugins, key);
        if (t || !create)
                return t;
        size_t len = strlen(key) + 1;
        t = calloc(1, sizeof *t + len);
        if (!t) {
                c->broken = true;
                return NULL;
        }
        memcpy(t->key, key, len);
        t->kind = kind;
        t->driver = driver ? t->key + strlen(kind->plugin_name) + 1 : NULL;
        if (hashmap_put(c->plugins, t->key, t, NULL) < 0) {
                free(t);
                c->broken = true;
                return NULL;
        }
        return t;
}

/* Frees a tally nothing counts any more. */
static void tally_release(VolumeCounts *c, PluginTally *t) {
        if (t && t->desired == 0 && t->actual == 0) {
                (void) hashmap_remove(c->plugins, t->key);
                free(t);
        }
}

int plugin_counts_init(VolumeCounts *c) {
        c->plugins = hashmap_new_borrowing(); /* keyed by each tally's own key */
        return c->plugins ? 0 : -ENOMEM;
}

void plugin_counts_done(VolumeCounts *c) {
        void *value;

        for (size_t i = 0; hashmap_iterate(c->plugins, &i, NULL, &value);)
                free(value);
        c->plugins = hashmap_free(c->plugins);
}

void plugin_counts_pod_noted(VolumeCounts *c, PodEntry *e) {
        assert(e->n_counted_plugins == 0);
        for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                const VolumeSpec *s = e->desired->volumes[v].spec;
                PodPluginCount *p = NULL;

                if (!s)
                        continue;
                PluginTally *t = tally_get(c, s->kind, s->driver, true);
                if (!t)
                        return;
                for (size_t i = 0; !p && i < e->n_counted_plugins; i++)
                        if (e->counted_plugins[i].tally == t)
                                p = &e->counted_plugins[i];
                if (!p) {
                        PodPluginCount *a = reallocarray(e->counted_plugins, e->n_counted_plugins + 1, sizeof *a);
                        if (!a) {
                                c->broken = true;
                                tally_release(c, t);
                                return;
                        }
                        e->counted_plugins = a;
                        p = &a[e->n_counted_plugins++];
                        *p = (PodPluginCount){ .tally = t };
                }
                bool persistent = s->lifecycle == VOLUME_PERSISTENT;
                p->n++;
                p->n_persistent += persistent;
                t->desired++;
                t->desired_persistent += persistent;
        }
}

void plugin_counts_pod_forgotten(VolumeCounts *c, PodEntry *e) {
        for (size_t i = 0; i < e->n_counted_plugins; i++) {
                PodPluginCount *p = &e->counted_plugins[i];
                p->tally->desired -= p->n;
                p->tally->desired_persistent -= p->n_persistent;
                tally_release(c, p->tally);
        }
        free(e->counted_plugins);
        e->counted_plugins = NULL;
        e->n_counted_plugins = 0;
}

void plugin_counts_publish(VolumeCounts *c, const ActualVolume *av, const ActualPublish *p, int sign) {
        if (p->state != PUBLISH_DONE)
                return;
        PluginTally *t = tally_get(c, av->kind, av->driver, sign > 0);
        if (!t) {
                c->broken = true;
                return;
        }
        t->actual += (unsigned) sign; /* -1: wraps to a decrement */
        tally_release(c, t);
}

/* ---- the readers: the tallies, or the walks when the counts are broken ---- */

/* A plugin's counts in a walk: a kind, and for CSI its driver. */
typedef struct PluginCount {
        const VolumeKind *kind;
        const char *driver;
        unsigned desired, actual;
} PluginCount;

static PluginCount *count_of(PluginCount **counts, size_t *n, const VolumeKind *kind, const char *driver) {
        PluginCount *array;

        /* A kind without a driver (emptyDir, configMap, ...) has NULL there:
         * compared as such, not by strcmp (a scrape beside an emptyDir and a
         * CSI volume crashed kvolumed). */
        for (size_t i = 0; i < *n; i++)
                if ((*counts)[i].kind == kind && streq_ptr((*counts)[i].driver, driver))
                        return &(*counts)[i];
        array = reallocarray(*counts, *n + 1, sizeof *array);
        if (!array)
                return NULL;
        *counts = array;
        array[*n] = (PluginCount){ .kind = kind, .driver = driver };
        return &array[(*n)++];
}

static void count_volumes_walk(VolumeManager *m, volume_count_t cb, void *userdata) {
        _cleanup_free_ PluginCount *counts = NULL;
        size_t n = 0;
        void *value, *pv;

        /* kubelet's desired state of the world holds the pod volumes that
         * resolved to a volume; its actual state the ones mounted. */
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                const PodEntry *e = value;
                for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                        const VolumeSpec *spec = e->desired->volumes[v].spec;
                        PluginCount *c = spec ? count_of(&counts, &n, spec->kind, spec->driver) : NULL;
                        if (c)
                                c->desired++;
                }
        }
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                const ActualVolume *av = value;
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);) {
                        PluginCount *c;
                        if (((const ActualPublish *) pv)->state != PUBLISH_DONE)
                                continue;
                        c = count_of(&counts, &n, av->kind, av->driver);
                        if (c)
                                c->actual++;
                }
        }
        for (size_t i = 0; i < n; i++)
                cb(counts[i].kind->plugin_name, counts[i].driver, counts[i].desired, counts[i].actual, userdata);
}

static void wanted_drivers_walk(VolumeManager *m, volume_driver_t cb, void *userdata) {
        _cleanup_(hashmap_freep) Hashmap *seen = hashmap_new();
        void *value;

        for (size_t i = 0; seen && hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                const PodEntry *e = value;
                for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                        const char *driver = describe_driver_label(m, e->desired->volumes[v].spec);
                        if (isempty(driver) || streq(driver, "other") || hashmap_get(seen, driver))
                                continue;
                        if (hashmap_put(seen, driver, seen, NULL) < 0)
                                return;
                        cb(driver, userdata);
                }
        }
}

void volume_manager_count_volumes(VolumeManager *m, volume_count_t cb, void *userdata) {
        void *value;

        if (!counts_settle(m)) {
                count_volumes_walk(m, cb, userdata);
                return;
        }
        for (size_t i = 0; hashmap_iterate(m->counts.plugins, &i, NULL, &value);) {
                const PluginTally *t = value;
                cb(t->kind->plugin_name, t->driver, t->desired, t->actual, userdata);
        }
}

void volume_manager_foreach_wanted_driver(VolumeManager *m, volume_driver_t cb, void *userdata) {
        void *value;

        if (!counts_settle(m)) {
                wanted_drivers_walk(m, cb, userdata);
                return;
        }
        /* A tally per driver: each named once, by describe_driver_label()'s rule. */
        for (size_t i = 0; hashmap_iterate(m->counts.plugins, &i, NULL, &value);) {
                const PluginTally *t = value;
                if (!isempty(t->driver) && t->desired > 0 &&
                    describe_driver_named(m, t->driver, t->desired_persistent > 0))
                        cb(t->driver, userdata);
        }
}

/* ---- the tests' check: the tallies against the walks ---------------------- */

typedef struct Lines {
        char **v;
        size_t n;
        bool broken;
} Lines;

static void lines_add(Lines *l, char *line) {
        char **a = line ? reallocarray(l->v, l->n + 1, sizeof *a) : NULL;
        if (!a) {
                free(line);
                l->broken = true;
                return;
        }
        l->v = a;
        l->v[l->n++] = line;
}

static void lines_done(Lines *l) {
        for (size_t i = 0; i < l->n; i++)
                free(l->v[i]);
        free(l->v);
}

static int cmp_line(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static void count_line(const char *plugin_name, const char *driver, unsigned desired, unsigned actual,
                       void *userdata) {
        char *line = NULL;
        if (asprintf(&line, "%s:%s desired %u actual %u", plugin_name, driver ? driver : "-", desired, actual) < 0)
                line = NULL;
        lines_add(userdata, line);
}

static void driver_line(const char *driver, void *userdata) {
        lines_add(userdata, strdup(driver));
}

static void compare(const char *what, Lines *kept, Lines *walked) {
        bool same = kept->n == walked->n;

        if (kept->broken || walked->broken)
                return;
        if (kept->n > 0) /* qsort's array may not be NULL, even empty */
                qsort(kept->v, kept->n, sizeof *kept->v, cmp_line);
        if (walked->n > 0)
                qsort(walked->v, walked->n, sizeof *walked->v, cmp_line);
        for (size_t i = 0; same && i < kept->n; i++)
                same = streq(kept->v[i], walked->v[i]);
        if (!same)
                log_error("Incremental pass missed: %s kept are %zu (first: %s), a walk of the node finds %zu "
                          "(first: %s)",
                          what, kept->n, kept->n ? kept->v[0] : "none", walked->n,
                          walked->n ? walked->v[0] : "none");
}

void plugin_counts_verify(VolumeManager *m) {
        Lines kept = {}, walked = {}, kept_drivers = {}, walked_drivers = {};

        volume_manager_count_volumes(m, count_line, &kept);
        count_volumes_walk(m, count_line, &walked);
        compare("the volumes by plugin", &kept, &walked);
        volume_manager_foreach_wanted_driver(m, driver_line, &kept_drivers);
        wanted_drivers_walk(m, driver_line, &walked_drivers);
        compare("the drivers pods want", &kept_drivers, &walked_drivers);
        lines_done(&kept);
        lines_done(&walked);
        lines_done(&kept_drivers);
        lines_done(&walked_drivers);
}
