/* SPDX-License-Identifier: Apache-2.0 */
/* Online expansion of published volumes (NodeExpandVolume; KEP-1790), as
 * kubelet's NodeExpander (operation_generator.go, node_expander.go,
 * resize_util.go) does it:
 *
 *   - the controller side grew the volume: its PV's spec.capacity is above
 *     the claim's status.capacity, and the claim's
 *     status.allocatedResourceStatuses["storage"] says NodeResizePending (or
 *     NodeResizeInProgress: an attempt of ours that did not finish);
 *   - the claim's status is patched to NodeResizeInProgress, then
 *     NodeExpandVolume is called with the publish target, the staging path
 *     and the PV's nodeExpandSecretRef;
 *   - success: status.capacity becomes the PV's size, the status entry and the
 *     resize conditions go, FileSystemResizeSuccessful on the pod and claim;
 *   - a final error: FileSystemResizeFailed, a NodeResizeError condition and,
 *     for the codes kubelet takes as infeasible (InvalidArgument, OutOfRange,
 *     NotFound), NodeResizeInfeasible; not tried again until the PV's size
 *     changes;
 *   - a non-final error: tried again after the volume's backoff.
 *
 * A node may only GET claims and PVs, never watch them (kubelet-facts §14):
 * the claims of published volumes are read every expand-check-interval (with
 * jitter, so that nodes do not read in step) and at once when a pod using
 * one is updated.  While an expansion runs, the volume has no other
 * operation (ActualVolume.expanding), as kubelet serializes ExpandInUseVolume
 * with the volume's mounts.
 *
 * Two protocols are accepted.  The claim's allocatedResourceStatuses (KEP-1790
 * with RecoverVolumeExpansionFailure) as above; or, from an API server or
 * external-resizer that does not set it, the older one: status.capacity
 * below the PV's is the request (kubelet's legacyCallNodeExpandOnPlugin),
 * answered by the new capacity and the resize conditions dropped, and no
 * allocatedResourceStatuses that the resizer would not know.
 *
 * A volume whose claim asks for expansion when a pod's publish of it is made
 * is grown then, inside the publish operation and before the publish counts
 * as done (expand_during_publish, kubelet's expandVolumeDuringMount): an
 * application that reads its free space at start sees the new size. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "k8s/backoff.h"
#include "k8s/writers.h"
#include "systemd/log.h"
#include "volume/host/paths.h"
#include "volume/internal.h"

#define EXPAND_CHECK_DEFAULT_USEC USEC_PER_MINUTE
/* A volume busy with another operation is looked at again this soon. */
#define EXPAND_BUSY_RETRY_USEC (500 * USEC_PER_MSEC)

typedef struct ExpandEntry ExpandEntry;

struct ExpandTable {
        VolumeManager *m;
        Hashmap *entries;          /* unique name → ExpandEntry */
        Hashmap *due_pods;         /* pod UID → (void *) 1: updated, its claims are read at once */
        bool due_all;              /* the periodic check: every claim */
        sd_event_source *timer;    /* the periodic check */
        sd_event_source *soon;     /* deferred: a check asked for now */
        sd_event_source *retry;    /* the earliest backoff expiry or busy retry */
        uint64_t retry_at;
};

struct ExpandEntry {
        ExpandTable *t;
        unsigned refs;             /* the table's, and one per request or call in flight */
        bool dropped;              /* no longer in the table */
        char *unique_name;
        char *claim_namespace, *claim_name, *pv_name;
        PodInfo pod;               /* a pod that has it published: events and the volume path */
        char *spec_name;

        unsigned gets;             /* GETs in flight */
        bool get_again;
        bool claim_next;           /* the claim's GET follows the PV's answer (entry_fetch) */
        bool answered_pvc, answered_pv;
        K8sPersistentVolumeClaim *pvc;
        K8sPersistentVolume *pv;

        bool busy;                 /* the status patches and the call of an attempt */
        int64_t new_size;
        char *new_size_text;
        int64_t failed_size;       /* a final error at this PV size: not again until it changes */
        Backoff backoff;
        uint64_t not_before;       /* busy volume: look again then */
        bool no_capability_logged;
        CsiCall *call;
        K8sSecret *secret;
        uint64_t start_usec;
        bool legacy;               /* the attempt follows the older protocol: no allocatedResourceStatuses */

        /* expand_during_publish: the publish this attempt runs inside. */
        Operation *mount_op;
        expand_mount_done_t mount_done;
        char *mount_message;       /* why the attempt failed, for the publish's error */
        bool due_after_mount;      /* a check asked for its claim meanwhile: read it once the publish is done */
};

static ExpandEntry *entry_unref(ExpandEntry *e) {
        if (!e || --e->refs > 0)
                return NULL;
        if (e->call)
                csi_call_cancel(e->call);
        k8s_pvc_free(e->pvc);
        k8s_pv_free(e->pv);
        k8s_secret_free(e->secret);
        pod_info_done(&e->pod);
        free(e->unique_name);
        free(e->claim_namespace);
        free(e->claim_name);
        free(e->pv_name);
        free(e->spec_name);
        free(e->new_size_text);
        free(e->mount_message);
        free(e);
        return NULL;
}

static ExpandEntry *entry_ref(ExpandEntry *e) {
        e->refs++;
        return e;
}

static LogFields entry_fields(const ExpandEntry *e, const ActualVolume *av) {
        return (LogFields){
                .pod_uid = e->pod.uid,
                .pod = e->pod.key,
                .volume = e->spec_name,
                .driver = av ? av->driver : NULL,
                .volume_handle = av ? av->handle : NULL,
        };
}

static uint64_t now_usec(VolumeManager *m) {
        uint64_t now = 0;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        return now;
}

static void arm_retry(ExpandTable *t, uint64_t when) {
        int enabled = SD_EVENT_OFF;

        (void) sd_event_source_get_enabled(t->retry, &enabled);
        if (enabled != SD_EVENT_OFF && t->retry_at <= when)
                return;
        t->retry_at = when;
        (void) sd_event_source_set_time(t->retry, when);
        (void) sd_event_source_set_enabled(t->retry, SD_EVENT_ONESHOT);
}

static void check_soon(ExpandTable *t) {
        (void) sd_event_source_set_enabled(t->soon, SD_EVENT_ONESHOT);
}

/* ---- the end of an attempt --------------------------------------------------- */

static void entry_fetch(ExpandEntry *e);
static int fetch_claim(ExpandEntry *e);

/* Ends the publish an in-mount attempt runs inside (see internal.h). */
static void mount_finish(ExpandEntry *e, int error, const char *message) {
        _cleanup_free_ char *text = strdup(strempty(message));
        Operation *op = e->mount_op;
        expand_mount_done_t done = e->mount_done;

        e->mount_op = NULL;
        e->mount_done = NULL;
        e->mount_message = mfree_str(e->mount_message);
        /* An update of the pod while the publish read the claim may have come
         * with a new size the publish's read predates. */
        if (e->due_after_mount && !e->dropped) {
                e->due_after_mount = false;
                entry_fetch(e);
        }
        if (op && done)
                done(op, error, text ?: "out of memory");
}

static void mount_note_failure(ExpandEntry *e, const char *format, ...) _printf_(2, 3);
static void mount_note_failure(ExpandEntry *e, const char *format, ...) {
        va_list ap;

        if (!e->mount_op)
                return;
        free(e->mount_message);
        va_start(ap, format);
        if (vasprintf(&e->mount_message, format, ap) < 0)
                e->mount_message = NULL;
        va_end(ap);
}

static void attempt_end(ExpandEntry *e, bool success, bool retry) {
        VolumeManager *m = e->t->m;
        ActualVolume *av = hashmap_get(m->volumes, e->unique_name);
        uint64_t now = now_usec(m);

        if (e->mount_op) {
                /* Inside a publish: the publish's operation accounts for it.  A
                 * final error was reported on the claim and is not tried again
                 * at this size: the mount goes on without it, as kubelet's
                 * next MountVolume does; anything else fails the publish. */
                bool final = !success && e->new_size > 0 && e->failed_size == e->new_size;
                e->busy = false;
                e->secret = k8s_secret_free(e->secret);
                if (success)
                        backoff_reset(&e->backoff);
                if (m->metrics_hook && av) {
                        char plugin[128];
                        snprintf(plugin, sizeof plugin, CSI_PLUGIN_NAME ":%s", av->driver);
                        m->metrics_hook(plugin, "volume_fs_resize", success, av->migrated_from != NULL,
                                        now - e->start_usec, m->metrics_userdata);
                }
                mount_finish(e, success || final ? 0 : -EIO, e->mount_message ?: "the expansion did not finish");
                return;
        }

        e->busy = false;
        e->secret = k8s_secret_free(e->secret);
        if (av)
                av->expanding = false;
        if (success)
                backoff_reset(&e->backoff);
        else if (retry) {
                backoff_failed(&e->backoff, now);
                if (!e->dropped)
                        arm_retry(e->t, backoff_next_try(&e->backoff));
        }
        if (m->metrics_hook && av) {
                char plugin[128];
                snprintf(plugin, sizeof plugin, CSI_PLUGIN_NAME ":%s", av->driver);
                m->metrics_hook(plugin, "volume_fs_resize", success, av->migrated_from != NULL, now - e->start_usec,
                                m->metrics_userdata);
        }
        manager_operation_done(m, NULL, success);
        manager_schedule_volume_pass(m, e->unique_name); /* its other operations may go on */
        if (av)
                drivers_volume_changed(m, av);
}

static void claim_event(ExpandEntry *e, const char *type, const char *reason, const char *message) {
        VolumeManager *m = e->t->m;
        const K8sMeta *md = e->pvc ? &e->pvc->meta : NULL;

        manager_pod_event(m, &e->pod, type, reason, "%s", message);
        if (!m->events || !md)
                return;
        (void) k8s_event_record(m->events,
                                &(K8sObjectRef){ .kind = "PersistentVolumeClaim",
                                                 .api_version = "v1",
                                                 .namespace = md->namespace,
                                                 .name = md->name,
                                                 .uid = md->uid,
                                                 .resource_version = md->resource_version },
                                type, reason, message, NULL, NULL);
}

typedef enum PatchStage {
        PATCH_IN_PROGRESS,
        PATCH_FINISHED,
        PATCH_FAILED,
} PatchStage;

typedef struct PatchCtx {
        ExpandEntry *e;
        PatchStage stage;
} PatchCtx;

static void start_call(ExpandEntry *e);
static void after_in_progress(ExpandEntry *e);

static void on_patched(K8sClient *c, int error, const char *message, void *userdata) {
        PatchCtx *ctx = userdata;
        ExpandEntry *e = ctx->e;
        PatchStage stage = ctx->stage;
        ActualVolume *av = hashmap_get(e->t->m->volumes, e->unique_name);
        LogFields f = entry_fields(e, av);

        free(ctx);
        if (error < 0) {
                log_fields(LOG_WARNING, &f, "Failed to update the status of claim %s/%s: %s", e->claim_namespace,
                           e->claim_name, strempty(message));
                mount_note_failure(e, "kubernetes.io/csi: failed to update the status of claim %s/%s: %s",
                                   e->claim_namespace, e->claim_name, strempty(message));
        }
        switch (stage) {
        case PATCH_IN_PROGRESS:
                if (error < 0)
                        attempt_end(e, false, true);
                else if (e->dropped || e->t->m->stopping)
                        attempt_end(e, false, false);
                else
                        after_in_progress(e);
                break;
        case PATCH_FINISHED:
                /* The file system is grown; the claim says so on the next try
                 * (NodeExpandVolume again is a no-op for the driver). */
                attempt_end(e, error >= 0, error < 0);
                break;
        case PATCH_FAILED:
                attempt_end(e, false, false);
                break;
        }
        entry_unref(e);
}

static int patch_status(ExpandEntry *e, PatchStage stage, const K8sPvcResizeUpdate *u) {
        PatchCtx *ctx = calloc(1, sizeof *ctx);
        int r;

        if (!ctx)
                return -ENOMEM;
        *ctx = (PatchCtx){ .e = entry_ref(e), .stage = stage };
        r = k8s_pvc_patch_resize_status(e->t->m->k8s, e->claim_namespace, e->claim_name, u, on_patched, ctx);
        if (r < 0) {
                entry_unref(e);
                free(ctx);
        }
        return r;
}

/* kubelet's isInfeasibleError (csi/expander.go). */
static bool code_infeasible(CsiCode code) {
        return code == CSI_CODE_INVALID_ARGUMENT || code == CSI_CODE_OUT_OF_RANGE || code == CSI_CODE_NOT_FOUND;
}

static void on_expanded(const CsiStatus *status, const CsiExpandResult *result, void *userdata) {
        ExpandEntry *e = userdata;
        VolumeManager *m = e->t->m;
        ActualVolume *av = hashmap_get(m->volumes, e->unique_name);
        LogFields f = entry_fields(e, av);
        _cleanup_free_ char *message = NULL, *error = NULL;
        int r;

        e->call = NULL;
        f.csi_method = "NodeExpandVolume";
        f.csi_code = csi_code_name(status->code);
        if (status->code == CSI_CODE_OK) {
                log_fields(LOG_INFO, &f, "Volume %s expanded to %s (%" PRIi64 " bytes) for pod %s",
                           e->spec_name, e->new_size_text, e->new_size, strempty(e->pod.key));
                if (asprintf(&message, "MountVolume.NodeExpandVolume succeeded for volume \"%s\" %s", e->spec_name,
                             m->node_name) >= 0)
                        claim_event(e, "Normal", "FileSystemResizeSuccessful", message);
                e->failed_size = 0;
                r = patch_status(e, PATCH_FINISHED,
                                 &(K8sPvcResizeUpdate){ .capacity = e->new_size_text,
                                                        .clear_resize_conditions = true });
                if (r < 0) {
                        log_fields_errno(LOG_WARNING, r, &f, "Cannot update the status of claim %s/%s: %m",
                                         e->claim_namespace, e->claim_name);
                        attempt_end(e, false, true);
                }
                entry_unref(e);
                return;
        }
        if (asprintf(&error, "rpc error: code = %s desc = %s", csi_code_name(status->code), status->message) < 0)
                error = NULL;
        f.message_id = LOG_MESSAGE_ID_VOLUME_FAILED;
        if (asprintf(&message, "MountVolume.NodeExpandVolume failed for volume \"%s\" : kubernetes.io/csi: "
                     "Expander.NodeExpand failed to expand the volume : %s", e->spec_name, strempty(error)) >= 0)
                claim_event(e, "Warning", "FileSystemResizeFailed", message);
        mount_note_failure(e, "MountVolume.NodeExpandVolume failed: kubernetes.io/csi: Expander.NodeExpand failed "
                           "to expand the volume : %s", strempty(error));
        if (!csi_code_is_final(status->code)) {
                /* The driver may still be at it: try again after the backoff. */
                log_fields(LOG_WARNING, &f, "NodeExpandVolume of %s to %" PRIi64 " bytes failed, retrying: %s",
                           e->spec_name, e->new_size, strempty(error));
                attempt_end(e, false, true);
                entry_unref(e);
                return;
        }
        /* Final: not again at this size (kubelet's MarkVolumeExpansionFailedWithFinalError). */
        e->failed_size = e->new_size;
        log_fields(LOG_WARNING, &f, "NodeExpandVolume of %s to %" PRIi64 " bytes failed for good (%s): %s",
                   e->spec_name, e->new_size, code_infeasible(status->code) ? "infeasible" : "final error",
                   strempty(error));
        /* The older protocol has no place for it: the Event says it. */
        r = e->legacy ? -EOPNOTSUPP
                      : patch_status(e, PATCH_FAILED,
                                     &(K8sPvcResizeUpdate){ .resize_status = code_infeasible(status->code)
                                                                                     ? "NodeResizeInfeasible"
                                                                                     : "NodeResizeInProgress",
                                                            .error = error ? error : "unknown error" });
        if (r < 0)
                attempt_end(e, false, false);
        entry_unref(e);
}

/* kubelet's access mode mapping (csi_client.go), from the PV's first mode. */
static CsiAccessMode access_mode(const char *mode, bool multi_writer) {
        if (streq_ptr(mode, "ReadWriteOnce"))
                return multi_writer ? CSI_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER : CSI_ACCESS_MODE_SINGLE_NODE_WRITER;
        if (streq_ptr(mode, "ReadOnlyMany"))
                return CSI_ACCESS_MODE_MULTI_NODE_READER_ONLY;
        if (streq_ptr(mode, "ReadWriteMany"))
                return CSI_ACCESS_MODE_MULTI_NODE_MULTI_WRITER;
        if (streq_ptr(mode, "ReadWriteOncePod"))
                return multi_writer ? CSI_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER : CSI_ACCESS_MODE_SINGLE_NODE_WRITER;
        return CSI_ACCESS_MODE_UNKNOWN;
}

static void start_call(ExpandEntry *e) {
        VolumeManager *m = e->t->m;
        ActualVolume *av = hashmap_get(m->volumes, e->unique_name);
        DriverCaps *dc = av ? hashmap_get(m->caps, av->driver) : NULL;
        ActualPublish *pub = av && e->pod.uid ? hashmap_get(av->publishes, e->pod.uid) : NULL;
        _cleanup_free_ char *target = NULL, *staging_rel = NULL, *staging = NULL;
        _cleanup_free_ CsiKeyValue *secrets = NULL;
        const K8sPersistentVolume *pv = e->pv;
        LogFields f = entry_fields(e, av);
        size_t n_secrets = 0;
        int r;

        f.csi_method = "NodeExpandVolume";
        if (m->root_lost) {
                /* Its path would name what is at root-dir's path now, not the volume (rootwatch.c). */
                mount_note_failure(e, "kubernetes.io/csi: root-dir %s is not the directory kvolumed locked",
                                   m->root->path);
                attempt_end(e, false, true);
                return;
        }
        /* Inside a publish, its target: the publish is not recorded yet. */
        const char *target_rel = e->mount_op ? e->mount_op->target : pub && pub->state == PUBLISH_DONE ? pub->target
                                                                                                       : NULL;
        if (!av || !target_rel || !pv || !pv->csi || !dc) {
                log_fields(LOG_INFO, &f, "Volume %s is no longer published for pod %s; not expanding it now",
                           e->spec_name, strempty(e->pod.key));
                mount_note_failure(e, "kubernetes.io/csi: volume %s is not published", e->spec_name);
                attempt_end(e, false, false);
                return;
        }
        if (asprintf(&target, "%s/%s", m->root->path, target_rel) < 0) {
                attempt_end(e, false, true);
                return;
        }
        if (csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_STAGE_UNSTAGE_VOLUME) && av->stage == STAGE_DONE &&
            path_staging_target(av->driver, av->handle, &staging_rel) >= 0 &&
            asprintf(&staging, "%s/%s", m->root->path, staging_rel) < 0)
                staging = NULL;
        if (e->secret) {
                secrets = calloc(e->secret->n_data + 1, sizeof *secrets);
                if (!secrets) {
                        attempt_end(e, false, true);
                        return;
                }
                for (size_t i = 0; i < e->secret->n_data; i++)
                        secrets[n_secrets++] = (CsiKeyValue){ e->secret->data[i].key,
                                                              (const char *) e->secret->data[i].value };
        }
        CsiVolumeCapability cap = {
                .access_type = CSI_ACCESS_TYPE_MOUNT,
                .fs_type = pv->csi->fs_type,
                .mount_flags = (const char *const *) pv->mount_options,
                .n_mount_flags = k8s_strv_length(pv->mount_options),
                .access_mode = access_mode(pv->access_modes ? pv->access_modes[0] : "ReadWriteOnce",
                                           csi_node_capabilities_has(&dc->caps,
                                                                     CSI_NODE_CAP_SINGLE_NODE_MULTI_WRITER)),
        };
        log_fields(LOG_INFO, &f, "Expanding volume %s from %s to %s (NodeExpandVolume on %s)", e->spec_name,
                   e->pvc && e->pvc->capacity ? e->pvc->capacity : "?", e->new_size_text, target);
        r = csi_node_expand_volume(m->csi, av->driver,
                                   &(CsiNodeExpandVolumeRequest){ .volume_id = av->handle,
                                                                  .volume_path = target,
                                                                  .has_capacity_range = true,
                                                                  .required_bytes = e->new_size,
                                                                  .staging_target_path = staging,
                                                                  .volume_capability = &cap,
                                                                  .secrets = secrets,
                                                                  .n_secrets = n_secrets },
                                   on_expanded, entry_ref(e), &e->call);
        e->secret = k8s_secret_free(e->secret); /* encoded already: not kept longer than needed */
        if (r < 0) {
                entry_unref(e);
                log_fields_errno(LOG_WARNING, r, &f, "Cannot call NodeExpandVolume: %m");
                attempt_end(e, false, true);
        }
}

static void on_secret(K8sClient *c, int error, long status, const char *message, void *obj, void *userdata) {
        ExpandEntry *e = userdata;
        ActualVolume *av = hashmap_get(e->t->m->volumes, e->unique_name);
        LogFields f = entry_fields(e, av);

        if (!obj) {
                const K8sSecretRef *ref = &e->pv->csi->node_expand_secret;
                log_fields(LOG_WARNING, &f, "Cannot expand volume %s: failed to get secret %s/%s: %s", e->spec_name,
                           strempty(ref->namespace), strempty(ref->name), message ? message : "not found");
                mount_note_failure(e, "kubernetes.io/csi: failed to get secret %s/%s: %s", strempty(ref->namespace),
                                   strempty(ref->name), message ? message : "not found");
                attempt_end(e, false, true);
        } else {
                e->secret = obj;
                if (e->dropped || e->t->m->stopping)
                        attempt_end(e, false, false);
                else
                        start_call(e);
        }
        entry_unref(e);
}

/* The claim said NodeResizeInProgress: the secret, then the call. */
static void after_in_progress(ExpandEntry *e) {
        const K8sSecretRef *ref = e->pv && e->pv->csi ? &e->pv->csi->node_expand_secret : NULL;
        int r;

        if (!ref || !ref->name) {
                start_call(e);
                return;
        }
        r = k8s_get_object(e->t->m->k8s, &k8s_kind_secret, ref->namespace, ref->name, on_secret, entry_ref(e));
        if (r < 0) {
                entry_unref(e);
                attempt_end(e, false, true);
        }
}

/* ---- deciding ----------------------------------------------------------------- */

static void on_capabilities(const CsiStatus *status, const CsiNodeCapabilities *caps, void *userdata);

static void evaluate(ExpandEntry *e);
static void start_attempt(ExpandEntry *e);
static bool want_expansion(ExpandEntry *e, const ActualVolume *av, int64_t *ret_size);

/* Inside a publish (expand_during_publish): the claim and PV were just read.
 * No backoff of the periodic check and no wait for the volume's other
 * operations: the publish is one of them, and has its own backoff. */
static void evaluate_for_mount(ExpandEntry *e) {
        VolumeManager *m = e->t->m;
        ActualVolume *av = hashmap_get(m->volumes, e->unique_name);
        DriverCaps *dc = av ? hashmap_get(m->caps, av->driver) : NULL;
        int64_t size;

        if (e->busy || e->gets > 0)
                return; /* started already, or its answers are still coming */
        if (!e->answered_pvc || !e->answered_pv) {
                /* kubelet: "mountVolume.NodeExpandVolume get PVC failed", and the mount is tried again. */
                mount_finish(e, -EIO, "kubernetes.io/csi: failed to read the claim and volume for their sizes");
                return;
        }
        if (m->stopping || !av || !want_expansion(e, av, &size) || !dc || !dc->known ||
            !csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_EXPAND_VOLUME)) {
                mount_finish(e, 0, NULL);
                return;
        }
        free(e->new_size_text);
        e->new_size_text = strdup(e->pv->capacity);
        if (!e->new_size_text) {
                mount_finish(e, -ENOMEM, "out of memory");
                return;
        }
        e->new_size = size;
        e->busy = true;
        e->start_usec = now_usec(m);
        start_attempt(e);
}

static bool want_expansion(ExpandEntry *e, const ActualVolume *av, int64_t *ret_size) {
        const K8sPersistentVolumeClaim *pvc = e->pvc;
        const K8sPersistentVolume *pv = e->pv;
        LogFields f = entry_fields(e, av);
        int64_t pv_size = 0, claim_size = 0;

        if (!pvc || !pv || !pv->csi || !pv->capacity)
                return false;
        /* What the pod resolved to: a claim bound elsewhere now is not this volume. */
        if (!streq_ptr(pvc->volume_name, e->pv_name))
                return false;
        if (k8s_quantity_parse(pv->capacity, &pv_size) < 0) {
                log_fields(LOG_DEBUG, &f, "PersistentVolume %s has capacity %s, which is no quantity", e->pv_name,
                           pv->capacity);
                return false;
        }
        if (pvc->capacity && k8s_quantity_parse(pvc->capacity, &claim_size) < 0)
                return false;
        if (pv_size <= claim_size)
                return false;
        /* The older protocol (no allocatedResourceStatuses): the capacity
         * below the PV's is the request (legacyCallNodeExpandOnPlugin).  A
         * bound claim always has a capacity; without one its status is not
         * written yet, and there is nothing to compare. */
        e->legacy = !pvc->resize_status;
        if (e->legacy && pvc->capacity) {
                if (pv_size == e->failed_size)
                        return false;
                *ret_size = pv_size;
                return true;
        }
        /* The controller's part is done and the node's is wanted (kubelet's
         * runPreCheck); NodeResizeInfeasible waits for a new size. */
        if (!streq_ptr(pvc->resize_status, "NodeResizePending") &&
            !streq_ptr(pvc->resize_status, "NodeResizeInProgress")) {
                log_fields(LOG_DEBUG, &f, "Claim %s/%s: volume %s is %s, the claim %s, resize status %s: not expanding",
                           e->claim_namespace, e->claim_name, e->pv_name, pv->capacity, pvc->capacity ?: "none",
                           pvc->resize_status ?: "none");
                return false;
        }
        if (pv_size == e->failed_size)
                return false;
        *ret_size = pv_size;
        return true;
}

static void evaluate(ExpandEntry *e) {
        ExpandTable *t = e->t;
        VolumeManager *m = t->m;
        ActualVolume *av = hashmap_get(m->volumes, e->unique_name);
        DriverCaps *dc;
        LogFields f = entry_fields(e, av);
        uint64_t now = now_usec(m);
        int64_t size;
        int r;

        if (e->mount_op) {
                evaluate_for_mount(e);
                return;
        }
        /* root-dir not kvolumed's (rootwatch.c): the next check, after it is again. */
        if (e->busy || e->dropped || m->stopping || m->root_lost || !av || !want_expansion(e, av, &size))
                return;
        if (!backoff_allows(&e->backoff, now)) {
                arm_retry(t, backoff_next_try(&e->backoff));
                return;
        }
        if (actual_volume_busy(av) || av->expanding) {
                arm_retry(t, now + EXPAND_BUSY_RETRY_USEC);
                return;
        }
        dc = hashmap_get(m->caps, av->driver);
        if (!dc || !dc->known) {
                r = csi_node_get_capabilities(m->csi, av->driver, on_capabilities, entry_ref(e), NULL);
                if (r < 0) {
                        entry_unref(e);
                        arm_retry(t, now + BACKOFF_INITIAL_USEC);
                }
                return;
        }
        if (!csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_EXPAND_VOLUME)) {
                if (!e->no_capability_logged)
                        log_fields(LOG_NOTICE, &f, "Claim %s/%s waits for node expansion, but CSI driver %s has no "
                                   "EXPAND_VOLUME node capability", e->claim_namespace, e->claim_name, av->driver);
                e->no_capability_logged = true;
                return;
        }
        free(e->new_size_text);
        e->new_size_text = strdup(e->pv->capacity);
        if (!e->new_size_text)
                return;
        e->new_size = size;
        e->busy = true;
        e->start_usec = now;
        av->expanding = true;
        m->n_running++;
        start_attempt(e);
}

/* The claim says NodeResizeInProgress (not in the older protocol, which has
 * no such status), then the secret and the call. */
static void start_attempt(ExpandEntry *e) {
        ActualVolume *av = hashmap_get(e->t->m->volumes, e->unique_name);
        LogFields f = entry_fields(e, av);
        int r;

        if (e->legacy) {
                after_in_progress(e);
                return;
        }
        r = patch_status(e, PATCH_IN_PROGRESS, &(K8sPvcResizeUpdate){ .resize_status = "NodeResizeInProgress" });
        if (r < 0) {
                log_fields_errno(LOG_WARNING, r, &f, "Cannot update the status of claim %s/%s: %m",
                                 e->claim_namespace, e->claim_name);
                attempt_end(e, false, true);
        }
}

static void on_capabilities(const CsiStatus *status, const CsiNodeCapabilities *caps, void *userdata) {
        ExpandEntry *e = userdata;
        VolumeManager *m = e->t->m;
        ActualVolume *av = hashmap_get(m->volumes, e->unique_name);

        if (status->code == CSI_CODE_OK && av) {
                DriverCaps *dc = hashmap_get(m->caps, av->driver);
                if (!dc) {
                        dc = calloc(1, sizeof *dc);
                        if (dc && hashmap_put(m->caps, av->driver, dc, NULL) < 0) {
                                free(dc);
                                dc = NULL;
                        }
                }
                if (dc) {
                        dc->known = true;
                        dc->caps = *caps;
                }
                evaluate(e);
        } else if (!e->dropped)
                arm_retry(e->t, now_usec(m) + BACKOFF_INITIAL_USEC);
        entry_unref(e);
}

/* ---- reading the claims --------------------------------------------------------- */

static void entry_fetch(ExpandEntry *e);

static void on_get(K8sClient *c, int error, long status, const char *message, void *obj, bool pvc,
                   ExpandEntry *e) {
        if (obj || status == 404) {
                if (pvc) {
                        k8s_pvc_free(e->pvc);
                        e->pvc = obj;
                        e->answered_pvc = true;
                } else {
                        k8s_pv_free(e->pv);
                        e->pv = obj;
                        e->answered_pv = true;
                }
        } else
                log_debug("GET of %s %s for its expansion failed: %s", pvc ? "claim" : "volume",
                          pvc ? e->claim_name : e->pv_name, strempty(message));
        if (--e->gets > 0)
                return;
        if (e->claim_next && !e->dropped && fetch_claim(e) >= 0)
                return;
        e->claim_next = false;
        if (e->get_again && !e->dropped) {
                /* Asked for while these were in flight: their answers may predate the change. */
                e->get_again = false;
                entry_fetch(e);
                return;
        }
        if ((e->answered_pvc && e->answered_pv) || e->mount_op)
                evaluate(e);
}

static void on_get_pvc(K8sClient *c, int error, long status, const char *message, void *obj, void *userdata) {
        on_get(c, error, status, message, obj, true, userdata);
        entry_unref(userdata);
}

static void on_get_pv(K8sClient *c, int error, long status, const char *message, void *obj, void *userdata) {
        on_get(c, error, status, message, obj, false, userdata);
        entry_unref(userdata);
}

static int fetch_claim(ExpandEntry *e) {
        int r;

        e->claim_next = false;
        r = k8s_get_object(e->t->m->k8s, &k8s_kind_pvc, e->claim_namespace, e->claim_name, on_get_pvc, entry_ref(e));
        if (r < 0) {
                e->refs--;
                return r;
        }
        e->gets++;
        return 0;
}

/* Cheap GETs the Node authorizer allows (pod → claim → volume), never a
 * watch: the PV first, its claim once it has answered.  The resizer writes
 * the claim's ControllerResizeInProgress before it grows the PV, so a larger
 * PV read first always comes with that claim or a later one.  Read side by
 * side, the claim could be from before that write: no
 * allocatedResourceStatuses and a larger PV, which is the older protocol's
 * request (want_expansion), and a final error would then never reach the
 * claim.  A request that could not start gives its reference back; the
 * caller's keeps the entry alive meanwhile. */
static void entry_fetch(ExpandEntry *e) {
        int r;

        if (e->gets > 0) {
                e->get_again = true;
                return;
        }
        r = k8s_get_object(e->t->m->k8s, &k8s_kind_pv, NULL, e->pv_name, on_get_pv, entry_ref(e));
        if (r < 0) {
                e->refs--;
                (void) fetch_claim(e);
                return;
        }
        e->gets++;
        e->claim_next = true;
}

/* The claim a pod's volume uses: persistentVolumeClaim.claimName, or for a
 * generic ephemeral volume "<pod>-<volume>". */
static int claim_of(const K8sPod *pod, const char *volume, char **ret) {
        for (size_t i = 0; pod && i < pod->n_volumes; i++) {
                const K8sPodVolume *v = &pod->volumes[i];
                if (!streq_ptr(v->name, volume))
                        continue;
                if (v->claim_name)
                        return (*ret = strdup(v->claim_name)) ? 1 : -ENOMEM;
                if (v->ephemeral)
                        return asprintf(ret, "%s-%s", pod->meta.name, v->name) < 0 ? -ENOMEM : 1;
                return 0;
        }
        return 0;
}

static void entry_drop(ExpandTable *t, ExpandEntry *e) {
        hashmap_remove(t->entries, e->unique_name);
        e->dropped = true;
        entry_unref(e);
}

/* Finds the published persistent volumes, keeps an entry for each, and
 * reads the claims of those due now. */
static void scan(ExpandTable *t) {
        VolumeManager *m = t->m;
        const char *key;
        void *value;

        /* An entry inside a publish keeps its pod: the publish is not recorded yet. */
        for (size_t i = 0; hashmap_iterate(t->entries, &i, NULL, &value);) {
                ExpandEntry *e = value;
                if (!e->mount_op)
                        e->pod.uid = mfree_str(e->pod.uid);
                else if (t->due_all || hashmap_get(t->due_pods, e->pod.uid))
                        e->due_after_mount = true;
        }
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                PodEntry *pe = value;
                const K8sPod *pod = k8s_informer_get(m->pods, pe->namespace, pe->name);
                bool due = t->due_all || hashmap_get(t->due_pods, pe->uid);

                for (size_t v = 0; pe->desired && v < pe->desired->n_volumes; v++) {
                        const DesiredVolume *dv = &pe->desired->volumes[v];
                        const VolumeSpec *s = dv->spec;
                        _cleanup_free_ char *claim = NULL;
                        ActualVolume *av;
                        ActualPublish *pub;
                        ExpandEntry *e;

                        if (!s || s->lifecycle != VOLUME_PERSISTENT || s->block)
                                continue;
                        av = hashmap_get(m->volumes, s->unique_name);
                        pub = av ? hashmap_get(av->publishes, pe->uid) : NULL;
                        if (!pub || pub->state != PUBLISH_DONE || claim_of(pod, dv->name, &claim) <= 0)
                                continue;
                        e = hashmap_get(t->entries, s->unique_name);
                        if (e && e->mount_op) {
                                e->due_after_mount = e->due_after_mount || due;
                                continue; /* inside a publish, which reads the claim itself */
                        }
                        if (e && e->pod.uid)
                                continue; /* another pod has it too: one expansion per volume */
                        if (!e) {
                                e = calloc(1, sizeof *e);
                                if (!e || !(e->unique_name = strdup(s->unique_name)) ||
                                    hashmap_put(t->entries, e->unique_name, e, NULL) < 0) {
                                        if (e)
                                                free(e->unique_name);
                                        free(e);
                                        continue;
                                }
                                e->t = t;
                                e->refs = 1;
                                due = true;
                        }
                        pod_info_done(&e->pod);
                        if (pod_info_from_desired(pe->desired, &e->pod) < 0 ||
                            free_and_strdup(&e->claim_namespace, pe->namespace) < 0 ||
                            free_and_strdup(&e->claim_name, claim) < 0 ||
                            free_and_strdup(&e->pv_name, s->spec_name) < 0 ||
                            free_and_strdup(&e->spec_name, s->spec_name) < 0) {
                                entry_drop(t, e);
                                continue;
                        }
                        if (due)
                                entry_fetch(e);
                }
        }
        /* Volumes no longer published: forgotten (an attempt in flight ends first). */
        for (size_t i = 0; hashmap_iterate(t->entries, &i, NULL, &value);) {
                ExpandEntry *e = value;
                if (!e->pod.uid)
                        entry_drop(t, e);
        }
        t->due_all = false;
        for (size_t i = 0; hashmap_iterate(t->due_pods, &i, &key, NULL);)
                hashmap_remove(t->due_pods, key);
}

static int on_soon(sd_event_source *s, void *userdata) {
        scan(userdata);
        return 0;
}

static void arm_timer(ExpandTable *t) {
        uint64_t interval = t->m->expand_check_interval_usec ?: EXPAND_CHECK_DEFAULT_USEC;
        /* Up to a tenth more, at random: nodes started together do not read in step. */
        uint64_t jitter = (uint64_t) ((double) interval * 0.1 * k8s_random01());

        (void) sd_event_source_set_time_relative(t->timer, interval + jitter);
        (void) sd_event_source_set_enabled(t->timer, SD_EVENT_ONESHOT);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        ExpandTable *t = userdata;

        t->due_all = true;
        scan(t);
        arm_timer(t);
        return 0;
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata) {
        ExpandTable *t = userdata;
        void *value;

        /* What answered already is decided again; nothing is read. */
        for (size_t i = 0; hashmap_iterate(t->entries, &i, NULL, &value);) {
                ExpandEntry *e = value;
                if (e->gets == 0 && e->answered_pvc && e->answered_pv)
                        evaluate(e);
        }
        return 0;
}

void expand_volume_published(VolumeManager *m) {
        /* kubelet looks at a volume's size when it mounts it: a volume just
         * published has its claim read now, not at the next periodic check
         * (a scan reads only the claims it has not seen yet). */
        if (m->expand)
                check_soon(m->expand);
}

int expand_during_publish(Operation *op, expand_mount_done_t done) {
        VolumeManager *m = op->m;
        ExpandTable *t = m->expand;
        ActualVolume *av = op->av;
        const K8sPersistentVolume *pv = NULL;
        LogFields f = { .pod_uid = op->pod.uid, .pod = op->pod.key, .volume = op->spec_name, .driver = av->driver,
                        .volume_handle = av->handle };
        ExpandEntry *e;

        if (!t || av->lifecycle != VOLUME_PERSISTENT || av->block || op->republish || m->stopping)
                return 0;
        /* kubelet finds the claim through the PV's claimRef; the PV is the
         * one the pod's volume resolved to, in the lookup cache. */
        _cleanup_free_ char *asker = manager_asker_of_volume(av->unique_name);
        if (object_watches_get(m->watches, &k8s_kind_pv, NULL, av->spec_name, asker, (const void **) &pv) < 0 ||
            !pv || isempty(pv->claim_namespace) || isempty(pv->claim_name))
                return 0;
        /* Published for another pod already: its claim is watched for a new
         * size by the checks (every interval, and at each update of a pod
         * using it), as for the running pod.  Not read again for every pod
         * that comes: 20 pods on one claim cost one read, not 20 (kubelet
         * reads the claim at every MountVolume). */
        const char *key;
        void *value;
        for (size_t i = 0; hashmap_iterate(av->publishes, &i, &key, &value);)
                if (!streq(key, op->pod.uid) && ((ActualPublish *) value)->state == PUBLISH_DONE)
                        return 0;
        e = hashmap_get(t->entries, av->unique_name);
        if (e && (e->busy || e->mount_op))
                return 0; /* a read or an expansion of it runs already, which this publish does not wait for */
        if (!e) {
                e = calloc(1, sizeof *e);
                if (!e)
                        return -ENOMEM;
                e->t = t;
                e->refs = 1;
                if (!(e->unique_name = strdup(av->unique_name)) ||
                    hashmap_put(t->entries, e->unique_name, e, NULL) < 0) {
                        free(e->unique_name);
                        free(e);
                        return -ENOMEM;
                }
        }
        pod_info_done(&e->pod);
        if (pod_info_copy(&op->pod, &e->pod) < 0 || free_and_strdup(&e->claim_namespace, pv->claim_namespace) < 0 ||
            free_and_strdup(&e->claim_name, pv->claim_name) < 0 || free_and_strdup(&e->pv_name, av->spec_name) < 0 ||
            free_and_strdup(&e->spec_name, op->spec_name) < 0) {
                entry_drop(t, e);
                return -ENOMEM;
        }
        e->mount_op = op;
        e->mount_done = done;
        /* Read now, as kubelet does: not what a check read a minute ago. */
        e->answered_pvc = e->answered_pv = false;
        entry_fetch(e);
        if (e->gets == 0) {
                e->mount_op = NULL;
                e->mount_done = NULL;
                return -EIO;
        }
        log_fields(LOG_DEBUG, &f, "Reading volume %s, then claim %s/%s, for their sizes before the publish of %s "
                   "counts as done", e->pv_name, e->claim_namespace, e->claim_name, op->spec_name);
        return 1;
}

void expand_pod_changed(VolumeManager *m, const K8sPod *pod) {
        ExpandTable *t = m->expand;
        bool claims = false;

        if (!t || !pod->meta.uid)
                return;
        for (size_t i = 0; i < pod->n_volumes; i++)
                claims = claims || pod->volumes[i].claim_name || pod->volumes[i].ephemeral;
        if (!claims)
                return;
        /* kubelet looks at a pod's volumes' sizes on each of its syncs: an
         * update of the pod is when an expansion may have come. */
        if (hashmap_put(t->due_pods, pod->meta.uid, (void *) 1, NULL) < 0)
                return;
        check_soon(t);
}

int expand_setup(VolumeManager *m) {
        ExpandTable *t;
        int r;

        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        m->expand = t;
        t->m = m;
        t->entries = hashmap_new();
        t->due_pods = hashmap_new();
        if (!t->entries || !t->due_pods)
                return -ENOMEM;
        r = sd_event_add_defer(m->event, &t->soon, on_soon, t);
        if (r >= 0)
                r = sd_event_source_set_enabled(t->soon, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_time(m->event, &t->timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_SEC, on_timer, t);
        if (r >= 0)
                r = sd_event_add_time(m->event, &t->retry, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC, on_retry, t);
        if (r >= 0)
                r = sd_event_source_set_enabled(t->retry, SD_EVENT_OFF);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(t->soon, "expand-check-soon");
        (void) sd_event_source_set_description(t->timer, "expand-check");
        (void) sd_event_source_set_description(t->retry, "expand-retry");
        arm_timer(t);
        return 0;
}

void expand_free(VolumeManager *m) {
        ExpandTable *t = m->expand;
        void *value;

        if (!t)
                return;
        /* The API client is freed after us without running the loop again:
         * no callback of a request in flight can come; calls are cancelled. */
        for (size_t i = 0; t->entries && hashmap_iterate(t->entries, &i, NULL, &value);) {
                ExpandEntry *e = value;
                if (e->call)
                        csi_call_cancel(e->call);
                e->call = NULL;
                e->refs = 1;
                entry_unref(e);
        }
        hashmap_free(t->entries);
        hashmap_free(t->due_pods);
        sd_event_source_disable_unref(t->soon);
        sd_event_source_disable_unref(t->timer);
        sd_event_source_disable_unref(t->retry);
        free(t);
        m->expand = NULL;
}
