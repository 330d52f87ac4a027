/* SPDX-License-Identifier: Apache-2.0 */
/* Reconstruction: at start-up, before the first pass, the actual state is
 * rebuilt from what is on disk, so that a restart (crash, upgrade, OOM kill)
 * or a reboot loses track of nothing.  It reads, under root-dir:
 *   plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/  staged volumes
 *   pods/<uid>/volumes/kubernetes.io~csi/<name>/          publishes
 * each directory's vol_data.json (ours or a kubelet's, same format) and our
 * intent record (volume/state/intent.h, kept under RECORDS_DIR; one an older
 * kvolumed left in the volume dir is moved there first), and the mount
 * table.  Records whose volume dir is gone (kubelet tore the volume down
 * while the node was its) are removed.  A volume is taken
 * as set up only when the record says its last call succeeded in this boot
 * and the mount it made is there; from a previous boot, nothing of it is
 * mounted (the records only say what to set up again or clean away); any
 * other case is uncertain ("maybe mounted"), as kubelet takes everything it
 * finds.  Nothing is torn down here: the reconciler decides that once the
 * pod list is complete. */
#include <dirent.h>
#include <stdio.h>

#include "systemd/log.h"
#include "systemd/validate.h"
#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/kinds/csi/blockmap.h"
#include "volume/state/voldata.h"

#define RECORD_MAX (64 * 1024)

typedef enum Found {
        FOUND_DONE,      /* its last call succeeded in this boot, and what it mounted is there */
        FOUND_UNCERTAIN, /* may be mounted: set up again if wanted, torn down if not */
        FOUND_STALE,     /* from a previous boot: nothing mounted, only dirs and records */
} Found;

/* What the scan found, for its log line; the kinds' reconstruct entries
 * (volume/kind.h) count in it too. */
typedef struct ReconstructScan Counts;

/* The files of one volume dir; either may be missing. */
typedef struct Records {
        bool has_vol_data, has_intent;
        bool newer;             /* the intent record is a newer kvolumed's: hands off */
        VolData vol_data;
        Intent intent;
} Records;

static void records_done(Records *rec) {
        vol_data_done(&rec->vol_data);
        intent_done(&rec->intent);
}

/* A record an older kvolumed kept in the volume dir itself, where it fails
 * kubelet's teardown: moved to where records are kept now (over one there:
 * an older kvolumed that ran last wrote the newer). */
static void move_legacy_record(VolumeManager *m, Counts *c, const char *dir, const char *pod_uid) {
        _cleanup_free_ char *legacy = NULL, *record = NULL;
        int r;

        if (path_legacy_intent_record(dir, pod_uid, &legacy) < 0 || root_dir_exists(m->root, legacy) <= 0 ||
            path_intent_record(dir, pod_uid, &record) < 0)
                return;
        r = intent_record_dirs(m->root, record);
        if (r >= 0)
                r = root_dir_rename(m->root, legacy, record);
        if (r < 0) {
                log_warning_errno(r, "Cannot move %s/%s to %s/%s: %m", m->root->path, legacy, m->root->path, record);
                return;
        }
        log_info("Moved %s/%s, an older kvolumed's record, to %s/%s", m->root->path, legacy, m->root->path, record);
        c->moved++;
}

/* A record of a format newer than this build's (INTENT_VERSION): written by
 * a newer kvolumed before a rollback.  What it says of the volume (a call
 * in flight? a mount made?) cannot be known here, so the volume is neither
 * torn down nor set up again on a guess: it is left for a kvolumed that
 * reads the record, and said once. */
static bool note_newer_record(VolumeManager *m, const char *record, const char *text, const char *dir) {
        (void) hashmap_put(m->newer_records, record, (void *) 1, NULL);
        log_warning("%s/%s has record format version %d, newer than this kvolumed's (%d): left untouched, and "
                    "the volume at %s/%s is neither torn down nor set up again by this version. Run the newer "
                    "kvolumed again, or tear the volume down by hand, to release it",
                    m->root->path, record, intent_version(text), INTENT_VERSION, m->root->path, dir);
        return true;
}

static int read_records(VolumeManager *m, Counts *c, const char *dir, Records *ret) {
        _cleanup_free_ char *vd_path = NULL, *in_path = NULL, *text = NULL;
        Records rec = {};
        int r;

        if (asprintf(&vd_path, "%s/" VOL_DATA_FILE, dir) < 0)
                return -ENOMEM;
        move_legacy_record(m, c, dir, NULL);
        r = path_intent_record(dir, NULL, &in_path);
        if (r < 0)
                return r;
        r = root_dir_read_file(m->root, vd_path, RECORD_MAX, &text, NULL);
        if (r >= 0) {
                r = vol_data_parse(text, &rec.vol_data);
                if (r < 0)
                        return r;
                rec.has_vol_data = true;
        } else if (r != -ENOENT)
                return r;
        free(text);
        text = NULL;
        r = root_dir_read_file(m->root, in_path, RECORD_MAX, &text, NULL);
        if (r >= 0) {
                /* A record we cannot read says nothing: the volume is uncertain. */
                r = intent_parse(text, &rec.intent);
                rec.has_intent = r >= 0;
                if (r == -EPROTONOSUPPORT)
                        rec.newer = note_newer_record(m, in_path, text, dir);
        } else if (r != -ENOENT) {
                records_done(&rec);
                return r;
        }
        *ret = rec;
        return 0;
}

/* The table, its "no" confirmed by the kernel (mount_table_mounted()): a
 * record judged stale or a leftover removed only when nothing is mounted. */
static bool is_mounted(VolumeManager *m, const char *rel) {
        _cleanup_free_ char *abs = NULL;
        return asprintf(&abs, "%s/%s", m->root->path, rel) < 0 || mount_table_mounted(m->mounts, abs) != 0;
}

static Found judge(VolumeManager *m, const Records *rec, OpKind setup, bool mounted) {
        const Intent *i = rec->has_intent ? &rec->intent : NULL;

        if (i && !streq(i->boot_id, m->boot_id) && !mounted)
                return FOUND_STALE;
        if (i && streq(i->boot_id, m->boot_id) && i->operation == setup && i->done && (mounted || !i->mount))
                return FOUND_DONE;
        return FOUND_UNCERTAIN;
}

static const char *found_name(Found f) {
        return f == FOUND_DONE ? "set up" : f == FOUND_STALE ? "from a previous boot" : "uncertain";
}

static ActualVolume *volume_get(VolumeManager *m, VolumeLifecycle lifecycle, const char *unique_name,
                                const char *driver, const char *handle, const char *spec_name) {
        ActualVolume *av = hashmap_get(m->volumes, unique_name);

        if (av)
                return av;
        /* Every record reconstruction reads so far is CSI's layout. */
        av = actual_volume_new_empty(&volume_kind_csi, lifecycle, unique_name, driver, handle, spec_name);
        if (!av || manager_add_volume(m, av) < 0) {
                actual_volume_free(av);
                return NULL;
        }
        av->reconstructed = true;
        return av;
}

/* A volume dir without vol_data.json: what a crash during removal (or
 * before the first record) leaves.  Removed unless something is mounted. */
static void remove_leftover(VolumeManager *m, Counts *c, const char *dir, const char *target, bool staging) {
        LogFields f = {};

        if (is_mounted(m, target)) {
                log_warning("%s/%s is mounted but %s/%s/" VOL_DATA_FILE " is missing; leaving it alone",
                            m->root->path, target, m->root->path, dir);
                c->skipped++;
                return;
        }
        if (volume_dirs_remove(m, &f, dir, target, staging) >= 0) {
                log_info("Removed %s/%s, left behind without " VOL_DATA_FILE, m->root->path, dir);
                c->leftovers++;
        }
}

/* The records of a volume dir, when there is a volume to rebuild from them:
 * false for records that cannot be read (skipped, counted) and for a dir
 * without vol_data.json (a leftover, removed unless something is mounted). */
static bool load_volume_dir(VolumeManager *m, Counts *c, const char *dir, const char *target, bool staging,
                            Records *rec) {
        int r = read_records(m, c, dir, rec);

        if (r < 0) {
                log_warning_errno(r, "Cannot read the records of %s/%s; skipping it: %m", m->root->path, dir);
                c->skipped++;
                return false;
        }
        if (rec->newer) {
                c->skipped++;
                return false;
        }
        if (!rec->has_vol_data) {
                remove_leftover(m, c, dir, target, staging);
                return false;
        }
        return true;
}

/* ---- staged volumes -------------------------------------------------------------- */

static void reconstruct_staging(VolumeManager *m, Counts *c, const char *driver, const char *name) {
        _cleanup_free_ char *dir = NULL, *target = NULL, *expected = NULL, *unique = NULL;
        _cleanup_(records_done) Records rec = {};
        ActualVolume *av;
        Found found;

        if (asprintf(&dir, "plugins/" CSI_PLUGIN_NAME "/%s/%s", driver, name) < 0 ||
            asprintf(&target, "%s/globalmount", dir) < 0)
                return;
        if (!load_volume_dir(m, c, dir, target, true, &rec))
                return;
        LogFields f = { .driver = rec.vol_data.driver_name, .volume_handle = rec.vol_data.volume_handle };
        /* The dir must be where this driver and handle stage: anything else is not ours to touch. */
        if (!streq_ptr(rec.vol_data.driver_name, driver) || !rec.vol_data.volume_handle ||
            path_staging_volume_dir(driver, rec.vol_data.volume_handle, &expected) < 0 || !streq(expected, dir) ||
            csi_unique_volume_name(driver, rec.vol_data.volume_handle, &unique) < 0) {
                log_fields(LOG_WARNING, &f, "%s/%s/" VOL_DATA_FILE " does not match its directory; skipping it",
                           m->root->path, dir);
                c->skipped++;
                return;
        }
        av = volume_get(m, VOLUME_PERSISTENT, unique, driver, rec.vol_data.volume_handle, rec.vol_data.volume_handle);
        if (!av)
                return;
        found = judge(m, &rec, OP_STAGE, is_mounted(m, target));
        /* The context the volume was staged with, so that a pod needing
         * another one still waits after a restart (kubelet restores it too). */
        if (rec.vol_data.selinux_mount_context)
                (void) free_and_strdup(&av->selinux_context, rec.vol_data.selinux_mount_context);
        switch (found) {
        case FOUND_DONE:
                actual_volume_set_stage(av, STAGE_DONE);
                av->staged_mount = rec.intent.mount;
                c->staged++;
                break;
        case FOUND_STALE:
                actual_volume_set_stage(av, STAGE_NONE);
                av->stage_stale = true;
                c->stale++;
                break;
        default:
                actual_volume_set_stage(av, STAGE_UNCERTAIN);
                c->uncertain++;
                break;
        }
        log_fields(LOG_DEBUG, &f, "Found staged volume %s at %s/%s: %s", unique, m->root->path, target,
                   found_name(found));
}

/* ---- publishes ------------------------------------------------------------------- */

/* Which volume a running pod had at spec_name's path: see restored_publishes. */
static void note_restored(VolumeManager *m, const char *pod_uid, const char *spec_name, const char *unique_name) {
        _cleanup_free_ char *key = NULL;
        char *value = NULL, *old = NULL;

        if (asprintf(&key, "%s/%s", pod_uid, spec_name) < 0 || !(value = strdup(unique_name)) ||
            hashmap_put(m->restored_publishes, key, value, (void **) &old) < 0) {
                free(value);
                return;
        }
        free(old);
}

/* CSI's reconstruct_publish entry (volume/kinds/csi/kind.c): a pod's
 * kubernetes.io~csi/<spec_name> with its vol_data.json and intent record. */
void reconstruct_csi_publish(VolumeManager *m, Counts *c, const char *pod_uid, const char *spec_name) {
        _cleanup_free_ char *dir = NULL, *target = NULL, *unique = NULL;
        _cleanup_(records_done) Records rec = {};
        const VolData *d = &rec.vol_data;
        VolumeLifecycle lifecycle;
        ActualVolume *av;
        ActualPublish *pub;
        Found found;
        int r;

        if (path_pod_volume_dir(pod_uid, spec_name, &dir) < 0 || path_publish_target(pod_uid, spec_name, &target) < 0)
                return;
        if (!load_volume_dir(m, c, dir, target, false, &rec))
                return;
        LogFields f = { .pod_uid = pod_uid, .volume = spec_name, .driver = d->driver_name,
                        .volume_handle = d->volume_handle };
        if (!d->driver_name || validate_csi_driver_name(d->driver_name) < 0 || isempty(d->volume_handle)) {
                log_fields(LOG_WARNING, &f, "%s/%s/" VOL_DATA_FILE " names no valid driver and handle; skipping it",
                           m->root->path, dir);
                c->skipped++;
                return;
        }
        lifecycle = streq_ptr(d->volume_lifecycle_mode, "Ephemeral") ? VOLUME_EPHEMERAL : VOLUME_PERSISTENT;
        if (lifecycle == VOLUME_EPHEMERAL)
                r = asprintf(&unique, CSI_PLUGIN_NAME "/%s-%s", pod_uid, spec_name) < 0 ? -ENOMEM : 0;
        else
                r = csi_unique_volume_name(d->driver_name, d->volume_handle, &unique);
        if (r < 0)
                return;
        av = volume_get(m, lifecycle, unique, d->driver_name, d->volume_handle, spec_name);
        if (!av)
                return;
        /* A staged volume found first is named by its handle until a publish names it. */
        if (streq(av->spec_name, av->handle) && !streq(spec_name, av->handle))
                (void) free_and_strdup(&av->spec_name, spec_name);

        found = judge(m, &rec, OP_PUBLISH, is_mounted(m, target));
        /* The staging's record says it for the volume when there is one. */
        if (d->selinux_mount_context && !av->selinux_context)
                (void) free_and_strdup(&av->selinux_context, d->selinux_mount_context);
        PodInfo info = { .uid = (char *) pod_uid,
                         .key = rec.has_intent && rec.intent.pod ? rec.intent.pod : (char *) pod_uid };
        r = actual_publish_set(av, &info, spec_name, target, found == FOUND_DONE ? PUBLISH_DONE : PUBLISH_UNCERTAIN);
        if (r < 0)
                return;
        pub = hashmap_get(av->publishes, pod_uid);
        pub->stale = found == FOUND_STALE;
        if (!pub->stale)
                note_restored(m, pod_uid, spec_name, unique);
        pub->not_a_mount = found == FOUND_DONE && !rec.intent.mount;
        c->published += found == FOUND_DONE;
        c->uncertain += found == FOUND_UNCERTAIN;
        c->stale += found == FOUND_STALE;
        log_fields(LOG_DEBUG, &f, "Found publish of %s at %s/%s: %s", unique, m->root->path, target,
                   found_name(found));
}

/* ---- raw block volumes ------------------------------------------------------------- */

/* One pod's publish of a block volume through PV spec_name (not always the
 * PV the volume was staged for: two PVs may share a handle): its record
 * beside that PV's data dir (ours) or its bind file in that PV's global map
 * dir (kubelet's and ours).  Set up only if the device the driver published
 * is the one recorded and the pod's mapping is in place. */
static void reconstruct_block_publish(VolumeManager *m, Counts *c, ActualVolume *av, const char *spec_name,
                                      const char *data, const char *pod_uid) {
        _cleanup_free_ char *record = NULL, *text = NULL, *target = NULL;
        _cleanup_(records_done) Records rec = {};
        LogFields f = { .pod_uid = pod_uid, .volume = spec_name, .driver = av->driver,
                        .volume_handle = av->handle };
        bool mounted;
        Found found;
        dev_t recorded;
        int r;

        if (validate_uid(pod_uid) < 0 || hashmap_get(av->publishes, pod_uid) ||
            path_block_publish(spec_name, pod_uid, &target) < 0 || path_intent_record(data, pod_uid, &record) < 0)
                return;
        if (root_dir_read_file(m->root, record, RECORD_MAX, &text, NULL) >= 0) {
                r = intent_parse(text, &rec.intent);
                rec.has_intent = r >= 0;
                if (r == -EPROTONOSUPPORT) {
                        (void) note_newer_record(m, record, text, target);
                        c->skipped++;
                        return;
                }
        }
        mounted = is_mounted(m, target);
        found = judge(m, &rec, OP_PUBLISH, mounted);
        if (found == FOUND_DONE) {
                BlockIdentity now = {};
                /* The same device as recorded, still mapped into the pod: else map again. */
                if (!rec.intent.device || block_devno_parse(rec.intent.device, &recorded) < 0 ||
                    block_identify(m->root, target, &now) < 0 || now.devno != recorded ||
                    !block_mapped(m->root, spec_name, pod_uid))
                        found = FOUND_UNCERTAIN;
                block_identity_done(&now);
        }
        PodInfo info = { .uid = (char *) pod_uid,
                         .key = rec.has_intent && rec.intent.pod ? rec.intent.pod : (char *) pod_uid };
        r = actual_publish_set(av, &info, spec_name, target, found == FOUND_DONE ? PUBLISH_DONE : PUBLISH_UNCERTAIN);
        if (r < 0)
                return;
        ((ActualPublish *) hashmap_get(av->publishes, pod_uid))->stale = found == FOUND_STALE;
        if (found != FOUND_STALE)
                note_restored(m, pod_uid, spec_name, av->unique_name);
        c->published += found == FOUND_DONE;
        c->uncertain += found == FOUND_UNCERTAIN;
        c->stale += found == FOUND_STALE;
        log_fields(LOG_DEBUG, &f, "Found block publish of %s for pod %s: %s", av->unique_name, pod_uid,
                   found_name(found));
}

static void scan_block_volume(VolumeManager *m, Counts *c, const char *parent, const char *spec_name) {
        _cleanup_free_ char *data = NULL, *staging = NULL, *map_dir = NULL, *unique = NULL, *records = NULL;
        _cleanup_(records_done) Records rec = {};
        ActualVolume *av;
        struct dirent *de;
        Found found;
        DIR *d;
        int fd, r;

        if (streq(spec_name, "staging") || streq(spec_name, "publish") ||
            path_block_data_dir(spec_name, &data) < 0 || path_block_staging(spec_name, &staging) < 0 ||
            path_block_map_dir(spec_name, &map_dir) < 0)
                return;
        r = read_records(m, c, data, &rec);
        if (r >= 0 && rec.newer) {
                c->skipped++;
                return;
        }
        if (r < 0 || !rec.has_vol_data || !rec.vol_data.driver_name || !rec.vol_data.volume_handle ||
            validate_csi_driver_name(rec.vol_data.driver_name) < 0 ||
            csi_unique_volume_name(rec.vol_data.driver_name, rec.vol_data.volume_handle, &unique) < 0) {
                log_warning("%s/%s has no usable " VOL_DATA_FILE "; skipping it", m->root->path, data);
                c->skipped++;
                return;
        }
        av = volume_get(m, VOLUME_PERSISTENT, unique, rec.vol_data.driver_name, rec.vol_data.volume_handle,
                        spec_name);
        if (!av)
                return;
        av->block = true;
        /* The staging is named after the PV it was made for; the data dir of
         * another PV of the same handle holds only its own publishes. */
        if (rec.has_intent || root_dir_exists(m->root, staging) > 0) {
                if (!streq(av->spec_name, spec_name))
                        (void) free_and_strdup(&av->spec_name, spec_name);
                found = judge(m, &rec, OP_STAGE, is_mounted(m, staging));
                actual_volume_set_stage(av, found == FOUND_DONE    ? STAGE_DONE
                                            : found == FOUND_STALE ? STAGE_NONE
                                                                   : STAGE_UNCERTAIN);
                av->stage_stale = found == FOUND_STALE;
                c->staged += found == FOUND_DONE;
                c->uncertain += found == FOUND_UNCERTAIN;
                c->stale += found == FOUND_STALE;
        }
        /* The pods: our records of the data dir (an older kvolumed's in the
         * data dir itself are moved first), and the bind files in the global
         * map dir. */
        if (path_intent_record(data, NULL, &records) < 0)
                return;
        *strrchr(records, '/') = '\0';
        const char *dirs[] = { data, records, map_dir };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                if (root_dir_open_dir(m->root, dirs[i], &fd) < 0)
                        continue;
                d = fdopendir(fd);
                if (!d) {
                        close(fd);
                        continue;
                }
                while ((de = readdir(d))) {
                        size_t n = strlen(de->d_name);
                        if (i == 2) {
                                if (de->d_name[0] != '.')
                                        reconstruct_block_publish(m, c, av, spec_name, data, de->d_name);
                                continue;
                        }
                        if (strncmp(de->d_name, BLOCK_INTENT_PREFIX, strlen(BLOCK_INTENT_PREFIX)) != 0 || n < 6 ||
                            !streq(de->d_name + n - 5, ".json"))
                                continue;
                        _cleanup_free_ char *uid = strndup(de->d_name + strlen(BLOCK_INTENT_PREFIX),
                                                           n - 5 - strlen(BLOCK_INTENT_PREFIX));
                        if (!uid)
                                continue;
                        if (i == 0)
                                move_legacy_record(m, c, data, uid);
                        else
                                reconstruct_block_publish(m, c, av, spec_name, data, uid);
                }
                closedir(d);
        }
}

/* ---- the scan -------------------------------------------------------------------- */

/* Calls fn for each entry of a directory under root-dir (not "." nor ".."). */
static int for_each_entry(VolumeManager *m, const char *rel, void (*fn)(VolumeManager *m, Counts *c,
                                                                        const char *parent, const char *name),
                          Counts *c) {
        struct dirent *de;
        DIR *d;
        int fd, r;

        r = root_dir_open_dir(m->root, rel, &fd);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return log_warning_errno(r, "Cannot read %s/%s: %m", m->root->path, rel);
        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                close(fd);
                return r;
        }
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
                        continue;
                fn(m, c, rel, de->d_name);
        }
        closedir(d);
        return 0;
}

static void scan_staging_driver(VolumeManager *m, Counts *c, const char *parent, const char *driver);

static void scan_staging_volume(VolumeManager *m, Counts *c, const char *parent, const char *name) {
        const char *driver = strrchr(parent, '/') + 1;
        if (strlen(name) != 64 || strspn(name, "0123456789abcdef") != 64)
                return; /* not a hashed handle: nothing we made */
        reconstruct_staging(m, c, driver, name);
}

static void scan_staging_driver(VolumeManager *m, Counts *c, const char *parent, const char *driver) {
        _cleanup_free_ char *rel = NULL;
        /* "pv" is the legacy layout; a driver name is never "volumeDevices"
         * (raw block volumes, scanned on their own) nor "pv". */
        if (streq(driver, "volumeDevices") || streq(driver, "pv") || validate_csi_driver_name(driver) < 0)
                return;
        if (asprintf(&rel, "%s/%s", parent, driver) < 0)
                return;
        (void) for_each_entry(m, rel, scan_staging_volume, c);
}

static void scan_pod_volume(VolumeManager *m, Counts *c, const char *parent, const char *spec_name) {
        /* parent: pods/<uid>/volumes/<the kind's pod_dir> */
        const VolumeKind *kind = volume_kind_by_pod_dir(strrchr(parent, '/') + 1);
        _cleanup_free_ char *uid = strndup(parent + strlen("pods/"), strcspn(parent + strlen("pods/"), "/"));
        if (!kind || !uid || validate_path_component(spec_name) < 0)
                return;
        kind->reconstruct_publish(m, c, uid, spec_name);
}

static void scan_pod(VolumeManager *m, Counts *c, const char *parent, const char *uid) {
        if (validate_uid(uid) < 0)
                return;
        for (const VolumeKind *const *k = volume_kinds(); *k; k++) {
                _cleanup_free_ char *rel = NULL;
                if (!(*k)->pod_dir || !(*k)->reconstruct_publish)
                        continue;
                if (asprintf(&rel, "pods/%s/volumes/%s", uid, (*k)->pod_dir) < 0)
                        return;
                (void) for_each_entry(m, rel, scan_pod_volume, c);
        }
}

/* CSI's node-wide entries: its staging dirs before the pods' (their
 * publishes then name the volumes they belong to), its raw block dirs
 * after. */
void reconstruct_csi_staging(VolumeManager *m, Counts *c) {
        (void) for_each_entry(m, "plugins/" CSI_PLUGIN_NAME, scan_staging_driver, c);
}

void reconstruct_csi_block(VolumeManager *m, Counts *c) {
        (void) for_each_entry(m, "plugins/" CSI_PLUGIN_NAME "/volumeDevices", scan_block_volume, c);
}

/* The records under RECORDS_DIR whose volume dir is gone: kubelet tore the
 * volume down while the node was its (or a crash came between a volume
 * dir's removal and its record's).  Nothing else describes them. */
#define RECORDS_DEPTH_MAX 12

static void prune_records(VolumeManager *m, Counts *c, const char *rel, unsigned depth) {
        struct dirent *de;
        DIR *d;
        int fd;

        if (depth > RECORDS_DEPTH_MAX || root_dir_open_dir(m->root, rel, &fd) < 0)
                return;
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return;
        }
        while ((de = readdir(d))) {
                _cleanup_free_ char *path = NULL, *volume_dir = NULL;
                if (streq(de->d_name, ".") || streq(de->d_name, "..") || asprintf(&path, "%s/%s", rel, de->d_name) < 0)
                        continue;
                if (de->d_type == DT_DIR || path_parse_intent_record(path, &volume_dir) < 0) {
                        if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN)
                                prune_records(m, c, path, depth + 1);
                        continue;
                }
                if (root_dir_exists(m->root, volume_dir) != 0)
                        continue;
                /* A newer kvolumed's record is not ours to judge, even orphaned. */
                _cleanup_free_ char *text = NULL;
                if (root_dir_read_file(m->root, path, RECORD_MAX, &text, NULL) >= 0 &&
                    intent_version(text) > INTENT_VERSION) {
                        (void) note_newer_record(m, path, text, volume_dir);
                        continue;
                }
                if (intent_record_remove(m->root, path) >= 0) {
                        log_info("Removed %s/%s: %s/%s is gone", m->root->path, path, m->root->path, volume_dir);
                        c->pruned++;
                }
        }
        closedir(d);
        /* Emptied (or left empty by a crash): gone too, but not the tree's top. */
        if (depth > 0)
                (void) root_dir_rmdir(m->root, rel);
}

int reconstruct_actual_state(VolumeManager *m) {
        Counts c = {};
        int r;

        r = mount_table_refresh(m->mounts);
        if (r < 0)
                return log_error_errno(r, "Cannot read the mount table for reconstruction: %m");
        /* Node-wide dirs first (CSI's staging): publishes then name the
         * volumes they belong to. */
        for (const VolumeKind *const *k = volume_kinds(); *k; k++)
                if ((*k)->reconstruct_node)
                        (*k)->reconstruct_node(m, &c);
        (void) for_each_entry(m, "pods", scan_pod, &c);
        for (const VolumeKind *const *k = volume_kinds(); *k; k++)
                if ((*k)->reconstruct_node_after)
                        (*k)->reconstruct_node_after(m, &c);
        prune_records(m, &c, RECORDS_DIR, 0);
        (void) root_dir_rmdir(m->root, RECORDS_DIR); /* only if empty */
        /* What was moved or removed here stays so, before any pass builds on it. */
        if (c.moved > 0 || c.pruned > 0)
                (void) root_dir_sync(m->root);
        if (hashmap_size(m->volumes) > 0 || c.leftovers > 0 || c.skipped > 0 || c.moved > 0 || c.pruned > 0)
                log_info("Reconstructed %u volumes from %s: %u staged, %u published, %u uncertain, %u from a previous "
                         "boot; %u leftovers removed, %u skipped; %u records moved from volume dirs, %u of volumes "
                         "gone removed",
                         (unsigned) hashmap_size(m->volumes), m->root->path, c.staged, c.published, c.uncertain, c.stale,
                         c.leftovers, c.skipped, c.moved, c.pruned);
        return 0;
}
