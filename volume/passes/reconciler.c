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
 * durable at once, and their CSI calls begin.
 *
 * A pass is full (every pod and volume) or scoped (the pods and volumes the
 * events since the last pass named: plan_scoped()); both call the same
 * plan_desired_volume() and plan_actual_volume().  Operations of one volume:
 * a stage or unstage excludes all others; publishes and unpublishes of
 * different pods run side by side (actual.c, actual_volume_op_allowed()). */
#include <assert.h>
#include <stdio.h>
#include <time.h>

#include "k8s/writers.h"
#include "systemd/log.h"
#include "systemd/trace.h"
#include "volume/host/paths.h"
#include "volume/internal.h"

static bool pod_uses_claims(const DesiredPod *p) {
        for (size_t i = 0; p && i < p->n_volumes; i++)
                if (!p->volumes[i].spec || p->volumes[i].spec->lifecycle == VOLUME_PERSISTENT ||
                    p->volumes[i].spec->follows_objects)
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
        bool verify;         /* a check after a scoped pass: what it would start, it reports as missed */
        bool held_back;      /* an operation due was left for a later slice */
} PassState;

/* The check after a scoped pass: whatever a full pass would still do, the
 * scoped one missed (KVOLUMED_TEST_VERIFY_INCREMENTAL).  True: report it,
 * do nothing. */
static bool verify_missed(const PassState *ps, const ActualVolume *av, const char *what, const char *pod) {
        if (!ps->verify)
                return false;
        log_error("Incremental pass missed: %s of %s%s%s", what, av->unique_name, pod ? " for pod " : "",
                  strempty(pod));
        return true;
}

/* Whether the Node lists the volume in volumesInUse: kubelet's
 * ReportedInUse, read from the Node as the API server has it. */
static bool node_lists_in_use(VolumeManager *m, const char *unique_name) {
        const K8sNode *node = k8s_informer_get(m->node, NULL, m->node_name);
        return node && k8s_strv_contains(node->volumes_in_use, unique_name);
}

/* Whether the volume may be staged as far as volumesInUse goes: the Node
 * lists it, and no patch of ours that drops it is in flight or answered but
 * not yet shown by the informer.  Our own patch of a moment ago (a volume
 * unstaged, then wanted again before the informer caught up) removes it
 * from the Node whatever the informer still shows: staging on the
 * informer's word would have the volume staged while the Node does not
 * list it, and the attach/detach controller free to detach it. */
bool reconciler_in_use_reported(VolumeManager *m, const char *unique_name) {
        if (m->in_use_patching && !k8s_strv_contains(m->in_use_sending, unique_name))
                return false;
        if (m->in_use_sent && !k8s_strv_contains(m->in_use_sent, unique_name))
                return false;
        return node_lists_in_use(m, unique_name);
}

/* ---- 1. set up --------------------------------------------------------------------- */

/* The volume (and the pod, when given; no volume: volumesInUse) must be
 * looked at again at "when": the retry timer's pass is scoped to what came
 * due (wakes.c).  The tests' check after a scoped pass notes nothing. */
void reconciler_wake(VolumeManager *m, PassState *ps, const char *unique_name, const char *pod_uid, uint64_t when) {
        ps->next_retry = MIN(ps->next_retry, when);
        if (!ps->verify)
                wakes_note(m, unique_name, pod_uid, when);
}

uint64_t reconciler_now(const PassState *ps) {
        return ps->now;
}

static bool backoff_holds(VolumeManager *m, PassState *ps, ActualVolume *av, OpKind kind, const char *pod_uid) {
        Backoff *b = actual_backoff(av, kind, pod_uid, false);
        if (!b || backoff_allows(b, ps->now))
                return false;
        reconciler_wake(m, ps, av->unique_name, pod_uid, backoff_next_try(b));
        return true;
}

static void want_op(VolumeManager *m, PassState *ps, OpKind kind, ActualVolume *av, const VolumeSpec *spec,
                    const PodInfo *pod, const char *spec_name) {
        Operation *op = NULL;

        if (m->stopping || av->expanding ||
            !actual_volume_op_allowed(av, kind, pod ? pod->uid : NULL,
                                      av->driver && manager_one_call_per_volume(m, av->driver)) ||
            backoff_holds(m, ps, av, kind, pod ? pod->uid : NULL))
                return;
        if (verify_missed(ps, av, op_kind_to_string(kind), pod ? pod->key : NULL))
                return;
        if (!slices_room(m, actual_volume_queue(av), ps->n_ops)) {
                /* Next pass (a full slice) or when one of the driver's ends. */
                slices_defer(m, av->unique_name, pod ? pod->uid : NULL);
                ps->held_back = true;
                return;
        }
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
        if (actual_volume_add_op(av, op) < 0) {
                operation_free(op);
                return;
        }
        ps->ops[ps->n_ops++] = op;
        m->n_running++;
        slices_started(m, actual_volume_queue(av));
}

/* Whether a pod other than pod_uid has the volume published (in any state)
 * or a stage or publish of it in flight: kubelet's IsVolumeMountedElsewhere,
 * counting what is on its way, since publishes of different pods may run
 * side by side. */
static bool used_by_other_pod(const ActualVolume *av, const char *pod_uid) {
        const char *key;

        for (size_t i = 0; hashmap_iterate(av->publishes, &i, &key, NULL);)
                if (!streq(key, pod_uid))
                        return true;
        for (size_t i = 0; hashmap_iterate(av->pod_ops, &i, &key, NULL);)
                if (!streq(key, pod_uid))
                        return true;
        return av->op && av->op->pod.uid && !streq(av->op->pod.uid, pod_uid);
}

/* Whether another pod that wants the volume needs the context it has now. */
static bool other_pod_wants_context(VolumeManager *m, const ActualVolume *av, const char *pod_uid) {
        void *value;

        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                const PodEntry *e = value;
                if (!e->desired || streq(e->uid, pod_uid))
                        continue;
                for (size_t v = 0; v < e->desired->n_volumes; v++) {
                        const VolumeSpec *s = e->desired->volumes[v].spec;
                        if (s && streq(s->unique_name, av->unique_name) &&
                            streq_ptr(operation_selinux_context(m, s), av->selinux_context))
                                return true;
                }
        }
        return false;
}

/* A mount has one SELinux context (KEP-1710): a pod that needs another one
 * than the volume has on this node waits, as kubelet's desired state refuses
 * "conflicting SELinux labels", until the pods using it are gone; then the
 * volume, if still staged with the old context, is unstaged
 * (selinux_restage) and staged again with the new one. */
static bool selinux_context_allows(VolumeManager *m, PodEntry *e, const DesiredPod *p, const DesiredVolume *dv,
                                   ActualVolume *av) {
        const char *want = operation_selinux_context(m, dv->spec);
        char message[1024];

        if (av->lifecycle != VOLUME_PERSISTENT || av->block)
                return true;
        /* Two containers of the pod mount it with different labels: one
         * mount cannot carry both.  kubelet's desired state refuses the pod
         * then, when the volume would be mounted with context= at all. */
        if (want && dv->spec->selinux_conflict) {
                snprintf(message, sizeof message, "MountVolume.SetUp failed for volume \"%s\" : volume %s is used "
                         "with two different SELinux contexts in the same pod: \"%s\", \"%s\"",
                         dv->spec->spec_name, dv->spec->spec_name, want, dv->spec->selinux_conflict);
                manager_report_once(m, e, p, dv->name, "FailedMount", message);
                return false;
        }
        if (av->stage == STAGE_NONE && hashmap_size(av->publishes) == 0 && !actual_volume_busy(av))
                return true; /* nothing of it on the node: this pod's stage sets the context */
        if (streq_ptr(want, av->selinux_context))
                return true;
        if (!used_by_other_pod(av, p->uid) && !other_pod_wants_context(m, av, p->uid)) {
                if (hashmap_size(av->publishes) == 0 && !actual_volume_busy(av) && !av->selinux_restage) {
                        LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = dv->name, .driver = av->driver,
                                        .volume_handle = av->handle };
                        log_fields(LOG_DEBUG, &f, "Volume %s is staged with SELinux context \"%s\" that no pod "
                                   "needs any more; unstaging it to stage it with \"%s\"", av->unique_name,
                                   strempty(av->selinux_context), strempty(want));
                        av->selinux_restage = true;
                }
                return false;
        }
        snprintf(message, sizeof message, "MountVolume.SetUp failed for volume \"%s\" : conflicting SELinux labels "
                 "of volume %s: \"%s\" and \"%s\" (it is mounted with the first on this node, the pod needs the "
                 "second; it waits until the pods using the volume are gone)", dv->spec->spec_name,
                 dv->spec->spec_name, strempty(av->selinux_context), strempty(want));
        manager_report_once(m, e, p, dv->name, "FailedMount", message);
        return false;
}

/* The volume other than s found published at the pod's path for s when
 * kvolumed started, if that publish is still there: a PV re-created with
 * another handle while kvolumed was down.  The running pod keeps what it
 * had, as manager.c's pin does within a run; the publish path is named
 * after the spec name, so both cannot be there. */
static const ActualVolume *restored_elsewhere(VolumeManager *m, const char *pod_uid, const VolumeSpec *s) {
        char key[512];
        const char *unique_name;
        const ActualVolume *av;

        if (hashmap_size(m->restored_publishes) == 0 ||
            (size_t) snprintf(key, sizeof key, "%s/%s", pod_uid, s->spec_name) >= sizeof key)
                return NULL;
        unique_name = hashmap_get(m->restored_publishes, key);
        if (!unique_name)
                return NULL;
        av = streq(unique_name, s->unique_name) ? NULL : hashmap_get(m->volumes, unique_name);
        if (av && hashmap_get(av->publishes, pod_uid))
                return av;
        /* The pod resolved again what it had, which manager.c's pin keeps
         * from now on, or what it had is gone: the entry has done its work.
         * Kept, they were some 230 bytes of each volume found at start-up,
         * for good (issue 31, memory). */
        free(hashmap_remove(m->restored_publishes, key));
        return NULL;
}

static void plan_desired_volume(VolumeManager *m, PassState *ps, PodEntry *e, const DesiredPod *p,
                                const DesiredVolume *dv) {
        const VolumeSpec *s = dv->spec;
        char buf[512], message[700];
        ActualVolume *av;
        ActualPublish *pub;
        PodInfo info;

        podview_volume_planned(e, dv->name);
        if (!s || s->lifecycle == VOLUME_PERSISTENT)
                m->in_use_dirty = true; /* desired: feeds volumesInUse */

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
        /* The pod's path is taken by what it resolved before a restart. */
        const ActualVolume *kept = restored_elsewhere(m, p->uid, s);
        if (kept) {
                manager_report_source_changed(m, e, p, dv, kept->spec_name, kept->unique_name);
                return;
        }
        /* Wanted by the pod whatever the checks below say: a CSIDriver edited
         * under a running pod must stop new mounts, never unmount this one. */
        av = hashmap_get(m->volumes, s->unique_name);
        if (av)
                av->desired = true;
        if (s->kind->refuses && s->kind->refuses(m, s, message, sizeof message)) {
                manager_report_once(m, e, p, dv->name, "FailedMount", message);
                return;
        }

        if (!av) {
                av = actual_volume_new(s);
                if (!av || manager_add_volume(m, av) < 0) {
                        actual_volume_free(av);
                        return;
                }
        }
        av->desired = true;

        /* A volume set up needs its driver only to change: after a restart
         * the drivers in plugins_registry register again only after the
         * first pass, and a running pod's volume is fine meanwhile. */
        pub = hashmap_get(av->publishes, p->uid);
        if (pub && pub->state == PUBLISH_DONE && av->stage != STAGE_UNCERTAIN) {
                manager_report_clear(m, e, dv->name);
                /* Its kind's refresh (CSI requiresRepublish): the publish
                 * again when its time came. */
                uint64_t refresh_at = UINT64_MAX;
                bool due = av->kind->refresh_due && av->kind->refresh_due(m, av, pub, ps->now, &refresh_at);
                reconciler_wake(m, ps, av->unique_name, p->uid, refresh_at);
                if (!due)
                        return;
        }
        if (av->kind->ready && !av->kind->ready(m, ps, e, p, dv, av))
                return;
        if (actual_volume_pod_busy(av, p->uid)) {
                if (av->kind->busy)
                        av->kind->busy(m, s);
                return;
        }
        /* A pod that has the volume already keeps it; a new one may have to wait. */
        if (!pub && !selinux_context_allows(m, e, p, dv, av))
                return;
        /* kubelet's ReadWriteOncePod check, before any call (KEP-2485). */
        if (!pub && s->rwop && used_by_other_pod(av, p->uid)) {
                snprintf(buf, sizeof buf, "MountVolume.SetUp failed for volume \"%s\" : volume uses the "
                         "ReadWriteOncePod access mode and is already in use by another pod", s->spec_name);
                manager_report_once(m, e, p, dv->name, "FailedMount", buf);
                return;
        }
        if (pod_info_from_desired(p, &info) < 0)
                return;
        /* A kind with a node-wide stage (CSI's globalmount) stages first. */
        if (av->kind->stages && av->kind->stages(s)) {
                if (av->kind->stage_ready && !av->kind->stage_ready(m, ps, e, p, dv, av)) {
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

/* Whether the pod still wants its publish of this volume at spec_name's
 * path (a pod has a handful of volumes: looking through them is cheaper
 * than keeping an index per pass).  A pod with a volume not resolved yet
 * (its claim being looked up, a lookup refused for now) may be using any of
 * its publishes: after a restart that is every claim's first lookup, and
 * answering "no" would unmount a running pod's volume.  A volume that now
 * resolves to another one under the same name keeps the publish too (see
 * restored_elsewhere()).  Only the pod's end, or every volume resolved to
 * something else, says no. */
bool reconciler_pod_wants(VolumeManager *m, const char *pod_uid, const char *unique_name, const char *spec_name) {
        PodEntry *e = hashmap_get(m->pod_entries, pod_uid);
        for (size_t v = 0; e && e->desired && v < e->desired->n_volumes; v++) {
                const VolumeSpec *s = e->desired->volumes[v].spec;
                if (!s || streq(s->unique_name, unique_name) || streq_ptr(s->spec_name, spec_name))
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
static bool publish_record_newer(VolumeManager *m, const char *pod_uid, const char *spec_name) {
        _cleanup_free_ char *dir = NULL, *record = NULL;

        if (hashmap_size(m->newer_records) == 0)
                return false;
        return path_pod_volume_dir(pod_uid, spec_name, &dir) >= 0 && path_intent_record(dir, NULL, &record) >= 0 &&
               hashmap_get(m->newer_records, record);
}

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
                /* A publish a newer kvolumed's record describes is left alone
                 * (reconstruct.c): it holds the unstage, it is not adopted. */
                if (publish_record_newer(m, uid, spec_name))
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
        if (av->unstage_held)
                mount_watch_held(m, av);
        if (adopted > 0)
                manager_schedule_pass(m);
        return true;
}

/* Teardown of what no pod wants: unpublish, then unstage once nothing is
 * published, then forget the volume.  What was found from a previous boot
 * is torn down the same way: nothing of it is mounted, but the driver may
 * keep state a reboot does not end (iSCSI sessions and NVMe-oF connections
 * set up again at boot, its block publish file) until it is told, as
 * kubelet tells it (reconstructed volumes are uncertain, kubelet-facts §8). */
static void teardown_waits(ActualVolume *av) {
        if (av->kind->teardown_waits)
                av->kind->teardown_waits(av);
}

static void plan_actual_volume(VolumeManager *m, PassState *ps, ActualVolume *av) {
        /* Teardown may need what the kind waits for (CSI: its driver, whose
         * registration wakes us up). */
        bool driver_here = !av->kind->available || av->kind->available(m, av);
        const char *key;
        void *value;

        bool waiting = false;

        if (av->lifecycle == VOLUME_PERSISTENT)
                m->in_use_dirty = true;
        if (av->op || av->expanding)
                return;
        if (driver_here)
                av->driver_wait_logged = false;
        for (size_t i = 0; hashmap_iterate(av->publishes, &i, &key, &value);) {
                ActualPublish *pub = value;
                _cleanup_free_ char *namespace = NULL;
                const char *slash = strchr(pub->pod_key, '/');
                PodInfo info;

                if (reconciler_pod_wants(m, pub->pod_uid, av->unique_name, pub->spec_name) ||
                    actual_volume_pod_busy(av, pub->pod_uid))
                        continue;
                if (!driver_here) {
                        waiting = true;
                        continue;
                }
                namespace = slash ? strndup(pub->pod_key, slash - pub->pod_key) : NULL;
                info = (PodInfo){ .uid = (char *) pub->pod_uid, .key = (char *) pub->pod_key, .namespace = namespace,
                                  .name = slash ? (char *) slash + 1 : NULL };
                /* Not while the runtime may still run a container of the pod. */
                if (!runtime_gate_allows(m->runtime, pub->pod_uid,
                                         &(LogFields){ .pod_uid = pub->pod_uid, .pod = pub->pod_key,
                                                       .volume = pub->spec_name, .driver = av->driver,
                                                       .volume_handle = av->handle }))
                        continue;
                /* Each pod's unpublish on its own: they run side by side. */
                want_op(m, ps, OP_UNPUBLISH, av, NULL, &info, pub->spec_name);
        }
        if (waiting)
                teardown_waits(av);
        /* Unstage only once no publish is left or in flight (a pod may have
         * gone while its publish ran). */
        /* A volume staged with an SELinux context no wanting pod needs is
         * unstaged though wanted, to be staged again with the right one. */
        if ((av->desired && !av->selinux_restage) || hashmap_size(av->publishes) > 0 || actual_volume_busy(av))
                return;
        if (av->lifecycle == VOLUME_PERSISTENT && (av->stage != STAGE_NONE || av->stage_stale)) {
                if (!driver_here) {
                        teardown_waits(av);
                        return;
                }
                /* The check has no business adopting mounts: it takes the last answer. */
                if (ps->verify ? av->unstage_held : unstage_held(m, ps, av))
                        return;
                want_op(m, ps, OP_UNSTAGE, av, NULL, NULL, NULL);
                return;
        }
        if (verify_missed(ps, av, "forgetting", NULL))
                return;
        /* Gone from the node: the report below drops it from volumesInUse. */
        manager_remove_volume(m, av);
        actual_volume_free(av);
}

/* ---- 3. report: volumesInUse ----------------------------------------------------- */

#define IN_USE_RETRY_USEC (2 * USEC_PER_SEC)
/* How long a patch that went through may be missing from the Node informer
 * before we take the informer's word anyway (the watch is ordered: once it
 * showed our patch, whatever differs later is someone else's change). */
#define IN_USE_ECHO_USEC (5 * USEC_PER_SEC)

/* The volumes the Node informer lists: in_use_reported() may answer
 * otherwise for them once a patch of ours ended or came back, and the
 * stages it held wait for nothing else. */
static void wake_in_use_listed(VolumeManager *m) {
        const K8sNode *node = k8s_informer_get(m->node, NULL, m->node_name);
        for (char **s = node ? node->volumes_in_use : NULL; s && *s; s++)
                manager_schedule_volume_pass(m, *s);
}

static void on_in_use_patched(K8sClient *c, int error, const char *message, void *userdata) {
        VolumeManager *m = userdata;
        uint64_t now = 0;

        m->in_use_patching = false;
        m->in_use_dirty = true;
        wake_in_use_listed(m);
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
        m->in_use_dirty = true; /* compared with the Node's list */
        /* Our last patch has come back through the watch: from now on the
         * informer's list is the truth, and any difference is corrected at once. */
        if (m->in_use_sent && node && same_set(node->volumes_in_use, m->in_use_sent)) {
                m->in_use_sent = k8s_strv_free(m->in_use_sent);
                wake_in_use_listed(m);
        }
}

/* Whether the volume belongs in volumesInUse: an attachable persistent
 * volume that a pod wants, or that is on the node in any state (staged,
 * published, uncertain, an operation in flight, found on disk).  Once it
 * was attachable it stays so until it is gone from the node, whatever its
 * CSIDriver says meanwhile: a driver re-created with attachRequired=false
 * must not let the attach/detach controller detach a mounted device. */
static bool volume_in_use(VolumeManager *m, ActualVolume *av) {
        bool on_node = av->stage != STAGE_NONE || av->stage_stale || hashmap_size(av->publishes) > 0 ||
                       actual_volume_busy(av);

        if (av->lifecycle != VOLUME_PERSISTENT)
                return false;
        if (!on_node && !av->desired)
                return false;
        /* Found on disk and listed by the Node: it was attachable when set up. */
        if (!av->attachable)
                av->attachable = (av->kind->attachable && av->kind->attachable(m, av)) ||
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

        if (!m->in_use_dirty)
                return;
        /* Only persistent volumes can be in use: the walk grows with the
         * node's PVs, not with its inline volumes. */
        wanted = calloc(hashmap_size(m->persistent) + 1, sizeof(char *));
        if (!wanted)
                return;
        for (size_t i = 0; hashmap_iterate(m->persistent, &i, NULL, &value);) {
                ActualVolume *av = value;
                m->visited++;
                if (volume_in_use(m, av) && !(wanted[n++] = strdup(av->unique_name)))
                        return;
        }
        qsort(wanted, n, sizeof(char *), cmp_str);
        if (!node || (same_set(wanted, listed) && (!m->in_use_sent || same_set(wanted, m->in_use_sent)))) {
                /* No Node to patch (its owner re-creates it: the Node's event
                 * dirties it again), or right already.  Not right when our
                 * last patch, not shown by the informer yet, said otherwise:
                 * the API server has that one. */
                m->in_use_dirty = false;
                return;
        }
        /* Below, whatever waits keeps it dirty: the patch's end, a retry or
         * the echo's timer schedules the pass that sends it. */
        if (m->in_use_patching || m->stopping)
                return; /* the next pass sends the newest list */
        if (m->in_use_retry_at > ps->now) {
                reconciler_wake(m, ps, NULL, NULL, m->in_use_retry_at);
                return;
        }
        /* Our own patch, not yet seen by the informer, is not a reason to send it again. */
        if (m->in_use_sent && same_set(wanted, m->in_use_sent) && ps->now < m->in_use_sent_at + IN_USE_ECHO_USEC) {
                reconciler_wake(m, ps, NULL, NULL, m->in_use_sent_at + IN_USE_ECHO_USEC);
                return;
        }
        r = k8s_node_patch_volumes_in_use(m->k8s, m->node_name, wanted, on_in_use_patched, m);
        if (r < 0) {
                log_warning_errno(r, "Failed to update volumesInUse: %m");
                return;
        }
        log_info("Setting volumesInUse of node %s to %zu volumes (it listed %zu)", m->node_name, n,
                 k8s_strv_length(listed));
        m->in_use_dirty = false;
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

/* The flags a pass computes afresh for each volume it looks at. */
static void volume_flags_reset(ActualVolume *av) {
        av->desired = false;
        av->selinux_restage = false;
}

static void plan_pod(VolumeManager *m, PassState *ps, PodEntry *e) {
        for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++)
                plan_desired_volume(m, ps, e, e->desired, &e->desired->volumes[v]);
}

/* Every pod and every volume: the first pass, and whatever may concern any
 * volume (a CSIDriver, the Node, a registration, a lookup's
 * answer, a timer).  The check (ps->verify) plans on the desired state as it
 * is, rebuilding nothing. */
static void plan_everything(VolumeManager *m, PassState *ps) {
        void *value;

        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);)
                volume_flags_reset(value);
        if (!ps->verify) /* the tests' check is not the node's work */
                m->visited += 2 * hashmap_size(m->volumes) + hashmap_size(m->pod_entries);
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                PodEntry *e = value;
                /* Pods with claims are looked at again every full pass: that
                 * keeps the watches of their claims and volumes alive. */
                if (!ps->verify && (e->dirty || pod_uses_claims(e->desired)))
                        manager_rebuild_pod(m, e);
                plan_pod(m, ps, e);
        }
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);)
                plan_actual_volume(m, ps, value);
}

/* Names of volumes to plan, each with whether other pods may want it too
 * (a persistent volume) or only the pod it belongs to (an inline one). */
static char shared_mark, own_mark;

static void add_name(Hashmap *names, const char *name, bool shared) {
        if (!shared && hashmap_get(names, name) == &shared_mark)
                return;
        (void) hashmap_put(names, name, shared ? &shared_mark : &own_mark, NULL);
}

static void add_desired_names(Hashmap *names, const DesiredPod *p) {
        for (size_t v = 0; p && v < p->n_volumes; v++)
                if (p->volumes[v].spec)
                        add_name(names, p->volumes[v].spec->unique_name,
                                 p->volumes[v].spec->lifecycle == VOLUME_PERSISTENT);
}

/* Only what the events since the last pass named: the dirty pods (rebuilt),
 * every volume they want or wanted or have, and the dirty volumes, each
 * planned for every pod that wants it.  The decisions are the same
 * functions' as in plan_everything(); finding what to look at is a walk
 * over names, without any of the planning's work.  Measured beside 1,000
 * published volumes, that walk was what a pod's event cost: a persistent
 * volume (any pod may share it) is planned for the pods the index of
 * wanters.c names; an inline volume is wanted by its own pod alone, which
 * is dirty or has it published. */
static int plan_scoped(VolumeManager *m, PassState *ps) {
        _cleanup_(hashmap_freep) Hashmap *names = hashmap_new(), *pods = hashmap_new();
        const char *key, *name;
        void *value;
        bool any_shared = false;

        if (!names || !pods)
                return -ENOMEM;
        for (size_t i = 0; hashmap_iterate(m->dirty_pods, &i, &key, NULL);) {
                PodEntry *e = hashmap_get(m->pod_entries, key);
                (void) hashmap_put(pods, key, pods, NULL);
                if (e) {
                        add_desired_names(names, e->desired);
                        if (e->dirty)
                                manager_rebuild_pod(m, e);
                        add_desired_names(names, e->desired);
                        continue;
                }
                /* Gone: what it wanted was named at its deletion; what it has
                 * published or in flight is what the index of pods names (a
                 * walk over every volume, only should the index have run out
                 * of memory). */
                if (!pod_index_broken(m->pod_index)) {
                        const Hashmap *vols = pod_index_volumes(m->pod_index, key);
                        for (size_t j = 0; vols && hashmap_iterate(vols, &j, &name, NULL);) {
                                ActualVolume *av = hashmap_get(m->volumes, name);
                                m->visited++;
                                if (av)
                                        add_name(names, name, av->lifecycle == VOLUME_PERSISTENT);
                        }
                        continue;
                }
                for (size_t j = 0; hashmap_iterate(m->volumes, &j, &name, &value);) {
                        ActualVolume *av = value;
                        m->visited++;
                        if (hashmap_get(av->publishes, key) || hashmap_get(av->pod_ops, key))
                                add_name(names, name, av->lifecycle == VOLUME_PERSISTENT);
                }
        }
        for (size_t i = 0; hashmap_iterate(m->dirty_volumes, &i, &key, NULL);) {
                ActualVolume *av = hashmap_get(m->volumes, key);
                add_name(names, key, !av || av->lifecycle == VOLUME_PERSISTENT);
        }
        for (size_t i = 0; hashmap_iterate(names, &i, &key, &value);) {
                ActualVolume *av = hashmap_get(m->volumes, key);
                m->visited++;
                if (value == &shared_mark) {
                        const Hashmap *wanters = wanters_of(m, key);
                        any_shared = any_shared || m->wanters_broken;
                        for (size_t j = 0; wanters && hashmap_iterate(wanters, &j, &name, NULL);)
                                (void) hashmap_put(pods, name, pods, NULL);
                }
                if (!av)
                        continue;
                volume_flags_reset(av);
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, &name, NULL);)
                        (void) hashmap_put(pods, name, pods, NULL);
        }
        for (size_t i = 0; hashmap_iterate(any_shared ? m->pod_entries : pods, &i, &key, &value);) {
                PodEntry *e = any_shared ? value : hashmap_get(m->pod_entries, key);
                m->visited++;
                bool dirty_pod = e && hashmap_get(m->dirty_pods, key) != NULL;
                for (size_t v = 0; e && e->desired && v < e->desired->n_volumes; v++) {
                        const DesiredVolume *dv = &e->desired->volumes[v];
                        if (dirty_pod || (dv->spec && hashmap_get(names, dv->spec->unique_name)))
                                plan_desired_volume(m, ps, e, e->desired, dv);
                }
        }
        for (size_t i = 0; hashmap_iterate(names, &i, &key, NULL);) {
                ActualVolume *av = hashmap_get(m->volumes, key);
                if (av)
                        plan_actual_volume(m, ps, av);
        }
        return 0;
}

void reconciler_synced(Operation **ops, size_t n, int error, void *userdata) {
        VolumeManager *m = userdata;

        if (error < 0)
                log_warning_errno(error, "Failed to sync %s: %m", m->root->path);
        test_trace("synced", NULL);
        for (size_t i = 0; i < n; i++)
                operation_start(ops[i]);
}

static void dirty_clear(Hashmap *h) {
        const char *key;
        for (size_t i = 0; hashmap_iterate(h, &i, &key, NULL);)
                (void) hashmap_remove(h, key);
}

void reconciler_pass(VolumeManager *m) {
        PassState ps = { .next_retry = UINT64_MAX };
        size_t started = 0, over_budget = 0;
        uint64_t prepare_end;
        bool full;
        int r;

        if (!informers_synced(m) || m->stopping)
                return;
        /* Nothing for any volume while root-dir is not the directory kvolumed
         * locked (rootwatch.c): a full pass follows once it is again. */
        if (!root_watch_check(m))
                return;
        test_trace("pass", NULL);
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &ps.now);
        ps.started = monotonic_usec();

        /* What earlier passes held back comes back a slice at a time. */
        (void) slices_release(m);

        /* The volumes and pods whose retry, warning or republish is due by
         * now join the scope (their timer may not have been dispatched yet
         * in this loop iteration).  Should a wake have been lost (out of
         * memory), a retry due by now makes it a full pass, as before. */
        if (wakes_broken(m))
                m->full_pass_wanted = m->full_pass_wanted || manager_retry_due(m, ps.now);
        else
                (void) wakes_release(m, ps.now);
        full = m->full_pass_wanted;
        m->full_pass_wanted = false;
        if (!full && plan_scoped(m, &ps) < 0)
                full = true;
        if (full) {
                /* Every wake is noted again by the pass. */
                wakes_clear(m);
                object_watches_begin(m->watches);
                m->in_use_dirty = true; /* a CSIDriver, the Node, a retry: anything */
                plan_everything(m, &ps);
        }
        /* The rolling resync's round ends with this pass (its last slice is
         * in the scope): volumesInUse compared with the Node, as the full
         * pass of the resync did (manager.c). */
        if (m->resync_round_ends)
                m->in_use_dirty = true;
        podview_pass_begins(m, full);
        dirty_clear(m->dirty_pods);
        dirty_clear(m->dirty_volumes);
        update_in_use(m, &ps);

        /* The metadata of every operation started now, made durable at once,
         * before any of their CSI calls can create a mount.  Past the
         * budget, the rest are held back as a full slice's are: nothing of
         * them was written yet, and the next pass plans them again. */
        test_trace("planned", NULL);
        prepare_end = monotonic_usec() + RECONCILE_PREPARE_BUDGET_USEC;
        for (size_t i = 0; i < ps.n_ops; i++) {
                Operation *op = ps.ops[i];
                bool over = i >= RECONCILE_SLICE_MIN && monotonic_usec() > prepare_end;

                r = over ? 0 : operation_prepare(op);
                if (over || r < 0) {
                        ps.ops[i] = NULL;
                        actual_volume_remove_op(op->av, op);
                        m->n_running--;
                        slices_finished(m, actual_volume_queue(op->av));
                        if (over)
                                slices_defer(m, op->av->unique_name, op->pod.uid);
                        operation_free(op);
                        over_budget += over;
                }
        }
        test_trace("prepared", NULL);
        /* Their CSI calls begin once every file and directory written for
         * them is durable, off the loop (rootsync.c). */
        for (size_t i = 0; i < ps.n_ops; i++)
                if (ps.ops[i])
                        ps.ops[started++] = ps.ops[i];
        r = root_sync_submit(m->sync, ps.ops, started);
        if (r < 0)
                reconciler_synced(ps.ops, started, root_dir_sync(m->root), m);
        free(ps.ops);
        if (full)
                object_watches_sweep(m->watches);
        /* ... and the lookups no pass used since the round began go. */
        if (m->resync_round_ends) {
                m->resync_round_ends = false;
                object_watches_round_sweep(m->watches, m->resync_epoch);
        }
        if (!wakes_broken(m))
                manager_arm_retry_timer(m, wakes_next(m));
        else if (full)
                manager_arm_retry_timer(m, ps.next_retry);
        else
                manager_lower_retry_timer(m, ps.next_retry);
        if (started > 0)
                log_debug("Reconcile pass (%s) started %zu operations%s: %.1f ms", full ? "full" : "scoped",
                          started, ps.held_back || over_budget > 0 ? ", held back more" : "",
                          (double) (monotonic_usec() - ps.started) / USEC_PER_MSEC);
        /* A full slice (by count or by the time its records took): the next
         * one after whatever else the loop has due.  Held back only by a
         * driver's limit: its next answer schedules it. */
        if ((ps.n_ops >= RECONCILE_SLICE || over_budget > 0) && slices_held(m) > 0)
                (void) sd_event_source_set_enabled(m->pass_source, SD_EVENT_ONESHOT);
        if (m->verify_incremental)
                counts_verify(m);
        if (m->pass_hook)
                m->pass_hook(monotonic_usec() - ps.started, m->pass_userdata);
        podview_pass_done(m);
        /* An operation that ended inside this pass (one with no CSI call to
         * wait for, say an unstage for a driver without STAGE_UNSTAGE) has
         * scheduled the pass that follows it up: not missed, only not yet due. */
        if (!full && m->verify_incremental && !m->full_pass_wanted && hashmap_size(m->dirty_pods) == 0 &&
            hashmap_size(m->dirty_volumes) == 0 && slices_held(m) == 0) {
                PassState check = { .now = ps.now, .next_retry = UINT64_MAX, .verify = true };
                m->verifying = true;
                plan_everything(m, &check);
                m->verifying = false;
                assert(check.n_ops == 0);
                /* The index a deleted pod's volumes are found by says what the volumes say. */
                assert(pod_index_agrees(m->pod_index, m->volumes));
        }
}
