/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>

#include "k8s/json.h"
#include "systemd/validate.h"
#include "volume/host/paths.h"
#include "volume/state/desired.h"

/* Every container kind of a pod, init containers first: kubelet's
 * GetPodVolumeNames visits them all, and a debugging (ephemeral) container
 * that mounts a volume uses it and has a label for it like any other. */
typedef struct ContainerList {
        const K8sContainer *c;
        size_t n;
} ContainerList;
#define POD_CONTAINER_LISTS(pod)                                                                                 \
        {                                                                                                        \
                { (pod)->init_containers, (pod)->n_init_containers }, { (pod)->containers, (pod)->n_containers }, \
                { (pod)->ephemeral_containers, (pod)->n_ephemeral_containers },                                 \
        }

/* Whether the status shows a container of any kind running: an app, init
 * or ephemeral (kubectl debug) container may all hold the pod's volumes. */
static bool pod_container_running(const K8sPod *pod) {
        const struct {
                const K8sContainerStatus *s;
                size_t n;
        } lists[] = {
                { pod->container_statuses, pod->n_container_statuses },
                { pod->init_container_statuses, pod->n_init_container_statuses },
                { pod->ephemeral_container_statuses, pod->n_ephemeral_container_statuses },
        };

        for (size_t l = 0; l < ELEMENTSOF(lists); l++)
                for (size_t i = 0; i < lists[l].n; i++)
                        if (lists[l].s[i].running)
                                return true;
        return false;
}

bool pod_volumes_wanted(const K8sPod *pod) {
        /* A phase of Succeeded or Failed speaks of the containers the restart
         * policy governs, not of an ephemeral container still running; nor
         * does a deletion stop one.  kubelet keeps the volumes until its
         * runtime says no container is left (ShouldPodRuntimeBeRemoved); the
         * API's statuses are what kvolumed has of that. */
        if (pod_container_running(pod))
                return true;
        if (pod->phase && (streq(pod->phase, "Succeeded") || streq(pod->phase, "Failed")))
                return false;
        return !pod->meta.deletion_timestamp;
}

VolumeSpec *volume_spec_free(VolumeSpec *s) {
        if (!s)
                return NULL;
        if (s->source && s->kind && s->kind->source_free)
                s->kind->source_free(s->source);
        free(s->spec_name);
        free(s->driver);
        free(s->handle);
        free(s->unique_name);
        free(s->fs_type);
        k8s_strv_free(s->mount_flags);
        free(s->access_mode);
        k8s_strv_free(s->access_modes);
        k8s_string_map_done(&s->attributes);
        free(s->stage_secret.name);
        free(s->stage_secret.namespace);
        free(s->publish_secret.name);
        free(s->publish_secret.namespace);
        free(s->selinux_label);
        free(s->selinux_conflict);
        free(s->selinux_change_policy);
        free(s);
        return NULL;
}

VolumeSpec *volume_spec_copy(const VolumeSpec *from) {
        _cleanup_(volume_spec_freep) VolumeSpec *s = calloc(1, sizeof *s);

        if (!s)
                return NULL;
        s->kind = from->kind;
        if (from->source) {
                s->source = from->kind && from->kind->source_copy ? from->kind->source_copy(from->source) : NULL;
                if (!s->source)
                        return NULL;
        }
        s->lifecycle = from->lifecycle;
        s->block = from->block;
        s->follows_objects = from->follows_objects;
        s->read_only = from->read_only;
        s->rwop = from->rwop;
        s->migrated_from = from->migrated_from;
        if (strdup_or_null(from->selinux_label, &s->selinux_label) < 0 ||
            strdup_or_null(from->selinux_conflict, &s->selinux_conflict) < 0 ||
            strdup_or_null(from->selinux_change_policy, &s->selinux_change_policy) < 0)
                return NULL;
        if (strdup_or_null(from->spec_name, &s->spec_name) < 0 || strdup_or_null(from->driver, &s->driver) < 0 ||
            strdup_or_null(from->handle, &s->handle) < 0 || strdup_or_null(from->unique_name, &s->unique_name) < 0 ||
            strdup_or_null(from->fs_type, &s->fs_type) < 0 || desired_copy_strv(from->mount_flags, &s->mount_flags) < 0 ||
            strdup_or_null(from->access_mode, &s->access_mode) < 0 ||
            desired_copy_strv(from->access_modes, &s->access_modes) < 0 ||
            desired_copy_string_map(&from->attributes, &s->attributes) < 0 ||
            desired_copy_secret_ref(from->stage_secret.namespace, from->stage_secret.name, &s->stage_secret) < 0 ||
            desired_copy_secret_ref(from->publish_secret.namespace, from->publish_secret.name, &s->publish_secret) < 0)
                return NULL;
        return TAKE_PTR(s);
}

DesiredPod *desired_pod_free(DesiredPod *p) {
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n_volumes; i++) {
                free(p->volumes[i].name);
                volume_spec_free(p->volumes[i].spec);
                free(p->volumes[i].waiting);
                free(p->volumes[i].failed);
                free(p->volumes[i].kept);
                free(p->volumes[i].gid);
        }
        free(p->volumes);
        for (size_t i = 0; i < p->n_runner_volumes; i++) {
                free(p->runner_volumes[i].name);
                free(p->runner_volumes[i].type);
        }
        free(p->runner_volumes);
        free(p->uid);
        free(p->namespace);
        free(p->name);
        free(p->key);
        free(p->service_account);
        free(p->fs_group_change_policy);
        free(p);
        return NULL;
}

const DesiredVolume *desired_pod_find_volume(const DesiredPod *p, const char *name) {
        for (size_t i = 0; i < p->n_volumes; i++)
                if (streq(p->volumes[i].name, name))
                        return &p->volumes[i];
        return NULL;
}

int desired_copy_string_map(const K8sStringMap *from, K8sStringMap *to) {
        *to = (K8sStringMap){};
        if (from->n == 0)
                return 0;
        to->keys = calloc(from->n, sizeof(char *));
        to->values = calloc(from->n, sizeof(char *));
        if (!to->keys || !to->values)
                return -ENOMEM;
        for (size_t i = 0; i < from->n; i++) {
                to->keys[i] = strdup(from->keys[i]);
                to->values[i] = strdup(from->values[i]);
                to->n = i + 1;
                if (!to->keys[i] || !to->values[i])
                        return -ENOMEM;
        }
        return 0;
}

int desired_copy_strv(char *const *from, char ***to) {
        size_t n = k8s_strv_length(from);
        *to = NULL;
        if (!from)
                return 0;
        char **v = calloc(n + 1, sizeof(char *));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (!(v[i] = strdup(from[i]))) {
                        k8s_strv_free(v);
                        return -ENOMEM;
                }
        *to = v;
        return 0;
}

int desired_copy_secret_ref(const char *namespace, const char *name, K8sSecretRef *to) {
        *to = (K8sSecretRef){};
        if (isempty(name))
                return 0;
        if (strdup_or_null(name, &to->name) < 0 || strdup_or_null(namespace, &to->namespace) < 0)
                return -ENOMEM;
        return 0;
}

/* What a part of an SELinux context may hold: "s0:c1,c2", "s0-s0:c0.c1023"
 * and names; nothing that could end the quoted mount option. */
static bool selinux_part_valid(const char *s) {
        if (isempty(s) || strlen(s) > 255)
                return false;
        for (; *s; s++)
                if (!(isalnum((unsigned char) *s) || strchr("_.:,-", *s)))
                        return false;
        return true;
}

static int selinux_file_label(const char *user_in, const char *level, char **ret) {
        const char *user = isempty(user_in) ? "system_u" : user_in;

        *ret = NULL;
        if (isempty(level))
                return 0;
        if (!selinux_part_valid(user) || !selinux_part_valid(level))
                return 0;
        return asprintf(ret, "%s:object_r:container_file_t:%s", user, level) < 0 ? -ENOMEM : 0;
}

int desired_selinux_label(const K8sPod *pod, char **ret) {
        return selinux_file_label(pod->selinux_user, pod->selinux_level, ret);
}

static bool container_mounts(const K8sContainer *c, const char *name) {
        for (size_t m = 0; m < c->n_mounts; m++)
                if (streq_ptr(c->mounts[m].name, name))
                        return true;
        return false;
}

int desired_volume_selinux_label(const K8sPod *pod, const char *name, char **ret, char **ret_conflict) {
        _cleanup_free_ char *first = NULL, *other = NULL;
        bool pod_has = pod->selinux_user || pod->selinux_role || pod->selinux_type || pod->selinux_level;
        bool any = false;
        const ContainerList lists[] = POD_CONTAINER_LISTS(pod);
        int r;

        for (size_t l = 0; l < ELEMENTSOF(lists); l++)
                for (size_t i = 0; i < lists[l].n; i++) {
                        const K8sContainer *c = &lists[l].c[i];
                        _cleanup_free_ char *label = NULL;

                        if (!container_mounts(c, name) || !(c->has_selinux || pod_has))
                                continue;
                        /* The container's options replace the pod's whole. */
                        r = c->has_selinux ? selinux_file_label(c->selinux_user, c->selinux_level, &label)
                                           : selinux_file_label(pod->selinux_user, pod->selinux_level, &label);
                        if (r < 0)
                                return r;
                        if (!any) {
                                any = true;
                                first = TAKE_PTR(label);
                        } else if (!other && !streq(strempty(first), strempty(label))) {
                                /* "": a container whose label kvolumed cannot know */
                                other = label ? TAKE_PTR(label) : strdup("");
                                if (!other)
                                        return -ENOMEM;
                        }
                }
        *ret = TAKE_PTR(first);
        *ret_conflict = TAKE_PTR(other);
        return 0;
}

const char *volume_spec_selinux_context(const VolumeSpec *s, bool host_selinux, bool driver_selinux_mount,
                                        bool mount_all) {
        if (!s || !host_selinux || !driver_selinux_mount || !s->selinux_label)
                return NULL;
        /* kubelet: only volumes with a PV (no inline ones), and no mount for a device. */
        if (s->lifecycle != VOLUME_PERSISTENT || s->block)
                return NULL;
        /* VolumeSupportsSELinuxMount: with several modes kubelet cannot tell
         * which one the pods use, and mounts with no context. */
        if (k8s_strv_length(s->access_modes) != 1)
                return NULL;
        if (streq_ptr(s->selinux_change_policy, "Recursive"))
                return NULL;
        if (s->rwop || (mount_all && streq_ptr(s->selinux_change_policy, "MountOption")))
                return s->selinux_label;
        return NULL;
}

bool volume_spec_fs_group_applies(const VolumeSpec *s, const char *fs_group_policy, bool has_fs_group) {
        const char *policy = fs_group_policy ?: "ReadWriteOnceWithFSType";

        if (!has_fs_group || s->read_only || streq(policy, "None"))
                return false;
        if (streq(policy, "File"))
                return true;
        if (isempty(s->fs_type))
                return false;
        /* Inline volumes are always published ReadWriteOnce. */
        if (s->lifecycle == VOLUME_EPHEMERAL)
                return true;
        /* hasReadWriteOnce: anywhere in the list, and a PV without modes gets
         * none (the CSI access mode still defaults to RWO: another rule). */
        return k8s_strv_contains(s->access_modes, "ReadWriteOnce");
}

int desired_set_text(char **field, const char *format, ...) {
        va_list ap;
        int r;

        va_start(ap, format);
        r = vasprintf(field, format, ap);
        va_end(ap);
        return r < 0 ? -ENOMEM : 0;
}

/* How containers use the volume: 0 not at all, 1 mounted, 2 as a device, 3 both. */
static unsigned volume_usage(const K8sPod *pod, const char *name) {
        unsigned usage = 0;
        const ContainerList lists[] = POD_CONTAINER_LISTS(pod);

        for (size_t l = 0; l < ELEMENTSOF(lists); l++)
                for (size_t i = 0; i < lists[l].n; i++) {
                        const K8sContainer *c = &lists[l].c[i];
                        for (size_t m = 0; m < c->n_mounts; m++)
                                if (streq_ptr(c->mounts[m].name, name))
                                        usage |= 1;
                        for (size_t d = 0; d < c->n_devices; d++)
                                if (streq_ptr(c->devices[d].name, name))
                                        usage |= 2;
                }
        return usage;
}

/* The API server refuses the lookup: the volume waits (a new pod's objects
 * are refused until the Node authorizer's graph has the pod) with what the
 * server said, which the manager reports in an Event. */
static int set_refused(const ClusterView *view, const K8sKind *kind, const char *namespace, const char *name,
                       DesiredVolume *dv) {
        const char *message = view->lookup_error ? view->lookup_error(view->userdata, kind, namespace, name) : NULL;

        if (!isempty(message))
                return desired_set_text(&dv->waiting, "%s", message);
        return desired_set_text(&dv->waiting, "%s \"%s\" is forbidden", kind->plural, name);
}

/* kubelet's getPVCExtractPV: only a claim the PV controller has bound
 * names its volume.  A Pending claim's spec.volumeName is what its user
 * asked for, and any user may name any PV there, another tenant's too.
 * Binding may be in progress: a wait, with kubelet's words.  1 when the
 * volume waits, 0 when the claim is bound. */
static int claim_bound(const K8sPod *pod, const char *claim, const K8sPersistentVolumeClaim *pvc,
                       DesiredVolume *dv) {
        int r;

        if (!streq_ptr(pvc->phase, "Bound"))
                r = desired_set_text(&dv->waiting, "error processing PVC %s/%s: PVC is not bound",
                             pod->meta.namespace, claim);
        else if (isempty(pvc->volume_name))
                r = desired_set_text(&dv->waiting, "error processing PVC %s/%s: PVC has empty pvc.Spec.VolumeName",
                             pod->meta.namespace, claim);
        else
                return 0;
        return r < 0 ? r : 1;
}

/* kubelet's getPVSpec: the PV is the claim's only if its claimRef carries
 * the claim's uid.  A claimRef without one is a reservation the binding has
 * not finished (or another namespace's claim); a uid of another is a claim
 * of the same name deleted since.  1 when the volume waits. */
static int pv_bound_to_claim(const K8sPod *pod, const char *claim, const K8sPersistentVolumeClaim *pvc,
                             const K8sPersistentVolume *pv, DesiredVolume *dv) {
        int r;

        if (!pv->has_claim_ref)
                r = desired_set_text(&dv->waiting,
                             "error processing PVC %s/%s: found PV object %s but it has a nil "
                             "pv.Spec.ClaimRef indicating it is not yet bound to the claim",
                             pod->meta.namespace, claim, pv->meta.name);
        else if (isempty(pvc->meta.uid) || !streq_ptr(pv->claim_uid, pvc->meta.uid))
                r = desired_set_text(&dv->waiting,
                             "error processing PVC %s/%s: found PV object %s but its "
                             "pv.Spec.ClaimRef.UID %s does not point to claim.UID %s",
                             pod->meta.namespace, claim, pv->meta.name, strempty(pv->claim_uid),
                             strempty(pvc->meta.uid));
        else
                return 0;
        return r < 0 ? r : 1;
}

static bool runner_kind(const ClusterView *view, const char *type) {
        return view->runner_kinds && k8s_strv_contains(view->runner_kinds, type);
}

/* The field name of a source no kind claimed: what the API calls it, which
 * is also what [volumes] runner-kinds names.  A known source whose kind is
 * not built in (a test's list of kinds) is named too. */
static const char *pod_volume_type(const K8sPodVolume *v) {
        return v->other_source  ? v->other_source
               : v->in_tree     ? k8s_in_tree_source_key(v->in_tree->kind)
               : v->config_map  ? "configMap"
               : v->secret      ? "secret"
               : v->downward_api ? "downwardAPI"
               : v->projected   ? "projected"
               : v->empty_dir   ? "emptyDir"
               : v->host_path   ? "hostPath"
               : v->csi         ? "csi"
                                : "unknown";
}

static const char *pv_type(const K8sPersistentVolume *pv) {
        return pv->other_source ? pv->other_source
               : pv->in_tree    ? k8s_in_tree_source_key(pv->in_tree->kind)
               : pv->host_path  ? "hostPath"
               : pv->local_path ? "local"
               : pv->csi        ? "csi"
                                : "unknown";
}

/* kubelet fails such a volume with "cannot find volume plugin"; here at
 * once and for good, with what to do: a runner that starts the container
 * without it would let it write into its own root file system. */
static int set_unsupported(DesiredVolume *dv, const char *type, const char *pv_name) {
        _cleanup_free_ char *of = NULL;

        if (pv_name && asprintf(&of, " (persistentvolume \"%s\")", pv_name) < 0)
                return -ENOMEM;
        return desired_set_text(&dv->failed,
                                "unsupported volume type %s%s: kvolumed does not set up %s volumes; use a CSI "
                                "driver, or set it up in the pod runner and name %s in [volumes] runner-kinds",
                                type, strempty(of), type, type);
}

/* 1 with *ret_runner_type when the claim's PV is of a type left to the runner. */
static int build_persistent(const K8sPod *pod, const K8sPodVolume *v, bool block, const ClusterView *view,
                            DesiredVolume *dv, const char **ret_runner_type) {
        _cleanup_free_ char *ephemeral_claim = NULL;
        const K8sPersistentVolumeClaim *pvc;
        const K8sPersistentVolume *pv;
        const VolumeKind *kind;
        const char *claim = v->claim_name;
        bool pv_block;
        int r;

        if (v->ephemeral) {
                /* Generic ephemeral volumes become a PVC named <pod>-<volume>. */
                if (asprintf(&ephemeral_claim, "%s-%s", pod->meta.name, v->name) < 0)
                        return -ENOMEM;
                claim = ephemeral_claim;
        }
        r = view->get_pvc(view->userdata, pod->meta.namespace, claim, &pvc);
        if (r == -EAGAIN) {
                dv->looking_up = true;
                return desired_set_text(&dv->waiting, "looking up persistentvolumeclaim \"%s\"", claim);
        }
        if (r == -EACCES)
                return set_refused(view, &k8s_kind_pvc, pod->meta.namespace, claim, dv);
        if (!pvc)
                return desired_set_text(&dv->waiting, "persistentvolumeclaim \"%s\" not found", claim);
        /* kubelet's ephemeral.VolumeIsForPod: a claim named like the pod's
         * generic ephemeral volume that the pod does not control may be
         * anyone's (a user can create it before the pod): never mount it. */
        if (v->ephemeral && (!streq_ptr(pvc->meta.controller_kind, "Pod") ||
                             !streq_ptr(pvc->meta.controller_uid, pod->meta.uid)))
                return desired_set_text(&dv->failed, "persistentvolumeclaim %s/%s was not created for pod %s/%s (pod is "
                                "not owner)", strempty(pod->meta.namespace), claim, strempty(pod->meta.namespace),
                                pod->meta.name);
        r = claim_bound(pod, claim, pvc, dv);
        if (r != 0)
                return r < 0 ? r : 0;
        r = view->get_pv(view->userdata, pvc->volume_name, &pv);
        if (r == -EAGAIN) {
                dv->looking_up = true;
                return desired_set_text(&dv->waiting, "looking up persistentvolume \"%s\"", pvc->volume_name);
        }
        if (r == -EACCES)
                return set_refused(view, &k8s_kind_pv, NULL, pvc->volume_name, dv);
        if (!pv)
                return desired_set_text(&dv->waiting, "persistentvolume \"%s\" of claim \"%s\" not found", pvc->volume_name,
                                claim);
        r = pv_bound_to_claim(pod, claim, pvc, pv, dv);
        if (r != 0)
                return r < 0 ? r : 0;
        /* Its group goes to the pod's supplemental groups once mounted
         * (kubelet's GetExtraSupplementalGroupsForPod, volume/podview.c). */
        if (pv->gid_annotation && !(dv->gid = strdup(pv->gid_annotation)))
                return -ENOMEM;
        /* A PV no kind claims (volume/kinds/kinds.c): in-tree nfs, EBS, ... */
        kind = volume_kind_of_pv(pv);
        if (!kind || !kind->desire_pv) {
                if (runner_kind(view, pv_type(pv))) {
                        *ret_runner_type = pv_type(pv);
                        return 1;
                }
                return set_unsupported(dv, pv_type(pv), pv->meta.name);
        }
        pv_block = streq_ptr(pv->volume_mode, "Block");
        if (pv_block != block)
                return desired_set_text(&dv->failed, "volume \"%s\" has volumeMode %s but is used in %s", v->name,
                                pv_block ? "Block" : "Filesystem", block ? "volumeDevices" : "volumeMounts");
        return kind->desire_pv(pod, v, pv, view, block, dv);
}

/* What the API server would have refused (a pod from a newer or a
 * non-validating server): the volume fails with the rule, never half set
 * up.  A source kvolumed does not set up is left to the caller. */
static int volume_checked(const K8sPod *pod, const K8sPodVolume *v, DesiredVolume *dv) {
        const ContainerList lists[] = POD_CONTAINER_LISTS(pod);
        const char *problem = NULL;
        int r;

        r = k8s_pod_volume_validate(v, &problem);
        if (r == -EOPNOTSUPP && v->other_source)
                return 0;
        if (r == -EOPNOTSUPP && v->projected) {
                const char *other = "unknown";
                for (size_t i = 0; i < v->projected->n_sources; i++)
                        if (v->projected->sources[i].other)
                                other = v->projected->sources[i].other;
                return desired_set_text(&dv->failed,
                                        "unsupported volume type projected %s: kvolumed does not set up projected %s "
                                        "sources",
                                        other, other);
        }
        if (r < 0)
                return desired_set_text(&dv->failed, "volume \"%s\" is invalid: %s", v->name, strempty(problem));
        for (size_t l = 0; l < ELEMENTSOF(lists); l++)
                for (size_t i = 0; i < lists[l].n; i++) {
                        const K8sContainer *c = &lists[l].c[i];
                        for (size_t m = 0; m < c->n_mounts; m++) {
                                if (!streq_ptr(c->mounts[m].name, v->name))
                                        continue;
                                r = k8s_volume_mount_validate(&c->mounts[m], c, &problem);
                                if (r < 0)
                                        return desired_set_text(&dv->failed,
                                                                "volumeMount %s of volume \"%s\" in container \"%s\" "
                                                                "is invalid: %s",
                                                                strempty(c->mounts[m].path), v->name, strempty(c->name),
                                                                strempty(problem));
                        }
                }
        return 0;
}

static int add_runner_volume(DesiredPod *p, const char *name, const char *type) {
        RunnerVolume *a = reallocarray(p->runner_volumes, p->n_runner_volumes + 1, sizeof *a);

        if (!a)
                return -ENOMEM;
        p->runner_volumes = a;
        a[p->n_runner_volumes] = (RunnerVolume){ .name = strdup(name), .type = strdup(type) };
        if (!a[p->n_runner_volumes].name || !a[p->n_runner_volumes].type) {
                free(a[p->n_runner_volumes].name);
                free(a[p->n_runner_volumes].type);
                return -ENOMEM;
        }
        p->n_runner_volumes++;
        return 0;
}

int desired_parse_runner_kinds(const char *list, char ***ret) {
        _cleanup_free_ char *copy = NULL;
        char **v = NULL;
        size_t n = 0;

        *ret = NULL;
        if (isempty(list))
                return 0;
        copy = strdup(list);
        if (!copy)
                return -ENOMEM;
        for (char *save = NULL, *t = strtok_r(copy, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
                char **a = reallocarray(v, n + 2, sizeof *a);
                if (!a) {
                        k8s_strv_free(v);
                        return -ENOMEM;
                }
                v = a;
                v[n] = strdup(t);
                v[n + 1] = NULL;
                if (!v[n]) {
                        k8s_strv_free(v);
                        return -ENOMEM;
                }
                n++;
        }
        *ret = v;
        return 0;
}

int desired_pod_build(const K8sPod *pod, const ClusterView *view, DesiredPod **ret, const char **ret_field) {
        _cleanup_(desired_pod_freep) DesiredPod *p = NULL;
        int r;

        r = k8s_pod_validate_names(pod, ret_field);
        if (r < 0)
                return r;
        p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        if (!(p->uid = strdup(pod->meta.uid)) || !(p->namespace = strdup(pod->meta.namespace)) ||
            !(p->name = strdup(pod->meta.name)) ||
            asprintf(&p->key, "%s/%s", pod->meta.namespace, pod->meta.name) < 0)
                return -ENOMEM;
        if (strdup_or_null(pod->service_account_name, &p->service_account) < 0 ||
            strdup_or_null(pod->fs_group_change_policy, &p->fs_group_change_policy) < 0)
                return -ENOMEM;
        p->has_fs_group = pod->has_fs_group;
        p->fs_group = pod->fs_group;

        p->volumes = calloc(pod->n_volumes ? pod->n_volumes : 1, sizeof(DesiredVolume));
        if (!p->volumes)
                return -ENOMEM;
        for (size_t i = 0; i < pod->n_volumes; i++) {
                const K8sPodVolume *v = &pod->volumes[i];
                const VolumeKind *kind = volume_kind_of_pod_volume(v);
                DesiredVolume *dv = &p->volumes[p->n_volumes];
                const char *runner_type = NULL;
                unsigned usage;

                usage = volume_usage(pod, v->name);
                if (usage == 0)
                        continue; /* kubelet sets up only volumes that containers use */
                *dv = (DesiredVolume){ .name = strdup(v->name) };
                if (!dv->name)
                        return -ENOMEM;
                p->n_volumes++;
                r = volume_checked(pod, v, dv);
                if (r < 0)
                        return r;
                if (dv->failed)
                        continue;
                if (!kind && !v->claim_name && !v->ephemeral) {
                        /* A source no kind claims (nfs, gitRepo, image, ...). */
                        if (runner_kind(view, pod_volume_type(v)))
                                runner_type = pod_volume_type(v);
                        else
                                r = set_unsupported(dv, pod_volume_type(v), NULL);
                } else if (usage == 3) {
                        r = desired_set_text(&dv->failed, "volume \"%s\" is used both in volumeMounts and volumeDevices",
                                     v->name);
                } else if (kind)
                        r = kind->desire(pod, v, view, usage == 2, dv);
                else {
                        r = build_persistent(pod, v, usage == 2, view, dv, &runner_type);
                        if (r > 0)
                                r = 0;
                }
                if (r < 0)
                        return r;
                if (runner_type) {
                        r = add_runner_volume(p, v->name, runner_type);
                        if (r < 0)
                                return r;
                        free(dv->name);
                        volume_spec_free(dv->spec);
                        free(dv->waiting);
                        free(dv->failed);
                        free(dv->gid);
                        p->n_volumes--;
                }
        }
        *ret = TAKE_PTR(p);
        return 0;
}
