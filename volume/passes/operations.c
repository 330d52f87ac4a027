/* SPDX-License-Identifier: Apache-2.0 */
/* Operations: stage, publish, unpublish, unstage of one volume.  Each is a
 * short chain of steps, some asynchronous (a CSI call, a Secret GET, an
 * ownership change in a child process); failures are classified as kubelet
 * does: final (nothing was mounted), uncertain (maybe mounted: keep tracking
 * and retry or tear down), transient (nothing happened: retry later). */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>

#include "systemd/log.h"
#include "volume/host/fsgroup.h"
#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/kinds/csi/blockmap.h"
#include "volume/state/voldata.h"

enum {
        STEP_CAPABILITIES,
        STEP_PUBLISH_CONTEXT,
        STEP_SECRET,
        STEP_TOKENS,    /* publish: the service account tokens the driver asks for */
        STEP_UNMAP,     /* raw block unpublish: the pod's device path first */
        STEP_CALL,
        STEP_MAP,       /* raw block publish: expose the device to the pod */
        STEP_OWNERSHIP,
        STEP_EXPAND,    /* publish: grow the file system before the publish counts as done */
        STEP_FINISH,
};

static void op_run(Operation *op);
static void op_finish(Operation *op, bool success);

static LogFields op_fields(const Operation *op) {
        return (LogFields){
                .pod_uid = op->pod.uid,
                .pod = op->pod.key,
                .volume = op->spec_name,
                .driver = op->av->driver,
                .volume_handle = op->av->handle,
        };
}

static char *abs_path(const Operation *op, const char *rel) {
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
                return op->kind == OP_STAGE ? "MapVolume.SetUpDevice failed" : "MapVolume.MapPodDevice failed";
        return op->kind == OP_STAGE ? "MountVolume.MountDevice failed" : "MountVolume.SetUp failed";
}

/* Records why the operation failed; "uncertain": the volume may be mounted. */
static void op_fail(Operation *op, int error, bool uncertain, const char *format, ...) _printf_(4, 5);
static void op_fail(Operation *op, int error, bool uncertain, const char *format, ...) {
        va_list ap;

        free(op->message);
        va_start(ap, format);
        if (vasprintf(&op->message, format, ap) < 0)
                op->message = NULL;
        va_end(ap);
        op->error = error < 0 ? error : -EIO;
        op->uncertain = uncertain;
        op_finish(op, false);
}

static void op_continue(Operation *op) {
        op->step++;
        op_run(op);
}

/* ---- directories and metadata ----------------------------------------------- */

static bool op_staging(const Operation *op) {
        return op->kind == OP_STAGE || op->kind == OP_UNSTAGE;
}

/* The dir holding the volume's vol_data.json: the staging volume dir or the
 * pod's volume dir; for a raw block volume a data dir: its staging's under
 * the name of the PV it was staged for, a publish's under the name of that
 * pod's PV (two PVs may name one volume, and kubelet names every block path
 * after the PV). */
static int volume_dir_of(const Operation *op, char **ret) {
        if (op->av->block)
                return path_block_data_dir(op_staging(op) ? op->av->spec_name : op->spec_name, ret);
        if (op_staging(op))
                return path_staging_volume_dir(op->av->driver, op->av->handle, ret);
        return path_pod_volume_dir(op->pod.uid, op->spec_name, ret);
}

/* The operation's intent record: beside vol_data.json, one per pod for the
 * publishes of a raw block volume (they share the volume's data dir). */
static int record_path_of(const Operation *op, char **ret) {
        _cleanup_free_ char *dir = NULL;
        int r = volume_dir_of(op, &dir);

        if (r < 0)
                return r;
        return path_intent_record(dir, op->av->block && !op_staging(op) ? op->pod.uid : NULL, ret);
}

static int write_vol_data(Operation *op, const char *dir) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        char attachment[CSI_HASH_NAME_MAX];
        VolData d = {};
        int r;

        if (op->kind == OP_STAGE && !op->av->block)
                d = (VolData){ .volume_handle = op->av->handle, .driver_name = op->av->driver };
        else {
                r = csi_attachment_name(op->av->handle, op->av->driver, op->m->node_name, attachment);
                if (r < 0)
                        return r;
                /* kubelet always writes attachmentID, even for volumes never attached. */
                d = (VolData){
                        .spec_vol_id = op->spec_name,
                        .volume_handle = op->av->handle,
                        .driver_name = op->av->driver,
                        .node_name = op->m->node_name,
                        .attachment_id = attachment,
                        .volume_lifecycle_mode = op->av->lifecycle == VOLUME_EPHEMERAL ? (char *) "Ephemeral"
                                                                                       : (char *) "Persistent",
                };
                /* kubelet's block data file has no lifecycle mode (kubelet-facts §1.2). */
                if (op->av->block)
                        d.volume_lifecycle_mode = NULL;
        }
        /* kubelet's key, in both files, so that a restart knows the mount's context. */
        d.selinux_mount_context = op->selinux_context;
        r = vol_data_format(&d, &text);
        if (r < 0)
                return r;
        if (asprintf(&path, "%s/" VOL_DATA_FILE, dir) < 0)
                return -ENOMEM;
        /* Not durable yet: noted (rootdir.c), the pass makes its notes durable at once. */
        /* kubelet's os.Create under systemd's default umask 0022 (kubelet-facts §1.2). */
        return root_dir_write_file(op->m->root, path, text, strlen(text), 0644, false);
}

int intent_write(VolumeManager *m, const char *path, Intent *i, bool durable) {
        _cleanup_free_ char *text = NULL;
        int r;

        /* A newer kvolumed's record stays as it is: this build cannot tell
         * what it says of the volume, and a rollback must not lose it. */
        if (hashmap_get(m->newer_records, path))
                return -EPROTONOSUPPORT;
        memcpy(i->boot_id, m->boot_id, sizeof i->boot_id);
        r = intent_format(i, &text);
        if (r < 0)
                return r;
        r = intent_record_dirs(m->root, path);
        if (r < 0)
                return r;
        return root_dir_write_file(m->root, path, text, strlen(text), 0640, durable);
}

static int remove_volume_dirs(Operation *op) {
        _cleanup_free_ char *dir = NULL;
        LogFields f = op_fields(op);
        int r;

        if (op->av->block)
                return block_dirs_remove(op->m->root, &f, op_staging(op) ? op->av->spec_name : op->spec_name,
                                         op_staging(op) ? NULL : op->pod.uid);
        r = volume_dir_of(op, &dir);
        if (r < 0)
                return r;
        return volume_dirs_remove(op->m, &f, dir, op->target, op_staging(op));
}

/* Before the CSI call: what it needs on disk, and the intent record that
 * tells reconstruction this call may have happened.  Not durable yet: the
 * pass makes every file and directory noted durable at once (rootsync.c). */
/* The dirs a stage or publish needs before its call: kubelet makes
 * globalmount (or a block volume's staging dir) itself, but leaves the
 * publish target ("mount", or a block device file) to the driver and makes
 * only its parent. */
static int make_dirs(Operation *op, const char *dir) {
        _cleanup_free_ char *parent = NULL;
        LogFields f = op_fields(op);
        const char *paths[2] = { dir, NULL };
        int r;

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
                        return log_fields_errno(LOG_ERR, r, &f, "Failed to create %s/%s: %m", op->m->root->path,
                                                paths[i]);
        }
        return 0;
}

/* Before the CSI call: what it needs on disk, and the intent record that
 * tells reconstruction this call may have happened.  Not durable yet: the
 * pass makes every file and directory noted durable at once (rootsync.c). */
int operation_prepare(Operation *op) {
        _cleanup_free_ char *dir = NULL, *record = NULL;
        LogFields f = op_fields(op);
        bool setup = op->kind == OP_STAGE || op->kind == OP_PUBLISH;
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
                log_fields(LOG_DEBUG, &f, "Not %s %s: %s/%s is a newer kvolumed's record", op_kind_to_string(op->kind),
                           op->av->unique_name, op->m->root->path, record);
                return -EPROTONOSUPPORT;
        }
        if (setup) {
                r = make_dirs(op, dir);
                if (r < 0)
                        return r;
                /* A block publish writes its PV's data file too: kubelet has one
                 * per PV (NewBlockVolumeMapper), and reconstruction finds the
                 * publishes of a PV that did not stage the volume through it. */
                r = write_vol_data(op, dir);
                if (r < 0)
                        log_fields_errno(LOG_ERR, r, &f, "Failed to write %s/%s/" VOL_DATA_FILE ": %m",
                                         op->m->root->path, dir);
        }
        /* A teardown whose volume dir is gone has nothing left to record in. */
        if (r >= 0 && !setup && root_dir_exists(op->m->root, dir) == 0)
                return 0;
        if (r >= 0) {
                Intent i = { .operation = op->kind, .pod = op->pod.key };
                r = intent_write(op->m, record, &i, false);
                /* From now on the volume may be mounted with this context:
                 * another pod wanting a different one waits (reconciler.c). */
                if (r >= 0 && setup && !op->av->block)
                        r = free_and_strdup(&op->av->selinux_context, op->selinux_context);
                if (r < 0)
                        log_fields_errno(LOG_ERR, r, &f, "Failed to write %s/%s: %m", op->m->root->path, record);
        }
        if (r < 0) {
                /* Nothing will track what was made: take it away again (never a
                 * mount point, never recursively), unless a volume lives there. */
                if (setup && !(op->kind == OP_STAGE ? op->av->stage != STAGE_NONE
                                                    : hashmap_get(op->av->publishes, op->pod.uid) != NULL))
                        (void) remove_volume_dirs(op);
                return r;
        }
        log_fields(LOG_DEBUG, &f, "Recorded %s intent in %s/%s", op_kind_to_string(op->kind), op->m->root->path,
                   record);
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

/* ---- steps --------------------------------------------------------------------- */

static void on_capabilities(const CsiStatus *status, const CsiNodeCapabilities *caps, void *userdata) {
        Operation *op = userdata;
        DriverCaps *dc;

        op->call = NULL;
        if (status->code != CSI_CODE_OK) {
                op_fail(op, -EIO, false, "kubernetes.io/csi: failed to get node capabilities of driver %s: %s: %s",
                        op->av->driver, csi_code_name(status->code), status->message);
                return;
        }
        dc = hashmap_get(op->m->caps, op->av->driver);
        if (!dc) {
                dc = calloc(1, sizeof *dc);
                if (dc && hashmap_put(op->m->caps, op->av->driver, dc, NULL) < 0) {
                        free(dc);
                        dc = NULL;
                }
        }
        if (dc) {
                dc->known = true;
                dc->caps = *caps;
        }
        op->stage_capable = csi_node_capabilities_has(caps, CSI_NODE_CAP_STAGE_UNSTAGE_VOLUME);
        op->mount_group_capable = csi_node_capabilities_has(caps, CSI_NODE_CAP_VOLUME_MOUNT_GROUP);
        op->multi_writer_capable = csi_node_capabilities_has(caps, CSI_NODE_CAP_SINGLE_NODE_MULTI_WRITER);
        op_continue(op);
}

static void step_capabilities(Operation *op) {
        DriverCaps *dc = hashmap_get(op->m->caps, op->av->driver);
        int r;

        if (op->kind == OP_UNPUBLISH) {
                op_continue(op); /* NodeUnpublishVolume needs no capability */
                return;
        }
        if (dc && dc->known) {
                op->stage_capable = csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_STAGE_UNSTAGE_VOLUME);
                op->mount_group_capable = csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_VOLUME_MOUNT_GROUP);
                op->multi_writer_capable =
                        csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_SINGLE_NODE_MULTI_WRITER);
                op_continue(op);
                return;
        }
        r = csi_node_get_capabilities(op->m->csi, op->av->driver, on_capabilities, op, &op->call);
        if (r == -ENOENT)
                op_fail(op, r, false, "kubernetes.io/csi: driver name %s not found in the list of registered CSI "
                        "drivers", op->av->driver);
        else if (r < 0)
                op_fail(op, r, false, "kubernetes.io/csi: failed to call NodeGetCapabilities: %s", strerror(-r));
}

static void on_attachment(K8sClient *c, int error, long status, const char *message, void *obj, void *userdata) {
        _cleanup_(k8s_volume_attachment_freep) K8sVolumeAttachment *va = obj;
        Operation *op = userdata;
        char name[CSI_HASH_NAME_MAX] = "";

        (void) csi_attachment_name(op->av->handle, op->av->driver, op->m->node_name, name);
        if (!va) {
                op_fail(op, error < 0 ? error : -ENOENT, false, "kubernetes.io/csi: failed to fetch publishContext: "
                        "volume attachment %s: %s", name, message ?: "not found");
                return;
        }
        if (!va->attached) {
                op_fail(op, -ENOENT, false, "kubernetes.io/csi: volume attachment %s is not attached", name);
                return;
        }
        k8s_string_map_done(&op->publish_context);
        for (size_t i = 0; i < va->attachment_metadata.n; i++) {
                char **keys = reallocarray(op->publish_context.keys, i + 1, sizeof(char *));
                char **values = keys ? reallocarray(op->publish_context.values, i + 1, sizeof(char *)) : NULL;
                if (keys)
                        op->publish_context.keys = keys;
                if (values)
                        op->publish_context.values = values;
                if (!keys || !values || !(keys[i] = strdup(va->attachment_metadata.keys[i]))) {
                        op_fail(op, -ENOMEM, false, "out of memory");
                        return;
                }
                if (!(values[i] = strdup(va->attachment_metadata.values[i]))) {
                        free(keys[i]);
                        op_fail(op, -ENOMEM, false, "out of memory");
                        return;
                }
                op->publish_context.n = i + 1;
        }
        op_continue(op);
}

/* kubelet's getPublishContext: a GET of the VolumeAttachment before every
 * NodeStageVolume and NodePublishVolume, not the copy the attach wait
 * cached, which is read again only when the Node changes or at the resync:
 * after a re-attach the attachment's metadata (azuredisk's LUN, aws-ebs's
 * device path) is another one, and a stale one mounts the wrong disk. */
static void step_publish_context(Operation *op) {
        char name[CSI_HASH_NAME_MAX];
        int r;

        if (op->kind != OP_STAGE && op->kind != OP_PUBLISH) {
                op_continue(op);
                return;
        }
        if (op->av->lifecycle == VOLUME_EPHEMERAL || !manager_attachable(op->m, op->av->driver)) {
                op_continue(op);
                return;
        }
        r = csi_attachment_name(op->av->handle, op->av->driver, op->m->node_name, name);
        if (r >= 0)
                r = k8s_get_object(op->m->k8s, &k8s_kind_volume_attachment, NULL, name, on_attachment, op);
        if (r < 0)
                op_fail(op, r, false, "kubernetes.io/csi: failed to fetch publishContext: %s", strerror(-r));
}

static const K8sSecretRef *secret_ref(const Operation *op) {
        const K8sSecretRef *ref = NULL;
        /* kubelet reads nodeStageSecretRef only for a driver that stages
         * (csi_attacher.go MountDevice, csi_block.go stageVolumeForBlock):
         * a stale reference must not fail a volume no NodeStageVolume needs. */
        if (op->kind == OP_STAGE && op->stage_capable)
                ref = &op->spec->stage_secret;
        else if (op->kind == OP_PUBLISH)
                ref = &op->spec->publish_secret;
        return ref && ref->name ? ref : NULL;
}

static void on_secret(K8sClient *c, int error, long status, const char *message, void *obj, void *userdata) {
        Operation *op = userdata;
        const K8sSecretRef *ref = secret_ref(op);

        if (!obj) {
                op_fail(op, error < 0 ? error : -ENOENT, false, "kubernetes.io/csi: failed to get secret %s/%s: %s",
                        ref->namespace, ref->name, message ? message : "not found");
                return;
        }
        op->secret = obj;
        op_continue(op);
}

static void step_secret(Operation *op) {
        const K8sSecretRef *ref = secret_ref(op);
        int r;

        if (!ref) {
                op_continue(op);
                return;
        }
        r = k8s_get_object(op->m->k8s, &k8s_kind_secret, ref->namespace, ref->name, on_secret, op);
        if (r < 0)
                op_fail(op, r, false, "kubernetes.io/csi: failed to get secret %s/%s: %s", ref->namespace,
                        ref->name, strerror(-r));
}

static void on_tokens(Operation *op, int error, const char *message) {
        if (error < 0) {
                op_fail(op, error, false, "%s", message ?: "kubernetes.io/csi: failed to get service account tokens");
                return;
        }
        op_continue(op);
}

/* kubelet's podServiceAccountTokenAttrs, before every NodePublishVolume of a
 * file system (a republish gets fresh ones); tokens.c has the rest. */
static void step_tokens(Operation *op) {
        int r = op->kind == OP_PUBLISH && !op->av->block ? tokens_request(op, on_tokens) : 0;
        if (r == 0)
                op_continue(op);
        else if (r < 0)
                op_fail(op, r, false, "kubernetes.io/csi: failed to request service account tokens: %s",
                        strerror(-r));
}

/* kubelet's access mode mapping (csi_client.go), from the PV's first mode. */
static CsiAccessMode access_mode(const Operation *op) {
        const char *mode = op->spec->access_mode;
        if (streq_ptr(mode, "ReadWriteOnce"))
                return op->multi_writer_capable ? CSI_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER
                                                : CSI_ACCESS_MODE_SINGLE_NODE_WRITER;
        if (streq_ptr(mode, "ReadOnlyMany"))
                return CSI_ACCESS_MODE_MULTI_NODE_READER_ONLY;
        if (streq_ptr(mode, "ReadWriteMany"))
                return CSI_ACCESS_MODE_MULTI_NODE_MULTI_WRITER;
        if (streq_ptr(mode, "ReadWriteOncePod"))
                return op->multi_writer_capable ? CSI_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER
                                                : CSI_ACCESS_MODE_SINGLE_NODE_WRITER;
        return CSI_ACCESS_MODE_UNKNOWN;
}

/* kubelet's supportsFSGroup (csi_mounter.go): whether kvolumed chowns. */
static bool fs_group_applies(const Operation *op) {
        const K8sCSIDriver *d = manager_csidriver(op->m, op->av->driver);
        return volume_spec_fs_group_applies(op->spec, d ? d->fs_group_policy : NULL, op->pod.has_fs_group);
}

/* NOT_FOUND from NodeUnpublishVolume or NodeUnstageVolume: the driver
 * does not know the volume (deleted on its backend, its records lost).
 * kubelet returns the error and retries for ever (kubernetes/kubernetes#90752).
 * What the call was to achieve is that nothing is mounted at the target: when
 * the mount table, read whole now (no event tells of a directory renamed
 * above a mount point, which moves it), shows nothing there (stacked mounts
 * included) and the kernel confirms it for that path, the teardown is done;
 * else it is a failure like any other, with backoff.  Not a stat of the
 * target, which could hang on a dead file system (mount_table_mounted()). */
static bool not_found_is_done(Operation *op) {
        _cleanup_free_ char *target = abs_path(op, op->target);
        LogFields f = op_fields(op);
        bool mounted;

        if (!target || mount_table_reload(op->m->mounts) < 0)
                return false;
        mounted = mount_table_mounted(op->m->mounts, target) != 0;
        f.csi_method = op->kind == OP_UNPUBLISH ? "NodeUnpublishVolume" : "NodeUnstageVolume";
        f.csi_code = csi_code_name(CSI_CODE_NOT_FOUND);
        log_fields(mounted ? LOG_WARNING : LOG_NOTICE, &f, "%s of %s%s answered %s; %s is %s", f.csi_method,
                   op->av->unique_name, op->previous_boot ? " (set up in a previous boot)" : "", f.csi_code,
                   target, mounted ? "still a mount point: not done" : "not a mount point: taken as done");
        return !mounted;
}

static void on_call_done(const CsiStatus *status, void *userdata) {
        Operation *op = userdata;

        op->call = NULL;
        if (status->code == CSI_CODE_OK) {
                op->call_ok = true;
                op_continue(op);
                return;
        }
        /* NOT_FOUND to a teardown: the driver knows nothing of it (a
         * publish or staging of a previous boot, a driver that lost its
         * state).  Done only if nothing is mounted at the target. */
        if (status->code == CSI_CODE_NOT_FOUND && (op->kind == OP_UNPUBLISH || op->kind == OP_UNSTAGE) &&
            not_found_is_done(op)) {
                op->call_ok = true;
                op_continue(op);
                return;
        }
        /* KEP-4876: the driver may have run out of attachments; its limit is read again. */
        if (status->code == CSI_CODE_RESOURCE_EXHAUSTED && (op->kind == OP_STAGE || op->kind == OP_PUBLISH))
                drivers_refresh_attach_limit(op->m, op->av->driver);
        /* The CSI spec lets a driver refuse a call while another of the same
         * volume runs; many do (a lock per volume ID).  Not this volume's
         * failure: the driver gets one call per volume from now on. */
        op->refused_beside_others = status->code == CSI_CODE_ABORTED && op->beside_others;
        /* A non-final code means the driver may still be working, or may have
         * finished: the volume is uncertain, never forgotten. */
        op_fail(op, -EIO, !csi_code_is_final(status->code), "kubernetes.io/csi: %s failed: rpc error: code = %s "
                "desc = %s", status->method ? strrchr(status->method, '/') + 1 : "call",
                csi_code_name(status->code), status->message);
}

#define MAX_CONTEXT 64
#define MAX_REFS_SHOWN 8

/* kubelet's mount-reference check before UnmountDevice, against the mount
 * table as the kernel has it now, whatever our state believes: another
 * mount of the staged file system under root-dir is a publish (or a copy of
 * one) that NodeUnstageVolume would pull from under a pod.  Every mount is
 * listed again, not only the news of the events: none reports a directory
 * renamed, which moves the mounts below it to other paths, into root-dir or
 * out of it, the staging mount itself included. */
static bool unstage_guard_passes(Operation *op, const char *target) {
        const char *refs[MAX_REFS_SHOWN];
        char list[2048] = "";
        size_t n, len = 0;
        int r;

        r = mount_table_reload(op->m->mounts);
        if (r < 0) {
                op_fail(op, r, false, "kubernetes.io/csi: cannot read the mount table to check %s: %s", target,
                        strerror(-r));
                return false;
        }
        n = mount_table_other_mounts(op->m->mounts, target, refs, MAX_REFS_SHOWN);
        if (n == 0)
                return true;
        for (size_t i = 0; i < MIN(n, (size_t) MAX_REFS_SHOWN) && len < sizeof list - 1; i++)
                len += (size_t) snprintf(list + len, sizeof list - len, "%s%s", i ? " " : "", refs[i]);
        op_fail(op, -EBUSY, false, "the device mount path %s is still mounted by other references [%s]%s", target,
                list, n > MAX_REFS_SHOWN ? " ..." : "");
        return false;
}

/* The mount table shows nothing when globalmount is no mount point (a raw
 * block volume, a driver whose stage mounts nothing, a staging mount lost
 * while binds of it live on): what is on disk must hold the unstage too. */
static bool unstage_guard_on_disk(Operation *op) {
        _cleanup_free_ char *first = NULL;
        int r = publish_refs_find(op->m, op->av->driver, op->av->handle, &first);

        if (r == 0)
                return true;
        if (r < 0)
                op_fail(op, r, false, "kubernetes.io/csi: cannot look for publishes of volume %s under %s: %s",
                        op->av->handle, op->m->root->path, strerror(-r));
        else if (op->av->block)
                /* kubelet's UnmapDevice: not while a pod's bind file of it is
                 * there, under any PV of the same handle. */
                op_fail(op, -EBUSY, false, "the device %s is still referenced from other Pods: %s/%s%s",
                        op->av->spec_name, op->m->root->path, strempty(first), r > 1 ? " and more" : "");
        else
                op_fail(op, -EBUSY, false, "kubernetes.io/csi: volume %s is still published on this node: %s/%s%s",
                        op->av->handle, op->m->root->path, strempty(first), r > 1 ? " and more" : "");
        return false;
}

static void step_call(Operation *op) {
        _cleanup_free_ char *target = abs_path(op, op->target), *staging = NULL;
        _cleanup_free_ CsiKeyValue *secrets = NULL, *context = NULL, *pctx = NULL;
        _cleanup_free_ char *staging_rel = NULL;
        _cleanup_(erase_and_freep) char *tokens_json = NULL;
        _cleanup_free_ char *context_flag = NULL;
        _cleanup_free_ const char **flags = NULL;
        size_t n_flags;
        char group[32];
        size_t n_secrets = 0, n_context = 0;
        int r = 0;

        if (!target) {
                op_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        op->beside_others = op->av->op ? op->av->op != op : hashmap_size(op->av->pod_ops) > 1;
        if (op->kind == OP_UNPUBLISH) {
                r = csi_node_unpublish_volume(op->m->csi, op->av->driver,
                                              &(CsiNodeUnpublishVolumeRequest){ .volume_id = op->av->handle,
                                                                                .target_path = target },
                                              on_call_done, op, &op->call);
                goto started;
        }
        if (op->kind == OP_UNSTAGE) {
                if (!op->stage_capable) {
                        op_continue(op); /* kubelet: no STAGE_UNSTAGE, just remove the dirs */
                        return;
                }
                if (!unstage_guard_passes(op, target))
                        return;
                if (!unstage_guard_on_disk(op))
                        return;
                r = csi_node_unstage_volume(op->m->csi, op->av->driver,
                                            &(CsiNodeUnstageVolumeRequest){ .volume_id = op->av->handle,
                                                                            .staging_target_path = target },
                                            on_call_done, op, &op->call);
                goto started;
        }
        if (op->kind == OP_STAGE && !op->stage_capable) {
                op_continue(op); /* the dirs and vol_data.json are all MountDevice does then */
                return;
        }

        const K8sCSIDriver *driver = manager_csidriver(op->m, op->av->driver);
        /* The tokens go in the context, or with serviceAccountTokenInSecrets
         * only in the secrets (CVE-2023-2878: drivers log their context). */
        bool tokens_in_secrets = op->tokens && driver && driver->service_account_token_in_secrets;
        if (op->secret || tokens_in_secrets) {
                secrets = calloc((op->secret ? op->secret->n_data : 0) + 1, sizeof *secrets);
                if (!secrets) {
                        op_fail(op, -ENOMEM, false, "out of memory");
                        return;
                }
                for (size_t i = 0; op->secret && i < op->secret->n_data; i++)
                        if (!tokens_in_secrets || !streq(op->secret->data[i].key, CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS))
                                secrets[n_secrets++] = (CsiKeyValue){ op->secret->data[i].key,
                                                                      (const char *) op->secret->data[i].value };
        }
        context = calloc(op->spec->attributes.n + 6, sizeof *context);
        pctx = calloc(op->publish_context.n + 1, sizeof *pctx);
        if (!context || !pctx) {
                op_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        for (size_t i = 0; i < op->publish_context.n; i++)
                pctx[i] = (CsiKeyValue){ op->publish_context.keys[i], op->publish_context.values[i] };

        bool pod_info = op->kind == OP_PUBLISH && driver && driver->pod_info_on_mount;
        static const char *const pod_keys[] = { "csi.storage.k8s.io/pod.name", "csi.storage.k8s.io/pod.namespace",
                                                "csi.storage.k8s.io/pod.uid",
                                                "csi.storage.k8s.io/serviceAccount.name",
                                                "csi.storage.k8s.io/ephemeral" };
        for (size_t i = 0; i < op->spec->attributes.n; i++) {
                bool overridden = false;
                /* Pod keys win over the volume's attributes, as in kubelet. */
                for (size_t k = 0; pod_info && k < ELEMENTSOF(pod_keys); k++)
                        overridden = overridden || streq(op->spec->attributes.keys[i], pod_keys[k]);
                overridden = overridden || (op->tokens && !tokens_in_secrets &&
                                            streq(op->spec->attributes.keys[i], CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS));
                if (!overridden)
                        context[n_context++] = (CsiKeyValue){ op->spec->attributes.keys[i],
                                                              op->spec->attributes.values[i] };
        }
        if (pod_info) {
                context[n_context++] = (CsiKeyValue){ pod_keys[0], op->pod.name };
                context[n_context++] = (CsiKeyValue){ pod_keys[1], op->pod.namespace };
                context[n_context++] = (CsiKeyValue){ pod_keys[2], op->pod.uid };
                context[n_context++] = (CsiKeyValue){ pod_keys[3], strempty(op->pod.service_account) };
                context[n_context++] = (CsiKeyValue){ pod_keys[4], op->av->lifecycle == VOLUME_EPHEMERAL ? "true"
                                                                                                         : "false" };
        }
        if (op->tokens) {
                r = tokens_format(op->tokens, &tokens_json);
                if (r < 0) {
                        op_fail(op, r, false, "kubernetes.io/csi: failed to format service account tokens: %s",
                                strerror(-r));
                        return;
                }
                if (tokens_in_secrets)
                        secrets[n_secrets++] = (CsiKeyValue){ CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS, tokens_json };
                else
                        context[n_context++] = (CsiKeyValue){ CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS, tokens_json };
        }

        /* kubelet's AddSELinuxMountOption: context="<label>" after the PV's
         * options, quoted since a level holds commas ("s0:c1,c2"). */
        n_flags = k8s_strv_length(op->spec->mount_flags);
        flags = calloc(n_flags + 2, sizeof *flags);
        if (!flags || (op->selinux_context && asprintf(&context_flag, "context=\"%s\"", op->selinux_context) < 0)) {
                op_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        for (size_t i = 0; i < n_flags; i++)
                flags[i] = op->spec->mount_flags[i];
        if (context_flag)
                flags[n_flags++] = context_flag;

        /* With VOLUME_MOUNT_GROUP the driver applies fsGroup, and kvolumed
         * does not chown.  kubelet passes the pod's fsGroup then whatever
         * fsGroupPolicy, access modes, fsType or readOnly say (csi_attacher.go
         * MountDevice, csi_mounter.go SetUpAt): azurefile and smb make it the
         * SMB gid= option, which a read-only or RWX volume needs as much. */
        bool mount_group = op->mount_group_capable && op->pod.has_fs_group;
        if (mount_group)
                snprintf(group, sizeof group, "%" PRIi64, op->pod.fs_group);
        CsiVolumeCapability cap = {
                .access_type = CSI_ACCESS_TYPE_MOUNT,
                .fs_type = op->spec->fs_type,
                /* Inline volumes have no mount options (no PV to carry them). */
                .mount_flags = flags,
                .n_mount_flags = n_flags,
                .volume_mount_group = mount_group ? group : NULL,
                .access_mode = access_mode(op),
        };
        if (op->av->block)
                /* A device, not a file system: no fsType, no mount flags, no group. */
                cap = (CsiVolumeCapability){ .access_type = CSI_ACCESS_TYPE_BLOCK, .access_mode = access_mode(op) };

        if (op->kind == OP_STAGE) {
                r = csi_node_stage_volume(op->m->csi, op->av->driver,
                                          &(CsiNodeStageVolumeRequest){
                                                  .volume_id = op->av->handle,
                                                  .publish_context = pctx,
                                                  .n_publish_context = op->publish_context.n,
                                                  .staging_target_path = target,
                                                  .volume_capability = &cap,
                                                  .secrets = secrets,
                                                  .n_secrets = n_secrets,
                                                  .volume_context = context,
                                                  .n_volume_context = n_context,
                                          },
                                          on_call_done, op, &op->call);
        } else {
                /* kubelet: a file system's staging path only when the driver
                 * stages (csi_mounter.go), a block volume's always
                 * (csi_block.go publishVolumeForBlock). */
                if (op->av->lifecycle == VOLUME_PERSISTENT && (op->stage_capable || op->av->block)) {
                        r = op->av->block ? path_block_staging(op->av->spec_name, &staging_rel)
                                          : path_staging_target(op->av->driver, op->av->handle, &staging_rel);
                        staging = r >= 0 ? abs_path(op, staging_rel) : NULL;
                        if (!staging) {
                                op_fail(op, r < 0 ? r : -ENOMEM, false, "failed to build the staging path");
                                return;
                        }
                }
                r = csi_node_publish_volume(op->m->csi, op->av->driver,
                                            &(CsiNodePublishVolumeRequest){
                                                    .volume_id = op->av->handle,
                                                    .publish_context = pctx,
                                                    .n_publish_context = op->publish_context.n,
                                                    .staging_target_path = staging,
                                                    .target_path = target,
                                                    .volume_capability = &cap,
                                                    .readonly = op->spec->read_only,
                                                    .secrets = secrets,
                                                    .n_secrets = n_secrets,
                                                    .volume_context = context,
                                                    .n_volume_context = n_context,
                                            },
                                            on_call_done, op, &op->call);
        }
started:
        /* The request (secrets included) was encoded by now: drop the secret and the tokens. */
        op->secret = k8s_secret_free(op->secret);
        tokens_wipe(op->tokens);
        op->called = r >= 0;
        if (r == -ENOENT)
                op_fail(op, r, false, "kubernetes.io/csi: driver name %s not found in the list of registered CSI "
                        "drivers", op->av->driver);
        else if (r < 0)
                op_fail(op, r, false, "kubernetes.io/csi: failed to start the CSI call: %s", strerror(-r));
}

/* kubelet's UnmapBlockVolume before NodeUnpublishVolume: the device lock
 * released, the pod's device path and bind mount removed.  Until that is
 * done the publish stays (and the call is not made). */
static void step_unmap(Operation *op) {
        LogFields f = op_fields(op);
        int r;

        if (op->kind != OP_UNPUBLISH || !op->av->block) {
                op_continue(op);
                return;
        }
        r = block_unmap(op->m->root, op->spec_name, op->pod.uid, &f);
        if (r < 0) {
                op_fail(op, r, false, "kubernetes.io/csi: failed to unmap the device of volume %s from pod %s: %s",
                        op->spec_name, op->pod.uid, strerror(-r));
                return;
        }
        op_continue(op);
}

/* After NodePublishVolume of a raw block volume: what the driver published
 * must be a block device; its identity is recorded, and it is mapped into the
 * pod (volume/kinds/csi/blockmap.h).  A failure leaves the volume published and
 * uncertain: it is mapped again or torn down, never forgotten. */
static void step_map(Operation *op) {
        BlockIdentity id = {};
        LogFields f = op_fields(op);
        int r;

        if (op->kind != OP_PUBLISH || !op->av->block) {
                op_continue(op);
                return;
        }
        r = block_identify(op->m->root, op->target, &id);
        if (r == -ENOTBLK) {
                op_fail(op, r, true, "kubernetes.io/csi: %s/%s is not a block device after NodePublishVolume",
                        op->m->root->path, op->target);
                return;
        }
        if (r < 0) {
                op_fail(op, r, true, "kubernetes.io/csi: cannot examine %s/%s: %s", op->m->root->path, op->target,
                        strerror(-r));
                return;
        }
        free(op->device);
        op->device = NULL;
        (void) block_devno_format(id.devno, &op->device);
        free(op->device_serial);
        op->device_serial = TAKE_PTR(id.serial);
        free(op->device_link);
        op->device_link = TAKE_PTR(id.link);
        block_identity_done(&id);
        r = block_map(op->m->root, op->target, op->spec_name, op->pod.uid, &f);
        if (r < 0) {
                op_fail(op, r, true, "kubernetes.io/csi: failed to map the device of volume %s into pod %s: %s",
                        op->spec_name, op->pod.uid, strerror(-r));
                return;
        }
        log_fields(LOG_DEBUG, &f, "Mapped block device %s (%s) into pod %s", strempty(op->device),
                   op->device_serial ?: "no serial", op->pod.uid);
        op_continue(op);
}

static void on_ownership_done(FsGroupWalk *w, int result, void *userdata) {
        Operation *op = userdata;
        LogFields f = op_fields(op);
        uint64_t stall = fsgroup_stall_usec();

        op->fsgroup = fsgroup_walk_free(op->fsgroup);
        if (result == -ETIMEDOUT) {
                /* Its file system does not answer (a hung FUSE daemon, a dead
                 * NFS server): given up for now, reported, retried with backoff;
                 * no other volume waits for it.  Published but not as the pod
                 * asked: uncertain, as any failed fsGroup change. */
                op->unresponsive = true;
                log_fields(LOG_WARNING, &f, "The file system of volume %s at %s/%s made no progress for %.1f s "
                           "while applying fsGroup %" PRIi64 "; the walk was stopped", op->spec_name,
                           op->m->root->path, op->target, (double) stall / USEC_PER_SEC, op->pod.fs_group);
                manager_pod_event(op->m, &op->pod, "Warning", "VolumeUnresponsive",
                                  "The file system of volume \"%s\" does not answer: applying fsGroup %" PRIi64
                                  " made no progress for %.1f s; retrying with backoff", op->spec_name,
                                  op->pod.fs_group, (double) stall / USEC_PER_SEC);
                op_fail(op, result, true, "kubernetes.io/csi: applying fsGroup %" PRIi64 " to the volume made no "
                        "progress for %.1f s: its file system does not answer", op->pod.fs_group,
                        (double) stall / USEC_PER_SEC);
                return;
        }
        if (result < 0) {
                /* Published, but not as the pod asked: uncertain, as kubelet has it. */
                op_fail(op, -EIO, true, "kubernetes.io/csi: failed to apply fsGroup %" PRIi64 " to the volume",
                        op->pod.fs_group);
                return;
        }
        op_continue(op);
}

static void step_ownership(Operation *op) {
        _cleanup_free_ char *target = NULL;
        LogFields f = op_fields(op);
        int r;

        if (op->kind != OP_PUBLISH || op->av->block || op->mount_group_capable || !fs_group_applies(op)) {
                op_continue(op);
                return;
        }
        target = abs_path(op, op->target);
        if (!target) {
                op_fail(op, -ENOMEM, true, "out of memory");
                return;
        }
        /* Recursive, possibly long: done by a child process, off the loop. */
        r = fsgroup_walk_start(op->m->event, target, (gid_t) op->pod.fs_group,
                               streq_ptr(op->pod.fs_group_change_policy, "OnRootMismatch"), on_ownership_done, op,
                               &op->fsgroup);
        if (r < 0) {
                op_fail(op, r, true, "kubernetes.io/csi: failed to start applying fsGroup: %s", strerror(-r));
                return;
        }
        log_fields(LOG_DEBUG, &f, "Applying fsGroup %" PRIi64 " to %s in child process %d", op->pod.fs_group,
                   target, (int) fsgroup_walk_pid(op->fsgroup));
}

static void on_expand_done(Operation *op, int error, const char *message) {
        if (error < 0) {
                /* Published, but not at the size the claim asks: uncertain, and
                 * tried again (kubelet marks it so and keeps the pod waiting). */
                op_fail(op, error, true, "MountVolume.Setup failed while expanding volume: %s",
                        strempty(message));
                return;
        }
        op_continue(op);
}

/* kubelet's expandVolumeDuringMount: after SetUp (and the fsGroup change),
 * before the volume counts as mounted; expand.c has the rest. */
static void step_expand(Operation *op) {
        int r;

        if (op->kind != OP_PUBLISH) {
                op_continue(op);
                return;
        }
        r = expand_during_publish(op, on_expand_done);
        if (r == 0)
                op_continue(op);
        else if (r < 0)
                op_fail(op, r, true, "MountVolume.Setup failed while expanding volume: %s", strerror(-r));
}

/* An operation whose CSI call answered OK in an earlier attempt, and a step
 * after it failed: a publish's fsGroup walk or its read of the claim for an
 * expansion (which a busy API server answers 429), a teardown's removal of
 * its directories.  The call is not made again, only what follows it, while
 * the mount table (not a stat that could hang) still shows what the call
 * left: the target mounted after a publish, nothing mounted there after a
 * teardown.  Otherwise the call is made again. */
static void step_resume(Operation *op) {
        _cleanup_free_ char *target = abs_path(op, op->target);
        const char *method = op->kind == OP_PUBLISH     ? "NodePublishVolume"
                             : op->kind == OP_UNPUBLISH ? "NodeUnpublishVolume"
                                                        : "NodeUnstageVolume";
        LogFields f = op_fields(op);
        bool mounted;
        int r;

        op->resume = false;
        if (!target) {
                op_fail(op, -ENOMEM, false, "out of memory"); /* nothing happened in this attempt */
                return;
        }
        r = mount_table_refresh(op->m->mounts);
        mounted = r >= 0 && mount_table_mounted(op->m->mounts, target) != 0;
        f.csi_method = method;
        if (r < 0 || mounted != (op->kind == OP_PUBLISH)) {
                log_fields(LOG_NOTICE, &f, "%s/%s is %s%s; calling %s of %s%s%s again", op->m->root->path,
                           op->target,
                           r < 0     ? "of unknown state"
                           : mounted ? "mounted again"
                                     : "not mounted any more",
                           r < 0 ? " (the mount table is unreadable)" : "", method, op->av->unique_name,
                           op->pod.key ? " for pod " : "", strempty(op->pod.key));
                op_run(op);
                return;
        }
        log_fields(LOG_INFO, &f, "%s of %s%s%s answered OK before and %s/%s is %s: resuming after the call",
                   method, op->av->unique_name, op->pod.key ? " for pod " : "", strempty(op->pod.key),
                   op->m->root->path, op->target, mounted ? "mounted" : "not mounted");
        op->called = op->call_ok = true;
        op->step = STEP_CALL + 1;
        op_run(op);
}

static void op_run(Operation *op) {
        /* root-dir is not the directory kvolumed locked: no CSI call, no
         * record, until it is again (rootwatch.c). */
        if (op->m->root_lost) {
                root_watch_park(op->m, op, OP_RESUME_RUN);
                return;
        }
        if (op->resume && op->step > STEP_CAPABILITIES && op->step <= STEP_CALL) {
                step_resume(op);
                return;
        }
        switch (op->step) {
        case STEP_CAPABILITIES:
                step_capabilities(op);
                return;
        case STEP_PUBLISH_CONTEXT:
                step_publish_context(op);
                return;
        case STEP_SECRET:
                step_secret(op);
                return;
        case STEP_TOKENS:
                step_tokens(op);
                return;
        case STEP_UNMAP:
                step_unmap(op);
                return;
        case STEP_CALL:
                step_call(op);
                return;
        case STEP_MAP:
                step_map(op);
                return;
        case STEP_OWNERSHIP:
                step_ownership(op);
                return;
        case STEP_EXPAND:
                step_expand(op);
                return;
        default:
                op_finish(op, true);
                return;
        }
}

/* ---- outcome ------------------------------------------------------------------- */

/* The call succeeded: say so in the intent record, lazily (if the record
 * is lost, reconstruction takes the volume for uncertain and repeats the
 * call, which drivers must accept). */
static void record_done(Operation *op, bool mount) {
        _cleanup_free_ char *record = NULL;
        LogFields f = op_fields(op);
        Intent i = { .operation = op->kind, .done = true, .mount = mount, .pod = op->pod.key,
                     .device = op->device, .device_serial = op->device_serial, .device_link = op->device_link };
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
        if (asprintf(&op->message, "kubernetes.io/csi: %s succeeded, but %s/%s %s",
                     op->kind == OP_UNPUBLISH ? "NodeUnpublishVolume" : "NodeUnstageVolume", op->m->root->path,
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
                        actual_volume_set_stage(av, remove_volume_dirs(op) >= 0 ? STAGE_NONE : STAGE_UNCERTAIN);
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
                         * there.  Not a failed block mapping (STEP_MAP): what
                         * the call published is no usable device, and only
                         * the call can make it again. */
                        if (existing && !success && op->call_ok && op->step > STEP_MAP)
                                existing->call_done = true;
                        if (existing && success) {
                                /* Taken for a mount until the mount table says
                                 * otherwise (manager.c); a raw block publish is a
                                 * device node's bind mount, which a stat cannot hang on. */
                                existing->not_a_mount = av->block &&
                                                        root_dir_is_mount_point(op->m->root, op->target) <= 0;
                                actual_publish_set_mount_pending(av, existing, !av->block);
                                record_done(op, !existing->not_a_mount);
                                mount_watch_settle_soon(op->m, av);
                                republish_schedule(op->m, op, existing);
                        }
                }
                else if (existing && (existing->state == PUBLISH_DONE || nothing_happened))
                        ; /* unchanged */
                else if (remove_volume_dirs(op) >= 0)
                        actual_publish_remove(av, op->pod.uid);
                else
                        (void) actual_publish_set(av, &op->pod, op->spec_name, op->target, PUBLISH_UNCERTAIN);
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

static void op_finish(Operation *op, bool success) {
        VolumeManager *m = op->m;
        ActualVolume *av = op->av;
        LogFields f = op_fields(op);
        uint64_t now = 0, duration;
        Backoff *b;

        /* Its outcome goes to the records: not into a directory that is not
         * root-dir's any more (rootwatch.c). */
        if (m->root_lost) {
                root_watch_park(m, op, success ? OP_RESUME_SUCCEEDED : OP_RESUME_FAILED);
                return;
        }
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        duration = now - op->start_usec;
        op->secret = k8s_secret_free(op->secret);
        success = record_outcome(op, success);

        if (success) {
                actual_backoff_forget(av, op->kind, op->pod.uid);
                if (op->kind == OP_PUBLISH && !op->republish && av->lifecycle == VOLUME_PERSISTENT && !av->block)
                        expand_volume_published(m);
                /* A republish (requiresRepublish, every interval) is routine: debug only. */
                f.message_id = op->kind == OP_PUBLISH && !op->republish ? LOG_MESSAGE_ID_VOLUME_PUBLISHED
                               : op->kind == OP_UNPUBLISH               ? LOG_MESSAGE_ID_VOLUME_UNPUBLISHED
                                                                        : NULL;
                log_fields((op->kind == OP_PUBLISH && !op->republish) || op->kind == OP_UNPUBLISH ? LOG_INFO
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
                log_fields(LOG_DEBUG, &f, "%s of %s for pod %s refused while another call of the volume ran: %s",
                           op_kind_to_string(op->kind), av->unique_name, strempty(op->pod.key),
                           strempty(op->message));
        } else {
                b = actual_backoff(av, op->kind, op->pod.uid, true);
                if (b)
                        backoff_failed(b, now);
                f.message_id = LOG_MESSAGE_ID_VOLUME_FAILED;
                log_fields_errno(LOG_WARNING, op->error, &f,
                                 "Operation %s for \"%s\"%s%s failed%s. No retries permitted for %" PRIu64
                                 " ms. Error: %s",
                                 op_kind_to_string(op->kind), av->unique_name, op->pod.key ? " pod " : "",
                                 strempty(op->pod.key), op->uncertain && !op->republish ? " (volume uncertain)" : "",
                                 b ? b->duration_usec / USEC_PER_MSEC : 0, strempty(op->message));
                if ((op->kind == OP_STAGE || op->kind == OP_PUBLISH) && op->pod.uid && !m->stopping)
                        manager_pod_event(m, &op->pod, "Warning", av->block ? "FailedMapVolume" : "FailedMount",
                                          "%s for volume \"%s\" : %s", event_prefix(op), op->spec_name,
                                          strempty(op->message));
                /* kubelet sends none for a failed teardown; an operator whose
                 * pod hangs in Terminating wants to see why.  Repeats of it
                 * are one Event with a count (k8s/events.h). */
                else if (op->kind == OP_UNPUBLISH && op->pod.uid && op->pod.name && !m->stopping)
                        manager_pod_event(m, &op->pod, "Warning", "FailedUnMount",
                                          "%s for volume \"%s\" : %s",
                                          av->block ? "UnmapVolume.UnmapPodDevice failed" : "UnmountVolume.TearDown failed",
                                          op->spec_name, strempty(op->message));
        }
        if (m->metrics_hook) {
                char plugin[128];
                snprintf(plugin, sizeof plugin, CSI_PLUGIN_NAME ":%s", av->driver);
                m->metrics_hook(plugin, (av->block ? block_metric_names : metric_names)[op->kind], success, duration,
                                m->metrics_userdata);
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
        const K8sCSIDriver *d = spec ? manager_csidriver(m, spec->driver) : NULL;
        return volume_spec_selinux_context(spec, m->selinux_enabled, d && d->se_linux_mount, m->selinux_mount_all);
}

int operation_new(VolumeManager *m, OpKind kind, ActualVolume *av, const VolumeSpec *spec, const PodInfo *pod,
                  const char *spec_name, Operation **ret) {
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
                if (av->block)
                        r = staging ? path_block_staging(av->spec_name, &op->target)
                                    : path_block_publish(op->spec_name, pod->uid, &op->target);
                else
                        r = staging ? path_staging_target(av->driver, av->handle, &op->target)
                                    : path_publish_target(pod->uid, op->spec_name, &op->target);
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
                op_run(op);
        else
                op_finish(op, how == OP_RESUME_SUCCEEDED);
}

void operation_start(Operation *op) {
        LogFields f = op_fields(op);

        (void) sd_event_now(op->m->event, CLOCK_MONOTONIC, &op->start_usec);
        log_fields(LOG_DEBUG, &f, "Starting %s of %s", op_kind_to_string(op->kind), op->av->unique_name);
        op_run(op);
}
