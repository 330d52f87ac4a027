/* SPDX-License-Identifier: Apache-2.0 */
#include <assert.h>
#include <stdio.h>

#include "volume/internal.h"

ActualVolume *actual_volume_new(const VolumeSpec *spec) {
        ActualVolume *av = actual_volume_new_empty(spec->kind, spec->lifecycle, spec->unique_name, spec->driver,
                                                   spec->handle, spec->spec_name);
        if (av) {
                av->block = spec->block;
                av->migrated_from = spec->migrated_from;
        }
        return av;
}

/* Copies of strings (NULL stays NULL) placed after a struct of `size` bytes,
 * in one zeroed allocation: the struct and its strings go with one free(). */
static void *alloc_with_strings(size_t size, size_t n, const char *const *src, const char **ret_copies) {
        size_t len[8], total = size;
        char *block, *at;

        assert(n <= ELEMENTSOF(len));
        for (size_t i = 0; i < n; i++) {
                len[i] = src[i] ? strlen(src[i]) + 1 : 0;
                total += len[i];
        }
        block = calloc(1, total);
        if (!block)
                return NULL;
        at = block + size;
        for (size_t i = 0; i < n; i++) {
                ret_copies[i] = src[i] ? memcpy(at, src[i], len[i]) : NULL;
                at += len[i];
        }
        return block;
}

/* driver and handle: NULL for a kind without them (only CSI has them). */
ActualVolume *actual_volume_new_empty(const VolumeKind *kind, VolumeLifecycle lifecycle, const char *unique_name,
                                      const char *driver, const char *handle, const char *spec_name) {
        const char *const src[] = { unique_name, driver, handle };
        const char *copy[ELEMENTSOF(src)];
        ActualVolume *av;

        assert(unique_name && spec_name);
        av = alloc_with_strings(sizeof *av, ELEMENTSOF(src), src, copy);
        if (!av)
                return NULL;
        av->unique_name = copy[0];
        av->driver = copy[1];
        av->handle = copy[2];
        av->spec_name = strdup(spec_name);
        av->kind = kind;
        av->lifecycle = lifecycle;
        /* Keyed by the pod UID each publish holds. */
        av->publishes = hashmap_new_borrowing();
        /* pod_ops and backoffs are made at their first entry
         * (hashmap_ensure_put): most volumes have neither for good, and
         * two empty maps were 96 bytes of each (issue 31, memory). */
        if (!av->spec_name || !av->publishes)
                return actual_volume_free(av);
        return av;
}

static void publish_free(ActualPublish *p) {
        if (!p)
                return;
        free(p); /* its strings with it */
}

ActualVolume *actual_volume_free(ActualVolume *av) {
        void *value;

        if (!av)
                return NULL;
        for (size_t i = 0; hashmap_iterate(av->publishes, &i, NULL, &value);)
                publish_free(value);
        hashmap_free(av->publishes);
        /* Operations in flight are freed by their owner first (actual_volume_free_ops). */
        hashmap_free(av->pod_ops);
        for (size_t i = 0; hashmap_iterate(av->backoffs, &i, NULL, &value);)
                free(value);
        hashmap_free(av->backoffs);
        free(av->last_error);
        free(av->last_error_pod);
        free(av->selinux_context);
        free(av->spec_name);
        free(av); /* unique_name, driver and handle with it */
        return NULL;
}

/* ---- the counts (counts.c): each setter takes out what the old value
 * counted and adds what the new one counts ------------------------------ */

static void count(unsigned *counter, bool counted, int sign) {
        if (counted)
                *counter += (unsigned) sign; /* -1: wraps to a decrement */
}

static void count_publish(VolumeCounts *c, const ActualVolume *av, const ActualPublish *p, int sign) {
        if (!c || !p)
                return;
        plugin_counts_publish(c, av, p, sign);
        count(&c->published, p->state == PUBLISH_DONE, sign);
        count(&c->uncertain, p->state == PUBLISH_UNCERTAIN, sign);
        count(&c->mounts_pending, p->mount_pending, sign);
}

static void count_volume_own(const ActualVolume *av, int sign) {
        VolumeCounts *c = av->counts;

        if (!c)
                return;
        count(&c->staged, av->stage == STAGE_DONE, sign);
        count(&c->uncertain, av->stage == STAGE_UNCERTAIN, sign);
        count(&c->attach_waiting, av->attach_wait_since != 0, sign);
        count(&c->unresponsive, av->unresponsive_since != 0, sign);
        count(&c->mounts_pending, av->mount_pending, sign);
}

/* What its pod volumes' states are judged from changed (counts.c). */
static void stale(const ActualVolume *av) {
        if (av->counts)
                counts_volume_stale(av->counts, av->unique_name);
}

static void note_backoffs(ActualVolume *av) {
        if (!av->counts)
                return;
        stale(av);
        if (hashmap_size(av->backoffs) == 0)
                (void) hashmap_remove(av->counts->with_backoffs, av->unique_name);
        else if (hashmap_put(av->counts->with_backoffs, av->unique_name, av, NULL) < 0)
                av->counts->broken = true;
}

void actual_volume_count_in(ActualVolume *av, VolumeCounts *counts) {
        void *value;

        assert(!av->counts);
        av->counts = counts;
        stale(av); /* its pods may now find it: judged again, and its publishes */
        count_volume_own(av, +1);
        for (size_t i = 0; hashmap_iterate(av->publishes, &i, NULL, &value);)
                count_publish(counts, av, value, +1);
        note_backoffs(av);
}

void actual_volume_count_out(ActualVolume *av) {
        void *value;

        if (!av->counts)
                return;
        count_volume_own(av, -1);
        for (size_t i = 0; hashmap_iterate(av->publishes, &i, NULL, &value);)
                count_publish(av->counts, av, value, -1);
        (void) hashmap_remove(av->counts->with_backoffs, av->unique_name);
        /* Its publishes leave the states now (it may be freed before the
         * next read); the pods that wanted it are judged again then. */
        av->counts->by_state[POD_VOLUME_TEARING_DOWN] -= av->counted_tearing_down;
        av->counted_tearing_down = 0;
        stale(av);
        av->counts = NULL;
}

/* A change of state the counts follow: the object leaves its old state's
 * count and enters its new one's. */
#define RECOUNT_VOLUME(av, change)                                                                         \
        do {                                                                                               \
                count_volume_own(av, -1);                                                                  \
                change;                                                                                    \
                count_volume_own(av, +1);                                                                  \
                stale(av);                                                                                 \
        } while (0)
#define RECOUNT_PUBLISH(av, p, change)                                                                     \
        do {                                                                                               \
                count_publish((av)->counts, (av), p, -1);                                                  \
                change;                                                                                    \
                count_publish((av)->counts, (av), p, +1);                                                  \
                stale(av);                                                                                 \
        } while (0)

void actual_publish_set_state(ActualVolume *av, ActualPublish *p, PublishState state) {
        RECOUNT_PUBLISH(av, p, p->state = state);
}

void actual_publish_set_mount_pending(ActualVolume *av, ActualPublish *p, bool pending) {
        RECOUNT_PUBLISH(av, p, p->mount_pending = pending);
}

void actual_volume_set_stage(ActualVolume *av, StageState stage) {
        RECOUNT_VOLUME(av, av->stage = stage);
}

void actual_volume_set_mount_pending(ActualVolume *av, bool pending) {
        RECOUNT_VOLUME(av, av->mount_pending = pending);
}

void actual_volume_set_attach_wait(ActualVolume *av, uint64_t since) {
        RECOUNT_VOLUME(av, av->attach_wait_since = since);
}

void actual_volume_set_unresponsive(ActualVolume *av, uint64_t since) {
        RECOUNT_VOLUME(av, av->unresponsive_since = since);
}

int actual_publish_set(ActualVolume *av, const PodInfo *pod, const char *spec_name, const char *target,
                       PublishState state) {
        ActualPublish *p = hashmap_get(av->publishes, pod->uid);

        if (p) {
                actual_publish_set_state(av, p, state);
                return 0;
        }
        const char *const src[] = { pod->uid, pod->key, spec_name, target };
        const char *copy[ELEMENTSOF(src)];
        p = alloc_with_strings(sizeof *p, ELEMENTSOF(src), src, copy);
        if (!p)
                return -ENOMEM;
        p->pod_uid = copy[0];
        p->pod_key = copy[1];
        p->spec_name = copy[2];
        p->target = copy[3];
        p->state = state;
        if (hashmap_put(av->publishes, p->pod_uid, p, NULL) < 0) {
                publish_free(p);
                return -ENOMEM;
        }
        count_publish(av->counts, av, p, +1);
        stale(av);
        pod_index_sync(av->pod_index, av, pod->uid);
        return 0;
}

void actual_publish_remove(ActualVolume *av, const char *pod_uid) {
        ActualPublish *p = hashmap_remove(av->publishes, pod_uid);

        count_publish(av->counts, av, p, -1);
        stale(av);
        publish_free(p);
        pod_index_sync(av->pod_index, av, pod_uid);
}

static int backoff_key(OpKind kind, const char *pod_uid, char buf[static 64]) {
        return snprintf(buf, 64, "%s/%s", op_kind_to_string(kind), strempty(pod_uid));
}

Backoff *actual_backoff(ActualVolume *av, OpKind kind, const char *pod_uid, bool create) {
        char key[64];
        Backoff *b;

        backoff_key(kind, pod_uid, key);
        b = hashmap_get(av->backoffs, key);
        if (b || !create)
                return b;
        b = calloc(1, sizeof *b);
        if (!b || hashmap_ensure_put(&av->backoffs, key, b, NULL) < 0) {
                free(b);
                return NULL;
        }
        note_backoffs(av);
        return b;
}

void actual_backoff_forget(ActualVolume *av, OpKind kind, const char *pod_uid) {
        char key[64];
        backoff_key(kind, pod_uid, key);
        free(hashmap_remove(av->backoffs, key));
        note_backoffs(av);
}

Backoff *actual_backoff_failed(ActualVolume *av, OpKind kind, const char *pod_uid, uint64_t now) {
        Backoff *b = actual_backoff(av, kind, pod_uid, true);

        if (b)
                backoff_failed(b, now);
        stale(av); /* a backoff forgiven before fails again: failed once more */
        return b;
}

void actual_volume_reset_backoffs(ActualVolume *av) {
        void *b;

        for (size_t i = 0; hashmap_iterate(av->backoffs, &i, NULL, &b);)
                backoff_reset(b);
        stale(av);
}

static bool per_pod(OpKind kind) {
        return kind == OP_PUBLISH || kind == OP_UNPUBLISH;
}

bool actual_volume_busy(const ActualVolume *av) {
        return av->op || hashmap_size(av->pod_ops) > 0;
}

bool actual_volume_pod_busy(const ActualVolume *av, const char *pod_uid) {
        return av->op || (pod_uid && hashmap_get(av->pod_ops, pod_uid));
}

bool actual_volume_op_allowed(const ActualVolume *av, OpKind kind, const char *pod_uid, bool one_call_per_volume) {
        if (per_pod(kind) && !one_call_per_volume)
                return !actual_volume_pod_busy(av, pod_uid);
        return !actual_volume_busy(av);
}

int actual_volume_add_op(ActualVolume *av, Operation *op) {
        int r;

        assert(op->av == av);
        if (!per_pod(op->kind)) {
                av->op = op;
                return 0;
        }
        r = hashmap_ensure_put(&av->pod_ops, op->pod.uid, op, NULL);
        pod_index_sync(av->pod_index, av, op->pod.uid);
        return r;
}

void actual_volume_remove_op(ActualVolume *av, Operation *op) {
        if (av->op == op)
                av->op = NULL;
        else if (op->pod.uid && hashmap_get(av->pod_ops, op->pod.uid) == op) {
                (void) hashmap_remove(av->pod_ops, op->pod.uid);
                pod_index_sync(av->pod_index, av, op->pod.uid);
        }
}

void actual_volume_free_ops(ActualVolume *av) {
        const char *key;
        void *value;

        operation_free(TAKE_PTR(av->op));
        for (size_t i = 0; hashmap_iterate(av->pod_ops, &i, &key, &value);) {
                Operation *op = value;
                (void) hashmap_remove(av->pod_ops, key);
                pod_index_sync(av->pod_index, av, op->pod.uid);
                operation_free(op);
        }
}

void pod_info_done(PodInfo *p) {
        free(p->uid);
        free(p->namespace);
        free(p->name);
        free(p->key);
        free(p->service_account);
        free(p->fs_group_change_policy);
        *p = (PodInfo){};
}

int pod_info_copy(const PodInfo *from, PodInfo *to) {
        *to = (PodInfo){ .has_fs_group = from->has_fs_group, .fs_group = from->fs_group };
        if (strdup_or_null(from->uid, &to->uid) < 0 || strdup_or_null(from->namespace, &to->namespace) < 0 ||
            strdup_or_null(from->name, &to->name) < 0 || strdup_or_null(from->key, &to->key) < 0 ||
            strdup_or_null(from->service_account, &to->service_account) < 0 ||
            strdup_or_null(from->fs_group_change_policy, &to->fs_group_change_policy) < 0) {
                pod_info_done(to);
                return -ENOMEM;
        }
        return 0;
}

int pod_info_from_desired(const DesiredPod *p, PodInfo *ret) {
        PodInfo view = {
                .uid = p->uid,
                .namespace = p->namespace,
                .name = p->name,
                .key = p->key,
                .service_account = p->service_account,
                .has_fs_group = p->has_fs_group,
                .fs_group = p->fs_group,
                .fs_group_change_policy = p->fs_group_change_policy,
        };
        return pod_info_copy(&view, ret);
}
