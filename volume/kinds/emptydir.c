/* SPDX-License-Identifier: Apache-2.0 */
/* emptyDir (kubelet pkg/volume/emptydir): a directory of the pod's,
 * pods/<uid>/volumes/kubernetes.io~empty-dir/<name>, mode 0777 (kubelet's
 * setupDir chmods it to 0777 whatever the umask); with medium: Memory a
 * tmpfs mounted there, sized as kubelet sizes it (host/tmpfs.h).  Torn down
 * as kubelet does: the tmpfs unmounted, the content of a disk one removed,
 * then the directory.  HugePages media are refused. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "k8s/quantity.h"
#include "systemd/log.h"
#include "volume/host/beneath.h"
#include "volume/host/tmpfs.h"
#include "volume/kinds/emptydir-usage.h"
#include "volume/internal.h"
#include "volume/kinds/podkind.h"
#include "volume/passes/operation.h"
#include "volume/state/desired.h"

#define EMPTY_DIR_PERM 0777
/* A deeper tree is not removed (each level holds a descriptor): the
 * teardown fails with a message and is retried; kubelet's os.RemoveAll has
 * no limit. */
#define REMOVE_DEPTH_MAX 256

static void *memdup(const void *p, size_t n) {
        void *c = malloc(n);
        return c ? memcpy(c, p, n) : NULL;
}

static void closedirp(DIR **d) {
        if (*d)
                closedir(*d);
}

static bool dot_or_dot_dot(const char *n) {
        return streq(n, ".") || streq(n, "..");
}

typedef struct EmptyDirSource {
        bool memory;
        uint64_t size; /* the tmpfs's size= in bytes; 0: the kernel's default */
} EmptyDirSource;

static bool empty_dir_claims(const K8sPodVolume *v) {
        return v->empty_dir;
}

static uint64_t memory_quantity(const K8sStringMap *m) {
        const char *q = k8s_string_map_get(m, "memory");
        int64_t v;

        return q && k8s_quantity_parse(q, &v) >= 0 && v > 0 ? (uint64_t) v : 0;
}

static uint64_t pod_memory_limit(const K8sPod *pod) {
        _cleanup_free_ uint64_t *app = calloc(pod->n_containers + 1, sizeof(uint64_t));
        _cleanup_free_ uint64_t *init = calloc(pod->n_init_containers + 1, sizeof(uint64_t));

        if (!app || !init)
                return 0;
        for (size_t i = 0; i < pod->n_containers; i++)
                app[i] = memory_quantity(&pod->containers[i].limits);
        for (size_t i = 0; i < pod->n_init_containers; i++)
                init[i] = memory_quantity(&pod->init_containers[i].limits);
        /* The API's pod has overhead only with a RuntimeClass that sets it;
         * the decoder does not keep it: 0. */
        return emptydir_pod_memory_limit(app, pod->n_containers, init, pod->n_init_containers, 0);
}

static int empty_dir_desire(const K8sPod *pod, const K8sPodVolume *v, const ClusterView *view, bool block,
                            DesiredVolume *dv) {
        const K8sEmptyDirSource *e = v->empty_dir;
        _cleanup_(volume_spec_freep) VolumeSpec *s = NULL;
        const char *problem = NULL, *medium = strempty(e->medium);
        EmptyDirSource src = {};

        if (k8s_pod_volume_validate(v, &problem) < 0)
                return desired_set_text(&dv->failed, "%s", problem);
        if (block)
                return desired_set_text(&dv->failed, "emptyDir volume \"%s\" cannot be used as a block device",
                                        v->name);
        if (strncmp(medium, "HugePages", 9) == 0)
                return desired_set_text(&dv->failed,
                                        "emptyDir volume \"%s\": medium %s is not supported by kvolumed", v->name,
                                        medium);
        if (!isempty(medium) && !streq(medium, "Memory"))
                return desired_set_text(&dv->failed, "emptyDir volume \"%s\": unknown medium \"%s\"", v->name,
                                        medium);
        if (streq(medium, "Memory")) {
                const K8sNode *node = view && view->get_node ? view->get_node(view->userdata) : NULL;
                uint64_t allocatable = node ? memory_quantity(&node->allocatable) : 0;
                /* The Node not seen yet, or without allocatable memory: no
                 * bound from it, but the pod's and the volume's still apply. */
                src = (EmptyDirSource){
                        .memory = true,
                        .size = emptydir_memory_size(allocatable ?: UINT64_MAX, pod_memory_limit(pod),
                                                     e->size_limit && e->size_limit_bytes > 0
                                                             ? (uint64_t) e->size_limit_bytes
                                                             : 0),
                };
                if (src.size == UINT64_MAX)
                        src.size = 0;
        }
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->kind = &volume_kind_empty_dir;
        s->lifecycle = VOLUME_EPHEMERAL;
        if (!(s->spec_name = strdup(v->name)) || !(s->source = memdup(&src, sizeof src)) ||
            asprintf(&s->unique_name, "%s/%s-%s", volume_kind_empty_dir.plugin_name, pod->meta.uid, v->name) < 0)
                return -ENOMEM;
        dv->spec = TAKE_PTR(s);
        return 0;
}

static void *empty_dir_source_copy(const void *source) {
        return memdup(source, sizeof(EmptyDirSource));
}

/* ---- the work, off the loop ------------------------------------------------------ */

typedef struct EmptyDirWork {
        PodkindWork w;
        bool setup;
        EmptyDirSource src;
        char *selinux_context;
} EmptyDirWork;

static void work_free(void *p) {
        EmptyDirWork *w = p;

        if (!w)
                return;
        podkind_work_done(&w->w);
        free(w->selinux_context);
        free(w);
}

static int set_up(EmptyDirWork *w, char **ret_error) {
        LogFields f = podkind_work_fields(&w->w);
        _cleanup_close_ int parent = -1, fd = -1;
        const char *name;
        struct stat st;
        int r;

        r = podkind_open_parent(&w->w, &parent, &name);
        if (r >= 0) {
                fd = openat(parent, name, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                r = fd < 0 ? -errno : 0;
        }
        /* kubelet's setupDir: 0777 whatever the umask made of it. */
        if (r >= 0 && fstat(fd, &st) < 0)
                r = -errno;
        if (r >= 0 && (st.st_mode & 07777) != EMPTY_DIR_PERM && fchmod(fd, EMPTY_DIR_PERM) < 0)
                r = -errno;
        if (r < 0) {
                log_fields_errno(LOG_ERR, r, &f, "Failed to set up emptyDir %s/%s: %m", w->w.root_path, w->w.target);
                return asprintf(ret_error, "cannot set up emptyDir %s/%s: %s", w->w.root_path, w->w.target,
                                strerror(-r)) < 0 ? -ENOMEM : r;
        }
        if (!w->src.memory) {
                log_fields(LOG_DEBUG, &f, "Set up emptyDir %s/%s (mode 0777)", w->w.root_path, w->w.target);
                return 0;
        }
        _cleanup_free_ char *abs = NULL;
        if (asprintf(&abs, "%s/%s", w->w.root_path, w->w.target) < 0)
                return -ENOMEM;
        r = tmpfs_mount(parent, name, abs, w->src.size, 0, w->selinux_context, &f);
        if (r < 0)
                return asprintf(ret_error, "cannot mount the tmpfs of emptyDir at %s: %s", abs, strerror(-r)) < 0
                               ? -ENOMEM
                               : r;
        return 0;
}

static bool is_mount_root(int fd) {
        struct statx sx;

        return statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) >= 0 &&
               (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* Everything in dfd, by descriptor: never following a symlink (unlinked as
 * a name), never into a mount (refused: -EBUSY, something mounted in the
 * pod's volume is not ours to remove). */
static int remove_children(int dfd, const char *path, unsigned depth, char **ret_error) {
        _cleanup_(closedirp) DIR *d = NULL;
        int r;

        if (depth > REMOVE_DEPTH_MAX)
                return asprintf(ret_error, "%s is nested deeper than %u directories; not removing it", path,
                                REMOVE_DEPTH_MAX) < 0 ? -ENOMEM : -ELOOP;
        r = dir_list_open(dfd, &d);
        if (r < 0)
                return r;
        for (struct dirent *de; (errno = 0, de = readdir(d));) {
                _cleanup_close_ int child = -1;
                _cleanup_free_ char *sub = NULL;

                if (dot_or_dot_dot(de->d_name))
                        continue;
                if (unlinkat(dfd, de->d_name, 0) >= 0 || errno == ENOENT)
                        continue;
                if (errno != EISDIR && errno != EPERM)
                        return asprintf(ret_error, "cannot remove %s/%s: %s", path, de->d_name, strerror(errno)) < 0
                                       ? -ENOMEM
                                       : -errno;
                child = openat(dfd, de->d_name, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (child < 0)
                        return asprintf(ret_error, "cannot open %s/%s: %s", path, de->d_name, strerror(errno)) < 0
                                       ? -ENOMEM
                                       : -errno;
                if (asprintf(&sub, "%s/%s", path, de->d_name) < 0)
                        return -ENOMEM;
                if (is_mount_root(child))
                        return asprintf(ret_error, "%s is a mount point inside the emptyDir; not removing it", sub) < 0
                                       ? -ENOMEM
                                       : -EBUSY;
                r = remove_children(child, sub, depth + 1, ret_error);
                if (r < 0)
                        return r;
                if (unlinkat(dfd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        return asprintf(ret_error, "cannot remove %s: %s", sub, strerror(errno)) < 0 ? -ENOMEM
                                                                                                      : -errno;
        }
        return errno > 0 ? -errno : 0;
}

static int tear_down(EmptyDirWork *w, char **ret_error) {
        LogFields f = podkind_work_fields(&w->w);
        _cleanup_close_ int parent = -1, fd = -1;
        _cleanup_free_ char *abs = NULL;
        const char *name;
        struct statfs sf;
        int r;

        if (asprintf(&abs, "%s/%s", w->w.root_path, w->w.target) < 0)
                return -ENOMEM;
        r = podkind_open_parent(&w->w, &parent, &name);
        if (r == -ENOENT)
                return 0;
        if (r >= 0 && (fd = openat(parent, name, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                r = errno == ENOENT ? 1 : -errno;
        if (r != 0)
                return r > 0 ? 0 : asprintf(ret_error, "cannot open %s: %s", abs, strerror(-r)) < 0 ? -ENOMEM : r;
        /* The guard: only a tmpfs mounted right there is ours to unmount. */
        if (is_mount_root(fd)) {
                if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC)
                        return asprintf(ret_error, "%s is a mount point of something else than an emptyDir's tmpfs; "
                                                   "not tearing it down (unmount it by hand)", abs) < 0
                                       ? -ENOMEM
                                       : -EBUSY;
                close(TAKE_FD(fd));
                if (umount2(abs, UMOUNT_NOFOLLOW) < 0) {
                        r = -errno;
                        log_fields_errno(LOG_ERR, r, &f, "Failed to unmount the emptyDir tmpfs at %s: %m", abs);
                        return asprintf(ret_error, "cannot unmount %s: %s", abs, strerror(-r)) < 0 ? -ENOMEM : r;
                }
                log_fields(LOG_INFO, &f, "Unmounted the emptyDir tmpfs at %s", abs);
                fd = openat(parent, name, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0)
                        return errno == ENOENT ? 0 : -errno;
                if (is_mount_root(fd))
                        return asprintf(ret_error, "%s is still a mount point after unmounting its tmpfs", abs) < 0
                                       ? -ENOMEM
                                       : -EBUSY;
        }
        r = remove_children(fd, abs, 0, ret_error);
        if (r < 0) {
                log_fields_errno(LOG_ERR, r, &f, "Failed to remove the content of emptyDir %s: %s", abs,
                                 *ret_error ?: "see above");
                return r;
        }
        log_fields(LOG_DEBUG, &f, "Removed the content of emptyDir %s", abs);
        return 0; /* the frame removes the directory itself */
}

static int work(void *p, char **ret_error) {
        EmptyDirWork *w = p;

        return w->setup ? set_up(w, ret_error) : tear_down(w, ret_error);
}

static int fill(void *p, const Operation *op) {
        EmptyDirWork *w = p;

        w->setup = op->kind == OP_PUBLISH;
        if (w->setup && op->spec && op->spec->source)
                w->src = *(EmptyDirSource *) op->spec->source;
        return strdup_or_null(op->selinux_context, &w->selinux_context);
}

static void empty_dir_run(Operation *op) {
        if (op->kind != OP_PUBLISH && op->kind != OP_UNPUBLISH) {
                operation_fail(op, -EOPNOTSUPP, false, "an emptyDir has no stage");
                return;
        }
        podkind_start(op, sizeof(EmptyDirWork), fill, work, work_free, true);
}

static void empty_dir_outcome(Operation *op, bool success) {
        const EmptyDirSource *src = op->spec ? op->spec->source : NULL;

        if (success && op->kind == OP_PUBLISH && src && !src->memory)
                podkind_publish_made_no_mount(op);
}

static bool empty_dir_selinux_mount(VolumeManager *m, const VolumeSpec *s) {
        const EmptyDirSource *src = s->source;
        /* kubelet: a tmpfs takes context=, a directory of the node's disk not. */
        return src && src->memory;
}

static void empty_dir_reconstruct_publish(VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                                          const char *spec_name) {
        podkind_reconstruct_publish(m, &volume_kind_empty_dir, VOLUME_EPHEMERAL, true, pod_uid, spec_name);
}

const VolumeKind volume_kind_empty_dir = {
        .name = "empty-dir",
        .plugin_name = "kubernetes.io/empty-dir",
        .pod_dir = "kubernetes.io~empty-dir",
        .call_names = { [OP_PUBLISH] = "SetUp", [OP_UNPUBLISH] = "TearDown" },
        .setup = emptydir_usage_setup,
        .free = emptydir_usage_free,
        .claims = empty_dir_claims,
        .desire = empty_dir_desire,
        .source_copy = empty_dir_source_copy,
        .source_free = free,
        .selinux_mount = empty_dir_selinux_mount,
        .paths = podkind_paths,
        .run = empty_dir_run,
        .outcome = empty_dir_outcome,
        .reconstruct_publish = empty_dir_reconstruct_publish,
        .describe = emptydir_usage_describe,
};
