/* SPDX-License-Identifier: Apache-2.0 */
/* Local PVs (kubelet pkg/volume/local, plugin kubernetes.io/local-volume):
 * spec.local.path bind-mounted at pods/<uid>/volumes/kubernetes.io~local-volume/<pv>,
 * once the PV's node affinity is found to admit this Node (another Node's
 * PV is a final error, as the scheduler would never have put the pod here).
 * One volume per PV (kubelet's plugin mounts devices, so its unique name is
 * the PV's), one publish per pod.  A path that is a block device, and a PV
 * of volumeMode Block, are refused as not supported. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "systemd/errormsg.h"
#include "systemd/log.h"
#include "volume/internal.h"
#include "volume/kinds/podkind.h"
#include "volume/passes/operation.h"
#include "volume/state/desired.h"

static bool local_claims_pv(const K8sPersistentVolume *pv) {
        return pv->local_path;
}

static int local_desire_pv(const K8sPod *pod, const K8sPodVolume *v, const K8sPersistentVolume *pv,
                           const ClusterView *view, bool block, DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = NULL;
        const K8sNode *node = view && view->get_node ? view->get_node(view->userdata) : NULL;

        if (block)
                return desired_set_text(&dv->failed, "local PV %s: volumeMode Block is not supported by kvolumed",
                                        pv->meta.name);
        if (isempty(pv->local_path) || pv->local_path[0] != '/')
                return desired_set_text(&dv->failed, "local PV %s: path \"%s\" is not absolute", pv->meta.name,
                                        strempty(pv->local_path));
        if (!node)
                return desired_set_text(&dv->waiting, "the Node object, to check local PV %s's node affinity",
                                        pv->meta.name);
        if (!k8s_pv_node_affinity_matches(pv, node))
                return desired_set_text(&dv->failed, "local PV %s has a node affinity that does not admit node %s",
                                        pv->meta.name, node->meta.name);
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->kind = &volume_kind_local;
        s->lifecycle = VOLUME_PERSISTENT;
        s->read_only = v->claim_read_only;
        if (!(s->spec_name = strdup(pv->meta.name)) || !(s->source = strdup(pv->local_path)) ||
            asprintf(&s->unique_name, "%s/%s", volume_kind_local.plugin_name, pv->meta.name) < 0)
                return -ENOMEM;
        dv->spec = TAKE_PTR(s);
        return 0;
}

static void *source_copy(const void *p) {
        return strdup(p);
}

typedef struct LocalWork {
        PodkindWork w;
        bool setup, read_only;
        char *path;
} LocalWork;

static void work_free(void *p) {
        LocalWork *w = p;

        if (!w)
                return;
        podkind_work_done(&w->w);
        free(w->path);
        free(w);
}

static bool is_mount_root(int fd) {
        struct statx sx;

        return statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) >= 0 &&
               (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

static int set_up(LocalWork *w, const char *abs, char **ret_error) {
        LogFields f = podkind_work_fields(&w->w);
        _cleanup_close_ int parent = -1, target = -1, source = -1;
        char from[64], to[64];
        const char *name;
        struct stat st;
        int r;

        r = podkind_open_parent(&w->w, &parent, &name);
        if (r >= 0 && (target = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                r = -errno;
        if (r < 0)
                return error_message(ret_error, r, "cannot open %s: %s", abs, strerror(-r));
        if (is_mount_root(target)) {
                log_fields(LOG_DEBUG, &f, "%s is mounted already", abs);
                return 0;
        }
        /* The PV's path is the administrator's: followed as kubelet's
         * EvalSymlinks does. */
        source = open(w->path, O_PATH | O_CLOEXEC);
        if (source < 0 || fstat(source, &st) < 0)
                return error_message(ret_error, -errno, "local PV path %s cannot be opened: %s", w->path,
                                     strerror(errno));
        if (S_ISBLK(st.st_mode))
                return error_message(ret_error, -EOPNOTSUPP,
                                     "local PV path %s is a block device: formatting and mounting it is not "
                                     "supported by kvolumed",
                                     w->path);
        if (!S_ISDIR(st.st_mode))
                return error_message(ret_error, -ENOTDIR, "local PV path %s is not a directory", w->path);
        snprintf(from, sizeof from, "/proc/self/fd/%d", source);
        snprintf(to, sizeof to, "/proc/self/fd/%d", target);
        if (mount(from, to, NULL, MS_BIND, NULL) < 0) {
                r = -errno;
                log_fields_errno(LOG_ERR, r, &f, "Failed to bind-mount local PV path %s at %s: %m", w->path, abs);
                return error_message(ret_error, r, "cannot bind-mount %s at %s: %s", w->path, abs,
                                     strerror(-r));
        }
        if (w->read_only && mount(NULL, abs, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0) {
                r = -errno;
                (void) umount2(abs, UMOUNT_NOFOLLOW);
                return error_message(ret_error, r, "cannot make the bind of %s at %s read-only: %s", w->path,
                                     abs, strerror(-r));
        }
        log_fields(LOG_INFO, &f, "Bind-mounted local PV path %s at %s%s", w->path, abs, w->read_only ? " (read-only)" : "");
        return 0;
}

static int tear_down(LocalWork *w, const char *abs, char **ret_error) {
        LogFields f = podkind_work_fields(&w->w);
        _cleanup_close_ int parent = -1, target = -1;
        const char *name;
        int r;

        r = podkind_open_parent(&w->w, &parent, &name);
        if (r == -ENOENT)
                return 0;
        if (r >= 0 && (target = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                r = errno == ENOENT ? 1 : -errno;
        if (r != 0)
                return r > 0 ? 0 : error_message(ret_error, r, "cannot open %s: %s", abs, strerror(-r));
        /* Binds stacked by a crash between the mount and its record: each one. */
        while (is_mount_root(target)) {
                close(TAKE_FD(target));
                if (umount2(abs, UMOUNT_NOFOLLOW) < 0) {
                        r = -errno;
                        log_fields_errno(LOG_ERR, r, &f, "Failed to unmount %s: %m", abs);
                        return error_message(ret_error, r, "cannot unmount %s: %s", abs, strerror(-r));
                }
                log_fields(LOG_INFO, &f, "Unmounted local PV bind at %s", abs);
                target = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (target < 0)
                        return errno == ENOENT ? 0 : -errno;
        }
        return 0; /* the frame removes the directory */
}

static int work(void *p, char **ret_error) {
        LocalWork *w = p;
        _cleanup_free_ char *abs = NULL;

        if (asprintf(&abs, "%s/%s", w->w.root_path, w->w.target) < 0)
                return -ENOMEM;
        return w->setup ? set_up(w, abs, ret_error) : tear_down(w, abs, ret_error);
}

static int fill(void *p, const Operation *op) {
        LocalWork *w = p;

        w->setup = op->kind == OP_PUBLISH;
        if (w->setup) {
                w->read_only = op->spec->read_only;
                if (!(w->path = strdup(op->spec->source)))
                        return -ENOMEM;
        }
        return 0;
}

static void local_run(Operation *op) {
        if (op->kind != OP_PUBLISH && op->kind != OP_UNPUBLISH) {
                operation_fail(op, -EOPNOTSUPP, false, "a local PV has no stage");
                return;
        }
        podkind_start(op, sizeof(LocalWork), fill, work, work_free, true);
}

static void local_reconstruct_publish(VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                                      const char *spec_name) {
        podkind_reconstruct_publish(m, &volume_kind_local, VOLUME_PERSISTENT, false, pod_uid, spec_name);
}

const VolumeKind volume_kind_local = {
        .name = "local",
        .plugin_name = "kubernetes.io/local-volume",
        .pod_dir = "kubernetes.io~local-volume",
        .call_names = { [OP_PUBLISH] = "SetUp", [OP_UNPUBLISH] = "TearDown" },
        .claims_pv = local_claims_pv,
        .desire_pv = local_desire_pv,
        .source_copy = source_copy,
        .source_free = free,
        .paths = podkind_paths,
        .run = local_run,
        .reconstruct_publish = local_reconstruct_publish,
};
