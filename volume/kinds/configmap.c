/* SPDX-License-Identifier: Apache-2.0 */
/* The configMap kind (volume/kind.h): kubelet's kubernetes.io/configmap.
 * A pod's configMap volume is the object's keys as files
 * (files/keyprojection.h) in pods/<uid>/volumes/kubernetes.io~configmap/<name>,
 * a directory on root-dir's disk as kubelet's (its wrapper is a disk
 * emptyDir), written and kept up to date by files/filekind.h.  The object
 * is read through the ClusterView (a GET, then a watch of that one object:
 * volume/state/watches.c), never by listing the namespace. */
#include "volume/internal.h"
#include "volume/kinds/files/filekind.h"

static const FileKindType configmap_type = { .kind = &volume_kind_configmap };

static bool configmap_claims(const K8sPodVolume *v) {
        return v->config_map != NULL;
}

static int configmap_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block,
                            DesiredVolume *dv) {
        const K8sConfigMap *c = NULL;
        int r = -EAGAIN;

        if (view->get_configmap && !isempty(v->config_map->name))
                r = view->get_configmap(view->userdata, pod->meta.namespace, v->config_map->name, &c);
        else if (isempty(v->config_map->name))
                r = 0; /* nothing can be found by an empty name */
        KeySource src = key_source_configmap(c);
        return file_kind_desire_keys(&configmap_type, "configmap", pod, v, v->config_map, view, block, r, c != NULL,
                                     &src, dv);
}

static void configmap_run(Operation *op) {
        file_kind_run(&configmap_type, op);
}

static void configmap_outcome(Operation *op, bool success) {
        file_kind_outcome(&configmap_type, op, success);
}

static void configmap_reconstruct(VolumeManager *m, ReconstructScan *c, const char *pod_uid, const char *spec_name) {
        file_kind_reconstruct(&configmap_type, m, c, pod_uid, spec_name);
}

const VolumeKind volume_kind_configmap = {
        .name = "configmap",
        .plugin_name = "kubernetes.io/configmap",
        .pod_dir = "kubernetes.io~configmap",
        .call_names = {
                [OP_PUBLISH] = "SetUp",
                [OP_UNPUBLISH] = "TearDown",
        },
        .claims = configmap_claims,
        .desire = configmap_desire,
        .source_copy = file_source_copy,
        .source_free = file_source_free,
        .paths = file_kind_paths,
        .refresh_due = file_kind_refresh_due,
        .run = configmap_run,
        .outcome = configmap_outcome,
        .reconstruct_publish = configmap_reconstruct,
};
