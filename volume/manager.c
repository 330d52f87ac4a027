/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "k8s/writers.h"
#include "systemd/log.h"
#include "systemd/validate.h"
#include "volume/internal.h"
#include "volume/paths.h"

#define IN_USE_RETRY_USEC (2 * USEC_PER_SEC)

static void pass(VolumeManager *m);

/* ---- scheduling ------------------------------------------------------------------ */

static int on_pass(sd_event_source *s, void *userdata) {
        pass(userdata);
        return 0;
}

void manager_schedule_pass(VolumeManager *m) {
        /* A deferred source runs once per loop iteration however often it
         * is enabled: a burst of events costs one pass. */
        (void) sd_event_source_set_enabled(m->pass_source, SD_EVENT_ONESHOT);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        manager_schedule_pass(userdata);
        return 0;
}

static int on_resync(sd_event_source *s, uint64_t usec, void *userdata) {
        VolumeManager *m = userdata;
        void *value;

        log_debug("Resync: rebuilding the desired state of every pod");
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);)
                ((PodEntry *) value)->dirty = true;
        (void) sd_event_source_set_time_relative(s, m->resync_interval_usec);
        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        manager_schedule_pass(m);
        return 0;
}

static void arm_retry_timer(VolumeManager *m, uint64_t when) {
        if (when == 0 || when == UINT64_MAX) {
                (void) sd_event_source_set_enabled(m->retry_timer, SD_EVENT_OFF);
                return;
        }
        (void) sd_event_source_set_time(m->retry_timer, when);
        (void) sd_event_source_set_enabled(m->retry_timer, SD_EVENT_ONESHOT);
}

/* ---- lookups ---------------------------------------------------------------------- */

const K8sCSIDriver *manager_csidriver(VolumeManager *m, const char *driver) {
        return k8s_informer_get(m->csidrivers, NULL, driver);
}

/* kubelet's skipAttach inverted: no CSIDriver object means attachable. */
bool manager_attachable(VolumeManager *m, const char *driver) {
        const K8sCSIDriver *d = manager_csidriver(m, driver);
        return !d || d->attach_required;
}

static int view_get_pvc(void *userdata, const char *namespace, const char *name,
                        const K8sPersistentVolumeClaim **ret) {
        VolumeManager *m = userdata;
        int r = object_watches_get(m->watches, &k8s_kind_pvc, namespace, name, (const void **) ret);
        /* A claim name that cannot exist is simply not found. */
        return r == -EINVAL ? 0 : r == -EAGAIN ? -EAGAIN : 0;
}

static int view_get_pv(void *userdata, const char *name, const K8sPersistentVolume **ret) {
        VolumeManager *m = userdata;
        int r = object_watches_get(m->watches, &k8s_kind_pv, NULL, name, (const void **) ret);
        return r == -EAGAIN ? -EAGAIN : 0;
}

/* ---- events ------------------------------------------------------------------------- */

void manager_pod_event(VolumeManager *m, const PodInfo *pod, const char *type, const char *reason,
                       const char *format, ...) {
        _cleanup_free_ char *message = NULL;
        PodEntry *e = hashmap_get(m->pod_entries, pod->uid);
        va_list ap;

        va_start(ap, format);
        if (vasprintf(&message, format, ap) < 0)
                message = NULL;
        va_end(ap);
        if (!message || !m->events)
                return;
        (void) k8s_event_record(m->events,
                                &(K8sObjectRef){ .kind = "Pod",
                                                 .api_version = "v1",
                                                 .namespace = pod->namespace,
                                                 .name = pod->name,
                                                 .uid = pod->uid,
                                                 .resource_version = e ? e->resource_version : NULL },
                                type, reason, message, NULL, NULL);
}

/* Sends "message" about a pod's volume unless it was the last one sent for it. */
static void report_once(VolumeManager *m, PodEntry *e, const DesiredPod *p, const char *volume, const char *reason,
                        const char *message) {
        char *last = hashmap_get(e->reported, volume);
        PodInfo info = { .uid = p->uid, .namespace = p->namespace, .name = p->name, .key = p->key };
        LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = volume };

        if (streq_ptr(last, message))
                return;
        char *copy = strdup(message);
        if (!copy || hashmap_put(e->reported, volume, copy, NULL) < 0) {
                free(copy);
                return;
        }
        free(last);
        log_fields(LOG_NOTICE, &f, "Volume %s of pod %s: %s", volume, p->key, message);
        manager_pod_event(m, &info, "Warning", reason, "%s", message);
}

static void report_clear(PodEntry *e, const char *volume) {
        free(hashmap_remove(e->reported, volume));
}

/* ---- pods --------------------------------------------------------------------------- */

static PodEntry *pod_entry_free(PodEntry *e) {
        void *value;

        if (!e)
                return NULL;
        desired_pod_free(e->desired);
        for (size_t i = 0; hashmap_iterate(e->reported, &i, NULL, &value);)
                free(value);
        hashmap_free(e->reported);
        free(e->uid);
        free(e->namespace);
        free(e->name);
        free(e->resource_version);
        free(e->reported_invalid);
        free(e);
        return NULL;
}

static void pod_changed(VolumeManager *m, const K8sPod *pod) {
        PodEntry *e = hashmap_get(m->pod_entries, pod->meta.uid);

        if (!e) {
                e = calloc(1, sizeof *e);
                if (!e || !(e->uid = strdup(pod->meta.uid)) || !(e->reported = hashmap_new()) ||
                    hashmap_put(m->pod_entries, pod->meta.uid, e, NULL) < 0) {
                        log_error("Out of memory tracking pod %s", pod->meta.name);
                        pod_entry_free(e);
                        return;
                }
        }
        (void) free_and_strdup(&e->namespace, pod->meta.namespace);
        (void) free_and_strdup(&e->name, pod->meta.name);
        (void) free_and_strdup(&e->resource_version, pod->meta.resource_version);
        e->dirty = true;
        manager_schedule_pass(m);
}

static void on_pod_add(K8sInformer *i, const void *obj, void *userdata) {
        pod_changed(userdata, obj);
}

static void on_pod_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        pod_changed(userdata, new);
}

static void on_pod_delete(K8sInformer *i, const void *old, void *userdata) {
        VolumeManager *m = userdata;
        const K8sPod *pod = old;

        /* Its volumes are no longer desired; the actual state keeps what is
         * mounted, and the next pass tears that down. */
        pod_entry_free(hashmap_remove(m->pod_entries, pod->meta.uid));
        manager_schedule_pass(m);
}

static void on_synced(K8sInformer *i, void *userdata) {
        manager_schedule_pass(userdata);
}

static void on_any_add(K8sInformer *i, const void *obj, void *userdata) {
        manager_schedule_pass(userdata);
}

static void on_any_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        manager_schedule_pass(userdata);
}

static void on_informer_error(K8sInformer *i, int error, long status, const char *message, void *userdata) {
        log_warning("Watching %s: %s", k8s_informer_kind(i)->plural, strempty(message));
}

static void on_watch_changed(void *userdata) {
        manager_schedule_pass(userdata);
}

/* The mount table was read again.  A publish or stage we hold as done that
 * is no longer mounted, while no operation of ours is changing it, was
 * unmounted behind our back (or lost by the driver): it becomes uncertain
 * and the reconciler sets it up again, drivers being idempotent.  Runs at
 * most once per MOUNT_TABLE_REFRESH_USEC, never per pass. */
static bool mount_gone(VolumeManager *m, const char *rel) {
        _cleanup_free_ char *abs = NULL;

        if (asprintf(&abs, "%s/%s", m->root->path, rel) < 0 || mount_table_is_mounted(m->mounts, abs))
                return false;
        /* The kernel's word too, so that a stale table never costs a remount. */
        return root_dir_is_mount_point(m->root, rel) == 0;
}

static void on_mounts_changed(MountTable *t, void *userdata) {
        VolumeManager *m = userdata;
        void *value, *pv;

        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                LogFields f = { .volume = av->spec_name, .driver = av->driver, .volume_handle = av->handle };
                _cleanup_free_ char *staging = NULL;

                if (av->op)
                        continue;
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);) {
                        ActualPublish *pub = pv;
                        if (pub->state != PUBLISH_DONE || pub->not_a_mount || !mount_gone(m, pub->target))
                                continue;
                        f.pod_uid = pub->pod_uid;
                        f.pod = pub->pod_key;
                        log_fields(LOG_WARNING, &f, "%s/%s is no longer mounted; publishing it again",
                                   m->root->path, pub->target);
                        pub->state = PUBLISH_UNCERTAIN;
                        manager_schedule_pass(m);
                }
                f.pod_uid = f.pod = NULL;
                if (av->stage == STAGE_DONE && av->staged_mount &&
                    path_staging_target(av->driver, av->handle, &staging) >= 0 && mount_gone(m, staging)) {
                        log_fields(LOG_WARNING, &f, "%s/%s is no longer mounted; staging it again", m->root->path,
                                   staging);
                        av->stage = STAGE_UNCERTAIN;
                        manager_schedule_pass(m);
                }
        }
}

/* Rebuilds a pod's desired volumes from the informer's pod and the watches. */
static void rebuild_pod(VolumeManager *m, PodEntry *e) {
        const K8sPod *pod = k8s_informer_get(m->pods, e->namespace, e->name);
        ClusterView view = { view_get_pvc, view_get_pv, m };
        DesiredPod *p = NULL;
        const char *field = NULL;
        DesiredPod *old = TAKE_PTR(e->desired);
        int r;

        if (!pod || !streq_ptr(pod->meta.uid, e->uid) || !pod_volumes_wanted(pod)) {
                desired_pod_free(old);
                return;
        }
        r = desired_pod_build(pod, &view, &p, &field);
        if (r == -EINVAL) {
                desired_pod_free(old);
                /* Nothing of this pod touches the disk. */
                if (!streq_ptr(e->reported_invalid, field)) {
                        PodInfo info = { .uid = e->uid, .namespace = e->namespace, .name = e->name };
                        LogFields f = { .pod_uid = e->uid, .message_id = LOG_MESSAGE_ID_VOLUME_FAILED };
                        log_fields(LOG_WARNING, &f, "Pod %s/%s has an invalid %s; none of its volumes is set up",
                                   strempty(e->namespace), strempty(e->name), field);
                        (void) free_and_strdup(&e->reported_invalid, field);
                        if (validate_uid(e->uid) >= 0)
                                manager_pod_event(m, &info, "Warning", "FailedMount",
                                                  "Unable to set up the pod's volumes: invalid %s", field);
                }
                return;
        }
        if (r < 0) {
                log_error_errno(r, "Failed to build the desired volumes of pod %s/%s: %m", e->namespace, e->name);
                e->desired = old;
                e->dirty = true;
                return;
        }
        /* As in kubelet, a volume once resolved stays desired until the pod
         * goes: a claim that cannot be looked up for a moment (a watch being
         * restarted, a PVC deleted under a running pod) must never unmount it. */
        for (size_t v = 0; old && v < p->n_volumes; v++) {
                DesiredVolume *dv = &p->volumes[v];
                const DesiredVolume *before = desired_pod_find_volume(old, dv->name);
                if (dv->spec || !before || !before->spec)
                        continue;
                dv->spec = TAKE_PTR(((DesiredVolume *) before)->spec);
                dv->waiting = mfree_str(dv->waiting);
                dv->failed = mfree_str(dv->failed);
                dv->looking_up = false;
        }
        desired_pod_free(old);
        e->desired = p;
        e->dirty = false;
}

static bool pod_uses_claims(const DesiredPod *p) {
        for (size_t i = 0; p && i < p->n_volumes; i++)
                if (!p->volumes[i].spec || p->volumes[i].spec->lifecycle == VOLUME_PERSISTENT)
                        return true;
        return false;
}

typedef struct PassState {
        Operation **ops;
        size_t n_ops, allocated;
        uint64_t now;        /* the loop's time: fixed for the whole pass */
        uint64_t started;    /* the clock's, to measure the pass */
        uint64_t next_retry; /* earliest backoff expiry of an operation held back */
} PassState;

/* ---- volumesInUse ------------------------------------------------------------------- */

static void on_in_use_patched(K8sClient *c, int error, const char *message, void *userdata) {
        VolumeManager *m = userdata;
        uint64_t now = 0;

        m->in_use_patching = false;
        if (error < 0) {
                log_warning("Failed to update volumesInUse of node %s: %s", m->node_name, strempty(message));
                (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
                m->in_use_retry_at = now + IN_USE_RETRY_USEC;
                manager_operation_done(m, NULL, false);
                return;
        }
        m->in_use_retry_at = 0;
        k8s_strv_free(m->in_use_reported);
        m->in_use_reported = TAKE_PTR(m->in_use_wanted);
        m->in_use_synced = true;
        log_debug("volumesInUse of node %s updated (%zu volumes)", m->node_name, k8s_strv_length(m->in_use_reported));
        manager_operation_done(m, NULL, true);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static bool strv_equal(char *const *a, char *const *b) {
        size_t n = k8s_strv_length(a);
        if (n != k8s_strv_length(b))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!streq(a[i], b[i]))
                        return false;
        return true;
}

/* Whether a volume listed in use before we started may still be on the node:
 * its staging directory is there (kubelet and kvolumed make it for every
 * persistent volume, whether the driver stages or not). */
static bool inherited_still_there(VolumeManager *m, const char *unique_name) {
        _cleanup_free_ char *driver = NULL, *dir = NULL;
        const char *prefix = CSI_PLUGIN_NAME "/", *sep;

        if (strncmp(unique_name, prefix, strlen(prefix)) != 0)
                return false;
        sep = strchr(unique_name + strlen(prefix), '^');
        if (!sep || !(driver = strndup(unique_name + strlen(prefix), sep - unique_name - strlen(prefix))))
                return false;
        if (path_staging_volume_dir(driver, sep + 1, &dir) < 0)
                return false;
        return root_dir_exists(m->root, dir) > 0;
}

/* kubelet reports attachable volumes only: those desired by a pod or still
 * on the node in any state.  Removed only once unstaged.  Volumes the Node
 * listed when we started, and that are still staged on disk, stay listed:
 * dropping them would let the attach/detach controller detach a volume that
 * may be mounted. */
static void update_in_use(VolumeManager *m, PassState *ps) {
        _cleanup_(k8s_strv_freep) char **wanted = NULL;
        size_t n = 0, allocated;
        void *value;
        int r;

        if (!m->in_use_inherited) {
                const K8sNode *node = k8s_informer_get(m->node, NULL, m->node_name);
                size_t k = 0, count = node ? k8s_strv_length(node->volumes_in_use) : 0;
                m->in_use_inherited = calloc(count + 1, sizeof(char *));
                if (!m->in_use_inherited)
                        return;
                for (size_t i = 0; i < count; i++)
                        if (inherited_still_there(m, node->volumes_in_use[i]) &&
                            (m->in_use_inherited[k] = strdup(node->volumes_in_use[i])))
                                k++;
        }
        allocated = hashmap_size(m->volumes) + k8s_strv_length(m->in_use_inherited) + 1;
        wanted = calloc(allocated, sizeof(char *));
        if (!wanted)
                return;
        size_t kept = 0;
        for (size_t i = 0; m->in_use_inherited[i]; i++) {
                char *name = m->in_use_inherited[i];
                ActualVolume *av = hashmap_get(m->volumes, name);
                if (av || inherited_still_there(m, name)) {
                        /* Kept while staged on disk; the actual state adds it itself when it tracks it. */
                        m->in_use_inherited[kept++] = name;
                        if (!av && !(wanted[n++] = strdup(name)))
                                return;
                } else
                        free(name);
        }
        m->in_use_inherited[kept] = NULL;
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                if (av->lifecycle != VOLUME_PERSISTENT)
                        continue;
                /* Attachability is remembered while the volume is on the node, so
                 * that a CSIDriver change never drops a staged volume early. */
                if (av->desired || av->stage == STAGE_NONE)
                        av->attachable = manager_attachable(m, av->driver);
                if (!av->attachable)
                        continue;
                if (!av->desired && av->stage == STAGE_NONE && hashmap_size(av->publishes) == 0)
                        continue;
                if (k8s_strv_contains(wanted, av->unique_name))
                        continue;
                if (!(wanted[n++] = strdup(av->unique_name)))
                        return;
        }
        qsort(wanted, n, sizeof(char *), cmp_str);
        if (m->in_use_synced && strv_equal(wanted, m->in_use_reported))
                return;
        if (m->in_use_patching || m->stopping)
                return; /* the next pass sends the newest list */
        if (m->in_use_retry_at > ps->now) {
                ps->next_retry = MIN(ps->next_retry, m->in_use_retry_at);
                return;
        }
        r = k8s_node_patch_volumes_in_use(m->k8s, m->node_name, wanted, on_in_use_patched, m);
        if (r < 0) {
                log_warning_errno(r, "Failed to update volumesInUse: %m");
                return;
        }
        k8s_strv_free(m->in_use_wanted);
        m->in_use_wanted = TAKE_PTR(wanted);
        m->in_use_patching = true;
        m->n_running++;
}

/* ---- the pass --------------------------------------------------------------------- */

static bool backoff_holds(PassState *ps, ActualVolume *av, OpKind kind, const char *pod_uid) {
        Backoff *b = actual_backoff(av, kind, pod_uid, false);
        if (!b || backoff_allows(b, ps->now))
                return false;
        ps->next_retry = MIN(ps->next_retry, backoff_next_try(b));
        return true;
}

static void want_op(VolumeManager *m, PassState *ps, OpKind kind, ActualVolume *av, const VolumeSpec *spec,
                    const PodInfo *pod) {
        Operation *op = NULL;

        if (m->stopping || av->op || backoff_holds(ps, av, kind, pod ? pod->uid : NULL))
                return;
        if (operation_new(m, kind, av, spec, pod, &op) < 0) {
                log_error("Out of memory starting %s of %s", op_kind_to_string(kind), av->unique_name);
                return;
        }
        if (ps->n_ops == ps->allocated) {
                size_t want = ps->allocated ? 2 * ps->allocated : 64;
                Operation **ops = reallocarray(ps->ops, want, sizeof *ops);
                if (!ops) {
                        operation_free(op);
                        return;
                }
                ps->ops = ops;
                ps->allocated = want;
        }
        ps->ops[ps->n_ops++] = op;
        av->op = op;
        m->n_running++;
}

static const char *lifecycle_problem(VolumeManager *m, const VolumeSpec *s, char buf[static 512]) {
        const K8sCSIDriver *d = manager_csidriver(m, s->driver);
        const char *mode = s->lifecycle == VOLUME_EPHEMERAL ? "Ephemeral" : "Persistent";
        size_t len;

        if (!d) {
                if (s->lifecycle == VOLUME_PERSISTENT)
                        return NULL;
                snprintf(buf, 512, "volume mode \"%s\" not supported by driver %s (no CSIDriver object)", mode,
                         s->driver);
                return buf;
        }
        if (k8s_strv_contains(d->volume_lifecycle_modes, mode))
                return NULL;
        len = (size_t) snprintf(buf, 512, "volume mode \"%s\" not supported by driver %s (only supports [", mode,
                                s->driver);
        for (size_t i = 0; d->volume_lifecycle_modes && d->volume_lifecycle_modes[i] && len < 480; i++)
                len += (size_t) snprintf(buf + len, 512 - len, "%s\"%s\"", i ? "," : "",
                                         d->volume_lifecycle_modes[i]);
        snprintf(buf + len, 512 - len, "])");
        return buf;
}

static bool node_lists_attached(VolumeManager *m, const char *unique_name) {
        const K8sNode *node = k8s_informer_get(m->node, NULL, m->node_name);
        for (size_t i = 0; node && i < node->n_volumes_attached; i++)
                if (streq_ptr(node->volumes_attached[i].name, unique_name))
                        return true;
        return false;
}

/* Whether an attachable volume may be staged: reported in use, listed
 * attached in the Node's status, and its VolumeAttachment says attached. */
static bool attach_ready(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p, const DesiredVolume *dv,
                         ActualVolume *av) {
        const VolumeSpec *s = dv->spec;
        const K8sVolumeAttachment *va = NULL;
        char va_name[CSI_HASH_NAME_MAX], message[512];
        int r;

        r = csi_attachment_name(s->handle, s->driver, m->node_name, va_name);
        if (r >= 0)
                r = object_watches_get(m->watches, &k8s_kind_volume_attachment, NULL, va_name, (const void **) &va);
        if (r < 0 && r != -EAGAIN) {
                LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = dv->name, .driver = s->driver,
                                .volume_handle = s->handle };
                log_fields_errno(LOG_ERR, r, &f, "Cannot watch VolumeAttachment %s: %m", va_name);
        }
        if (k8s_strv_contains(m->in_use_reported, s->unique_name) && node_lists_attached(m, s->unique_name) && r >= 0 &&
            va && va->attached) {
                av->attach_wait_since = 0;
                av->attach_warned = false;
                return true;
        }
        if (av->attach_wait_since == 0)
                av->attach_wait_since = ps->now;
        if (va && va->attach_error_message)
                snprintf(message, sizeof message, "AttachVolume.Attach failed for volume \"%s\" : %s", s->spec_name,
                         va->attach_error_message);
        else if (ps->now - av->attach_wait_since >= ATTACH_WAIT_WARNING_USEC)
                snprintf(message, sizeof message,
                         "Volume \"%s\" is not attached to node %s after %" PRIu64 "s: waiting for VolumeAttachment "
                         "%s", s->spec_name, m->node_name, (ps->now - av->attach_wait_since) / USEC_PER_SEC, va_name);
        else {
                /* Wake up when the warning is due. */
                ps->next_retry = MIN(ps->next_retry, av->attach_wait_since + ATTACH_WAIT_WARNING_USEC);
                return false;
        }
        if (!av->attach_warned) {
                av->attach_warned = true;
                report_once(m, e, p, dv->name, "FailedAttachVolume", message);
        }
        return false;
}

static void plan_desired_volume(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p,
                                const DesiredVolume *dv) {
        const VolumeSpec *s = dv->spec;
        char buf[512];
        const char *problem;
        ActualVolume *av;
        ActualPublish *pub;
        PodInfo info;

        if (dv->failed) {
                report_once(m, e, p, dv->name, "FailedMount", dv->failed);
                return;
        }
        if (!s) {
                if (!dv->looking_up) {
                        snprintf(buf, sizeof buf, "Waiting for volume \"%s\": %s", dv->name, dv->waiting);
                        report_once(m, e, p, dv->name, "FailedMount", buf);
                }
                return;
        }
        /* Wanted by the pod whatever the checks below say: a CSIDriver edited
         * under a running pod must stop new mounts, never unmount this one. */
        av = hashmap_get(m->volumes, s->unique_name);
        if (av)
                av->desired = true;
        if (s->block) {
                snprintf(buf, sizeof buf, "MapVolume.SetUpDevice failed for volume \"%s\" : raw block volumes are "
                         "not supported by this kvolumed yet", s->spec_name);
                report_once(m, e, p, dv->name, "FailedMapVolume", buf);
                return;
        }
        problem = lifecycle_problem(m, s, buf);
        if (problem) {
                char message[700];
                snprintf(message, sizeof message, "MountVolume.SetUp failed for volume \"%s\" : kubernetes.io/csi: "
                         "mounter.SetupAt failed to check volume lifecycle mode: %s", s->spec_name, problem);
                report_once(m, e, p, dv->name, "FailedMount", message);
                return;
        }

        if (!av) {
                av = actual_volume_new(s);
                if (!av || hashmap_put(m->volumes, s->unique_name, av, NULL) < 0) {
                        actual_volume_free(av);
                        return;
                }
        }
        av->desired = true;

        if (!csi_client_has_driver(m->csi, s->driver)) {
                snprintf(buf, sizeof buf, "MountVolume.SetUp failed for volume \"%s\" : kubernetes.io/csi: driver "
                         "name %s not found in the list of registered CSI drivers", s->spec_name, s->driver);
                report_once(m, e, p, dv->name, "FailedMount", buf);
                return;
        }
        pub = hashmap_get(av->publishes, p->uid);
        if (pub && pub->state == PUBLISH_DONE && av->stage != STAGE_UNCERTAIN) {
                report_clear(e, dv->name);
                return;
        }
        if (av->op)
                return;
        if (pod_info_from_desired(p, &info) < 0)
                return;
        if (s->lifecycle == VOLUME_PERSISTENT) {
                if (manager_attachable(m, s->driver) && !attach_ready(m, ps, e, p, dv, av)) {
                        pod_info_done(&info);
                        return;
                }
                if (av->stage != STAGE_DONE) {
                        want_op(m, ps, OP_STAGE, av, s, &info);
                        pod_info_done(&info);
                        return;
                }
        }
        want_op(m, ps, OP_PUBLISH, av, s, &info);
        pod_info_done(&info);
}

/* Whether the pod still wants this volume (a pod has a handful of volumes:
 * looking through them is cheaper than keeping an index per pass). */
static bool pod_wants(VolumeManager *m, const char *pod_uid, const char *unique_name) {
        PodEntry *e = hashmap_get(m->pod_entries, pod_uid);
        for (size_t v = 0; e && e->desired && v < e->desired->n_volumes; v++) {
                const VolumeSpec *s = e->desired->volumes[v].spec;
                if (s && streq(s->unique_name, unique_name))
                        return true;
        }
        return false;
}

/* Teardown of what no pod wants: unpublish, then unstage once nothing is
 * published, then forget the volume. */
static void plan_actual_volume(VolumeManager *m, PassState *ps, ActualVolume *av) {
        const char *key;
        void *value;

        if (av->op)
                return;
        for (size_t i = 0; hashmap_iterate(av->publishes, &i, &key, &value);) {
                ActualPublish *pub = value;
                _cleanup_free_ char *namespace = NULL;
                const char *slash = strchr(pub->pod_key, '/');
                PodInfo info;

                if (pod_wants(m, pub->pod_uid, av->unique_name))
                        continue;
                namespace = slash ? strndup(pub->pod_key, slash - pub->pod_key) : NULL;
                info = (PodInfo){ .uid = pub->pod_uid, .key = pub->pod_key, .namespace = namespace,
                                  .name = slash ? (char *) slash + 1 : NULL };
                want_op(m, ps, OP_UNPUBLISH, av, NULL, &info);
                return; /* one operation per volume at a time */
        }
        if (av->desired || hashmap_size(av->publishes) > 0)
                return;
        if (av->lifecycle == VOLUME_PERSISTENT && av->stage != STAGE_NONE) {
                /* Never while any publish of it exists: checked just above. */
                want_op(m, ps, OP_UNSTAGE, av, NULL, NULL);
                return;
        }
        if (av->lifecycle == VOLUME_PERSISTENT && av->attachable &&
            k8s_strv_contains(m->in_use_reported, av->unique_name))
                return; /* forgotten once volumesInUse no longer lists it */
        hashmap_remove(m->volumes, av->unique_name);
        actual_volume_free(av);
}

/* The loop's time stands still during a dispatch; a pass is measured by the clock. */
static uint64_t monotonic_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static bool informers_synced(VolumeManager *m) {
        return k8s_informer_synced(m->pods) && k8s_informer_synced(m->csidrivers) && k8s_informer_synced(m->node);
}

static void pass(VolumeManager *m) {
        PassState ps = { .next_retry = UINT64_MAX };
        const char *key;
        void *value;
        size_t started = 0;
        int r;

        if (!informers_synced(m) || m->stopping)
                return;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &ps.now);
        ps.started = monotonic_usec();

        object_watches_begin(m->watches);
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);)
                ((ActualVolume *) value)->desired = false;
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                PodEntry *e = value;
                /* Pods with claims are looked at again every pass: that keeps
                 * the watches of their claims and volumes alive. */
                if (e->dirty || pod_uses_claims(e->desired))
                        rebuild_pod(m, e);
                for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++)
                        plan_desired_volume(m, &ps, e, e->desired, &e->desired->volumes[v]);
        }
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, &key, &value);)
                plan_actual_volume(m, &ps, value);
        update_in_use(m, &ps);

        /* The metadata of every operation started now, made durable at once,
         * before any of their CSI calls can create a mount. */
        for (size_t i = 0; i < ps.n_ops; i++) {
                r = operation_prepare(ps.ops[i]);
                if (r < 0) {
                        Operation *op = ps.ops[i];
                        ps.ops[i] = NULL;
                        op->av->op = NULL;
                        m->n_running--;
                        operation_free(op);
                }
        }
        if (ps.n_ops > 0) {
                r = root_dir_sync(m->root);
                if (r < 0)
                        log_warning_errno(r, "Failed to sync %s: %m", m->root->path);
        }
        for (size_t i = 0; i < ps.n_ops; i++)
                if (ps.ops[i]) {
                        operation_start(ps.ops[i]);
                        started++;
                }
        free(ps.ops);
        object_watches_sweep(m->watches);
        arm_retry_timer(m, ps.next_retry);
        if (started > 0)
                log_debug("Reconcile pass started %zu operations", started);
        if (m->pass_hook)
                m->pass_hook(monotonic_usec() - ps.started, m->pass_userdata);
}

/* ---- completion and stop ---------------------------------------------------------- */

static int on_stopped(sd_event_source *s, void *userdata) {
        VolumeManager *m = userdata;
        sd_event_source_disable_unref(s);
        if (m->stopped)
                m->stopped(m, m->stopped_userdata);
        return 0;
}

static void maybe_stopped(VolumeManager *m) {
        if (!m->stopping || m->n_running > 0 || !m->stopped)
                return;
        (void) sd_event_add_defer(m->event, NULL, on_stopped, m);
}

void manager_operation_done(VolumeManager *m, Operation *op, bool success) {
        if (op) {
                op->av->op = NULL;
                operation_free(op);
        }
        m->n_running--;
        manager_schedule_pass(m);
        maybe_stopped(m);
}

void volume_manager_stop(VolumeManager *m, volume_manager_stopped_t stopped, void *userdata) {
        m->stopping = true;
        m->stopped = stopped;
        m->stopped_userdata = userdata;
        if (m->n_running > 0)
                log_info("Waiting for %u operations in flight before stopping", m->n_running);
        maybe_stopped(m);
}

/* ---- driver registration ------------------------------------------------------------ */

static void on_driver_written(K8sClient *c, int error, const char *message, void *userdata) {
        if (error < 0)
                log_warning("Failed to record a CSI driver on the node: %s", strempty(message));
}

static int on_registered(CsiClient *c, const CsiRegisteredDriver *d, void *userdata) {
        VolumeManager *m = userdata;
        _cleanup_free_ char **keys = NULL;
        LogFields f = { .driver = d->name };
        int r;

        free(hashmap_remove(m->caps, d->name)); /* a new driver process may say otherwise */
        keys = calloc(d->node_info->n_topology + 1, sizeof(char *));
        if (!keys)
                return -ENOMEM;
        for (size_t i = 0; i < d->node_info->n_topology; i++)
                keys[i] = (char *) d->node_info->topology[i].key;
        qsort(keys, d->node_info->n_topology, sizeof(char *), cmp_str);
        if (isempty(d->node_info->node_id))
                return log_fields_errno(LOG_ERR, EINVAL, &f, "Driver %s reported an empty node ID; refusing it",
                                        d->name);
        r = k8s_node_set_driver_id(m->k8s, m->node_name, d->name, d->node_info->node_id, on_driver_written, m);
        if (r >= 0)
                r = k8s_csinode_set_driver(m->k8s, m->node_name, d->name, d->node_info->node_id, keys,
                                           d->node_info->max_volumes_per_node, on_driver_written, m);
        if (r < 0)
                log_fields_errno(LOG_WARNING, r, &f, "Failed to record driver %s on node %s: %m", d->name,
                                 m->node_name);
        manager_schedule_pass(m);
        return 0;
}

static void on_deregistered(CsiClient *c, const char *driver, const char *registration_socket, void *userdata) {
        VolumeManager *m = userdata;
        LogFields f = { .driver = driver };

        log_fields(LOG_INFO, &f, "CSI driver %s deregistered (%s gone)", driver, registration_socket);
        free(hashmap_remove(m->caps, driver));
        (void) k8s_node_set_driver_id(m->k8s, m->node_name, driver, NULL, on_driver_written, m);
        (void) k8s_csinode_set_driver(m->k8s, m->node_name, driver, NULL, NULL, 0, on_driver_written, m);
        manager_schedule_pass(m);
}

static void on_registration_failed(CsiClient *c, const char *socket, const char *reason, void *userdata) {
        log_warning("Plugin registration through %s failed: %s", socket, reason);
}

/* ---- life cycle ------------------------------------------------------------------- */

int volume_manager_new(sd_event *event, K8sClient *k8s, CsiClient *csi, const VolumeManagerOptions *o,
                       VolumeManager **ret) {
        _cleanup_(volume_manager_freep) VolumeManager *m = NULL;
        sigset_t mask;
        int r;

        m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->event = sd_event_ref(event);
        m->k8s = k8s;
        m->csi = csi;
        m->resync_interval_usec = o->resync_interval_usec ? o->resync_interval_usec : 5 * USEC_PER_MINUTE;
        m->node_name = strdup(o->node_name);
        m->pod_entries = hashmap_new();
        m->volumes = hashmap_new();
        m->caps = hashmap_new();
        if (!m->node_name || !m->pod_entries || !m->volumes || !m->caps)
                return -ENOMEM;

        /* fsGroup ownership changes run in child processes reaped by sd-event. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -errno;

        r = root_dir_open(o->root_dir, &m->root);
        if (r < 0)
                return r;
        r = object_watches_new(k8s, on_watch_changed, m, &m->watches);
        if (r < 0)
                return r;
        r = mount_table_new(event, m->root->path, on_mounts_changed, m, &m->mounts);
        if (r < 0)
                return log_error_errno(r, "Failed to read the mount table: %m");
        r = k8s_event_recorder_new(k8s, "kvolumed", m->node_name, &m->events);
        if (r < 0)
                return r;

        static const K8sInformerHandlers pod_handlers = {
                .on_add = on_pod_add,
                .on_update = on_pod_update,
                .on_delete = on_pod_delete,
                .on_synced = on_synced,
                .on_error = on_informer_error,
        };
        static const K8sInformerHandlers other_handlers = {
                .on_add = on_any_add,
                .on_update = on_any_update,
                .on_delete = on_any_add,
                .on_synced = on_synced,
                .on_error = on_informer_error,
        };
        r = k8s_informer_new_pods_on_node(k8s, m->node_name, &pod_handlers, m, &m->pods);
        if (r >= 0)
                r = k8s_informer_new_csidrivers(k8s, &other_handlers, m, &m->csidrivers);
        if (r >= 0)
                r = k8s_informer_new_node(k8s, m->node_name, &other_handlers, m, &m->node);
        if (r < 0)
                return log_error_errno(r, "Failed to create the informers: %m");

        r = sd_event_add_defer(event, &m->pass_source, on_pass, m);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->pass_source, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_time(event, &m->retry_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC, on_timer,
                                      m); /* backoff is in ms; 0 would be 250 ms of slack */
        if (r >= 0)
                r = sd_event_source_set_enabled(m->retry_timer, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_time_relative(event, &m->resync_timer, CLOCK_MONOTONIC, m->resync_interval_usec,
                                               USEC_PER_SEC, on_resync, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(m->pass_source, "reconcile-pass");
        (void) sd_event_source_set_description(m->retry_timer, "reconcile-retry");
        (void) sd_event_source_set_description(m->resync_timer, "reconcile-resync");

        csi_client_set_registration_callbacks(csi,
                                              &(CsiRegistrationCallbacks){ .registered = on_registered,
                                                                           .deregistered = on_deregistered,
                                                                           .failed = on_registration_failed },
                                              m);
        *ret = TAKE_PTR(m);
        return 0;
}

static void on_annotation_written(K8sClient *c, int error, const char *message, void *userdata) {
        if (error < 0)
                log_warning("Failed to annotate the node for controller-managed attach/detach: %s",
                            strempty(message));
}

int volume_manager_start(VolumeManager *m) {
        int r;

        r = k8s_informer_start(m->pods);
        if (r >= 0)
                r = k8s_informer_start(m->csidrivers);
        if (r >= 0)
                r = k8s_informer_start(m->node);
        if (r < 0)
                return log_error_errno(r, "Failed to start the informers: %m");
        /* Without it the attach/detach controller ignores this node's pods. */
        r = k8s_node_set_driver_id(m->k8s, m->node_name, NULL, NULL, on_annotation_written, m);
        if (r < 0)
                log_warning_errno(r, "Failed to annotate the node: %m");
        r = csi_client_start(m->csi);
        if (r < 0)
                return log_error_errno(r, "Failed to start plugin registration: %m");
        return 0;
}

VolumeManager *volume_manager_free(VolumeManager *m) {
        void *value;

        if (!m)
                return NULL;
        if (m->csi)
                csi_client_set_registration_callbacks(m->csi, &(CsiRegistrationCallbacks){}, NULL);
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                operation_free(av->op);
                actual_volume_free(av);
        }
        hashmap_free(m->volumes);
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);)
                pod_entry_free(value);
        hashmap_free(m->pod_entries);
        for (size_t i = 0; hashmap_iterate(m->caps, &i, NULL, &value);)
                free(value);
        hashmap_free(m->caps);
        k8s_informer_free(m->pods);
        k8s_informer_free(m->csidrivers);
        k8s_informer_free(m->node);
        object_watches_free(m->watches);
        mount_table_free(m->mounts);
        k8s_event_recorder_free(m->events);
        sd_event_source_disable_unref(m->pass_source);
        sd_event_source_disable_unref(m->retry_timer);
        sd_event_source_disable_unref(m->resync_timer);
        root_dir_free(m->root);
        k8s_strv_free(m->in_use_reported);
        k8s_strv_free(m->in_use_wanted);
        k8s_strv_free(m->in_use_inherited);
        free(m->node_name);
        sd_event_unref(m->event);
        free(m);
        return NULL;
}

void volume_manager_set_metrics_hook(VolumeManager *m, volume_metrics_hook_t hook, void *userdata) {
        m->metrics_hook = hook;
        m->metrics_userdata = userdata;
}

void volume_manager_set_pass_hook(VolumeManager *m, volume_pass_hook_t hook, void *userdata) {
        m->pass_hook = hook;
        m->pass_userdata = userdata;
}

void volume_manager_get_stats(VolumeManager *m, VolumeManagerStats *ret) {
        VolumeManagerStats s = { .pods = hashmap_size(m->pod_entries), .running = m->n_running };
        void *value, *pv;

        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                PodEntry *e = value;
                for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                        s.desired++;
                        if (!e->desired->volumes[v].spec)
                                s.waiting++;
                }
        }
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                s.staged += av->stage == STAGE_DONE;
                s.uncertain += av->stage == STAGE_UNCERTAIN;
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);) {
                        s.published += ((ActualPublish *) pv)->state == PUBLISH_DONE;
                        s.uncertain += ((ActualPublish *) pv)->state == PUBLISH_UNCERTAIN;
                }
        }
        *ret = s;
}
