/* SPDX-License-Identifier: Apache-2.0 */
/* What a change of the mount table concerns.  A publish or stage we hold as
 * done that is no longer mounted, while no operation of ours is changing
 * it, was unmounted behind our back (or lost by the driver): it becomes
 * uncertain and the reconciler sets it up again, drivers being idempotent.
 *
 * The mount table says which mount points changed since it last told us
 * (volume/host/mounttable.h); only what sits at those is looked at, so that a
 * change costs what changed, not the node's size (issue 23: beside 200
 * published volumes a new pod's publish cost over 600 visits here, every
 * mount the node makes being a change).  A publish is found through its
 * pod: every path of a pod's volume (kubelet's layout: the publish target,
 * a raw block volume's device file and its pod's bind) has the pod's UID
 * as a component, and the index of pods (podindex.c) names that pod's
 * volumes.  A staging target is found in an index of its own, kept here
 * for every volume of the manager (its path is fixed by driver and
 * handle).  Besides those, each read looks at:
 *  - the volumes whose stage or publish waits for a read to say whether it
 *    made a mount (settle_pending_mounts());
 *  - the volumes whose unstage other mounts held (they may be gone);
 *  - the volumes that had an operation in flight when a change at one of
 *    their paths came: the change is judged once they are idle, as the old
 *    walk over everything judged it at the next read.
 * Whenever one of the sets or indexes could not be kept (out of memory),
 * or the table cannot say what changed, the read walks every volume as
 * before: slower, never wrong. */
#include <stdio.h>

#include "systemd/log.h"
#include "volume/host/paths.h"
#include "volume/internal.h"

/* After a stage or publish, how soon the mount table is read to see whether
 * it made a mount: long enough to gather a burst into one read. */
#define MOUNT_CHECK_DELAY_USEC (20 * USEC_PER_MSEC)

static char present;

struct MountWatch {
        Hashmap *staging;  /* staging target (relative) → unique name (owned) */
        Hashmap *pending;  /* unique name → present: a mount to settle */
        Hashmap *held;     /* unique name → present: unstage_held */
        Hashmap *recheck;  /* unique name → present: busy when a change at its paths came */
        bool walk_once;    /* a set lost an entry: the next read walks everything */
        bool broken;       /* the staging index lost an entry: every read walks */
};

int mount_watch_new(MountWatch **ret) {
        MountWatch *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->staging = hashmap_new();
        w->pending = hashmap_new();
        w->held = hashmap_new();
        w->recheck = hashmap_new();
        if (!w->staging || !w->pending || !w->held || !w->recheck) {
                mount_watch_free(w);
                return -ENOMEM;
        }
        *ret = w;
        return 0;
}

MountWatch *mount_watch_free(MountWatch *w) {
        void *value;

        if (!w)
                return NULL;
        for (size_t i = 0; w->staging && hashmap_iterate(w->staging, &i, NULL, &value);)
                free(value);
        hashmap_free(w->staging);
        hashmap_free(w->pending);
        hashmap_free(w->held);
        hashmap_free(w->recheck);
        free(w);
        return NULL;
}

static void set_add(MountWatch *w, Hashmap *set, const char *unique_name) {
        if (hashmap_put(set, unique_name, &present, NULL) < 0)
                w->walk_once = true;
}

static bool is_mounted(VolumeManager *m, const char *rel) {
        _cleanup_free_ char *abs = NULL;
        /* The table, its "no" confirmed by the kernel without a stat that
         * could hang on a dead file system: a directory above a mount that
         * was renamed (no event says so) must not make a mount look lost, or
         * a publish look as if it made none.  Out of memory: mounted. */
        return asprintf(&abs, "%s/%s", m->root->path, rel) < 0 || mount_table_mounted(m->mounts, abs) != 0;
}

/* The staging target, relative: a raw block volume's is named after the PV
 * it is kept under, a file system's after its handle. */
static int staging_target_of(const ActualVolume *av, char **ret) {
        return av->block ? path_block_staging(av->spec_name, ret) : path_staging_target(av->driver, av->handle, ret);
}

static bool mount_gone(VolumeManager *m, const char *rel) {
        return !is_mounted(m, rel);
}

void mount_watch_add_volume(VolumeManager *m, const ActualVolume *av) {
        MountWatch *w = m->mount_watch;
        _cleanup_free_ char *staging = NULL;
        char *name, *old = NULL;

        /* Only persistent volumes stage; a raw block volume's staging is no
         * mount of ours to watch (operations.c: staged_mount = !block). */
        if (av->lifecycle != VOLUME_PERSISTENT || path_staging_target(av->driver, av->handle, &staging) < 0)
                return;
        name = strdup(av->unique_name);
        if (!name || hashmap_put(w->staging, staging, name, (void **) &old) < 0) {
                free(name);
                w->broken = true;
                return;
        }
        free(old);
}

void mount_watch_remove_volume(VolumeManager *m, const ActualVolume *av) {
        MountWatch *w = m->mount_watch;
        _cleanup_free_ char *staging = NULL;

        if (path_staging_target(av->driver, av->handle, &staging) >= 0 &&
            streq_ptr(hashmap_get(w->staging, staging), av->unique_name))
                free(hashmap_remove(w->staging, staging));
        (void) hashmap_remove(w->pending, av->unique_name);
        (void) hashmap_remove(w->held, av->unique_name);
        (void) hashmap_remove(w->recheck, av->unique_name);
}

void mount_watch_held(VolumeManager *m, const ActualVolume *av) {
        set_add(m->mount_watch, m->mount_watch->held, av->unique_name);
}

/* A stage or publish that succeeded may have made a mount, or not: the CSI
 * spec asks for none at the staging path (the hostpath driver's stage only
 * records the volume; many drivers' stage prepares a device or a session),
 * and some publishes make a plain directory.  The first mount table read
 * after the call tells which: it is read after the driver answered, so a
 * mount the call made is in it.  A mount is watched for its loss and set up
 * again when it goes; no mount means the call made none: that is recorded,
 * without a warning, and nothing is called again.  A mount made and lost
 * again before that read (tens of ms: one read for a burst) is taken for
 * none, and then not set up again, as kubelet never does for any mount.  No
 * stat of the target is needed, which could hang on a dead file system. */
static void settle_pending_mounts(VolumeManager *m, ActualVolume *av) {
        LogFields f = { .volume = av->spec_name, .driver = av->driver, .volume_handle = av->handle };
        void *pv;

        for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);) {
                ActualPublish *pub = pv;
                _cleanup_free_ char *dir = NULL, *record = NULL;
                m->visited++;
                if (!pub->mount_pending)
                        continue;
                actual_publish_set_mount_pending(av, pub, false);
                f.pod_uid = pub->pod_uid;
                f.pod = pub->pod_key;
                f.volume = pub->spec_name;
                if (is_mounted(m, pub->target)) {
                        log_fields(LOG_DEBUG, &f, "%s/%s is a mount point: watched for its loss", m->root->path,
                                   pub->target);
                        continue;
                }
                pub->not_a_mount = true;
                log_fields(LOG_DEBUG, &f, "NodePublishVolume made no mount at %s/%s: nothing to watch",
                           m->root->path, pub->target);
                /* The record beside the volume dir its kind keeps (kind.h paths). */
                if (!actual_volume_pod_busy(av, pub->pod_uid) &&
                    av->kind->paths(av, false, pub->pod_uid, pub->spec_name, &dir, NULL) >= 0 &&
                    path_intent_record(dir, av->block ? pub->pod_uid : NULL, &record) >= 0)
                        (void) intent_write(m, record,
                                            &(Intent){ .operation = OP_PUBLISH, .done = true, .pod = (char *) pub->pod_key },
                                            false);
        }
        if (av->mount_pending) {
                _cleanup_free_ char *staging = NULL, *dir = NULL, *record = NULL;
                f = (LogFields){ .volume = av->spec_name, .driver = av->driver, .volume_handle = av->handle };
                actual_volume_set_mount_pending(av, false);
                if (staging_target_of(av, &staging) < 0)
                        return;
                if (is_mounted(m, staging)) {
                        log_fields(LOG_DEBUG, &f, "%s/%s is a mount point: watched for its loss", m->root->path,
                                   staging);
                        return;
                }
                av->staged_mount = false;
                log_fields(LOG_DEBUG, &f, "NodeStageVolume made no mount at %s/%s: nothing to watch",
                           m->root->path, staging);
                if (!av->op && av->kind->paths(av, true, NULL, NULL, &dir, NULL) >= 0 &&
                    path_intent_record(dir, NULL, &record) >= 0)
                        (void) intent_write(m, record, &(Intent){ .operation = OP_STAGE, .done = true }, false);
        }
}


void mount_watch_settle_soon(VolumeManager *m, const ActualVolume *av) {
        set_add(m->mount_watch, m->mount_watch->pending, av->unique_name);
        /* The same read as the mount monitor's (the driver's mount changed
         * the table too): one read of a table of a thousand mounts, not two. */
        mount_table_refresh_soon(m->mounts, MOUNT_CHECK_DELAY_USEC);
}

/* One publish of av: lost when it is done, a mount (or a raw block
 * volume's bind), and no longer mounted.  Returns false when an operation
 * of the volume or the pod runs: it is judged later. */
static bool check_publish(VolumeManager *m, ActualVolume *av, ActualPublish *pub) {
        LogFields f = { .pod_uid = pub->pod_uid, .pod = pub->pod_key, .volume = av->spec_name,
                        .driver = av->driver, .volume_handle = av->handle };
        _cleanup_free_ char *map_dir = NULL, *bind = NULL;
        const char *lost = NULL;

        m->visited++;
        if (actual_volume_pod_busy(av, pub->pod_uid))
                return false;
        if (pub->state != PUBLISH_DONE)
                return true;
        if (!pub->not_a_mount && mount_gone(m, pub->target))
                lost = pub->target;
        /* A raw block volume's pod mapping is a bind mount of ours. */
        else if (av->block && path_block_map_dir(pub->spec_name, &map_dir) >= 0 &&
                 asprintf(&bind, "%s/%s", map_dir, pub->pod_uid) >= 0 && mount_gone(m, bind))
                lost = bind;
        if (!lost)
                return true;
        log_fields(LOG_WARNING, &f, "%s/%s is no longer mounted; publishing it again", m->root->path, lost);
        actual_publish_set_state(av, pub, PUBLISH_UNCERTAIN);
        manager_schedule_volume_pass(m, av->unique_name);
        return true;
}

/* av's staging, the same way. */
static bool check_staging(VolumeManager *m, ActualVolume *av) {
        LogFields f = { .volume = av->spec_name, .driver = av->driver, .volume_handle = av->handle };
        _cleanup_free_ char *staging = NULL;

        m->visited++;
        if (av->op)
                return false;
        if (av->stage == STAGE_DONE && av->staged_mount && staging_target_of(av, &staging) >= 0 &&
            mount_gone(m, staging)) {
                log_fields(LOG_WARNING, &f, "%s/%s is no longer mounted; staging it again", m->root->path,
                           staging);
                actual_volume_set_stage(av, STAGE_UNCERTAIN);
                manager_schedule_volume_pass(m, av->unique_name);
        }
        return true;
}

/* Every publish and the staging of av; false when some could not be judged yet. */
static bool check_volume(VolumeManager *m, ActualVolume *av) {
        bool judged = true;
        void *pv;

        m->visited++;
        if (av->op)
                return false;
        for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);)
                judged = check_publish(m, av, pv) && judged;
        return check_staging(m, av) && judged;
}

static void recheck_later(VolumeManager *m, const ActualVolume *av, bool judged) {
        if (!judged)
                set_add(m->mount_watch, m->mount_watch->recheck, av->unique_name);
}

/* What sits at one changed mount point: the publishes of the pods its path
 * names, and the volume staged there. */
static void check_target(VolumeManager *m, const char *abs) {
        MountWatch *w = m->mount_watch;
        size_t root_len = strlen(m->root->path);
        const char *rel, *name, *unique;

        if (strncmp(abs, m->root->path, root_len) != 0 || abs[root_len] != '/')
                return;
        rel = abs + root_len + 1;
        for (const char *p = rel; *p;) {
                const char *slash = strchrnul(p, '/');
                char component[128];
                const Hashmap *vols;

                if ((size_t) (slash - p) < sizeof component) {
                        memcpy(component, p, slash - p);
                        component[slash - p] = '\0';
                        vols = pod_index_volumes(m->pod_index, component);
                        for (size_t i = 0; vols && hashmap_iterate(vols, &i, &name, NULL);) {
                                ActualVolume *av = hashmap_get(m->volumes, name);
                                ActualPublish *pub = av ? hashmap_get(av->publishes, component) : NULL;
                                if (pub)
                                        recheck_later(m, av, check_publish(m, av, pub));
                        }
                }
                p = *slash ? slash + 1 : slash;
        }
        unique = hashmap_get(w->staging, rel);
        if (unique) {
                ActualVolume *av = hashmap_get(m->volumes, unique);
                _cleanup_free_ char *staging = NULL;
                if (av && staging_target_of(av, &staging) >= 0 && streq(staging, rel))
                        recheck_later(m, av, check_staging(m, av));
        }
}

/* What every read did before the mount table said what changed. */
static void walk_everything(VolumeManager *m) {
        const char *key;
        void *value;

        for (size_t i = 0; hashmap_iterate(m->mount_watch->recheck, &i, &key, NULL);)
                (void) hashmap_remove(m->mount_watch->recheck, key);
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                settle_pending_mounts(m, av);
                if (av->unstage_held)
                        manager_schedule_volume_pass(m, av->unique_name);
                recheck_later(m, av, check_volume(m, av));
        }
}

void mount_watch_changed(MountTable *t, const Hashmap *changed, void *userdata) {
        VolumeManager *m = userdata;
        MountWatch *w = m->mount_watch;
        const char *key;
        bool walk;

        /* root-dir is not kvolumed's (rootwatch.c): nothing judged, no record
         * written; everything is looked at again once it is. */
        if (!root_watch_check(m)) {
                w->walk_once = true;
                return;
        }
        m->mounts_seen = mount_table_count(t);
        /* First what waited for this read to know whether it made a mount:
         * settled, it is not taken for a lost one below. */
        for (size_t i = 0; hashmap_iterate(w->pending, &i, &key, NULL);) {
                ActualVolume *av = hashmap_get(m->volumes, key);
                m->visited++;
                if (av)
                        settle_pending_mounts(m, av);
                (void) hashmap_remove(w->pending, key);
        }
        for (size_t i = 0; hashmap_iterate(w->held, &i, &key, NULL);) {
                ActualVolume *av = hashmap_get(m->volumes, key);
                m->visited++;
                if (av && av->unstage_held)
                        manager_schedule_volume_pass(m, key); /* the mounts that held it may be gone */
                else
                        (void) hashmap_remove(w->held, key);
        }
        walk = !changed || w->walk_once || w->broken || pod_index_broken(m->pod_index);
        w->walk_once = false;
        if (walk) {
                walk_everything(m);
                return;
        }
        for (size_t i = 0; hashmap_iterate(w->recheck, &i, &key, NULL);) {
                ActualVolume *av = hashmap_get(m->volumes, key);
                if (!av || check_volume(m, av))
                        (void) hashmap_remove(w->recheck, key);
        }
        for (size_t i = 0; hashmap_iterate(changed, &i, &key, NULL);)
                check_target(m, key);
}
