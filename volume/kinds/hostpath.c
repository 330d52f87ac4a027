/* SPDX-License-Identifier: Apache-2.0 */
/* hostPath (kubelet pkg/volume/hostpath), a pod's volume or a PV: no
 * directory of its own (the runtime is given the spec's path); the publish
 * is the `type` check, and for the *OrCreate types the creation
 * (host/hostpathtype.h), off the loop: the path may be on any file system.
 * The teardown does nothing on disk, as kubelet's.  After a restart it is not
 * reconstructed (there is nothing of it under root-dir): a pod still
 * wanting it has it checked again, which changes nothing. */
#include <stdio.h>
#include <string.h>

#include "systemd/log.h"
#include "volume/host/hostpathtype.h"
#include "volume/internal.h"
#include "volume/kinds/podkind.h"
#include "volume/passes/operation.h"
#include "volume/state/desired.h"

typedef struct HostPathSource {
        char *path;
        char *type;
} HostPathSource;

static void source_free(void *p) {
        HostPathSource *s = p;

        if (!s)
                return;
        free(s->path);
        free(s->type);
        free(s);
}

static void *source_copy(const void *p) {
        const HostPathSource *s = p;
        HostPathSource *c = calloc(1, sizeof *c);

        if (!c || !(c->path = strdup(s->path)) || strdup_or_null(s->type, &c->type) < 0) {
                source_free(c);
                return NULL;
        }
        return c;
}

static bool host_path_claims(const K8sPodVolume *v) {
        return v->host_path;
}

static bool host_path_claims_pv(const K8sPersistentVolume *pv) {
        return pv->host_path;
}

static int spec_of(const K8sPod *pod, const char *name, const K8sHostPathSource *h, VolumeLifecycle lifecycle,
                   bool block, DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = NULL;
        HostPathSource src = { .path = h->path, .type = h->type };

        if (block)
                return desired_set_text(&dv->failed, "hostPath volume \"%s\" cannot be used as a block device", name);
        if (isempty(h->path) || h->path[0] != '/')
                return desired_set_text(&dv->failed, "hostPath volume \"%s\": path \"%s\" is not absolute", name,
                                        strempty(h->path));
        if (host_path_type_from_string(h->type) < 0)
                return desired_set_text(&dv->failed, "%s is an invalid volume type", h->type);
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->kind = &volume_kind_host_path;
        s->lifecycle = lifecycle;
        /* kubelet's unique name of a volume of a plugin that neither
         * attaches nor mounts a device: per pod, PV or not. */
        if (!(s->spec_name = strdup(name)) || !(s->source = source_copy(&src)) ||
            asprintf(&s->unique_name, "%s/%s-%s", volume_kind_host_path.plugin_name, pod->meta.uid, name) < 0)
                return -ENOMEM;
        dv->spec = TAKE_PTR(s);
        return 0;
}

static int host_path_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block,
                            DesiredVolume *dv) {
        const char *problem = NULL;

        if (k8s_pod_volume_validate(v, &problem) < 0)
                return desired_set_text(&dv->failed, "%s", problem);
        return spec_of(pod, v->name, v->host_path, VOLUME_EPHEMERAL, block, dv);
}

static int host_path_desire_pv(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv,
                               const ClusterView *view, bool block, DesiredVolume *dv) {
        return spec_of(pod, pv->meta.name, pv->host_path, VOLUME_PERSISTENT, block, dv);
}

typedef struct HostPathWork {
        PodkindWork w;
        HostPathSource *src;
} HostPathWork;

static void work_free(void *p) {
        HostPathWork *w = p;

        if (!w)
                return;
        podkind_work_done(&w->w);
        source_free(w->src);
        free(w);
}

static int work(void *p, char **ret_error) {
        HostPathWork *w = p;
        LogFields f = podkind_work_fields(&w->w);
        int r = host_path_check_spec(w->src->path, w->src->type, ret_error);

        if (r < 0)
                log_fields_errno(LOG_WARNING, r, &f, "hostPath %s of type \"%s\" failed its check: %s",
                                 w->src->path, strempty(w->src->type), *ret_error ?: strerror(-r));
        else if (r > 0)
                log_fields(LOG_INFO, &f, "Created hostPath %s (type %s)", w->src->path, w->src->type);
        else
                log_fields(LOG_DEBUG, &f, "hostPath %s is of type \"%s\"", w->src->path, strempty(w->src->type));
        return r < 0 ? r : 0;
}

static int fill(void *p, const Operation *op) {
        HostPathWork *w = p;

        return (w->src = source_copy(op->spec->source)) ? 0 : -ENOMEM;
}

static void host_path_run(Operation *op) {
        /* kubelet's TearDown of a hostPath does nothing. */
        if (op->kind != OP_PUBLISH) {
                operation_finish(op, true);
                return;
        }
        podkind_start(op, sizeof(HostPathWork), fill, work, work_free, false);
}

static int host_path_host_path(const VolumeSpec *s, char **ret) {
        const HostPathSource *src = s->source;
        char *p = strdup(src->path);

        if (!p)
                return -ENOMEM;
        *ret = p;
        return 0;
}

static void host_path_outcome(Operation *op, bool success) {
        if (success && op->kind == OP_PUBLISH)
                podkind_publish_made_no_mount(op);
}

/* Nothing of a hostPath is under pods/<uid>/volumes: never called. */
static void host_path_reconstruct_publish(VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                                          const char *spec_name) {
}

const VolumeKind volume_kind_host_path = {
        .name = "host-path",
        .plugin_name = "kubernetes.io/host-path",
        .pod_dir = "kubernetes.io~host-path",
        .no_volume_dir = true,
        .mount_attributes = VOLUME_ATTR_UNMANAGED, /* kubelet: hostPath is not relabelled */
        .call_names = { [OP_PUBLISH] = "SetUp", [OP_UNPUBLISH] = "TearDown" },
        .claims = host_path_claims,
        .claims_pv = host_path_claims_pv,
        .desire = host_path_desire,
        .desire_pv = host_path_desire_pv,
        .source_copy = source_copy,
        .source_free = source_free,
        .paths = podkind_paths,
        .runtime_host_path = host_path_host_path,
        .run = host_path_run,
        .outcome = host_path_outcome,
        .reconstruct_publish = host_path_reconstruct_publish,
};
