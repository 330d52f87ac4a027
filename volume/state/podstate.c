/* SPDX-License-Identifier: Apache-2.0 */
/* The one judgement of a pod's volume (issue 34): its state in the one
 * vocabulary (published, pending, failed, tearing-down), why it failed and
 * whose that is to fix, and whether the runner's wait gives up on it; and
 * the counts made from it.  kvolumed_volumes{state} and the metrics an
 * operator alerts on, STATUS=, /volumes (describe.c), the local API
 * (podview.c) and so "kvolumed status" all read it here, so that a stuck
 * volume reads the same in every tool.  Judged when asked, from memory. */
#include <stdlib.h>

#include "systemd/trace.h"
#include "volume/internal.h"

const char *pod_volume_state_to_string(PodVolumeState s) {
        static const char *const names[_POD_VOLUME_STATE_MAX] = {
                [POD_VOLUME_FAILED] = "failed",
                [POD_VOLUME_PENDING] = "pending",
                [POD_VOLUME_PUBLISHED] = "published",
                [POD_VOLUME_TEARING_DOWN] = "tearing-down",
        };
        return s >= 0 && s < _POD_VOLUME_STATE_MAX ? names[s] : NULL;
}

/* A stage of the volume, or this pod's publish, failed and waits for its retry. */
static bool failing_for_pod(const ActualVolume *av, const char *pod_uid) {
        const char *key;
        void *value;

        for (size_t i = 0; hashmap_iterate(av->backoffs, &i, &key, &value);) {
                const char *slash = strchr(key, '/');
                if (((const Backoff *) value)->last_error_usec == 0 || !slash ||
                    strncmp(key, "unpublish/", strlen("unpublish/")) == 0)
                        continue;
                if (isempty(slash + 1) || streq(slash + 1, pod_uid))
                        return true;
        }
        return false;
}

const char *pod_volume_failure_to_string(PodVolumeFailure f) {
        static const char *const names[_POD_VOLUME_FAILURE_MAX] = {
                [POD_VOLUME_FAILURE_CLAIM] = "claim-not-bound",
                [POD_VOLUME_FAILURE_INVALID_SPEC] = "invalid-spec",
                [POD_VOLUME_FAILURE_REFUSED] = "refused",
                [POD_VOLUME_FAILURE_DRIVER_MISSING] = "driver-missing",
                [POD_VOLUME_FAILURE_CSI] = "csi-error",
                [POD_VOLUME_FAILURE_ATTACH] = "attach-timeout",
                [POD_VOLUME_FAILURE_ATTACH_LIMIT] = "attach-limit",
                [POD_VOLUME_FAILURE_SOURCE_CHANGED] = "source-changed",
        };
        return f > 0 && f < _POD_VOLUME_FAILURE_MAX ? names[f] : NULL;
}

bool pod_volume_failure_is_tenants(PodVolumeFailure f) {
        return f == POD_VOLUME_FAILURE_CLAIM || f == POD_VOLUME_FAILURE_INVALID_SPEC ||
               f == POD_VOLUME_FAILURE_REFUSED;
}

/* A CSI call of the volume failed with a final code and will only be
 * retried after its backoff: kubelet's pod error, which the runner gets at
 * once rather than after its whole timeout. */
static bool csi_failed_finally(VolumeManager *m, const ActualVolume *av, const char *uid) {
        return av->last_error && av->last_error_final && describe_volume_failing(m, av) &&
               (!av->last_error_pod || streq(av->last_error_pod, uid)) && !actual_volume_pod_busy(av, uid) &&
               (av->last_error_op == OP_STAGE || av->last_error_op == OP_PUBLISH);
}

/* The class of what was reported for the volume (manager_report_once): a
 * FailedMount is the driver's absence when its kind does not refuse the
 * volume and says its driver is not there, else a refusal of the pod's use
 * of the volume. */
static PodVolumeFailure reported_failure(VolumeManager *m, const PodEntry *e, const DesiredVolume *dv,
                                         const ActualVolume *av) {
        uintptr_t kind = e->report_kinds ? (uintptr_t) hashmap_get(e->report_kinds, dv->name) : 0;
        PodVolumeFailure f = kind > 0 ? (PodVolumeFailure) (kind - 1) : POD_VOLUME_FAILURE_REFUSED;
        const VolumeSpec *s = dv->spec;

        /* The reconciler's order: its kind's refusal (a lifecycle mode),
         * then its driver's registration, then the pod's conflicts. */
        if (f == POD_VOLUME_FAILURE_REFUSED && s && s->kind->available) {
                const ActualVolume planned = { .kind = s->kind, .driver = s->driver, .handle = s->handle,
                                               .spec_name = s->spec_name };
                char buf[512];
                if (!(s->kind->refuses && s->kind->refuses(m, s, buf, sizeof buf)) &&
                    !s->kind->available(m, av ?: &planned))
                        f = POD_VOLUME_FAILURE_DRIVER_MISSING;
        }
        return f;
}

/* Published wins over everything (a running pod has its volume); then what
 * was reported to the pod as a FailedMount-like Event and not cleared since
 * (manager_report_once: a claim not bound, the driver not registered after
 * its grace, a lifecycle mode refused, an attach that takes too long); then
 * a failed CSI call waiting for its retry.  Anything else is on its way.
 * "final" is the runner's: what kubelet's WaitForAttachAndMount gives up on
 * at once; a failed volume that a retry alone may fix is not. */
void describe_pod_volume(VolumeManager *m, const PodEntry *e, const DesiredVolume *dv, PodVolumeStatus *ret) {
        const char *reported = hashmap_get(e->reported, dv->name);
        const ActualVolume *av = NULL;
        const ActualPublish *pub = NULL;
        PodVolumeStatus st = { .state = POD_VOLUME_PENDING };

        m->counts.judged++;

        if (dv->spec) {
                av = hashmap_get(m->volumes, dv->spec->unique_name);
                pub = av ? hashmap_get(av->publishes, e->uid) : NULL;
        }
        if (pub && pub->state == PUBLISH_DONE && av->stage != STAGE_UNCERTAIN)
                st.state = POD_VOLUME_PUBLISHED;
        else if (dv->failed)
                st = (PodVolumeStatus){ .state = POD_VOLUME_FAILED, .failure = POD_VOLUME_FAILURE_INVALID_SPEC,
                                        .reason = dv->failed, .final = true };
        else if (!dv->spec && !dv->looking_up)
                /* kubelet's populator fails the pod for it (an unbound claim,
                 * a missing PV): its pod worker sees the error at once. */
                st = (PodVolumeStatus){ .state = POD_VOLUME_FAILED, .failure = POD_VOLUME_FAILURE_CLAIM,
                                        .reason = reported ?: dv->waiting, .final = true };
        else if (reported) {
                bool busy = av && actual_volume_pod_busy(av, e->uid);
                st = (PodVolumeStatus){ .state = POD_VOLUME_FAILED,
                                        .failure = reported_failure(m, e, dv, av),
                                        .reason = reported,
                                        .final = (e->final && hashmap_get(e->final, dv->name) && !busy) ||
                                                 (av && csi_failed_finally(m, av, e->uid)) };
        } else if (av && failing_for_pod(av, e->uid))
                st = (PodVolumeStatus){ .state = POD_VOLUME_FAILED, .failure = POD_VOLUME_FAILURE_CSI,
                                        .reason = av->last_error, .final = csi_failed_finally(m, av, e->uid) };
        else if (!dv->spec)
                st.reason = dv->waiting;
        *ret = st;
}

bool describe_publish_tearing_down(VolumeManager *m, const ActualVolume *av, const ActualPublish *pub) {
        return !reconciler_pod_wants(m, pub->pod_uid, av->unique_name, pub->spec_name);
}

bool describe_driver_named(VolumeManager *m, const char *driver, bool persistent) {
        /* A PV's driver, a CSIDriver object's or one registered here: named
         * by the cluster's administrators, not by whoever writes a pod. */
        return persistent || csi_client_has_driver(m->csi, driver) || k8s_informer_get(m->csidrivers, NULL, driver);
}

const char *describe_driver_label(VolumeManager *m, const VolumeSpec *s) {
        if (!s || isempty(s->driver))
                return "";
        return describe_driver_named(m, s->driver, s->lifecycle == VOLUME_PERSISTENT) ? s->driver : "other";
}

void describe_count_states(VolumeManager *m, unsigned by_state[static _POD_VOLUME_STATE_MAX]) {
        void *value, *pv;

        for (size_t i = 0; i < _POD_VOLUME_STATE_MAX; i++)
                by_state[i] = 0;
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                const PodEntry *e = value;
                for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                        PodVolumeStatus st;
                        describe_pod_volume(m, e, &e->desired->volumes[v], &st);
                        by_state[st.state]++;
                }
        }
        /* What a pod wants is counted with its desired volumes above. */
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, NULL, &value);) {
                const ActualVolume *av = value;
                for (size_t j = 0; hashmap_iterate(av->publishes, &j, NULL, &pv);)
                        by_state[POD_VOLUME_TEARING_DOWN] += describe_publish_tearing_down(m, av, pv);
        }
}

/* ---- for the metrics an operator alerts on --------------------------------------- */

int pod_volumes_judge(VolumeManager *m, const PodEntry *e, unsigned by_state[static _POD_VOLUME_STATE_MAX],
                      PodFailure **ret_failures, size_t *ret_n_failures, bool ret_unready[static 2]) {
        _cleanup_free_ PodFailure *failures = NULL;
        size_t n = 0;
        int r = 0;

        ret_unready[0] = ret_unready[1] = false;
        for (size_t v = 0; e->desired && v < e->desired->n_volumes; v++) {
                PodVolumeStatus st;
                describe_pod_volume(m, e, &e->desired->volumes[v], &st);
                by_state[st.state]++;
                if (st.state == POD_VOLUME_PUBLISHED)
                        continue;
                ret_unready[st.state == POD_VOLUME_FAILED && pod_volume_failure_is_tenants(st.failure)] = true;
                if (st.state != POD_VOLUME_FAILED)
                        continue;
                /* Most pods have none: an array only for those that do. */
                PodFailure *f = reallocarray(failures, n + 1, sizeof *f);
                if (!f) {
                        r = -ENOMEM; /* the rest uncounted, and said so */
                        continue;
                }
                failures = f;
                failures[n++] = (PodFailure){ .volume = v, .failure = st.failure };
        }
        *ret_failures = TAKE_PTR(failures);
        *ret_n_failures = n;
        return r;
}

/* pod_volumes_judge() for what the metrics read, the counts left alone. */
static void judge_now(VolumeManager *m, const PodEntry *e, PodFailure **ret_failures, size_t *ret_n_failures,
                      bool ret_unready[static 2]) {
        unsigned by_state[_POD_VOLUME_STATE_MAX] = {};
        (void) pod_volumes_judge(m, e, by_state, ret_failures, ret_n_failures, ret_unready);
}

typedef struct FailedKey {
        PodVolumeFailure failure;
        const char *driver;
} FailedKey;

static int cmp_failed(const void *a, const void *b) {
        const FailedKey *x = a, *y = b;
        return x->failure != y->failure ? (x->failure > y->failure) - (x->failure < y->failure)
                                        : strcmp(x->driver, y->driver);
}

static int add_failed(VolumeManager *m, const PodEntry *e, const PodFailure *failures, size_t n_failures,
                      FailedKey **keys, size_t *n, size_t *allocated) {
        for (size_t i = 0; i < n_failures; i++) {
                const VolumeSpec *spec =
                        failures[i].volume < e->desired->n_volumes ? e->desired->volumes[failures[i].volume].spec
                                                                   : NULL;
                if (*n == *allocated) {
                        FailedKey *k = reallocarray(*keys, *allocated * 2 + 8, sizeof *k);
                        if (!k)
                                return -ENOMEM;
                        *keys = k;
                        *allocated = *allocated * 2 + 8;
                }
                /* The label now: a driver registering changes it, not the judgement. */
                (*keys)[(*n)++] = (FailedKey){ failures[i].failure, describe_driver_label(m, spec) };
        }
        return 0;
}

/* The failed pod volumes as (reason, driver) keys, sorted: from each pod's
 * kept judgement (walk false: a scrape judged every pod volume again here
 * and in oldest_unready(), and with the two counts of plugins.c held the
 * loop 22.6 ms beside 10,000 volumes, issue 31), or judged now (walk true:
 * the counts are broken, or the tests' check). */
static int failed_keys(VolumeManager *m, bool walk, FailedKey **ret, size_t *ret_n) {
        _cleanup_free_ FailedKey *keys = NULL;
        size_t n = 0, allocated = 0;
        void *value;

        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                const PodEntry *e = value;
                int r;

                if (!e->desired)
                        continue;
                if (walk) {
                        _cleanup_free_ PodFailure *failures = NULL;
                        size_t n_failures;
                        bool unready[2];
                        judge_now(m, e, &failures, &n_failures, unready);
                        r = add_failed(m, e, failures, n_failures, &keys, &n, &allocated);
                } else
                        r = add_failed(m, e, e->counted_failures, e->n_counted_failures, &keys, &n, &allocated);
                if (r < 0)
                        return r;
        }
        if (n > 0)
                qsort(keys, n, sizeof *keys, cmp_failed);
        *ret = TAKE_PTR(keys);
        *ret_n = n;
        return 0;
}

static void oldest_unready(VolumeManager *m, bool walk, uint64_t oldest[static 2]) {
        void *value;

        oldest[0] = oldest[1] = UINT64_MAX; /* [0]: the node's, [1]: the tenants' */
        for (size_t i = 0; hashmap_iterate(m->pod_entries, &i, NULL, &value);) {
                const PodEntry *e = value;
                bool unready[2];

                if (e->wanted_since == 0 || (e->wanted_since >= oldest[0] && e->wanted_since >= oldest[1]))
                        continue;
                if (walk) {
                        _cleanup_free_ PodFailure *failures = NULL;
                        size_t n_failures;
                        judge_now(m, e, &failures, &n_failures, unready);
                } else
                        memcpy(unready, e->counted_unready, sizeof unready);
                for (size_t k = 0; k < 2; k++)
                        if (unready[k])
                                oldest[k] = MIN(oldest[k], e->wanted_since);
        }
}

/* TEST ONLY: how many pod volumes a scrape's part judged (KVOLUMED_TEST_TRACE_FILE). */
static void trace_judged(VolumeManager *m, const char *step, uint64_t before) {
#if KVOLUMED_TEST_HOOKS
        char n[24];
        (void) snprintf(n, sizeof n, "%" PRIu64, m->counts.judged - before);
        test_trace(step, n);
#endif
}

void volume_manager_count_failed(VolumeManager *m, volume_failed_count_t cb, void *userdata) {
        _cleanup_free_ FailedKey *keys = NULL;
        uint64_t before = m->counts.judged;
        size_t n;
        int r;

        r = failed_keys(m, !counts_settle(m), &keys, &n);
        trace_judged(m, "scrape-judged-failed", before);
        if (r < 0)
                return;
        for (size_t i = 0, run = 1; i < n; i++, run++)
                if (i + 1 == n || cmp_failed(&keys[i], &keys[i + 1]) != 0) {
                        cb(strempty(pod_volume_failure_to_string(keys[i].failure)), keys[i].driver, (unsigned) run,
                           userdata);
                        run = 0;
                }
}

void volume_manager_oldest_unready(VolumeManager *m, double *ret_node, double *ret_tenant) {
        uint64_t now = 0, oldest[2], before = m->counts.judged;

        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        oldest_unready(m, !counts_settle(m), oldest);
        trace_judged(m, "scrape-judged-oldest", before);
        *ret_node = oldest[0] == UINT64_MAX || now < oldest[0] ? 0 : (double) (now - oldest[0]) / USEC_PER_SEC;
        *ret_tenant = oldest[1] == UINT64_MAX || now < oldest[1] ? 0 : (double) (now - oldest[1]) / USEC_PER_SEC;
}

/* counts_verify()'s part for the metrics: the kept judgement against one made now. */
void podstate_verify_metrics(VolumeManager *m) {
        _cleanup_free_ FailedKey *kept = NULL, *walked = NULL;
        size_t n_kept, n_walked;
        uint64_t oldest_kept[2], oldest_walked[2];

        if (failed_keys(m, false, &kept, &n_kept) >= 0 && failed_keys(m, true, &walked, &n_walked) >= 0) {
                bool same = n_kept == n_walked;
                for (size_t i = 0; same && i < n_kept; i++)
                        same = cmp_failed(&kept[i], &walked[i]) == 0;
                if (!same)
                        log_error("Incremental pass missed: the failed pod volumes by reason and driver are %zu, "
                                  "a walk of the node finds %zu or others",
                                  n_kept, n_walked);
        }
        oldest_unready(m, false, oldest_kept);
        oldest_unready(m, true, oldest_walked);
        for (size_t k = 0; k < 2; k++)
                if (oldest_kept[k] != oldest_walked[k])
                        log_error("Incremental pass missed: the oldest unready pod volume (%s) was wanted since "
                                  "%" PRIu64 ", a walk of the node finds %" PRIu64,
                                  k ? "tenant" : "node", oldest_kept[k], oldest_walked[k]);
}
