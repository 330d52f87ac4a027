/* SPDX-License-Identifier: Apache-2.0 */
/* One pod's volumes for the pod runner (volume/podview.h), and the watches
 * that wake its waiters from the reconcile pass that concerned the pod. */
#include <stdio.h>
#include <stdlib.h>

#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/podview.h"

struct PodWatch {
        VolumeManager *m;
        char *uid;
        pod_watch_changed_t changed;
        void *userdata;
        bool concerned; /* the pass running now looked at the pod */
        PodWatch *prev, *next;
};

PodView *pod_view_free(PodView *v) {
        if (!v)
                return NULL;
        for (size_t i = 0; i < v->n_volumes; i++) {
                free(v->volumes[i].name);
                free(v->volumes[i].driver);
                free(v->volumes[i].host_path);
                free(v->volumes[i].reason);
        }
        free(v->volumes);
        free(v->uid);
        free(v->pod);
        free(v->reason);
        free(v);
        return NULL;
}

static char *abs_path(VolumeManager *m, const char *rel) {
        char *p = NULL;
        if (!rel || asprintf(&p, "%s/%s", m->root->path, rel) < 0)
                return NULL;
        return p;
}

/* Where the pod finds the volume: its kind's publish target, or for a raw
 * block volume the link in the pod's volumeDevices dir. */
static char *host_path(VolumeManager *m, const VolumeSpec *s, const char *uid, const char *spec_name, bool block) {
        _cleanup_free_ char *rel = NULL;
        char *p = NULL;

        if (block) {
                if (path_pod_device_dir(uid, &rel) < 0 ||
                    asprintf(&p, "%s/%s/%s", m->root->path, rel, spec_name) < 0)
                        return NULL;
                return p;
        }
        /* Not set up yet: where its kind would put it, from what the spec says. */
        const ActualVolume planned = { .kind = s->kind, .driver = s->driver, .handle = s->handle,
                                       .spec_name = s->spec_name };
        if (s->kind->paths(&planned, false, uid, spec_name, NULL, &rel) < 0)
                return NULL;
        return abs_path(m, rel);
}

static PodVolumeView *view_add(PodView *v) {
        PodVolumeView *a = reallocarray(v->volumes, v->n_volumes + 1, sizeof *a);
        if (!a)
                return NULL;
        v->volumes = a;
        a[v->n_volumes] = (PodVolumeView){};
        return &a[v->n_volumes++];
}

/* A CSI call of the volume failed with a final code and will only be
 * retried after its backoff: kubelet's pod error, which the runner gets at
 * once rather than after its whole timeout. */
static bool csi_failed_finally(VolumeManager *m, const ActualVolume *av, const char *uid) {
        return av->last_error && av->last_error_final && describe_volume_failing(m, av) &&
               (!av->last_error_pod || streq(av->last_error_pod, uid)) && !actual_volume_pod_busy(av, uid) &&
               (av->last_error_op == OP_STAGE || av->last_error_op == OP_PUBLISH);
}

static int set_str(char **p, const char *s) {
        if (!s)
                return 0;
        *p = strdup(s);
        return *p ? 0 : -ENOMEM;
}

static int describe_wanted(VolumeManager *m, PodEntry *e, const DesiredVolume *dv, PodVolumeView *out) {
        const VolumeSpec *s = dv->spec;
        const char *reported = hashmap_get(e->reported, dv->name);
        bool final = e->final && hashmap_get(e->final, dv->name);
        char buf[512];
        const ActualVolume *av;
        const ActualPublish *pub;
        uint64_t now = 0;

        if (set_str(&out->name, dv->name) < 0)
                return -ENOMEM;
        if (dv->failed) {
                out->state = POD_VOLUME_FAILED;
                return set_str(&out->reason, dv->failed);
        }
        if (!s) {
                /* A claim not bound (or missing) is a pod error for kubelet's
                 * WaitForAttachAndMount; a lookup not answered yet is not. */
                out->state = dv->looking_up ? POD_VOLUME_PENDING : POD_VOLUME_FAILED;
                if (dv->looking_up)
                        return set_str(&out->reason, "looking up its claim and volume");
                snprintf(buf, sizeof buf, "Waiting for volume \"%s\": %s", dv->name, strempty(dv->waiting));
                return set_str(&out->reason, reported ?: buf);
        }
        if (set_str(&out->driver, s->driver) < 0)
                return -ENOMEM;
        out->read_only = s->read_only;
        out->block = s->block;
        av = hashmap_get(m->volumes, s->unique_name);
        pub = av ? hashmap_get(av->publishes, e->uid) : NULL;
        /* A kind whose volume is not under root-dir says where it is (hostPath: the spec's path). */
        if (s->kind->host_path && !s->block) {
                if (s->kind->host_path(s, &out->host_path) < 0)
                        return -ENOMEM;
        } else
                out->host_path = pub && !s->block ? abs_path(m, pub->target)
                                                  : host_path(m, s, e->uid, s->spec_name, s->block);
        if (!out->host_path)
                return -ENOMEM;
        if (pub && pub->state == PUBLISH_DONE && av->stage != STAGE_UNCERTAIN) {
                out->state = POD_VOLUME_PUBLISHED;
                return 0;
        }
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &now);
        out->state = POD_VOLUME_PENDING;
        /* The checks of the reconciler's latest look at this volume (lifecycle
         * mode, driver registered after its grace, SELinux, ReadWriteOncePod). */
        if (final && reported && !(av && actual_volume_pod_busy(av, e->uid))) {
                out->state = POD_VOLUME_FAILED;
                return set_str(&out->reason, reported);
        }
        if (av && csi_failed_finally(m, av, e->uid)) {
                out->state = POD_VOLUME_FAILED;
                return set_str(&out->reason, av->last_error);
        }
        if (av && actual_volume_pod_busy(av, e->uid)) {
                const Operation *op = av->op ?: hashmap_get(av->pod_ops, e->uid);
                snprintf(buf, sizeof buf, "%s in progress",
                         volume_kind_call_name(av->kind, op && op->kind == OP_STAGE ? OP_STAGE : OP_PUBLISH));
                return set_str(&out->reason, buf);
        }
        if (reported)
                return set_str(&out->reason, reported);
        if (av && av->last_error && describe_volume_failing(m, av))
                return set_str(&out->reason, av->last_error);
        if (av && av->kind->waiting && av->kind->waiting(m, av, s, buf, sizeof buf))
                return set_str(&out->reason, buf);
        return set_str(&out->reason, "not published yet");
}

/* A pod known but with no desired volumes has none "all mounted" only
 * vacuously: the runner must not start its containers on that.  Says why
 * it has none, and whether that is final. */
static int describe_nothing_desired(VolumeManager *m, const PodEntry *e, PodView *v) {
        const K8sPod *pod = k8s_informer_get(m->pods, e->namespace, e->name);
        char *reason = NULL;

        v->all_mounted = false;
        if (pod && streq_ptr(pod->meta.uid, e->uid) && !pod_volumes_wanted(pod)) {
                v->failed = true;
                reason = strdup("the pod has terminated or is being deleted: its volumes are not set up");
        } else if (e->reported_invalid) {
                v->failed = true;
                if (asprintf(&reason, "the pod has an invalid %s: none of its volumes is set up",
                             e->reported_invalid) < 0)
                        reason = NULL;
        } else
                /* Its event came; the reconcile pass that reads its volumes
                 * has not run yet (or waits for the informers' first lists). */
                reason = strdup("the pod's volumes are not read yet");
        if (!reason)
                return -ENOMEM;
        v->reason = reason;
        return 0;
}

int volume_manager_describe_pod(VolumeManager *m, const char *uid, PodView **ret) {
        _cleanup_(pod_view_freep) PodView *v = NULL;
        PodEntry *e = hashmap_get(m->pod_entries, uid);
        const char *name;
        void *value;
        int r;

        v = calloc(1, sizeof *v);
        if (!v || !(v->uid = strdup(uid)))
                return -ENOMEM;
        v->all_mounted = v->all_torn_down = true;
        if (e && asprintf(&v->pod, "%s/%s", e->namespace, e->name) < 0) {
                v->pod = NULL;
                return -ENOMEM;
        }
        for (size_t i = 0; e && e->desired && i < e->desired->n_volumes; i++) {
                PodVolumeView *pv = view_add(v);
                if (!pv)
                        return -ENOMEM;
                r = describe_wanted(m, e, &e->desired->volumes[i], pv);
                if (r < 0)
                        return r;
                v->all_mounted = v->all_mounted && pv->state == POD_VOLUME_PUBLISHED;
                v->failed = v->failed || pv->state == POD_VOLUME_FAILED;
        }
        if (e && !e->desired) {
                r = describe_nothing_desired(m, e, v);
                if (r < 0)
                        return r;
        }
        /* What the node has of the pod: kubelet's WaitForUnmount waits for the
         * pod's mounts (uncertain ones too) and, here, for calls in flight. */
        for (size_t i = 0; hashmap_iterate(m->volumes, &i, &name, &value);) {
                ActualVolume *av = value;
                ActualPublish *pub = hashmap_get(av->publishes, uid);
                bool wanted = false;

                if (!pub && !hashmap_get(av->pod_ops, uid))
                        continue;
                v->all_torn_down = false;
                for (size_t j = 0; e && e->desired && j < e->desired->n_volumes; j++) {
                        const VolumeSpec *s = e->desired->volumes[j].spec;
                        wanted = wanted || (s && streq(s->unique_name, av->unique_name));
                }
                if (wanted || !pub)
                        continue;
                if (!v->pod && pub->pod_key && !(v->pod = strdup(pub->pod_key)))
                        return -ENOMEM;
                PodVolumeView *pv = view_add(v);
                if (!pv || set_str(&pv->name, pub->spec_name) < 0 || set_str(&pv->driver, av->driver) < 0)
                        return -ENOMEM;
                pv->state = POD_VOLUME_TEARING_DOWN;
                pv->block = av->block;
                pv->host_path =
                        av->block ? host_path(m, NULL, uid, pub->spec_name, true) : abs_path(m, pub->target);
                if (set_str(&pv->reason,
                            runtime_gate_reason(m->runtime, uid) ?: "the pod no longer wants it") < 0)
                        return -ENOMEM;
        }
        if (!e && v->n_volumes == 0 && v->all_torn_down)
                return -ENOENT;
        *ret = TAKE_PTR(v);
        return 0;
}

/* ---- watches ------------------------------------------------------------------------ */

int volume_manager_watch_pod(VolumeManager *m, const char *uid, pod_watch_changed_t changed, void *userdata,
                             PodWatch **ret) {
        PodWatch *w = calloc(1, sizeof *w);

        if (!w || !(w->uid = strdup(uid))) {
                free(w);
                return -ENOMEM;
        }
        w->m = m;
        w->changed = changed;
        w->userdata = userdata;
        w->next = m->pod_watches;
        if (m->pod_watches)
                m->pod_watches->prev = w;
        m->pod_watches = w;
        *ret = w;
        return 0;
}

PodWatch *pod_watch_free(PodWatch *w) {
        if (!w)
                return NULL;
        if (w->m) {
                if (w->prev)
                        w->prev->next = w->next;
                else
                        w->m->pod_watches = w->next;
                if (w->next)
                        w->next->prev = w->prev;
        }
        free(w->uid);
        free(w);
        return NULL;
}

/* Whether a volume the pass looks at is one the pod wants or has. */
static bool volume_concerns(VolumeManager *m, const char *unique_name, const char *uid, const PodEntry *e) {
        const ActualVolume *av = hashmap_get(m->volumes, unique_name);

        if (av && (hashmap_get(av->publishes, uid) || hashmap_get(av->pod_ops, uid)))
                return true;
        for (size_t v = 0; e && e->desired && v < e->desired->n_volumes; v++) {
                const VolumeSpec *s = e->desired->volumes[v].spec;
                if (s && streq(s->unique_name, unique_name))
                        return true;
        }
        return false;
}

void podview_pass_begins(VolumeManager *m, bool full) {
        const char *name;

        for (PodWatch *w = m->pod_watches; w; w = w->next) {
                const PodEntry *e = hashmap_get(m->pod_entries, w->uid);
                w->concerned = full || hashmap_get(m->dirty_pods, w->uid);
                for (size_t i = 0; !w->concerned && hashmap_iterate(m->dirty_volumes, &i, &name, NULL);)
                        w->concerned = volume_concerns(m, name, w->uid, e);
        }
}

void podview_pass_done(VolumeManager *m) {
        PodWatch *next;

        for (PodWatch *w = m->pod_watches; w; w = next) {
                next = w->next;
                if (!w->concerned)
                        continue;
                w->concerned = false;
                /* May free w (not the others): next was taken before. */
                w->changed(w, w->userdata);
        }
}

void podview_detach_all(VolumeManager *m) {
        for (PodWatch *w = m->pod_watches; w; w = w->next)
                w->m = NULL;
        m->pod_watches = NULL;
}

void podview_volume_planned(PodEntry *e, const char *volume) {
        if (e->final)
                (void) hashmap_remove(e->final, volume);
}

void podview_volume_failed(PodEntry *e, const char *volume) {
        if (!e->final)
                e->final = hashmap_new();
        if (e->final)
                (void) hashmap_put(e->final, volume, e, NULL);
}
