/* SPDX-License-Identifier: Apache-2.0 */
/* CSI's operations (volume/kind.h's run entry): stage, publish, unpublish,
 * unstage of one volume as a short chain of steps, some asynchronous (a
 * CSI call, a Secret GET, an ownership change in a child process); the
 * frame (volume/passes/operations.c) made its directories and intent record
 * before, and records its outcome after.  Failures are classified as
 * kubelet does: final (nothing was mounted), uncertain (maybe mounted: keep
 * tracking and retry or tear down), transient (nothing happened: retry
 * later). */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>

#include "systemd/log.h"
#include "volume/host/fsgroup.h"
#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/kinds/csi/blockmap.h"
#include "volume/kinds/csi/kind.h"
#include "volume/passes/operation.h"

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

/* ---- steps --------------------------------------------------------------------- */

/* A CSI call that did not start (r < 0): its driver is not registered
 * (-ENOENT), or "what" went wrong.  Nothing happened: not uncertain. */
/* A call of a migrated volume's stage or publish is labelled migrated in
 * csi_operations_seconds, as kubelet's createCSIOperationContext does for
 * MountDevice and SetUp (its teardown calls have no spec: "false"). */
static void call_label(Operation *op, int r) {
        if (r >= 0 && op->call && op->spec && op->spec->migrated_from)
                csi_call_mark_migrated(op->call);
}

static void call_not_started(Operation *op, int r, const char *what) {
        if (r == -ENOENT)
                operation_fail(op, r, false,
                               "kubernetes.io/csi: driver name %s not found in the list of registered CSI "
                               "drivers",
                               op->av->driver);
        else if (r < 0)
                operation_fail(op, r, false, "kubernetes.io/csi: %s: %s", what, strerror(-r));
}

static void on_capabilities(const CsiStatus *status, const CsiNodeCapabilities *caps, void *userdata) {
        Operation *op = userdata;
        DriverCaps *dc;

        op->call = NULL;
        if (status->code != CSI_CODE_OK) {
                operation_fail(op, -EIO, false,
                               "kubernetes.io/csi: failed to get node capabilities of driver %s: %s: %s",
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
        operation_next(op);
}

static void step_capabilities(Operation *op) {
        DriverCaps *dc = hashmap_get(op->m->caps, op->av->driver);
        int r;

        if (op->kind == OP_UNPUBLISH) {
                operation_next(op); /* NodeUnpublishVolume needs no capability */
                return;
        }
        if (dc && dc->known) {
                op->stage_capable = csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_STAGE_UNSTAGE_VOLUME);
                op->mount_group_capable =
                        csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_VOLUME_MOUNT_GROUP);
                op->multi_writer_capable =
                        csi_node_capabilities_has(&dc->caps, CSI_NODE_CAP_SINGLE_NODE_MULTI_WRITER);
                operation_next(op);
                return;
        }
        r = csi_node_get_capabilities(op->m->csi, op->av->driver, on_capabilities, op, &op->call);
        call_label(op, r);
        call_not_started(op, r, "failed to call NodeGetCapabilities");
}

static void on_attachment(K8sClient *c, int error, long status, const char *message, void *obj,
                          void *userdata) {
        _cleanup_(k8s_volume_attachment_freep) K8sVolumeAttachment *va = obj;
        Operation *op = userdata;
        char name[CSI_HASH_NAME_MAX] = "";

        (void) csi_attachment_name(op->av->handle, op->av->driver, op->m->node_name, name);
        if (!va) {
                operation_fail(op, error < 0 ? error : -ENOENT, false,
                               "kubernetes.io/csi: failed to fetch publishContext: "
                               "volume attachment %s: %s",
                               name, message ?: "not found");
                return;
        }
        if (!va->attached) {
                operation_fail(op, -ENOENT, false, "kubernetes.io/csi: volume attachment %s is not attached",
                               name);
                return;
        }
        k8s_string_map_done(&op->publish_context);
        for (size_t i = 0; i < va->attachment_metadata.n; i++) {
                char **keys = reallocarray(op->publish_context.keys, i + 1, sizeof(char *));
                char **values =
                        keys ? reallocarray(op->publish_context.values, i + 1, sizeof(char *)) : NULL;
                if (keys)
                        op->publish_context.keys = keys;
                if (values)
                        op->publish_context.values = values;
                if (!keys || !values || !(keys[i] = strdup(va->attachment_metadata.keys[i]))) {
                        operation_fail(op, -ENOMEM, false, "out of memory");
                        return;
                }
                if (!(values[i] = strdup(va->attachment_metadata.values[i]))) {
                        free(keys[i]);
                        operation_fail(op, -ENOMEM, false, "out of memory");
                        return;
                }
                op->publish_context.n = i + 1;
        }
        operation_next(op);
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
                operation_next(op);
                return;
        }
        if (op->av->lifecycle == VOLUME_EPHEMERAL || !csi_driver_attachable(op->m, op->av->driver)) {
                operation_next(op);
                return;
        }
        r = csi_attachment_name(op->av->handle, op->av->driver, op->m->node_name, name);
        if (r >= 0)
                r = k8s_get_object(op->m->k8s, &k8s_kind_volume_attachment, NULL, name, on_attachment, op);
        if (r < 0)
                operation_fail(op, r, false, "kubernetes.io/csi: failed to fetch publishContext: %s",
                               strerror(-r));
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
                operation_fail(op, error < 0 ? error : -ENOENT, false,
                               "kubernetes.io/csi: failed to get secret %s/%s: %s", ref->namespace,
                               ref->name, message ? message : "not found");
                return;
        }
        op->secret = obj;
        operation_next(op);
}

static void step_secret(Operation *op) {
        const K8sSecretRef *ref = secret_ref(op);
        int r;

        if (!ref) {
                operation_next(op);
                return;
        }
        r = k8s_get_object(op->m->k8s, &k8s_kind_secret, ref->namespace, ref->name, on_secret, op);
        if (r < 0)
                operation_fail(op, r, false, "kubernetes.io/csi: failed to get secret %s/%s: %s",
                               ref->namespace, ref->name, strerror(-r));
}

static void on_tokens(Operation *op, int error, const char *message) {
        if (error < 0) {
                operation_fail(op, error, false, "%s",
                               message ?: "kubernetes.io/csi: failed to get service account tokens");
                return;
        }
        operation_next(op);
}

/* kubelet's podServiceAccountTokenAttrs, before every NodePublishVolume of a
 * file system (a republish gets fresh ones); tokens.c has the rest. */
static void step_tokens(Operation *op) {
        int r = op->kind == OP_PUBLISH && !op->av->block ? tokens_request(op, on_tokens) : 0;
        if (r == 0)
                operation_next(op);
        else if (r < 0)
                operation_fail(op, r, false,
                               "kubernetes.io/csi: failed to request service account tokens: %s",
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
        const K8sCSIDriver *d = csi_driver_object(op->m, op->av->driver);
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
        _cleanup_free_ char *target = operation_abs_path(op, op->target);
        LogFields f = operation_fields(op);
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
                operation_next(op);
                return;
        }
        /* NOT_FOUND to a teardown: the driver knows nothing of it (a
         * publish or staging of a previous boot, a driver that lost its
         * state).  Done only if nothing is mounted at the target. */
        if (status->code == CSI_CODE_NOT_FOUND && (op->kind == OP_UNPUBLISH || op->kind == OP_UNSTAGE) &&
            not_found_is_done(op)) {
                op->call_ok = true;
                operation_next(op);
                return;
        }
        /* KEP-4876: the driver may have run out of attachments; its limit is read again. */
        if (status->code == CSI_CODE_RESOURCE_EXHAUSTED && (op->kind == OP_STAGE || op->kind == OP_PUBLISH))
                drivers_refresh_attach_limit(op->m, op->av->driver);
        /* The CSI spec lets a driver refuse a call while another of the same
         * volume runs; many do (a lock per volume ID).  Not this volume's
         * failure: the driver gets one call per volume from now on. */
        op->refused_beside_others = status->code == CSI_CODE_ABORTED && op->beside_others;
        op->failed_method = status->method ? strrchr(status->method, '/') + 1 : NULL;
        op->failed_code = csi_code_name(status->code);
        /* A non-final code means the driver may still be working, or may have
         * finished: the volume is uncertain, never forgotten. */
        operation_fail(op, -EIO, !csi_code_is_final(status->code),
                       "kubernetes.io/csi: %s failed: rpc error: code = %s "
                       "desc = %s",
                       status->method ? strrchr(status->method, '/') + 1 : "call",
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
                operation_fail(op, r, false,
                               "kubernetes.io/csi: cannot read the mount table to check %s: %s", target,
                               strerror(-r));
                return false;
        }
        n = mount_table_other_mounts(op->m->mounts, target, refs, MAX_REFS_SHOWN);
        if (n == 0)
                return true;
        for (size_t i = 0; i < MIN(n, (size_t) MAX_REFS_SHOWN) && len < sizeof list - 1; i++)
                len += (size_t) snprintf(list + len, sizeof list - len, "%s%s", i ? " " : "", refs[i]);
        operation_fail(op, -EBUSY, false,
                       "the device mount path %s is still mounted by other references [%s]%s", target, list,
                       n > MAX_REFS_SHOWN ? " ..." : "");
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
                operation_fail(op, r, false,
                               "kubernetes.io/csi: cannot look for publishes of volume %s under %s: %s",
                               op->av->handle, op->m->root->path, strerror(-r));
        else if (op->av->block)
                /* kubelet's UnmapDevice: not while a pod's bind file of it is
                 * there, under any PV of the same handle. */
                operation_fail(
                        op, -EBUSY, false, "the device %s is still referenced from other Pods: %s/%s%s",
                        op->av->spec_name, op->m->root->path, strempty(first), r > 1 ? " and more" : "");
        else
                operation_fail(op, -EBUSY, false,
                               "kubernetes.io/csi: volume %s is still published on this node: %s/%s%s",
                               op->av->handle, op->m->root->path, strempty(first), r > 1 ? " and more" : "");
        return false;
}

static void step_call(Operation *op) {
        _cleanup_free_ char *target = operation_abs_path(op, op->target), *staging = NULL;
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
                operation_fail(op, -ENOMEM, false, "out of memory");
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
                        operation_next(op); /* kubelet: no STAGE_UNSTAGE, just remove the dirs */
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
                operation_next(op); /* the dirs and vol_data.json are all MountDevice does then */
                return;
        }

        const K8sCSIDriver *driver = csi_driver_object(op->m, op->av->driver);
        /* The tokens go in the context, or with serviceAccountTokenInSecrets
         * only in the secrets (CVE-2023-2878: drivers log their context). */
        bool tokens_in_secrets = op->tokens && driver && driver->service_account_token_in_secrets;
        if (op->secret || tokens_in_secrets) {
                secrets = calloc((op->secret ? op->secret->n_data : 0) + 1, sizeof *secrets);
                if (!secrets) {
                        operation_fail(op, -ENOMEM, false, "out of memory");
                        return;
                }
                for (size_t i = 0; op->secret && i < op->secret->n_data; i++)
                        if (!tokens_in_secrets ||
                            !streq(op->secret->data[i].key, CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS))
                                secrets[n_secrets++] =
                                        (CsiKeyValue){ op->secret->data[i].key,
                                                       (const char *) op->secret->data[i].value };
        }
        context = calloc(op->spec->attributes.n + 6, sizeof *context);
        pctx = calloc(op->publish_context.n + 1, sizeof *pctx);
        if (!context || !pctx) {
                operation_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        for (size_t i = 0; i < op->publish_context.n; i++)
                pctx[i] = (CsiKeyValue){ op->publish_context.keys[i], op->publish_context.values[i] };

        bool pod_info = op->kind == OP_PUBLISH && driver && driver->pod_info_on_mount;
        static const char *const pod_keys[] = { "csi.storage.k8s.io/pod.name",
                                                "csi.storage.k8s.io/pod.namespace",
                                                "csi.storage.k8s.io/pod.uid",
                                                "csi.storage.k8s.io/serviceAccount.name",
                                                "csi.storage.k8s.io/ephemeral" };
        for (size_t i = 0; i < op->spec->attributes.n; i++) {
                bool overridden = false;
                /* Pod keys win over the volume's attributes, as in kubelet. */
                for (size_t k = 0; pod_info && k < ELEMENTSOF(pod_keys); k++)
                        overridden = overridden || streq(op->spec->attributes.keys[i], pod_keys[k]);
                overridden = overridden ||
                             (op->tokens && !tokens_in_secrets &&
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
                context[n_context++] =
                        (CsiKeyValue){ pod_keys[4],
                                       op->av->lifecycle == VOLUME_EPHEMERAL ? "true" : "false" };
        }
        if (op->tokens) {
                r = tokens_format(op->tokens, &tokens_json);
                if (r < 0) {
                        operation_fail(op, r, false,
                                       "kubernetes.io/csi: failed to format service account tokens: %s",
                                       strerror(-r));
                        return;
                }
                if (tokens_in_secrets)
                        secrets[n_secrets++] =
                                (CsiKeyValue){ CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS, tokens_json };
                else
                        context[n_context++] =
                                (CsiKeyValue){ CSI_CONTEXT_SERVICE_ACCOUNT_TOKENS, tokens_json };
        }

        /* kubelet's AddSELinuxMountOption: context="<label>" after the PV's
         * options, quoted since a level holds commas ("s0:c1,c2"). */
        n_flags = k8s_strv_length(op->spec->mount_flags);
        flags = calloc(n_flags + 2, sizeof *flags);
        if (!flags ||
            (op->selinux_context && asprintf(&context_flag, "context=\"%s\"", op->selinux_context) < 0)) {
                operation_fail(op, -ENOMEM, false, "out of memory");
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
                cap = (CsiVolumeCapability){ .access_type = CSI_ACCESS_TYPE_BLOCK,
                                             .access_mode = access_mode(op) };

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
                        r = op->av->block
                                    ? path_block_staging(op->av->spec_name, &staging_rel)
                                    : path_staging_target(op->av->driver, op->av->handle, &staging_rel);
                        staging = r >= 0 ? operation_abs_path(op, staging_rel) : NULL;
                        if (!staging) {
                                operation_fail(op, r < 0 ? r : -ENOMEM, false,
                                               "failed to build the staging path");
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
        if (r >= 0 && (op->kind == OP_PUBLISH || op->kind == OP_UNPUBLISH))
                csi_call_set_pod(op->call, op->pod.key, op->pod.uid);
        /* The request (secrets included) was encoded by now: drop the secret and the tokens. */
        op->secret = k8s_secret_free(op->secret);
        tokens_wipe(op->tokens);
        op->called = r >= 0;
        call_label(op, r);
        call_not_started(op, r, "failed to start the CSI call");
}

/* kubelet's UnmapBlockVolume before NodeUnpublishVolume: the device lock
 * released, the pod's device path and bind mount removed.  Until that is
 * done the publish stays (and the call is not made). */
static void step_unmap(Operation *op) {
        LogFields f = operation_fields(op);
        int r;

        if (op->kind != OP_UNPUBLISH || !op->av->block) {
                operation_next(op);
                return;
        }
        r = block_unmap(op->m->root, op->spec_name, op->pod.uid, &f);
        if (r < 0) {
                operation_fail(op, r, false,
                               "kubernetes.io/csi: failed to unmap the device of volume %s from pod %s: %s",
                               op->spec_name, op->pod.uid, strerror(-r));
                return;
        }
        operation_next(op);
}

/* After NodePublishVolume of a raw block volume: what the driver published
 * must be a block device; its identity is recorded, and it is mapped into the
 * pod (volume/kinds/csi/blockmap.h).  A failure leaves the volume published and
 * uncertain: it is mapped again or torn down, never forgotten. */
static void step_map(Operation *op) {
        BlockIdentity id = {};
        LogFields f = operation_fields(op);
        int r;

        if (op->kind != OP_PUBLISH || !op->av->block) {
                operation_next(op);
                return;
        }
        r = block_identify(op->m->root, op->target, &id);
        if (r == -ENOTBLK) {
                operation_fail(op, r, true,
                               "kubernetes.io/csi: %s/%s is not a block device after NodePublishVolume",
                               op->m->root->path, op->target);
                return;
        }
        if (r < 0) {
                operation_fail(op, r, true, "kubernetes.io/csi: cannot examine %s/%s: %s", op->m->root->path,
                               op->target, strerror(-r));
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
                operation_fail(op, r, true,
                               "kubernetes.io/csi: failed to map the device of volume %s into pod %s: %s",
                               op->spec_name, op->pod.uid, strerror(-r));
                return;
        }
        log_fields(LOG_DEBUG, &f, "Mapped block device %s (%s) into pod %s", strempty(op->device),
                   op->device_serial ?: "no serial", op->pod.uid);
        operation_next(op);
}

static void on_ownership_done(FsGroupWalk *w, int result, void *userdata) {
        Operation *op = userdata;
        LogFields f = operation_fields(op);
        uint64_t stall = fsgroup_stall_usec();

        op->fsgroup = fsgroup_walk_free(op->fsgroup);
        if (result == -ETIMEDOUT) {
                /* Its file system does not answer (a hung FUSE daemon, a dead
                 * NFS server): given up for now, reported, retried with backoff;
                 * no other volume waits for it.  Published but not as the pod
                 * asked: uncertain, as any failed fsGroup change. */
                op->unresponsive = true;
                log_fields(LOG_WARNING, &f,
                           "The file system of volume %s at %s/%s made no progress for %.1f s "
                           "while applying fsGroup %" PRIi64 "; the walk was stopped",
                           op->spec_name, op->m->root->path, op->target, (double) stall / USEC_PER_SEC,
                           op->pod.fs_group);
                manager_pod_event(
                        op->m, &op->pod, "Warning", "VolumeUnresponsive",
                        "The file system of volume \"%s\" does not answer: applying fsGroup %" PRIi64
                        " made no progress for %.1f s; retrying with backoff",
                        op->spec_name, op->pod.fs_group, (double) stall / USEC_PER_SEC);
                operation_fail(op, result, true,
                               "kubernetes.io/csi: applying fsGroup %" PRIi64 " to the volume made no "
                               "progress for %.1f s: its file system does not answer",
                               op->pod.fs_group, (double) stall / USEC_PER_SEC);
                return;
        }
        if (result < 0) {
                /* Published, but not as the pod asked: uncertain, as kubelet has it. */
                operation_fail(op, -EIO, true,
                               "kubernetes.io/csi: failed to apply fsGroup %" PRIi64 " to the volume",
                               op->pod.fs_group);
                return;
        }
        operation_next(op);
}

static void step_ownership(Operation *op) {
        _cleanup_free_ char *target = NULL;
        LogFields f = operation_fields(op);
        int r;

        if (op->kind != OP_PUBLISH || op->av->block || op->mount_group_capable || !fs_group_applies(op)) {
                operation_next(op);
                return;
        }
        target = operation_abs_path(op, op->target);
        if (!target) {
                operation_fail(op, -ENOMEM, true, "out of memory");
                return;
        }
        /* Recursive, possibly long: done by a child process, off the loop. */
        r = fsgroup_walk_start(op->m->event, target, (gid_t) op->pod.fs_group,
                               streq_ptr(op->pod.fs_group_change_policy, "OnRootMismatch"),
                               on_ownership_done, op, &op->fsgroup);
        if (r < 0) {
                operation_fail(op, r, true, "kubernetes.io/csi: failed to start applying fsGroup: %s",
                               strerror(-r));
                return;
        }
        log_fields(LOG_DEBUG, &f, "Applying fsGroup %" PRIi64 " to %s in child process %d", op->pod.fs_group,
                   target, (int) fsgroup_walk_pid(op->fsgroup));
}

static void on_expand_done(Operation *op, int error, const char *message) {
        if (error < 0) {
                /* Published, but not at the size the claim asks: uncertain, and
                 * tried again (kubelet marks it so and keeps the pod waiting). */
                operation_fail(op, error, true, "MountVolume.Setup failed while expanding volume: %s",
                        strempty(message));
                return;
        }
        operation_next(op);
}

/* kubelet's expandVolumeDuringMount: after SetUp (and the fsGroup change),
 * before the volume counts as mounted; expand.c has the rest. */
static void step_expand(Operation *op) {
        int r;

        if (op->kind != OP_PUBLISH) {
                operation_next(op);
                return;
        }
        r = expand_during_publish(op, on_expand_done);
        if (r == 0)
                operation_next(op);
        else if (r < 0)
                operation_fail(op, r, true, "MountVolume.Setup failed while expanding volume: %s",
                               strerror(-r));
}

/* An operation whose CSI call answered OK in an earlier attempt, and a step
 * after it failed: a publish's fsGroup walk or its read of the claim for an
 * expansion (which a busy API server answers 429), a teardown's removal of
 * its directories.  The call is not made again, only what follows it, while
 * the mount table (not a stat that could hang) still shows what the call
 * left: the target mounted after a publish, nothing mounted there after a
 * teardown.  Otherwise the call is made again. */
static void step_resume(Operation *op) {
        _cleanup_free_ char *target = operation_abs_path(op, op->target);
        const char *method = op->kind == OP_PUBLISH     ? "NodePublishVolume"
                             : op->kind == OP_UNPUBLISH ? "NodeUnpublishVolume"
                                                        : "NodeUnstageVolume";
        LogFields f = operation_fields(op);
        bool mounted;
        int r;

        op->resume = false;
        if (!target) {
                operation_fail(op, -ENOMEM, false, "out of memory"); /* nothing happened in this attempt */
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
                operation_run(op);
                return;
        }
        log_fields(LOG_INFO, &f, "%s of %s%s%s answered OK before and %s/%s is %s: resuming after the call",
                   method, op->av->unique_name, op->pod.key ? " for pod " : "", strempty(op->pod.key),
                   op->m->root->path, op->target, mounted ? "mounted" : "not mounted");
        op->called = op->call_ok = true;
        op->step = STEP_CALL + 1;
        operation_run(op);
}

/* The kind's run entry: the frame called it, root-dir being kvolumed's. */
void csi_operation_run(Operation *op) {
        /* A failure from here on leaves a publish whose retry resumes after
         * the call: a step after the block mapping (the fsGroup walk, the
         * expansion), not the mapping itself, whose device only the call
         * can make again. */
        op->resume_after_call = op->step > STEP_MAP;
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
                operation_finish(op, true);
                return;
        }
}

