/* SPDX-License-Identifier: Apache-2.0 */
/* subPath and subPathExpr volumeMounts for every kind (subpaths.h): what
 * the pod asks is gathered on the loop, the binds are made and removed on a
 * thread (host/offloop.h): resolving a path inside a volume may block on
 * the volume's file system. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "k8s/informer.h"
#include "systemd/log.h"
#include "systemd/validate.h"
#include "volume/host/beneath.h"
#include "volume/host/offloop.h"
#include "volume/host/subpath.h"
#include "volume/internal.h"
#include "volume/passes/operation.h"
#include "volume/passes/subpaths.h"
#include "volume/state/desired.h"

typedef struct SubpathMount {
        char *volume;    /* the pod's name of the volume */
        char *container;
        unsigned index;
        char *subpath;   /* expanded; NULL: the expansion failed (error) */
        char *error;
        bool read_only;
} SubpathMount;

typedef struct SubpathWork {
        int root_fd;
        char *root_path;
        char *pod_uid, *pod, *volume_path; /* volume_path: absolute (setup) */
        bool setup;
        SubpathMount *mounts;
        size_t n_mounts;
        char **volumes; /* teardown: the pod's names of the volume; NULL: every volume of the pod */
} SubpathWork;

static void work_free(void *p) {
        SubpathWork *w = p;

        if (!w)
                return;
        if (w->root_fd >= 0)
                close(w->root_fd);
        for (size_t i = 0; i < w->n_mounts; i++) {
                free(w->mounts[i].volume);
                free(w->mounts[i].container);
                free(w->mounts[i].subpath);
                free(w->mounts[i].error);
        }
        free(w->mounts);
        for (char **v = w->volumes; v && *v; v++)
                free(*v);
        free(w->volumes);
        free(w->root_path);
        free(w->pod_uid);
        free(w->pod);
        free(w->volume_path);
        free(w);
}

/* The pod's names of av: the desired volumes that resolve to it; the spec
 * name (an inline volume's own) when the pod is not desired any more. */
static char **pod_volume_names(VolumeManager *m, const Operation *op) {
        PodEntry *e = op->pod.uid ? hashmap_get(m->pod_entries, op->pod.uid) : NULL;
        size_t n = 0;
        char **names;

        if (!e || !e->desired)
                return NULL;
        names = calloc(e->desired->n_volumes + 2, sizeof(char *));
        if (!names)
                return NULL;
        for (size_t i = 0; i < e->desired->n_volumes; i++) {
                const DesiredVolume *dv = &e->desired->volumes[i];
                if (dv->spec && streq(dv->spec->unique_name, op->av->unique_name) && (names[n] = strdup(dv->name)))
                        n++;
        }
        if (n == 0 && !(names[n++] = strdup(op->spec_name))) {
                free(names);
                return NULL;
        }
        return names;
}

static bool in_names(char **names, const char *s) {
        for (char **v = names; v && *v; v++)
                if (streq(*v, s))
                        return true;
        return false;
}

/* The value of a fieldRef env entry kvolumed can know without the
 * downward renderer; NULL: another field (the variable then counts as
 * missing, as an unresolvable one does in kubelet's expansion). */
static const char *field_value(const K8sPod *pod, const char *field) {
        if (streq_ptr(field, "metadata.name"))
                return pod->meta.name;
        if (streq_ptr(field, "metadata.namespace"))
                return pod->meta.namespace;
        if (streq_ptr(field, "metadata.uid"))
                return pod->meta.uid;
        if (streq_ptr(field, "spec.nodeName"))
                return pod->node_name;
        if (streq_ptr(field, "spec.serviceAccountName"))
                return pod->service_account_name;
        if (streq_ptr(field, "status.podIP"))
                return pod->pod_ip;
        if (streq_ptr(field, "status.hostIP"))
                return pod->host_ip;
        return NULL;
}

static int expand(const K8sPod *pod, const K8sContainer *c, const K8sVolumeMount *vm, SubpathMount *out) {
        _cleanup_free_ char **env = NULL;
        size_t n = 0;
        int r;

        if (!isempty(vm->sub_path))
                return (out->subpath = strdup(vm->sub_path)) ? 0 : -ENOMEM;
        env = calloc(c->n_env + 1, sizeof(char *));
        if (!env)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_env; i++) {
                const K8sEnvVar *v = &c->env[i];
                const char *value = v->field_ref ? field_value(pod, v->field_ref->field_path) : v->value;
                if (value && asprintf(&env[n], "%s=%s", v->name, value) >= 0)
                        n++;
        }
        r = subpath_expand(vm->sub_path_expr, (const char *const *) env, n, &out->subpath, &out->error);
        for (size_t i = 0; i < n; i++)
                free(env[i]);
        return r == -ENOMEM ? r : 0;
}

static int gather(const K8sPod *pod, char **names, SubpathWork *w) {
        const struct {
                const K8sContainer *c;
                size_t n;
        } lists[] = {
                { pod->init_containers, pod->n_init_containers },
                { pod->containers, pod->n_containers },
                { pod->ephemeral_containers, pod->n_ephemeral_containers },
        };
        int r;

        for (size_t l = 0; l < ELEMENTSOF(lists); l++)
                for (size_t i = 0; i < lists[l].n; i++) {
                        const K8sContainer *c = &lists[l].c[i];
                        for (size_t j = 0; j < c->n_mounts; j++) {
                                const K8sVolumeMount *vm = &c->mounts[j];
                                SubpathMount *s, *a;
                                if (!in_names(names, vm->name) ||
                                    (isempty(vm->sub_path) && isempty(vm->sub_path_expr)))
                                        continue;
                                a = reallocarray(w->mounts, w->n_mounts + 1, sizeof *a);
                                if (!a)
                                        return -ENOMEM;
                                w->mounts = a;
                                s = &w->mounts[w->n_mounts++];
                                *s = (SubpathMount){ .index = (unsigned) j, .read_only = vm->read_only };
                                if (!(s->volume = strdup(vm->name)) || !(s->container = strdup(c->name)))
                                        return -ENOMEM;
                                r = expand(pod, c, vm, s);
                                if (r < 0)
                                        return r;
                        }
                }
        return 0;
}

static int fail(char **ret_error, int r, const SubpathMount *s) {
        /* kubelet's message for the pod: the reason (the host's layout) is the journal's. */
        if (asprintf(ret_error, "failed to prepare subPath for volumeMount \"%s\" of container \"%s\"", s->volume,
                     s->container) < 0)
                *ret_error = NULL;
        return r;
}

static int prepare(SubpathWork *w, char **ret_error) {
        LogFields f = { .pod_uid = w->pod_uid, .pod = w->pod };
        _cleanup_close_ int pod_fd = -1, volume_fd = -1;
        _cleanup_free_ char *pod_rel = NULL, *pod_path = NULL;
        int r;

        if (asprintf(&pod_rel, "pods/%s", w->pod_uid) < 0 || asprintf(&pod_path, "%s/%s", w->root_path, pod_rel) < 0)
                return -ENOMEM;
        pod_fd = open_beneath(w->root_fd, pod_rel, O_PATH | O_DIRECTORY, 0, false);
        if (pod_fd < 0)
                return log_fields_errno(LOG_ERR, pod_fd, &f, "Cannot open %s: %m", pod_path);
        /* Opened now, after the publish: a descriptor from before the mount
         * would show the directory under it. */
        volume_fd = open(w->volume_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (volume_fd < 0)
                return log_fields_errno(LOG_ERR, errno, &f, "Cannot open volume %s for its subPaths: %m",
                                        w->volume_path);
        for (size_t i = 0; i < w->n_mounts; i++) {
                SubpathMount *s = &w->mounts[i];
                _cleanup_free_ char *bind = NULL, *error = NULL;
                f.volume = s->volume;
                if (!s->subpath) {
                        log_fields(LOG_ERR, &f, "subPathExpr of volumeMount %u of container %s: %s", s->index,
                                   s->container, strempty(s->error));
                        return fail(ret_error, -EINVAL, s);
                }
                SubpathRequest req = {
                        .volume_fd = volume_fd,
                        .volume_path = w->volume_path,
                        .pod_dir_fd = pod_fd,
                        .pod_dir_path = pod_path,
                        .volume_name = s->volume,
                        .container_name = s->container,
                        .index = s->index,
                        .subpath = s->subpath,
                        .read_only = s->read_only,
                        .log = &f,
                };
                r = subpath_prepare(&req, &bind, &error);
                if (r < 0) {
                        log_fields_errno(LOG_ERR, r, &f,
                                         "Failed to prepare subPath '%s' for volumeMount %u of container %s: %s",
                                         s->subpath, s->index, s->container, error ?: "see above");
                        return fail(ret_error, r, s);
                }
                log_fields(LOG_DEBUG, &f, "subPath '%s' of volumeMount %u of container %s bound at %s", s->subpath,
                           s->index, s->container, bind);
        }
        return 0;
}

static int clean(SubpathWork *w, char **ret_error) {
        LogFields f = { .pod_uid = w->pod_uid, .pod = w->pod };
        _cleanup_close_ int pod_fd = -1;
        _cleanup_free_ char *pod_rel = NULL, *pod_path = NULL;
        int r = 0;

        if (asprintf(&pod_rel, "pods/%s", w->pod_uid) < 0 || asprintf(&pod_path, "%s/%s", w->root_path, pod_rel) < 0)
                return -ENOMEM;
        pod_fd = open_beneath(w->root_fd, pod_rel, O_PATH | O_DIRECTORY, 0, false);
        if (pod_fd == -ENOENT)
                return 0;
        if (pod_fd < 0)
                return log_fields_errno(LOG_ERR, pod_fd, &f, "Cannot open %s: %m", pod_path);
        if (!w->volumes)
                r = subpath_cleanup_pod(pod_fd, pod_path, &f);
        for (char **v = w->volumes; v && *v && r >= 0; v++) {
                f.volume = *v;
                r = subpath_cleanup(pod_fd, pod_path, *v, &f);
        }
        if (r < 0 && asprintf(ret_error, "cannot remove the subPath binds under %s/volume-subpaths: %s", pod_path,
                              strerror(-r)) < 0)
                *ret_error = NULL;
        return r;
}

/* The pod's volumes are published and unpublished side by side, and a gone
 * pod's cleanup takes every volume of it: one thread at a time under
 * volume-subpaths, so that two never unmount or remove the same entry. */
static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;

static int work(void *p, char **ret_error) {
        SubpathWork *w = p;
        int r;

        pthread_mutex_lock(&work_lock);
        r = w->setup ? prepare(w, ret_error) : clean(w, ret_error);
        pthread_mutex_unlock(&work_lock);
        return r;
}

static void ended(OffloopJob *j, int result, char *error, void *userdata) {
        Operation *op = userdata;
        _cleanup_free_ char *message = error;

        op->job = offloop_free(op->job);
        if (result < 0) {
                /* A publish stays uncertain: its volume is set up, the pod
                 * cannot use it yet; tried again after the backoff.  A
                 * subPath that leaves its volume, loops or is no valid path
                 * is the pod's to fix: the runner hears it at once. */
                op->final = result == -EXDEV || result == -ELOOP || result == -EINVAL;
                operation_fail(op, result, op->kind == OP_PUBLISH, "%s", message ?: strerror(-result));
                return;
        }
        if (op->kind == OP_PUBLISH)
                operation_finish(op, true);
        else
                operation_run(op);
}

static SubpathWork *work_new(Operation *op, bool setup) {
        SubpathWork *w = calloc(1, sizeof *w);

        if (!w)
                return NULL;
        w->root_fd = fcntl(op->m->root->fd, F_DUPFD_CLOEXEC, 3);
        w->setup = setup;
        if (w->root_fd < 0 || !(w->root_path = strdup(op->m->root->path)) || !(w->pod_uid = strdup(op->pod.uid)) ||
            strdup_or_null(op->pod.key, &w->pod) < 0) {
                work_free(w);
                return NULL;
        }
        return w;
}

static bool start(Operation *op, SubpathWork *w) {
        int r = offloop_start(op->m->event, "subpaths", work, w, work_free, ended, op, &op->job);

        if (r < 0) {
                operation_fail(op, r, op->kind == OP_PUBLISH, "cannot start the subPath work: %s", strerror(-r));
                return true;
        }
        return true;
}

bool subpaths_publish_end(Operation *op) {
        VolumeManager *m = op->m;
        _cleanup_free_ char **names = NULL;
        const K8sPod *pod;
        SubpathWork *w;
        int r;

        op->subpaths_done = true;
        if (op->av->block || !op->pod.uid || !op->pod.name || !op->spec)
                return false;
        pod = k8s_informer_get(m->pods, op->pod.namespace, op->pod.name);
        if (!pod || !streq_ptr(pod->meta.uid, op->pod.uid))
                return false;
        names = pod_volume_names(m, op);
        if (!names)
                return false;
        w = work_new(op, true);
        r = w ? gather(pod, names, w) : -ENOMEM;
        for (char **v = names; *v; v++)
                free(*v);
        if (r >= 0 && w->n_mounts == 0) {
                work_free(w);
                return false;
        }
        if (r >= 0)
                r = op->av->kind->runtime_host_path ? op->av->kind->runtime_host_path(op->spec, &w->volume_path)
                                            : (asprintf(&w->volume_path, "%s/%s", m->root->path, op->target) < 0
                                                       ? -ENOMEM
                                                       : 0);
        if (r < 0) {
                work_free(w);
                operation_fail(op, r, true, "cannot prepare the subPaths of volume \"%s\": %s", op->spec_name,
                               strerror(-r));
                return true;
        }
        return start(op, w);
}

bool subpaths_unpublish_start(Operation *op) {
        _cleanup_free_ char *dir = NULL;
        SubpathWork *w;

        op->subpaths_done = true;
        if (op->av->block || !op->pod.uid || validate_uid(op->pod.uid) < 0)
                return false;
        /* Nothing to clean (the common case): no thread. */
        if (asprintf(&dir, "pods/%s/volume-subpaths", op->pod.uid) < 0 || root_dir_exists(op->m->root, dir) <= 0)
                return false;
        w = work_new(op, false);
        if (!w) {
                operation_fail(op, -ENOMEM, false, "out of memory");
                return true;
        }
        /* The pod still desired: only its names of this volume.  Gone: every
         * volume of it, whose containers the runtime said are gone. */
        w->volumes = pod_volume_names(op->m, op);
        return start(op, w);
}

int subpaths_host_path(VolumeManager *m, const char *pod_uid, const char *volume, const char *container,
                       unsigned index, char **ret) {
        PodEntry *e = hashmap_get(m->pod_entries, pod_uid);
        const DesiredVolume *dv;
        ActualVolume *av;
        ActualPublish *pub;

        if (validate_uid(pod_uid) < 0 || validate_path_component(volume) < 0 ||
            validate_path_component(container) < 0)
                return -EINVAL;
        if (!e || !e->desired || !(dv = desired_pod_find_volume(e->desired, volume)))
                return -ENOENT;
        if (asprintf(ret, "%s/pods/%s/volume-subpaths/%s/%s/%u", m->root->path, pod_uid, volume, container, index) < 0)
                return -ENOMEM;
        av = dv->spec ? hashmap_get(m->volumes, dv->spec->unique_name) : NULL;
        pub = av ? hashmap_get(av->publishes, pod_uid) : NULL;
        return pub && pub->state == PUBLISH_DONE;
}
