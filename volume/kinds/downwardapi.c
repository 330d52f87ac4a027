/* SPDX-License-Identifier: Apache-2.0 */
/* The downwardAPI kind (volume/kind.h): kubelet's kubernetes.io/downward-api.
 * The pod's own fields as files (files/downward.h, kubelet's CollectData) in
 * pods/<uid>/volumes/kubernetes.io~downward-api/<name>, on a tmpfs of its
 * own as kubelet's (its wrapper is a Memory emptyDir), written and kept up to
 * date by files/filekind.h: a change of the pod's labels or annotations
 * reaches the manager through the pod informer, which builds the pod's
 * desired state again; its content digest then differs from the one
 * written, and the next pass writes the new version (the AtomicWriter's
 * swap); an unchanged pod writes nothing.  A resourceFieldRef limit the
 * container does not set is the Node's allocatable, so such a volume waits
 * for the Node object. */
#include "volume/internal.h"
#include "volume/kinds/files/downward.h"
#include "volume/kinds/files/filekind.h"

static const FileKindType downwardapi_type = { .kind = &volume_kind_downwardapi, .tmpfs = true };

static bool downwardapi_claims(const K8sPodVolume *v) {
        return v->downward_api != NULL;
}

static int downwardapi_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block,
                              DesiredVolume *dv) {
        _cleanup_free_ char *error = NULL;
        const K8sNode *node = NULL;
        const char *problem = NULL;
        AtomicPayload p = {};
        FileSource *src;
        int r;

        if (k8s_pod_volume_validate(v, &problem) < 0)
                return desired_set_text(&dv->failed, "downwardAPI volume \"%s\" is invalid: %s", v->name,
                                        strempty(problem));
        if (block)
                return desired_set_text(&dv->failed,
                                        "downwardAPI volume \"%s\" is used in volumeDevices; it is a file system only",
                                        v->name);
        if (downward_needs_node(v->downward_api)) {
                node = view->get_node ? view->get_node(view->userdata) : NULL;
                if (!node)
                        return desired_set_text(&dv->waiting,
                                                "downwardAPI volume \"%s\" waits for this node's Node object (a "
                                                "resourceFieldRef limit the container does not set is the Node's "
                                                "allocatable)",
                                                v->name);
        }
        r = downward_collect(pod, v->downward_api, v->downward_api->default_mode, node ? &node->allocatable : NULL,
                             &p, &error);
        if (r == -EINVAL) {
                atomic_payload_done(&p);
                /* kubelet's SetUp error; only a change of the pod fixes it. */
                return desired_set_text(&dv->failed, "downwardAPI volume \"%s\": %s", v->name, strempty(error));
        }
        if (r < 0) {
                atomic_payload_done(&p);
                return r;
        }
        for (size_t i = 0; i < p.n; i++) {
                const char *why = NULL;
                if (atomic_payload_validate_path(p.files[i].path, &why) < 0) {
                        r = desired_set_text(&dv->failed, "downwardAPI volume \"%s\": invalid path \"%s\": %s", v->name,
                                             p.files[i].path, strempty(why));
                        atomic_payload_done(&p);
                        return r;
                }
        }
        src = file_source_new(&p, false);
        if (!src)
                return -ENOMEM;
        return file_kind_spec(&downwardapi_type, pod, v->name, src, dv);
}

static void downwardapi_run(Operation *op) {
        file_kind_run(&downwardapi_type, op);
}

static void downwardapi_outcome(Operation *op, bool success) {
        file_kind_outcome(&downwardapi_type, op, success);
}

static void downwardapi_reconstruct(VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                                    const char *spec_name) {
        file_kind_reconstruct(&downwardapi_type, m, c, pod_uid, spec_name);
}

const VolumeKind volume_kind_downwardapi = {
        .name = "downward-api",
        .plugin_name = "kubernetes.io/downward-api",
        .pod_dir = "kubernetes.io~downward-api",
        .mount_attributes = VOLUME_ATTR_READ_ONLY, /* kubelet: the container never writes them */
        .call_names = {
                [OP_PUBLISH] = "SetUp",
                [OP_UNPUBLISH] = "TearDown",
        },
        .claims = downwardapi_claims,
        .desire = downwardapi_desire,
        .source_copy = file_source_copy,
        .source_free = file_source_free,
        .paths = file_kind_paths,
        .refresh_due = file_kind_refresh_due,
        .run = downwardapi_run,
        .outcome = downwardapi_outcome,
        .reconstruct_publish = downwardapi_reconstruct,
};
