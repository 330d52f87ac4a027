/* SPDX-License-Identifier: Apache-2.0 */
/* One pod's volumes for the pod runner (volume/podview.h), and the watches
 * that wake its waiters from the reconcile pass that concerned the pod. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "volume/host/paths.h"
#include "volume/internal.h"
#include "volume/passes/subpaths.h"
#include "volume/podview.h"
#include "volume/state/desired.h"

struct PodWatch {
        VolumeManager *m;
        char *uid;
        pod_watch_changed_t changed;
        void *userdata;
        bool concerned; /* the pass running now looked at the pod */
        PodWatch *prev, *next;
};

static void mounts_free(PodMountView *a, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(a[i].container_path);
                free(a[i].host_path);
                free(a[i].volume);
        }
        free(a);
}

PodView *pod_view_free(PodView *v) {
        if (!v)
                return NULL;
        for (size_t i = 0; i < v->n_containers; i++) {
                PodContainerView *c = &v->containers[i];
                free(c->name);
                mounts_free(c->mounts, c->n_mounts);
                mounts_free(c->runner_mounts, c->n_runner_mounts);
                for (size_t d = 0; d < c->n_devices; d++) {
                        free(c->devices[d].container_path);
                        free(c->devices[d].host_path);
                }
                free(c->devices);
        }
        free(v->containers);
        for (size_t i = 0; i < v->n_volumes; i++) {
                free(v->volumes[i].runner_type);
                free(v->volumes[i].name);
                free(v->volumes[i].driver);
                free(v->volumes[i].host_path);
                free(v->volumes[i].reason);
        }
        free(v->volumes);
        free(v->supplemental_groups);
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

static int set_str(char **p, const char *s) {
        if (!s)
                return 0;
        *p = strdup(s);
        return *p ? 0 : -ENOMEM;
}

static int describe_wanted(VolumeManager *m, PodEntry *e, const DesiredVolume *dv, PodVolumeView *out) {
        const VolumeSpec *s = dv->spec;
        char buf[512];
        const ActualVolume *av;
        const ActualPublish *pub;
        PodVolumeStatus st;

        if (set_str(&out->name, dv->name) < 0)
                return -ENOMEM;
        /* The state /volumes and the metrics show (state/podstate.c); the runner
         * also learns whether it is final (WaitForAttachAndMount's error). */
        describe_pod_volume(m, e, dv, &st);
        out->state = st.state;
        out->final = st.state == POD_VOLUME_FAILED && st.final;
        if (dv->failed)
                return set_str(&out->reason, dv->failed);
        if (!s) {
                /* A claim not bound (or missing) is a pod error for kubelet's
                 * WaitForAttachAndMount; a lookup not answered yet is not. */
                if (dv->looking_up)
                        return set_str(&out->reason, "looking up its claim and volume");
                snprintf(buf, sizeof buf, "Waiting for volume \"%s\": %s", dv->name, strempty(dv->waiting));
                return set_str(&out->reason, hashmap_get(e->reported, dv->name) ?: buf);
        }
        if (set_str(&out->driver, s->driver) < 0)
                return -ENOMEM;
        out->kind = s->kind->name;
        out->read_only = s->read_only;
        out->block = s->block;
        av = hashmap_get(m->volumes, s->unique_name);
        pub = av ? hashmap_get(av->publishes, e->uid) : NULL;
        if (s->kind->runtime_host_path && !s->block) {
                /* Not under root-dir: what the runtime is given (hostPath's path). */
                if (s->kind->runtime_host_path(s, &out->host_path) < 0)
                        return -ENOMEM;
        } else
                out->host_path = pub && !s->block ? abs_path(m, pub->target)
                                                  : host_path(m, s, e->uid, s->spec_name, s->block);
        if (!out->host_path)
                return -ENOMEM;
        if (st.state == POD_VOLUME_PUBLISHED)
                return 0;
        if (st.state == POD_VOLUME_FAILED && st.reason)
                return set_str(&out->reason, st.reason);
        if (av && actual_volume_pod_busy(av, e->uid)) {
                const Operation *op = av->op ?: hashmap_get(av->pod_ops, e->uid);
                snprintf(buf, sizeof buf, "%s in progress",
                         volume_kind_call_name(av->kind, op && op->kind == OP_STAGE ? OP_STAGE : OP_PUBLISH));
                return set_str(&out->reason, buf);
        }
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

/* A volume left to the runner ([volumes] runner-kinds): listed so that the
 * runner sees it is its own; it neither holds nor fails all_mounted. */
static int describe_runner(const RunnerVolume *rv, PodVolumeView *out) {
        out->kind = "runner";
        out->runner = true;
        out->state = POD_VOLUME_PENDING;
        if (set_str(&out->name, rv->name) < 0 || set_str(&out->runner_type, rv->type) < 0)
                return -ENOMEM;
        if (asprintf(&out->reason, "a %s volume: the pod runner sets it up ([volumes] runner-kinds)", rv->type) < 0) {
                out->reason = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* ---- the runner's mounts (kubelet's makeMounts, makeBlockVolumes) ------------------- */

static const char *cri_propagation(const char *mode) {
        if (streq_ptr(mode, "HostToContainer"))
                return "PROPAGATION_HOST_TO_CONTAINER";
        if (streq_ptr(mode, "Bidirectional"))
                return "PROPAGATION_BIDIRECTIONAL";
        return "PROPAGATION_PRIVATE"; /* unset or None (validated: nothing else gets here) */
}

/* kubelet's resolveRecursiveReadOnly: Enabled asks for it; IfPossible takes
 * it where the runtime handler supports it, which kvolumed does not ask the
 * runtime (false: the runner may set it when its runtime has
 * RuntimeHandlerFeatures.recursive_read_only). */
static bool cri_recursive_read_only(const char *rro) {
        return streq_ptr(rro, "Enabled");
}

static const PodVolumeView *view_find(const PodView *v, const char *name) {
        for (size_t i = 0; i < v->n_volumes; i++)
                if (v->volumes[i].state != POD_VOLUME_TEARING_DOWN && streq(v->volumes[i].name, name))
                        return &v->volumes[i];
        return NULL;
}

/* Where kubelet binds a subPath: pods/<uid>/volume-subpaths/<volume>/<container>/<index>
 * (index: the volumeMount's in the container's list), and whether that bind
 * is in place (volume/passes/subpaths.c binds them at the end of the
 * volume's publish for the pod): until it is, the pod is never all mounted
 * rather than started with the volume's root where it asked for a directory
 * in it. */
static int subpath_bind(VolumeManager *m, const char *uid, const char *volume, const char *container,
                        size_t index, char **ret_path, bool *ret_ready) {
        int r = subpaths_host_path(m, uid, volume, container, (unsigned) index, ret_path);
        if (r == -ENOENT) {
                /* Not known yet: the path it will have, not ready. */
                if (asprintf(ret_path, "%s/pods/%s/volume-subpaths/%s/%s/%zu", m->root->path, uid, volume,
                             container, index) < 0) {
                        *ret_path = NULL;
                        return -ENOMEM;
                }
                r = 0;
        }
        if (r < 0)
                return r;
        *ret_ready = r > 0;
        return 0;
}

static PodMountView *mount_add(PodMountView **a, size_t *n) {
        PodMountView *b = reallocarray(*a, *n + 1, sizeof *b);
        if (!b)
                return NULL;
        *a = b;
        b[*n] = (PodMountView){};
        return &b[(*n)++];
}

/* One volumeMount as makeMounts makes it.  readonly: the mount's or the
 * volume's (mustMountRO: the volume's readOnly, or a kind always read-only);
 * selinux_relabel: Managed && SELinuxRelabel (kubelet's SELinuxLabeled
 * mark is set on a copy of the map's value: every mount of the volume asks). */
static int describe_mount(VolumeManager *m, PodEntry *e, PodView *v, const K8sContainer *c, size_t index,
                          PodContainerView *out) {
        const K8sVolumeMount *mnt = &c->mounts[index];
        const PodVolumeView *pv = view_find(v, mnt->name);
        const DesiredVolume *dv;
        const ActualVolume *av;
        PodMountView *o;
        unsigned attrs;
        bool managed, relabels, ready;
        int r;

        if (!pv)
                return 0;
        if (pv->runner) {
                o = mount_add(&out->runner_mounts, &out->n_runner_mounts);
                if (!o || set_str(&o->volume, pv->name) < 0 || set_str(&o->container_path, mnt->path) < 0)
                        return -ENOMEM;
                o->readonly = mnt->read_only;
                o->propagation = cri_propagation(mnt->mount_propagation);
                o->recursive_read_only = cri_recursive_read_only(mnt->recursive_read_only);
                return 0;
        }
        dv = desired_pod_find_volume(e->desired, mnt->name);
        if (!pv->host_path || pv->block || !dv || !dv->spec)
                return 0; /* not set up (failed, waiting): the pod is not all mounted */
        attrs = dv->spec->kind->mount_attributes;
        av = hashmap_get(m->volumes, dv->spec->unique_name);
        managed = !(attrs & VOLUME_ATTR_UNMANAGED) && ((attrs & VOLUME_ATTR_READ_ONLY) || !dv->spec->read_only);
        relabels = !(attrs & VOLUME_ATTR_RELABEL_IF_SELINUX) || (m->selinux_enabled && !(av && av->selinux_context));
        o = mount_add(&out->mounts, &out->n_mounts);
        if (!o || set_str(&o->container_path, mnt->path) < 0)
                return -ENOMEM;
        o->readonly = mnt->read_only || dv->spec->read_only || (attrs & VOLUME_ATTR_READ_ONLY);
        o->selinux_relabel = managed && relabels;
        o->propagation = cri_propagation(mnt->mount_propagation);
        o->recursive_read_only = cri_recursive_read_only(mnt->recursive_read_only);
        if (isempty(mnt->sub_path) && isempty(mnt->sub_path_expr))
                return set_str(&o->host_path, pv->host_path);
        r = subpath_bind(m, e->uid, mnt->name, c->name, index, &o->host_path, &ready);
        if (r < 0)
                return r;
        if (!ready && v->all_mounted) {
                v->all_mounted = false;
                if (!v->reason && asprintf(&v->reason, "subPath of volume \"%s\" for container \"%s\" (volumeMount %zu) "
                                           "is not prepared yet", mnt->name, c->name, index) < 0) {
                        v->reason = NULL;
                        return -ENOMEM;
                }
        }
        return 0;
}

static int describe_container(VolumeManager *m, PodEntry *e, PodView *v, const K8sContainer *c, const char *type) {
        PodContainerView *a = reallocarray(v->containers, v->n_containers + 1, sizeof *a), *out;
        int r;

        if (!a)
                return -ENOMEM;
        v->containers = a;
        out = &a[v->n_containers++];
        *out = (PodContainerView){ .type = type };
        if (set_str(&out->name, c->name) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_mounts; i++) {
                r = describe_mount(m, e, v, c, i, out);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < c->n_devices; i++) {
                const PodVolumeView *pv = view_find(v, c->devices[i].name);
                PodDeviceView *d;

                if (!pv || !pv->block || !pv->host_path)
                        continue;
                d = reallocarray(out->devices, out->n_devices + 1, sizeof *d);
                if (!d)
                        return -ENOMEM;
                out->devices = d;
                d = &d[out->n_devices++];
                *d = (PodDeviceView){ .permissions = pv->read_only ? "r" : "mrw" };
                if (set_str(&d->container_path, c->devices[i].path) < 0 || set_str(&d->host_path, pv->host_path) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* Every container kind, in kubelet's order of running them. */
static int describe_containers(VolumeManager *m, PodEntry *e, PodView *v) {
        const K8sPod *pod = k8s_informer_get(m->pods, e->namespace, e->name);
        int r;

        if (!pod || !streq_ptr(pod->meta.uid, e->uid) || !e->desired)
                return 0;
        const struct {
                const K8sContainer *c;
                size_t n;
                const char *type;
        } lists[] = {
                { pod->init_containers, pod->n_init_containers, "init" },
                { pod->containers, pod->n_containers, "app" },
                { pod->ephemeral_containers, pod->n_ephemeral_containers, "ephemeral" },
        };
        for (size_t l = 0; l < ELEMENTSOF(lists); l++)
                for (size_t i = 0; i < lists[l].n; i++) {
                        r = describe_container(m, e, v, &lists[l].c[i], lists[l].type);
                        if (r < 0)
                                return r;
                }
        return 0;
}

/* strconv.ParseInt(s, 10, 64): an optional sign, decimal digits, in range. */
static bool parse_gid(const char *s, int64_t *ret) {
        const char *digits = s + (*s == '+' || *s == '-');
        char *end;
        long long v;

        if (*digits < '0' || *digits > '9')
                return false;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno != 0 || *end != '\0')
                return false;
        *ret = v;
        return true;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* kubelet's GetExtraSupplementalGroupsForPod over the volumes described as
 * published (its actual state's mounted volumes of the pod). */
static int extra_supplemental_groups(VolumeManager *m, const PodEntry *e, PodView *v) {
        const K8sPod *pod = k8s_informer_get(m->pods, e->namespace, e->name);
        _cleanup_free_ const char **gids = NULL;
        size_t n = 0;

        if (!e->desired || e->desired->n_volumes == 0)
                return 0;
        gids = calloc(e->desired->n_volumes, sizeof(char *));
        if (!gids)
                return -ENOMEM;
        for (size_t i = 0; i < e->desired->n_volumes; i++) {
                const DesiredVolume *dv = &e->desired->volumes[i];
                const PodVolumeView *pv = view_find(v, dv->name);
                if (isempty(dv->gid) || !pv || pv->state != POD_VOLUME_PUBLISHED)
                        continue;
                gids[n++] = dv->gid;
        }
        if (n == 0)
                return 0;
        qsort(gids, n, sizeof(char *), cmp_str); /* sets.String.List() */
        v->supplemental_groups = calloc(n, sizeof(int64_t));
        if (!v->supplemental_groups)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                bool in_pod = false;
                int64_t gid;
                if ((i > 0 && streq(gids[i], gids[i - 1])) || !parse_gid(gids[i], &gid))
                        continue; /* invalid ones are ignored, as kubelet does */
                for (size_t k = 0; pod && k < pod->n_supplemental_groups; k++)
                        in_pod = in_pod || pod->supplemental_groups[k] == gid;
                if (!in_pod)
                        v->supplemental_groups[v->n_supplemental_groups++] = gid;
        }
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
                v->failed = v->failed || pv->final;
        }
        for (size_t i = 0; e && e->desired && i < e->desired->n_runner_volumes; i++) {
                PodVolumeView *pv = view_add(v);
                if (!pv)
                        return -ENOMEM;
                r = describe_runner(&e->desired->runner_volumes[i], pv);
                if (r < 0)
                        return r;
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

                if (!pub && !hashmap_get(av->pod_ops, uid))
                        continue;
                v->all_torn_down = false;
                /* The reconciler's test, as /volumes and the metrics count it. */
                if (!pub || !describe_publish_tearing_down(m, av, pub))
                        continue;
                if (!v->pod && pub->pod_key && !(v->pod = strdup(pub->pod_key)))
                        return -ENOMEM;
                PodVolumeView *pv = view_add(v);
                if (!pv || set_str(&pv->name, pub->spec_name) < 0 || set_str(&pv->driver, av->driver) < 0)
                        return -ENOMEM;
                pv->state = POD_VOLUME_TEARING_DOWN;
                /* Not the pod the runner is to start: a volume of it goes. */
                v->all_mounted = false;
                pv->block = av->block;
                pv->host_path =
                        av->block ? host_path(m, NULL, uid, pub->spec_name, true) : abs_path(m, pub->target);
                if (set_str(&pv->reason,
                            runtime_gate_reason(m->runtime, uid) ?: "the pod no longer wants it") < 0)
                        return -ENOMEM;
        }
        if (!e && v->n_volumes == 0 && v->all_torn_down)
                return -ENOENT;
        /* Found on disk only (after a restart, before the pod list is in):
         * nothing says yet which volumes the pod wants, so none of them is
         * "all mounted", whatever is published. */
        if (!e) {
                v->all_mounted = false;
                if (!v->reason && !(v->reason = strdup("the pod is not listed yet: its volumes are not read yet")))
                        return -ENOMEM;
        }
        if (e) {
                r = describe_containers(m, e, v);
                if (r < 0)
                        return r;
                r = extra_supplemental_groups(m, e, v);
                if (r < 0)
                        return r;
        }
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
