/* SPDX-License-Identifier: Apache-2.0 */
/* The secret kind (volume/kind.h): kubelet's kubernetes.io/secret.  As
 * configmap.c, with kubelet's differences: the files live on a tmpfs of
 * their own (kubelet's wrapper is a Memory emptyDir), so that a secret never
 * reaches a disk; the bytes are wiped from kvolumed's memory when the
 * desired state lets them go, and no log line carries a value. */
#include "volume/internal.h"
#include "volume/kinds/files/filekind.h"

static const FileKindType secret_type = { .kind = &volume_kind_secret, .tmpfs = true, .secret = true };

static bool secret_claims(const K8sPodVolume *v) {
        return v->secret != NULL;
}

static int secret_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block,
                         DesiredVolume *dv) {
        const K8sSecret *s = NULL;
        int r = -EAGAIN;

        if (view->get_secret && !isempty(v->secret->name))
                r = view->get_secret(view->userdata, pod->meta.namespace, v->secret->name, &s);
        else if (isempty(v->secret->name))
                r = 0;
        KeySource src = key_source_secret(s);
        return file_kind_desire_keys(&secret_type, "secret", pod, v, v->secret, view, block, r, s != NULL, &src, dv);
}

static void secret_run(Operation *op) {
        file_kind_run(&secret_type, op);
}

static void secret_outcome(Operation *op, bool success) {
        file_kind_outcome(&secret_type, op, success);
}

static void secret_reconstruct(VolumeManager *m, ReconstructScan *c, const char *pod_uid, const char *spec_name) {
        file_kind_reconstruct(&secret_type, m, c, pod_uid, spec_name);
}

const VolumeKind volume_kind_secret = {
        .name = "secret",
        .plugin_name = "kubernetes.io/secret",
        .pod_dir = "kubernetes.io~secret",
        .call_names = {
                [OP_PUBLISH] = "SetUp",
                [OP_UNPUBLISH] = "TearDown",
        },
        .claims = secret_claims,
        .desire = secret_desire,
        .source_copy = file_source_copy,
        .source_free = file_source_free,
        .paths = file_kind_paths,
        .refresh_due = file_kind_refresh_due,
        .run = secret_run,
        .outcome = secret_outcome,
        .reconstruct_publish = secret_reconstruct,
};
