/* SPDX-License-Identifier: Apache-2.0 */
/* The operation frame: stage, publish, unpublish, unstage of one volume,
 * whatever its kind.  Before: its directories, the kind's metadata and the
 * intent record (made durable by the pass, rootsync.c); then the kind's
 * steps (VolumeKind.run, volume/kind.h); after: the outcome in the actual
 * state and the intent record, the backoff, the log line, the Event and the
 * metric, and the manager told. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>

#include "systemd/log.h"
#include "volume/host/fsgroup.h"
#include "volume/host/offloop.h"
#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/kinds/csi/blockmap.h"
#include "volume/passes/operation.h"
#include "volume/passes/subpaths.h"
#include "volume/state/voldata.h"

LogFields operation_fields(const Operation *op) {
        return (LogFields){
                .pod_uid = op->pod.uid,
                .pod = op->pod.key,
                .volume = op->spec_name,
                .driver = op->av->driver,
                .volume_handle = op->av->handle,
        };
}

char *operation_abs_path(const Operation *op, const char *rel) {
        char *p = NULL;
        if (asprintf(&p, "%s/%s", op->m->root->path, rel) < 0)
                return NULL;
        return p;
}

static const char *const metric_names[_OP_KIND_MAX] = {
        [OP_STAGE] = "mount_device",
        [OP_PUBLISH] = "volume_mount",
        [OP_UNPUBLISH] = "volume_unmount",
        [OP_UNSTAGE] = "unmount_device",
};

/* kubelet's operation names for raw block volumes. */
static const char *const block_metric_names[_OP_KIND_MAX] = {
        [OP_STAGE] = "map_volume",
        [OP_PUBLISH] = "map_volume",
        [OP_UNPUBLISH] = "unmap_volume",
        [OP_UNSTAGE] = "unmap_device",
};

/* kubelet's event prefixes (operation_executor.go). */
static const char *event_prefix(const Operation *op) {
        if (op->av->block)
                return op->kind == OP_STAGE ? "MapVolume.SetUpDevice failed"
                                            : "MapVolume.MapPodDevice failed";
        return op->kind == OP_STAGE ? "MountVolume.MountDevice failed" : "MountVolume.SetUp failed";
}

/* Records why the operation failed; "uncertain": the volume may be mounted. */
void operation_fail(Operation *op, int error, bool uncertain, const char *format, ...) {
        va_list ap;

        free(op->message);
        va_start(ap, format);
        if (vasprintf(&op->message, format, ap) < 0)
                op->message = NULL;
        va_end(ap);
        op->error = error < 0 ? error : -EIO;
        op->uncertain = uncertain;
        operation_finish(op, false);
}

void operation_next(Operation *op) {
        op->step++;
        operation_run(op);
}

/* ---- directories and metadata ----------------------------------------------- */

bool operation_staging(const Operation *op) {
        return op->kind == OP_STAGE || op->kind == OP_UNSTAGE;
}

/* The dir holding the volume's vol_data.json: the staging volume dir or the
 * pod's volume dir; for a raw block volume a data dir: its staging's under
 * the name of the PV it was staged for, a publish's under the name of that
 * pod's PV (two PVs may name one volume, and kubelet names every block path
 * after the PV). */
static int volume_dir_of(const Operation *op, char **ret) {
        return op->av->kind->paths(op->av, operation_staging(op), op->pod.uid, op->spec_name, ret, NULL);
}

/* The operation's intent record: beside vol_data.json, one per pod for the
 * publishes of a raw block volume (they share the volume's data dir). */
static int record_path_of(const Operation *op, char **ret) {
        _cleanup_free_ char *dir = NULL;
        int r = volume_dir_of(op, &dir);

        if (r < 0)
                return r;
        return path_intent_record(dir, op->av->block && !operation_staging(op) ? op->pod.uid : NULL, ret);
}

/* The record's bytes; a newer kvolumed's record stays as it is: this build
 * cannot tell what it says of the volume, and a rollback must not lose it. */
static int intent_text(VolumeManager *m, const char *path, Intent *i, char **ret) {
        if (hashmap_get(m->newer_records, path))
                return -EPROTONOSUPPORT;
        memcpy(i->boot_id, m->boot_id, sizeof i->boot_id);
        return intent_format(i, ret);
}

int intent_write(VolumeManager *m, const char *path, Intent *i, bool durable) {
        _cleanup_free_ char *text = NULL;
        int r;

        r = intent_text(m, path, i, &text);
        if (r >= 0)
                r = intent_record_dirs(m->root, path);
        if (r < 0)
                return r;
        return root_dir_write_file(m->root, path, text, strlen(text), 0640, durable);
}

static int remove_volume_dirs(Operation *op) {
        _cleanup_free_ char *dir = NULL;
        LogFields f = operation_fields(op);
        int r;

        if (op->av->block)
                return block_dirs_remove(op->m->root, &f,
                                         operation_staging(op) ? op->av->spec_name : op->spec_name,
                                         operation_staging(op) ? NULL : op->pod.uid);
        r = volume_dir_of(op, &dir);
        if (r < 0)
                return r;
        return volume_dirs_remove(op->m, &f, dir, op->target, operation_staging(op));
}

/* The dirs a stage or publish needs before its call: kubelet makes
 * globalmount (or a block volume's staging dir) itself, but leaves the
 * publish target ("mount", or a block device file) to the driver and makes
 * only its parent. */
static int make_dirs(Operation *op, const char *dir) {
        _cleanup_free_ char *parent = NULL;
        LogFields f = operation_fields(op);
        const char *paths[2] = { dir, NULL };
        int r;

        if (op->av->kind->no_volume_dir)
                return 0;
        if (op->kind == OP_STAGE)
                paths[1] = op->target;
        else if (op->av->block) {
                parent = strdup(op->target);
                if (!parent)
                        return -ENOMEM;
                *strrchr(parent, '/') = '\0';
                paths[1] = parent;
        }
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                if (!paths[i])
                        continue;
                r = root_dir_mkdir_p(op->m->root, paths[i], 0750, NULL);
                if (r < 0)
                        return log_fields_errno(LOG_ERR, r, &f, "Failed to create %s/%s: %m",
                                                op->m->root->path, paths[i]);
        }
        return 0;
}

/* Before the CSI call: what it needs on disk, and the intent record that
 * tells reconstruction this call may have happened.  The records (the
 * kind's metadata, the intent) go to the intent log first, and the log is
 * made durable off the loop while their directories and files are written
 * here: a new pod's volume dirs (8 mkdirs, kubelet's tree and kvolumed's)
 * and that fdatasync are its two longest waits before the call, and need
 * not be one after the other.  The call starts once both are done
 * (rootsync.c); the files themselves are made durable after it. */
int operation_prepare(Operation *op) {
        _cleanup_free_ char *dir = NULL, *record = NULL, *record_text = NULL, *metadata = NULL,
                            *metadata_text = NULL;
        LogFields f = operation_fields(op);
        RootDir *root = op->m->root;
        bool setup = op->kind == OP_STAGE || op->kind == OP_PUBLISH;
        Intent i = { .operation = op->kind, .pod = op->pod.key };
        mode_t metadata_mode = 0;
        int r;

        r = volume_dir_of(op, &dir);
        if (r >= 0)
                r = record_path_of(op, &record);
        if (r < 0)
                return r;
        if (op->m->prepare_delay_usec > 0) /* tests: a slow root-dir */
                (void) usleep(op->m->prepare_delay_usec);
        /* A newer kvolumed's record (reconstruct.c): nothing of this volume
         * dir is touched, not its vol_data.json, not its directories. */
        if (hashmap_get(op->m->newer_records, record)) {
                log_fields(LOG_DEBUG, &f, "Not %s %s: %s/%s is a newer kvolumed's record",
                           op_kind_to_string(op->kind), op->av->unique_name, root->path, record);
                return -EPROTONOSUPPORT;
        }
        /* A teardown whose volume dir is gone has nothing left to record in. */
        if (!setup && root_dir_exists(root, dir) == 0)
                return 0;
        r = intent_text(op->m, record, &i, &record_text);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, &f, "Failed to make %s/%s: %m", root->path, record);
        /* A block publish writes its PV's data file too: kubelet has one per
         * PV (NewBlockVolumeMapper), and reconstruction finds the publishes
         * of a PV that did not stage the volume through it. */
        if (setup && op->av->kind->metadata) {
                r = op->av->kind->metadata(op, dir, &metadata, &metadata_text, &metadata_mode);
                if (r < 0)
                        return r;
                root_dir_log_ahead(root, metadata, metadata_text, strlen(metadata_text), metadata_mode);
        }
        root_dir_log_ahead(root, record, record_text, strlen(record_text), 0640);
        if (op->m->sync)
                root_sync_kick(op->m->sync);
        root_test_hold("PREPARE_HOLD");

        if (setup) {
                r = make_dirs(op, dir);
                if (r < 0)
                        return r;
                if (metadata) {
                        r = root_dir_write_logged_file(root, metadata, metadata_text, strlen(metadata_text),
                                                       metadata_mode);
                        if (r < 0)
                                log_fields_errno(LOG_ERR, r, &f, "Failed to write %s/%s: %m", root->path, metadata);
                }
        }
        if (r >= 0) {
                r = intent_record_dirs(root, record);
                if (r >= 0)
                        r = root_dir_write_logged_file(root, record, record_text, strlen(record_text), 0640);
                /* From now on the volume may be mounted with this context:
                 * another pod wanting a different one waits (reconciler.c). */
                if (r >= 0 && setup && !op->av->block)
                        r = free_and_strdup(&op->av->selinux_context, op->selinux_context);
                if (r < 0)
                        log_fields_errno(LOG_ERR, r, &f, "Failed to write %s/%s: %m", root->path, record);
        }
        if (r < 0) {
                /* Nothing will track what was made: take it away again (never a
                 * mount point, never recursively), unless a volume lives there. */
                if (setup && !(op->kind == OP_STAGE ? op->av->stage != STAGE_NONE
                                                    : hashmap_get(op->av->publishes, op->pod.uid) != NULL))
                        (void) remove_volume_dirs(op);
                return r;
        }
        log_fields(LOG_DEBUG, &f, "Recorded %s intent in %s/%s", op_kind_to_string(op->kind), root->path, record);
        return 0;
}

int volume_dirs_remove(VolumeManager *m, const LogFields *f, const char *dir_in, const char *target,
                       bool staging) {
        _cleanup_free_ char *dir = strdup(dir_in), *vol_data = NULL, *intent = NULL;
        int r;

        if (!dir)
                return -ENOMEM;
        /* The kernel refuses to remove a mount point (EBUSY) without asking
         * its file system anything: no stat of it first, which would hang on
         * a dead NFS server or FUSE daemon and the whole loop with it. */
        r = root_dir_rmdir(m->root, target);
        if (r == -EBUSY)
                return log_fields_errno(LOG_ERR, EBUSY, f, "%s/%s is still a mount point; not removing it",
                                        m->root->path, target);
        if (r < 0 && r != -ENOTDIR)
                return log_fields_errno(LOG_ERR, r, f, "Failed to remove %s/%s: %m", m->root->path, target);
        if (asprintf(&vol_data, "%s/" VOL_DATA_FILE, dir) < 0)
                return -ENOMEM;
        r = path_intent_record(dir, NULL, &intent);
        if (r < 0)
                return r;
        /* The intent last: until it goes, reconstruction knows the volume is ours. */
        r = root_dir_unlink(m->root, vol_data);
        if (r >= 0)
                r = intent_record_remove(m->root, intent);
        if (r >= 0)
                r = root_dir_rmdir(m->root, dir);
        if (r < 0)
                return log_fields_errno(LOG_ERR, r, f, "Failed to remove %s/%s: %m", m->root->path, dir);
        log_fields(LOG_DEBUG, f, "Removed %s/%s", m->root->path, dir);

        /* Parents made by mkdir -p, if nothing else lives there any more. */
        for (char *slash; (slash = strrchr(dir, '/'));) {
                *slash = '\0';
                if (streq(dir, staging ? "plugins/" CSI_PLUGIN_NAME : "pods"))
                        break;
                if (root_dir_rmdir(m->root, dir) < 0)
                        break;
        }
        return 0;
}

/* ---- running: the kind's steps -------------------------------------------------- */

void operation_run(Operation *op) {
        /* root-dir is not the directory kvolumed locked: no call, no
         * record, until it is again (rootwatch.c). */
        if (op->m->root_lost) {
                root_watch_park(op->m, op, OP_RESUME_RUN);
                return;
        }
        /* A pod's subPath binds go before its volume does (subpaths.c). */
        if (op->kind == OP_UNPUBLISH && !op->subpaths_done && subpaths_unpublish_start(op))
                return;
        op->av->kind->run(op);
}

/* ---- outcome ------------------------------------------------------------------- */

/* The call succeeded: say so in the intent record, lazily (if the record
 * is lost, reconstruction takes the volume for uncertain and repeats the
 * call, which drivers must accept). */
static void record_done(Operation *op, bool mount) {
        _cleanup_free_ char *record = NULL;
        LogFields f = operation_fields(op);
        Intent i = { .operation = op->kind,
                     .done = true,
                     .mount = mount,
                     .pod = op->pod.key,
                     .device = op->device,
                     .device_serial = op->device_serial,
                     .device_link = op->device_link };
        int r = record_path_of(op, &record);

        if (r >= 0)
                r = intent_write(op->m, record, &i, false);
        if (r < 0)
                log_fields_errno(LOG_WARNING, r, &f, "Failed to record the %s of %s as done: %m",
                                 op_kind_to_string(op->kind), op->av->unique_name);
}

/* The driver said the teardown succeeded, but what it was to take away is
 * still there (the target still a mount point: a driver that lost track of a
 * publish answers "nothing to do").  A failure like any other: backoff,
 * an Event, never the same call again at once. */
static void teardown_incomplete(Operation *op, int error) {
        free(op->message);
        if (asprintf(&op->message, "%s: %s succeeded, but %s/%s %s", op->av->kind->plugin_name,
                     volume_kind_call_name(op->av->kind, op->kind), op->m->root->path,
                     op->target, error == -EBUSY ? "is still a mount point" : "could not be removed") < 0)
                op->message = NULL;
        op->error = error < 0 ? error : -EIO;
        op->uncertain = false;
}

/* Updates the actual state, and returns whether the operation succeeded
 * after all.  Rules, as kubelet's: success → done; an uncertain failure →
 * uncertain (may be mounted); a failure where the call never happened
 * changes nothing; a final failure → nothing is there, and the directories
 * go — unless something is mounted at the target after all, which keeps the
 * volume uncertain so that it is torn down, never forgotten.  A teardown is
 * a success only once its directories are gone. */
static bool record_outcome(Operation *op, bool success) {
        ActualVolume *av = op->av;
        ActualPublish *existing = op->pod.uid ? hashmap_get(av->publishes, op->pod.uid) : NULL;
        bool nothing_happened = !success && !op->called;

        switch (op->kind) {
        case OP_STAGE:
                av->unstage_call_done = false;
                if (success) {
                        actual_volume_set_stage(av, STAGE_DONE);
                        av->stage_stale = false;
                        /* Only a mount can be watched for loss.  Whether the call
                         * made one comes from the mount table (manager.c): a stat
                         * of the target could hang on a dead file system. */
                        av->staged_mount = !av->block;
                        actual_volume_set_mount_pending(av, !av->block);
                        record_done(op, av->staged_mount);
                        mount_watch_settle_soon(op->m, av);
                }
                else if (op->uncertain)
                        actual_volume_set_stage(av, STAGE_UNCERTAIN);
                else if (av->stage == STAGE_DONE || (nothing_happened && av->stage == STAGE_UNCERTAIN))
                        ; /* unchanged */
                else
                        actual_volume_set_stage(av,
                                                remove_volume_dirs(op) >= 0 ? STAGE_NONE : STAGE_UNCERTAIN);
                break;
        case OP_PUBLISH:
                /* An attempt that did not get as far as its call (or the
                 * point it resumes at) leaves what the last one learnt. */
                if (existing && op->called)
                        existing->call_done = false;
                if (existing)
                        existing->unpublish_call_done = false;
                /* A failed republish leaves the publish as it was: done. */
                if (success || (op->uncertain && !op->republish)) {
                        (void) actual_publish_set(av, &op->pod, op->spec_name, op->target,
                                                  success ? PUBLISH_DONE : PUBLISH_UNCERTAIN);
                        existing = hashmap_get(av->publishes, op->pod.uid);
                        if (existing)
                                existing->stale = false;
                        /* A step after the call failed: the retry resumes
                         * there (op->resume_after_call, the kind's say).  Not
                         * a failed block mapping (CSI's STEP_MAP): what
                         * the call published is no usable device, and only
                         * the call can make it again. */
                        if (existing && !success && op->call_ok && op->resume_after_call)
                                existing->call_done = true;
                        if (existing && success) {
                                /* Taken for a mount until the mount table says
                                 * otherwise (manager.c); a raw block publish is a
                                 * device node's bind mount, which a stat cannot hang on. */
                                existing->not_a_mount =
                                        av->block && root_dir_is_mount_point(op->m->root, op->target) <= 0;
                                actual_publish_set_mount_pending(av, existing, !av->block);
                                record_done(op, !existing->not_a_mount);
                                mount_watch_settle_soon(op->m, av);
                        }
                }
                else if (existing && (existing->state == PUBLISH_DONE || nothing_happened))
                        ; /* unchanged */
                else if (remove_volume_dirs(op) >= 0)
                        actual_publish_remove(av, op->pod.uid);
                else
                        (void) actual_publish_set(av, &op->pod, op->spec_name, op->target,
                                                  PUBLISH_UNCERTAIN);
                break;
        case OP_UNPUBLISH:
        case OP_UNSTAGE: {
                int r = success ? remove_volume_dirs(op) : 0;
                bool resume = false;
                /* Whatever the teardown did, a publish that follows calls again. */
                if (existing)
                        existing->call_done = false;
                if (op->kind == OP_UNSTAGE)
                        av->stage_stale = false;
                if (success && r >= 0) {
                        if (op->kind == OP_UNPUBLISH)
                                actual_publish_remove(av, op->pod.uid);
                        else {
                                av->unstage_call_done = false;
                                actual_volume_set_stage(av, STAGE_NONE);
                        }
                        break;
                }
                if (success) {
                        teardown_incomplete(op, r);
                        success = false;
                        /* The call answered OK and the target is no mount
                         * point (EBUSY would say it is): the retry only
                         * removes what is left, and calls again only if
                         * something is mounted there by then. */
                        resume = op->call_ok && r != -EBUSY;
                }
                if (op->kind == OP_UNSTAGE) {
                        if (op->called)
                                av->unstage_call_done = resume;
                        actual_volume_set_stage(av, STAGE_UNCERTAIN);
                } else if (existing) {
                        if (op->called)
                                existing->unpublish_call_done = resume;
                        actual_publish_set_state(av, existing, PUBLISH_UNCERTAIN);
                }
                break;
        }
        default:
                break;
        }
        return success;
}

void operation_finish(Operation *op, bool success) {
        VolumeManager *m = op->m;
        ActualVolume *av = op->av;
        LogFields f = operation_fields(op);
        uint64_t now = 0, duration;
        Backoff *b;

        /* Its outcome goes to the records: not into a directory that is not
         * root-dir's any more (rootwatch.c). */
        if (m->root_lost) {
                root_watch_park(m, op, success ? OP_RESUME_SUCCEEDED : OP_RESUME_FAILED);
                return;
        }
        /* A publish is done once its subPaths are prepared too (subpaths.c). */
        if (success && op->kind == OP_PUBLISH && !op->subpaths_done && subpaths_publish_end(op))
                return;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        duration = now - op->start_usec;
        op->secret = k8s_secret_free(op->secret);
        success = record_outcome(op, success);

        if (av->kind->outcome)
                av->kind->outcome(op, success);
        if (success) {
                actual_backoff_forget(av, op->kind, op->pod.uid);
                /* A republish (requiresRepublish, every interval) is routine: debug only. */
                f.message_id = op->kind == OP_PUBLISH && !op->republish ? LOG_MESSAGE_ID_VOLUME_PUBLISHED
                               : op->kind == OP_UNPUBLISH               ? LOG_MESSAGE_ID_VOLUME_UNPUBLISHED
                                                                        : NULL;
                log_fields(
                        (op->kind == OP_PUBLISH && !op->republish) || op->kind == OP_UNPUBLISH ? LOG_INFO
                                                                                               : LOG_DEBUG,
                        &f, "Volume %s %s%s%s in %.1f ms", op->spec_name,
                        op->kind == OP_STAGE       ? "staged"
                        : op->republish            ? "republished"
                        : op->kind == OP_PUBLISH   ? "published"
                        : op->kind == OP_UNPUBLISH ? "unpublished"
                                                   : "unstaged",
                        op->pod.key ? " for pod " : "", strempty(op->pod.key), (double) duration / 1000.0);
                /* kubelet no longer records this as an Event by default; at debug level we do. */
                if (op->kind == OP_PUBLISH && !op->republish && log_get_max_level() >= LOG_DEBUG)
                        manager_pod_event(m, &op->pod, "Normal", "SuccessfulMountVolume",
                                          "MountVolume.SetUp succeeded for volume \"%s\"", op->spec_name);
        } else if (op->refused_beside_others) {
                /* Tried again as soon as the volume's other calls are done,
                 * without a backoff and without an Event. */
                manager_learn_one_call_per_volume(m, av->driver);
                log_fields(LOG_DEBUG, &f,
                           "%s of %s for pod %s refused while another call of the volume ran: %s",
                           op_kind_to_string(op->kind), av->unique_name, strempty(op->pod.key),
                           strempty(op->message));
        } else {
                b = actual_backoff_failed(av, op->kind, op->pod.uid, now);
                /* A CSI call's failure, with its method and code, or one
                 * found outside any call: two catalog entries. */
                f.csi_method = op->failed_method;
                f.csi_code = op->failed_method ? op->failed_code : NULL;
                f.message_id = op->failed_method ? LOG_MESSAGE_ID_VOLUME_FAILED : LOG_MESSAGE_ID_VOLUME_BLOCKED;
                log_fields_errno(LOG_WARNING, op->error, &f,
                                 "Operation %s for \"%s\"%s%s failed%s. No retries permitted for %" PRIu64
                                 " ms. Error: %s",
                                 op_kind_to_string(op->kind), av->unique_name, op->pod.key ? " pod " : "",
                                 strempty(op->pod.key),
                                 op->uncertain && !op->republish ? " (volume uncertain)" : "",
                                 b ? b->duration_usec / USEC_PER_MSEC : 0, strempty(op->message));
                if ((op->kind == OP_STAGE || op->kind == OP_PUBLISH) && op->pod.uid && !m->stopping)
                        manager_pod_event(m, &op->pod, "Warning",
                                          av->block ? "FailedMapVolume" : "FailedMount",
                                          "%s for volume \"%s\" : %s", event_prefix(op), op->spec_name,
                                          strempty(op->message));
                /* kubelet sends none for a failed teardown; an operator whose
                 * pod hangs in Terminating wants to see why.  Repeats of it
                 * are one Event with a count (k8s/events.h). */
                else if (op->kind == OP_UNPUBLISH && op->pod.uid && op->pod.name && !m->stopping)
                        manager_pod_event(m, &op->pod, "Warning", "FailedUnMount",
                                          "%s for volume \"%s\" : %s",
                                          av->block ? "UnmapVolume.UnmapPodDevice failed"
                                                    : "UnmountVolume.TearDown failed",
                                          op->spec_name, strempty(op->message));
        }
        if (m->metrics_hook) {
                /* kubelet's plugin label: "kubernetes.io/csi:<driver>" for a
                 * driver's volume, the plugin's name otherwise. */
                char plugin[128];
                if (av->driver)
                        snprintf(plugin, sizeof plugin, "%s:%s", av->kind->plugin_name, av->driver);
                else
                        snprintf(plugin, sizeof plugin, "%s", av->kind->plugin_name);
                /* migrated: kubelet's Spec.Migrated of the spec the operation
                 * has (a teardown: the one the volume was set up with). */
                m->metrics_hook(plugin, (av->block ? block_metric_names : metric_names)[op->kind], success,
                                op->spec ? op->spec->migrated_from != NULL : av->migrated_from != NULL,
                                duration, m->metrics_userdata);
        }
        manager_operation_done(m, op, success);
}

/* ---- life cycle ---------------------------------------------------------------- */

Operation *operation_free(Operation *op) {
        if (!op)
                return NULL;
        if (op->call)
                csi_call_cancel(op->call);
        fsgroup_walk_free(op->fsgroup); /* a child still walking is killed */
        offloop_free(op->job);          /* a thread still working finishes alone */
        k8s_secret_free(op->secret);
        tokens_free(op->tokens);
        k8s_string_map_done(&op->publish_context);
        volume_spec_free(op->spec);
        pod_info_done(&op->pod);
        free(op->target);
        free(op->device);
        free(op->device_serial);
        free(op->device_link);
        free(op->spec_name);
        free(op->message);
        free(op->selinux_context);
        free(op);
        return NULL;
}

const char *operation_selinux_context(VolumeManager *m, const VolumeSpec *spec) {
        bool kind_mounts = spec && spec->kind->selinux_mount && spec->kind->selinux_mount(m, spec);
        return volume_spec_selinux_context(spec, m->selinux_enabled, kind_mounts, m->selinux_mount_all);
}

int operation_new(VolumeManager *m, OpKind kind, ActualVolume *av, const VolumeSpec *spec,
                  const PodInfo *pod, const char *spec_name, Operation **ret) {
        Operation *op = calloc(1, sizeof *op);
        int r = 0;

        if (!op)
                return -ENOMEM;
        op->m = m;
        op->kind = kind;
        op->av = av;
        if ((kind == OP_PUBLISH || kind == OP_UNPUBLISH) && pod && pod->uid) {
                ActualPublish *pub = hashmap_get(av->publishes, pod->uid);
                op->republish = kind == OP_PUBLISH && pub && pub->state == PUBLISH_DONE;
                op->resume = pub && pub->state == PUBLISH_UNCERTAIN &&
                             (kind == OP_PUBLISH ? pub->call_done : pub->unpublish_call_done);
                op->previous_boot = kind == OP_UNPUBLISH && pub && pub->stale;
        }
        if (kind == OP_UNSTAGE) {
                op->previous_boot = av->stage == STAGE_NONE && av->stage_stale;
                op->resume = av->stage == STAGE_UNCERTAIN && av->unstage_call_done;
        }
        if (spec && !(op->spec = volume_spec_copy(spec)))
                r = -ENOMEM;
        if (r >= 0 && pod)
                r = pod_info_copy(pod, &op->pod);
        if (r >= 0 && !(op->spec_name = strdup(spec_name ?: av->spec_name)))
                r = -ENOMEM;
        if (r >= 0 && (kind == OP_STAGE || kind == OP_PUBLISH))
                r = strdup_or_null(operation_selinux_context(m, spec), &op->selinux_context);
        if (r >= 0) {
                bool staging = kind == OP_STAGE || kind == OP_UNSTAGE;
                r = av->kind->paths(av, staging, staging ? NULL : pod->uid, op->spec_name, NULL,
                                    &op->target);
        }
        if (r < 0) {
                operation_free(op);
                return r;
        }
        *ret = op;
        return 0;
}

void operation_resume(Operation *op, OpResume how) {
        if (how == OP_RESUME_RUN)
                operation_run(op);
        else
                operation_finish(op, how == OP_RESUME_SUCCEEDED);
}

void operation_start(Operation *op) {
        LogFields f = operation_fields(op);

        (void) sd_event_now(op->m->event, CLOCK_MONOTONIC, &op->start_usec);
        log_fields(LOG_DEBUG, &f, "Starting %s of %s", op_kind_to_string(op->kind), op->av->unique_name);
        operation_run(op);
}
