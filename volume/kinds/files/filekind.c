/* SPDX-License-Identifier: Apache-2.0 */
/* The plumbing of the kinds that write their files themselves (configMap,
 * secret, downwardAPI, projected): see filekind.h. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "k8s/quantity.h"
#include "systemd/validate.h"
#include "volume/host/tmpfs.h"
#include "volume/internal.h"
#include "volume/kinds/files/filekind.h"
#include "volume/passes/operation.h"

/* ---- the desired content ---------------------------------------------------- */

FileSource *file_source_new(AtomicPayload *payload, bool secret) {
        FileSource *s = calloc(1, sizeof *s);

        if (!s) {
                key_payload_wipe(payload);
                return NULL;
        }
        s->payload = *payload;
        *payload = (AtomicPayload){};
        s->secret = secret;
        if (key_payload_normalize(&s->payload) < 0 || key_payload_digest(&s->payload, s->digest) < 0) {
                file_source_free(s);
                return NULL;
        }
        return s;
}

void *file_source_copy(const void *source) {
        const FileSource *from = source;
        AtomicPayload p = {};
        FileSource *s;

        for (size_t i = 0; i < from->payload.n; i++) {
                const AtomicPayloadFile *f = &from->payload.files[i];
                if (atomic_payload_add(&p, f->path, f->data, f->size, f->mode, f->uid) < 0) {
                        key_payload_wipe(&p);
                        return NULL;
                }
        }
        s = calloc(1, sizeof *s);
        if (!s) {
                key_payload_wipe(&p);
                return NULL;
        }
        *s = (FileSource){ .payload = p, .secret = from->secret, .tmpfs_size = from->tmpfs_size };
        memcpy(s->digest, from->digest, sizeof s->digest);
        return s;
}

void file_source_free(void *source) {
        FileSource *s = source;

        if (!s)
                return;
        /* Every payload is wiped, not only a secret's: a configMap's bytes
         * cost nothing to clear, and a projected volume mixes both. */
        key_payload_wipe(&s->payload);
        free(s);
}

int file_kind_spec(const FileKindType *t, const K8sPod *pod, const char *name, FileSource *src, DesiredVolume *dv) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = calloc(1, sizeof *s);

        if (!s) {
                file_source_free(src);
                return -ENOMEM;
        }
        s->kind = t->kind;
        s->source = src;
        s->lifecycle = VOLUME_EPHEMERAL;
        s->read_only = true;
        s->follows_objects = true; /* downwardAPI's fields are the pod's own: its kind may clear it */
        if (!(s->spec_name = strdup(name)) ||
            asprintf(&s->unique_name, "%s/%s-%s", t->kind->plugin_name, pod->meta.uid, name) < 0) {
                s->unique_name = NULL;
                return -ENOMEM;
        }
        dv->spec = TAKE_PTR(s);
        return 0;
}

int file_kind_desire_keys(const FileKindType *t, const char *kind_name, const K8sPod *pod, const K8sPodVolume *v,
                          const K8sKeyProjection *proj, const ClusterView *view, bool block, int lookup,
                          bool exists, const KeySource *src, DesiredVolume *dv) {
        _cleanup_free_ char *error = NULL;
        const char *problem = NULL, *refusal;
        AtomicPayload payload = {};
        FileSource *fs;
        int r;

        if (k8s_pod_volume_validate(v, &problem) < 0)
                return desired_set_text(&dv->failed, "volume \"%s\": %s", v->name, strempty(problem));
        if (block)
                return desired_set_text(&dv->failed, "%s volume \"%s\" cannot be used as a block device",
                                        kind_name, v->name);
        if (lookup == -EAGAIN) {
                dv->looking_up = true;
                return desired_set_text(&dv->waiting, "looking up %s \"%s\"", kind_name, strempty(proj->name));
        }
        if (lookup == -EACCES) {
                refusal = view->lookup_error ? view->lookup_error(view->userdata,
                                                                  streq(kind_name, "secret") ? &k8s_kind_secret
                                                                                             : &k8s_kind_configmap,
                                                                  pod->meta.namespace, proj->name)
                                             : NULL;
                return desired_set_text(&dv->waiting, "%s", refusal ? refusal : "the API server refuses the lookup");
        }
        if (!exists && !proj->optional)
                /* kubelet's words: 'configmap "x" not found'. */
                return desired_set_text(&dv->waiting, "%s \"%s\" not found", kind_name, strempty(proj->name));
        r = key_projection_append(proj, src, (mode_t) (proj->default_mode & 07777), &payload, &error);
        if (r < 0) {
                key_payload_wipe(&payload);
                if (r == -ENOMEM)
                        return r;
                /* A missing key may be added to the object; a bad path is the pod's. */
                return desired_set_text(r == -ENOENT ? &dv->waiting : &dv->failed, "%s",
                                        error ? error : "cannot make the volume's files");
        }
        fs = file_source_new(&payload, t->secret);
        if (!fs)
                return -ENOMEM;
        if (t->tmpfs)
                fs->tmpfs_size = file_kind_tmpfs_size(pod, view);
        return file_kind_spec(t, pod, v->name, fs, dv);
}

/* A container's memory limit in bytes; 0: none (or one that does not parse). */
static uint64_t memory_limit(const K8sContainer *c) {
        const char *q = k8s_string_map_get(&c->limits, "memory");
        int64_t v = 0;

        return q && k8s_quantity_parse(q, &v) >= 0 && v > 0 ? (uint64_t) v : 0;
}

uint64_t file_kind_tmpfs_size(const K8sPod *pod, const ClusterView *view) {
        const K8sNode *node = view->get_node ? view->get_node(view->userdata) : NULL;
        const char *q = node ? k8s_string_map_get(&node->allocatable, "memory") : NULL;
        _cleanup_free_ uint64_t *limits = calloc(pod->n_containers + 1, sizeof *limits),
                                *init = calloc(pod->n_init_containers + 1, sizeof *init);
        int64_t allocatable = 0;

        if (!limits || !init || !q || k8s_quantity_parse(q, &allocatable) < 0 || allocatable <= 0)
                return 0;
        for (size_t i = 0; i < pod->n_containers; i++)
                limits[i] = memory_limit(&pod->containers[i]);
        for (size_t i = 0; i < pod->n_init_containers; i++)
                init[i] = memory_limit(&pod->init_containers[i]);
        /* The pod's overhead (a RuntimeClass's) is not decoded: 0. */
        return emptydir_memory_size((uint64_t) allocatable,
                                    emptydir_pod_memory_limit(limits, pod->n_containers, init,
                                                              pod->n_init_containers, 0),
                                    0);
}

/* ---- paths --------------------------------------------------------------------- */

int file_kind_paths(const ActualVolume *av, bool staging, const char *pod_uid, const char *spec_name, char **ret_dir,
                    char **ret_target) {
        _cleanup_free_ char *dir = NULL, *target = NULL;

        if (staging)
                return -EOPNOTSUPP;
        if (!pod_uid || validate_uid(pod_uid) < 0 || !spec_name || validate_path_component(spec_name) < 0)
                return -EINVAL;
        if (asprintf(&dir, "pods/%s/volumes/%s/%s", pod_uid, av->kind->pod_dir, spec_name) < 0)
                return -ENOMEM;
        if (ret_target && !(target = strdup(dir)))
                return -ENOMEM;
        if (ret_dir)
                *ret_dir = TAKE_PTR(dir);
        if (ret_target)
                *ret_target = TAKE_PTR(target);
        return 0;
}

/* ---- the steps -------------------------------------------------------------------- */

typedef struct NoteBase {
        RootDir *root;
        const char *base; /* the volume dir, relative to root-dir */
} NoteBase;

/* The writer's changes into root-dir's notes: the pass's batched sync
 * makes them durable with every other write of the pass. */
static void note_changed(const char *relpath, AtomicChange kind, void *userdata) {
        NoteBase *n = userdata;
        _cleanup_free_ char *path = NULL;

        if (isempty(relpath))
                root_dir_note_changed(n->root, n->base, ROOT_CHANGED_DIR);
        else if (asprintf(&path, "%s/%s", n->base, relpath) >= 0)
                root_dir_note_changed(n->root, path,
                                      kind & ATOMIC_CHANGED_FILE ? ROOT_CHANGED_FILE : ROOT_CHANGED_DIR);
        else /* out of memory: the volume dir at least */
                root_dir_note_changed(n->root, n->base, ROOT_CHANGED_DIR);
}

/* kubelet's emptyDir setupDir: the volume dir is 0777 whatever the umask,
 * its other bits (a tmpfs root's sticky bit, fsGroup's setgid) kept. */
static int dir_mode(int fd) {
        struct stat st;

        if (fstat(fd, &st) < 0)
                return -errno;
        if ((st.st_mode & 0777) == 0777)
                return 0;
        return fchmod(fd, (st.st_mode & 07777) | 0777) < 0 ? -errno : 1;
}

static int mount_tmpfs(Operation *op, const char *abs, const LogFields *f) {
        _cleanup_free_ char *parent = strdup(op->target);
        _cleanup_close_ int parent_fd = -1;
        char *slash;
        int r;

        if (!parent)
                return -ENOMEM;
        slash = strrchr(parent, '/');
        if (!slash)
                return -EINVAL;
        *slash = '\0';
        r = root_dir_open_dir(op->m->root, parent, &parent_fd);
        if (r < 0)
                return r;
        return tmpfs_mount(parent_fd, slash + 1, abs, ((const FileSource *) op->spec->source)->tmpfs_size, 0,
                           op->selinux_context, f);
}

static void publish(const FileKindType *t, Operation *op) {
        _cleanup_free_ char *abs = operation_abs_path(op, op->target), *reason = NULL;
        _cleanup_close_ int fd = -1;
        const FileSource *src = op->spec ? op->spec->source : NULL;
        LogFields f = operation_fields(op);
        NoteBase note = { .root = op->m->root, .base = op->target };
        bool changed = false;
        int r;

        if (!abs || !src) {
                operation_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        if (t->tmpfs) {
                r = mount_tmpfs(op, abs, &f);
                if (r < 0) {
                        operation_fail(op, r, false, "mount of a tmpfs on %s failed: %s", abs, strerror(-r));
                        return;
                }
                if (r > 0)
                        log_fields(LOG_INFO, &f, "Mounted a tmpfs on %s for %s", abs, op->av->unique_name);
        }
        /* From here on something may be there: a failure is uncertain when a
         * tmpfs may be mounted, and the frame cleans the dir up otherwise. */
        op->called = true;
        r = root_dir_open_dir(op->m->root, op->target, &fd);
        if (r >= 0)
                r = dir_mode(fd);
        if (r < 0) {
                operation_fail(op, r, t->tmpfs, "cannot open %s: %s", abs, strerror(-r));
                return;
        }
        AtomicWriteOptions opts = {
                .has_fs_group = op->pod.has_fs_group,
                .fs_group = (gid_t) op->pod.fs_group,
                .note_changed = note_changed,
                .userdata = &note,
                .log = &f,
                .path = abs,
        };
        r = atomic_write(fd, &src->payload, &opts, &changed, &reason);
        if (r < 0) {
                operation_fail(op, r, t->tmpfs, "%s", reason ? reason : strerror(-r));
                return;
        }
        op->call_ok = true;
        /* Names and counts only: a secret's values never reach a log. */
        if (changed)
                log_fields(LOG_INFO, &f, "Wrote %zu file(s) of %s to %s%s", src->payload.n, op->av->unique_name, abs,
                           op->pod.has_fs_group ? " with the pod's fsGroup" : "");
        else
                log_fields(LOG_DEBUG, &f, "%s already holds the content of %s: nothing written", abs,
                           op->av->unique_name);
        operation_finish(op, true);
}

/* The tmpfs goes only when no other mount of it is left under root-dir (a
 * container's bind of the volume: the runtime has not let it go). */
static int unmount_tmpfs(Operation *op, const char *abs, const LogFields *f) {
        const char *others[1];
        int r;

        r = mount_table_refresh(op->m->mounts);
        if (r < 0)
                return r;
        r = mount_table_mounted(op->m->mounts, abs);
        if (r == 0)
                return 0;
        if (mount_table_other_mounts(op->m->mounts, abs, others, ELEMENTSOF(others)) > 0) {
                log_fields(LOG_WARNING, f, "The tmpfs at %s is still mounted at %s; not unmounting it until that "
                           "mount is gone", abs, others[0]);
                return -EBUSY;
        }
        if (umount2(abs, UMOUNT_NOFOLLOW) < 0)
                return log_fields_errno(LOG_ERR, errno, f, "Failed to unmount the tmpfs at %s: %m", abs);
        log_fields(LOG_INFO, f, "Unmounted the tmpfs at %s", abs);
        return 1;
}

static void unpublish(const FileKindType *t, Operation *op) {
        _cleanup_free_ char *abs = operation_abs_path(op, op->target), *reason = NULL;
        _cleanup_close_ int fd = -1;
        LogFields f = operation_fields(op);
        NoteBase note = { .root = op->m->root, .base = op->target };
        int r;

        if (!abs) {
                operation_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        op->called = true;
        /* The tmpfs first, and only once nothing else holds it: its content
         * goes with it (a bind of it elsewhere keeps seeing the files until
         * then); what is left below is the dir on root-dir's disk. */
        if (t->tmpfs) {
                r = unmount_tmpfs(op, abs, &f);
                if (r < 0) {
                        operation_fail(op, r, true, "UnmountVolume.TearDown failed for volume \"%s\" : %s is %s",
                                       op->spec_name, abs,
                                       r == -EBUSY ? "still in use by another mount" : "not unmountable");
                        return;
                }
        }
        r = root_dir_open_dir(op->m->root, op->target, &fd);
        if (r >= 0) {
                AtomicWriteOptions opts = { .note_changed = note_changed, .userdata = &note, .log = &f, .path = abs };
                r = atomic_clear(fd, &opts, &reason);
                if (r < 0) {
                        operation_fail(op, r, true, "UnmountVolume.TearDown failed for volume \"%s\" : %s",
                                       op->spec_name, reason ? reason : strerror(-r));
                        return;
                }
        } else if (r != -ENOENT) {
                operation_fail(op, r, true, "UnmountVolume.TearDown failed for volume \"%s\" : cannot open %s: %s",
                               op->spec_name, abs, strerror(-r));
                return;
        }
        op->call_ok = true;
        log_fields(LOG_DEBUG, &f, "Cleared %s of %s", abs, op->av->unique_name);
        operation_finish(op, true);
}

void file_kind_run(const FileKindType *t, Operation *op) {
        switch (op->kind) {
        case OP_PUBLISH:
                publish(t, op);
                return;
        case OP_UNPUBLISH:
                unpublish(t, op);
                return;
        default:
                /* No stage: the reconciler never plans one (no stages entry). */
                operation_fail(op, -EOPNOTSUPP, false, "%s volumes have no stage", t->kind->name);
                return;
        }
}

void file_kind_outcome(const FileKindType *t, Operation *op, bool success) {
        const FileSource *src = op->spec ? op->spec->source : NULL;
        ActualPublish *pub;

        if (op->kind != OP_PUBLISH)
                return;
        pub = hashmap_get(op->av->publishes, op->pod.uid);
        if (!pub)
                return;
        if (success && src) {
                memcpy(pub->content_digest, src->digest, sizeof pub->content_digest);
                pub->has_content_digest = true;
        }
        /* A dir on root-dir's disk is no mount: nothing to watch for loss. */
        if (!t->tmpfs) {
                actual_publish_set_mount_pending(op->av, pub, false);
                pub->not_a_mount = true;
        }
}

bool file_kind_refresh_due(VolumeManager *m, const ActualVolume *av, ActualPublish *pub, uint64_t now,
                           uint64_t *next_wake) {
        PodEntry *e = hashmap_get(m->pod_entries, pub->pod_uid);
        const DesiredVolume *dv;
        const FileSource *src;

        if (!e || !e->desired)
                return false;
        dv = desired_pod_find_volume(e->desired, pub->spec_name);
        if (!dv || !dv->spec || dv->spec->kind != av->kind || !dv->spec->source)
                return false;
        src = dv->spec->source;
        return !pub->has_content_digest || memcmp(pub->content_digest, src->digest, sizeof src->digest) != 0;
}

/* ---- restart ------------------------------------------------------------------------ */

void file_kind_reconstruct(const FileKindType *t, VolumeManager *m, ReconstructScan *c, const char *pod_uid,
                           const char *spec_name) {
        _cleanup_free_ char *target = NULL, *abs = NULL, *unique = NULL;
        LogFields f = { .pod_uid = pod_uid, .volume = spec_name };
        ActualVolume probe = { .kind = t->kind }, *av;
        ActualPublish *pub;
        bool stale;

        if (file_kind_paths(&probe, false, pod_uid, spec_name, NULL, &target) < 0 ||
            asprintf(&abs, "%s/%s", m->root->path, target) < 0 ||
            asprintf(&unique, "%s/%s-%s", t->kind->plugin_name, pod_uid, spec_name) < 0)
                return;
        /* Its tmpfs gone (a reboot, or a crash before the mount): set up
         * again if wanted, its dir removed if not. */
        stale = t->tmpfs && mount_table_mounted(m->mounts, abs) == 0;
        av = hashmap_get(m->volumes, unique);
        if (!av) {
                av = actual_volume_new_empty(t->kind, VOLUME_EPHEMERAL, unique, NULL, NULL, spec_name);
                if (!av || manager_add_volume(m, av) < 0) {
                        actual_volume_free(av);
                        return;
                }
                av->reconstructed = true;
        }
        PodInfo info = { .uid = (char *) pod_uid, .key = (char *) pod_uid };
        if (actual_publish_set(av, &info, spec_name, target, stale ? PUBLISH_UNCERTAIN : PUBLISH_DONE) < 0)
                return;
        pub = hashmap_get(av->publishes, pod_uid);
        pub->stale = stale;
        pub->not_a_mount = !t->tmpfs;
        if (stale)
                c->stale++;
        else
                c->published++;
        log_fields(LOG_DEBUG, &f, "Found %s volume at %s: %s", t->kind->name, abs,
                   stale ? "its tmpfs is gone, to be set up again" : "set up; its content is compared on the next pass");
}
