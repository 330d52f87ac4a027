/* SPDX-License-Identifier: Apache-2.0 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <inttypes.h>

#include "systemd/log.h"
#include "volume/host/fsgroup.h"
#include "systemd/validate.h"
#include "volume/host/beneath.h"
#include "volume/host/mounttable.h"
#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/kinds/podkind.h"
#include "volume/passes/operation.h"

int podkind_paths(const ActualVolume *av, bool staging, const char *pod_uid, const char *spec_name,
                  char **ret_dir, char **ret_target) {
        _cleanup_free_ char *p = NULL;

        if (staging)
                return -EOPNOTSUPP;
        if (validate_uid(pod_uid) < 0 || validate_path_component(spec_name) < 0)
                return -EINVAL;
        if (asprintf(&p, "pods/%s/volumes/%s/%s", pod_uid, av->kind->pod_dir, spec_name) < 0)
                return -ENOMEM;
        if (ret_target && !(*ret_target = strdup(p)))
                return -ENOMEM;
        if (ret_dir)
                *ret_dir = TAKE_PTR(p);
        return 0;
}

static void ownership_done(FsGroupWalk *w, int result, void *userdata) {
        Operation *op = userdata;

        op->fsgroup = fsgroup_walk_free(op->fsgroup);
        if (result < 0) {
                /* Set up, but not as the pod asked: uncertain, as kubelet has it. */
                operation_fail(op, result, true, "%s: failed to apply fsGroup %" PRIi64 " to the volume%s",
                               op->av->kind->plugin_name, op->pod.fs_group,
                               result == -ETIMEDOUT ? ": its file system does not answer" : "");
                return;
        }
        operation_finish(op, true);
}

/* kubelet's SetVolumeOwnership after the kind's SetUp (emptyDir, a local PV
 * not read-only): the pod's fsGroup on every file, setgid directories, by a
 * child process (host/fsgroup.h). */
static void ownership(Operation *op) {
        _cleanup_free_ char *target = operation_abs_path(op, op->target);
        LogFields f = operation_fields(op);
        int r;

        if (!target) {
                operation_fail(op, -ENOMEM, true, "out of memory");
                return;
        }
        r = fsgroup_walk_start(op->m->event, target, (gid_t) op->pod.fs_group,
                               streq_ptr(op->pod.fs_group_change_policy, "OnRootMismatch"), ownership_done, op,
                               &op->fsgroup);
        if (r < 0) {
                operation_fail(op, r, true, "failed to start applying fsGroup: %s", strerror(-r));
                return;
        }
        log_fields(LOG_DEBUG, &f, "Applying fsGroup %" PRIi64 " to %s in child process %d", op->pod.fs_group, target,
                   (int) fsgroup_walk_pid(op->fsgroup));
}

static void work_ended(OffloopJob *j, int result, char *error, void *userdata) {
        Operation *op = userdata;
        _cleanup_free_ char *message = error;

        op->job = offloop_free(op->job);
        if (result < 0) {
                operation_fail(op, result, false, "%s", message ?: strerror(-result));
                return;
        }
        if (op->kind == OP_PUBLISH && op->step == 1 && op->pod.has_fs_group && op->spec && !op->spec->read_only) {
                ownership(op);
                return;
        }
        operation_finish(op, true);
}

void podkind_run_off_loop(Operation *op, offloop_work_t work, void *data, void (*data_free)(void *),
                          bool fs_group) {
        int r;

        if (op->job || op->fsgroup) {
                data_free(data);
                return;
        }
        /* step 1: the pod's fsGroup is applied after the work. */
        op->step = fs_group ? 1 : 0;
        r = offloop_start(op->m->event, op->av->kind->name, work, data, data_free, work_ended, op, &op->job);
        if (r < 0)
                operation_fail(op, r, false, "cannot start the %s of volume \"%s\": %s",
                               op_kind_to_string(op->kind), op->spec_name, strerror(-r));
}

void podkind_publish_made_no_mount(Operation *op) {
        ActualPublish *pub = op->pod.uid ? hashmap_get(op->av->publishes, op->pod.uid) : NULL;
        _cleanup_free_ char *dir = NULL, *record = NULL;
        LogFields f = operation_fields(op);
        int r;

        if (!pub || pub->state != PUBLISH_DONE)
                return;
        pub->not_a_mount = true;
        actual_publish_set_mount_pending(op->av, pub, false);
        r = op->av->kind->paths(op->av, false, op->pod.uid, op->spec_name, &dir, NULL);
        if (r >= 0)
                r = path_intent_record(dir, NULL, &record);
        if (r >= 0)
                r = intent_write(op->m, record,
                                 &(Intent){ .operation = OP_PUBLISH, .done = true, .pod = op->pod.key }, false);
        if (r < 0)
                log_fields_errno(LOG_WARNING, r, &f, "Failed to record the publish of %s as done: %m",
                                 op->av->unique_name);
}

void podkind_reconstruct_publish(VolumeManager *m, const VolumeKind *kind, VolumeLifecycle lifecycle,
                                 bool per_pod, const char *pod_uid, const char *spec_name) {
        _cleanup_free_ char *unique = NULL, *dir = NULL, *record = NULL, *text = NULL, *abs = NULL;
        _cleanup_(intent_done) Intent i = {};
        LogFields f = { .pod_uid = pod_uid, .volume = spec_name };
        ActualVolume *av;
        PublishState state;
        bool has_intent = false, mounted, made_no_mount;
        int r;

        if ((per_pod ? asprintf(&unique, "%s/%s-%s", kind->plugin_name, pod_uid, spec_name)
                     : asprintf(&unique, "%s/%s", kind->plugin_name, spec_name)) < 0)
                return;
        av = &(ActualVolume){ .kind = kind };
        if (kind->paths(av, false, pod_uid, spec_name, &dir, NULL) < 0 || path_intent_record(dir, NULL, &record) < 0 ||
            asprintf(&abs, "%s/%s", m->root->path, dir) < 0)
                return;
        r = root_dir_read_file(m->root, record, 64 * 1024, &text, NULL);
        if (r >= 0)
                has_intent = intent_parse(text, &i) >= 0;
        /* The kernel could not say: taken for mounted, as reconstruct.c does. */
        mounted = mount_table_mounted(m->mounts, abs) != 0;
        made_no_mount = has_intent && streq(i.boot_id, m->boot_id) && i.operation == OP_PUBLISH && i.done &&
                        !i.mount;
        state = mounted || made_no_mount ? PUBLISH_DONE : PUBLISH_UNCERTAIN;

        av = hashmap_get(m->volumes, unique);
        if (!av) {
                av = actual_volume_new_empty(kind, lifecycle, unique, NULL, NULL, spec_name);
                if (!av || manager_add_volume(m, av) < 0) {
                        actual_volume_free(av);
                        return;
                }
                av->reconstructed = true;
        }
        PodInfo info = { .uid = (char *) pod_uid, .key = has_intent && i.pod ? i.pod : (char *) pod_uid };
        if (actual_publish_set(av, &info, spec_name, dir, state) < 0)
                return;
        ActualPublish *pub = hashmap_get(av->publishes, pod_uid);
        if (pub)
                pub->not_a_mount = state == PUBLISH_DONE && !mounted;
        log_fields(LOG_DEBUG, &f, "Found publish of %s at %s: %s", unique, abs,
                   state == PUBLISH_DONE ? (mounted ? "set up (mounted)" : "set up")
                                         : "uncertain (set up again if a pod wants it)");
}

int podkind_work_init(PodkindWork *w, const Operation *op) {
        *w = (PodkindWork){ .root_fd = -1 };
        w->root_fd = fcntl(op->m->root->fd, F_DUPFD_CLOEXEC, 3);
        if (w->root_fd < 0)
                return -errno;
        if (!(w->root_path = strdup(op->m->root->path)) || !(w->target = strdup(op->target)) ||
            strdup_or_null(op->pod.uid, &w->pod_uid) < 0 || strdup_or_null(op->pod.key, &w->pod) < 0 ||
            !(w->volume = strdup(op->spec_name)))
                return -ENOMEM;
        return 0;
}

void podkind_work_done(PodkindWork *w) {
        if (w->root_fd >= 0)
                close(w->root_fd);
        free(w->root_path);
        free(w->target);
        free(w->pod_uid);
        free(w->pod);
        free(w->volume);
}

LogFields podkind_work_fields(const PodkindWork *w) {
        return (LogFields){ .pod_uid = w->pod_uid, .pod = w->pod, .volume = w->volume };
}

int podkind_open_parent(const PodkindWork *w, int *ret_fd, const char **ret_name) {
        _cleanup_free_ char *parent = strdup(w->target);
        char *slash;
        int fd;

        if (!parent)
                return -ENOMEM;
        slash = strrchr(parent, '/');
        if (!slash)
                return -EINVAL;
        *slash = '\0';
        fd = open_beneath(w->root_fd, parent, O_DIRECTORY | O_RDONLY | O_CLOEXEC, 0, false);
        if (fd < 0)
                return fd;
        *ret_fd = fd;
        *ret_name = strrchr(w->target, '/') + 1;
        return 0;
}

void podkind_start(Operation *op, size_t size, int (*fill)(void *data, const Operation *op), offloop_work_t work,
                   void (*data_free)(void *), bool fs_group) {
        PodkindWork *w;
        int r;

        assert(size >= sizeof(PodkindWork));
        w = calloc(1, size);
        if (!w) {
                operation_fail(op, -ENOMEM, false, "out of memory");
                return;
        }
        r = podkind_work_init(w, op);
        if (r >= 0 && fill)
                r = fill(w, op);
        if (r < 0) {
                data_free(w);
                operation_fail(op, r, false, "out of memory");
                return;
        }
        podkind_run_off_loop(op, work, w, data_free, fs_group);
}
