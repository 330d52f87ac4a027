/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "k8s/writers.h"
#include "systemd/log.h"
#include "systemd/testhook.h"
#include "systemd/trace.h"
#include "systemd/validate.h"
#include "volume/host/paths.h"
#include "volume/internal.h"

#define IN_USE_RETRY_USEC (2 * USEC_PER_SEC)

/* ---- scheduling ------------------------------------------------------------------ */

static int on_pass(sd_event_source *s, void *userdata) {
        reconciler_pass(userdata);
        return 0;
}

void manager_schedule_pass(VolumeManager *m) {
        /* A deferred source runs once per loop iteration however often it
         * is enabled: a burst of events costs one pass. */
        m->full_pass_wanted = true;
        (void) sd_event_source_set_enabled(m->pass_source, SD_EVENT_ONESHOT);
}

static void schedule_scoped(VolumeManager *m, Hashmap *set, const char *key) {
        /* Out of memory: the whole node instead. */
        if (key && hashmap_put(set, key, m, NULL) < 0)
                m->full_pass_wanted = true;
        (void) sd_event_source_set_enabled(m->pass_source, SD_EVENT_ONESHOT);
}

/* The runtime answered: a full pass, as the pods it frees may be gone from
 * the informer (a scoped pass finds those only through their publishes). */
static void on_runtime_answer(void *userdata) {
        manager_schedule_pass(userdata);
}

void manager_schedule_pod_pass(VolumeManager *m, const char *pod_uid) {
        schedule_scoped(m, m->dirty_pods, pod_uid);
}

void manager_schedule_volume_pass(VolumeManager *m, const char *unique_name) {
        schedule_scoped(m, m->dirty_volumes, unique_name);
}

bool manager_retry_due(VolumeManager *m, uint64_t now) {
        int enabled = SD_EVENT_OFF;
        uint64_t armed = 0;

        (void) sd_event_source_get_enabled(m->retry_timer, &enabled);
        return enabled != SD_EVENT_OFF && sd_event_source_get_time(m->retry_timer, &armed) >= 0 &&
               armed <= now;
}

void manager_lower_retry_timer(VolumeManager *m, uint64_t when) {
        int enabled = SD_EVENT_OFF;
        uint64_t armed = 0;

        if (when == 0 || when == UINT64_MAX)
                return;
        (void) sd_event_source_get_enabled(m->retry_timer, &enabled);
        if (enabled != SD_EVENT_OFF && sd_event_source_get_time(m->retry_timer, &armed) >= 0 &&
            armed <= when)
                return;
        manager_arm_retry_timer(m, when);
}

/* A retry, warning or republish came due: a pass scoped to what came due
 * (the pass takes the due wakes, wakes.c), or a full one if some may have
 * been lost. */
static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        VolumeManager *m = userdata;

        if (wakes_broken(m))
                manager_schedule_pass(m);
        else
                (void) sd_event_source_set_enabled(m->pass_source, SD_EVENT_ONESHOT);
        return 0;
}

/* For test/bench/resync.sh: the pods whose path met a slice, told from the
 * others.  KEY: "<pods>+<volumes>" of the slice. */
static void trace_slice(size_t pods, size_t volumes) {
        char key[48];

        if (test_trace_now() == 0)
                return;
        (void) snprintf(key, sizeof key, "%zu+%zu", pods, volumes);
        test_trace("resync-slice", key);
}

/* The safety net, rolling: each round looks at every pod and volume of the
 * node once, a slice of about RESYNC_SLICE_ITEMS volumes' worth of each at
 * a time, the slices spread over resync-interval.  A slice is what the events of its
 * pods and volumes would be: their lookups fetched again (final or not),
 * the pods rebuilt, all of it planned by a scoped pass, whose decisions are
 * a full pass's (and which the tests' check verifies like any other).  Once
 * a full pass per interval did it all at once: ~70 ms beside 10,000
 * volumes, during which a new pod waited.  What that pass did for the whole
 * node is done by the round: the retries of what a slice plans are noted
 * again (pass_wake), and its end sweeps the lookups no pass used since it
 * began and compares volumesInUse with the Node (reconciler.c). */
static void resync_slice(VolumeManager *m) {
        size_t pods = 0, volumes = 0, cost = 0;
        ResyncLink *k;

        if (!m->resync_in_round) {
                resync_list_rewind(&m->resync_pods);
                resync_list_rewind(&m->resync_volumes);
                m->resync_slices = resync_slices_for(MAX(m->resync_pods.n, m->resync_volumes.n),
                                                     m->resync_slice_items);
                m->resync_epoch = object_watches_round_begin(m->watches);
                m->resync_in_round = true;
                log_debug("Resync: a round over %zu pods and %zu volumes, in %zu slices", m->resync_pods.n,
                          m->resync_volumes.n, m->resync_slices);
        }
        /* A pod costs the pass what its volumes do: a slice of pods of ten
         * volumes each would otherwise plan ten times the volumes. */
        for (; cost < m->resync_slice_items && (k = resync_list_take(&m->resync_pods)); pods++) {
                PodEntry *e = (PodEntry *) ((char *) k - offsetof(PodEntry, resync));
                _cleanup_free_ char *asker = manager_asker_of_pod(e->uid);
                cost += MAX(e->desired ? e->desired->n_volumes : 0, (size_t) 1);
                if (asker)
                        object_watches_refresh_asker(m->watches, asker);
                e->dirty = true;
                manager_schedule_pod_pass(m, e->uid);
        }
        for (; volumes < m->resync_slice_items && (k = resync_list_take(&m->resync_volumes)); volumes++) {
                ActualVolume *av = (ActualVolume *) ((char *) k - offsetof(ActualVolume, resync));
                _cleanup_free_ char *asker = manager_asker_of_volume(av->unique_name);
                if (asker)
                        object_watches_refresh_asker(m->watches, asker);
                manager_schedule_volume_pass(m, av->unique_name);
        }
        log_debug("Resync: a slice of %zu pods and %zu volumes", pods, volumes);
        trace_slice(pods, volumes);
        if (resync_list_done(&m->resync_pods) && resync_list_done(&m->resync_volumes)) {
                m->resync_in_round = false;
                m->resync_round_ends = true;
                (void) sd_event_source_set_enabled(m->pass_source, SD_EVENT_ONESHOT);
        }
}

/* Tests make the slices small, to see a round of a few pods rolled over
 * several (KVOLUMED_TEST_RESYNC_SLICE_ITEMS). */
static size_t resync_slice_items(void) {
        return test_hook_ulong("RESYNC_SLICE_ITEMS", RESYNC_SLICE_ITEMS);
}

static int on_resync(sd_event_source *s, uint64_t usec, void *userdata) {
        VolumeManager *m = userdata;

        resync_slice(m);
        (void) sd_event_source_set_time_relative(s, m->resync_interval_usec / MAX(m->resync_slices, (size_t) 1));
        (void) sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
        return 0;
}

void manager_arm_retry_timer(VolumeManager *m, uint64_t when) {
        if (when == 0 || when == UINT64_MAX) {
                (void) sd_event_source_set_enabled(m->retry_timer, SD_EVENT_OFF);
                return;
        }
        (void) sd_event_source_set_time(m->retry_timer, when);
        (void) sd_event_source_set_enabled(m->retry_timer, SD_EVENT_ONESHOT);
}

/* ---- lookups ---------------------------------------------------------------------- */

bool manager_node_lists_attached(VolumeManager *m, const char *unique_name) {
        const K8sNode *node = k8s_informer_get(m->node, NULL, m->node_name);
        for (size_t i = 0; node && i < node->n_volumes_attached; i++)
                if (streq_ptr(node->volumes_attached[i].name, unique_name))
                        return true;
        return false;
}

#define ASKER_POD "pod/"
#define ASKER_VOLUME "volume/"

static char *asker_new(const char *prefix, const char *name) {
        char *s = NULL;
        return asprintf(&s, "%s%s", prefix, name) < 0 ? NULL : s;
}

char *manager_asker_of_pod(const char *pod_uid) {
        return asker_new(ASKER_POD, pod_uid);
}

char *manager_asker_of_volume(const char *unique_name) {
        return asker_new(ASKER_VOLUME, unique_name);
}

/* The name after an asker's prefix; NULL for another prefix. */
static const char *asker_name(const char *asker, const char *prefix) {
        size_t n = strlen(prefix);
        return strncmp(asker, prefix, n) == 0 ? asker + n : NULL;
}

/* The ClusterView of one pod's rebuild: its lookups are the pod's. */
typedef struct PodLookups {
        VolumeManager *m;
        const char *asker;
} PodLookups;

static int view_get_pvc(void *userdata, const char *namespace, const char *name,
                        const K8sPersistentVolumeClaim **ret) {
        PodLookups *l = userdata;
        int r = object_watches_get(l->m->watches, &k8s_kind_pvc, namespace, name, l->asker,
                                   (const void **) ret);
        /* A claim name that cannot exist is simply not found. */
        return r == -EAGAIN || r == -EACCES ? r : 0;
}

static int view_get_pv(void *userdata, const char *name, const K8sPersistentVolume **ret) {
        PodLookups *l = userdata;
        int r = object_watches_get(l->m->watches, &k8s_kind_pv, NULL, name, l->asker, (const void **) ret);
        return r == -EAGAIN || r == -EACCES ? r : 0;
}

/* A configMap or secret of the pod's volumes: a GET, then a watch of that
 * one object by name (watches.c), never a list of the namespace. */
static int view_get_configmap(void *userdata, const char *namespace, const char *name, const K8sConfigMap **ret) {
        PodLookups *l = userdata;
        int r = object_watches_get(l->m->watches, &k8s_kind_configmap, namespace, name, l->asker,
                                   (const void **) ret);
        return r == -EAGAIN || r == -EACCES ? r : 0;
}

static int view_get_secret(void *userdata, const char *namespace, const char *name, const K8sSecret **ret) {
        PodLookups *l = userdata;
        int r = object_watches_get(l->m->watches, &k8s_kind_secret, namespace, name, l->asker,
                                   (const void **) ret);
        return r == -EAGAIN || r == -EACCES ? r : 0;
}

static const K8sNode *view_get_node(void *userdata) {
        PodLookups *l = userdata;
        return l->m->node ? k8s_informer_get(l->m->node, NULL, l->m->node_name) : NULL;
}

static const char *view_lookup_error(void *userdata, const K8sKind *kind, const char *namespace,
                                     const char *name) {
        PodLookups *l = userdata;
        return object_watches_error(l->m->watches, kind, namespace, name);
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
void manager_report_once(VolumeManager *m, PodEntry *e, const DesiredPod *p, const char *volume,
                         const char *reason, const char *message) {
        char *last = hashmap_get(e->reported, volume);
        PodInfo info = { .uid = p->uid, .namespace = p->namespace, .name = p->name, .key = p->key };
        LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = volume };

        /* DRIVER= and VOLUME_HANDLE= when the volume's source is known: an
         * operator filters the driver's failures (a driver not registered
         * is one) with journalctl DRIVER=... */
        for (size_t i = 0; i < p->n_volumes; i++)
                if (streq(p->volumes[i].name, volume) && p->volumes[i].spec) {
                        f.driver = p->volumes[i].spec->driver;
                        f.volume_handle = p->volumes[i].spec->handle;
                        break;
                }

        /* What kubelet's WaitForAttachAndMount answers at once (podview.c):
         * every FailedMount here is one only a change of the objects or
         * the driver's registration clears. */
        if (streq(reason, "FailedMount"))
                podview_volume_failed(e, volume);
        /* Which class of failure it is, for kvolumed_volumes_failed{reason}
         * (describe.c tells a FailedMount's apart). */
        if (!e->report_kinds)
                e->report_kinds = hashmap_new();
        if (e->report_kinds)
                (void) hashmap_put(e->report_kinds, volume,
                                   (void *) (uintptr_t) (1 + (streq(reason, "FailedAttachVolume") ? POD_VOLUME_FAILURE_ATTACH
                                                   : streq(reason, "VolumeAttachmentLimitExceeded")
                                                           ? POD_VOLUME_FAILURE_ATTACH_LIMIT
                                                   : streq(reason, "VolumeSourceChanged")
                                                           ? POD_VOLUME_FAILURE_SOURCE_CHANGED
                                                           : POD_VOLUME_FAILURE_REFUSED)),
                                   NULL);
        if (streq_ptr(last, message))
                return;
        if (m->verifying) {
                log_fields(LOG_ERR, &f, "Incremental pass missed: event %s for volume %s of pod %s: %s",
                           reason, volume, p->key, message);
                return;
        }
        char *copy = strdup(message);
        if (!copy || hashmap_put(e->reported, volume, copy, NULL) < 0) {
                free(copy);
                return;
        }
        free(last);
        counts_pod_stale(&m->counts, e->uid); /* reported: failed (podstate.c) */
        /* Every class of failure found before any CSI call (its claim, its
         * driver, its lifecycle mode, its attachment) has the one MESSAGE_ID
         * whose catalog entry needs no CSI_METHOD= (a failed call has its
         * own).  A source change is news, not a failure. */
        if (!streq(reason, "VolumeSourceChanged"))
                f.message_id = LOG_MESSAGE_ID_VOLUME_BLOCKED;
        log_fields(LOG_NOTICE, &f, "Volume %s of pod %s: %s", volume, p->key, message);
        manager_pod_event(m, &info, "Warning", reason, "%s", message);
}

void manager_report_source_changed(VolumeManager *m, PodEntry *e, const DesiredPod *p,
                                   const DesiredVolume *dv, const char *kept_spec_name,
                                   const char *kept_unique_name) {
        _cleanup_free_ char *message = NULL;
        if (asprintf(&message,
                     "Volume \"%s\" now resolves to PersistentVolume \"%s\" (%s); the running pod keeps "
                     "\"%s\" (%s) until it is restarted",
                     dv->name, dv->spec->spec_name, dv->spec->unique_name, kept_spec_name,
                     kept_unique_name) >= 0)
                manager_report_once(m, e, p, dv->name, "VolumeSourceChanged", message);
}

void manager_report_clear(VolumeManager *m, PodEntry *e, const char *volume) {
        free(hashmap_remove(e->reported, volume));
        counts_pod_stale(&m->counts, e->uid);
        if (e->report_kinds)
                (void) hashmap_remove(e->report_kinds, volume);
        podview_volume_planned(e, volume);
}

int manager_add_volume(VolumeManager *m, ActualVolume *av) {
        int r = hashmap_put(m->volumes, av->unique_name, av, NULL);
        if (r < 0)
                return r;
        if (av->lifecycle == VOLUME_PERSISTENT) {
                r = hashmap_put(m->persistent, av->unique_name, av, NULL);
                if (r < 0) {
                        (void) hashmap_remove(m->volumes, av->unique_name);
                        return r;
                }
        }
        /* From now on actual.c keeps the index of pods in step with av. */
        av->pod_index = m->pod_index;
        pod_index_add_volume(m->pod_index, av);
        actual_volume_count_in(av, &m->counts);
        mount_watch_add_volume(m, av);
        resync_list_add(&m->resync_volumes, &av->resync);
        return 0;
}

void manager_remove_volume(VolumeManager *m, ActualVolume *av) {
        (void) hashmap_remove(m->volumes, av->unique_name);
        (void) hashmap_remove(m->persistent, av->unique_name);
        pod_index_remove_volume(m->pod_index, av);
        av->pod_index = NULL;
        actual_volume_count_out(av);
        mount_watch_remove_volume(m, av);
        resync_list_remove(&m->resync_volumes, &av->resync);
}

/* ---- pods --------------------------------------------------------------------------- */

/* What is kept of a pod's desired state outside it (the wanters of its
 * persistent volumes, the status line's counts): noted once it is set,
 * forgotten before it changes or goes. */
static void desired_noted(VolumeManager *m, PodEntry *e) {
        wanters_note(m, e);
        counts_pod_noted(m, e);
}

static void desired_forgotten(VolumeManager *m, PodEntry *e) {
        wanters_forget(m, e);
        counts_pod_forgotten(m, e);
}

static PodEntry *pod_entry_free(PodEntry *e) {
        void *value;

        if (!e)
                return NULL;
        desired_pod_free(e->desired);
        for (size_t i = 0; hashmap_iterate(e->reported, &i, NULL, &value);)
                free(value);
        hashmap_free(e->reported);
        hashmap_free(e->final);
        hashmap_free(e->report_kinds);
        free(e->counted_failures);
        free(e->counted_plugins); /* the tallies are the counts' */
        free(e->uid);
        free(e->namespace);
        free(e->name);
        free(e->resource_version);
        free(e->reported_invalid);
        free(e);
        return NULL;
}

/* The pods come from a list and watch with fieldSelector=spec.nodeName=<node>,
 * but an answer may ignore the selector (a proxy that drops it, a server bug,
 * the in-cluster mode with an identity that may list every pod): then every
 * pod of the cluster would be set up here.  A pod whose spec.nodeName is not
 * this node, or not set yet, is none of this node's business.  One warning
 * says the API is not answering what was asked; the rest go to debug, as a
 * cluster has many pods. */
/* The kinds' node-wide services hear of the pods and the Node (volume/kind.h). */
static void kinds_pod_changed(VolumeManager *m, const K8sPod *pod) {
        for (const VolumeKind *const *k = volume_kinds(); *k; k++)
                if ((*k)->pod_changed)
                        (*k)->pod_changed(m, pod);
}

static void kinds_node_changed(VolumeManager *m, const K8sNode *node) {
        for (const VolumeKind *const *k = volume_kinds(); *k; k++)
                if ((*k)->node_changed)
                        (*k)->node_changed(m, node);
}

static bool pod_on_this_node(VolumeManager *m, const K8sPod *pod) {
        char buf[256];
        LogFields f = { .pod_uid = pod->meta.uid, .pod = k8s_meta_describe(&pod->meta, buf, sizeof buf) };

        if (streq_ptr(pod->node_name, m->node_name))
                return true;
        log_fields(m->warned_other_node ? LOG_DEBUG : LOG_WARNING, &f,
                   "Ignoring pod %s: its spec.nodeName \"%s\" is not this node (%s), although pods were "
                   "asked for with fieldSelector=spec.nodeName=%s%s",
                   f.pod, strempty(pod->node_name), m->node_name, m->node_name,
                   m->warned_other_node ? ""
                                        : "; the API answers more than it was asked: pods of other nodes "
                                          "are ignored from now on without another warning");
        m->warned_other_node = true;
        return false;
}

static void pod_changed(VolumeManager *m, const K8sPod *pod) {
        PodEntry *e = hashmap_get(m->pod_entries, pod->meta.uid);

        if (!pod_on_this_node(m, pod))
                return;
        if (!e) {
                e = calloc(1, sizeof *e);
                if (!e || !(e->uid = strdup(pod->meta.uid)) || !(e->reported = hashmap_new()) ||
                    hashmap_put(m->pod_entries, e->uid, e, NULL) < 0) {
                        log_error("Out of memory tracking pod %s", pod->meta.name);
                        pod_entry_free(e);
                        return;
                }
                resync_list_add(&m->resync_pods, &e->resync);
        }
        (void) free_and_strdup(&e->namespace, pod->meta.namespace);
        (void) free_and_strdup(&e->name, pod->meta.name);
        (void) free_and_strdup(&e->resource_version, pod->meta.resource_version);
        e->dirty = true;
        /* Claims cannot be watched; a pod added or updated is the hint one was just bound. */
        object_watches_refresh(m->watches, &k8s_kind_pvc);
        object_watches_refresh(m->watches, &k8s_kind_pv);
        kinds_pod_changed(m, pod); /* ... or grown */
        manager_schedule_pod_pass(m, e->uid);
}

static void on_pod_add(K8sInformer *i, const void *obj, void *userdata) {
        pod_changed(userdata, obj);
        test_trace("noted", ((const K8sPod *) obj)->meta.uid);
}

static void on_pod_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        pod_changed(userdata, new);
}

/* A pod gone: the claims and PVs only it looked up are not read again. */
static void forget_lookups(VolumeManager *m, PodEntry *e) {
        _cleanup_free_ char *asker = manager_asker_of_pod(e->uid);
        object_watches_forget_asker(m->watches, asker);
}

static void on_pod_delete(K8sInformer *i, const void *old, void *userdata) {
        VolumeManager *m = userdata;
        const K8sPod *pod = old;

        if (!streq_ptr(pod->node_name, m->node_name))
                return; /* never tracked: see pod_on_this_node() */
        PodEntry *e = hashmap_remove(m->pod_entries, pod->meta.uid);

        /* Its volumes are no longer desired; the actual state keeps what is
         * mounted, and the next pass tears that down: each volume it wanted,
         * published or not (a staged one may have no publish yet). */
        for (size_t v = 0; e && e->desired && v < e->desired->n_volumes; v++)
                if (e->desired->volumes[v].spec)
                        manager_schedule_volume_pass(m, e->desired->volumes[v].spec->unique_name);
        if (e) {
                desired_forgotten(m, e);
                forget_lookups(m, e);
                resync_list_remove(&m->resync_pods, &e->resync);
        }
        pod_entry_free(e);
        manager_schedule_pod_pass(m, pod->meta.uid);
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

/* The node's own object: its status.volumesAttached and volumesInUse, its
 * annotations and labels. */
static void on_node_add(K8sInformer *i, const void *obj, void *userdata) {
        reconciler_node_seen(userdata, obj);
        kinds_node_changed(userdata, obj);
        manager_schedule_pass(userdata);
}

static bool same_attached(const K8sNode *a, const K8sNode *b) {
        if (a->n_volumes_attached != b->n_volumes_attached)
                return false;
        /* The attach/detach controller keeps the list's order. */
        for (size_t i = 0; i < a->n_volumes_attached; i++)
                if (!streq_ptr(a->volumes_attached[i].name, b->volumes_attached[i].name))
                        return false;
        return true;
}

/* Schedules the volumes in one list and not in the other (listed in
 * volumesInUse is what lets an attachable volume be staged); false when
 * that could not be told (out of memory). */
static bool schedule_in_use_changes(VolumeManager *m, char **a, char **b) {
        _cleanup_(hashmap_freep) Hashmap *in_a = hashmap_new(), *in_b = hashmap_new();

        if (!in_a || !in_b)
                return false;
        for (char **s = a; s && *s; s++)
                if (hashmap_put(in_a, *s, m, NULL) < 0)
                        return false;
        for (char **s = b; s && *s; s++)
                if (hashmap_put(in_b, *s, m, NULL) < 0)
                        return false;
        for (char **s = a; s && *s; s++)
                if (!hashmap_get(in_b, *s))
                        manager_schedule_volume_pass(m, *s);
        for (char **s = b; s && *s; s++)
                if (!hashmap_get(in_a, *s))
                        manager_schedule_volume_pass(m, *s);
        return true;
}

/* A Node is updated for many reasons kvolumed reads nothing of (heartbeats,
 * conditions, images, its own annotations and volumesInUse coming back), and
 * a full pass per update was node-sized work per event.  The reconciler reads
 * of it only which volumes are attached (attachment waits and attach limits:
 * a change makes a full pass) and which are in use (a change plans the
 * volumes that entered or left the list); a Node created again plans
 * everything, and any other update nothing. */
static void on_node_update(K8sInformer *i, const void *old, const void *new, void *userdata) {
        VolumeManager *m = userdata;
        const K8sNode *before = old, *after = new;

        reconciler_node_seen(m, after);
        kinds_node_changed(m, after);
        if (!before || !after || !streq_ptr(before->meta.uid, after->meta.uid)) {
                object_watches_refresh(m->watches, &k8s_kind_volume_attachment);
                manager_schedule_pass(m);
                return;
        }
        if (!same_attached(before, after)) {
                /* status.volumesAttached changes when the attach/detach
                 * controller saw a VolumeAttachment attached: the one event
                 * that says so (they cannot be watched).  A full pass: a
                 * volume detached may make room under a driver's attach
                 * limit for volumes the list does not name. */
                object_watches_refresh(m->watches, &k8s_kind_volume_attachment);
                manager_schedule_pass(m);
        }
        /* A volume newly listed may be staged now (kubelet's "reported in
         * use"); one no longer listed is compared again by the pass. */
        if (!schedule_in_use_changes(m, before->volumes_in_use, after->volumes_in_use))
                manager_schedule_pass(m);
}

static void on_informer_error(K8sInformer *i, int error, long status, const char *message, void *userdata) {
        /* The informer (or, for an unreachable server, the client) logged it. */
        log_debug("Watching %s: %s", k8s_informer_kind(i)->plural, strempty(message));
}

/* A claim, PV or VolumeAttachment answered anew: a pass of those that
 * looked it up (a pod is rebuilt from it), not of the node. */
static void on_watch_changed(const char *const *askers, size_t n_askers, void *userdata) {
        VolumeManager *m = userdata;

        if (!askers) {
                manager_schedule_pass(m);
                return;
        }
        for (size_t i = 0; i < n_askers; i++) {
                const char *uid = asker_name(askers[i], ASKER_POD),
                           *volume = asker_name(askers[i], ASKER_VOLUME);
                PodEntry *e = uid ? hashmap_get(m->pod_entries, uid) : NULL;
                if (e) {
                        e->dirty = true;
                        manager_schedule_pod_pass(m, e->uid);
                } else if (volume)
                        manager_schedule_volume_pass(m, volume);
        }
}

/* A volume that follows objects (a configMap, a secret) whose object went
 * keeps its files as they are, as kubelet's do: said once, in the log and an
 * Event with kubelet's words, until the object comes back. */
static void note_kept(VolumeManager *m, PodEntry *e, const DesiredPod *p, DesiredVolume *dv,
                      const DesiredVolume *before) {
        const char *why = dv->waiting ?: dv->failed;
        PodInfo info = { .uid = p->uid, .namespace = p->namespace, .name = p->name, .key = p->key };
        LogFields f = { .pod_uid = p->uid, .pod = p->key, .volume = dv->name,
                        .message_id = LOG_MESSAGE_ID_VOLUME_BLOCKED };

        if (free_and_strdup(&dv->kept, why) < 0 || streq_ptr(before->kept, why))
                return;
        log_fields(LOG_WARNING, &f, "Volume %s of pod %s keeps its last content: %s", dv->name, p->key, why);
        manager_pod_event(m, &info, "Warning", "FailedMount",
                          "MountVolume.SetUp failed for volume \"%s\" : %s; its files keep their last content",
                          dv->name, why);
}

/* Rebuilds a pod's desired volumes from the informer's pod and the watches. */
void manager_rebuild_pod(VolumeManager *m, PodEntry *e) {
        const K8sPod *pod = k8s_informer_get(m->pods, e->namespace, e->name);
        _cleanup_free_ char *asker = manager_asker_of_pod(e->uid);
        PodLookups lookups = { m, asker };
        ClusterView view = {
                .get_pvc = view_get_pvc,
                .get_pv = view_get_pv,
                .get_configmap = view_get_configmap,
                .get_secret = view_get_secret,
                .get_node = view_get_node,
                .runner_kinds = m->runner_kinds,
                .userdata = &lookups,
                .lookup_error = view_lookup_error,
        };
        DesiredPod *p = NULL;
        const char *field = NULL;
        DesiredPod *old;
        int r;

        desired_forgotten(m, e);
        old = TAKE_PTR(e->desired);

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
                        _cleanup_free_ char *key = NULL;
                        if (asprintf(&key, "%s/%s", strempty(e->namespace), strempty(e->name)) < 0)
                                key = NULL;
                        LogFields f = { .pod_uid = e->uid, .pod = key, .message_id = LOG_MESSAGE_ID_VOLUME_BLOCKED };
                        log_fields(LOG_WARNING, &f,
                                   "Pod %s/%s has an invalid %s; none of its volumes is set up",
                                   strempty(e->namespace), strempty(e->name), field);
                        (void) free_and_strdup(&e->reported_invalid, field);
                        if (validate_uid(e->uid) >= 0)
                                manager_pod_event(m, &info, "Warning", "FailedMount",
                                                  "Unable to set up the pod's volumes: invalid %s", field);
                }
                return;
        }
        if (r < 0) {
                log_error_errno(r, "Failed to build the desired volumes of pod %s/%s: %m", e->namespace,
                                e->name);
                e->desired = old;
                e->dirty = true;
                desired_noted(m, e);
                return;
        }
        /* As in kubelet, a volume once resolved stays desired until the pod
         * goes: a claim that cannot be looked up for a moment (a PVC deleted
         * under a running pod) must never unmount it.  And what it resolved
         * to is pinned: a PV deleted and re-created under the same name with
         * another handle, or a claim bound elsewhere, must not tear down the
         * running pod's volume nor publish another one at its path. */
        for (size_t v = 0; old && v < p->n_volumes; v++) {
                DesiredVolume *dv = &p->volumes[v];
                const DesiredVolume *before = desired_pod_find_volume(old, dv->name);
                if (!before || !before->spec)
                        continue;
                if (dv->spec && streq(dv->spec->unique_name, before->spec->unique_name) &&
                    streq(dv->spec->spec_name, before->spec->spec_name))
                        continue;
                if (dv->spec) {
                        manager_report_source_changed(m, e, p, dv, before->spec->spec_name,
                                                      before->spec->unique_name);
                        volume_spec_free(dv->spec);
                }
                dv->spec = TAKE_PTR(((DesiredVolume *) before)->spec);
                if (dv->spec->follows_objects && !dv->looking_up && (dv->waiting || dv->failed))
                        note_kept(m, e, p, dv, before);
                dv->waiting = mfree_str(dv->waiting);
                dv->failed = mfree_str(dv->failed);
                dv->looking_up = false;
        }
        desired_pod_free(old);
        e->desired = p;
        e->dirty = false;
        desired_noted(m, e);
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
                describe_note_outcome(m, op, success);
                /* What may follow concerns this volume and this pod only. */
                manager_schedule_volume_pass(m, op->av->unique_name);
                if (op->pod.uid)
                        manager_schedule_pod_pass(m, op->pod.uid);
                if (op->av->kind->ended)
                        op->av->kind->ended(m, op);
                slices_finished(m, actual_volume_queue(op->av));
                if (op->av->lifecycle == VOLUME_PERSISTENT)
                        m->in_use_dirty = true;
                actual_volume_remove_op(op->av, op);
                operation_free(op);
        } else
                manager_schedule_volume_pass(m, NULL); /* volumesInUse: looked at in every pass */
        m->n_running--;
        maybe_stopped(m);
}

bool manager_one_call_per_volume(VolumeManager *m, const char *driver) {
        return hashmap_get(m->one_call_per_volume, driver) != NULL;
}

void manager_learn_one_call_per_volume(VolumeManager *m, const char *driver) {
        LogFields f = { .driver = driver };
        if (manager_one_call_per_volume(m, driver) ||
            hashmap_put(m->one_call_per_volume, driver, m, NULL) < 0)
                return;
        log_fields(LOG_NOTICE, &f,
                   "CSI driver %s refuses concurrent calls on one volume (ABORTED): the pods "
                   "sharing one of its volumes are published one at a time from now on",
                   driver);
}

void volume_manager_stop(VolumeManager *m, volume_manager_stopped_t stopped, void *userdata) {
        m->stopping = true;
        root_watch_stop(m); /* before "stopped" is set: that is said once, below */
        m->stopped = stopped;
        m->stopped_userdata = userdata;
        if (m->n_running > 0)
                log_info("Waiting for %u operations in flight before stopping", m->n_running);
        maybe_stopped(m);
}

/* Driver registration (on_registered and the rest) lives in drivers.c. */

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
        m->republish_interval_usec =
                o->republish_interval_usec ? o->republish_interval_usec : USEC_PER_MINUTE;
        m->expand_check_interval_usec = o->expand_check_interval_usec;
        m->attach_limit_refresh_usec = o->attach_limit_refresh_usec;
        m->selinux_enabled = selinux_host_enabled();
        m->selinux_mount_all = o->selinux_mount_all;
        if (desired_parse_runner_kinds(o->runner_kinds, &m->runner_kinds) < 0)
                return -ENOMEM;
        m->node_name = strdup(o->node_name);
        /* Keyed by strings their values hold for life: e->uid, av->unique_name. */
        m->pod_entries = hashmap_new_borrowing();
        m->volumes = hashmap_new_borrowing();
        m->caps = hashmap_new();
        m->one_call_per_volume = hashmap_new();
        m->restored_publishes = hashmap_new();
        m->newer_records = hashmap_new();
        m->dirty_pods = hashmap_new();
        m->dirty_volumes = hashmap_new();
        m->wanters = hashmap_new();
        m->persistent = hashmap_new_borrowing();
        m->verify_incremental = o->verify_incremental;
        m->resync_slice_items = resync_slice_items();
        m->prepare_delay_usec = o->prepare_delay_usec;
        m->max_pending = o->max_pending ?: VOLUME_PENDING_PER_PARALLEL * 64;
        r = slices_new(&m->slices);
        if (r < 0)
                return r;
        r = pod_index_new(&m->pod_index);
        if (r < 0)
                return r;
        r = counts_init(&m->counts);
        if (r < 0)
                return r;
        r = mount_watch_new(&m->mount_watch);
        if (r < 0)
                return r;
        r = wakes_new(&m->wakes);
        if (r < 0)
                return r;
        if (!m->node_name || !m->pod_entries || !m->volumes || !m->caps || !m->one_call_per_volume ||
            !m->restored_publishes || !m->newer_records || !m->dirty_pods || !m->dirty_volumes ||
            !m->wanters || !m->persistent)
                return -ENOMEM;

        /* fsGroup ownership changes run in child processes reaped by sd-event. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -errno;

        /* The directory the lock holds, not whatever the path names by now. */
        r = o->root_lock ? root_dir_open_fd(o->root_dir, root_lock_fd(o->root_lock), &m->root)
                         : root_dir_open(o->root_dir, &m->root);
        if (r < 0)
                return r;
        if (o->root_lock) {
                r = root_watch_new(m, o->root_lock);
                if (r < 0)
                        return log_error_errno(r, "Failed to watch root-dir %s: %m", o->root_dir);
        }
        r = root_sync_new(event, m->root, reconciler_synced, m, &m->sync);
        if (r < 0)
                return r;
        r = object_watches_new(k8s, on_watch_changed, m, &m->watches);
        if (r < 0)
                return r;
        r = mount_table_new(event, m->root->path,
                            o->mount_source_mountinfo ? MOUNT_SOURCE_MOUNTINFO : MOUNT_SOURCE_AUTO,
                            mount_watch_changed, m, &m->mounts);
        if (r < 0)
                return log_error_errno(r, "Failed to read the mount table: %m");
        r = runtime_gate_new(event, o->runtime_endpoint, on_runtime_answer, m, &m->runtime);
        if (r < 0)
                return r;
        r = boot_id_read(m->boot_id);
        if (r < 0)
                return log_error_errno(r, "Failed to read the boot ID: %m");
        /* The records a power loss took, written back before they are read;
         * one that cannot be stops the start (the log keeps it for the next):
         * reconstruction without it would forget what its call may have set up. */
        r = root_dir_replay_intents(m->root, m->boot_id);
        if (r < 0)
                return r;
        /* Before any pass: nothing found on disk may be forgotten. */
        r = reconstruct_actual_state(m);
        if (r < 0)
                return r;
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
        static const K8sInformerHandlers node_handlers = {
                .on_add = on_node_add,
                .on_update = on_node_update,
                .on_delete = on_any_add,
                .on_synced = on_synced,
                .on_error = on_informer_error,
        };
        r = k8s_informer_new_pods_on_node(k8s, m->node_name, &pod_handlers, m, &m->pods);
        if (r >= 0)
                r = k8s_informer_new_csidrivers(k8s, &other_handlers, m, &m->csidrivers);
        if (r >= 0)
                r = k8s_informer_new_node(k8s, m->node_name, &node_handlers, m, &m->node);
        if (r < 0)
                return log_error_errno(r, "Failed to create the informers: %m");

        r = sd_event_add_defer(event, &m->pass_source, on_pass, m);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->pass_source, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_time(event, &m->retry_timer, CLOCK_MONOTONIC, UINT64_MAX, USEC_PER_MSEC,
                                      on_timer, m); /* backoff is in ms; 0 would be 250 ms of slack */
        if (r >= 0)
                r = sd_event_source_set_enabled(m->retry_timer, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_time_relative(event, &m->resync_timer, CLOCK_MONOTONIC,
                                               m->resync_interval_usec, USEC_PER_SEC, on_resync, m);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(m->pass_source, "reconcile-pass");
        (void) sd_event_source_set_description(m->retry_timer, "reconcile-retry");
        (void) sd_event_source_set_description(m->resync_timer, "reconcile-resync");

        for (const VolumeKind *const *k = volume_kinds(); *k; k++)
                if ((*k)->setup) {
                        r = (*k)->setup(m);
                        if (r < 0)
                                return r;
                }
        *ret = TAKE_PTR(m);
        return 0;
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
        for (const VolumeKind *const *k = volume_kinds(); *k; k++)
                if ((*k)->start) {
                        r = (*k)->start(m);
                        if (r < 0)
                                return r;
                }
        return 0;
}

VolumeManager *volume_manager_free(VolumeManager *m) {
        void *value;

        if (!m)
                return NULL;
        root_watch_free(m); /* the operations it holds go with their volumes below */
        podview_detach_all(m);
        k8s_strv_free(m->runner_kinds);
        for (const VolumeKind *const *k = volume_kinds(); *k; k++)
                if ((*k)->free)
                        (*k)->free(m);
        runtime_gate_free(m->runtime);
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                ActualVolume *av = value;
                actual_volume_free_ops(av);
                actual_volume_free(av);
        }
        hashmap_free(m->volumes);
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);)
                pod_entry_free(value);
        hashmap_free(m->pod_entries);
        for (size_t i = 0; hashmap_iterate(m->caps, &i, NULL, &value);)
                free(value);
        hashmap_free(m->caps);
        hashmap_free(m->one_call_per_volume);
        for (size_t i = 0; hashmap_iterate(m->restored_publishes, &i, NULL, &value);)
                free(value);
        hashmap_free(m->restored_publishes);
        hashmap_free(m->newer_records);
        hashmap_free(m->dirty_pods);
        hashmap_free(m->dirty_volumes);
        slices_free(m->slices);
        hashmap_free(m->persistent);
        pod_index_free(m->pod_index); /* after the volumes: freeing their operations tells it */
        counts_done(&m->counts);
        mount_watch_free(m->mount_watch);
        wakes_free(m->wakes);
        root_sync_free(m->sync);
        wanters_free_all(m);
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
        k8s_strv_free(m->in_use_sent);
        k8s_strv_free(m->in_use_sending);
        free(m->node_name);
        sd_event_unref(m->event);
        free(m);
        return NULL;
}

void volume_manager_set_republish_interval(VolumeManager *m, uint64_t usec) {
        m->republish_interval_usec = usec ?: USEC_PER_MINUTE;
}

void volume_manager_set_metrics_hook(VolumeManager *m, volume_metrics_hook_t hook, void *userdata) {
        m->metrics_hook = hook;
        m->metrics_userdata = userdata;
}

void volume_manager_set_pass_hook(VolumeManager *m, volume_pass_hook_t hook, void *userdata) {
        m->pass_hook = hook;
        m->pass_userdata = userdata;
}

void volume_manager_set_root_hook(VolumeManager *m, volume_root_hook_t hook, void *userdata) {
        m->root_hook = hook;
        m->root_userdata = userdata;
}

bool volume_manager_synced(VolumeManager *m) {
        return k8s_informer_synced(m->pods) && k8s_informer_synced(m->csidrivers) &&
               k8s_informer_synced(m->node);
}

const char *volume_manager_waiting_for(VolumeManager *m) {
        if (!k8s_informer_synced(m->pods))
                return "the first pod list";
        if (!k8s_informer_synced(m->csidrivers))
                return "the first CSIDriver list";
        if (!k8s_informer_synced(m->node))
                return "the node object";
        return NULL;
}

static VolumeManagerStats uncounted_stats(VolumeManager *m) {
        return (VolumeManagerStats){ .pods = hashmap_size(m->pod_entries),
                                     .running = m->n_running,
                                     .visited = m->visited,
                                     .held_back = slices_held(m),
                                     .mounts_seen = m->mounts_seen };
}

/* The walk of every pod and volume: the tests' check of the counts kept in
 * step (counts.c), and what they fall back to when memory ran out once. */
void volume_manager_get_stats(VolumeManager *m, VolumeManagerStats *ret) {
        VolumeManagerStats s = uncounted_stats(m);
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
                s.attach_waiting += av->attach_wait_since != 0;
                s.failing += describe_volume_failing(m, av);
                s.unresponsive += av->unresponsive_since != 0;
                s.mounts_pending += av->mount_pending;
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);) {
                        const ActualPublish *pub = pv;
                        s.published += pub->state == PUBLISH_DONE;
                        s.uncertain += pub->state == PUBLISH_UNCERTAIN;
                        s.mounts_pending += pub->mount_pending;
                }
        }
        describe_count_states(m, s.by_state);
        *ret = s;
}

void volume_manager_get_counts(VolumeManager *m, VolumeManagerStats *ret) {
        VolumeManagerStats s = uncounted_stats(m);

        if (!counts_get(m, &s)) {
                volume_manager_get_stats(m, ret);
                return;
        }
        *ret = s;
}
