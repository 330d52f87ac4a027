/* SPDX-License-Identifier: Apache-2.0 */
/* CSI's desired state (volume/kind.h's desire entries): an inline CSI
 * volume of the pod, or a bound claim's PV with spec.csi, as a VolumeSpec
 * with everything its CSI calls need. */
#include <stdio.h>

#include "systemd/validate.h"
#include "volume/host/paths.h"
#include "volume/kinds/csi/kind.h"
#include "volume/state/desired.h"

bool csi_claims(const K8sPodVolume *v) {
        return v->csi;
}

bool csi_claims_pv(const K8sPersistentVolume *pv) {
        return pv->csi;
}

int csi_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block, DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = NULL;
        char handle[CSI_HASH_NAME_MAX];
        int r;

        if (block)
                return desired_set_text(&dv->failed,
                                        "inline CSI volume \"%s\" is used in volumeDevices; inline volumes "
                                        "are file systems only",
                                        v->name);
        if (validate_csi_driver_name(v->csi->driver) < 0)
                return desired_set_text(&dv->failed, "inline CSI volume \"%s\" names an invalid driver",
                                        v->name);
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        r = csi_ephemeral_handle(pod->meta.uid, v->name, handle);
        if (r < 0)
                return r;
        s->kind = &volume_kind_csi;
        s->lifecycle = VOLUME_EPHEMERAL;
        s->read_only = v->csi->read_only;
        if (!(s->spec_name = strdup(v->name)) || !(s->driver = strdup(v->csi->driver)) ||
            !(s->handle = strdup(handle)) || !(s->access_mode = strdup("ReadWriteOnce")))
                return -ENOMEM;
        if (asprintf(&s->unique_name, CSI_PLUGIN_NAME "/%s-%s", pod->meta.uid, v->name) < 0)
                return -ENOMEM;
        if (strdup_or_null(v->csi->fs_type, &s->fs_type) < 0 ||
            desired_copy_string_map(&v->csi->volume_attributes, &s->attributes) < 0 ||
            desired_copy_secret_ref(pod->meta.namespace, v->csi->node_publish_secret_name,
                                    &s->publish_secret) < 0)
                return -ENOMEM;
        dv->spec = TAKE_PTR(s);
        return 0;
}

/* The claim is bound to pv (claimRef) and its volumeMode fits (desired.c). */
int csi_desire_pv(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv, const ClusterView *view, bool block,
                  DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = NULL;

        if (validate_csi_driver_name(pv->csi->driver) < 0 || isempty(pv->csi->volume_handle))
                return desired_set_text(&dv->failed,
                                        "persistentvolume \"%s\" has an invalid CSI driver or volume handle",
                                        pv->meta.name);
        if (validate_path_component(pv->meta.name) < 0)
                return desired_set_text(&dv->failed, "persistentvolume name \"%s\" cannot be used as a path",
                                pv->meta.name);

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->kind = &volume_kind_csi;
        s->lifecycle = VOLUME_PERSISTENT;
        s->block = block;
        /* The pod's claim readOnly; PV spec.csi.readOnly is for ControllerPublish. */
        s->read_only = v->claim_read_only;
        if (!(s->spec_name = strdup(pv->meta.name)) || !(s->driver = strdup(pv->csi->driver)) ||
            !(s->handle = strdup(pv->csi->volume_handle)))
                return -ENOMEM;
        if (csi_unique_volume_name(s->driver, s->handle, &s->unique_name) < 0)
                return -ENOMEM;
        if (!(s->access_mode = strdup(pv->access_modes && pv->access_modes[0] ? pv->access_modes[0]
                                                                               : "ReadWriteOnce")))
                return -ENOMEM;
        if (desired_copy_strv(pv->access_modes, &s->access_modes) < 0)
                return -ENOMEM;
        /* kubelet enforces ReadWriteOncePod (and mounts it with context=) only
         * when it is the volume's one mode: with more it cannot tell which one
         * the pod means. */
        s->rwop = k8s_strv_length(pv->access_modes) == 1 && streq(pv->access_modes[0], "ReadWriteOncePod");
        if (desired_volume_selinux_label(pod, v->name, &s->selinux_label, &s->selinux_conflict) < 0 ||
            strdup_or_null(pod->selinux_change_policy, &s->selinux_change_policy) < 0)
                return -ENOMEM;
        if (strdup_or_null(pv->csi->fs_type, &s->fs_type) < 0 ||
            desired_copy_strv(pv->mount_options, &s->mount_flags) < 0 ||
            desired_copy_string_map(&pv->csi->volume_attributes, &s->attributes) < 0 ||
            desired_copy_secret_ref(pv->csi->node_stage_secret.namespace, pv->csi->node_stage_secret.name,
                                    &s->stage_secret) < 0 ||
            desired_copy_secret_ref(pv->csi->node_publish_secret.namespace,
                                    pv->csi->node_publish_secret.name, &s->publish_secret) < 0)
                return -ENOMEM;
        dv->spec = TAKE_PTR(s);
        return 0;
}

