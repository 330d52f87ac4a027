/* SPDX-License-Identifier: Apache-2.0 */
/* CSI as a kind of volume (volume/kind.h): the table the manager drives
 * CSI volumes through, and the entries that are small enough to live here.
 * The rest of CSI is this folder's: desire.c (the desired state), plan.c
 * (what a stage or publish waits for), steps.c (the operations' steps),
 * drivers.c, expand.c, tokens.c, republish.c, publishrefs.c, blockmap.c,
 * stats.c; its reconstruction is passes/reconstruct.c's (the kvolumed
 * record format is CSI's layout so far). */
#include <stdio.h>

#include <cjson/cJSON.h>

#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/kinds/csi/kind.h"
#include "volume/passes/operation.h"
#include "volume/state/voldata.h"

/* The kind's metadata entry: vol_data.json beside the volume, as kubelet's
 * CSI plugin writes it. */
static int format_vol_data(Operation *op, const char *dir, char **ret_path, char **ret_text) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        char attachment[CSI_HASH_NAME_MAX];
        VolData d = {};
        int r;

        if (op->kind == OP_STAGE && !op->av->block)
                d = (VolData){ .volume_handle = (char *) op->av->handle, .driver_name = (char *) op->av->driver };
        else {
                r = csi_attachment_name(op->av->handle, op->av->driver, op->m->node_name, attachment);
                if (r < 0)
                        return r;
                /* kubelet always writes attachmentID, even for volumes never attached. */
                const CsiSource *src = op->spec ? op->spec->source : NULL;
                d = (VolData){
                        .spec_vol_id = src && src->spec_vol_id ? src->spec_vol_id : op->spec_name,
                        .volume_handle = (char *) op->av->handle,
                        .driver_name = (char *) op->av->driver,
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
        *ret_path = TAKE_PTR(path);
        *ret_text = TAKE_PTR(text);
        return 0;
}

int csi_metadata(Operation *op, const char *dir, char **ret_path, char **ret_text, mode_t *ret_mode) {
        LogFields f = operation_fields(op);
        int r = format_vol_data(op, dir, ret_path, ret_text);

        if (r < 0)
                return log_fields_errno(LOG_ERR, r, &f, "Failed to make %s/%s/" VOL_DATA_FILE ": %m",
                                        op->m->root->path, dir);
        /* kubelet's os.Create under systemd's default umask 0022 (kubelet-facts §1.2). */
        *ret_mode = 0644;
        return 0;
}


/* kubelet's CSI layout: a pod's volume dir with the publish target "mount"
 * in it, the staging dir of driver and handle with "globalmount"; a raw
 * block volume's data dir and paths named after its PV. */
int csi_paths(const ActualVolume *av, bool staging, const char *pod_uid, const char *spec_name, char **ret_dir,
              char **ret_target) {
        int r = 0;

        if (ret_dir) {
                if (av->block)
                        r = path_block_data_dir(staging ? av->spec_name : spec_name, ret_dir);
                else
                        r = staging ? path_staging_volume_dir(av->driver, av->handle, ret_dir)
                                    : path_pod_volume_dir(pod_uid, spec_name, ret_dir);
        }
        if (r >= 0 && ret_target) {
                if (av->block)
                        r = staging ? path_block_staging(av->spec_name, ret_target)
                                    : path_block_publish(spec_name, pod_uid, ret_target);
                else
                        r = staging ? path_staging_target(av->driver, av->handle, ret_target)
                                    : path_publish_target(pod_uid, spec_name, ret_target);
        }
        return r;
}

/* After the frame recorded the outcome: a publish's next republish, and
 * the expansion check of a persistent file system volume newly published. */
static void csi_outcome(Operation *op, bool success) {
        ActualVolume *av = op->av;
        ActualPublish *pub;

        /* A volume found on disk at start-up is migrated once it is set up
         * again from a migrated spec. */
        if (op->spec)
                av->migrated_from = op->spec->migrated_from;
        if (!success || op->kind != OP_PUBLISH)
                return;
        pub = hashmap_get(av->publishes, op->pod.uid);
        if (pub)
                republish_schedule(op->m, op, pub);
        if (!op->republish && av->lifecycle == VOLUME_PERSISTENT && !av->block)
                expand_volume_published(op->m);
}

/* The node-wide services: driver registration on the Node and CSINode
 * (drivers.c), online expansion (expand.c), the plugin registration socket. */
static int csi_setup(VolumeManager *m) {
        int r = drivers_setup(m);

        return r < 0 ? r : expand_setup(m);
}

static int csi_start(VolumeManager *m) {
        int r;

        drivers_start(m); /* the controller-managed annotation, at once */
        r = csi_client_start(m->csi);
        if (r < 0)
                return log_error_errno(r, "Failed to start plugin registration: %m");
        return 0;
}

static void csi_free(VolumeManager *m) {
        expand_free(m);
        drivers_free(m);
        publish_refs_free(m);
}

static void csi_ended(VolumeManager *m, const Operation *op) {
        drivers_volume_changed(m, op->av); /* an attach limit may have room now */
        /* An unpublish removed a publish from disk: the unstage that may
         * follow in this loop iteration must not see it in the scan made
         * before (a false hold, a backoff and a warning). */
        if (op->kind == OP_UNPUBLISH)
                publish_refs_free(m);
}

/* /volumes: the in-tree plugin a migrated volume was translated from (null:
 * none, or not known since a restart, as kubelet's reconstructed spec). */
static int csi_describe(const ActualVolume *av, cJSON *into) {
        cJSON *item = av->migrated_from ? cJSON_CreateString(av->migrated_from) : cJSON_CreateNull();

        if (!item || !cJSON_AddItemToObject(into, "migrated_from", item)) {
                cJSON_Delete(item);
                return -ENOMEM;
        }
        return 0;
}

const VolumeKind volume_kind_csi = {
        .name = "csi",
        .plugin_name = CSI_PLUGIN_NAME,
        .pod_dir = CSI_PLUGIN_NAME_ESCAPED,
        .call_names = {
                [OP_STAGE] = "NodeStageVolume",
                [OP_PUBLISH] = "NodePublishVolume",
                [OP_UNPUBLISH] = "NodeUnpublishVolume",
                [OP_UNSTAGE] = "NodeUnstageVolume",
        },
        .mount_attributes = VOLUME_ATTR_RELABEL_IF_SELINUX,
        .setup = csi_setup,
        .start = csi_start,
        .free = csi_free,
        .pod_changed = expand_pod_changed,
        .node_changed = drivers_node_changed,
        .ended = csi_ended,
        .claims = csi_claims,
        .claims_pv = csi_claims_pv,
        .desire = csi_desire,
        .desire_pv = csi_desire_pv,
        .source_copy = csi_source_copy,
        .source_free = csi_source_free,
        .refuses = csi_refuses,
        .refresh_due = republish_due,
        .selinux_mount = csi_selinux_mount,
        .ready = csi_ready,
        .busy = csi_busy,
        .stages = csi_stages,
        .stage_ready = csi_stage_ready,
        .paths = csi_paths,
        .available = csi_available,
        .waiting = csi_waiting,
        .teardown_waits = csi_teardown_waits,
        .attachable = csi_attachable,
        .metadata = csi_metadata,
        .run = csi_operation_run,
        .outcome = csi_outcome,
        .reconstruct_publish = reconstruct_csi_publish,
        .reconstruct_node = reconstruct_csi_staging,
        .reconstruct_node_after = reconstruct_csi_block,
        .describe = csi_describe,
};
