/* SPDX-License-Identifier: Apache-2.0 */
/* The reconciler: one pass compares what the pods want (the desired state,
 * rebuilt by manager.c from the informers) with what this node has (the
 * actual state, from our operations and from reconstruction) and starts the
 * operations that close the gap.  It has kubelet's three parts, in this order:
 *   1. set up   — plan_desired_volume(): stage, publish what a pod wants;
 *   2. tear down — plan_actual_volume(): unpublish, unstage what no pod wants,
 *      never before the pod list is complete, never while the mount table
 *      shows another mount of a staged file system (unstage_guard());
 *   3. report   — update_in_use(): Node.status.volumesInUse, computed from
 *      the state and compared with the Node as the API server has it.
 * Then the metadata and intents of every operation it started are made
 * durable at once, and their CSI calls begin. */
#include <stdio.h>
#include <time.h>

#include "k8s/writers.h"
#include "systemd/log.h"
#include "volume/internal.h"
#include "volume/paths.h"

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
        bool mounts_fresh;   /* the mount table was read in this pass */
} PassState;

/* Whether the Node lists the volume in volumesInUse: kubelet's
 * ReportedInUse, read from the Node as the API server has it. */
static bool node_lists_in_use(VolumeManager *m, const char *unique_name) {
        const K8sNode *node = k8s_informer_get(m->node, NULL, m->node_name);
        return node && k8s_strv_contains(node->volumes_in_use, unique_name);
}

/* ---- 1. set up --------------------------------------------------------------------- */

static bool backoff_holds(PassState *ps, ActualVolume *av, OpKind kind, const char *pod_uid) {
        Backoff *b = actual_backoff(av, kind, pod_uid, false);
        if (!b || backoff_allows(b, ps->now))
                return false;
        ps->next_retry = MIN(ps->next_retry, backoff_next_try(b));
        return true;
}

static void want_op(VolumeManager *m, PassState *ps, OpKind kind, ActualVolume *av, const VolumeSpec *spec,
                    const PodInfo *pod, const char *spec_name) {
        Operation *op = NULL;

        if (m->stopping || av->op || backoff_holds(ps, av, kind, pod ? pod->uid : NULL))
                return;
        if (operation_new(m, kind, av, spec, pod, spec_name, &op) < 0) {
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
        if (r < 0 && r != -EAGAIN && r != -EACCES) {
                /* -EACCES: a node may not read a VolumeAttachment that does not
                 * exist yet (the authorizer has no edge to it): still waiting. */
                LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = dv->name, .driver = s->driver,
                                .volume_handle = s->handle };
                log_fields_errno(LOG_ERR, r, &f, "Cannot look up VolumeAttachment %s: %m", va_name);
        }
        if (node_lists_in_use(m, s->unique_name) && node_lists_attached(m, s->unique_name) && r >= 0 &&
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
                manager_report_once(m, e, p, dv->name, "FailedAttachVolume", message);
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
                manager_report_once(m, e, p, dv->name, "FailedMount", dv->failed);
                return;
        }
        if (!s) {
                if (!dv->looking_up) {
                        snprintf(buf, sizeof buf, "Waiting for volume \"%s\": %s", dv->name, dv->waiting);
                        manager_report_once(m, e, p, dv->name, "FailedMount", buf);
                }
                return;
        }
        /* Wanted by the pod whatever the checks below say: a CSIDriver edited
         * under a running pod must stop new mounts, never unmount this one. */
        av = hashmap_get(m->volumes, s->unique_name);
        if (av)
                av->desired = true;
        problem = lifecycle_problem(m, s, buf);
        if (problem) {
                char message[700];
                snprintf(message, sizeof message, "MountVolume.SetUp failed for volume \"%s\" : kubernetes.io/csi: "
                         "mounter.SetupAt failed to check volume lifecycle mode: %s", s->spec_name, problem);
                manager_report_once(m, e, p, dv->name, "FailedMount", message);
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
                manager_report_once(m, e, p, dv->name, "FailedMount", buf);
                return;
        }
        pub = hashmap_get(av->publishes, p->uid);
        if (pub && pub->state == PUBLISH_DONE && av->stage != STAGE_UNCERTAIN) {
                manager_report_clear(e, dv->name);
                /* requiresRepublish: NodePublishVolume again when its time came. */
                if (!republish_due(m, av, pub, ps->now, &ps->next_retry))
                        return;
        }
        if (av->op) {
                /* Keep the VolumeAttachment's cached answer while the stage or
                 * publish in flight reads its publish context. */
                char va_name[CSI_HASH_NAME_MAX];
                const void *va;
                if (s->lifecycle == VOLUME_PERSISTENT && manager_attachable(m, s->driver) &&
                    csi_attachment_name(s->handle, s->driver, m->node_name, va_name) >= 0)
                        (void) object_watches_get(m->watches, &k8s_kind_volume_attachment, NULL, va_name, &va);
                return;
        }
        if (pod_info_from_desired(p, &info) < 0)
                return;
        if (s->lifecycle == VOLUME_PERSISTENT) {
                if (manager_attachable(m, s->driver) && !attach_ready(m, ps, e, p, dv, av)) {
                        pod_info_done(&info);
                        return;
                }
                if (av->stage != STAGE_DONE) {
                        want_op(m, ps, OP_STAGE, av, s, &info, NULL);
                        pod_info_done(&info);
                        return;
                }
        }
        /* The publish path is this pod's own name of the volume (its PV), even
         * where two PVs share a handle and so one staged volume. */
        want_op(m, ps, OP_PUBLISH, av, s, &info, s->spec_name);
        pod_info_done(&info);
}

/* ---- 2. tear down ------------------------------------------------------------------ */

/* Whether the pod still wants this volume (a pod has a handful of volumes:
 * looking through them is cheaper than keeping an index per pass).  A pod
 * with a volume not resolved yet (its claim being looked up, a lookup
 * refused for now) may be using any of its publishes: after a restart that
 * is every claim's first lookup, and answering "no" would unmount a running
 * pod's volume.  Only the pod's end, or every volume resolved, says no. */
static bool pod_wants(VolumeManager *m, const char *pod_uid, const char *unique_name) {
        PodEntry *e = hashmap_get(m->pod_entries, pod_uid);
        for (size_t v = 0; e && e->desired && v < e->desired->n_volumes; v++) {
                const VolumeSpec *s = e->desired->volumes[v].spec;
                if (!s || streq(s->unique_name, unique_name))
                        return true;
        }
        return false;
}

/* Before NodeUnstageVolume, the mount table (read now) may show mounts of
 * the staged file system that the state does not: a publish whose pod dir
 * lost its records, or a copy made behind our back.  One at a pod's publish
 * path is adopted as an uncertain publish, unpublished first; anything else
 * holds the unstage until it goes, reported once.  operation.c checks again
 * right before the call: this only spares a doomed operation and finds work. */
static bool unstage_held(VolumeManager *m, PassState *ps, ActualVolume *av) {
        _cleanup_free_ char *staging = NULL, *abs = NULL;
        const char *refs[16];
        size_t n, adopted = 0;
        LogFields f = { .volume = av->spec_name, .driver = av->driver, .volume_handle = av->handle };

        if (path_staging_target(av->driver, av->handle, &staging) < 0 ||
            asprintf(&abs, "%s/%s", m->root->path, staging) < 0)
                return false;
        if (!ps->mounts_fresh) {
                (void) mount_table_refresh(m->mounts);
                ps->mounts_fresh = true;
        }
        n = mount_table_other_mounts(m->mounts, abs, refs, ELEMENTSOF(refs));
        if (n == 0) {
                av->unstage_held = false;
                return false;
        }
        for (size_t i = 0; i < MIN(n, ELEMENTSOF(refs)); i++) {
                _cleanup_free_ char *uid = NULL, *spec_name = NULL;
                const char *rel = refs[i] + strlen(m->root->path) + 1;
                if (path_parse_publish_target(rel, &uid, &spec_name) < 0 || hashmap_get(av->publishes, uid))
                        continue;
                PodInfo info = { .uid = uid, .key = uid };
                if (actual_publish_set(av, &info, spec_name, rel, PUBLISH_UNCERTAIN) >= 0) {
                        log_fields(LOG_WARNING, &f, "%s is a mount of staged volume %s that no record names; "
                                   "unpublishing it before the volume is unstaged", refs[i], av->unique_name);
                        adopted++;
                }
        }
        if (adopted == 0 && !av->unstage_held)
                log_fields(LOG_WARNING, &f, "Not unstaging %s: %s (and %zu more) still mount%s it", abs, refs[0],
                           n - 1, n > 1 ? "" : "s");
        av->unstage_held = adopted == 0;
        if (adopted > 0)
                manager_schedule_pass(m);
        return true;
}

static void log_driver_wait(ActualVolume *av) {
        LogFields f = { .volume = av->spec_name, .driver = av->driver, .volume_handle = av->handle };
        if (av->driver_wait_logged)
                return;
        av->driver_wait_logged = true;
        log_fields(LOG_NOTICE, &f, "Volume %s is no longer wanted; tearing it down waits for CSI driver %s to "
                   "register", av->unique_name, av->driver);
}

/* Teardown of what no pod wants: unpublish, then unstage once nothing is
 * published, then forget the volume.  What was found from a previous boot
 * is only removed from disk: nothing of it is mounted, nothing to call. */
static void plan_actual_volume(VolumeManager *m, PassState *ps, ActualVolume *av) {
        /* Teardown needs the driver; its registration wakes us up. */
        bool driver_here = csi_client_has_driver(m->csi, av->driver);
        const char *key;
        void *value;

        if (av->op)
                return;
        if (driver_here)
                av->driver_wait_logged = false;
        for (size_t i = 0; hashmap_iterate(av->publishes, &i, &key, &value);) {
                ActualPublish *pub = value;
                _cleanup_free_ char *namespace = NULL;
                const char *slash = strchr(pub->pod_key, '/');
                PodInfo info;

                if (pod_wants(m, pub->pod_uid, av->unique_name))
                        continue;
                if (pub->stale) {
                        (void) reconstruct_remove_stale_publish(m, av, pub);
                        continue;
                }
                if (!driver_here) {
                        log_driver_wait(av);
                        return;
                }
                namespace = slash ? strndup(pub->pod_key, slash - pub->pod_key) : NULL;
                info = (PodInfo){ .uid = pub->pod_uid, .key = pub->pod_key, .namespace = namespace,
                                  .name = slash ? (char *) slash + 1 : NULL };
                want_op(m, ps, OP_UNPUBLISH, av, NULL, &info, pub->spec_name);
                return; /* one operation per volume at a time */
        }
        if (av->desired || hashmap_size(av->publishes) > 0)
                return;
        if (av->lifecycle == VOLUME_PERSISTENT && av->stage != STAGE_NONE) {
                if (!driver_here) {
                        log_driver_wait(av);
                        return;
                }
                if (unstage_held(m, ps, av))
                        return;
                want_op(m, ps, OP_UNSTAGE, av, NULL, NULL, NULL);
                return;
        }
        if (av->stage_stale && reconstruct_remove_stale_staging(m, av) < 0)
                return;
        /* Gone from the node: the report below drops it from volumesInUse. */
        hashmap_remove(m->volumes, av->unique_name);
        actual_volume_free(av);
}

/* ---- 3. report: volumesInUse ----------------------------------------------------- */

#define IN_USE_RETRY_USEC (2 * USEC_PER_SEC)
/* How long a patch that went through may be missing from the Node informer
 * before we take the informer's word anyway (the watch is ordered: once it
 * showed our patch, whatever differs later is someone else's change). */
#define IN_USE_ECHO_USEC (5 * USEC_PER_SEC)

static void on_in_use_patched(K8sClient *c, int error, const char *message, void *userdata) {
        VolumeManager *m = userdata;
        uint64_t now = 0;

        m->in_use_patching = false;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        if (error < 0) {
                log_warning("Failed to update volumesInUse of node %s: %s", m->node_name, strempty(message));
                m->in_use_retry_at = now + IN_USE_RETRY_USEC;
                m->in_use_sending = k8s_strv_free(m->in_use_sending);
                manager_operation_done(m, NULL, false);
                return;
        }
        m->in_use_retry_at = 0;
        k8s_strv_free(m->in_use_sent);
        m->in_use_sent = TAKE_PTR(m->in_use_sending);
        m->in_use_sent_at = now;
        log_debug("volumesInUse of node %s updated (%zu volumes)", m->node_name, k8s_strv_length(m->in_use_sent));
        manager_operation_done(m, NULL, true);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* Order-insensitive: the Node's list is whatever its last writer sent. */
static bool same_set(char *const *a, char *const *b) {
        size_t n = k8s_strv_length(a);
        if (n != k8s_strv_length(b))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!k8s_strv_contains(b, a[i]))
                        return false;
        return true;
}

void reconciler_node_seen(VolumeManager *m, const K8sNode *node) {
        /* Our last patch has come back through the watch: from now on the
         * informer's list is the truth, and any difference is corrected at once. */
        if (m->in_use_sent && node && same_set(node->volumes_in_use, m->in_use_sent))
                m->in_use_sent = k8s_strv_free(m->in_use_sent);
}

/* Whether the volume belongs in volumesInUse: an attachable persistent
 * volume that a pod wants, or that is on the node in any state (staged,
 * published, uncertain, an operation in flight, found on disk).  Once it
 * was attachable it stays so until it is gone from the node, whatever its
 * CSIDriver says meanwhile: a driver re-created with attachRequired=false
 * must not let the attach/detach controller detach a mounted device. */
static bool volume_in_use(VolumeManager *m, ActualVolume *av) {
        bool on_node = av->stage != STAGE_NONE || av->stage_stale || hashmap_size(av->publishes) > 0 || av->op;

        if (av->lifecycle != VOLUME_PERSISTENT)
                return false;
        if (!on_node && !av->desired)
                return false;
        /* Found on disk and listed by the Node: it was attachable when set up. */
        if (!av->attachable)
                av->attachable = manager_attachable(m, av->driver) ||
                                 (av->reconstructed && node_lists_in_use(m, av->unique_name));
        return av->attachable;
}

static void update_in_use(VolumeManager *m, PassState *ps) {
        const K8sNode *node = k8s_informer_get(m->node, NULL, m->node_name);
        _cleanup_(k8s_strv_freep) char **wanted = NULL;
        char **listed = node ? node->volumes_in_use : NULL;
        size_t n = 0;
        void *value;
        int r;

        wanted = calloc(hashmap_size(m->volumes) + 1, sizeof(char *));
        if (!wanted)
                return;
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                if (volume_in_use(m, av) && !(wanted[n++] = strdup(av->unique_name)))
                        return;
        }
        qsort(wanted, n, sizeof(char *), cmp_str);
        if (!node || same_set(wanted, listed))
                return; /* no Node to patch (it is re-created by its owner), or right already */
        if (m->in_use_patching || m->stopping)
                return; /* the next pass sends the newest list */
        if (m->in_use_retry_at > ps->now) {
                ps->next_retry = MIN(ps->next_retry, m->in_use_retry_at);
                return;
        }
        /* Our own patch, not yet seen by the informer, is not a reason to send it again. */
        if (m->in_use_sent && same_set(wanted, m->in_use_sent) && ps->now < m->in_use_sent_at + IN_USE_ECHO_USEC) {
                ps->next_retry = MIN(ps->next_retry, m->in_use_sent_at + IN_USE_ECHO_USEC);
                return;
        }
        r = k8s_node_patch_volumes_in_use(m->k8s, m->node_name, wanted, on_in_use_patched, m);
        if (r < 0) {
                log_warning_errno(r, "Failed to update volumesInUse: %m");
                return;
        }
        log_info("Setting volumesInUse of node %s to %zu volumes (it listed %zu)", m->node_name, n,
                 k8s_strv_length(listed));
        k8s_strv_free(m->in_use_sending);
        m->in_use_sending = TAKE_PTR(wanted);
        m->in_use_patching = true;
        m->n_running++;
}

/* ---- the pass ---------------------------------------------------------------------- */

/* The loop's time stands still during a dispatch; a pass is measured by the clock. */
static uint64_t monotonic_usec(void) {
        struct timespec ts;
        (void) clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static bool informers_synced(VolumeManager *m) {
        return k8s_informer_synced(m->pods) && k8s_informer_synced(m->csidrivers) && k8s_informer_synced(m->node);
}

void reconciler_pass(VolumeManager *m) {
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
                        manager_rebuild_pod(m, e);
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
        manager_arm_retry_timer(m, ps.next_retry);
        if (started > 0)
                log_debug("Reconcile pass started %zu operations", started);
        if (m->pass_hook)
                m->pass_hook(monotonic_usec() - ps.started, m->pass_userdata);
}

