/* SPDX-License-Identifier: Apache-2.0 */
/* CSI's desired state (volume/kind.h's desire entries): an inline CSI
 * volume of the pod, or a bound claim's PV with spec.csi, as a VolumeSpec
 * with everything its CSI calls need.  An in-tree cloud volume kubelet
 * migrates (awsElasticBlockStore, ...: k8s/csimigration.h), a PV's or the
 * pod's own, is CSI's too: translated as kubelet's desired state populator
 * does (createVolumeSpec, csimigration.TranslateInTreeSpecToCSI), it becomes
 * the VolumeSpec of the CSI PV the translation makes, marked migrated. */
#include <stdio.h>

#include "k8s/csimigration.h"
#include "systemd/validate.h"
#include "volume/host/paths.h"
#include "volume/kinds/csi/kind.h"
#include "volume/state/desired.h"

bool csi_claims(const K8sPodVolume *v) {
        return v->csi || k8s_csi_migration_driver_of_pod_volume(v);
}

bool csi_claims_pv(const K8sPersistentVolume *pv) {
        return pv->csi || k8s_csi_migration_driver_of_pv(pv);
}

static int desire_inline_migrated(const K8sPod *pod, const K8sPodVolume *v, bool block, DesiredVolume *dv);

int csi_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block, DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = NULL;
        char handle[CSI_HASH_NAME_MAX];
        int r;

        if (!v->csi)
                return desire_inline_migrated(pod, v, block, dv);
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

/* A PV's CSI source (its own, or the one translation made of an in-tree
 * source) as kubelet's csiPlugin uses it: read_only is the pod's (the claim's
 * readOnly; the source's readOnly is for ControllerPublish), spec_name names
 * the pod's volume dir and the messages. */
static int pv_spec(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv, bool block,
                   bool read_only, const char *spec_name, const char *migrated_from, DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = NULL;

        if (validate_csi_driver_name(pv->csi->driver) < 0 || isempty(pv->csi->volume_handle))
                return desired_set_text(&dv->failed,
                                        "persistentvolume \"%s\" has an invalid CSI driver or volume handle",
                                        pv->meta.name);
        if (validate_path_component(spec_name) < 0)
                return desired_set_text(&dv->failed, "persistentvolume name \"%s\" cannot be used as a path",
                                        spec_name);

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->kind = &volume_kind_csi;
        s->lifecycle = VOLUME_PERSISTENT;
        s->block = block;
        s->read_only = read_only;
        s->migrated_from = migrated_from;
        if (!(s->spec_name = strdup(spec_name)) || !(s->driver = strdup(pv->csi->driver)) ||
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

void *csi_source_copy(const void *source) {
        const CsiSource *from = source;
        CsiSource *s = calloc(1, sizeof *s);

        if (s && strdup_or_null(from->spec_vol_id, &s->spec_vol_id) < 0) {
                free(s);
                return NULL;
        }
        return s;
}

void csi_source_free(void *source) {
        CsiSource *s = source;

        if (s)
                free(s->spec_vol_id);
        free(s);
}

/* kubelet's words when the translation refuses the source
 * (csimigration.TranslateInTreeSpecToCSI): final, until the object changes. */
static int translation_failed(DesiredVolume *dv, int r, const char *error) {
        if (r == -ENOMEM)
                return r;
        return desired_set_text(&dv->failed, "failed to translate in-tree pv to CSI: %s",
                                error ?: strerror(-r));
}

/* An inline in-tree volume kubelet migrates: the PV the translation makes of
 * it, as kubelet's volume.Spec with InlineVolumeSpecForCSIMigration: named
 * after that PV (its name escaped as kubelet's getTargetPath does: the pod's
 * volume dir), persistent (staged at the handle's globalmount, published
 * with the driver's unique name), and not read-only for the publish
 * (volume.NewSpecFromVolume leaves Spec.ReadOnly false; the source's
 * readOnly went to the translated source, for ControllerPublish). */
static int desire_inline_migrated(const K8sPod *pod, const K8sPodVolume *v, bool block, DesiredVolume *dv) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *pv = NULL;
        _cleanup_free_ char *error = NULL, *name = NULL;
        int r;

        r = k8s_csi_translate_inline(v, pod->meta.namespace, &pv, &error);
        if (r < 0)
                return translation_failed(dv, r, error);
        /* The translated PV is Filesystem: kubelet's check of a claim's PV. */
        if (block)
                return desired_set_text(&dv->failed,
                                        "volume %s has volumeMode Filesystem, but is specified in volumeDevices",
                                        v->name);
        /* utilstrings.EscapeQualifiedName: "/" becomes "~". */
        name = strdup(strempty(pv->meta.name));
        if (!name)
                return -ENOMEM;
        for (char *c = name; *c; c++)
                if (*c == '/')
                        *c = '~';
        r = pv_spec(pod, v, pv, false, false, name, k8s_csi_migration_plugin_of_pod_volume(v), dv);
        if (r < 0 || !dv->spec || streq(name, pv->meta.name))
                return r;
        /* vol_data.json says the name itself, as kubelet writes spec.Name(). */
        CsiSource *src = calloc(1, sizeof *src);
        if (!src || !(src->spec_vol_id = strdup(pv->meta.name))) {
                free(src);
                return -ENOMEM;
        }
        dv->spec->source = src;
        return 0;
}

/* The claim is bound to pv (claimRef) and its volumeMode fits (desired.c).
 * An in-tree PV kubelet migrates is translated first; it keeps its name. */
int csi_desire_pv(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv, const ClusterView *view,
                  bool block, DesiredVolume *dv) {
        _cleanup_(k8s_pv_freep) K8sPersistentVolume *translated = NULL;
        _cleanup_free_ char *error = NULL;
        int r;

        if (pv->csi)
                return pv_spec(pod, v, pv, block, v->claim_read_only, pv->meta.name, NULL, dv);
        r = k8s_csi_translate_pv(pv, &translated, &error);
        if (r < 0)
                return translation_failed(dv, r, error);
        return pv_spec(pod, v, translated, block, v->claim_read_only, pv->meta.name,
                       k8s_csi_migration_plugin_of_pv(pv), dv);
}
